//! The field rules of a ValidatingAdmissionPolicy: the shared policy fields, then validations
//! (expression, message, messageExpression, reason) and auditAnnotations.

use std::collections::HashSet;

use serde_json::Value;

use super::environments::Environments;
use super::expressions::{check_expression, with_libraries};
use super::field_error::{Errors, FieldError, quote};
use super::json::{list_of, str_of};
use super::names::qualified_name_errors;
use super::policy_fields::{
    validate_match_conditions, validate_policy_head, validate_variables, variables_of,
};
use crate::compile::result_types;
use crate::environment::base_environment;

/// Validates a ValidatingAdmissionPolicy as kube-apiserver would on create or update.
pub fn validate_policy(obj: &Value, envs: &Environments<'_>) -> Vec<FieldError> {
    let mut errs = Errors(Vec::new());
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let name = obj
        .get("metadata")
        .and_then(|m| str_of(m, "name"))
        .unwrap_or_default();
    let has_params = validate_policy_head(spec, &mut errs);
    validate_match_conditions(spec, has_params, envs, &mut errs);
    let variables = variables_of(spec);
    let env = &validate_variables(&variables, has_params, envs, &mut errs);
    let message_env = base_environment(has_params, false)
        .compile_variables(
            variables
                .iter()
                .copied()
                .filter(|(_, e)| !e.trim().is_empty()),
        )
        .env()
        .clone();
    let validations = list_of(spec, "validations");
    let annotations = list_of(spec, "auditAnnotations");
    if validations.is_empty() && annotations.is_empty() {
        let d = "validations or auditAnnotations must contain at least one item";
        errs.required("spec.validations", d);
        errs.required("spec.auditAnnotations", d);
    }
    for (i, v) in validations.iter().enumerate() {
        let p = format!("spec.validations[{i}]");
        let expr = str_of(v, "expression").unwrap_or_default();
        if expr.trim().is_empty() {
            errs.required(&format!("{p}.expression"), "expression is not specified");
        } else {
            check_expression(
                &mut errs,
                &format!("{p}.expression"),
                &with_libraries(env, envs.validation(expr)),
                expr,
                result_types::CONDITION,
                expr,
            );
        }
        if let Some(me) = str_of(v, "messageExpression").filter(|m| !m.is_empty()) {
            if me.trim().is_empty() {
                errs.invalid(
                    &format!("{p}.messageExpression"),
                    quote(me),
                    "must be non-empty if specified",
                );
            } else {
                check_expression(
                    &mut errs,
                    &format!("{p}.messageExpression"),
                    &with_libraries(&message_env, envs.message(me)),
                    me,
                    result_types::MESSAGE,
                    me,
                );
            }
        }
        if let Some(msg) = str_of(v, "message").filter(|m| !m.is_empty()) {
            if msg.trim().is_empty() {
                errs.invalid(
                    &format!("{p}.message"),
                    quote(msg),
                    "must be non-empty if specified",
                );
            } else if msg.trim().contains(['\n', '\r']) {
                errs.invalid(
                    &format!("{p}.message"),
                    quote(msg),
                    "must not contain line breaks",
                );
            }
        }
        if let Some(reason) = str_of(v, "reason") {
            let supported = ["Forbidden", "Invalid", "RequestEntityTooLarge"];
            if !supported.contains(&reason) {
                errs.not_supported(&format!("{p}.reason"), reason, &supported);
            }
        }
    }
    if annotations.len() > 20 {
        // kube-apiserver shows its internal structs, which have no JSON names: `Key` and
        // `ValueExpression`, in that order.
        let shown: Vec<serde_json::Value> = annotations
            .iter()
            .map(|a| {
                serde_json::json!({
                    "Key": str_of(a, "key").unwrap_or_default(),
                    "ValueExpression": str_of(a, "valueExpression").unwrap_or_default(),
                })
            })
            .collect();
        errs.invalid(
            "spec.auditAnnotations",
            serde_json::to_string(&shown).unwrap_or_default(),
            "must not have more than 20 auditAnnotations",
        );
    }
    let mut keys = HashSet::new();
    for (i, a) in annotations.iter().enumerate() {
        let p = format!("spec.auditAnnotations[{i}]");
        let key = str_of(a, "key").unwrap_or_default();
        if name.is_empty() {
            errs.invalid(
                &format!("{p}.key"),
                quote(key),
                "requires metadata.name be non-empty",
            );
        } else {
            let full = format!("{name}/{key}");
            for m in qualified_name_errors(&full) {
                errs.invalid(&format!("{p}.key"), quote(&full), &m);
            }
        }
        let ve = str_of(a, "valueExpression").unwrap_or_default();
        if ve.trim().is_empty() {
            errs.required(
                &format!("{p}.valueExpression"),
                "valueExpression is not specified",
            );
        } else if ve.trim().len() > 5 * 1024 {
            errs.required(
                &format!("{p}.valueExpression"),
                "must not exceed 5120 bytes in length",
            );
        } else {
            check_expression(
                &mut errs,
                &format!("{p}.valueExpression"),
                &with_libraries(env, envs.audit_value(ve)),
                ve.trim(),
                result_types::AUDIT_VALUE,
                ve,
            );
        }
        if !keys.insert(key) {
            errs.duplicate(&format!("{p}.key"), key);
        }
    }
    errs.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apivalidation::test_objects::{base, policy, texts};
    use serde_json::json;

    #[test]
    fn a_valid_policy_has_no_errors() {
        assert!(validate_policy(&policy(base()), &Environments::default()).is_empty());
    }

    #[test]
    fn expressions_must_compile_to_their_type() {
        let mut spec = base();
        spec["validations"] = json!([
            {"expression": "object.spec.replicas <"},
            {"expression": "1 + 1"},
            {"expression": "true", "messageExpression": "object.metadata.name"},
        ]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert!(errs[0].starts_with("spec.validations[0].expression: Invalid value: \"object.spec.replicas <\": compilation failed: ERROR: <input>:1:"), "{errs:?}");
        assert_eq!(
            errs[1],
            "spec.validations[1].expression: Invalid value: \"1 + 1\": must evaluate to bool but got int"
        );
        assert_eq!(
            errs[2],
            "spec.validations[2].messageExpression: Invalid value: \"object.metadata.name\": must evaluate to string but got dyn"
        );
    }

    /// The texts kube-apiserver 1.36.3 answers for the same spec (`kubectl apply
    /// --dry-run=server` of the in-tree kind).
    #[test]
    fn blank_messages_and_line_breaks_are_named_as_in_tree() {
        let mut spec = base();
        spec["validations"] = json!([
            {"expression": "true", "message": "   "},
            {"expression": "true", "message": "a\nb"},
            {"expression": "true", "messageExpression": "   "},
        ]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert_eq!(
            errs,
            [
                "spec.validations[0].message: Invalid value: \"   \": must be non-empty if specified",
                "spec.validations[1].message: Invalid value: \"a\\nb\": must not contain line breaks",
                "spec.validations[2].messageExpression: Invalid value: \"   \": must be non-empty if specified",
            ]
        );
    }

    #[test]
    fn a_program_that_cannot_be_built_is_an_internal_error() {
        let mut spec = base();
        spec["validations"] = json!([{"expression": "uint('1.5') > 0u"}]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert_eq!(
            errs,
            [
                "spec.validations[0].expression: Internal error: program instantiation failed: type conversion error from 'string' to 'uint'"
            ]
        );
    }

    #[test]
    fn program_instantiation_failures_are_internal_errors() {
        let mut spec = base();
        spec["variables"] = json!([{"name": "re", "expression": "'a'.find('(')"}]);
        spec["validations"] = json!([
            {"expression": "object.metadata.name.find('[') == ''"},
            {"expression": "object.metadata.name.find('[')"},
        ]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert_eq!(
            errs,
            vec![
                "spec.variables[0].expression: Internal error: program instantiation failed: error parsing regexp: missing closing ): `(`",
                "spec.validations[0].expression: Internal error: program instantiation failed: error parsing regexp: missing closing ]: `[`",
                // The result type is checked before the program is built.
                "spec.validations[1].expression: Invalid value: \"object.metadata.name.find('[')\": must evaluate to bool but got string",
            ]
        );
    }

    #[test]
    fn request_and_namespace_object_are_typed() {
        let mut spec = base();
        spec["validations"] = json!([
            {"expression": "request.operation == 'CREATE' && request.userInfo.groups.exists(g, g == 'x')"},
            {"expression": "request.uid == ''"},
            {"expression": "namespaceObject.metadata.labels['env'] == 'prod'"},
        ]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("spec.validations[1].expression: Invalid value: \"request.uid == ''\": compilation failed: ERROR: <input>:1:8: undefined field 'uid'"), "{errs:?}");
    }

    #[test]
    fn field_rules() {
        let mut spec = base();
        spec["validations"] =
            json!([{"expression": "true", "message": "a\nb", "reason": "Unauthorized"}]);
        spec["matchConstraints"]["resourceRules"][0]["operations"] = json!(["*", "CREATE"]);
        spec["variables"] = json!([{"name": "in", "expression": "1"}]);
        let errs = texts(&validate_policy(&policy(spec), &Environments::default()));
        assert_eq!(
            errs,
            vec![
                "spec.matchConstraints.resourceRules[0].operations: Invalid value: [\"*\",\"CREATE\"]: if '*' is present, must not specify other operations",
                "spec.variables[0].name: Invalid value: \"in\": must be a valid CEL identifier",
                "spec.validations[0].message: Invalid value: \"a\\nb\": must not contain line breaks",
                "spec.validations[0].reason: Unsupported value: \"Unauthorized\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\"",
            ]
        );
    }
}
