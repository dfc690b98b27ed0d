//! cel-go's AST validators that Kubernetes enables (1.29+): after type checking, a string
//! literal passed to `duration`, `timestamp` or `matches` must be valid, or the expression
//! fails to compile with `invalid <function> argument` at the literal.

use super::{regex, time};
use crate::ast::{Expr, ExprKind, Literal, MacroKind};
use crate::error::Issue;
use crate::parse::Positions;

/// The issues for invalid literal arguments in `expr`.
pub(crate) fn validate(expr: &Expr, positions: &Positions) -> Vec<Issue> {
    let mut issues = Vec::new();
    visit(expr, &mut |e| check(e, positions, &mut issues));
    issues
}

/// Whether `arg` is a valid literal argument of `function`; `None` if not checked.
fn valid(function: &str, arg: &str) -> Option<bool> {
    Some(match function {
        "duration" => time::parse_duration(arg).is_ok(),
        "timestamp" => time::parse_timestamp(arg).is_ok(),
        "matches" => regex::compile(arg).is_ok(),
        _ => return None,
    })
}

fn check(e: &Expr, positions: &Positions, issues: &mut Vec<Issue>) {
    let ExprKind::Call { function, args, .. } = &e.kind else {
        return;
    };
    // As cel-go: the first argument after any receiver.
    let Some(first) = args.first() else {
        return;
    };
    if let ExprKind::Literal(Literal::String(s)) = &first.kind
        && valid(function, s) == Some(false)
    {
        issues.push(positions.issue(first.id, format!("invalid {function} argument")));
    }
}

/// Calls `f` on `e` and every expression below it.
fn visit(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    match &e.kind {
        ExprKind::Literal(_) | ExprKind::Ident(_) => {}
        ExprKind::Select { operand, .. } => visit(operand, f),
        ExprKind::Call { target, args, .. } => {
            if let Some(t) = target {
                visit(t, f);
            }
            args.iter().for_each(|a| visit(a, f));
        }
        ExprKind::List { elements, .. } => elements.iter().for_each(|x| visit(x, f)),
        ExprKind::Map { entries } => entries.iter().for_each(|en| {
            visit(&en.key, f);
            visit(&en.value, f);
        }),
        ExprKind::Struct { fields, .. } => fields.iter().for_each(|x| visit(&x.value, f)),
        ExprKind::Comprehension(c) => {
            visit(&c.range, f);
            match &c.kind {
                MacroKind::All(x)
                | MacroKind::Exists(x)
                | MacroKind::ExistsOne(x)
                | MacroKind::Filter(x)
                | MacroKind::OptMap(x)
                | MacroKind::OptFlatMap(x)
                | MacroKind::SortBy(x) => visit(x, f),
                MacroKind::MapList { filter, transform }
                | MacroKind::TransformMap { filter, transform }
                | MacroKind::TransformMapEntry { filter, transform } => {
                    if let Some(x) = filter {
                        visit(x, f);
                    }
                    visit(transform, f);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::eval;

    #[test]
    fn invalid_literals_fail_to_compile() {
        let cases: &[(&str, &str)] = &[
            (
                "duration('1x') == duration('1s')",
                "compile: ERROR: <input>:1:10: invalid duration argument\n | duration('1x') == duration('1s')\n | .........^",
            ),
            (
                "timestamp('yesterday') < timestamp('2024-01-01T00:00:00Z')",
                "compile: ERROR: <input>:1:11: invalid timestamp argument\n | timestamp('yesterday') < timestamp('2024-01-01T00:00:00Z')\n | ..........^",
            ),
            (
                "'abc'.matches('(')",
                "compile: ERROR: <input>:1:15: invalid matches argument\n | 'abc'.matches('(')\n | ..............^",
            ),
            (
                "[1].all(x, 'a'.matches('[a-'))",
                "compile: ERROR: <input>:1:24: invalid matches argument\n | [1].all(x, 'a'.matches('[a-'))\n | .......................^",
            ),
            ("duration('1m') == duration('60s')", "true"),
            ("'abc'.matches('^a')", "true"),
            ("duration(x)", "error: no such attribute(s): x"),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }
}
