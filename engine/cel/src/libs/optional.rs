//! cel-go's optional types library (latest version, as Kubernetes enables it): `optional.of`,
//! `optional.ofNonZeroValue`, `optional.none`, `value`, `hasValue`, `or`/`orValue`
//! (short-circuiting, evaluated by the evaluator), `_[?_]`, `first`/`last`, `optional.unwrap`.

use std::sync::Arc;

use super::arg;
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{List, Value};

pub(crate) fn register(r: &mut Registry) {
    let v = || Type::param("V");
    let k = || Type::param("K");
    let opt_v = || Type::optional(v());
    let list_v = || Type::list(v());
    let map_kv = || Type::map(k(), v());
    r.def("optional.of").global(&[v()], opt_v()).imp(of).done();
    r.def("optional.ofNonZeroValue")
        .global(&[v()], opt_v())
        .imp(of_non_zero)
        .done();
    r.def("optional.none").global(&[], opt_v()).imp(none).done();
    r.def("value").member(&[opt_v()], v()).imp(value).done();
    r.def("hasValue")
        .member(&[opt_v()], Type::Bool)
        .imp(has_value)
        .done();
    // Evaluated by the evaluator, which skips the argument when the receiver has a value.
    r.def("or").member(&[opt_v(), opt_v()], opt_v()).done();
    r.def("orValue").member(&[opt_v(), v()], v()).done();
    // Evaluated by the evaluator as indexing.
    r.def("_[?_]")
        .global(&[list_v(), Type::Int], opt_v())
        .done();
    r.def("_[?_]")
        .global(&[Type::optional(list_v()), Type::Int], opt_v())
        .done();
    r.def("_[?_]").global(&[map_kv(), k()], opt_v()).done();
    r.def("_[?_]")
        .global(&[Type::optional(map_kv()), k()], opt_v())
        .done();
    r.def("_[_]")
        .global(&[Type::optional(list_v()), Type::Int], opt_v())
        .done();
    r.def("_[_]")
        .global(&[Type::optional(map_kv()), k()], opt_v())
        .done();
    r.def("first")
        .member(&[list_v()], opt_v())
        .imp(first)
        .done();
    r.def("last").member(&[list_v()], opt_v()).imp(last).done();
    r.def("optional.unwrap")
        .global(&[Type::list(opt_v())], list_v())
        .imp(unwrap)
        .done();
    r.def("unwrapOpt")
        .member(&[Type::list(opt_v())], list_v())
        .imp(unwrap)
        .done();
}

fn of<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Optional(Some(Arc::new(arg(args, 0)?.clone()))))
}

/// True for the zero value of a type (cel-go's `IsZeroValue`).
fn is_zero(v: &Value<'_>) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Int(i) => *i == 0,
        Value::Uint(u) => *u == 0,
        Value::Double(d) => *d == 0.0,
        Value::String(s) => s.is_empty(),
        Value::Bytes(b) => b.is_empty(),
        Value::List(l) => l.is_empty(),
        Value::Map(m) => m.is_empty(),
        Value::Duration(d) => d.is_zero(),
        // Go's zero time, 0001-01-01T00:00:00Z, not the Unix epoch.
        Value::Timestamp(t) => t.timestamp() == -62_135_596_800 && t.timestamp_subsec_nanos() == 0,
        // Optionals have no zero value in cel-go: `optional.none()` is wrapped.
        Value::Optional(_) => false,
        Value::Struct(s) => s.struct_type().is_zero(s),
        Value::Type(_) | Value::Opaque(_) => false,
    }
}

fn of_non_zero<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let v = arg(args, 0)?;
    if is_zero(v) {
        return Ok(Value::Optional(None));
    }
    Ok(Value::Optional(Some(Arc::new(v.clone()))))
}

fn none<'a>(_: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Optional(None))
}

fn value<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match arg(args, 0)? {
        Value::Optional(Some(v)) => Ok((**v).clone()),
        Value::Optional(None) => Err(EvalError::msg("optional.none() dereference")),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn has_value<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match arg(args, 0)? {
        Value::Optional(o) => Ok(Value::Bool(o.is_some())),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn first<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match arg(args, 0)? {
        Value::List(l) => Ok(Value::Optional(l.get(0).map(Arc::new))),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn last<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match arg(args, 0)? {
        Value::List(l) => Ok(Value::Optional(
            l.len().checked_sub(1).and_then(|i| l.get(i)).map(Arc::new),
        )),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn unwrap<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let Value::List(l) = arg(args, 0)? else {
        return Err(EvalError::no_such_overload());
    };
    let mut out = Vec::with_capacity(l.len());
    for v in l.iter() {
        match v {
            Value::Optional(Some(x)) => out.push((*x).clone()),
            Value::Optional(None) => {}
            _ => return Err(EvalError::no_such_overload()),
        }
    }
    Ok(Value::List(List::from_vec(out)))
}
