//! Tracing of one validation, for offline tools (`celgate eval`): each expression evaluated,
//! with its value or error, the cost it was charged and what it did to the decision, and why a
//! policy or binding was passed over. The webhook passes no tracer; a tracer only observes, so
//! it never changes a decision.

use celgate_cel::{Activation, EvalError, Value};

use crate::compile::ExprError;
use crate::model::NamedExpression;

/// Receives the steps of a validation as they happen. Methods take `&self` so a tracer can sit
/// in the evaluation's `Context`, which it shares; implementations collect with
/// interior mutability.
pub trait Trace {
    /// A binding starts evaluating the policy with one param (`None`: the policy has no
    /// paramKind, or the binding evaluates with `params` null).
    fn evaluation(&self, policy: &str, binding: &str, param: Option<&serde_json::Value>);

    /// One expression was evaluated, or could not be because it does not compile.
    fn step(&self, step: &Step<'_, '_>);

    /// A policy (`binding` `None`) or one of its bindings was not evaluated for the request.
    fn skipped(&self, policy: &str, binding: Option<&str>, why: Skip);
}

/// Which list an expression belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// `spec.matchConditions[i]`.
    MatchCondition,
    /// `spec.variables[i]`, evaluated on first use.
    Variable,
    /// `spec.validations[i].expression`.
    Validation,
    /// `spec.validations[i].messageExpression`.
    MessageExpression,
    /// `spec.auditAnnotations[i].valueExpression`.
    AuditAnnotation,
}

/// The batch an expression ran in; each batch has its own activation, so a variable is
/// evaluated (and charged) again in each batch that reads it, as upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// The match conditions.
    MatchConditions,
    /// The validations.
    Validations,
    /// The validations' message expressions.
    Messages,
    /// The audit annotations.
    AuditAnnotations,
}

/// What an expression gave.
#[derive(Clone, Copy, Debug)]
pub enum StepResult<'t, 'a> {
    /// Its value.
    Value(&'t Value<'a>),
    /// Its evaluation error ([`EvalError::detail`] has more).
    Error(&'t EvalError),
    /// It does not compile, so it was not evaluated.
    NotCompiled(&'t ExprError),
}

/// What a step did to the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// A match condition held, or a validation passed.
    Passed,
    /// A match condition was false: the policy does not apply for this binding and param.
    NotMatched,
    /// A validation failed: the binding's validation actions apply.
    Failed,
    /// The value was used: a variable read by an expression, the message of a failed
    /// validation, an audit annotation's value.
    Used,
    /// The value was not used, for this reason.
    Ignored(&'static str),
    /// The step is an error, decided by the failurePolicy.
    Error,
}

/// One traced expression.
#[derive(Clone, Copy, Debug)]
pub struct Step<'t, 'a> {
    /// The batch it ran in.
    pub phase: Phase,
    /// Which list it belongs to.
    pub kind: StepKind,
    /// Its position in that list.
    pub index: usize,
    /// The match condition's or variable's name, the audit annotation's key; empty for
    /// validations and message expressions.
    pub name: &'t str,
    /// Its source.
    pub expression: &'t str,
    /// What it gave.
    pub result: StepResult<'t, 'a>,
    /// The cost it was charged (variables it read are steps of their own).
    pub cost: u64,
    /// What it did.
    pub effect: Effect,
}

/// Why a policy or binding was passed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// The request is outside the policy's matchConstraints.
    PolicyNotMatched,
    /// The request is outside the binding's matchResources.
    BindingNotMatched,
    /// No param was found and the binding's parameterNotFoundAction is Allow.
    NoParams,
    /// A PolicyException excepts the request from the binding (the outcome names it).
    Excepted,
}

/// Reports, after a batch, the variables its activation evaluated (`sources`: the policy's
/// `spec.variables`).
pub(crate) fn variables(
    trace: &dyn Trace,
    sources: &[NamedExpression],
    phase: Phase,
    act: &Activation<'_>,
) {
    for v in act.evaluated_variables() {
        let (result, effect) = match v.result {
            Ok(value) => (StepResult::Value(value), Effect::Used),
            Err(e) => (StepResult::Error(e), Effect::Error),
        };
        trace.step(&Step {
            phase,
            kind: StepKind::Variable,
            index: v.index,
            name: v.name,
            expression: sources.get(v.index).map_or("", |d| d.expression.as_str()),
            result,
            cost: v.cost,
            effect,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use serde_json::json;

    use super::{Effect, Phase, Skip, Step, StepKind, StepResult, Trace};
    use crate::model::{AuditAnnotation, NamedExpression, Validation, ValidationAction};
    use crate::request::Request;
    use crate::validate::test_policies::{bound, cache, context, create_deployment, spec};
    use crate::validate::{Outcome, validate};

    /// What a step comes to, owned: (phase, kind, index, name, value or error, effect).
    type Seen = (Phase, StepKind, usize, String, String, Effect);

    #[derive(Default)]
    struct Recorder {
        steps: RefCell<Vec<Seen>>,
        costs: RefCell<Vec<u64>>,
        evaluations: RefCell<Vec<(String, String)>>,
        skips: RefCell<Vec<(String, Option<String>, Skip)>>,
    }

    impl Trace for Recorder {
        fn evaluation(&self, policy: &str, binding: &str, _: Option<&serde_json::Value>) {
            self.evaluations
                .borrow_mut()
                .push((policy.into(), binding.into()));
        }

        fn step(&self, s: &Step<'_, '_>) {
            let shown = match s.result {
                StepResult::Value(v) => v.to_json().map(|j| j.to_string()).unwrap_or_default(),
                StepResult::Error(e) => format!("error: {e}"),
                StepResult::NotCompiled(e) => format!("not compiled: {e}"),
            };
            self.steps.borrow_mut().push((
                s.phase,
                s.kind,
                s.index,
                s.name.into(),
                shown,
                s.effect,
            ));
            self.costs.borrow_mut().push(s.cost);
        }

        fn skipped(&self, policy: &str, binding: Option<&str>, why: Skip) {
            self.skips
                .borrow_mut()
                .push((policy.into(), binding.map(Into::into), why));
        }
    }

    #[test]
    fn every_expression_is_traced_with_its_value_cost_and_effect_and_the_decision_is_unchanged() {
        let mut s = spec(vec![
            Validation {
                expression: "variables.replicas <= 2".into(),
                message_expression: Some("'too many: ' + string(variables.replicas)".into()),
                ..Default::default()
            },
            Validation {
                expression: "object.metadata.name != ''".into(),
                message_expression: Some("''".into()),
                ..Default::default()
            },
        ]);
        s.variables = vec![NamedExpression {
            name: "replicas".into(),
            expression: "object.spec.replicas".into(),
        }];
        s.match_conditions = vec![NamedExpression {
            name: "named".into(),
            expression: "has(object.metadata.name)".into(),
        }];
        s.audit_annotations = vec![AuditAnnotation {
            key: "who".into(),
            value_expression: "null".into(),
        }];
        let policies = [bound(s, vec![ValidationAction::Deny])];
        let raw = create_deployment(json!({"metadata": {"name": "web"}, "spec": {"replicas": 3}}));
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let untraced = validate(&policies, &req, &context(&namespaces));
        let recorder = Recorder::default();
        let mut ctx = context(&namespaces);
        ctx.trace = Some(&recorder);
        let traced = validate(&policies, &req, &ctx);
        assert_eq!(
            traced,
            Outcome {
                checks: traced.checks.clone(),
                ..untraced.clone()
            }
        );
        assert_eq!(
            traced.denial.map(|d| d.message).as_deref(),
            Some("ValidatingAdmissionPolicy 'p' with binding 'b' denied request: too many: 3")
        );
        assert_eq!(
            recorder.evaluations.into_inner(),
            vec![("p".into(), "b".into())]
        );
        let steps = recorder.steps.into_inner();
        let ignored_empty =
            Effect::Ignored("it is empty: the message or the expression's text is used instead");
        let step = |phase, kind, index, name: &str, shown: &str, effect| {
            (
                phase,
                kind,
                index,
                name.to_string(),
                shown.to_string(),
                effect,
            )
        };
        assert_eq!(
            steps,
            vec![
                step(
                    Phase::MatchConditions,
                    StepKind::MatchCondition,
                    0,
                    "named",
                    "true",
                    Effect::Passed
                ),
                step(
                    Phase::Validations,
                    StepKind::Validation,
                    0,
                    "",
                    "false",
                    Effect::Failed
                ),
                step(
                    Phase::Validations,
                    StepKind::Validation,
                    1,
                    "",
                    "true",
                    Effect::Passed
                ),
                step(
                    Phase::Validations,
                    StepKind::Variable,
                    0,
                    "replicas",
                    "3",
                    Effect::Used
                ),
                step(
                    Phase::Messages,
                    StepKind::MessageExpression,
                    0,
                    "",
                    "\"too many: 3\"",
                    Effect::Used
                ),
                step(
                    Phase::Messages,
                    StepKind::MessageExpression,
                    1,
                    "",
                    "\"\"",
                    ignored_empty
                ),
                step(
                    Phase::Messages,
                    StepKind::Variable,
                    0,
                    "replicas",
                    "3",
                    Effect::Used
                ),
                step(
                    Phase::AuditAnnotations,
                    StepKind::AuditAnnotation,
                    0,
                    "who",
                    "null",
                    Effect::Ignored("null or empty: the annotation is omitted")
                ),
            ]
        );
        let costs = recorder.costs.into_inner();
        // Constants (`''`, `null`) cost nothing; everything that reads or computes does.
        let charged: Vec<bool> = costs.iter().map(|&c| c > 0).collect();
        assert_eq!(
            charged,
            [true, true, true, true, true, false, true, false],
            "{costs:?}"
        );
    }

    #[test]
    fn a_policy_the_request_does_not_match_is_reported_as_skipped() {
        let mut s = spec(vec![]);
        if let Some(m) = s.match_constraints.as_mut() {
            m.resource_rules[0].resources = vec!["statefulsets".into()];
        }
        let policies = [bound(s, vec![ValidationAction::Deny])];
        let raw = create_deployment(json!({"spec": {}}));
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let recorder = Recorder::default();
        let mut ctx = context(&namespaces);
        ctx.trace = Some(&recorder);
        assert!(validate(&policies, &req, &ctx).allowed());
        assert_eq!(
            recorder.skips.into_inner(),
            vec![("p".to_string(), None, Skip::PolicyNotMatched)]
        );
        assert!(recorder.steps.into_inner().is_empty());
    }
}
