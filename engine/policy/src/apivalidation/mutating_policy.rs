//! The field rules of a MutatingAdmissionPolicy: the shared policy fields, operations a mutation
//! can apply to, mutations (each patch type's expression) and reinvocationPolicy.

use celgate_cel::Env;
use serde_json::Value;

use super::environments::Environments;
use super::expressions::{check_expression, with_libraries};
use super::field_error::{Errors, FieldError, quote};
use super::json::{list_of, str_of};
use super::match_resources::validate_mutating_operations;
use super::policy_fields::{
    validate_match_conditions, validate_policy_head, validate_variables, variables_of,
};
use crate::compile::result_types;
use crate::environment::mutation_environment;

/// Validates a MutatingAdmissionPolicy as kube-apiserver would on create or update.
pub fn validate_mutating_policy(obj: &Value, envs: &Environments<'_>) -> Vec<FieldError> {
    let mut errs = Errors(Vec::new());
    let spec = obj.get("spec").unwrap_or(&Value::Null);
    let has_params = validate_policy_head(spec, &mut errs);
    if let Some(mc) = spec.get("matchConstraints").filter(|m| !m.is_null()) {
        validate_mutating_operations(mc, "spec.matchConstraints", &mut errs);
    }
    validate_match_conditions(spec, has_params, envs, &mut errs);
    let env = validate_variables(&variables_of(spec), has_params, envs, &mut errs);
    let mutations = list_of(spec, "mutations");
    if mutations.is_empty() {
        errs.required("spec.mutations", "mutations must contain at least one item");
    }
    for (i, m) in mutations.iter().enumerate() {
        validate_mutation(m, &format!("spec.mutations[{i}]"), &env, envs, &mut errs);
    }
    match str_of(spec, "reinvocationPolicy").filter(|s| !s.is_empty()) {
        None => errs.required("spec.reinvocationPolicy", ""),
        Some("Never" | "IfNeeded") => {}
        Some(other) => {
            errs.not_supported("spec.reinvocationPolicy", other, &["IfNeeded", "Never"]);
        }
    }
    errs.0
}

/// One mutation: its patch type decides which expression field must be set, and what the
/// expression must evaluate to.
fn validate_mutation(m: &Value, path: &str, env: &Env, envs: &Environments<'_>, errs: &mut Errors) {
    const APPLY: &str = "applyConfiguration";
    const PATCH: &str = "jsonPatch";
    let given = |key: &str| m.get(key).filter(|v| !v.is_null());
    let patch_type = str_of(m, "patchType").unwrap_or_default();
    let (field, other, want) = match patch_type {
        "" => return errs.required(&format!("{path}.patchType"), ""),
        "ApplyConfiguration" => (APPLY, PATCH, result_types::apply_configuration()),
        "JSONPatch" => (PATCH, APPLY, result_types::json_patch()),
        other => {
            return errs.not_supported(
                &format!("{path}.patchType"),
                other,
                &["ApplyConfiguration", "JSONPatch"],
            );
        }
    };
    match given(field) {
        None => errs.required(
            &format!("{path}.{field}"),
            &format!("must be specified when patchType is {patch_type}"),
        ),
        Some(expr) => {
            let p = format!("{path}.{field}.expression");
            let raw = str_of(expr, "expression").unwrap_or_default();
            let src = raw.trim();
            if src.is_empty() {
                errs.required(&p, "");
            } else {
                let env = mutation_environment(&with_libraries(env, envs.mutation(raw)));
                check_expression(errs, &p, &env, src, &want, src);
            }
        }
    }
    if given(other).is_some() {
        errs.invalid(
            &format!("{path}.{other}"),
            quote(&format!("{{{other}}}")),
            &format!("must not be specified when patchType is {patch_type}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apivalidation::test_objects::{mutating, texts};
    use serde_json::json;

    #[test]
    fn mutations_compile_to_their_patch_type() {
        let valid = mutating(json!([
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                "Object{spec: Object.spec{replicas: object.spec.replicas + 1}}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression":
                "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b'), value: 'x'}]"}},
        ]));
        assert!(validate_mutating_policy(&valid, &Environments::default()).is_empty());
        let invalid = mutating(json!([
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object.spec{}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression": "JSONPatch{op: 'add'}"}},
            {"patchType": "JSONPatch", "jsonPatch": {"expression": " [JSONPatch{op: 1}] "}},
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "object"}},
        ]));
        assert_eq!(
            texts(&validate_mutating_policy(
                &invalid,
                &Environments::default()
            )),
            vec![
                "spec.mutations[0].applyConfiguration.expression: Invalid value: \"Object.spec{}\": must evaluate to Object but got Object.spec",
                "spec.mutations[1].jsonPatch.expression: Invalid value: \"JSONPatch{op: 'add'}\": must evaluate to list(JSONPatch) but got JSONPatch",
                "spec.mutations[2].jsonPatch.expression: Invalid value: \"[JSONPatch{op: 1}]\": compilation failed: ERROR: <input>:1:14: expected type of field 'op' is 'string' but provided type is 'int'\n | [JSONPatch{op: 1}]\n | .............^",
                "spec.mutations[3].applyConfiguration.expression: Invalid value: \"object\": must evaluate to Object but got dyn",
            ]
        );
    }

    #[test]
    fn mutating_field_rules() {
        let mut p = mutating(json!([
            {"patchType": "JSONPatch", "applyConfiguration": {"expression": "Object{}"}},
            {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": " "}},
            {"patchType": "Merge"},
            {"patchType": ""},
        ]));
        p["spec"]["reinvocationPolicy"] = json!("Always");
        p["spec"]["matchConstraints"]["resourceRules"][0]["operations"] = json!(["DELETE"]);
        p["spec"]["variables"] = json!([{"name": "o", "expression": "Object{}"}]);
        assert_eq!(
            texts(&validate_mutating_policy(&p, &Environments::default())),
            vec![
                "spec.matchConstraints.resourceRules.operations: Unsupported value: \"DELETE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"UPDATE\"",
                "spec.variables[0].expression: Invalid value: \"Object{}\": compilation failed: ERROR: <input>:1:7: undeclared reference to 'Object' (in container '')\n | Object{}\n | ......^",
                "spec.mutations[0].jsonPatch: Required value: must be specified when patchType is JSONPatch",
                "spec.mutations[0].applyConfiguration: Invalid value: \"{applyConfiguration}\": must not be specified when patchType is JSONPatch",
                "spec.mutations[1].applyConfiguration.expression: Required value",
                "spec.mutations[2].patchType: Unsupported value: \"Merge\": supported values: \"ApplyConfiguration\", \"JSONPatch\"",
                "spec.mutations[3].patchType: Required value",
                "spec.reinvocationPolicy: Unsupported value: \"Always\": supported values: \"IfNeeded\", \"Never\"",
            ]
        );
        let mut none = mutating(json!([]));
        none["spec"]
            .as_object_mut()
            .map(|o| o.remove("reinvocationPolicy"));
        assert_eq!(
            texts(&validate_mutating_policy(&none, &Environments::default())),
            vec![
                "spec.mutations: Required value: mutations must contain at least one item",
                "spec.reinvocationPolicy: Required value",
            ]
        );
    }
}
