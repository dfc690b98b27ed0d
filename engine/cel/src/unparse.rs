//! Writes a syntax tree back as CEL source that parses to the same tree: every operator
//! application parenthesised, macros in their call form, field names that are not identifiers
//! in backticks. Used to hand a rewritten tree ([`crate::relocate`]) to everything that takes
//! expression text.

use std::fmt::Write;

use crate::ast::{Comprehension, Expr, ExprKind, Literal, MacroKind};

/// The source of `e`.
pub(crate) fn unparse(e: &Expr) -> String {
    let mut out = String::new();
    write_expr(&mut out, e);
    out
}

/// Binary operators by function name.
fn binary(function: &str) -> Option<&'static str> {
    Some(match function {
        "_&&_" => "&&",
        "_||_" => "||",
        "_+_" => "+",
        "_-_" => "-",
        "_*_" => "*",
        "_/_" => "/",
        "_%_" => "%",
        "_==_" => "==",
        "_!=_" => "!=",
        "_<_" => "<",
        "_<=_" => "<=",
        "_>_" => ">",
        "_>=_" => ">=",
        "@in" => "in",
        _ => return None,
    })
}

fn write_expr(out: &mut String, e: &Expr) {
    match &e.kind {
        ExprKind::Literal(l) => write_literal(out, l),
        ExprKind::Ident(n) => out.push_str(n),
        ExprKind::Select {
            operand,
            field,
            test,
            optional,
        } => {
            if *test {
                out.push_str("has(");
            }
            write_operand(out, operand);
            out.push_str(if *optional { ".?" } else { "." });
            write_field(out, field);
            if *test {
                out.push(')');
            }
        }
        ExprKind::Call {
            target,
            function,
            args,
        } => write_call(out, target.as_deref(), function, args),
        ExprKind::List { elements, optional } => {
            out.push('[');
            for (i, el) in elements.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                if optional.get(i).copied().unwrap_or(false) {
                    out.push('?');
                }
                write_expr(out, el);
            }
            out.push(']');
        }
        ExprKind::Map { entries } => {
            out.push('{');
            for (i, entry) in entries.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                if entry.optional {
                    out.push('?');
                }
                write_expr(out, &entry.key);
                out.push_str(": ");
                write_expr(out, &entry.value);
            }
            out.push('}');
        }
        ExprKind::Struct { type_name, fields } => {
            out.push_str(type_name);
            out.push('{');
            for (i, f) in fields.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                if f.optional {
                    out.push('?');
                }
                write_field(out, &f.name);
                out.push_str(": ");
                write_expr(out, &f.value);
            }
            out.push('}');
        }
        ExprKind::Comprehension(c) => write_comprehension(out, c),
    }
}

/// `e` as the operand of a selection, an index or a call: every form is written closed
/// (operators in parentheses), but a negative number needs them, or its sign would apply to
/// the whole selection.
fn write_operand(out: &mut String, e: &Expr) {
    let negative = match &e.kind {
        ExprKind::Literal(Literal::Int(i)) => *i < 0,
        ExprKind::Literal(Literal::Double(d)) => d.is_sign_negative(),
        _ => false,
    };
    if negative {
        out.push('(');
        write_expr(out, e);
        out.push(')');
    } else {
        write_expr(out, e);
    }
}

fn write_call(out: &mut String, target: Option<&Expr>, function: &str, args: &[Expr]) {
    if target.is_none() {
        match (function, args) {
            (op, [l, r]) if binary(op).is_some() => {
                out.push('(');
                write_expr(out, l);
                let _ = write!(out, " {} ", binary(op).unwrap_or_default());
                write_expr(out, r);
                out.push(')');
                return;
            }
            ("!_" | "-_", [x]) => {
                // `-(1)` stays a call; `-1` would parse as a literal.
                out.push_str(if function == "!_" { "(!(" } else { "(-(" });
                write_expr(out, x);
                out.push_str("))");
                return;
            }
            ("_?_:_", [c, t, f]) => {
                out.push('(');
                write_expr(out, c);
                out.push_str(" ? ");
                write_expr(out, t);
                out.push_str(" : ");
                write_expr(out, f);
                out.push(')');
                return;
            }
            ("_[_]" | "_[?_]", [x, i]) => {
                write_operand(out, x);
                out.push_str(if function == "_[_]" { "[" } else { "[?" });
                write_expr(out, i);
                out.push(']');
                return;
            }
            _ => {}
        }
    }
    if let Some(t) = target {
        write_operand(out, t);
        out.push('.');
    }
    out.push_str(function);
    write_args(out, args.iter());
}

fn write_args<'e>(out: &mut String, args: impl Iterator<Item = &'e Expr>) {
    out.push('(');
    for (i, a) in args.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        write_expr(out, a);
    }
    out.push(')');
}

fn write_comprehension(out: &mut String, c: &Comprehension) {
    write_operand(out, &c.range);
    let (name, filter, body) = match (&c.kind, c.var2.is_some()) {
        (MacroKind::All(b), _) => ("all", None, b),
        (MacroKind::Exists(b), _) => ("exists", None, b),
        (MacroKind::ExistsOne(b), false) => ("exists_one", None, b),
        (MacroKind::ExistsOne(b), true) => ("existsOne", None, b),
        (MacroKind::MapList { filter, transform }, false) => ("map", filter.as_ref(), transform),
        (MacroKind::MapList { filter, transform }, true) => {
            ("transformList", filter.as_ref(), transform)
        }
        (MacroKind::Filter(b), _) => ("filter", None, b),
        (MacroKind::TransformMap { filter, transform }, _) => {
            ("transformMap", filter.as_ref(), transform)
        }
        (MacroKind::TransformMapEntry { filter, transform }, _) => {
            ("transformMapEntry", filter.as_ref(), transform)
        }
        (MacroKind::OptMap(b), _) => ("optMap", None, b),
        (MacroKind::OptFlatMap(b), _) => ("optFlatMap", None, b),
        (MacroKind::SortBy(b), _) => ("sortBy", None, b),
    };
    let _ = write!(out, ".{name}({}", c.var);
    if let Some(v2) = &c.var2 {
        let _ = write!(out, ", {v2}");
    }
    for e in filter.into_iter().chain(std::iter::once(body)) {
        out.push_str(", ");
        write_expr(out, e);
    }
    out.push(')');
}

/// The grammar's keywords: as field names they need backticks (the other reserved words
/// select fields as they are).
const KEYWORDS: [&str; 4] = ["false", "in", "null", "true"];

fn write_field(out: &mut String, name: &str) {
    let mut chars = name.chars();
    let ident = chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !KEYWORDS.contains(&name);
    if ident {
        out.push_str(name);
    } else {
        let _ = write!(out, "`{name}`");
    }
}

fn write_literal(out: &mut String, l: &Literal) {
    match l {
        Literal::Null => out.push_str("null"),
        Literal::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Literal::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Literal::Uint(u) => {
            let _ = write!(out, "{u}u");
        }
        Literal::Double(d) => {
            // `{:?}` keeps a fraction or an exponent, so the text reads back as a double.
            let _ = write!(out, "{d:?}");
        }
        Literal::String(s) => {
            out.push('"');
            for c in s.chars() {
                match c {
                    '"' => out.push_str("\\\""),
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c if c.is_control() => {
                        let _ = write!(out, "\\u{:04x}", u32::from(c));
                    }
                    c => out.push(c),
                }
            }
            out.push('"');
        }
        Literal::Bytes(b) => {
            out.push_str("b\"");
            for byte in b.iter() {
                let _ = write!(out, "\\x{byte:02x}");
            }
            out.push('"');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::{on_compile_stack, parse};
    use crate::registry::Macros;

    fn round(src: &str) -> String {
        let src = src.to_string();
        on_compile_stack(&src, || {
            parse(&src, true, Macros::ALL).map(|p| unparse(&p.expr))
        })
        .unwrap_or_else(|e| format!("does not parse: {e}"))
    }

    /// Writing a tree back gives text that parses to a tree written back identically, and the
    /// text is what this module means to write.
    #[test]
    fn text_parses_back_to_the_same_tree() {
        let cases = [
            ("a.b.c", "a.b.c"),
            ("has(a.b) && !a.c", "(has(a.b) && (!(a.c)))"),
            ("a.?b.c", "a.?b.c"),
            ("x[1] + x[?'k'] - -1", "((x[1] + x[?\"k\"]) - -1)"),
            ("-(1).size()", "(-(1.size()))"),
            ("(-1).string()", "(-1).string()"),
            ("-1.5", "-1.5"),
            ("1e300 + 2.0 + 3u", "((1e300 + 2.0) + 3u)"),
            ("'a\"b\\\\c\\n\\u0001é'", "\"a\\\"b\\\\c\\n\\u0001é\""),
            ("b'\\x00ab'", "b\"\\x00\\x61\\x62\""),
            ("a ? b : c ? d : e", "(a ? b : (c ? d : e))"),
            ("'a' in ['a', ?b]", "(\"a\" in [\"a\", ?b])"),
            ("{'k': 1, ?'o': x}", "{\"k\": 1, ?\"o\": x}"),
            (
                "Object{spec: Object.spec{?replicas: r}}",
                "Object{spec: Object.spec{?replicas: r}}",
            ),
            ("a.`b-c`.`in`", "a.`b-c`.`in`"),
            ("l.all(x, x > 0)", "l.all(x, (x > 0))"),
            ("l.all(i, x, x > i)", "l.all(i, x, (x > i))"),
            ("l.exists_one(x, x)", "l.exists_one(x, x)"),
            ("l.existsOne(i, x, x)", "l.existsOne(i, x, x)"),
            ("l.map(x, x > 1, x * 2)", "l.map(x, (x > 1), (x * 2))"),
            ("l.map(x, x)", "l.map(x, x)"),
            ("l.filter(x, x)", "l.filter(x, x)"),
            ("l.transformList(i, v, v)", "l.transformList(i, v, v)"),
            (
                "m.transformMap(k, v, k != '', v)",
                "m.transformMap(k, v, (k != \"\"), v)",
            ),
            (
                "m.transformMapEntry(k, v, {k: v})",
                "m.transformMapEntry(k, v, {k: v})",
            ),
            ("o.optMap(v, v + 1)", "o.optMap(v, (v + 1))"),
            ("l.sortBy(v, v.n)", "l.sortBy(v, v.n)"),
            ("(a + b).size()", "(a + b).size()"),
            (
                "[1, 2].all(x, x > 0).string()",
                "[1, 2].all(x, (x > 0)).string()",
            ),
            ("math.greatest(1, 2)", "math.greatest(1, 2)"),
            ("null == a.b", "(null == a.b)"),
        ];
        for (src, want) in cases {
            let once = round(src);
            assert_eq!(once, want, "{src}");
            assert_eq!(round(&once), once, "{src}");
        }
    }

    /// Every expression of the differential corpus (cel-go agreed with celgate on each) that
    /// compiles evaluates, written back, to the same result as written.
    #[test]
    fn the_differential_corpus_decides_the_same_written_back() {
        use crate::{Activation, Budget, Env};
        let corpus: serde_json::Value =
            serde_json::from_str(include_str!("../differential-baseline.json")).unwrap();
        let env = Env::kubernetes().build();
        fn run(p: &crate::Program) -> String {
            let act = Activation::new();
            let mut budget = Budget::new(10_000_000, 10_000_000);
            format!("{:?}", p.eval(&act, &mut budget))
        }
        let mut compared = 0;
        for id in corpus["same_ids"].as_array().unwrap() {
            let Some((_, src)) = id
                .as_str()
                .unwrap()
                .split_once('/')
                .and_then(|(_, r)| r.split_once('/'))
            else {
                continue;
            };
            let Ok(program) = env.compile(src) else {
                continue;
            };
            let source = src.to_string();
            let back = on_compile_stack(&source, || {
                parse(&source, true, Macros::ALL).map(|p| unparse(&p.expr))
            })
            .unwrap();
            let again = env
                .compile(&back)
                .unwrap_or_else(|e| panic!("{src} → {back}: {e}"));
            assert_eq!(run(&again), run(&program), "{src} → {back}");
            compared += 1;
        }
        assert!(compared > 10_000, "{compared}");
    }
}
