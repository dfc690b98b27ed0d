//! The field rules of both binding kinds: policyName, paramRef and matchResources, then the
//! validating binding's validationActions or the operations a mutating binding may match.

use std::collections::HashSet;

use serde_json::Value;

use super::field_error::{Errors, FieldError, json_list, quote};
use super::json::{str_of, strings_of};
use super::match_resources::{
    validate_label_selector, validate_match_resources, validate_mutating_operations,
};
use super::names::{dns1123_subdomain_errors, path_segment_errors};

/// policyName, paramRef and matchResources, checked alike for both binding kinds.
fn validate_binding_head(spec: &Value, errs: &mut Errors) {
    match str_of(spec, "policyName").filter(|s| !s.is_empty()) {
        None => errs.required("spec.policyName", ""),
        Some(p) => {
            for m in dns1123_subdomain_errors(p) {
                errs.invalid("spec.policyName", quote(p), &m);
            }
        }
    }
    if let Some(pr) = spec.get("paramRef").filter(|p| !p.is_null()) {
        validate_param_ref(pr, errs);
    }
    if let Some(m) = spec.get("matchResources").filter(|m| !m.is_null()) {
        validate_match_resources(m, "spec.matchResources", errs);
    }
}

/// paramRef: a name or a selector (not both), and what to do when no param is found.
fn validate_param_ref(pr: &Value, errs: &mut Errors) {
    let name = str_of(pr, "name").unwrap_or_default();
    let selector = pr.get("selector").filter(|s| !s.is_null());
    if !name.is_empty() {
        for m in path_segment_errors(name) {
            errs.invalid("spec.paramRef.name", quote(name), &m);
        }
        if selector.is_some() {
            errs.forbidden(
                "spec.paramRef.name",
                "name and selector are mutually exclusive",
            );
        }
    }
    if let Some(sel) = selector {
        validate_label_selector(sel, "spec.paramRef.selector", errs);
        if !name.is_empty() {
            errs.forbidden(
                "spec.paramRef.selector",
                "name and selector are mutually exclusive",
            );
        }
    }
    if name.is_empty() && selector.is_none() {
        errs.required("spec.paramRef", "one of name or selector must be specified");
    }
    match str_of(pr, "parameterNotFoundAction").filter(|s| !s.is_empty()) {
        None => errs.required("spec.paramRef.parameterNotFoundAction", ""),
        Some("Deny" | "Allow") => {}
        Some(other) => errs.not_supported(
            "spec.paramRef.parameterNotFoundAction",
            other,
            &["Deny", "Allow"],
        ),
    }
}

/// Validates a ValidatingAdmissionPolicyBinding as kube-apiserver would on create or update.
pub fn validate_binding(obj: &Value) -> Vec<FieldError> {
    let mut errs = Errors(Vec::new());
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    validate_binding_head(spec, &mut errs);
    let actions = strings_of(spec, "validationActions");
    let mut seen = HashSet::new();
    for (i, a) in actions.iter().enumerate() {
        if !["Audit", "Deny", "Warn"].contains(a) {
            errs.not_supported(
                &format!("spec.validationActions[{i}]"),
                a,
                &["Audit", "Deny", "Warn"],
            );
        }
        if !seen.insert(*a) {
            errs.duplicate(&format!("spec.validationActions[{i}]"), a);
        }
    }
    if seen.contains("Deny") && seen.contains("Warn") {
        errs.invalid(
            "spec.validationActions",
            json_list(&actions),
            "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        );
    }
    if seen.is_empty() {
        errs.required(
            "spec.validationActions",
            "at least one validation action is required",
        );
    }
    errs.0
}

/// Validates a MutatingAdmissionPolicyBinding as kube-apiserver would on create or update.
pub fn validate_mutating_binding(obj: &Value) -> Vec<FieldError> {
    let mut errs = Errors(Vec::new());
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    validate_binding_head(spec, &mut errs);
    if let Some(m) = spec.get("matchResources").filter(|m| !m.is_null()) {
        validate_mutating_operations(m, "spec.matchResources", &mut errs);
    }
    errs.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apivalidation::test_objects::texts;
    use serde_json::json;

    #[test]
    fn mutating_bindings() {
        let b = json!({"spec": {"paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Deny"},
            "matchResources": {"matchPolicy": "Exact", "namespaceSelector": {}, "objectSelector": {},
                "resourceRules": [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"],
                    "resources": ["pods"]}]}}});
        assert_eq!(
            texts(&validate_mutating_binding(&b)),
            vec![
                "spec.policyName: Required value",
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
                "spec.matchResources.resourceRules.operations: Unsupported value: \"DELETE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"UPDATE\"",
            ]
        );
        assert!(validate_mutating_binding(&json!({"spec": {"policyName": "p"}})).is_empty());
    }

    #[test]
    fn bindings() {
        let b = json!({"spec": {"policyName": "p", "validationActions": ["Deny", "Warn"],
            "paramRef": {"name": "x", "selector": {}, "parameterNotFoundAction": "Deny"}}});
        assert_eq!(
            texts(&validate_binding(&b)),
            vec![
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
                "spec.validationActions: Invalid value: [\"Deny\",\"Warn\"]: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ]
        );
        let empty = json!({"spec": {"policyName": "p"}});
        assert_eq!(
            texts(&validate_binding(&empty)),
            vec![
                "spec.validationActions: Required value: at least one validation action is required"
            ]
        );
    }
}
