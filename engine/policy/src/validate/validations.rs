//! A policy's validations and their message expressions: which failed or errored, with the
//! message and reason each reports.

use celgate_cel::{Activation, Budget, EvalError, RUNTIME_BUDGET, Value};
use smallvec::SmallVec;

use crate::compile::ValidatingPolicy;

use crate::check::{CheckError, ErrorType};
use crate::evaluation::{Batch, Evaluation};
use crate::trace::{self, Effect, Phase, Step, StepKind, StepResult};

/// Longest evaluated message kept from a messageExpression, in bytes.
pub const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;

/// The decision for one validation (or one single-decision error) of one evaluation.
pub(super) struct Decision {
    pub(super) deny: bool,
    pub(super) error: bool,
    pub(super) message: String,
    pub(super) reason: Option<String>,
    pub(super) index: usize,
    pub(super) error_type: ErrorType,
}

/// The decision an error comes to: a denial under failurePolicy Fail.
fn error_decision(fail: bool, error: &CheckError, index: usize) -> Decision {
    Decision {
        deny: fail,
        error: true,
        error_type: error.error_type(),
        message: error.to_string(),
        reason: None,
        index,
    }
}

/// The message a message expression's string gives (trimmed), or why it gives none.
fn usable_message(s: &str) -> Result<String, &'static str> {
    let s = s.trim();
    if s.is_empty() {
        Err("it is empty: the message or the expression's text is used instead")
    } else if s.len() > MAX_MESSAGE_EXPRESSION_BYTES {
        Err("it is longer than 5120 bytes: the message or the expression's text is used instead")
    } else if s.contains('\n') {
        Err("it has a line break: the message or the expression's text is used instead")
    } else {
        Ok(s.to_string())
    }
}

/// A traced message expression.
fn message_step<'t, 'a>(
    expression: &'t str,
    index: usize,
    result: StepResult<'t, 'a>,
    cost: u64,
    effect: Effect,
) -> Step<'t, 'a> {
    Step {
        phase: Phase::Messages,
        kind: StepKind::MessageExpression,
        index,
        name: "",
        expression,
        result,
        cost,
        effect,
    }
}

/// Whether the message expressions of validations that did not fail may be left unevaluated
/// without changing the outcome. Upstream evaluates every message expression, and the message
/// of a validation that passed (or errored) is never shown: all its evaluation can change is
/// the shared budget, and the budget matters only if the batch can run out of it. It cannot
/// when what is left covers the most the batch can spend. Each evaluation spends at most the
/// per-call limit. One message expression evaluates each variable at most once: a variable's
/// result is memoised unless its error is fatal, and a fatal error ends the expression. So the
/// batch spends at most `messages × (1 + variables) × per-call limit`.
fn unused_messages_skippable(policy: &ValidatingPolicy, budget: &Budget) -> bool {
    let messages = policy
        .validations
        .iter()
        .filter(|v| matches!(v.message_expression, Some(Ok(_))))
        .count() as u64;
    let variables = policy.message_variables.len() as u64;
    messages
        .saturating_mul(variables.saturating_add(1))
        .saturating_mul(budget.per_call_limit())
        <= budget.remaining()
}

/// Evaluates a policy's validations and their message expressions into one decision per failed
/// or errored validation (one in all when the shared budget runs out).
pub(super) fn evaluate_validations<'a>(
    policy: &'a ValidatingPolicy,
    evaluation: &Evaluation<'a>,
    checks: &mut Option<Activation<'a>>,
    fail: bool,
) -> Vec<Decision> {
    let act = evaluation.checks_activation(checks);
    let mut budget = evaluation.budget(RUNTIME_BUDGET);
    let trace = evaluation.trace;
    // Kept inline for a few validations: one evaluation per param, 1,024 params to a binding.
    let mut results: SmallVec<[Result<bool, CheckError>; 4]> = SmallVec::new();
    for (index, v) in policy.validations.iter().enumerate() {
        let step = |result, cost, effect| Step {
            phase: Phase::Validations,
            kind: StepKind::Validation,
            index,
            name: "",
            expression: &v.expression,
            result,
            cost,
            effect,
        };
        let p = match &v.program {
            Err(e) => {
                if let Some(t) = trace {
                    t.step(&step(StepResult::NotCompiled(e), 0, Effect::Error));
                }
                results.push(Err(CheckError::Compile(e.clone())));
                continue;
            }
            Ok(p) => p,
        };
        let (result, cost) = p.eval_with_cost(act, &mut budget);
        if let Some(t) = trace {
            let (traced, effect) = match &result {
                Ok(v) => (
                    StepResult::Value(v),
                    match v {
                        Value::Bool(true) => Effect::Passed,
                        Value::Bool(false) => Effect::Failed,
                        _ => Effect::Error,
                    },
                ),
                Err(e) => (StepResult::Error(e), Effect::Error),
            };
            t.step(&step(traced, cost, effect));
        }
        let result = match result {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(CheckError::NotBool {
                expression: p.source().to_string(),
                type_name: other.type_name().to_string(),
            }),
            Err(EvalError::BudgetExhausted) => {
                if let Some(t) = trace {
                    trace::variables(t, &policy.spec.variables, Phase::Validations, act);
                }
                return vec![error_decision(fail, &CheckError::OutOfBudget, 0)];
            }
            Err(error) => Err(CheckError::Eval {
                expression: p.source().to_string(),
                error,
            }),
        };
        results.push(result);
    }
    if let Some(t) = trace {
        trace::variables(t, &policy.spec.variables, Phase::Validations, act);
    }
    // Message expressions run for every validation that has one, with the remaining budget and
    // their own variable memo (an activation built only when a validation has one); but see
    // `unused_messages_skippable`.
    let skip_unused = trace.is_none() && unused_messages_skippable(policy, &budget);
    let mut act = None;
    let mut messages: SmallVec<[Option<String>; 4]> = SmallVec::new();
    for (index, v) in policy.validations.iter().enumerate() {
        let failed = matches!(results.get(index), Some(Ok(false)));
        let msg = match &v.message_expression {
            Some(Ok(_)) if skip_unused && !failed => None,
            Some(Ok(p)) => {
                let act = act.get_or_insert_with(|| evaluation.activation(Batch::Messages));
                let (result, cost) = p.eval_with_cost(act, &mut budget);
                let message = match &result {
                    Ok(Value::String(s)) => usable_message(s),
                    _ => Err("it did not evaluate to a string"),
                };
                if let Some(t) = trace {
                    let effect = match (&result, &message) {
                        (Err(EvalError::BudgetExhausted), _) => Effect::Error,
                        (Err(_), _) => Effect::Ignored(
                            "it failed: the message or the expression's text is used instead",
                        ),
                        (_, Err(why)) => Effect::Ignored(why),
                        (_, Ok(_)) if failed => Effect::Used,
                        (_, Ok(_)) => Effect::Ignored("the validation did not fail"),
                    };
                    let traced = match &result {
                        Ok(v) => StepResult::Value(v),
                        Err(e) => StepResult::Error(e),
                    };
                    t.step(&message_step(p.source(), index, traced, cost, effect));
                }
                if let Err(EvalError::BudgetExhausted) = result {
                    if let Some(t) = trace {
                        trace::variables(t, &policy.spec.variables, Phase::Messages, act);
                    }
                    return (0..policy.validations.len())
                        .map(|i| error_decision(fail, &CheckError::MessageOutOfBudget, i))
                        .collect();
                }
                message.ok()
            }
            Some(Err(e)) => {
                if let Some(t) = trace {
                    let source = policy
                        .spec
                        .validations
                        .get(index)
                        .and_then(|v| v.message_expression.as_deref())
                        .unwrap_or_default();
                    let effect = Effect::Ignored(
                        "it does not compile: the message or the expression's text is used instead",
                    );
                    t.step(&message_step(
                        source,
                        index,
                        StepResult::NotCompiled(e),
                        0,
                        effect,
                    ));
                }
                None
            }
            None => None,
        };
        messages.push(msg);
    }
    if let (Some(t), Some(act)) = (trace, &act) {
        trace::variables(t, &policy.spec.variables, Phase::Messages, act);
    }
    let mut decisions = Vec::new();
    for (index, (v, result)) in policy.validations.iter().zip(results).enumerate() {
        match result {
            Err(error) => decisions.push(error_decision(fail, &error, index)),
            Ok(true) => {}
            Ok(false) => {
                let message = messages[index]
                    .take()
                    .or_else(|| {
                        v.message
                            .as_deref()
                            .map(str::trim)
                            .filter(|m| !m.is_empty())
                            .map(str::to_string)
                    })
                    .unwrap_or_else(|| format!("failed expression: {}", v.expression.trim()));
                decisions.push(Decision {
                    deny: true,
                    error: false,
                    message,
                    reason: v.reason.clone(),
                    index,
                    error_type: ErrorType::InvalidError,
                });
            }
        }
    }
    decisions
}

#[cfg(test)]
mod tests {
    use crate::model::{FailurePolicy, NamedExpression, Validation, ValidationAction};
    use crate::validate::ErrorType;
    use crate::validate::test_policies::{run, spec};

    #[test]
    fn reasons_codes_and_runtime_errors() {
        let s = spec(vec![
            Validation {
                expression: "object.spec.replicas > 50".into(),
                reason: Some("Forbidden".into()),
                ..Default::default()
            },
            Validation {
                expression: "object.spec.missing == 1".into(),
                ..Default::default()
            },
        ]);
        let out = run(s.clone(), &[ValidationAction::Deny], "x");
        let d = out.denial.expect("denied");
        assert_eq!((d.code, d.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed expression: object.spec.replicas > 50"
        );
        let mut only_error = s;
        only_error.validations.remove(0);
        let d = run(only_error.clone(), &[ValidationAction::Deny], "x")
            .denial
            .expect("denied");
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: expression 'object.spec.missing == 1' resulted in error: no such key: missing"
        );
        assert_eq!(d.code, 422);
        only_error.failure_policy = FailurePolicy::Ignore;
        let out = run(only_error, &[ValidationAction::Deny], "x");
        assert!(out.allowed());
        assert_eq!(out.checks[0].enforcement_action, "allow");
        assert_eq!(out.checks[0].error_type, ErrorType::InvalidError);
    }

    /// Validations that pass, each with a message expression of a million iterations, more
    /// than the per-call limit allows: it stops at the limit, having spent just under it (an
    /// error a message ignores).
    fn costly_messages(n: usize) -> Vec<Validation> {
        let hundred = (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let costly = format!(
            "[{hundred}].all(a, [{hundred}].all(b, [{hundred}].all(c, a + b + c >= 0))) ? 'a' : 'b'"
        );
        (0..n)
            .map(|_| Validation {
                expression: "true".into(),
                message_expression: Some(costly.clone()),
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn message_expressions_of_passing_validations_can_exhaust_the_budget() {
        // Eleven such messages spend more than the 10,000,000 budget: as upstream, every
        // decision is then an error, although every validation passed.
        let d = run(spec(costly_messages(11)), &[ValidationAction::Deny], "x")
            .denial
            .expect("denied");
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed messageExpression: validation failed due to running out of cost budget, no further validation rules will be run"
        );
        // Nine cannot run out (9 × 1,000,000 is within the budget): the passing validations'
        // messages are never shown, so leaving them unevaluated changes nothing.
        assert!(run(spec(costly_messages(9)), &[ValidationAction::Deny], "x").allowed());
        // Nor with a failing validation among them, whose message is evaluated and shown.
        let mut validations = costly_messages(8);
        validations.push(Validation {
            expression: "false".into(),
            message_expression: Some("'fails for ' + object.metadata.name".into()),
            ..Default::default()
        });
        let d = run(spec(validations), &[ValidationAction::Deny], "x")
            .denial
            .expect("denied");
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: fails for web"
        );
    }

    #[test]
    fn program_instantiation_failures_follow_the_failure_policy() {
        let mut s = spec(vec![Validation {
            expression: "object.metadata.name.find('[') == ''".into(),
            ..Default::default()
        }]);
        let d = run(s.clone(), &[ValidationAction::Deny], "x")
            .denial
            .expect("denied");
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: compilation error: program instantiation failed: error parsing regexp: missing closing ]: `[`"
        );
        s.failure_policy = FailurePolicy::Ignore;
        assert!(run(s, &[ValidationAction::Deny], "x").allowed());
    }

    #[test]
    fn strings_grown_past_celgates_bound_are_the_validations_error() {
        let expression = "object.spec.template.spec.containers[0].image.replace('a', 'bbbbbbbbbbbbbbbbbbbb') != ''";
        let s = spec(vec![Validation {
            expression: expression.into(),
            ..Default::default()
        }]);
        let d = run(s, &[ValidationAction::Deny], &"a".repeat(1_000_000))
            .denial
            .expect("denied");
        assert_eq!(
            d.message,
            format!(
                "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: expression '{expression}' resulted in error: operation cancelled: replace would grow strings by more than 12582912 bytes, celgate's bound on what replace and format build"
            )
        );
    }

    /// A variable of a million iterations: more than the per-call limit allows.
    fn scan() -> NamedExpression {
        let hundred = (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        NamedExpression {
            name: "scan".into(),
            expression: format!(
                "[{hundred}].all(a, [{hundred}].all(b, [{hundred}].all(c, a + b + c >= 0)))"
            ),
        }
    }

    #[test]
    fn a_variable_past_the_per_call_limit_is_the_reading_validations_error() {
        // As Kubernetes: the variable is a program of its own, stopped by its own per-call
        // limit; its error (memoised, charged once) is the validation's.
        let reading = |expression: &str, n: usize| {
            let mut s = spec(
                (0..n)
                    .map(|_| Validation {
                        expression: expression.into(),
                        ..Default::default()
                    })
                    .collect(),
            );
            s.variables = vec![scan()];
            run(s, &[ValidationAction::Deny], "x")
        };
        // Twelve validations read it: the variable is evaluated once, so the 10,000,000
        // budget is not exhausted.
        let d = reading("variables.scan", 12).denial.expect("denied");
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: expression 'variables.scan' resulted in error: composited variable \"scan\" fails to evaluate: operation cancelled: actual cost limit exceeded"
        );
        assert_eq!(d.code, 422);
        // The error is a value to the reading expression, which may absorb it.
        assert!(reading("variables.scan || true", 12).allowed());
    }

    #[test]
    fn variables_spend_the_shared_budget() {
        // Eleven such variables, each read once, each charged its million: the eleventh runs
        // past the 10,000,000 budget, which ends the batch as upstream's check after it does.
        let mut s = spec(
            (0..11)
                .map(|i| Validation {
                    expression: format!("variables.scan{i} || true"),
                    ..Default::default()
                })
                .collect(),
        );
        s.variables = (0..11)
            .map(|i| NamedExpression {
                name: format!("scan{i}"),
                ..scan()
            })
            .collect();
        let d = run(s, &[ValidationAction::Deny], "x")
            .denial
            .expect("denied");
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: validation failed due to running out of cost budget, no further validation rules will be run"
        );
    }
}
