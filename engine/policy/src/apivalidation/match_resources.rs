//! The rules of what a policy or binding matches (`matchConstraints`, `matchResources`): label
//! selectors, resource rules and their operations, resources and scope.

use std::collections::HashSet;

use serde_json::Value;

use super::field_error::{Errors, FieldError, json_list, quote};
use super::json::{list_of, str_of, strings_of};
use super::names::{path_segment_errors, qualified_name_errors};

/// A label selector's requirements and label keys.
pub(super) fn validate_label_selector(sel: &Value, path: &str, errs: &mut Errors) {
    for (i, req) in list_of(sel, "matchExpressions").iter().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        let op = str_of(req, "operator").unwrap_or_default();
        let values = list_of(req, "values");
        match op {
            "In" | "NotIn" if values.is_empty() => errs.required(
                &format!("{p}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            ),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.forbidden(
                &format!("{p}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            ),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => errs.invalid(
                &format!("{p}.operator"),
                quote(other),
                "not a valid selector operator",
            ),
        }
        let key = str_of(req, "key").unwrap_or_default();
        for m in qualified_name_errors(key) {
            errs.invalid(&format!("{p}.key"), quote(key), &m);
        }
    }
    if let Some(labels) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, _) in labels {
            for m in qualified_name_errors(k) {
                errs.invalid(&format!("{path}.matchLabels"), quote(k), &m);
            }
        }
    }
}

/// The operations a resource rule may name.
const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];

/// A rule's resources: not empty, and no entry a wildcard entry already covers.
fn validate_resources(resources: &[&str], path: &str, errs: &mut Errors) {
    if resources.is_empty() {
        errs.required(path, "");
    }
    let mut with_wildcard_sub: HashSet<&str> = HashSet::new();
    let mut sub_with_wildcard_res: HashSet<&str> = HashSet::new();
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, rs) in resources.iter().enumerate() {
        if rs.is_empty() {
            errs.required(&format!("{path}[{i}]"), "");
            continue;
        }
        double |= *rs == "*/*";
        single |= *rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            plain = *rs != "*";
            continue;
        };
        if with_wildcard_sub.contains(res) {
            errs.invalid(
                &format!("{path}[{i}]"),
                quote(rs),
                &format!("if '{res}/*' is present, must not specify {rs}"),
            );
        }
        if sub_with_wildcard_res.contains(sub) {
            errs.invalid(
                &format!("{path}[{i}]"),
                quote(rs),
                &format!("if '*/{sub}' is present, must not specify {rs}"),
            );
        }
        if sub == "*" {
            with_wildcard_sub.insert(res);
        }
        if res == "*" {
            sub_with_wildcard_res.insert(sub);
        }
    }
    if resources.len() > 1 && double {
        errs.invalid(
            path,
            json_list(resources),
            "if '*/*' is present, must not specify other resources",
        );
    }
    if single && plain {
        errs.invalid(
            path,
            json_list(resources),
            "if '*' is present, must not specify other resources without subresources",
        );
    }
}

/// One resource rule: resource names, operations, API groups and versions, resources, scope.
fn validate_rule(rule: &Value, path: &str, errs: &mut Errors) {
    let names = strings_of(rule, "resourceNames");
    let mut seen = HashSet::new();
    for (i, n) in names.iter().enumerate() {
        for m in path_segment_errors(n) {
            errs.invalid(&format!("{path}.resourceNames[{i}]"), quote(n), &m);
        }
        if !seen.insert(*n) {
            errs.duplicate(&format!("{path}.resourceNames[{i}]"), n);
        }
    }
    let ops = strings_of(rule, "operations");
    if ops.is_empty() {
        errs.required(&format!("{path}.operations"), "");
    }
    if ops.len() > 1 && ops.contains(&"*") {
        errs.invalid(
            &format!("{path}.operations"),
            json_list(&ops),
            "if '*' is present, must not specify other operations",
        );
    }
    for (i, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(op) {
            errs.not_supported(&format!("{path}.operations[{i}]"), op, &OPERATIONS);
        }
    }
    for (key, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let list = strings_of(rule, key);
        if list.is_empty() {
            errs.required(&format!("{path}.{key}"), "");
        }
        if list.len() > 1 && list.contains(&"*") {
            errs.invalid(
                &format!("{path}.{key}"),
                json_list(&list),
                &format!("if '*' is present, must not specify other {what}"),
            );
        }
        if key == "apiVersions" {
            for (i, v) in list.iter().enumerate() {
                if v.is_empty() {
                    errs.required(&format!("{path}.{key}[{i}]"), "");
                }
            }
        }
    }
    validate_resources(
        &strings_of(rule, "resources"),
        &format!("{path}.resources"),
        errs,
    );
    const SCOPES: [&str; 3] = ["*", "Cluster", "Namespaced"];
    if let Some(scope) = str_of(rule, "scope").filter(|s| !SCOPES.contains(s)) {
        errs.not_supported(&format!("{path}.scope"), scope, &SCOPES);
    }
}

/// What kube-apiserver refuses in the `resourceRules` of a policy's `matchConstraints` (at
/// `path`), the rules a webhook configuration serving the policy registers: one rule it refuses
/// makes the whole configuration invalid.
pub fn validate_resource_rules(constraints: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Errors(Vec::new());
    for (i, rule) in list_of(constraints, "resourceRules").iter().enumerate() {
        validate_rule(rule, &format!("{path}.resourceRules[{i}]"), &mut errs);
    }
    errs.0
}

/// `matchConstraints` or `matchResources`: match policy, selectors and (excluded) resource rules.
pub(super) fn validate_match_resources(m: &Value, path: &str, errs: &mut Errors) {
    match str_of(m, "matchPolicy") {
        None => errs.required(&format!("{path}.matchPolicy"), ""),
        Some("Exact" | "Equivalent") => {}
        Some(other) => errs.not_supported(
            &format!("{path}.matchPolicy"),
            other,
            &["Equivalent", "Exact"],
        ),
    }
    for key in ["namespaceSelector", "objectSelector"] {
        match m.get(key) {
            None | Some(Value::Null) => errs.required(&format!("{path}.{key}"), ""),
            Some(sel) => validate_label_selector(sel, &format!("{path}.{key}"), errs),
        }
    }
    for key in ["resourceRules", "excludeResourceRules"] {
        for (i, rule) in list_of(m, key).iter().enumerate() {
            validate_rule(rule, &format!("{path}.{key}[{i}]"), errs);
        }
    }
}

/// The operations a mutating policy or binding may match: mutations apply to writes only.
const MUTATING_OPERATIONS: [&str; 4] = ["*", "CONNECT", "CREATE", "UPDATE"];

/// Each resource rule's operations must be ones a mutation can apply to; the error's path has
/// no rule index, as upstream reports it.
pub(super) fn validate_mutating_operations(m: &Value, path: &str, errs: &mut Errors) {
    for rule in list_of(m, "resourceRules") {
        for op in strings_of(rule, "operations") {
            if !MUTATING_OPERATIONS.contains(&op) {
                errs.not_supported(
                    &format!("{path}.resourceRules.operations"),
                    op,
                    &MUTATING_OPERATIONS,
                );
            }
        }
    }
}
