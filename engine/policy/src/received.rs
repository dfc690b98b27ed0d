//! An AdmissionRequest as celgate received it: its attributes decoded, its `object` and
//! `oldObject` kept as JSON text and decoded the first time something reads them. A review that
//! no policy evaluates (its namespace or object is not selected, its match conditions fail) is
//! answered without building either object, and an UPDATE whose policies never read
//! `oldObject` never builds it (unless the scanner below wrote its tape).
//!
//! Read with [`MaybeRequest::seed`] over the review's text, `object` is instead written as a
//! [`JsonTape`] in the same pass as the review (nearly every policy reads it, and one pass
//! costs less than skipping the text and reading it again); `oldObject` stays text. Read with
//! celgate's own scanner ([`ReceivedRequest::scan`]), both are written as tapes. `oldObject`'s
//! costs about 3 µs per 5 KB more than serde_json's skip of its text, which the faster read of
//! `object` pays back (a realistic UPDATE review costs what it did before the scanner), and a
//! policy that reads it finds it read.

use std::fmt;
use std::sync::Arc;

use celgate_cel::JsonTape;
use celgate_cel::json_tape::{Declined, Scan, Tally};
use serde::de::{self, Deserialize, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::json_text::LazyJson;
use crate::request::{Request, RequestError};

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

    /// Whether `object` was read before anything asked for it: written as a tape in the
    /// review's own pass (see [`MaybeRequest::seed`]), or given decoded.
    pub fn object_read_with_request(&self) -> bool {
        self.object.is_decoded()
    }

    /// Whether a `serde_json::Value` of `object` was built (rather than only its tape).
    #[cfg(test)]
    pub(crate) fn object_tree_built(&self) -> bool {
        self.object.built_tree()
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

    /// Reads the next value of `scan` as a request, its `object` and `oldObject` as tapes
    /// that share the text (celgate's own scanner, the fast way to read a review); `None` when
    /// the value is not an object, read past. [`Declined`] where the scanner leaves the text
    /// to serde_json: read it with [`MaybeRequest::seed`] then.
    pub fn scan<T: Tally>(scan: &mut Scan<'_, T>) -> Result<Option<Self>, Declined> {
        let mut fields = Map::new();
        let (mut object, mut old_object) = (None, None);
        // A repeated member counts once, the last time, as when decoding into a `Value`.
        let read = scan.members(|scan, key| {
            match key {
                "object" => object = Some(scan.tape()?),
                "oldObject" => old_object = Some(scan.tape()?),
                _ => {
                    fields.insert(key.to_string(), scan.json()?);
                }
            }
            Ok(())
        })?;
        if !read {
            scan.skip()?;
            return Ok(None);
        }
        let lazy = |tape: Option<JsonTape>| tape.map_or_else(LazyJson::default, LazyJson::tape);
        Ok(Some(ReceivedRequest {
            fields: Value::Object(fields),
            object: lazy(object),
            old_object: lazy(old_object),
        }))
    }
}

impl<'de> Deserialize<'de> for ReceivedRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(RequestVisitor { shared: None })
    }
}

/// Reads a request; with `shared`, the text being read, `object` is written as a tape of it.
struct RequestVisitor<'t> {
    shared: Option<&'t Arc<str>>,
}

impl<'de> Visitor<'de> for RequestVisitor<'de> {
    type Value = ReceivedRequest;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an AdmissionRequest object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReceivedRequest, A::Error> {
        let mut fields = Map::new();
        let (mut object, mut old_object) = (None, None);
        let mut object_tape = None;
        // A repeated member counts once, the last time, as when decoding into a `Value`.
        while let Some(key) = map.next_key::<String>()? {
            match (key.as_str(), self.shared) {
                ("object", Some(text)) => {
                    object_tape = Some(map.next_value_seed(TapeSeed(text))?);
                }
                ("object", None) => object = Some(map.next_value::<Box<RawValue>>()?),
                ("oldObject", _) => old_object = Some(map.next_value::<Box<RawValue>>()?),
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
            object: object_tape.map_or_else(|| lazy(object), LazyJson::tape),
            old_object: lazy(old_object),
        })
    }
}

/// Writes a member of the text being read as a tape sharing that text.
struct TapeSeed<'t>(&'t Arc<str>);

impl<'de> DeserializeSeed<'de> for TapeSeed<'de> {
    type Value = JsonTape;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<JsonTape, D::Error> {
        JsonTape::read_in(self.0, de)
    }
}

/// Reads a member that should be a request: `Some` for a JSON object, `None` for anything else
/// (consumed), so the caller can say the review has no request.
pub struct MaybeRequest(pub Option<ReceivedRequest>);

impl<'de> Deserialize<'de> for MaybeRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(MaybeRequestVisitor { shared: None })
    }
}

impl MaybeRequest {
    /// Reads a member that should be a request out of `text`, the document being read, with
    /// its `object` written as a tape in the same pass. The deserializer must read `text`
    /// itself (not a copy), and fails where the text's values do (a number out of range,
    /// nesting past its recursion limit) though deserializing a [`MaybeRequest`] would defer
    /// that to when the object is read: a caller falls back to that on an error.
    pub fn seed(text: &Arc<str>) -> MaybeRequestSeed<'_> {
        MaybeRequestSeed(text)
    }
}

/// Reads a member that should be a request, its `object` as a tape (see [`MaybeRequest::seed`]).
pub struct MaybeRequestSeed<'t>(&'t Arc<str>);

impl<'de> DeserializeSeed<'de> for MaybeRequestSeed<'de> {
    type Value = MaybeRequest;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<MaybeRequest, D::Error> {
        de.deserialize_any(MaybeRequestVisitor {
            shared: Some(self.0),
        })
    }
}

struct MaybeRequestVisitor<'t> {
    shared: Option<&'t Arc<str>>,
}

impl<'de> Visitor<'de> for MaybeRequestVisitor<'de> {
    type Value = MaybeRequest;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<MaybeRequest, A::Error> {
        RequestVisitor {
            shared: self.shared,
        }
        .visit_map(map)
        .map(|r| MaybeRequest(Some(r)))
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
    use crate::json_text::MAX_OBJECT_DEPTH;

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
    fn cel_reads_objects_in_place_with_the_same_limits_and_errors() {
        use celgate_cel::value::Map;
        let r = received(
            r#"{"uid": "u", "operation": "UPDATE", "object": {"a": [1, 2]},
                "oldObject": {"n": 1e400}, "kind": {"version": "v1", "kind": "K"},
                "resource": {"version": "v1", "resource": "ks"}}"#,
        );
        let req = r.request().expect("valid");
        let object = req.cel_object();
        assert!(
            matches!(object, celgate_cel::Value::Map(Map::Tape(_))),
            "read in place: {object:?}"
        );
        assert_eq!(object, celgate_cel::Value::from_json(&json!({"a": [1, 2]})));
        assert!(r.decode_error().is_none());
        // What cannot be decoded reads as null and says why, as when decoded.
        assert_eq!(req.cel_old_object(), celgate_cel::Value::Null);
        assert_eq!(
            r.decode_error().map(|e| e.to_string()).as_deref(),
            Some("request.oldObject cannot be decoded: number out of range at line 1 column 11")
        );
        assert!(r.object.is_decoded() && req.object() == &json!({"a": [1, 2]}));
    }

    #[test]
    fn with_the_seed_the_object_is_a_tape_of_the_text_and_the_old_object_stays_text() {
        let text: Arc<str> = Arc::from(
            r#"{"uid": "u", "operation": "UPDATE", "object": {"a": [1, 18446744073709551615]},
                "oldObject": {"a": []}, "kind": {"version": "v1", "kind": "K"},
                "resource": {"version": "v1", "resource": "ks"}}"#,
        );
        let mut de = serde_json::Deserializer::from_str(&text);
        let r = MaybeRequest::seed(&text)
            .deserialize(&mut de)
            .expect("a request")
            .0
            .expect("an object");
        assert!(r.object_read_with_request() && !r.object.built_tree());
        assert!(!r.old_object.is_decoded());
        let req = r.request().expect("valid");
        assert_eq!(
            req.cel_object(),
            celgate_cel::Value::from_json(&json!({"a": [1, 18446744073709551615u64]}))
        );
        assert_eq!(req.object(), &json!({"a": [1, 18446744073709551615u64]}));
        assert_eq!(req.old_object(), &json!({"a": []}));
        // Read as before without the seed: nothing until asked.
        let lazy = received(&text);
        assert!(!lazy.object_read_with_request());
        // The seed fails where decoding the object would; the caller reads the text again.
        let bad: Arc<str> = Arc::from(r#"{"object": {"n": 1e400}}"#);
        let mut de = serde_json::Deserializer::from_str(&bad);
        let err = MaybeRequest::seed(&bad).deserialize(&mut de).err();
        assert_eq!(
            err.map(|e| e.to_string()).as_deref(),
            Some("number out of range at line 1 column 22")
        );
    }

    #[test]
    fn validation_reads_the_object_as_a_tape_without_building_a_tree() {
        use crate::model::{Validation, ValidationAction};
        use crate::validate::test_policies::{bound, cache, context, create_deployment, spec};
        let text = create_deployment(json!({"spec": {"replicas": 9}})).to_string();
        let r = received(&text);
        let policy = bound(
            spec(vec![Validation {
                expression: "object.spec.replicas <= 5".into(),
                ..Default::default()
            }]),
            vec![ValidationAction::Deny],
        );
        let namespaces = cache();
        let req = r.request().expect("valid");
        let out = crate::validate::validate(&[policy], &req, &context(&namespaces));
        assert!(out.denial.is_some(), "the policy read the object: {out:?}");
        assert!(r.object.is_decoded(), "read");
        assert!(
            !r.object.built_tree(),
            "read through the tape, no tree built"
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
