//! A policy's match conditions: whether it applies to the request at all, and what their errors
//! deny.

use celgate_cel::{MATCH_CONDITIONS_BUDGET, Value};

use crate::model::ValidatingBindingSpec;

use super::evaluation::{Batch, Evaluation};
use super::outcome::{CheckError, Outcome, deny_first, policy_message};
use super::trace::{self, Effect, Phase, Step, StepKind, StepResult};

/// Evaluates match conditions; false when the policy does not apply to this request.
pub(super) fn match_conditions_pass(
    evaluation: &Evaluation<'_>,
    fail: bool,
    binding: &ValidatingBindingSpec,
    out: &mut Outcome,
) -> bool {
    let policy = evaluation.policy;
    if policy.match_conditions.is_empty() {
        return true;
    }
    let act = &evaluation.activation(Batch::Checks);
    let mut budget = evaluation.budget(MATCH_CONDITIONS_BUDGET);
    let mut errors = Vec::new();
    let mut any_false = false;
    for (index, cond) in policy.match_conditions.iter().enumerate() {
        let step = |result, cost, effect| Step {
            phase: Phase::MatchConditions,
            kind: StepKind::MatchCondition,
            index,
            name: &cond.name,
            expression: policy
                .spec
                .match_conditions
                .get(index)
                .map_or("", |c| c.expression.as_str()),
            result,
            cost,
            effect,
        };
        match &cond.program {
            Err(e) => {
                if let Some(t) = evaluation.trace {
                    t.step(&step(StepResult::NotCompiled(e), 0, Effect::Error));
                }
                errors.push(CheckError::Compile(e.clone()));
            }
            Ok(p) => {
                let (result, cost) = p.eval_with_cost(act, &mut budget);
                let effect = match &result {
                    Ok(Value::Bool(false)) => Effect::NotMatched,
                    Ok(Value::Bool(true)) => Effect::Passed,
                    _ => Effect::Error,
                };
                if let Some(t) = evaluation.trace {
                    let traced = match &result {
                        Ok(v) => StepResult::Value(v),
                        Err(e) => StepResult::Error(e),
                    };
                    t.step(&step(traced, cost, effect));
                }
                match result {
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
                }
            }
        }
    }
    if let Some(t) = evaluation.trace {
        trace::variables(t, policy, Phase::MatchConditions, act);
    }
    if any_false {
        return false;
    }
    if errors.is_empty() {
        return true;
    }
    if fail {
        let msg = if let [one] = errors.as_slice() {
            one.to_string()
        } else {
            let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
            format!("[{}]", all.join(", "))
        };
        deny_first(
            out,
            policy_message(&policy.name, Some(&binding.name), &msg),
            None,
        );
    }
    false
}
