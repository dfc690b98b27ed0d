//! Lenient reads of the written object's JSON: a field that is missing or of another type
//! reads as absent (the CRD schema has already rejected wrong types).

use serde_json::Value;

/// The string at `key`.
pub(super) fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The list at `key`, empty when there is none.
pub(super) fn list_of<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// The strings of the list at `key`.
pub(super) fn strings_of<'a>(v: &'a Value, key: &str) -> Vec<&'a str> {
    list_of(v, key).iter().filter_map(Value::as_str).collect()
}
