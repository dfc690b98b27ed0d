//! The AdmissionReview v1 codec: decode a review into a borrowed engine request, encode the
//! engine's outcome as the review response kube-apiserver expects.

use celgate_cel::Compatibility;
use celgate_engine::apivalidation::FieldError;
use celgate_engine::request::Operation;
use celgate_engine::validate::{Outcome, VALIDATION_FAILURE_KEY};
use celgate_engine::{Request, RequestError};
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};
use thiserror::Error;

/// Why a body is not an AdmissionReview celgate can answer (HTTP 400).
#[derive(Debug, Error)]
pub enum ReviewError {
    /// The body is not JSON.
    #[error("request body is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The JSON is not an admission.k8s.io/v1 AdmissionReview.
    #[error(
        "expected an AdmissionReview of apiVersion admission.k8s.io/v1, got apiVersion {api_version:?} kind {kind:?}"
    )]
    NotAReview {
        /// The apiVersion found.
        api_version: String,
        /// The kind found.
        kind: String,
    },
    /// The review has no request.
    #[error("AdmissionReview has no request")]
    NoRequest,
    /// The request is malformed.
    #[error("invalid AdmissionReview: {0}")]
    Request(#[from] RequestError),
}

/// Parses a body and checks it is an AdmissionReview v1 with a request.
pub fn decode(body: &[u8]) -> Result<Value, ReviewError> {
    let review: Value = serde_json::from_slice(body)?;
    let field = |k: &str| review.get(k).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(ReviewError::NotAReview {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    }
    match review.get("request") {
        Some(Value::Object(_)) => Ok(review),
        _ => Err(ReviewError::NoRequest),
    }
}

/// Reads the engine's view of a decoded review's request.
pub fn request(review: &Value) -> Result<Request<'_>, ReviewError> {
    let raw = review.get("request").ok_or(ReviewError::NoRequest)?;
    Ok(Request::from_json(raw)?)
}

/// The audit annotation key a webhook may return for an upstream key. kube-apiserver records a
/// webhook's key `k` as `<webhook name>/k` and drops keys with a second `/`, so
/// `<policy>/<key>` becomes `<policy>_<key>` and the validation-failure key becomes
/// `validation_failure` (see the README's audit annotation table).
pub fn webhook_annotation_key(upstream: &str) -> String {
    if upstream == VALIDATION_FAILURE_KEY {
        return "validation_failure".to_string();
    }
    upstream.replace('/', "_")
}

/// The response review for an outcome, serialized: members in the order of a
/// `serde_json::Value` (sorted), written straight from borrowed parts.
pub fn response(uid: &str, outcome: &Outcome) -> Vec<u8> {
    let annotations: BTreeMap<String, &str> = outcome
        .audit_annotations
        .iter()
        .map(|(k, v)| (webhook_annotation_key(k), v.as_str()))
        .collect();
    let review = ResponseReview {
        api_version: "admission.k8s.io/v1",
        kind: "AdmissionReview",
        response: ReviewResponse {
            allowed: outcome.allowed(),
            audit_annotations: (!annotations.is_empty()).then_some(annotations),
            status: outcome.denial.as_ref().map(|d| Status {
                code: d.code,
                message: &d.message,
                metadata: Empty {},
                reason: &d.reason,
                status: "Failure",
            }),
            uid,
            warnings: (!outcome.warnings.is_empty()).then_some(&outcome.warnings),
        },
    };
    // Serializing strings, numbers and maps of strings into memory cannot fail.
    serde_json::to_vec(&review).unwrap_or_default()
}

/// An AdmissionReview carrying a response.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseReview<'a> {
    api_version: &'static str,
    kind: &'static str,
    response: ReviewResponse<'a>,
}

/// An AdmissionResponse (fields sorted by their JSON names).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewResponse<'a> {
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    audit_annotations: Option<BTreeMap<String, &'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<Status<'a>>,
    uid: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<&'a Vec<String>>,
}

/// A metav1.Status of a denial (fields sorted by their JSON names).
#[derive(Serialize)]
struct Status<'a> {
    code: u16,
    message: &'a str,
    metadata: Empty,
    reason: &'a str,
    status: &'static str,
}

/// `{}`.
#[derive(Serialize)]
struct Empty {}

/// The field errors kube-apiserver would report for a write of one of celgate's own kinds; new
/// or changed expressions may use the CEL libraries of `compatibility`.
pub fn policy_errors(req: &Request<'_>, compatibility: Compatibility) -> Vec<FieldError> {
    use celgate_engine::apivalidation::{
        Environments, validate_binding, validate_mutating_binding, validate_mutating_policy,
        validate_policy,
    };
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Vec::new();
    }
    let old = (req.operation == Operation::Update).then_some(req.old_object);
    let envs = Environments::new(compatibility, old);
    match req.kind.name {
        "ValidatingAdmissionPolicy" => validate_policy(req.object, &envs),
        "ValidatingAdmissionPolicyBinding" => validate_binding(req.object),
        "MutatingAdmissionPolicy" => validate_mutating_policy(req.object, &envs),
        "MutatingAdmissionPolicyBinding" => validate_mutating_binding(req.object),
        _ => Vec::new(),
    }
}

/// The response to a write of one of celgate's own kinds: allowed, or 422 Invalid with every
/// field error, as kube-apiserver answers for the in-tree kinds.
pub fn policy_validation_response(req: &Request<'_>, errors: &[FieldError]) -> Value {
    use celgate_engine::apivalidation::invalid_message;
    if errors.is_empty() {
        return allow(req.uid);
    }
    let name = req
        .object
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or(req.name);
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| {
            let message = e.to_string();
            let message = message
                .strip_prefix(&format!("{}: ", e.field))
                .unwrap_or(&message)
                .to_string();
            json!({"reason": e.kind.cause_reason(), "message": message, "field": e.field})
        })
        .collect();
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
        "uid": req.uid, "allowed": false,
        "status": {"metadata": {}, "status": "Failure", "reason": "Invalid", "code": 422,
            "message": invalid_message(req.kind.name, req.kind.group, name, errors),
            "details": {"name": name, "group": req.kind.group,
                "kind": req.kind.name, "causes": causes}}}})
}

/// The response allowing a request with nothing to say.
pub fn allow(uid: &str) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use celgate_engine::validate::Denial;

    #[test]
    fn a_response_is_the_review_kube_apiserver_reads() {
        let outcome = Outcome {
            denial: Some(Denial {
                message: "ValidatingAdmissionPolicy 'p' denied request: <no>".into(),
                reason: "Forbidden".into(),
                code: 403,
            }),
            warnings: vec!["w1".into(), "w2".into()],
            audit_annotations: vec![
                ("p/key".into(), "v".into()),
                (VALIDATION_FAILURE_KEY.into(), "[]".into()),
            ],
            checks: Vec::new(),
        };
        let want = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u1", "allowed": false,
                "status": {"metadata": {}, "status": "Failure", "reason": "Forbidden", "code": 403,
                    "message": "ValidatingAdmissionPolicy 'p' denied request: <no>"},
                "warnings": ["w1", "w2"],
                "auditAnnotations": {"p_key": "v", "validation_failure": "[]"}}});
        // Byte for byte what serializing the same `Value` writes.
        assert_eq!(
            String::from_utf8(response("u1", &outcome)).unwrap(),
            want.to_string()
        );
        let allowed = response("u2", &Outcome::default());
        assert_eq!(String::from_utf8(allowed).unwrap(), allow("u2").to_string());
    }
}
