//! A policy's validations and their message expressions: which failed or errored, with the
//! message and reason each reports.

use celgate_cel::{EvalError, RUNTIME_BUDGET, Value};

use crate::compile::ValidatingPolicy;

use super::outcome::{CheckError, ErrorType};
use crate::evaluation::{Batch, Evaluation};

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

/// Evaluates a policy's validations and their message expressions into one decision per failed
/// or errored validation (one in all when the shared budget runs out).
pub(super) fn evaluate_validations(
    policy: &ValidatingPolicy,
    evaluation: &Evaluation<'_>,
    fail: bool,
) -> Vec<Decision> {
    let act = evaluation.activation(Batch::Checks);
    let mut budget = evaluation.budget(RUNTIME_BUDGET);
    let mut results: Vec<Result<bool, CheckError>> = Vec::with_capacity(policy.validations.len());
    for v in &policy.validations {
        let result = match &v.program {
            Err(e) => Err(CheckError::Compile(e.clone())),
            Ok(p) => match p.eval(&act, &mut budget) {
                Ok(Value::Bool(b)) => Ok(b),
                Ok(other) => Err(CheckError::NotBool {
                    expression: p.source().to_string(),
                    type_name: other.type_name().to_string(),
                }),
                Err(EvalError::BudgetExhausted) => {
                    return vec![error_decision(fail, &CheckError::OutOfBudget, 0)];
                }
                Err(error) => Err(CheckError::Eval {
                    expression: p.source().to_string(),
                    error,
                }),
            },
        };
        results.push(result);
    }
    // Message expressions run for every validation that has one, with the remaining budget and
    // their own variable memo (an activation built only when a validation has one).
    let mut act = None;
    let mut messages: Vec<Option<String>> = Vec::with_capacity(results.len());
    for v in &policy.validations {
        let msg = match &v.message_expression {
            Some(Ok(p)) => match p.eval(
                act.get_or_insert_with(|| evaluation.activation(Batch::Messages)),
                &mut budget,
            ) {
                Ok(Value::String(s)) => {
                    let s = s.trim();
                    (!s.is_empty() && s.len() <= MAX_MESSAGE_EXPRESSION_BYTES && !s.contains('\n'))
                        .then(|| s.to_string())
                }
                Err(EvalError::BudgetExhausted) => {
                    return (0..policy.validations.len())
                        .map(|i| error_decision(fail, &CheckError::MessageOutOfBudget, i))
                        .collect();
                }
                _ => None,
            },
            _ => None,
        };
        messages.push(msg);
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
    use crate::model::{FailurePolicy, Validation, ValidationAction};
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
}
