//! A policy's match conditions: whether it applies to the request at all. Shared by validating
//! and mutating policies; each reports an error in its own message format.

use celgate_cel::{MATCH_CONDITIONS_BUDGET, Value};

use crate::compile::CompiledMatchCondition;
use crate::evaluation::{Batch, Evaluation};
use crate::validate::CheckError;

/// What a policy's match conditions decided for one evaluation.
#[derive(Debug, PartialEq)]
pub(crate) enum MatchConditions {
    /// All true (or none): the policy applies.
    Apply,
    /// One is false (whatever the others gave): the policy does not apply.
    Skip,
    /// None is false and some failed: the message upstream reports (one error's text, or
    /// `[e1, e2]`); failurePolicy decides.
    Error(String),
}

/// Evaluates match conditions in order with their own budget: any false skips the policy,
/// else any error is an error, else it applies.
pub(crate) fn evaluate_match_conditions(
    evaluation: &Evaluation<'_>,
    conditions: &[CompiledMatchCondition],
) -> MatchConditions {
    if conditions.is_empty() {
        return MatchConditions::Apply;
    }
    let act = &evaluation.activation(Batch::Checks);
    let mut budget = evaluation.budget(MATCH_CONDITIONS_BUDGET);
    let mut errors = Vec::new();
    let mut any_false = false;
    for cond in conditions {
        match &cond.program {
            Err(e) => errors.push(CheckError::Compile(e.clone())),
            Ok(p) => match p.eval(act, &mut budget) {
                Ok(Value::Bool(false)) => any_false = true,
                Ok(Value::Bool(true)) => {}
                Ok(other) => errors.push(CheckError::ConditionNotBool {
                    name: cond.name.clone(),
                    type_name: other.type_name().to_string(),
                }),
                Err(error) => errors.push(CheckError::Eval {
                    expression: p.source().to_string(),
                    error,
                }),
            },
        }
    }
    if any_false {
        return MatchConditions::Skip;
    }
    match errors.as_slice() {
        [] => MatchConditions::Apply,
        [one] => MatchConditions::Error(one.to_string()),
        many => {
            let all: Vec<String> = many.iter().map(ToString::to_string).collect();
            MatchConditions::Error(format!("[{}]", all.join(", ")))
        }
    }
}
