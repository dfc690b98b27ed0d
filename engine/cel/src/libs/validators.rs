//! cel-go's AST validators that Kubernetes enables, run after type checking when the checker
//! found no error, in Kubernetes' order:
//! - homogeneous aggregate literals: the elements of a list literal, and the keys and the
//!   values of a map literal, must all have the same type (`expected type 'int' but found
//!   'string'`), except inside `format` calls;
//! - literal arguments of `duration`, `timestamp` and `matches` must be valid
//!   (`invalid <function> argument` at the literal);
//! - `'<literal>'.format([<list literal>])` must be a valid format for its arguments' types.

use super::{regex, string_format, time};
use crate::ast::{Expr, ExprKind, Literal, MacroKind};
use crate::check::Checked;
use crate::error::Issue;
use crate::parse::Positions;
use crate::types::Type;

/// The issues the validators find in `expr`, checked as `checked`.
pub(crate) fn validate(expr: &Expr, checked: &Checked, positions: &Positions) -> Vec<Issue> {
    let mut issues = Vec::new();
    homogeneous(expr, false, checked, positions, &mut issues);
    visit(expr, &mut |e| literal_argument(e, positions, &mut issues));
    visit(expr, &mut |e| {
        format_call(e, checked, positions, &mut issues)
    });
    issues
}

/// The checked type of node `id`.
fn type_of(checked: &Checked, id: u64) -> Type {
    checked.types.get(&id).cloned().unwrap_or(Type::Dyn)
}

/// The element type of a list element or map value: `?x` contributes `x`'s optional's value type.
fn entry_type(checked: &Checked, e: &Expr, optional: bool) -> Type {
    match type_of(checked, e.id) {
        Type::Optional(inner) if optional => *inner,
        t => t,
    }
}

fn mismatch(positions: &Positions, id: u64, expected: &Type, actual: &Type) -> Issue {
    positions.issue(
        id,
        format!(
            "expected type '{}' but found '{}'",
            crate::check::checker_name(expected),
            crate::check::checker_name(actual)
        ),
    )
}

/// Mixed-type literals: a list reports its first element that differs from the first element;
/// a map reports every key and every value that differs from the first entry's. Literals at
/// any depth inside a call of a function named `format` are exempt.
fn homogeneous(
    e: &Expr,
    in_format: bool,
    checked: &Checked,
    positions: &Positions,
    issues: &mut Vec<Issue>,
) {
    let in_format =
        in_format || matches!(&e.kind, ExprKind::Call { function, .. } if function == "format");
    if !in_format {
        match &e.kind {
            ExprKind::List { elements, optional } => {
                let mut types = elements
                    .iter()
                    .enumerate()
                    .map(|(i, x)| (x, entry_type(checked, x, optional.get(i) == Some(&true))));
                if let Some((_, first)) = types.next()
                    && let Some((x, t)) = types.find(|(_, t)| *t != first)
                {
                    issues.push(mismatch(positions, x.id, &first, &t));
                }
            }
            ExprKind::Map { entries } => {
                let mut first: Option<(Type, Type)> = None;
                for en in entries {
                    let k = type_of(checked, en.key.id);
                    let v = entry_type(checked, &en.value, en.optional);
                    let Some((fk, fv)) = &first else {
                        first = Some((k, v));
                        continue;
                    };
                    if k != *fk {
                        issues.push(mismatch(positions, en.key.id, fk, &k));
                    }
                    if v != *fv {
                        issues.push(mismatch(positions, en.value.id, fv, &v));
                    }
                }
            }
            _ => {}
        }
    }
    children(e, &mut |c| {
        homogeneous(c, in_format, checked, positions, issues)
    });
}

/// Whether `arg` is a valid literal argument of `function`; `None` if not checked.
fn valid(function: &str, arg: &Literal) -> Option<bool> {
    Some(match (function, arg) {
        ("duration", Literal::String(s)) => time::parse_duration(s).is_ok(),
        // cel-go declares `duration(int)`, but no int converts.
        ("duration", Literal::Int(_)) => false,
        ("timestamp", Literal::String(s)) => time::parse_timestamp(s).is_ok(),
        ("timestamp", Literal::Int(i)) => time::timestamp_from_unix(*i).is_ok(),
        ("matches", Literal::String(s)) => regex::compile(s).is_ok(),
        _ => return None,
    })
}

/// `duration`, `timestamp` and `matches` calls with an invalid literal first argument (after
/// any receiver, as cel-go: `matches(s, re)` validates `s`).
fn literal_argument(e: &Expr, positions: &Positions, issues: &mut Vec<Issue>) {
    let ExprKind::Call { function, args, .. } = &e.kind else {
        return;
    };
    let Some(first) = args.first() else {
        return;
    };
    if let ExprKind::Literal(lit) = &first.kind
        && valid(function, lit) == Some(false)
    {
        issues.push(positions.issue(first.id, format!("invalid {function} argument")));
    }
}

/// `'<literal>'.format([<list literal>])` calls whose format does not fit their arguments.
fn format_call(e: &Expr, checked: &Checked, positions: &Positions, issues: &mut Vec<Issue>) {
    let ExprKind::Call {
        target: Some(target),
        function,
        args,
    } = &e.kind
    else {
        return;
    };
    let (ExprKind::Literal(Literal::String(fmt)), [list]) = (&target.kind, args.as_slice()) else {
        return;
    };
    let ExprKind::List { elements, .. } = &list.kind else {
        return;
    };
    if function != "format" {
        return;
    }
    if let Some((id, message)) = string_format::validate_call(e.id, fmt, elements, &checked.types) {
        issues.push(positions.issue(id, message));
    }
}

/// Calls `f` on every direct child of `e`.
fn children(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    match &e.kind {
        ExprKind::Literal(_) | ExprKind::Ident(_) => {}
        ExprKind::Select { operand, .. } => f(operand),
        ExprKind::Call { target, args, .. } => {
            if let Some(t) = target {
                f(t);
            }
            args.iter().for_each(&mut *f);
        }
        ExprKind::List { elements, .. } => elements.iter().for_each(&mut *f),
        ExprKind::Map { entries } => entries.iter().for_each(|en| {
            f(&en.key);
            f(&en.value);
        }),
        ExprKind::Struct { fields, .. } => fields.iter().for_each(|x| f(&x.value)),
        ExprKind::Comprehension(c) => {
            f(&c.range);
            match &c.kind {
                MacroKind::All(x)
                | MacroKind::Exists(x)
                | MacroKind::ExistsOne(x)
                | MacroKind::Filter(x)
                | MacroKind::OptMap(x)
                | MacroKind::OptFlatMap(x)
                | MacroKind::SortBy(x) => f(x),
                MacroKind::MapList { filter, transform }
                | MacroKind::TransformMap { filter, transform }
                | MacroKind::TransformMapEntry { filter, transform } => {
                    if let Some(x) = filter {
                        f(x);
                    }
                    f(transform);
                }
            }
        }
    }
}

/// Calls `f` on `e` and every expression below it.
fn visit(e: &Expr, f: &mut dyn FnMut(&Expr)) {
    f(e);
    children(e, &mut |c| visit(c, f));
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
            (
                "timestamp(253402300800)",
                "compile: ERROR: <input>:1:11: invalid timestamp argument\n | timestamp(253402300800)\n | ..........^",
            ),
            (
                "matches('[', 'a')",
                "compile: ERROR: <input>:1:9: invalid matches argument\n | matches('[', 'a')\n | ........^",
            ),
            ("duration('1m') == duration('60s')", "true"),
            ("'abc'.matches('^a')", "true"),
            ("duration(x)", "error: no such attribute(s): x"),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }

    #[test]
    fn mixed_literals_are_reported_as_cel_go_does() {
        let cases: &[(&str, &str)] = &[
            // A list reports its first odd element only.
            (
                "[1, 'a', 2.0]",
                "compile: ERROR: <input>:1:5: expected type 'int' but found 'string'\n | [1, 'a', 2.0]\n | ....^",
            ),
            // A map reports every odd key and value.
            (
                "{1: 'a', 'b': 2, 3: 'c'}",
                "compile: ERROR: <input>:1:10: expected type 'int' but found 'string'\n | {1: 'a', 'b': 2, 3: 'c'}\n | .........^\nERROR: <input>:1:15: expected type 'string' but found 'int'\n | {1: 'a', 'b': 2, 3: 'c'}\n | ..............^",
            ),
            // Mixed literals compile as `dyn` elements inside `format` calls.
            ("'%s'.format([[1, [1, 'a']]])", "\"[1, [1, \\\"a\\\"]]\""),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }
}
