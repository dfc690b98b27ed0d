//! An AdmissionRequest as celgate received it: its attributes decoded, its `object` and
//! `oldObject` kept as JSON text and decoded the first time something reads them. A review that
//! no policy evaluates (its namespace or object is not selected, its match conditions fail) is
//! answered without building either object, and an UPDATE whose policies never read
//! `oldObject` never builds it.

use std::fmt;
use std::sync::OnceLock;

use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use thiserror::Error;

use crate::request::{Request, RequestError};

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
    parse_with(text, limit, || serde_json::from_slice::<Value>(text))
}

/// [`parse`] for text known to be UTF-8, which the fast path then need not check again.
fn parse_str(text: &str, limit: usize) -> Result<Value, JsonError> {
    parse_with(text.as_bytes(), limit, || {
        serde_json::from_str::<Value>(text)
    })
}

fn parse_with(
    text: &[u8],
    limit: usize,
    fast: impl FnOnce() -> Result<Value, serde_json::Error>,
) -> Result<Value, JsonError> {
    match fast() {
        Ok(value) => Ok(value),
        // serde_json says so only in its message.
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => {
            if nesting_depth(text, limit) > limit {
                return Err(JsonError::TooDeep(limit));
            }
            let mut de = serde_json::Deserializer::from_slice(text);
            de.disable_recursion_limit();
            let value = Value::deserialize(serde_stacker::Deserializer::new(&mut de))?;
            de.end()?;
            Ok(value)
        }
        Err(e) => Err(e.into()),
    }
}

static NULL: Value = Value::Null;

/// A JSON value kept as text until first read, then decoded once (any thread may read it).
#[derive(Default)]
pub struct LazyJson {
    text: Option<Box<RawValue>>,
    value: OnceLock<Result<Value, String>>,
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
        }
    }

    /// The value, decoded on first read. Text that cannot be decoded (a number out of range,
    /// nesting deeper than [`MAX_OBJECT_DEPTH`]) reads as `null`, and [`LazyJson::error`]
    /// says why; a caller answers such a request as malformed.
    pub fn get(&self) -> &Value {
        let value = self.value.get_or_init(|| match &self.text {
            None => Ok(Value::Null),
            Some(text) => parse_str(text.get(), MAX_OBJECT_DEPTH).map_err(|e| e.to_string()),
        });
        value.as_ref().unwrap_or(&NULL)
    }

    /// Why the value read as `null` though its text was not: set only once it was read.
    pub fn error(&self) -> Option<&str> {
        self.value.get()?.as_ref().err().map(String::as_str)
    }

    /// Whether the value has been decoded (or was given decoded).
    pub fn is_decoded(&self) -> bool {
        self.value.get().is_some()
    }
}

/// The `request` member of an AdmissionReview, with `object` and `oldObject` decoded lazily.
#[derive(Debug)]
pub struct ReceivedRequest {
    /// Every member but `object` and `oldObject`: what CEL's `request` variable reads.
    fields: Value,
    object: LazyJson,
    old_object: LazyJson,
}

impl ReceivedRequest {
    /// A request already decoded as one JSON value.
    pub fn from_value(mut request: Value) -> Self {
        let mut take = |key: &str| {
            request
                .as_object_mut()
                .and_then(|m| m.remove(key))
                .map_or_else(LazyJson::default, LazyJson::decoded)
        };
        let (object, old_object) = (take("object"), take("oldObject"));
        Self {
            fields: request,
            object,
            old_object,
        }
    }

    /// The attributes of the request, for matching and evaluation.
    pub fn request(&self) -> Result<Request<'_>, RequestError> {
        Request::from_parts(&self.fields, &self.object, &self.old_object)
    }

    /// Every member of the request but `object` and `oldObject`.
    pub fn fields(&self) -> &Value {
        &self.fields
    }

    /// The object or old object that was read but could not be decoded, if any: such a
    /// request is malformed, whatever was decided while it read as `null`.
    pub fn decode_error(&self) -> Option<RequestError> {
        [("object", &self.object), ("oldObject", &self.old_object)]
            .into_iter()
            .find_map(|(field, json)| {
                json.error().map(|why| RequestError::Undecodable {
                    field,
                    why: why.to_string(),
                })
            })
    }
}

impl<'de> Deserialize<'de> for ReceivedRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RequestVisitor)
    }
}

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = ReceivedRequest;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionRequest object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReceivedRequest, A::Error> {
        let mut fields = Map::new();
        let (mut object, mut old_object) = (None, None);
        // A repeated member counts once, the last time, as when decoding into a `Value`.
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "object" => object = Some(map.next_value::<Box<RawValue>>()?),
                "oldObject" => old_object = Some(map.next_value::<Box<RawValue>>()?),
                _ => {
                    let value = map.next_value::<Value>()?;
                    fields.insert(key, value);
                }
            }
        }
        let lazy =
            |text: Option<Box<RawValue>>| text.map_or_else(LazyJson::default, LazyJson::text);
        Ok(ReceivedRequest {
            fields: Value::Object(fields),
            object: lazy(object),
            old_object: lazy(old_object),
        })
    }
}

/// Reads a member that should be a request: `Some` for a JSON object, `None` for anything else
/// (consumed), so the caller can say the review has no request.
pub struct MaybeRequest(pub Option<ReceivedRequest>);

impl<'de> Deserialize<'de> for MaybeRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MaybeRequestVisitor)
    }
}

struct MaybeRequestVisitor;

impl<'de> Visitor<'de> for MaybeRequestVisitor {
    type Value = MaybeRequest;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<MaybeRequest, A::Error> {
        RequestVisitor.visit_map(map).map(|r| MaybeRequest(Some(r)))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeRequest, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(MaybeRequest(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<MaybeRequest, E> {
        Ok(MaybeRequest(None))
    }

    fn visit_i64<E>(self, _: i64) -> Result<MaybeRequest, E> {
        Ok(MaybeRequest(None))
    }

    fn visit_u64<E>(self, _: u64) -> Result<MaybeRequest, E> {
        Ok(MaybeRequest(None))
    }

    fn visit_f64<E>(self, _: f64) -> Result<MaybeRequest, E> {
        Ok(MaybeRequest(None))
    }

    fn visit_str<E>(self, _: &str) -> Result<MaybeRequest, E> {
        Ok(MaybeRequest(None))
    }

    fn visit_unit<E>(self) -> Result<MaybeRequest, E> {
        Ok(MaybeRequest(None))
    }

    fn visit_none<E>(self) -> Result<MaybeRequest, E> {
        Ok(MaybeRequest(None))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

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

    fn received(text: &str) -> ReceivedRequest {
        serde_json::from_str(text).expect("a request")
    }

    #[test]
    fn objects_stay_text_until_read_and_are_then_decoded_once() {
        let r = received(
            r#"{"uid": "u", "operation": "UPDATE", "object": {"a": [1, 2]},
                "oldObject": {"a": []}, "kind": {"version": "v1", "kind": "K"},
                "resource": {"version": "v1", "resource": "ks"}}"#,
        );
        assert!(!r.object.is_decoded() && !r.old_object.is_decoded());
        // `request` holds every other member.
        assert_eq!(
            r.fields(),
            &json!({"uid": "u", "operation": "UPDATE", "kind": {"version": "v1", "kind": "K"},
                "resource": {"version": "v1", "resource": "ks"}})
        );
        let req = r.request().expect("valid");
        assert_eq!(req.object(), &json!({"a": [1, 2]}));
        assert!(r.object.is_decoded() && !r.old_object.is_decoded());
        assert!(std::ptr::eq(req.object(), req.object()), "decoded once");
        assert_eq!(req.old_object(), &json!({"a": []}));
        assert!(r.decode_error().is_none());
    }

    #[test]
    fn absent_and_null_objects_read_as_null_and_repeats_count_last() {
        let r = received(
            r#"{"object": null, "uid": "a", "uid": "b", "oldObject": 1, "oldObject": {}}"#,
        );
        assert!(r.object.is_decoded(), "null needs no decoding");
        assert_eq!(r.object.get(), &Value::Null);
        assert_eq!(r.old_object.get(), &json!({}));
        assert_eq!(r.fields(), &json!({"uid": "b"}));
        let none = received(r#"{"uid": "a"}"#);
        assert_eq!(none.object.get(), &Value::Null);
        assert_eq!(none.old_object.get(), &Value::Null);
    }

    #[test]
    fn an_object_that_cannot_be_decoded_reads_as_null_and_says_why() {
        let r = received(r#"{"object": {"n": 1e400}}"#);
        assert!(r.decode_error().is_none(), "not read yet");
        assert_eq!(r.object.get(), &Value::Null);
        assert_eq!(
            r.decode_error().map(|e| e.to_string()).as_deref(),
            Some("request.object cannot be decoded: number out of range at line 1 column 11")
        );
        let deep = format!(
            r#"{{"oldObject": {}{}}}"#,
            "[".repeat(MAX_OBJECT_DEPTH + 1),
            "]".repeat(MAX_OBJECT_DEPTH + 1)
        );
        let r = received(&deep);
        assert_eq!(r.old_object.get(), &Value::Null);
        assert_eq!(
            r.decode_error().map(|e| e.to_string()).as_deref(),
            Some("request.oldObject cannot be decoded: nested deeper than 10000 levels")
        );
    }

    #[test]
    fn a_request_decoded_whole_reads_the_same() {
        let whole = json!({"uid": "u", "operation": "CREATE", "object": {"a": 1},
            "kind": {"version": "v1", "kind": "K"}, "resource": {"version": "v1", "resource": "ks"}});
        let text = received(&whole.to_string());
        let value = ReceivedRequest::from_value(whole);
        assert_eq!(value.fields(), text.fields());
        let (a, b) = (
            value.request().expect("valid"),
            text.request().expect("valid"),
        );
        assert_eq!(a.object(), b.object());
        assert_eq!(a.old_object(), &Value::Null);
        assert_eq!(a.uid, b.uid);
    }

    #[test]
    fn a_member_that_is_not_an_object_is_no_request() {
        for text in ["null", "1", "-1", "1.5", "true", r#""r""#, "[1, [2], {}]"] {
            let read: MaybeRequest = serde_json::from_str(text).expect("any JSON");
            assert!(read.0.is_none(), "{text}");
        }
        let read: MaybeRequest = serde_json::from_str(r#"{"uid": "u"}"#).expect("an object");
        assert!(read.0.is_some());
    }
}
