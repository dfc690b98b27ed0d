//! Evaluates the ValidatingAdmissionPolicies that match a request and folds their decisions into
//! one outcome, with kube-apiserver's messages, codes, warnings and audit annotations.
//!
//! Each file holds one step: `outcome` the result and its error types, `exempt` the resources
//! no policy sees, `validations` (with their message expressions), `enforcement` (Deny, Warn,
//! Audit) and `audit_annotations`; this module runs the policy and binding loop. Whether a
//! policy and its bindings apply (`crate::scope`), the activation, budgets and panic guard of
//! one evaluation (`crate::evaluation`) and the match conditions are shared with mutating
//! policies.

mod audit_annotations;
mod enforcement;
pub(crate) mod exempt;
pub(crate) mod match_conditions;
mod outcome;
#[cfg(test)]
pub(crate) mod test_policies;
pub mod trace;
mod validations;

use std::sync::Arc;
use std::time::Instant;

use celgate_cel::Authorizer;

use crate::compile::ValidatingPolicy;
use crate::exception::ExceptionsAt;
use crate::matching::Namespaces;
use crate::model::{FailurePolicy, ValidatingBindingSpec};
use crate::params::Params;
use crate::request::Request;
use crate::scope::{ScopeError, binding_params, policy_scope};

pub use audit_annotations::MAX_AUDIT_ANNOTATION_VALUE_BYTES;
pub use exempt::exempt;
pub use outcome::{
    Check, CheckError, Denial, ErrorType, Excepted, Outcome, VALIDATION_FAILURE_KEY,
};
pub use validations::MAX_MESSAGE_EXPRESSION_BYTES;

use crate::evaluation::{Evaluation, guarded};
use audit_annotations::evaluate_audit_annotations;
use enforcement::route_decision;
use match_conditions::{MatchConditions, Sources, evaluate_match_conditions};
use outcome::{deny_first, policy_message};
use trace::{Skip, Trace};
use validations::{Decision, evaluate_validations};

/// A bound policy in a snapshot: the compiled policy and its bindings, in list order.
#[derive(Debug, Clone)]
pub struct BoundPolicy {
    /// The compiled policy.
    pub policy: Arc<ValidatingPolicy>,
    /// Its bindings.
    pub bindings: Vec<Arc<ValidatingBindingSpec>>,
}

/// What evaluation reads from the cluster, through the operator's caches.
#[derive(Clone, Copy)]
pub struct Context<'c> {
    /// Namespaces, for selectors and `namespaceObject`.
    pub namespaces: &'c dyn Namespaces,
    /// Param kinds and their objects.
    pub params: &'c dyn Params,
    /// Authorization checks for the request's user (`authorizer`); unbound when `None`.
    pub authorizer: Option<&'c Arc<dyn Authorizer>>,
    /// When evaluation must stop (the API server's webhook timeout), if any.
    pub deadline: Option<Instant>,
    /// Receives each evaluated expression (offline tools); `None` in the webhook.
    pub trace: Option<&'c dyn Trace>,
    /// The PolicyExceptions honoured and the time of the decision; `None` honours none
    /// (mutating policies are never excepted).
    pub exceptions: Option<ExceptionsAt<'c>>,
}

/// Validates a request against the bound policies.
pub fn validate(policies: &[BoundPolicy], req: &Request<'_>, ctx: &Context<'_>) -> Outcome {
    validate_only(policies, req, ctx, None)
}

/// Validates a request against the bound policies of one failure policy (all when `None`).
pub fn validate_only<'p>(
    policies: impl IntoIterator<Item = &'p BoundPolicy>,
    req: &Request<'_>,
    ctx: &Context<'_>,
    only: Option<FailurePolicy>,
) -> Outcome {
    let mut out = Outcome::default();
    if exempt(req) {
        return out;
    }
    for bound in policies {
        if only.is_none_or(|f| bound.policy.failure_policy() == f) {
            evaluate_guarded(bound, req, ctx, &mut out);
        }
    }
    out
}

/// Evaluates one policy so that a panic inside it (a defect in celgate) becomes that policy's
/// error under its failurePolicy instead of taking the request, or the process, down.
fn evaluate_guarded(bound: &BoundPolicy, req: &Request<'_>, ctx: &Context<'_>, out: &mut Outcome) {
    // The index gave candidates for the request's resource: `evaluate_policy` matches them.
    let mut one = Outcome::default();
    match guarded(|| evaluate_policy(bound, req, ctx, &mut one)) {
        Ok(()) => out.merge(one),
        Err(internal) => {
            if bound.policy.failure_policy() == FailurePolicy::Fail {
                let msg = policy_message(&bound.policy, None, &internal.to_string());
                deny_first(out, msg, None);
            }
        }
    }
}

/// Evaluates one policy: its match, then each binding with each of its params.
fn evaluate_policy(bound: &BoundPolicy, req: &Request<'_>, ctx: &Context<'_>, out: &mut Outcome) {
    let policy = &bound.policy;
    let fail = policy.failure_policy() == FailurePolicy::Fail;
    let scope = policy_scope(&policy.spec, req, ctx);
    let namespace_object = match scope {
        Ok(Some(ns)) => ns,
        Ok(None) => {
            if let Some(t) = ctx.trace {
                t.skipped(&policy.name, None, Skip::PolicyNotMatched);
            }
            return;
        }
        Err(ScopeError::Namespace(e)) => {
            deny_first(out, e.to_string(), Some("NotFound"));
            return;
        }
        Err(e) => {
            if fail {
                deny_first(out, policy_message(policy, None, &e.to_string()), None);
            }
            return;
        }
    };
    let mut annotations: Vec<(String, Vec<String>)> = Vec::new();
    for binding in &bound.bindings {
        let started = Instant::now();
        // A binding whose match or params cannot be worked out is a configuration error.
        let params = binding_params(&policy.spec, &**binding, req, ctx);
        let params = match params {
            Ok(Ok(list)) => list,
            Ok(Err(why)) => {
                if let Some(t) = ctx.trace {
                    t.skipped(&policy.name, Some(&binding.name), why);
                }
                continue;
            }
            Err(e) => {
                if fail {
                    let msg = policy_message(policy, Some(&binding.name), &e.to_string());
                    deny_first(out, msg, None);
                }
                continue;
            }
        };
        let binding_name: Arc<str> = Arc::from(binding.name.as_str());
        if let Some(at) = ctx.exceptions
            && let Some(e) = at
                .set
                .excepting(&policy.name, &binding.name, req, ctx, at.now)
        {
            if let Some(t) = ctx.trace {
                t.skipped(&policy.name, Some(&binding.name), Skip::Excepted);
            }
            out.excepted.push(Excepted {
                policy: policy.name.clone(),
                binding: binding_name,
                exception: e.id.clone(),
            });
            continue;
        }
        // Each param is its own evaluation with its own budget; any failing param denies.
        for param in params {
            if let Some(t) = ctx.trace {
                t.evaluation(&policy.name, &binding.name, param);
            }
            let evaluation = Evaluation {
                req,
                object: req.cel_object(),
                old_object: Evaluation::old_object_for(req, policy.reads_old_object),
                namespace_object,
                has_params: policy.spec.param_kind.is_some(),
                param,
                variables: &policy.variables,
                message_variables: &policy.message_variables,
                // Bound only where an expression may read it (binding copies the attributes).
                authorizer: ctx.authorizer.filter(|_| policy.uses_authorizer),
                deadline: ctx.deadline,
                trace: ctx.trace,
            };
            let sources = Sources {
                match_conditions: &policy.spec.match_conditions,
                variables: &policy.spec.variables,
            };
            match evaluate_match_conditions(&evaluation, &policy.match_conditions, sources) {
                MatchConditions::Apply => {}
                MatchConditions::Skip => continue,
                MatchConditions::Error(message) => {
                    // As in-tree: the error is the policy's one failed validation (index 0),
                    // denied, warned or audited as the binding says; nothing else is evaluated.
                    let failed = Decision {
                        deny: fail,
                        error: true,
                        message,
                        reason: None,
                        index: 0,
                        error_type: ErrorType::InvalidError,
                    };
                    route_decision(
                        policy,
                        binding,
                        &binding_name,
                        &failed,
                        started.elapsed(),
                        out,
                    );
                    continue;
                }
            }
            let decisions = evaluate_validations(policy, &evaluation, fail);
            for d in &decisions {
                route_decision(policy, binding, &binding_name, d, started.elapsed(), out);
            }
            if !decisions.iter().any(|d| d.deny) {
                let error_type = decisions
                    .iter()
                    .find(|d| d.error)
                    .map_or(ErrorType::NoError, |d| d.error_type);
                if error_type != ErrorType::NoError {
                    out.checks.push(Check {
                        policy: policy.name.clone(),
                        binding: binding_name.clone(),
                        error_type,
                        enforcement_action: "allow",
                        message: None,
                        elapsed: started.elapsed(),
                    });
                }
            }
            evaluate_audit_annotations(policy, &evaluation, binding, fail, &mut annotations, out);
        }
    }
    // Distinct values of one key across bindings and params are joined with ", ".
    for (key, values) in annotations {
        out.audit_annotations
            .push((format!("{}/{key}", policy.name), values.join(", ")));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use celgate_cel::Authorizer;
    use serde_json::json;

    use super::test_policies::{bound, cache, context, create_deployment, spec};
    use super::validate;
    use crate::model::{FailurePolicy, NamedExpression, Validation, ValidationAction};
    use crate::request::Request;
    use crate::validate::VALIDATION_FAILURE_KEY;

    /// An authorizer with a defect: it panics.
    struct Panicking;
    impl Authorizer for Panicking {
        fn check(&self, _: &celgate_cel::AuthzRequest) -> celgate_cel::AuthzDecision {
            panic!("authorizer defect")
        }
    }

    #[test]
    fn a_panic_in_one_policy_is_that_policys_error_and_the_others_still_decide() {
        let mut broken = spec(vec![Validation {
            expression: "authorizer.path('/healthz').check('get').allowed()".into(),
            ..Default::default()
        }]);
        broken.name = "broken".into();
        let warn = spec(vec![Validation {
            expression: "object.spec.replicas > 50".into(),
            ..Default::default()
        }]);
        let raw = create_deployment(json!({"spec": {"replicas": 3}}));
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let authorizer: Arc<dyn Authorizer> = Arc::new(Panicking);
        let mut ctx = context(&namespaces);
        ctx.authorizer = Some(&authorizer);
        let policies = [
            bound(broken.clone(), vec![ValidationAction::Deny]),
            bound(warn, vec![ValidationAction::Warn]),
        ];
        let out = validate(&policies, &req, &ctx);
        assert_eq!(
            out.denial.map(|d| d.message).as_deref(),
            Some(
                "ValidatingAdmissionPolicy 'broken' denied request: internal error in celgate while evaluating the policy: authorizer defect"
            )
        );
        assert_eq!(
            out.warnings,
            vec![
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': failed expression: object.spec.replicas > 50"
            ]
        );
        broken.failure_policy = FailurePolicy::Ignore;
        let policies = [bound(broken, vec![ValidationAction::Deny])];
        assert!(validate(&policies, &req, &ctx).allowed());
    }

    #[test]
    fn match_conditions_see_a_null_namespace_object_and_validations_the_namespace() {
        let mut s = spec(vec![Validation {
            expression: "namespaceObject.metadata.name != 'staging-ns'".into(),
            ..Default::default()
        }]);
        s.match_conditions = vec![NamedExpression {
            name: "c".into(),
            expression: "namespaceObject == null".into(),
        }];
        let raw = create_deployment(json!({"spec": {"replicas": 3}}));
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let out = validate(
            &[bound(s, vec![ValidationAction::Deny])],
            &req,
            &context(&namespaces),
        );
        assert_eq!(
            out.denial.map(|d| d.message).as_deref(),
            Some(
                "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed expression: namespaceObject.metadata.name != 'staging-ns'"
            )
        );
    }

    #[test]
    fn match_condition_errors_are_joined_as_go_aggregates_them_each_text_once() {
        let raw = create_deployment(json!({"spec": {"replicas": 3}}));
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let ctx = context(&namespaces);
        let failing = |expressions: &[&str]| {
            let mut s = spec(vec![Validation {
                expression: "false".into(),
                ..Default::default()
            }]);
            s.match_conditions = expressions
                .iter()
                .enumerate()
                .map(|(i, e)| NamedExpression {
                    name: format!("c{i}"),
                    expression: (*e).into(),
                })
                .collect();
            let out = validate(&[bound(s, vec![ValidationAction::Deny])], &req, &ctx);
            out.denial.map(|d| d.message).unwrap_or_default()
        };
        let prefix = "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: ";
        let a = "expression 'object.spec.a == 1' resulted in error: no such key: a";
        let b = "expression 'object.spec.b == 1' resulted in error: no such key: b";
        assert_eq!(
            failing(&["object.spec.a == 1", "object.spec.a == 1"]),
            format!("{prefix}{a}")
        );
        assert_eq!(
            failing(&["object.spec.a == 1", "object.spec.b == 1"]),
            format!("{prefix}[{a}, {b}]")
        );
    }

    #[test]
    fn a_match_condition_error_is_warned_and_audited_as_the_binding_says_not_always_denied() {
        let mut failing = spec(vec![Validation {
            expression: "false".into(),
            ..Default::default()
        }]);
        failing.match_conditions = vec![NamedExpression {
            name: "c".into(),
            expression: "object.spec.missing == 1".into(),
        }];
        let raw = create_deployment(json!({"spec": {"replicas": 3}}));
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let ctx = context(&namespaces);
        let error = "expression 'object.spec.missing == 1' resulted in error: no such key: missing";
        let policies = [bound(
            failing.clone(),
            vec![ValidationAction::Warn, ValidationAction::Audit],
        )];
        let out = validate(&policies, &req, &ctx);
        assert!(out.allowed());
        assert_eq!(
            out.warnings,
            vec![format!(
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': {error}"
            )]
        );
        assert_eq!(
            out.audit_annotations,
            vec![(
                VALIDATION_FAILURE_KEY.to_string(),
                format!(
                    "[{{\"message\":\"{error}\",\"policy\":\"p\",\"binding\":\"b\",\"expressionIndex\":0,\"validationActions\":[\"Warn\",\"Audit\"]}}]"
                )
            )]
        );
        let denied = validate(&[bound(failing, vec![ValidationAction::Deny])], &req, &ctx);
        let denial = denied.denial.expect("denied");
        assert_eq!(
            denial.message,
            format!("ValidatingAdmissionPolicy 'p' with binding 'b' denied request: {error}")
        );
    }
}
