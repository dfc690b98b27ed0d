//! JSON text decoded on first read: a request's `object` and `oldObject` as celgate received
//! them, with the depth limit and the decoder (fast for ordinary depth, on a growing stack for
//! deeper text) that read them. CEL reads the text through a [`JsonTape`], which builds no
//! tree; whatever else reads the object gets it decoded into a `serde_json::Value`. A tape
//! may also be written while the review is read ([`LazyJson::tape`]), in the same pass.

use std::fmt;
use std::sync::OnceLock;

use celgate_cel::JsonTape;
use serde::Deserialize;
use serde_json::Value;
use serde_json::de::SliceRead;
use serde_json::value::RawValue;
use thiserror::Error;

/// The deepest nesting of arrays and objects an object may hold: apimachinery's JSON limit,
/// so kube-apiserver never sends one deeper.
pub const MAX_OBJECT_DEPTH: usize = 10_000;

/// Why JSON text could not be decoded.
#[derive(Debug, Error)]
pub enum JsonError {
    /// The text is not JSON, or holds a number JSON values cannot (such as `1e400`).
    #[error("{0}")]
    Syntax(#[from] serde_json::Error),
    /// The text nests deeper than allowed.
    #[error("nested deeper than {0} levels")]
    TooDeep(usize),
}

/// The nesting depth of a JSON text (arrays and objects), counted without recursion; strings
/// are skipped so brackets inside them do not count. Stops counting past `limit`.
pub fn nesting_depth(text: &[u8], limit: usize) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
                if deepest > limit {
                    return deepest;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Decodes JSON text nested up to `limit` levels. serde_json's fast path serves text of
/// ordinary depth (up to 128 levels); deeper text is read on a stack that grows as the
/// nesting needs.
pub fn parse(text: &[u8], limit: usize) -> Result<Value, JsonError> {
    parse_with(
        text,
        limit,
        || serde_json::from_slice::<Value>(text),
        |de| Value::deserialize(de),
    )
}

/// [`parse`] for text known to be UTF-8, which the fast path then need not check again.
fn parse_str(text: &str, limit: usize) -> Result<Value, JsonError> {
    parse_with(
        text.as_bytes(),
        limit,
        || serde_json::from_str::<Value>(text),
        |de| Value::deserialize(de),
    )
}

/// [`parse_str`] into a [`JsonTape`]: the same limits and errors, and no tree.
fn tape(text: &str, limit: usize) -> Result<JsonTape, JsonError> {
    parse_with(
        text.as_bytes(),
        limit,
        || {
            let mut de = serde_json::Deserializer::from_str(text);
            let tape = JsonTape::read(text, &mut de)?;
            de.end()?;
            Ok(tape)
        },
        |de| JsonTape::read(text, de),
    )
}

/// The deserializer [`parse_with`] reads deep text with.
type Deep<'a, 'de> = serde_stacker::Deserializer<&'a mut serde_json::Deserializer<SliceRead<'de>>>;

/// Reads `text` with `fast` (serde_json's own recursion limit of 128 levels), or with `deep`
/// on a stack that grows when the text is deeper than that and within `limit`.
fn parse_with<'t, T>(
    text: &'t [u8],
    limit: usize,
    fast: impl FnOnce() -> Result<T, serde_json::Error>,
    deep: impl FnOnce(Deep<'_, 't>) -> Result<T, serde_json::Error>,
) -> Result<T, JsonError> {
    match fast() {
        Ok(value) => Ok(value),
        // serde_json says so only in its message.
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
            if nesting_depth(text, limit) > limit {
                return Err(JsonError::TooDeep(limit));
            }
            let mut de = serde_json::Deserializer::from_slice(text);
            de.disable_recursion_limit();
            let value = deep(serde_stacker::Deserializer::new(&mut de))?;
            de.end()?;
            Ok(value)
        }
        Err(e) => Err(e.into()),
    }
}

static NULL: Value = Value::Null;

/// A JSON value kept as text until first read, then decoded once (any thread may read it):
/// into a [`JsonTape`] for CEL, into a `serde_json::Value` for everything else. Given as a
/// tape, it has no text: the `serde_json::Value` is then converted from the tape.
#[derive(Default)]
pub struct LazyJson {
    text: Option<Box<RawValue>>,
    value: OnceLock<Result<Value, String>>,
    tape: OnceLock<Result<JsonTape, String>>,
}

impl fmt::Debug for LazyJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.value.get() {
            Some(Ok(v)) => write!(f, "{v}"),
            Some(Err(e)) => write!(f, "<not decodable: {e}>"),
            None => write!(f, "<not yet decoded>"),
        }
    }
}

impl LazyJson {
    /// A value that is already decoded.
    pub fn decoded(value: Value) -> Self {
        Self {
            text: None,
            value: OnceLock::from(Ok(value)),
            tape: OnceLock::new(),
        }
    }

    /// JSON text (already checked to be JSON), decoded on first read.
    pub fn text(text: Box<RawValue>) -> Self {
        if text.get() == "null" {
            return Self::decoded(Value::Null);
        }
        Self {
            text: Some(text),
            value: OnceLock::new(),
            tape: OnceLock::new(),
        }
    }

    /// A value already read as a tape (see [`JsonTape::read_in`]).
    pub fn tape(tape: JsonTape) -> Self {
        if tape.is_null() {
            return Self::decoded(Value::Null);
        }
        Self {
            text: None,
            value: OnceLock::new(),
            tape: OnceLock::from(Ok(tape)),
        }
    }

    /// The value, decoded on first read. Text that cannot be decoded (a number out of range,
    /// nesting deeper than [`MAX_OBJECT_DEPTH`]) reads as `null`, and [`LazyJson::error`]
    /// says why; a caller answers such a request as malformed.
    pub fn get(&self) -> &Value {
        let value = self
            .value
            .get_or_init(|| match (&self.text, self.tape.get()) {
                (Some(text), _) => {
                    parse_str(text.get(), MAX_OBJECT_DEPTH).map_err(|e| e.to_string())
                }
                (None, Some(Ok(tape))) => Ok(tape.to_json()),
                (None, _) => Ok(Value::Null),
            });
        value.as_ref().unwrap_or(&NULL)
    }

    /// A value of the caller's own, to change: decoded from the text when not decoded yet
    /// (which leaves the shared value undecoded, to be decoded only if read), else a copy.
    /// Text that cannot be decoded gives `null`, as for [`LazyJson::get`].
    pub fn owned(&self) -> Value {
        if self.value.get().is_none()
            && let Some(text) = &self.text
            && let Ok(value) = parse_str(text.get(), MAX_OBJECT_DEPTH)
        {
            return value;
        }
        // Decoded already, given as a tape, or not decodable (`get` records why).
        self.get().clone()
    }

    /// The value as CEL reads it: JSON text is read in place, through a [`JsonTape`] built on
    /// first read, unless it was already decoded. Text that cannot be decoded reads as `null`
    /// (as for [`LazyJson::get`]).
    pub fn cel(&self) -> celgate_cel::Value<'_> {
        let text = match (&self.text, self.value.get(), self.tape.get()) {
            (_, Some(Ok(value)), _) => return celgate_cel::Value::from_json(value),
            (Some(text), _, _) => text,
            (None, _, Some(Ok(tape))) => return tape.root(),
            (None, _, _) => return celgate_cel::Value::Null,
        };
        let tape = self
            .tape
            .get_or_init(|| tape(text.get(), MAX_OBJECT_DEPTH).map_err(|e| e.to_string()));
        tape.as_ref()
            .map_or(celgate_cel::Value::Null, JsonTape::root)
    }

    /// Why the value read as `null` though its text was not: set only once it was read.
    pub fn error(&self) -> Option<&str> {
        fn failed<T>(read: Option<&Result<T, String>>) -> Option<&str> {
            read?.as_ref().err().map(String::as_str)
        }
        failed(self.value.get()).or_else(|| failed(self.tape.get()))
    }

    /// Whether the value has been read, decoded or as a tape (or was given decoded).
    pub fn is_decoded(&self) -> bool {
        self.value.get().is_some() || self.tape.get().is_some()
    }

    /// Whether a `serde_json::Value` of it was built (rather than only its tape).
    #[cfg(test)]
    pub(crate) fn built_tree(&self) -> bool {
        self.value.get().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_inside_strings_do_not_count_as_nesting() {
        assert_eq!(nesting_depth(br#"{"a": [1, {"b": 2}]}"#, 100), 3);
        assert_eq!(nesting_depth(br#"{"a": "[[[{{{", "b": "\\"}"#, 100), 1);
        assert_eq!(nesting_depth(br#"{"a": "\"[[[", "b": []}"#, 100), 2);
        // Counting stops past the limit.
        assert_eq!(nesting_depth(b"[[[[[[", 3), 4);
    }

    #[test]
    fn text_is_decoded_up_to_the_limit() {
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        // Deeper than serde_json's own limit of 128, within ours.
        let value = parse(nested(300).as_bytes(), 300).expect("within the limit");
        assert!(value.is_array());
        let err = parse(nested(301).as_bytes(), 300).expect_err("too deep");
        assert_eq!(err.to_string(), "nested deeper than 300 levels");
        assert!(matches!(parse(b"[1,", 10), Err(JsonError::Syntax(_))));
    }

    #[test]
    fn a_tape_is_read_up_to_the_limit_as_text_is_decoded() {
        let nested = |depth: usize| format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
        // Deeper than serde_json's own limit of 128, within ours: read on a growing stack.
        let text = nested(300);
        let read = tape(&text, 300).expect("within the limit");
        let mut v = read.root();
        for _ in 0..300 {
            let celgate_cel::Value::List(l) = v else {
                panic!("a list")
            };
            v = l.get(0).expect("one element");
        }
        assert_eq!(v, celgate_cel::Value::Int(1));
        let err = tape(&nested(301), 300).expect_err("too deep");
        assert_eq!(err.to_string(), "nested deeper than 300 levels");
        // Trailing text is refused, as when decoding.
        let err = tape("[1] 2", 10).expect_err("trailing characters");
        assert_eq!(
            err.to_string(),
            parse(b"[1] 2", 10).expect_err("the same").to_string()
        );
    }

    #[test]
    fn an_owned_value_is_decoded_apart_from_the_shared_one() {
        let text = |t: &str| LazyJson::text(RawValue::from_string(t.to_string()).expect("JSON"));
        let lazy = text(r#"{"a": [1, 2], "b": 18446744073709551615}"#);
        let want = serde_json::json!({"a": [1, 2], "b": 18446744073709551615u64});
        assert_eq!(lazy.owned(), want);
        assert!(!lazy.is_decoded(), "the shared value is left undecoded");
        assert_eq!(lazy.get(), &want);
        // Once the shared one is decoded, a copy of it.
        assert_eq!(lazy.owned(), want);
        // Text that cannot be decoded gives null, and says why, as reading it does.
        let bad = text("[1e400]");
        assert_eq!(bad.owned(), Value::Null);
        let read = text("[1e400]");
        assert_eq!(read.get(), &Value::Null);
        assert!(
            bad.error()
                .is_some_and(|e| e.contains("number out of range"))
        );
        assert_eq!(bad.error(), read.error());
    }
}
