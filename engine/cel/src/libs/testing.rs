//! Test helpers for the library tables: evaluate an expression in the Kubernetes environment
//! and render the result (or error) as a short string.

use crate::value::Value;
use crate::{Activation, Budget, Env, Type};

/// Renders a value compactly: `1`, `2u`, `1.5`, `"s"`, `[..]`, `{k: v}`, `optional(..)`.
pub(crate) fn render(v: &Value<'_>) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => format!("{u}u"),
        Value::Double(d) => format!("{d:?}"),
        Value::String(s) => format!("{:?}", &**s),
        Value::Bytes(b) => format!("b{b:?}"),
        Value::List(l) => format!(
            "[{}]",
            l.iter().map(|e| render(&e)).collect::<Vec<_>>().join(", ")
        ),
        Value::Map(m) => format!(
            "{{{}}}",
            m.entries()
                .iter()
                .map(|(k, v)| format!("{}: {}", render(k), render(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Optional(Some(v)) => format!("optional({})", render(v)),
        Value::Optional(None) => "optional.none()".into(),
        Value::Timestamp(t) => format!("timestamp({t:?})"),
        Value::Duration(d) => format!("duration({d:?})"),
        Value::Type(t) => t.to_string(),
        Value::Opaque(o) => format!("{o:?}"),
        Value::Struct(s) => format!("{s:?}"),
    }
}

fn run(src: &str) -> (String, u64) {
    let env = Env::kubernetes().variable("x", Type::Dyn).build();
    let p = match env.compile(src) {
        Ok(p) => p,
        Err(e) => return (format!("compile: {e}"), 0),
    };
    let mut budget = Budget::default();
    let (r, cost) = p.eval_with_cost(&Activation::new(), &mut budget);
    let s = match r {
        Ok(v) => render(&v),
        Err(e) => format!("error: {e}"),
    };
    (s, cost)
}

/// Evaluates `src` with nothing bound and renders the outcome.
pub(crate) fn eval(src: &str) -> String {
    run(src).0
}

/// Evaluates `src` and returns the cost it was charged.
pub(crate) fn eval_cost(src: &str) -> u64 {
    run(src).1
}
