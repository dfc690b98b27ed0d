//! JSON Patch (RFC 6902) applied as kube-apiserver applies a mutation's patch (the evanphx
//! json-patch v4 library): the same outcomes and error texts, including its departures from
//! the RFC that a policy can observe — `replace` of an absent object member adds it, a `test`
//! of an absent member passes only without a value, negative array indices count from the
//! end, a member holding `null` reads as absent, and a failed `test` is reported separately
//! (the caller then leaves the object unchanged). The `json-patch` crate follows the RFC
//! instead, with its own texts, so it is used only to compute response patches.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// One operation: `op`, `path`, `from` (when non-empty) and `value` (when given).
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// `add`, `remove`, `replace`, `move`, `copy` or `test` (anything else is an error).
    pub op: String,
    /// A JSON Pointer.
    pub path: String,
    /// The source pointer of `move` and `copy`.
    pub from: Option<String>,
    /// The operation's value.
    pub value: Option<Value>,
}

/// Why a patch did not apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A `test` operation compared unequal: upstream then leaves the object unchanged.
    #[error("testing value {0} failed: test failed")]
    TestFailed(String),
    /// The `copy` operations of one patch copied more than [`COPY_SIZE_LIMIT`] bytes in all.
    #[error(
        "Unable to complete the copy, the accumulated size increase of copy is {accumulated}, exceeding the limit {limit}"
    )]
    CopySizeExceeded {
        /// The bytes copied so far, this copy included.
        accumulated: u64,
        /// The limit.
        limit: u64,
    },
    /// Any other failure, with the library's text.
    #[error("{0}")]
    Failed(String),
}

/// The most a patch's `copy` operations may copy in all, in bytes of the copied values' JSON:
/// kube-apiserver sets the library's `AccumulatedCopySizeLimit` to its `JSONPatchMaxCopyBytes`,
/// 3 MiB.
pub const COPY_SIZE_LIMIT: u64 = 3 * 1024 * 1024;

const MISSING: &str = "missing value";
const INVALID_INDEX: &str = "invalid index referenced";

/// Applies `ops` in order to `doc`; on error `doc` may be partly patched (callers discard it,
/// or see [`changes_nothing_on_error`]). Returns whether an operation changed a value (a later
/// one may have changed it back).
pub fn apply(doc: &mut Value, ops: &[Operation]) -> Result<bool, PatchError> {
    let mut changed = false;
    let mut copied = 0;
    for op in ops {
        changed |= match op.op.as_str() {
            "add" => add(doc, op)?,
            "remove" => remove(doc, op).map(|()| true)?,
            "replace" => replace(doc, op)?,
            "move" => move_op(doc, op).map(|()| true)?,
            "test" => test(doc, op).map(|()| false)?,
            "copy" => copy(doc, op, &mut copied)?,
            other => return Err(failed(format!("Unexpected kind: {other}"))),
        };
    }
    Ok(changed)
}

/// Whether [`apply`] leaves the document as it was when `ops` fail, and says exactly whether
/// they changed it: one operation other than `move` (which removes before it adds) checks
/// everything before it writes.
pub fn changes_nothing_on_error(ops: &[Operation]) -> bool {
    matches!(ops, [op] if op.op != "move")
}

fn failed(s: String) -> PatchError {
    PatchError::Failed(s)
}

/// A pointer token unescaped (`~1` → `/`, `~0` → `~`, left to right).
pub(super) fn decode(token: &str) -> Cow<'_, str> {
    if !token.as_bytes().contains(&b'~') {
        return Cow::Borrowed(token);
    }
    let mut out = String::with_capacity(token.len());
    let mut rest = token;
    while let Some(i) = rest.find('~') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        rest = match after.as_bytes().first() {
            Some(b'1') => {
                out.push('/');
                &after[1..]
            }
            Some(b'0') => {
                out.push('~');
                &after[1..]
            }
            _ => {
                out.push('~');
                after
            }
        };
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Go's `strconv.Atoi`.
fn atoi(s: &str) -> Result<i64, String> {
    s.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        format!("strconv.Atoi: parsing {}: {why}", go_quote(s))
    })
}

fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn invalid_index(i: i64) -> String {
    format!("Unable to access invalid index: {i}: {INVALID_INDEX}")
}

/// An index into a list of `len` items, negative counting from the end.
fn resolve(i: i64, len: usize) -> Result<usize, String> {
    let n = len as i64;
    if i < 0 {
        if i < -n {
            return Err(invalid_index(i));
        }
        return Ok((i + n) as usize);
    }
    Ok(i as usize)
}

/// The container holding the pointer's last token, and that token decoded: `None` when the
/// pointer has no token or a step is absent, null, a scalar or a bad index. (The library
/// ignores what precedes the first `/`.)
fn find<'d>(doc: &'d mut Value, path: &str) -> Option<(&'d mut Value, String)> {
    // The tokens after the first, the last apart (none without a '/').
    let (parents, last) = path.rsplit_once('/')?;
    let mut cur = doc;
    for part in parents.split('/').skip(1) {
        let next = get_mut(cur, &decode(part)).ok()??;
        if next.is_null() || !(next.is_object() || next.is_array()) {
            return None;
        }
        cur = next;
    }
    Some((cur, decode(last).into_owned()))
}

/// The member or item `key` of a container: `Ok(None)` for an absent member (or one holding
/// null), `Err` for a bad index.
fn get_mut<'d>(c: &'d mut Value, key: &str) -> Result<Option<&'d mut Value>, String> {
    match c {
        Value::Object(m) => Ok(m.get_mut(key).filter(|v| !v.is_null())),
        Value::Array(a) => {
            let i = atoi(key)?;
            let len = a.len();
            let idx = resolve(i, len)?;
            if idx >= len {
                return Err(invalid_index(i));
            }
            Ok(a.get_mut(idx).filter(|v| !v.is_null()))
        }
        _ => Ok(None),
    }
}

fn get(c: &mut Value, key: &str) -> Result<Option<Value>, String> {
    get_mut(c, key).map(|v| v.map(|v| v.clone()))
}

/// Adds `val` at `key` of a container; whether that changed it.
fn add_to(c: &mut Value, key: &str, val: Value) -> Result<bool, String> {
    match c {
        Value::Object(m) => Ok(put(m, key, val)),
        Value::Array(a) => {
            if key == "-" {
                a.push(val);
                return Ok(true);
            }
            let i = atoi(key)
                .map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            let size = a.len() + 1;
            if i >= size as i64 {
                return Err(invalid_index(i));
            }
            let idx = resolve(i, size)?;
            a.insert(idx, val);
            Ok(true)
        }
        _ => Err(MISSING.into()),
    }
}

/// Sets member `key` of an object to `val`; whether its value changed.
fn put(m: &mut Map<String, Value>, key: &str, val: Value) -> bool {
    match m.get_mut(key) {
        Some(old) if *old == val => false,
        Some(old) => {
            *old = val;
            true
        }
        None => {
            m.insert(key.to_string(), val);
            true
        }
    }
}

fn remove_from(c: &mut Value, key: &str) -> Result<Value, String> {
    match c {
        Value::Object(m) => m
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: {MISSING}")),
        Value::Array(a) => {
            let i = atoi(key)?;
            if i >= a.len() as i64 {
                return Err(invalid_index(i));
            }
            let idx = resolve(i, a.len())?;
            Ok(a.remove(idx))
        }
        _ => Err(MISSING.into()),
    }
}

/// Replaces `key` of a container with `val`; whether that changed it.
fn set(c: &mut Value, key: &str, val: Value) -> Result<bool, String> {
    match c {
        Value::Object(m) => Ok(put(m, key, val)),
        Value::Array(a) => {
            let i = atoi(key)?;
            let idx = resolve(i, a.len())?;
            match a.get_mut(idx) {
                Some(slot) => {
                    let changed = *slot != val;
                    *slot = val;
                    Ok(changed)
                }
                None => Err(invalid_index(i)),
            }
        }
        _ => Err(MISSING.into()),
    }
}

fn value(op: &Operation) -> Value {
    op.value.clone().unwrap_or(Value::Null)
}

fn from(op: &Operation, what: &str) -> Result<String, PatchError> {
    op.from.clone().ok_or_else(|| {
        failed(format!(
            "{what} operation failed to decode from: operation, missing from field: {MISSING}"
        ))
    })
}

fn add(doc: &mut Value, op: &Operation) -> Result<bool, PatchError> {
    let path = &op.path;
    let (c, key) = find(doc, path).ok_or_else(|| {
        failed(format!(
            "add operation does not apply: doc is missing path: \"{path}\": {MISSING}"
        ))
    })?;
    add_to(c, &key, value(op)).map_err(|e| failed(format!("error in add for path: '{path}': {e}")))
}

fn remove(doc: &mut Value, op: &Operation) -> Result<(), PatchError> {
    let path = &op.path;
    let (c, key) = find(doc, path).ok_or_else(|| {
        failed(format!(
            "remove operation does not apply: doc is missing path: \"{path}\": {MISSING}"
        ))
    })?;
    remove_from(c, &key)
        .map(drop)
        .map_err(|e| failed(format!("error in remove for path: '{path}': {e}")))
}

fn replace(doc: &mut Value, op: &Operation) -> Result<bool, PatchError> {
    let path = &op.path;
    if path.is_empty() {
        return match &op.value {
            Some(v @ (Value::Object(_) | Value::Array(_))) => {
                let changed = doc != v;
                *doc = v.clone();
                Ok(changed)
            }
            _ => Err(failed(
                "replace operation value must be object or array: %!w(<nil>)".into(),
            )),
        };
    }
    let (c, key) = find(doc, path).ok_or_else(|| {
        failed(format!(
            "replace operation does not apply: doc is missing path: {path}: {MISSING}"
        ))
    })?;
    if get_mut(c, &key).is_err() {
        return Err(failed(format!(
            "replace operation does not apply: doc is missing key: {path}: {MISSING}"
        )));
    }
    set(c, &key, value(op)).map_err(|e| failed(format!("error in remove for path: '{path}': {e}")))
}

fn move_op(doc: &mut Value, op: &Operation) -> Result<(), PatchError> {
    let from = from(op, "move")?;
    let (c, key) = find(doc, &from).ok_or_else(|| {
        failed(format!(
            "move operation does not apply: doc is missing from path: {from}: {MISSING}"
        ))
    })?;
    get(c, &key).map_err(|e| failed(format!("error in move for path: '{key}': {e}")))?;
    let val = remove_from(c, &key)
        .map_err(|e| failed(format!("error in move for path: '{key}': {e}")))?;
    let path = &op.path;
    let (c, key) = find(doc, path).ok_or_else(|| {
        failed(format!(
            "move operation does not apply: doc is missing destination path: {path}: {MISSING}"
        ))
    })?;
    add_to(c, &key, val)
        .map(drop)
        .map_err(|e| failed(format!("error in move for path: '{path}': {e}")))
}

/// `copy`, adding the copied value's size to `copied`, the patch's total so far.
fn copy(doc: &mut Value, op: &Operation, copied: &mut u64) -> Result<bool, PatchError> {
    let from = from(op, "copy")?;
    let (c, key) = find(doc, &from).ok_or_else(|| {
        failed(format!(
            "copy operation does not apply: doc is missing from path: {from}: {MISSING}"
        ))
    })?;
    let val = get(c, &key)
        .map_err(|e| failed(format!("error in copy for from: '{from}': {e}")))?
        .unwrap_or(Value::Null);
    let path = &op.path;
    let (c, key) = find(doc, path).ok_or_else(|| {
        failed(format!(
            "copy operation does not apply: doc is missing destination path: {path}: {MISSING}"
        ))
    })?;
    // The library copies an absent or null member as nothing, of size 0.
    *copied = copied.saturating_add(if val.is_null() { 0 } else { go_size(&val) });
    if *copied > COPY_SIZE_LIMIT {
        return Err(PatchError::CopySizeExceeded {
            accumulated: *copied,
            limit: COPY_SIZE_LIMIT,
        });
    }
    add_to(c, &key, val).map_err(|e| failed(format!("error while adding value during copy: {e}")))
}

/// The length of `v` as Go's `json.Marshal` writes it: compact, with `<`, `>`, `&`, U+2028
/// and U+2029 escaped.
fn go_size(v: &Value) -> u64 {
    match v {
        Value::Null | Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => number_text(n).len() as u64,
        Value::String(s) => go_string_size(s),
        Value::Array(a) => {
            let commas = a.len().saturating_sub(1) as u64;
            a.iter().map(go_size).fold(2 + commas, u64::saturating_add)
        }
        Value::Object(m) => {
            let commas = m.len().saturating_sub(1) as u64;
            m.iter()
                .map(|(k, v)| {
                    go_string_size(k)
                        .saturating_add(1)
                        .saturating_add(go_size(v))
                })
                .fold(2 + commas, u64::saturating_add)
        }
    }
}

/// The length of a string as Go's encoding/json quotes it.
fn go_string_size(s: &str) -> u64 {
    let escaped: u64 = s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => 6,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8() as u64,
        })
        .sum();
    escaped + 2
}

fn test(doc: &mut Value, op: &Operation) -> Result<(), PatchError> {
    let path = &op.path;
    if path.is_empty() {
        return match &op.value {
            Some(v) if equal(doc, v) => Ok(()),
            _ => Err(PatchError::TestFailed(path.clone())),
        };
    }
    let (c, key) = find(doc, path).ok_or_else(|| {
        failed(format!(
            "test operation does not apply: is missing path: {path}: {MISSING}"
        ))
    })?;
    let found =
        get_mut(c, &key).map_err(|e| failed(format!("error in test for path: '{path}': {e}")))?;
    match (found, &op.value) {
        (None, None) => Ok(()),
        (Some(v), Some(want)) if equal(v, want) => Ok(()),
        _ => Err(PatchError::TestFailed(path.clone())),
    }
}

/// The library's equality: structural, members holding null equal to absent ones, numbers
/// equal when written alike (as Go writes them).
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => objects_equal(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Value::Number(x), Value::Number(y)) => number_text(x) == number_text(y),
        _ => a == b,
    }
}

fn objects_equal(x: &Map<String, Value>, y: &Map<String, Value>) -> bool {
    x.len() == y.len()
        && x.iter().all(|(k, v)| match y.get(k) {
            None => false,
            Some(w) => match (v.is_null(), w.is_null()) {
                (true, true) => true,
                (false, false) => equal(v, w),
                _ => false,
            },
        })
}

/// A number as Go's encoding/json writes it.
pub(super) fn number_text(n: &serde_json::Number) -> String {
    if n.is_i64() || n.is_u64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or_default();
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        }
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{COPY_SIZE_LIMIT, Operation, PatchError, apply, changes_nothing_on_error};

    fn op(o: &str, path: &str, from: Option<&str>, value: Option<Value>) -> Operation {
        Operation {
            op: o.into(),
            path: path.into(),
            from: from.map(String::from),
            value,
        }
    }

    /// The document every case starts from.
    fn doc() -> Value {
        json!({"metadata": {"labels": {"x": "1", "a/b": "s", "t~": "n"}, "nil": null},
            "spec": {"replicas": 3, "ratio": 1.5, "args": ["a", "b", "c"], "data": {}}})
    }

    #[test]
    fn operations_apply_as_kube_apiservers_library_applies_them() {
        type Want = Result<Value, PatchError>;
        let failed = |s: &str| Err(PatchError::Failed(s.into()));
        let skipped = |p: &str| Err(PatchError::TestFailed(p.into()));
        let with = |f: &dyn Fn(&mut Value)| -> Want {
            let mut d = doc();
            f(&mut d);
            Ok(d)
        };
        let cases: Vec<(&str, Vec<Operation>, Want)> = vec![
            (
                "add a label",
                vec![op("add", "/metadata/labels/y", None, Some(json!("2")))],
                with(&|d| d["metadata"]["labels"]["y"] = json!("2")),
            ),
            (
                "add replaces an existing member",
                vec![op("add", "/spec/replicas", None, Some(json!(5)))],
                with(&|d| d["spec"]["replicas"] = json!(5)),
            ),
            (
                "escaped keys",
                vec![
                    op("replace", "/metadata/labels/a~1b", None, Some(json!("t"))),
                    op("remove", "/metadata/labels/t~0", None, None),
                ],
                with(&|d| {
                    d["metadata"]["labels"]["a/b"] = json!("t");
                    d["metadata"]["labels"]
                        .as_object_mut()
                        .unwrap()
                        .remove("t~");
                }),
            ),
            (
                "add at an index, at the end, at a negative index",
                vec![
                    op("add", "/spec/args/0", None, Some(json!("z"))),
                    op("add", "/spec/args/-", None, Some(json!("e"))),
                    op("add", "/spec/args/-1", None, Some(json!("m"))),
                ],
                // -1 counts from the end of the list with the new item: it goes last.
                with(&|d| d["spec"]["args"] = json!(["z", "a", "b", "c", "e", "m"])),
            ),
            (
                "add past the end",
                vec![op("add", "/spec/args/4", None, Some(json!("z")))],
                failed(
                    "error in add for path: '/spec/args/4': Unable to access invalid index: 4: invalid index referenced",
                ),
            ),
            (
                "add under a missing parent",
                vec![op("add", "/spec/x/y", None, Some(json!(1)))],
                failed(
                    "add operation does not apply: doc is missing path: \"/spec/x/y\": missing value",
                ),
            ),
            (
                "add under a null member",
                vec![op("add", "/metadata/nil/y", None, Some(json!(1)))],
                failed(
                    "add operation does not apply: doc is missing path: \"/metadata/nil/y\": missing value",
                ),
            ),
            (
                "a path without a leading slash ignores its first token",
                vec![op("add", "spec/y", None, Some(json!(1)))],
                with(&|d| d["y"] = json!(1)),
            ),
            (
                "an empty path",
                vec![op("add", "", None, Some(json!(1)))],
                failed("add operation does not apply: doc is missing path: \"\": missing value"),
            ),
            (
                "add with a bad index",
                vec![op("add", "/spec/args/x", None, Some(json!(1)))],
                failed(
                    "error in add for path: '/spec/args/x': value was not a proper array index: 'x': strconv.Atoi: parsing \"x\": invalid syntax",
                ),
            ),
            (
                "remove a list item",
                vec![op("remove", "/spec/args/1", None, None)],
                with(&|d| d["spec"]["args"] = json!(["a", "c"])),
            ),
            (
                "remove an absent member",
                vec![op("remove", "/spec/x", None, None)],
                failed(
                    "error in remove for path: '/spec/x': Unable to remove nonexistent key: x: missing value",
                ),
            ),
            (
                "replace an absent member adds it",
                vec![op("replace", "/spec/x", None, Some(json!(1)))],
                with(&|d| d["spec"]["x"] = json!(1)),
            ),
            (
                "replace the end of a list",
                vec![op("replace", "/spec/args/-", None, Some(json!(1)))],
                failed(
                    "replace operation does not apply: doc is missing key: /spec/args/-: missing value",
                ),
            ),
            (
                "replace the whole document",
                vec![op("replace", "", None, Some(json!({"a": 1})))],
                Ok(json!({"a": 1})),
            ),
            (
                "move a label",
                vec![op(
                    "move",
                    "/metadata/labels/z",
                    Some("/metadata/labels/x"),
                    None,
                )],
                with(&|d| {
                    let l = d["metadata"]["labels"].as_object_mut().unwrap();
                    l.remove("x");
                    l.insert("z".into(), json!("1"));
                }),
            ),
            (
                "move the first item to the end",
                vec![op("move", "/spec/args/-", Some("/spec/args/0"), None)],
                with(&|d| d["spec"]["args"] = json!(["b", "c", "a"])),
            ),
            (
                "move an absent member",
                vec![op("move", "/spec/y", Some("/spec/x"), None)],
                failed(
                    "error in move for path: 'x': Unable to remove nonexistent key: x: missing value",
                ),
            ),
            (
                "move without from",
                vec![op("move", "/spec/y", None, None)],
                failed(
                    "move operation failed to decode from: operation, missing from field: missing value",
                ),
            ),
            (
                "copy a label",
                vec![op(
                    "copy",
                    "/metadata/labels/y",
                    Some("/metadata/labels/x"),
                    None,
                )],
                with(&|d| d["metadata"]["labels"]["y"] = json!("1")),
            ),
            (
                "copy an absent member copies null",
                vec![op("copy", "/spec/y", Some("/spec/x"), None)],
                with(&|d| d["spec"]["y"] = json!(null)),
            ),
            (
                "copy to a missing parent",
                vec![op("copy", "/x/y", Some("/spec/replicas"), None)],
                failed(
                    "copy operation does not apply: doc is missing destination path: /x/y: missing value",
                ),
            ),
            (
                "a true test, then a change",
                vec![
                    op("test", "/spec/replicas", None, Some(json!(3.0))),
                    op("replace", "/spec/replicas", None, Some(json!(4))),
                ],
                with(&|d| d["spec"]["replicas"] = json!(4)),
            ),
            (
                "a test compares whole values",
                vec![op(
                    "test",
                    "/spec",
                    None,
                    Some(json!({"replicas": 3, "ratio": 1.5, "args": ["a", "b", "c"], "data": {}})),
                )],
                Ok(doc()),
            ),
            (
                "a false test",
                vec![
                    op("replace", "/spec/replicas", None, Some(json!(4))),
                    op("test", "/spec/replicas", None, Some(json!(3))),
                ],
                skipped("/spec/replicas"),
            ),
            (
                "a test of an absent member with a value fails",
                vec![op("test", "/spec/data/color", None, Some(json!("red")))],
                skipped("/spec/data/color"),
            ),
            (
                "a test of an absent member without a value passes",
                vec![op("test", "/spec/data/color", None, None)],
                Ok(doc()),
            ),
            (
                "a test under a missing parent is an error",
                vec![op("test", "/data/color", None, Some(json!("red")))],
                failed(
                    "test operation does not apply: is missing path: /data/color: missing value",
                ),
            ),
            (
                "a test of a bad index is an error",
                vec![op("test", "/spec/args/9", None, Some(json!("a")))],
                failed(
                    "error in test for path: '/spec/args/9': Unable to access invalid index: 9: invalid index referenced",
                ),
            ),
            (
                "adding the value a member has changes nothing",
                vec![op("add", "/spec/replicas", None, Some(json!(3)))],
                Ok(doc()),
            ),
            (
                "replacing an item with itself changes nothing",
                vec![op("replace", "/spec/args/0", None, Some(json!("a")))],
                Ok(doc()),
            ),
            (
                "an unknown operation",
                vec![op("merge", "/spec", None, None)],
                failed("Unexpected kind: merge"),
            ),
        ];
        let (mut exact_unchanged, mut exact_failed) = (0, 0);
        for (name, ops, want) in cases {
            let mut d = doc();
            let got = apply(&mut d, &ops);
            // One operation but a move says exactly whether it changed the document, and
            // changes nothing when it fails; several say whether one of them wrote.
            let exact = changes_nothing_on_error(&ops);
            match &got {
                Ok(changed) if exact => {
                    assert_eq!(*changed, d != doc(), "{name}: changed");
                    exact_unchanged += usize::from(!changed);
                }
                Ok(changed) => assert!(*changed || d == doc(), "{name}: changed"),
                Err(_) if exact => {
                    assert_eq!(d, doc(), "{name}: unchanged after an error");
                    exact_failed += 1;
                }
                Err(_) => {}
            }
            assert_eq!(got.map(|_| d), want, "{name}");
        }
        assert!(exact_unchanged >= 2 && exact_failed >= 5);
    }

    /// Figures from the library itself (gopkg.in/evanphx/json-patch.v4 v4.13.0 with the limit
    /// kube-apiserver sets).
    #[test]
    fn copies_stop_at_kube_apiservers_accumulated_copy_size_limit() {
        let copies = |from: &str, n: usize| -> Vec<Operation> {
            (0..n)
                .map(|i| op("copy", &format!("/spec/c{i}"), Some(from), None))
                .collect()
        };
        let exceeded = |accumulated| {
            Err(PatchError::CopySizeExceeded {
                accumulated,
                limit: COPY_SIZE_LIMIT,
            })
        };
        // Three copies of a 1 MiB string: the third passes 3 MiB.
        let mut d = json!({"spec": {"s": "x".repeat(1024 * 1024)}});
        assert_eq!(apply(&mut d, &copies("/spec/s", 2)), Ok(true));
        let mut d = json!({"spec": {"s": "x".repeat(1024 * 1024)}});
        let got = apply(&mut d, &copies("/spec/s", 3));
        assert_eq!(got, exceeded(3_145_734));
        assert_eq!(
            got.map_err(|e| e.to_string()),
            Err("Unable to complete the copy, the accumulated size increase of copy is 3145734, exceeding the limit 3145728".into())
        );
        // Copying an object into itself doubles it each time: stopped long before 25 copies.
        let spec: Value = serde_json::from_str(SPEC).unwrap_or_default();
        let mut d = json!({ "spec": spec });
        assert_eq!(apply(&mut d, &copies("/spec", 25)), exceeded(5_340_957));
        // Null and absent members copy nothing.
        let mut d = json!({"spec": {"nil": null}});
        let ops = [copies("/spec/nil", 1), copies("/spec/absent", 1)].concat();
        assert!(apply(&mut d, &ops).is_ok());
    }

    /// A spec with every kind of value and every escape Go's encoder writes.
    const SPEC: &str = r#"{"replicas":3,"ratio":1.5,"text":"<a&b>\u2028\n\u0001é\b\f\"\\","nil":null,"args":["a",null,true],"big":1e+21,"f":1000,"g":0.000001,"h":1e-7}"#;

    #[test]
    fn copied_sizes_are_go_encodings() {
        let spec: Value = serde_json::from_str(SPEC).unwrap_or_default();
        assert_eq!(super::go_size(&spec), 157);
    }

    #[test]
    fn failed_tests_read_as_upstream() {
        assert_eq!(
            PatchError::TestFailed("/a".into()).to_string(),
            "testing value /a failed: test failed"
        );
    }
}
