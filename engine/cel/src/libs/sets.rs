//! cel-go's sets extension (`ext.Sets`): `sets.contains`, `sets.equivalent` and
//! `sets.intersects` over lists, with CEL equality. cel-go charges `1 + ⌊m·n·f⌋` for lists of
//! sizes m and n (f = 2 for `equivalent`, else 1).

use super::arg;
use crate::cost::actual_size;
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{List, Value};

pub(crate) fn register(r: &mut Registry) {
    let l = || Type::list(Type::param("T"));
    r.def("sets.contains")
        .global(&[l(), l()], Type::Bool)
        .imp(contains)
        .cost(cost_once)
        .done();
    r.def("sets.equivalent")
        .global(&[l(), l()], Type::Bool)
        .imp(equivalent)
        .cost(cost_twice)
        .done();
    r.def("sets.intersects")
        .global(&[l(), l()], Type::Bool)
        .imp(intersects)
        .cost(cost_once)
        .done();
}

fn cost_once(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    pairs_cost(args, 1)
}

fn cost_twice(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    pairs_cost(args, 2)
}

/// `1 + m·n·factor`, computed before the O(m·n) comparison runs.
fn pairs_cost(args: &[Value<'_>], factor: u64) -> u64 {
    let size = |i: usize| args.get(i).map(actual_size).unwrap_or(1);
    size(0)
        .saturating_mul(size(1))
        .saturating_mul(factor)
        .saturating_add(1)
}

fn lists<'v, 'a>(args: &'v [Value<'a>]) -> Result<(&'v List<'a>, &'v List<'a>), EvalError> {
    match (arg(args, 0)?, arg(args, 1)?) {
        (Value::List(a), Value::List(b)) => Ok((a, b)),
        _ => Err(EvalError::no_such_overload()),
    }
}

/// True if every element of `sub` is in `l`.
fn includes_all(l: &List<'_>, sub: &List<'_>) -> bool {
    sub.iter().all(|x| l.iter().any(|y| y.equals(&x)))
}

fn contains<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let (a, b) = lists(args)?;
    Ok(Value::Bool(includes_all(a, b)))
}

fn equivalent<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let (a, b) = lists(args)?;
    Ok(Value::Bool(includes_all(a, b) && includes_all(b, a)))
}

fn intersects<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let (a, b) = lists(args)?;
    Ok(Value::Bool(
        a.iter().any(|x| b.iter().any(|y| y.equals(&x))),
    ))
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::eval;

    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            ("sets.contains([], [])", "true"),
            ("sets.contains([1, 2, 3], [2, 1])", "true"),
            ("sets.contains([1, 2], [3])", "false"),
            ("sets.contains([1, 2], [dyn(1u), dyn(2.0)])", "true"),
            ("sets.equivalent([1, 2, 2], [2, 1])", "true"),
            ("sets.equivalent([1, 2], [1])", "false"),
            ("sets.intersects([1, 2], [3, 2])", "true"),
            ("sets.intersects([1], [])", "false"),
            ("sets.intersects([[1]], [[1]])", "true"),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }
}
