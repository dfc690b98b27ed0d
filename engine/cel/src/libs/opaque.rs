//! Helpers for the libraries' opaque value types.

use std::sync::Arc;

use super::arg;
use crate::error::EvalError;
use crate::value::{Opaque, Value};

/// The argument at `i` as opaque type `T`; `NoSuchOverload` if it is anything else.
pub(crate) fn opaque_arg<'v, T: Opaque>(
    args: &'v [Value<'_>],
    i: usize,
) -> Result<&'v T, EvalError> {
    match arg(args, i)? {
        Value::Opaque(o) => o
            .as_any()
            .downcast_ref::<T>()
            .ok_or(EvalError::no_such_overload()),
        _ => Err(EvalError::no_such_overload()),
    }
}

/// Wraps `v` as an opaque value.
pub(crate) fn opaque<'a, T: Opaque>(v: T) -> Value<'a> {
    Value::Opaque(Arc::new(v))
}

/// `other` as `T`, for [`Opaque::equals`].
pub(crate) fn same_type<T: Opaque>(other: &dyn Opaque) -> Option<&T> {
    other.as_any().downcast_ref::<T>()
}
