//! Kubernetes' lists library (`k8s.io/apiserver/pkg/cel/library/lists.go`, version 0 as 1.36
//! enables it): `isSorted`, `sum`, `min`, `max`, `indexOf` and `lastIndexOf` on lists, with the
//! Kubernetes cost model's traversal cost.

use std::cmp::Ordering;

use super::arg;
use crate::error::EvalError;
use crate::libs::time::duration_add;
use crate::registry::{ImplFn, Registry};
use crate::types::Type;
use crate::value::{List, Value};

pub(crate) fn register(r: &mut Registry) {
    use Type::{Bool, Bytes, Double, Duration, Int, String, Timestamp, Uint};
    let comparable = [Int, Uint, Double, Bool, Duration, Timestamp, String, Bytes];
    for t in comparable {
        let l = Type::list(t.clone());
        r.def("isSorted")
            .member(std::slice::from_ref(&l), Bool)
            .imp(is_sorted)
            .cost(cost_traversal)
            .done();
        r.def("min")
            .member(std::slice::from_ref(&l), t.clone())
            .imp(min)
            .cost(cost_traversal)
            .done();
        r.def("max")
            .member(&[l], t)
            .imp(max)
            .cost(cost_traversal)
            .done();
    }
    let summable: [(Type, ImplFn); 4] = [
        (Int, sum_int),
        (Uint, sum_uint),
        (Double, sum_double),
        (Duration, sum_duration),
    ];
    for (t, f) in summable {
        r.def("sum")
            .member(&[Type::list(t.clone())], t)
            .imp(f)
            .cost(cost_traversal)
            .done();
    }
    let a = Type::param("A");
    r.def("indexOf")
        .member(&[Type::list(a.clone()), a.clone()], Int)
        .imp(index_of)
        .cost(cost_traversal)
        .done();
    r.def("lastIndexOf")
        .member(&[Type::list(a.clone()), a], Int)
        .imp(last_index_of)
        .cost(cost_traversal)
        .done();
}

/// Kubernetes' `traversalCost`: a tenth of the bytes of every string or bytes value in the
/// tree (rounded down), 1 for every other leaf.
pub(crate) fn traversal(v: &Value<'_>) -> u64 {
    match v {
        Value::String(s) => s.len() as u64 / 10,
        Value::Bytes(b) => b.len() as u64 / 10,
        Value::List(l) => l.iter().map(|e| traversal(&e)).sum(),
        Value::Map(m) => m
            .entries()
            .iter()
            .map(|(k, v)| traversal(k).saturating_add(traversal(v)))
            .sum(),
        _ => 1,
    }
}

/// Kubernetes' cost for `isSorted`, `sum`, `min`, `max`, `indexOf` and `lastIndexOf` (string
/// receivers included): one traversal of the receiver.
pub(crate) fn cost_traversal(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    args.first().map(traversal).unwrap_or(0)
}

fn list<'v, 'a>(args: &'v [Value<'a>]) -> Result<&'v List<'a>, EvalError> {
    match arg(args, 0)? {
        Value::List(l) => Ok(l),
        _ => Err(EvalError::no_such_overload()),
    }
}

/// The element as Kubernetes needs it for `isSorted`, `min` and `max`: a value of a type
/// with an ordering (cel-go's `traits.Comparer`), else no overload applies.
fn comparer(v: Value<'_>) -> Result<Value<'_>, EvalError> {
    match v {
        Value::Bool(_)
        | Value::Int(_)
        | Value::Uint(_)
        | Value::Double(_)
        | Value::String(_)
        | Value::Bytes(_)
        | Value::Timestamp(_)
        | Value::Duration(_) => Ok(v),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn is_sorted<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let mut prev: Option<Value<'a>> = None;
    for v in list(args)?.iter() {
        let v = comparer(v)?;
        // As in Kubernetes, only a definite "greater" breaks the order; incomparable pairs do not.
        if let Some(p) = &prev
            && p.compare(&v) == Ok(Ordering::Greater)
        {
            return Ok(Value::Bool(false));
        }
        prev = Some(v);
    }
    Ok(Value::Bool(true))
}

fn extreme<'a>(args: &[Value<'a>], name: &str, prefer: Ordering) -> Result<Value<'a>, EvalError> {
    let mut best: Option<Value<'a>> = None;
    for v in list(args)?.iter() {
        let v = comparer(v)?;
        match &best {
            None => best = Some(v),
            Some(b) if b.compare(&v) == Ok(prefer) => best = Some(v),
            Some(_) => {}
        }
    }
    best.ok_or_else(|| EvalError::msg(format!("{name} called on empty list")))
}

fn min<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    extreme(args, "min", Ordering::Greater)
}

fn max<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    extreme(args, "max", Ordering::Less)
}

fn add<'a>(acc: Value<'a>, v: Value<'a>) -> Result<Value<'a>, EvalError> {
    Ok(match (acc, v) {
        (Value::Int(a), Value::Int(b)) => {
            Value::Int(a.checked_add(b).ok_or(EvalError::IntOverflow)?)
        }
        (Value::Uint(a), Value::Uint(b)) => {
            Value::Uint(a.checked_add(b).ok_or(EvalError::UintOverflow)?)
        }
        (Value::Double(a), Value::Double(b)) => Value::Double(a + b),
        (Value::Duration(a), Value::Duration(b)) => duration_add(a, b)?,
        _ => return Err(EvalError::no_such_overload()),
    })
}

fn sum_from<'a>(args: &[Value<'a>], zero: Value<'a>) -> Result<Value<'a>, EvalError> {
    let l = list(args)?;
    let mut it = l.iter();
    // The first element starts the sum, so a list of another numeric type sums in its own type.
    let Some(mut acc) = it.next() else {
        return Ok(zero);
    };
    for v in it {
        acc = add(acc, v)?;
    }
    Ok(acc)
}

fn sum_int<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    sum_from(args, Value::Int(0))
}
fn sum_uint<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    sum_from(args, Value::Uint(0))
}
fn sum_double<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    sum_from(args, Value::Double(0.0))
}
fn sum_duration<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    sum_from(args, Value::Duration(chrono::TimeDelta::zero()))
}

fn index_of<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let item = arg(args, 1)?;
    let found = list(args)?.iter().position(|v| v.equals(item));
    Ok(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn last_index_of<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let l = list(args)?;
    let item = arg(args, 1)?;
    let found = (0..l.len())
        .rev()
        .find(|&i| l.get(i).is_some_and(|v| v.equals(item)));
    Ok(Value::Int(found.map_or(-1, |i| i as i64)))
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::{eval, eval_cost};

    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            ("[1, 2, 3].isSorted()", "true"),
            ("['a', 'b', 'b', 'c'].isSorted()", "true"),
            ("[2.0, 1.0].isSorted()", "false"),
            ("[].isSorted()", "true"),
            ("[1, 3].sum()", "4"),
            ("[1.0, 3.0].sum()", "4.0"),
            (
                "[duration('1m'), duration('1s')].sum() == duration('61s')",
                "true",
            ),
            ("[].sum()", "0"),
            ("[1u, 2u].sum()", "3u"),
            ("[9223372036854775807, 1].sum()", "error: integer overflow"),
            ("[1, 3].min()", "1"),
            ("[1, 3].max()", "3"),
            ("['b', 'a', 'c'].max()", "\"c\""),
            ("[].min()", "error: min called on empty list"),
            ("[].max()", "error: max called on empty list"),
            ("[1, 2, 2, 3].indexOf(2)", "1"),
            ("['a', 'b', 'b', 'c'].lastIndexOf('b')", "2"),
            ("[1.0].indexOf(1.1)", "-1"),
            ("[].indexOf('string')", "-1"),
            ("'abcb'.indexOf('b')", "1"),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }

    #[test]
    fn cost_is_one_traversal() {
        // 3 ints: 3 (a constant list literal costs nothing, as in cel-go's optimised programs).
        assert_eq!(eval_cost("[3, 1, 2].max()"), 3);
        // 'aaaaaaaaaaaa' is 12 bytes: 1, 'b': 0.
        assert_eq!(eval_cost("['aaaaaaaaaaaa', 'b'].isSorted()"), 1);
        // String receivers too: 25 bytes, floor(2.5).
        assert_eq!(eval_cost("'aaaaaaaaaaaaaaaaaaaaaaaab'.indexOf('b')"), 2);
    }
}
