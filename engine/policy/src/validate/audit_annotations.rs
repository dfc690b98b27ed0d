//! A policy's audit annotations: their values, collected per key, and what their errors deny.

use celgate_cel::{Activation, Budget, RUNTIME_BUDGET, Value};

use crate::compile::CompiledAuditAnnotation;
use crate::model::ValidatingBindingSpec;

use super::outcome::{Outcome, deny_first, policy_message};
use crate::check::CheckError;
use crate::compile::ValidatingPolicy;
use crate::evaluation::{Batch, Evaluation};
use crate::trace::{self, Effect, Phase, Step, StepKind, StepResult, Trace};

/// Longest audit annotation value, in bytes.
pub const MAX_AUDIT_ANNOTATION_VALUE_BYTES: usize = 10 * 1024;

/// What one evaluation of a policy's audit annotations gave: one result per annotation, in
/// order (`Ok(None)` when omitted), each value cut to [`MAX_AUDIT_ANNOTATION_VALUE_BYTES`].
pub(super) type AnnotationValues = Vec<Result<Option<String>, CheckError>>;

/// Evaluates a policy's audit annotations.
pub(super) fn annotation_values(
    policy: &ValidatingPolicy,
    evaluation: &Evaluation<'_>,
) -> AnnotationValues {
    if policy.audit_annotations.is_empty() {
        return Vec::new();
    }
    let act = &evaluation.activation(Batch::AuditAnnotations);
    let mut budget = evaluation.budget(RUNTIME_BUDGET);
    let values = (policy.audit_annotations.iter().enumerate())
        .map(|(index, a)| {
            let mut value = eval_annotation(a, index, act, &mut budget, evaluation.trace);
            if let Ok(Some(v)) = &mut value
                && v.len() > MAX_AUDIT_ANNOTATION_VALUE_BYTES
            {
                let mut cut = MAX_AUDIT_ANNOTATION_VALUE_BYTES;
                while !v.is_char_boundary(cut) {
                    cut -= 1;
                }
                v.truncate(cut);
            }
            value
        })
        .collect();
    if let Some(t) = evaluation.trace {
        trace::variables(t, &policy.spec.variables, Phase::AuditAnnotations, act);
    }
    values
}

/// Adds a binding's audit annotation values to their keys' distinct values; an error denies
/// under failurePolicy Fail (an unsupported type always).
pub(super) fn collect_annotations(
    policy: &ValidatingPolicy,
    binding: &ValidatingBindingSpec,
    fail: bool,
    values: &[Result<Option<String>, CheckError>],
    collected: &mut Vec<(String, Vec<String>)>,
    out: &mut Outcome,
) {
    for (a, value) in policy.audit_annotations.iter().zip(values) {
        match value {
            Ok(None) => {}
            Ok(Some(v)) => match collected.iter_mut().find(|(k, _)| *k == a.key) {
                Some((_, values)) if values.contains(v) => {}
                Some((_, values)) => values.push(v.clone()),
                None => collected.push((a.key.clone(), vec![v.clone()])),
            },
            Err(error) => {
                // An unsupported return type denies even under Ignore, as upstream.
                let always = matches!(error, CheckError::AnnotationType { .. });
                if fail || always {
                    deny_first(
                        out,
                        policy_message(policy, Some(&binding.name), &error.to_string()),
                        None,
                    );
                }
            }
        }
    }
}

/// An annotation value: `Ok(None)` when omitted.
fn eval_annotation<'a>(
    a: &'a CompiledAuditAnnotation,
    index: usize,
    act: &Activation<'a>,
    budget: &mut Budget,
    trace: Option<&dyn Trace>,
) -> Result<Option<String>, CheckError> {
    let step = |result, cost, effect| Step {
        phase: Phase::AuditAnnotations,
        kind: StepKind::AuditAnnotation,
        index,
        name: &a.key,
        expression: &a.expression,
        result,
        cost,
        effect,
    };
    let p = match &a.program {
        Ok(p) => p,
        Err(e) => {
            if let Some(t) = trace {
                t.step(&step(StepResult::NotCompiled(e), 0, Effect::Error));
            }
            return Err(CheckError::Compile(e.clone()));
        }
    };
    let (result, cost) = p.eval_with_cost(act, budget);
    let value = match &result {
        Ok(Value::Null) => Ok(None),
        Ok(Value::String(s)) => {
            let s = s.trim();
            Ok((!s.is_empty()).then(|| s.to_string()))
        }
        Ok(other) => Err(CheckError::AnnotationType {
            expression: a.expression.clone(),
            type_name: other.type_name().to_string(),
        }),
        Err(error) => Err(CheckError::Eval {
            expression: a.expression.clone(),
            error: error.clone(),
        }),
    };
    if let Some(t) = trace {
        let effect = match &value {
            Ok(Some(_)) => Effect::Used,
            Ok(None) => Effect::Ignored("null or empty: the annotation is omitted"),
            Err(_) => Effect::Error,
        };
        let traced = match &result {
            Ok(v) => StepResult::Value(v),
            Err(e) => StepResult::Error(e),
        };
        t.step(&step(traced, cost, effect));
    }
    value
}

#[cfg(test)]
mod tests {
    use crate::model::{AuditAnnotation, ValidationAction};
    use crate::validate::test_policies::{run, spec};

    #[test]
    fn audit_annotation_values() {
        let mut s = spec(vec![]);
        s.audit_annotations = vec![
            AuditAnnotation {
                key: "replicas".into(),
                value_expression: "'set to ' + string(object.spec.replicas)".into(),
            },
            AuditAnnotation {
                key: "omitted".into(),
                value_expression: "null".into(),
            },
        ];
        let out = run(s, &[ValidationAction::Deny], "x");
        assert!(out.allowed());
        assert_eq!(
            out.audit_annotations,
            vec![("p/replicas".to_string(), "set to 3".to_string())]
        );
    }
}
