//! cel-go's lists extension (`ext.Lists`, version 3 as Kubernetes 1.34+ enables it): `slice`,
//! `flatten`, `distinct`, `lists.range`, `reverse` and `sort` (`sortBy` is a macro evaluated by
//! the evaluator with [`sort_keyed`]; `first`/`last` come with the optional library), with
//! cel-go's version-3 cost trackers, and what those assert unchecked of their arguments
//! (`distinct` and `sort` a list, `flatten` an int depth: cel-go panics otherwise).

use std::cmp::Ordering;

use super::{arg, go_sort, int_arg};
use crate::cost::actual_size;
use crate::error::EvalError;
use crate::registry::{Dispatch, Registry, TrackerAssert, Trait};
use crate::types::Type;
use crate::value::{List, Value};

/// cel-go's `ListCreateBaseCost`.
const LIST_CREATE: u64 = 10;
/// The most elements `lists.range` allocates.
const MAX_RANGE: i64 = 10_000_000;

pub(crate) fn register(r: &mut Registry) {
    use Type::Int;
    let t = || Type::param("T");
    let lt = || Type::list(t());
    r.def("slice")
        .member(&[lt(), Int, Int], lt())
        .imp(slice)
        .cost_of_result(cost_output)
        .done();
    r.def("flatten")
        .member(&[Type::list(lt())], lt())
        .imp(flatten)
        .cost(cost_flatten)
        .done();
    r.def("flatten")
        .member(&[Type::list(Type::Dyn), Int], Type::list(Type::Dyn))
        .imp(flatten)
        .cost(cost_flatten)
        .tracker_asserts(TrackerAssert::Int(1))
        .done();
    r.def("lists.range")
        .global(&[Int], Type::list(Int))
        .imp(range)
        .cost(cost_range)
        .done();
    r.def("reverse")
        .member(&[lt()], lt())
        .imp(reverse)
        .cost_of_result(cost_output)
        .done();
    r.def("distinct")
        .member(&[lt()], lt())
        .imp(distinct)
        .cost(cost_self_compare)
        .tracker_asserts(TrackerAssert::Lister(0))
        .done();
    use Type::{Bool, Bytes, Double, Duration, String, Timestamp, Uint};
    for e in [Int, Uint, Double, Bool, Duration, Timestamp, String, Bytes] {
        r.def("sort")
            .member(&[Type::list(e.clone())], Type::list(e))
            .imp(sort)
            .cost(cost_self_compare)
            .tracker_asserts(TrackerAssert::Lister(0))
            .done();
    }
    // cel-go binds `sort` once for every list, and `flatten` without runtime type guards (it
    // accepts a list that is flat already).
    r.dispatch("sort", Dispatch::Singleton(Some(Trait::Lister)));
    r.dispatch("flatten", Dispatch::Unguarded);
}

/// `floor(size * factor) + 1 + 10`: a call that allocates a list (cel-go's
/// `trackAllocatingListCall`).
fn allocating(factor: f64, size: u64) -> u64 {
    let scaled = size as f64 * factor;
    // Go's float-to-uint64 conversion on amd64: below 2^63 through int64, so a negative factor
    // (`flatten(-1)`, rejected afterwards) wraps.
    let scaled = if scaled < 9_223_372_036_854_775_808_f64 {
        (scaled as i64) as u64
    } else {
        scaled as u64
    };
    scaled.wrapping_add(1 + LIST_CREATE)
}

fn cost_output(_: &[Value<'_>], result: &Value<'_>) -> u64 {
    allocating(1.0, actual_size(result))
}

/// The output size of `lists.range(n)` is `n`: known before the list is built, so an
/// over-budget range is refused before allocating it.
fn cost_range(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    match args.first() {
        Some(Value::Int(n)) => allocating(1.0, (*n).max(0) as u64),
        _ => allocating(1.0, 0),
    }
}

fn cost_flatten(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    let depth = match args.get(1) {
        Some(Value::Int(d)) => *d as f64,
        _ => 1.0,
    };
    allocating(depth, args.first().map(actual_size).unwrap_or(0))
}

/// O(n²) over the receiver, a little more for strings and bytes.
pub(crate) fn cost_self_compare(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    let Some(Value::List(l)) = args.first() else {
        return allocating(2.0, 0);
    };
    let n = l.len() as u64;
    let factor = match l.get(0) {
        Some(Value::String(_) | Value::Bytes(_)) => 2.1,
        _ => 2.0,
    };
    allocating(factor, n.saturating_mul(n))
}

fn list<'v, 'a>(args: &'v [Value<'a>]) -> Result<&'v List<'a>, EvalError> {
    match arg(args, 0)? {
        Value::List(l) => Ok(l),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn owned(v: Vec<Value<'_>>) -> Value<'_> {
    Value::List(List::from_vec(v))
}

fn slice<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let l = list(args)?;
    let (start, end) = (int_arg(args, 1)?, int_arg(args, 2)?);
    let fail = |why: String| EvalError::msg(format!("cannot slice({start}, {end}), {why}"));
    if start < 0 || end < 0 {
        return Err(fail("negative indexes not supported".into()));
    }
    if start > end {
        return Err(fail(
            "start index must be less than or equal to end index".into(),
        ));
    }
    if end as u64 > l.len() as u64 {
        return Err(fail(format!("list is length {}", l.len())));
    }
    Ok(owned(
        (start as usize..end as usize)
            .filter_map(|i| l.get(i))
            .collect(),
    ))
}

fn flatten_into<'a>(l: &List<'a>, depth: i64, out: &mut Vec<Value<'a>>) {
    for v in l.iter() {
        match v {
            Value::List(inner) if depth > 0 => flatten_into(&inner, depth - 1, out),
            other => out.push(other),
        }
    }
}

fn flatten<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let l = list(args)?;
    let depth = if args.len() > 1 { int_arg(args, 1)? } else { 1 };
    if depth < 0 {
        return Err(EvalError::msg("level must be non-negative"));
    }
    let mut out = Vec::with_capacity(l.len());
    flatten_into(l, depth, &mut out);
    Ok(owned(out))
}

fn range<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    // As cel-go: a negative size is an empty list.
    let n = int_arg(args, 0)?.max(0);
    if n > MAX_RANGE {
        return Err(EvalError::msg(format!(
            "lists.range: size {n} exceeds maximum allowed ({MAX_RANGE})"
        )));
    }
    Ok(owned((0..n).map(Value::Int).collect()))
}

fn reverse<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let mut v: Vec<Value<'a>> = list(args)?.iter().collect();
    v.reverse();
    Ok(owned(v))
}

fn distinct<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let l = list(args)?;
    let mut out: Vec<Value<'a>> = Vec::with_capacity(l.len());
    for v in l.iter() {
        if !out.iter().any(|o| v.equals(o)) {
            out.push(v);
        }
    }
    Ok(owned(out))
}

/// True for values `sort` can order.
fn comparable(v: &Value<'_>) -> bool {
    matches!(
        v,
        Value::Int(_)
            | Value::Uint(_)
            | Value::Double(_)
            | Value::Bool(_)
            | Value::Duration(_)
            | Value::Timestamp(_)
            | Value::String(_)
            | Value::Bytes(_)
    )
}

fn sort<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let l = list(args)?;
    let mut items: Vec<(Value<'a>, Value<'a>)> = l.iter().map(|v| (v.clone(), v)).collect();
    sort_keyed(&mut items)?;
    Ok(owned(items.into_iter().map(|(_, v)| v).collect()))
}

/// Sorts `(key, value)` pairs by key, as cel-go's `@sortByAssociatedKeys`: the keys must be of
/// one comparable type; Go's `sort.Slice` orders them (not stable; a key that orders with
/// nothing, NaN, stays where the algorithm leaves it).
pub(crate) fn sort_keyed<'a>(items: &mut [(Value<'a>, Value<'a>)]) -> Result<(), EvalError> {
    let Some((first, _)) = items.first() else {
        return Ok(());
    };
    if !comparable(first) {
        return Err(EvalError::msg("list elements must be comparable"));
    }
    let kind = first.type_name();
    if items.iter().any(|(k, _)| k.type_name() != kind) {
        return Err(EvalError::msg("list elements must have the same type"));
    }
    go_sort::sort_slice(items, |(a, _), (b, _)| a.compare(b) == Ok(Ordering::Less));
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::{eval, eval_cost};

    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            ("[1, 2, 3, 4].slice(1, 3)", "[2, 3]"),
            ("[1, 2].slice(2, 2)", "[]"),
            (
                "[1, 2].slice(-1, 2)",
                "error: cannot slice(-1, 2), negative indexes not supported",
            ),
            (
                "[1, 2].slice(2, 1)",
                "error: cannot slice(2, 1), start index must be less than or equal to end index",
            ),
            (
                "[1, 2].slice(0, 3)",
                "error: cannot slice(0, 3), list is length 2",
            ),
            ("[[1], [2, 3], []].flatten()", "[1, 2, 3]"),
            (
                "[dyn(1), dyn([dyn(2), dyn([dyn(3), dyn([4])])])].flatten(2)",
                "[1, 2, 3, [4]]",
            ),
            ("[dyn(1), dyn([2])].flatten(0)", "[1, [2]]"),
            ("[dyn(1)].flatten(-1)", "error: level must be non-negative"),
            ("lists.range(3)", "[0, 1, 2]"),
            ("lists.range(0)", "[]"),
            ("lists.range(-1)", "[]"),
            ("[1, 2, 3].reverse()", "[3, 2, 1]"),
            ("[1, 2, 1, 3, 2].distinct()", "[1, 2, 3]"),
            ("[dyn(1), dyn(1.0), dyn(1u)].distinct()", "[1]"),
            ("[3, 1, 2].sort()", "[1, 2, 3]"),
            ("['b', 'a'].sort()", "[\"a\", \"b\"]"),
            (
                "[dyn(1), dyn('a')].sort()",
                "error: list elements must have the same type",
            ),
            (
                "dyn([[1], [2]]).sort()",
                "error: list elements must be comparable",
            ),
            (
                "['bb', 'a', 'ccc'].sortBy(s, size(s))",
                "[\"a\", \"bb\", \"ccc\"]",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }

    /// cel-go's trackers of `distinct`, `sort`, `flatten(depth)` and `sortBy` assert their
    /// arguments' types unchecked, after the call, even when an argument failed: the panic is
    /// the evaluation's error, which nothing absorbs. Unresolved calls have no tracker.
    #[test]
    fn tracker_assertions_panic_as_cel_go_does() {
        let err_list = "error: internal error: interface conversion: *types.Err is not traits.Lister: missing method Add";
        let cases: &[(&str, &str)] = &[
            ("[1 / 0].distinct()", err_list),
            ("[1 / 0].distinct() == [] || true", err_list),
            ("true || [1 / 0].distinct() == []", "true"),
            ("[1 / 0].sort()", err_list),
            ("[0, 1].sortBy(x, 1 / x)", err_list),
            ("[0, 1].sortBy(x, dyn(1 / x))", "error: division by zero"),
            (
                "dyn(1).distinct()",
                "error: internal error: interface conversion: types.Int is not traits.Lister: missing method Contains",
            ),
            (
                "dyn({}).distinct()",
                "error: internal error: interface conversion: *types.baseMap is not traits.Lister: missing method Add",
            ),
            (
                "[[1]].flatten(1 / 0)",
                "error: internal error: interface conversion: ref.Val is *types.Err, not types.Int",
            ),
            (
                "[[1]].flatten(dyn('a'))",
                "error: internal error: interface conversion: ref.Val is types.String, not types.Int",
            ),
            // Trackers that only size their arguments, and calls left unresolved, do not panic.
            ("[[1 / 0]].flatten()", "error: division by zero"),
            ("[1 / 0].reverse()", "error: division by zero"),
            ("dyn([1 / 0]).sort()", "error: division by zero"),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }

    #[test]
    fn costs_follow_cel_go_trackers() {
        // reverse of 3 elements: 3 + 1 + 10.
        assert_eq!(eval_cost("[1, 2, 3].reverse()"), 14);
        // distinct of 3: 2 * 9 + 11.
        assert_eq!(eval_cost("[1, 2, 3].distinct()"), 29);
        assert_eq!(eval_cost("lists.range(5)"), 16);
        // Refused by the per-call limit before ten million elements are built.
        assert_eq!(
            crate::libs::testing::eval("lists.range(10000000).size()"),
            "error: operation cancelled: actual cost limit exceeded"
        );
    }
}
