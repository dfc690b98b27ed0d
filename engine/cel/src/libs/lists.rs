//! List helpers shared by the lists extension and `sortBy`.

use std::cmp::Ordering;

use crate::error::EvalError;
use crate::value::Value;

/// Sorts `(key, value)` pairs by key (stable). Keys must be mutually orderable.
pub(crate) fn sort_keyed<'a>(items: &mut [(Value<'a>, Value<'a>)]) -> Result<(), EvalError> {
    let mut err = None;
    items.sort_by(|(a, _), (b, _)| match a.compare(b) {
        Ok(o) => o,
        Err(e) => {
            err.get_or_insert(e);
            Ordering::Equal
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
