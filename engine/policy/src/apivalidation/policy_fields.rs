//! The fields both policy kinds share: failurePolicy, paramKind, matchConstraints,
//! matchConditions and variables.

use std::collections::HashSet;

use celgate_cel::Env;
use serde_json::Value;

use super::environments::Environments;
use super::expressions::{check_expression, compile_variables, with_libraries};
use super::field_error::{Errors, FieldErrorType, quote};
use super::json::{list_of, str_of};
use super::match_resources::validate_match_resources;
use super::names::{
    dns1035_label_errors, dns1123_subdomain_errors, is_cel_identifier, qualified_name_errors,
};
use crate::compile::result_types;
use crate::environment::base_environment;

/// failurePolicy, paramKind and matchConstraints, checked alike for both policy kinds.
/// Returns whether the policy has params.
pub(super) fn validate_policy_head(spec: &Value, errs: &mut Errors) -> bool {
    match str_of(spec, "failurePolicy") {
        None => errs.required("spec.failurePolicy", ""),
        Some("Fail" | "Ignore") => {}
        Some(other) => errs.not_supported("spec.failurePolicy", other, &["Fail", "Ignore"]),
    }
    let param_kind = spec.get("paramKind").filter(|p| !p.is_null());
    if let Some(pk) = param_kind {
        validate_param_kind(pk, "spec.paramKind", errs);
    }
    match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        None => errs.required("spec.matchConstraints", ""),
        Some(mc) => {
            validate_match_resources(mc, "spec.matchConstraints", errs);
            if list_of(mc, "resourceRules").is_empty() {
                errs.required("spec.matchConstraints.resourceRules", "");
            }
        }
    }
    param_kind.is_some()
}

/// paramKind: a parseable group/version and a kind.
fn validate_param_kind(pk: &Value, path: &str, errs: &mut Errors) {
    match str_of(pk, "apiVersion").filter(|s| !s.is_empty()) {
        None => errs.required(&format!("{path}.apiVersion"), ""),
        Some(av) => {
            let p = format!("{path}.apiVersion");
            let (group, version) = match av.matches('/').count() {
                0 => ("", av),
                1 => av.split_once('/').unwrap_or(("", av)),
                _ => {
                    errs.invalid(
                        &p,
                        quote(av),
                        &format!("unexpected GroupVersion string: {av}"),
                    );
                    ("", "")
                }
            };
            if av.matches('/').count() <= 1 {
                if !group.is_empty() {
                    let e = dns1123_subdomain_errors(group);
                    if !e.is_empty() {
                        errs.invalid(&p, quote(group), &e.join(","));
                    }
                }
                if version.is_empty() {
                    errs.invalid(&p, quote(av), "version must be specified");
                } else {
                    let e = dns1035_label_errors(version);
                    if !e.is_empty() {
                        errs.invalid(&p, quote(version), &e.join(","));
                    }
                }
            }
        }
    }
    match str_of(pk, "kind").filter(|s| !s.is_empty()) {
        None => errs.required(&format!("{path}.kind"), ""),
        Some(kind) => {
            let e = dns1035_label_errors(&kind.to_lowercase());
            if !e.is_empty() {
                errs.invalid(
                    &format!("{path}.kind"),
                    quote(kind),
                    &format!(
                        "may have mixed case, but should otherwise match: {}",
                        e.join(",")
                    ),
                );
            }
        }
    }
}

/// matchConditions: at most 64, each a named condition that compiles to bool.
pub(super) fn validate_match_conditions(
    spec: &Value,
    has_params: bool,
    envs: &Environments<'_>,
    errs: &mut Errors,
) {
    let conditions = list_of(spec, "matchConditions");
    if conditions.len() > 64 {
        errs.push(
            "spec.matchConditions",
            FieldErrorType::TooMany,
            Some(conditions.len().to_string()),
            "must have at most 64 items",
        );
    }
    let env = base_environment(has_params, true);
    let mut names = HashSet::new();
    for (i, c) in conditions.iter().enumerate() {
        let p = format!("spec.matchConditions[{i}]");
        let expr = str_of(c, "expression").unwrap_or_default();
        if expr.trim().is_empty() {
            errs.required(&format!("{p}.expression"), "");
        } else {
            check_expression(
                errs,
                &format!("{p}.expression"),
                &with_libraries(&env, envs.match_condition(expr)),
                expr.trim(),
                result_types::CONDITION,
                expr.trim(),
            );
        }
        let name = str_of(c, "name").unwrap_or_default();
        if name.is_empty() {
            errs.required(&format!("{p}.name"), "");
        } else {
            for m in qualified_name_errors(name) {
                errs.invalid(&format!("{p}.name"), quote(name), &m);
            }
            if !names.insert(name) {
                errs.duplicate(&format!("{p}.name"), name);
            }
        }
    }
}

/// A policy's variables as (name, expression), in order.
pub(super) fn variables_of(spec: &Value) -> Vec<(&str, &str)> {
    list_of(spec, "variables")
        .iter()
        .map(|v| {
            (
                str_of(v, "name").unwrap_or_default(),
                str_of(v, "expression").unwrap_or_default(),
            )
        })
        .collect()
}

/// Checks the variables' names and compiles their expressions in order (later expressions see
/// the earlier ones). Returns the environment the policy's other expressions compile in.
pub(super) fn validate_variables(
    variables: &[(&str, &str)],
    has_params: bool,
    envs: &Environments<'_>,
    errs: &mut Errors,
) -> Env {
    for (i, (vname, expr)) in variables.iter().enumerate() {
        let p = format!("spec.variables[{i}]");
        if vname.trim().is_empty() {
            errs.required(&format!("{p}.name"), "name is not specified");
        } else if !is_cel_identifier(vname) {
            errs.invalid(
                &format!("{p}.name"),
                quote(vname),
                "must be a valid CEL identifier",
            );
        }
        if expr.trim().is_empty() {
            errs.required(&format!("{p}.expression"), "expression is not specified");
        }
    }
    compile_variables(variables, has_params, envs, errs)
}
