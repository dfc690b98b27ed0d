//! A policy's match conditions: whether it applies to the request at all. Shared by validating
//! and mutating policies and PolicyExceptions; each reports an error in its own message
//! format.

use celgate_cel::{MATCH_CONDITIONS_BUDGET, Value};

use crate::check::CheckError;
use crate::compile::CompiledMatchCondition;
use crate::evaluation::{Batch, Evaluation};
use crate::model::NamedExpression;
use crate::trace::{self, Effect, Phase, Step, StepKind, StepResult};

/// What a policy's match conditions decided for one evaluation.
#[derive(Debug, PartialEq)]
pub(crate) enum MatchConditions {
    /// All true (or none): the policy applies.
    Apply,
    /// One is false (whatever the others gave): the policy does not apply.
    Skip,
    /// None is false and some failed: the message upstream reports (one error's text, or
    /// `[e1, e2]` for several different ones); failurePolicy decides.
    Error(String),
}

/// The sources of a policy's expressions that a trace names: its match conditions and variables
/// as written in the spec.
#[derive(Clone, Copy)]
pub(crate) struct Sources<'s> {
    /// `spec.matchConditions`.
    pub(crate) match_conditions: &'s [NamedExpression],
    /// `spec.variables`.
    pub(crate) variables: &'s [NamedExpression],
}

/// Evaluates match conditions in order with their own budget: any false skips the policy,
/// else any error is an error, else it applies. Each condition (and each variable it read) is
/// reported to the evaluation's trace, if any.
pub(crate) fn evaluate_match_conditions(
    evaluation: &Evaluation<'_>,
    conditions: &[CompiledMatchCondition],
    sources: Sources<'_>,
) -> MatchConditions {
    if conditions.is_empty() {
        return MatchConditions::Apply;
    }
    let mut act = evaluation.activation(Batch::Checks);
    // kube-apiserver evaluates match conditions without the namespace: there (and in the
    // variables they read) `namespaceObject` is null.
    act.bind("namespaceObject", Value::Null);
    let act = &act;
    let mut budget = evaluation.budget(MATCH_CONDITIONS_BUDGET);
    let mut errors = Vec::new();
    let mut any_false = false;
    for (index, cond) in conditions.iter().enumerate() {
        let step = |result, cost, effect| Step {
            phase: Phase::MatchConditions,
            kind: StepKind::MatchCondition,
            index,
            name: &cond.name,
            expression: sources
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
                if let Some(t) = evaluation.trace {
                    let effect = match &result {
                        Ok(Value::Bool(false)) => Effect::NotMatched,
                        Ok(Value::Bool(true)) => Effect::Passed,
                        _ => Effect::Error,
                    };
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
        trace::variables(t, sources.variables, Phase::MatchConditions, act);
    }
    if any_false {
        return MatchConditions::Skip;
    }
    // Go's aggregate error: each distinct message once, in brackets when there are several.
    let mut messages: Vec<String> = Vec::new();
    for e in &errors {
        let text = e.to_string();
        if !messages.contains(&text) {
            messages.push(text);
        }
    }
    match messages.as_slice() {
        [] => MatchConditions::Apply,
        [one] => MatchConditions::Error(one.clone()),
        many => MatchConditions::Error(format!("[{}]", many.join(", "))),
    }
}
