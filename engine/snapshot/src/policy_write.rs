//! Validation of writes of celgate's own policies and bindings: the API validation
//! kube-apiserver applies to the in-tree kinds, then (on an otherwise valid object, as
//! kube-apiserver orders them) the param access check against the snapshot's policies.

use std::collections::HashMap;

use celgate_engine::Request;
use celgate_engine::apivalidation::{
    Environments, FieldError, validate_binding, validate_mutating_binding,
    validate_mutating_policy, validate_policy,
};
use celgate_engine::model::ParamKind;
use celgate_engine::paramaccess::{self, BindingKind, BoundPolicyParams, Writer};
use celgate_engine::request::Operation;
use serde_json::Value;

use crate::deps::Deps;
use crate::view::Snapshot;

/// The field errors kube-apiserver would report for this write of one of celgate's kinds;
/// empty when it is allowed.
pub fn errors(snapshot: &Snapshot, deps: &Deps, req: &Request<'_>) -> Vec<FieldError> {
    let errors = api_validation_errors(req, deps);
    if !errors.is_empty() {
        return errors;
    }
    param_access_errors(snapshot, deps, req)
}

/// What kube-apiserver's API validation rejects; new or changed expressions may use the CEL
/// libraries of the configured compatibility version.
fn api_validation_errors(req: &Request<'_>, deps: &Deps) -> Vec<FieldError> {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Vec::new();
    }
    let old = (req.operation == Operation::Update).then_some(req.old_object());
    let envs = Environments::new(deps.compatibility, old);
    match req.kind.name {
        "ValidatingAdmissionPolicy" => validate_policy(req.object(), &envs),
        "ValidatingAdmissionPolicyBinding" => validate_binding(req.object()),
        "MutatingAdmissionPolicy" => validate_mutating_policy(req.object(), &envs),
        "MutatingAdmissionPolicyBinding" => validate_mutating_binding(req.object()),
        _ => Vec::new(),
    }
}

/// The param access errors of a write of a policy or binding (none without an authorizer
/// source): the writer needs `get` (`list` for a selector) on the params it names.
fn param_access_errors(snapshot: &Snapshot, deps: &Deps, req: &Request<'_>) -> Vec<FieldError> {
    let Some(source) = &deps.authorizers else {
        return Vec::new();
    };
    let user_info = req.raw.get("userInfo").unwrap_or(&Value::Null);
    let writer = Writer::from_user_info(user_info);
    let authz = source.for_user(user_info);
    let resolve = |k: &ParamKind| source.resource_for(k);
    let old = Some(req.old_object()).filter(|o| !o.is_null());
    let binding = |kind: BindingKind, policies: &HashMap<String, Option<ParamKind>>| {
        let policy = req
            .object()
            .get("spec")
            .and_then(|s| s.get("policyName"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let params = match policies.get(policy) {
            Some(pk) => BoundPolicyParams::Found(pk.as_ref()),
            None => BoundPolicyParams::Missing,
        };
        paramaccess::check_binding(
            req.object(),
            old,
            &writer,
            kind,
            params,
            &resolve,
            authz.as_ref(),
        )
    };
    let kinds = &snapshot.policy_param_kinds;
    match req.kind.name {
        "ValidatingAdmissionPolicy" | "MutatingAdmissionPolicy" => {
            paramaccess::check_policy(req.object(), old, &writer, &resolve, authz.as_ref())
        }
        "ValidatingAdmissionPolicyBinding" => binding(BindingKind::Validating, &kinds.validating),
        "MutatingAdmissionPolicyBinding" => binding(BindingKind::Mutating, &kinds.mutating),
        _ => Vec::new(),
    }
}
