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
mod outcome;
#[cfg(test)]
pub(crate) mod test_policies;
mod validations;

use std::sync::Arc;
use std::time::{Duration, Instant};

use celgate_cel::Activation;
use hashbrown::HashMap;

use crate::compile::ValidatingPolicy;
use crate::context::Context;
use crate::match_conditions::{MatchConditions, Sources, evaluate_match_conditions};
use crate::matching::RememberedLabels;
use crate::model::{FailurePolicy, ValidatingBindingSpec};
use crate::request::Request;
use crate::scope::{ScopeError, binding_params, policy_scope};
use crate::trace::Skip;

pub use crate::check::{CheckError, ErrorType};
pub use audit_annotations::MAX_AUDIT_ANNOTATION_VALUE_BYTES;
pub use exempt::exempt;
pub use outcome::{Check, Denial, Excepted, Outcome, VALIDATION_FAILURE_KEY};
pub use validations::MAX_MESSAGE_EXPRESSION_BYTES;

use crate::evaluation::{Evaluation, guarded};
use audit_annotations::{AnnotationValues, annotation_values, collect_annotations};
use enforcement::route_decision;
use outcome::{deny_first, policy_message};
use validations::{Decision, evaluate_validations};

/// A bound policy in a snapshot: the compiled policy and its bindings, in list order.
#[derive(Debug, Clone)]
pub struct BoundPolicy {
    /// The compiled policy.
    pub policy: Arc<ValidatingPolicy>,
    /// Its bindings.
    pub bindings: Arc<[Arc<ValidatingBindingSpec>]>,
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
        Err(internal) => internal_error(&bound.policy, &internal, out),
    }
}

/// A defect in celgate met while evaluating `policy`: its error under its failurePolicy.
fn internal_error(policy: &ValidatingPolicy, internal: &CheckError, out: &mut Outcome) {
    if policy.failure_policy() == FailurePolicy::Fail {
        deny_first(
            out,
            policy_message(policy, None, &internal.to_string()),
            None,
        );
    }
}

/// Evaluates one policy: its match, then each binding with each of its params.
fn evaluate_policy(bound: &BoundPolicy, req: &Request<'_>, ctx: &Context<'_>, out: &mut Outcome) {
    let policy = &bound.policy;
    let Some(namespace_object) = scope(policy, req, ctx, out) else {
        return;
    };
    let mut matched = Matched::new(policy, namespace_object, req, ctx, bound.bindings.len());
    let mut annotations: Vec<(String, Vec<String>)> = Vec::new();
    for binding in bound.bindings.iter() {
        matched.evaluate_binding(binding, &mut annotations, out);
    }
    add_audit_annotations(policy, annotations, out);
}

/// One binding's own decision of a request, as if its policy had no other binding.
#[derive(Debug)]
pub struct BindingOutcome {
    /// The binding's name.
    pub binding: Arc<str>,
    /// What this binding alone decided.
    pub outcome: Outcome,
    /// Whether the binding applied: for at least one of its params, its match conditions held
    /// (or failed with an error). A binding whose match or params failed, or that a
    /// PolicyException excepted, did not.
    pub applied: bool,
}

/// Decides a request against each binding of one policy alone (`wanted` picks them), the
/// policy's own match worked out once: the background audit's question, one evaluation of the
/// policy per object however many bindings it has. An exempt request gives nothing.
pub fn validate_each_binding(
    bound: &BoundPolicy,
    req: &Request<'_>,
    ctx: &Context<'_>,
    wanted: impl Fn(&ValidatingBindingSpec) -> bool,
) -> Vec<BindingOutcome> {
    let policy = &bound.policy;
    let wanted: Vec<&Arc<ValidatingBindingSpec>> =
        bound.bindings.iter().filter(|b| wanted(b)).collect();
    if wanted.is_empty() || exempt(req) {
        return Vec::new();
    }
    let mut policy_out = Outcome::default();
    let scoped = guarded(|| scope(policy, req, ctx, &mut policy_out));
    let mut matched = match &scoped {
        Ok(Some(namespace_object)) => Some(Matched::new(
            policy,
            namespace_object,
            req,
            ctx,
            wanted.len(),
        )),
        _ => None,
    };
    let mut each = Vec::with_capacity(wanted.len());
    for binding in wanted {
        let binding_name: Arc<str> = binding.name.clone();
        let mut out = Outcome::default();
        let applied = match (&mut matched, &scoped) {
            (Some(matched), _) => {
                let decided = guarded(|| {
                    let mut annotations = Vec::new();
                    let applied = matched.evaluate_binding(binding, &mut annotations, &mut out);
                    add_audit_annotations(policy, annotations, &mut out);
                    applied
                });
                decided.unwrap_or_else(|internal| {
                    out = Outcome::default();
                    internal_error(policy, &internal, &mut out);
                    false
                })
            }
            // The policy did not match, or its match failed: each binding shares its error.
            (None, Ok(_)) => {
                out = policy_out.clone();
                false
            }
            (None, Err(internal)) => {
                internal_error(policy, internal, &mut out);
                false
            }
        };
        each.push(BindingOutcome {
            binding: binding_name,
            outcome: out,
            applied,
        });
    }
    each
}

/// The policy's match of a request: the namespace object its expressions see, or `None` when
/// the policy does not apply (a failed match has been recorded in `out`).
fn scope<'c>(
    policy: &ValidatingPolicy,
    req: &Request<'_>,
    ctx: &Context<'c>,
    out: &mut Outcome,
) -> Option<&'c serde_json::Value> {
    let fail = policy.failure_policy() == FailurePolicy::Fail;
    match policy_scope(&policy.spec, req, ctx) {
        Ok(Some(ns)) => Some(ns),
        Ok(None) => {
            if let Some(t) = ctx.trace {
                t.skipped(&policy.name, None, Skip::PolicyNotMatched);
            }
            None
        }
        Err(ScopeError::Namespace(e)) => {
            deny_first(out, e.to_string(), Some("NotFound"));
            None
        }
        Err(e) => {
            if fail {
                deny_first(out, policy_message(policy, None, &e.to_string()), None);
            }
            None
        }
    }
}

/// A policy whose match held for a request, its bindings to evaluate.
struct Matched<'m, 'c> {
    policy: &'m ValidatingPolicy,
    namespace_object: &'m serde_json::Value,
    req: &'m Request<'m>,
    ctx: &'m Context<'c>,
    /// The context's namespaces, the request's namespace labels looked up once for all the
    /// bindings' namespace selectors.
    namespaces: RememberedLabels<'c>,
    fail: bool,
    /// What the policy's expressions gave for each param already evaluated, by the param's
    /// address in the params' store (0: no param). Nothing in it depends on the binding, so
    /// the bindings that evaluate one param (every binding without a paramRef) share one
    /// evaluation, as they would get the same results each. Not kept for a policy of one
    /// binding, nor under a trace, which reports each binding's evaluation.
    evaluated: Option<HashMap<usize, ParamResult>>,
    /// The validations' activation, kept from one param's evaluation for the next.
    checks: Option<Activation<'m>>,
}

/// What a policy's expressions gave for a request and one param.
struct ParamResult {
    matched: MatchConditions,
    /// The validations' decisions, when the match conditions held.
    decisions: Vec<Decision>,
    /// The audit annotations' values, when the match conditions held.
    annotations: AnnotationValues,
    /// From the start of the evaluating binding's evaluations to the end of this one, the
    /// duration of the checks it gives (not read when it gives none).
    elapsed: Duration,
}

impl<'m, 'c> Matched<'m, 'c> {
    fn new(
        policy: &'m ValidatingPolicy,
        namespace_object: &'m serde_json::Value,
        req: &'m Request<'m>,
        ctx: &'m Context<'c>,
        bindings: usize,
    ) -> Self {
        let share = bindings > 1 && ctx.trace.is_none();
        Matched {
            policy,
            namespace_object,
            req,
            ctx,
            namespaces: RememberedLabels::new(ctx.namespaces),
            fail: policy.failure_policy() == FailurePolicy::Fail,
            evaluated: share.then(HashMap::new),
            checks: None,
        }
    }

    /// Evaluates one binding, with each of its params, into `out`; its audit annotation
    /// values join `annotations`. Whether it applied (see [`BindingOutcome`]).
    /// Inlined into both callers: as a call of its own it made the realistic validating
    /// review 0.25% more instructions and 1-3% more time than the loop it was cut from.
    #[inline(always)]
    fn evaluate_binding(
        &mut self,
        binding: &Arc<ValidatingBindingSpec>,
        annotations: &mut Vec<(String, Vec<String>)>,
        out: &mut Outcome,
    ) -> bool {
        let (policy, req, ctx, fail) = (self.policy, self.req, self.ctx, self.fail);
        // A binding whose match or params cannot be worked out is a configuration error.
        let params =
            match binding_params(&policy.spec, &**binding, req, &self.namespaces, ctx.params) {
                Ok(Ok(list)) => list,
                Ok(Err(why)) => {
                    if let Some(t) = ctx.trace {
                        t.skipped(&policy.name, Some(&binding.name), why);
                    }
                    return false;
                }
                Err(e) => {
                    if fail {
                        let msg = policy_message(policy, Some(&binding.name), &e.to_string());
                        deny_first(out, msg, None);
                    }
                    return false;
                }
            };
        if let Some(at) = ctx.exceptions
            && let Some(e) = at.excepting(
                &policy.name,
                &binding.name,
                req,
                &self.namespaces,
                ctx.deadline,
            )
        {
            if let Some(t) = ctx.trace {
                t.skipped(&policy.name, Some(&binding.name), Skip::Excepted);
            }
            out.excepted.push(Excepted {
                policy: policy.name.clone(),
                binding: binding.name.clone(),
                exception: e.id.clone(),
            });
            return false;
        }
        let mut applied = false;
        // When this binding's own evaluations began: the clock is read only for a binding that
        // evaluates (one of 1,024 bindings sharing one evaluation reads it once, not 1,024 times).
        let mut started: Option<Instant> = None;
        // Each param is its own evaluation with its own budget; any failing param denies.
        for param in params {
            if let Some(t) = ctx.trace {
                t.evaluation(&policy.name, &binding.name, param);
            }
            let own;
            let (namespace_object, checks) = (self.namespace_object, &mut self.checks);
            let result = match &mut self.evaluated {
                Some(evaluated) => {
                    let at = param.map_or(0, |p| std::ptr::from_ref(p) as usize);
                    (evaluated.entry(at)).or_insert_with(|| {
                        let since = *started.get_or_insert_with(Instant::now);
                        evaluate_param(policy, namespace_object, req, ctx, param, checks, since)
                    })
                }
                None => {
                    let since = *started.get_or_insert_with(Instant::now);
                    own = evaluate_param(policy, namespace_object, req, ctx, param, checks, since);
                    &own
                }
            };
            match &result.matched {
                MatchConditions::Apply => {}
                MatchConditions::Skip => continue,
                MatchConditions::Error(message) => {
                    applied = true;
                    // As in-tree: the error is the policy's one failed validation (index 0),
                    // denied, warned or audited as the binding says; nothing else is evaluated.
                    let failed = Decision {
                        deny: fail,
                        error: true,
                        message: message.clone(),
                        reason: None,
                        index: 0,
                        error_type: ErrorType::InvalidError,
                    };
                    route_decision(policy, binding, &failed, result.elapsed, out);
                    continue;
                }
            }
            applied = true;
            let decisions = &result.decisions;
            for d in decisions {
                route_decision(policy, binding, d, result.elapsed, out);
            }
            if !decisions.iter().any(|d| d.deny) {
                let error_type = decisions
                    .iter()
                    .find(|d| d.error)
                    .map_or(ErrorType::NoError, |d| d.error_type);
                if error_type != ErrorType::NoError {
                    out.checks.push(Check {
                        policy: policy.name.clone(),
                        binding: binding.name.clone(),
                        error_type,
                        enforcement_action: "allow",
                        message: None,
                        elapsed: result.elapsed,
                    });
                }
            }
            collect_annotations(policy, binding, fail, &result.annotations, annotations, out);
        }
        applied
    }
}

/// Evaluates a policy's match conditions for a request and one param, then, where they
/// hold, its validations and audit annotations.
fn evaluate_param<'a>(
    policy: &'a ValidatingPolicy,
    namespace_object: &'a serde_json::Value,
    req: &'a Request<'a>,
    ctx: &'a Context<'_>,
    param: Option<&'a serde_json::Value>,
    checks: &mut Option<Activation<'a>>,
    since: Instant,
) -> ParamResult {
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
    let matched = evaluate_match_conditions(&evaluation, &policy.match_conditions, sources);
    let (decisions, annotations) = match matched {
        MatchConditions::Apply => {
            let fail = policy.failure_policy() == FailurePolicy::Fail;
            let decisions = evaluate_validations(policy, &evaluation, checks, fail);
            (decisions, annotation_values(policy, &evaluation))
        }
        MatchConditions::Skip | MatchConditions::Error(_) => (Vec::new(), Vec::new()),
    };
    let checked = !decisions.is_empty() || matches!(matched, MatchConditions::Error(_));
    ParamResult {
        matched,
        decisions,
        annotations,
        elapsed: if checked {
            since.elapsed()
        } else {
            Duration::ZERO
        },
    }
}

/// Records a policy's audit annotations: distinct values of one key across bindings and params
/// joined with ", ".
fn add_audit_annotations(
    policy: &ValidatingPolicy,
    annotations: Vec<(String, Vec<String>)>,
    out: &mut Outcome,
) {
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

    use super::test_policies::{bound, cache, conditioned, context, create_deployment, spec};
    use super::{validate, validate_each_binding};
    use crate::model::{
        FailurePolicy, MatchResources, NamedExpression, ValidatingBindingSpec, Validation,
        ValidationAction,
    };
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
        let s = conditioned(
            "namespaceObject.metadata.name != 'staging-ns'",
            "namespaceObject == null",
        );
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
        let failing = conditioned("false", "object.spec.missing == 1");
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

    #[test]
    fn each_binding_is_decided_alone_and_applies_only_when_it_and_its_match_conditions_match() {
        let s = conditioned("object.spec.replicas < 2", "object.metadata.name != 'skip'");
        let mut policy = bound(s, vec![]);
        let binding = |name: &str, action, prod_only: bool| {
            let mut match_resources = MatchResources::default();
            if prod_only {
                match_resources.namespace_selector.match_labels =
                    vec![("environment".into(), "prod".into())];
            }
            Arc::new(ValidatingBindingSpec {
                name: name.into(),
                policy_name: "p".into(),
                match_resources: prod_only.then_some(match_resources),
                param_ref: None,
                validation_actions: vec![action],
            })
        };
        policy.bindings = vec![
            binding("deny", ValidationAction::Deny, false),
            binding("unwanted", ValidationAction::Deny, false),
            binding("warn", ValidationAction::Warn, false),
            binding("prod", ValidationAction::Deny, true),
        ]
        .into();
        let namespaces = cache();
        let ctx = context(&namespaces);
        let raw = create_deployment(json!({"metadata": {"name": "d"}, "spec": {"replicas": 3}}));
        let req = Request::from_json(&raw).expect("valid request");
        let each = validate_each_binding(&policy, &req, &ctx, |b| &*b.name != "unwanted");
        let names: Vec<&str> = each.iter().map(|o| &*o.binding).collect();
        assert_eq!(names, ["deny", "warn", "prod"]);
        let applied: Vec<bool> = each.iter().map(|o| o.applied).collect();
        assert_eq!(applied, [true, true, false]);
        let denied = "ValidatingAdmissionPolicy 'p' with binding 'deny' denied request: failed expression: object.spec.replicas < 2";
        assert_eq!(
            each[0].outcome.denial.as_ref().map(|d| d.message.as_str()),
            Some(denied)
        );
        assert!(each[0].outcome.warnings.is_empty());
        assert!(each[1].outcome.allowed());
        assert_eq!(
            each[1].outcome.warnings,
            [
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'warn': failed expression: object.spec.replicas < 2"
            ]
        );
        assert!(each[2].outcome.allowed() && each[2].outcome.warnings.is_empty());
        // Together they decide as the policy does with those bindings.
        let mut kept = policy.bindings.to_vec();
        kept.remove(1);
        policy.bindings = kept.into();
        let whole = validate(std::slice::from_ref(&policy), &req, &ctx);
        assert_eq!(whole.denial.map(|d| d.message).as_deref(), Some(denied));
        assert_eq!(whole.warnings, each[1].outcome.warnings);
        // A match condition that does not hold: no binding applies, none decides.
        let raw = create_deployment(json!({"metadata": {"name": "skip"}, "spec": {"replicas": 3}}));
        let req = Request::from_json(&raw).expect("valid request");
        let each = validate_each_binding(&policy, &req, &ctx, |_| true);
        assert_eq!(each.len(), 3);
        assert!(each.iter().all(|o| !o.applied && o.outcome.allowed()));
    }

    /// Counts its checks and allows every one.
    #[derive(Default)]
    struct Counting(std::sync::atomic::AtomicUsize);
    impl Authorizer for Counting {
        fn check(&self, _: &celgate_cel::AuthzRequest) -> celgate_cel::AuthzDecision {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            celgate_cel::AuthzDecision {
                decision: celgate_cel::authz::Decision::Allow,
                reason: String::new(),
                error: None,
            }
        }
    }

    /// ConfigMaps in `staging-ns`, each with its `max`, as every param kind's objects.
    struct StagingParams(crate::params::ParamObjects);
    impl crate::params::Params for StagingParams {
        fn kind(&self, _: &crate::model::ParamKind) -> crate::params::ParamKindState<'_> {
            crate::params::ParamKindState::Ready(&self.0)
        }
    }

    impl StagingParams {
        fn new(maxes: &[(&str, i64)]) -> Self {
            let mut objects = crate::params::ParamObjects::new(true);
            for (name, max) in maxes {
                let object = json!({"metadata": {"name": name}, "max": max});
                objects.insert("staging-ns", name, Arc::new(object));
            }
            StagingParams(objects)
        }
    }

    /// A policy of `validations` and `variables` whose params are ConfigMaps.
    fn with_config_map_params(
        validations: Vec<Validation>,
        variables: Vec<NamedExpression>,
    ) -> crate::BoundPolicy {
        let mut s = spec(validations);
        s.variables = variables;
        s.param_kind = Some(crate::model::ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        });
        bound(s, vec![])
    }

    /// Binding `name` of policy `p` to the params `param_ref` picks, with `action`.
    fn param_binding(
        name: &str,
        param_ref: crate::model::ParamRef,
        action: ValidationAction,
    ) -> Arc<ValidatingBindingSpec> {
        Arc::new(ValidatingBindingSpec {
            name: name.into(),
            policy_name: "p".into(),
            match_resources: None,
            param_ref: Some(Box::new(param_ref)),
            validation_actions: vec![action],
        })
    }

    #[test]
    fn bindings_evaluating_one_param_share_one_evaluation_and_each_routes_it() {
        let validation = Validation {
            expression:
                "authorizer.path('/x').check('get').allowed() && object.spec.replicas <= params.max"
                    .into(),
            ..Default::default()
        };
        let mut policy = with_config_map_params(vec![validation], vec![]);
        let binding = |name: &str, param: &str, action| {
            let by_name = crate::model::ParamRef {
                name: Some(param.into()),
                ..Default::default()
            };
            param_binding(name, by_name, action)
        };
        policy.bindings = vec![
            binding("first", "a", ValidationAction::Deny),
            binding("second", "b", ValidationAction::Warn),
            binding("third", "a", ValidationAction::Warn),
            binding("fourth", "b", ValidationAction::Deny),
        ]
        .into();
        let params = StagingParams::new(&[("a", 5), ("b", 2)]);
        let namespaces = cache();
        let counting = Arc::new(Counting::default());
        let authorizer: Arc<dyn Authorizer> = counting.clone();
        let mut ctx = context(&namespaces);
        ctx.params = &params;
        ctx.authorizer = Some(&authorizer);
        let raw = create_deployment(json!({"spec": {"replicas": 3}}));
        let req = Request::from_json(&raw).expect("valid request");
        let out = validate(std::slice::from_ref(&policy), &req, &ctx);
        // Two params, two evaluations, whatever the number of bindings.
        assert_eq!(counting.0.load(std::sync::atomic::Ordering::Relaxed), 2);
        let failed = "failed expression: authorizer.path('/x').check('get').allowed() && object.spec.replicas <= params.max";
        assert_eq!(
            out.denial.map(|d| d.message),
            Some(format!(
                "ValidatingAdmissionPolicy 'p' with binding 'fourth' denied request: {failed}"
            ))
        );
        assert_eq!(
            out.warnings,
            [format!(
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'second': {failed}"
            )]
        );
        // Each check takes the duration of the evaluation it comes from: those of one param
        // are equal, whichever binding routes them.
        let elapsed = |binding: &str| {
            (out.checks.iter().filter(|c| &*c.binding == binding))
                .map(|c| c.elapsed)
                .collect::<Vec<_>>()
        };
        let (second, fourth) = (elapsed("second"), elapsed("fourth"));
        assert_eq!(second.len(), 1);
        assert!(second[0] > std::time::Duration::ZERO);
        assert_eq!(second, fourth, "param b's one evaluation");
        // The audit's path shares them too, each binding decided alone.
        let each = validate_each_binding(&policy, &req, &ctx, |_| true);
        assert_eq!(counting.0.load(std::sync::atomic::Ordering::Relaxed), 4);
        let denied: Vec<bool> = each.iter().map(|o| !o.outcome.allowed()).collect();
        assert_eq!(denied, [false, false, false, true]);
        assert_eq!(each[1].outcome.warnings.len(), 1);
        assert!(each[2].outcome.warnings.is_empty());
    }

    #[test]
    fn each_param_of_a_binding_is_evaluated_with_its_own_params_and_variables() {
        let validation = Validation {
            expression: "object.spec.replicas <= variables.max".into(),
            message_expression: Some("'over the max of ' + params.metadata.name".into()),
            ..Default::default()
        };
        let max = NamedExpression {
            name: "max".into(),
            expression: "params.max".into(),
        };
        let mut policy = with_config_map_params(vec![validation], vec![max]);
        let selecting = |name: &str, action| {
            let every = crate::model::ParamRef {
                selector: Some(Default::default()),
                ..Default::default()
            };
            param_binding(name, every, action)
        };
        policy.bindings = vec![selecting("warns", ValidationAction::Warn)].into();
        // Evaluated in name order: a passing param before and after the failing one, so a
        // `params` or variable left from the param before would pass `b`.
        let params = StagingParams::new(&[("a", 5), ("b", 2), ("c", 9), ("d", 1)]);
        let namespaces = cache();
        let mut ctx = context(&namespaces);
        ctx.params = &params;
        let raw = create_deployment(json!({"spec": {"replicas": 3}}));
        let req = Request::from_json(&raw).expect("valid request");
        let warned = |policy: &crate::BoundPolicy| {
            validate(std::slice::from_ref(policy), &req, &ctx).warnings
        };
        let over = |name: &str| {
            format!(
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'warns': over the max of {name}"
            )
        };
        assert_eq!(warned(&policy), [over("b"), over("d")]);
        // The same with two bindings, which share each param's evaluation.
        policy.bindings = vec![
            selecting("warns", ValidationAction::Warn),
            selecting("denies", ValidationAction::Deny),
        ]
        .into();
        let out = validate(std::slice::from_ref(&policy), &req, &ctx);
        assert_eq!(out.warnings, [over("b"), over("d")]);
        assert_eq!(
            out.denial.map(|d| d.message),
            Some("ValidatingAdmissionPolicy 'p' with binding 'denies' denied request: over the max of b".to_string())
        );
    }
}
