//! The binding's validation actions: a failed validation becomes a denial, a warning or the
//! `validation_failure` audit record (written as Go's encoding/json writes it).

use std::sync::Arc;
use std::time::Duration;

use crate::autogen;
use crate::compile::ValidatingPolicy;
use crate::model::{ValidatingBindingSpec, ValidationAction};

use super::outcome::{Check, Outcome, VALIDATION_FAILURE_KEY, deny_first, policy_message};
use super::validations::Decision;

/// Routes a failed validation to each of the binding's validation actions (Deny, Warn, Audit)
/// and records a check for each.
pub(super) fn route_decision(
    policy: &ValidatingPolicy,
    binding: &ValidatingBindingSpec,
    d: &Decision,
    elapsed: Duration,
    out: &mut Outcome,
) {
    if !d.deny {
        return;
    }
    let message: Arc<str> = Arc::from(d.message.as_str());
    for action in &binding.validation_actions {
        match action {
            ValidationAction::Deny => deny_first(
                out,
                policy_message(policy, Some(&binding.name), &d.message),
                d.reason.as_deref(),
            ),
            ValidationAction::Warn => out.warnings.push(format!(
                "Validation failed for ValidatingAdmissionPolicy '{}'{} with binding '{}': {}",
                policy.name,
                autogen::variant_label(policy.spec.pod_controller),
                binding.name,
                d.message
            )),
            ValidationAction::Audit => {
                let record = [ValidationFailure {
                    message: &d.message,
                    policy: &policy.name,
                    binding: &binding.name,
                    expression_index: d.index,
                    validation_actions: binding
                        .validation_actions
                        .iter()
                        .map(|a| a.as_str())
                        .collect(),
                }];
                // 1.36 records only the first failure under this key.
                if !out
                    .audit_annotations
                    .iter()
                    .any(|(k, _)| k == VALIDATION_FAILURE_KEY)
                {
                    out.audit_annotations
                        .push((VALIDATION_FAILURE_KEY.to_string(), go_json(&record)));
                }
            }
        }
        out.checks.push(Check {
            policy: policy.name.clone(),
            binding: binding.name.clone(),
            error_type: d.error_type,
            enforcement_action: match action {
                ValidationAction::Deny => "deny",
                ValidationAction::Warn => "warn",
                ValidationAction::Audit => "audit",
            },
            message: Some(message.clone()),
            elapsed,
        });
    }
}

/// One entry of the `validation_failure` audit annotation, fields in upstream's order.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ValidationFailure<'a> {
    message: &'a str,
    policy: &'a str,
    binding: &'a str,
    expression_index: usize,
    validation_actions: Vec<&'static str>,
}

/// JSON as Go's encoding/json writes it: `<`, `>` and `&` escaped.
fn go_json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

#[cfg(test)]
mod tests {
    use crate::model::{Validation, ValidationAction};
    use crate::validate::VALIDATION_FAILURE_KEY;
    use crate::validate::test_policies::{run, spec};

    #[test]
    fn warn_and_audit_actions() {
        let s = spec(vec![Validation {
            expression: "object.spec.replicas > 50".into(),
            message: Some(" too few <replicas> ".into()),
            reason: Some("Forbidden".into()),
            ..Default::default()
        }]);
        let out = run(s, &[ValidationAction::Warn, ValidationAction::Audit], "x");
        assert!(out.allowed());
        assert_eq!(
            out.warnings,
            vec![
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': too few <replicas>"
            ]
        );
        assert_eq!(
            out.audit_annotations,
            vec![(
                VALIDATION_FAILURE_KEY.to_string(),
                r#"[{"message":"too few \u003creplicas\u003e","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Warn","Audit"]}]"#.to_string()
            )]
        );
        let actions: Vec<_> = out.checks.iter().map(|c| c.enforcement_action).collect();
        assert_eq!(actions, vec!["warn", "audit"]);
    }
}
