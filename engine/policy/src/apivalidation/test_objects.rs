//! Objects and helpers the field-rule tests share.

use serde_json::{Value, json};

use super::FieldError;

/// A policy named `p.example.com` with `spec`.
pub(super) fn policy(spec: Value) -> Value {
    json!({"metadata": {"name": "p.example.com"}, "spec": spec})
}

/// The errors as kube-apiserver prints them.
pub(super) fn texts(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(ToString::to_string).collect()
}

/// The spec of a valid ValidatingAdmissionPolicy.
pub(super) fn base() -> Value {
    json!({"failurePolicy": "Fail", "matchConstraints": {"matchPolicy": "Equivalent",
        "namespaceSelector": {}, "objectSelector": {},
        "resourceRules": [{"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"],
            "resources": ["deployments"], "scope": "*"}]},
        "validations": [{"expression": "object.spec.replicas <= 5"}]})
}

/// A MutatingAdmissionPolicy: [`base`] with `mutations` instead of validations.
pub(super) fn mutating(mutations: Value) -> Value {
    let mut spec = base();
    spec.as_object_mut().map(|o| o.remove("validations"));
    spec["reinvocationPolicy"] = json!("Never");
    spec["mutations"] = mutations;
    policy(spec)
}
