//! Compiles a MutatingAdmissionPolicy once: variables and match conditions as a validating
//! policy's, each mutation's expression in the mutation environment with its patch type's
//! result type. An expression that fails to compile keeps its error, so the policy stays in
//! force and its failurePolicy decides the requests it matches.

use std::sync::Arc;

use celgate_cel::{Variables, authz};

use super::apply::ApplySemantics;
use crate::compile::{
    CompiledExpr, CompiledMatchCondition, compile_checked, match_condition_errors,
    mutation_environment, policy_variables, reads_old_object, result_types, variable_errors,
};
use crate::model::{FailurePolicy, MutatingPolicySpec, PatchType};

/// What one mutation's expression builds.
#[derive(Debug)]
pub enum CompiledMutation {
    /// An `Object{…}` merged as server-side apply.
    ApplyConfiguration(CompiledExpr),
    /// A `list(JSONPatch)`.
    JsonPatch(CompiledExpr),
    /// A mutation without an expression for its patch type (API validation rejects it; a
    /// request it would mutate gets upstream's internal error).
    Missing,
}

/// A MutatingAdmissionPolicy ready to evaluate.
pub struct MutatingPolicy {
    /// The policy as written.
    pub spec: MutatingPolicySpec,
    /// Shared copy of the name, for errors and metrics labels.
    pub name: Arc<str>,
    /// Compiled mutations, in order.
    pub mutations: Vec<CompiledMutation>,
    /// Compiled match conditions, in order.
    pub match_conditions: Vec<CompiledMatchCondition>,
    /// Compiled variables, evaluated lazily per activation.
    pub variables: Arc<Variables>,
    /// How apply configurations treat atomic values.
    pub apply_semantics: ApplySemantics,
    /// Whether any expression may read `authorizer` (so requests need one built).
    pub uses_authorizer: bool,
    /// Whether any expression may read `oldObject` (so the old object is decoded for it).
    pub reads_old_object: bool,
}

impl std::fmt::Debug for MutatingPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MutatingPolicy")
            .field("name", &self.name)
            .field("generation", &self.spec.generation)
            .field("mutations", &self.mutations.len())
            .field("apply_semantics", &self.apply_semantics)
            .finish_non_exhaustive()
    }
}

impl MutatingPolicy {
    /// The policy's failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.spec.failure_policy
    }

    /// Compile errors of the policy's expressions, with their field paths, for status and logs.
    pub fn compile_errors(&self) -> Vec<(String, String)> {
        let mut out = variable_errors(&self.variables);
        out.extend(match_condition_errors(&self.match_conditions));
        for (i, m) in self.mutations.iter().enumerate() {
            let (field, compiled) = match m {
                CompiledMutation::ApplyConfiguration(c) => ("applyConfiguration", c),
                CompiledMutation::JsonPatch(c) => ("jsonPatch", c),
                CompiledMutation::Missing => continue,
            };
            if let Err(e) = compiled {
                out.push((
                    format!("spec.mutations[{i}].{field}.expression"),
                    e.to_string(),
                ));
            }
        }
        out
    }
}

/// Compiles every expression of a MutatingAdmissionPolicy; `semantics` is how its apply
/// configurations treat atomic values (see [`ApplySemantics::from_annotation`]).
pub fn compile_mutating(spec: MutatingPolicySpec, semantics: ApplySemantics) -> MutatingPolicy {
    let has_params = spec.param_kind.is_some();
    let variables = policy_variables(
        has_params,
        true,
        spec.variables
            .iter()
            .map(|v| (v.name.as_str(), v.expression.as_str())),
    );
    let env = variables.env().clone();
    let mutation_env = mutation_environment(&env);
    let match_conditions: Vec<CompiledMatchCondition> = spec
        .match_conditions
        .iter()
        .map(|c| CompiledMatchCondition {
            name: c.name.clone(),
            program: compile_checked(&env, &c.expression, result_types::CONDITION),
        })
        .collect();
    let mutations: Vec<CompiledMutation> = spec
        .mutations
        .iter()
        .map(
            |m| match (&m.patch_type, &m.apply_configuration, &m.json_patch) {
                (PatchType::ApplyConfiguration, Some(src), _) => {
                    CompiledMutation::ApplyConfiguration(compile_checked(
                        &mutation_env,
                        src,
                        &result_types::apply_configuration(),
                    ))
                }
                (PatchType::JsonPatch, _, Some(src)) => CompiledMutation::JsonPatch(
                    compile_checked(&mutation_env, src, &result_types::json_patch()),
                ),
                _ => CompiledMutation::Missing,
            },
        )
        .collect();
    // A textual test: a false positive only costs building an authorizer per request.
    let uses_authorizer = spec
        .match_conditions
        .iter()
        .map(|c| c.expression.as_str())
        .chain(spec.variables.iter().map(|v| v.expression.as_str()))
        .chain(spec.mutations.iter().flat_map(|m| {
            m.apply_configuration
                .as_deref()
                .into_iter()
                .chain(m.json_patch.as_deref())
        }))
        .any(|src| src.contains(authz::AUTHORIZER_VARIABLE));
    let reads_old_object = reads_old_object(
        mutations
            .iter()
            .filter_map(|m| match m {
                CompiledMutation::ApplyConfiguration(p) | CompiledMutation::JsonPatch(p) => Some(p),
                CompiledMutation::Missing => None,
            })
            .chain(match_conditions.iter().map(|c| &c.program)),
        &variables,
    );
    MutatingPolicy {
        reads_old_object,
        name: Arc::from(spec.name.as_str()),
        spec,
        mutations,
        match_conditions,
        variables,
        apply_semantics: semantics,
        uses_authorizer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Mutation, NamedExpression};

    fn mutation(patch_type: PatchType, expr: &str) -> Mutation {
        let (apply_configuration, json_patch) = match patch_type {
            PatchType::ApplyConfiguration => (Some(expr.to_string()), None),
            _ => (None, Some(expr.to_string())),
        };
        Mutation {
            patch_type,
            apply_configuration,
            json_patch,
        }
    }

    #[test]
    fn each_mutation_compiles_with_its_patch_types_result_type() {
        let spec = MutatingPolicySpec {
            name: "p".into(),
            variables: vec![NamedExpression {
                name: "n".into(),
                expression: "object.metadata.name".into(),
            }],
            mutations: vec![
                mutation(
                    PatchType::ApplyConfiguration,
                    "Object{metadata: Object.metadata{labels: {'n': variables.n}}}",
                ),
                mutation(
                    PatchType::JsonPatch,
                    "[JSONPatch{op: 'add', path: '/x', value: 1}]",
                ),
                mutation(PatchType::ApplyConfiguration, "[JSONPatch{op: 'add'}]"),
                mutation(PatchType::JsonPatch, "Object{}"),
                mutation(PatchType::JsonPatch, "Object{"),
                Mutation {
                    patch_type: PatchType::Other("Strategic".into()),
                    apply_configuration: None,
                    json_patch: None,
                },
            ],
            ..Default::default()
        };
        let p = compile_mutating(spec, ApplySemantics::Upstream);
        let errors = p.compile_errors();
        let shown: Vec<(&str, String)> = errors
            .iter()
            .map(|(f, e)| (f.as_str(), e.lines().next().unwrap_or_default().to_string()))
            .collect();
        assert_eq!(
            shown,
            vec![
                (
                    "spec.mutations[2].applyConfiguration.expression",
                    "must evaluate to Object but got list(JSONPatch)".to_string()
                ),
                (
                    "spec.mutations[3].jsonPatch.expression",
                    "must evaluate to list(JSONPatch) but got Object".to_string()
                ),
                (
                    "spec.mutations[4].jsonPatch.expression",
                    "compilation failed: ERROR: <input>:1:8: Syntax error: mismatched input '<EOF>' expecting {'}', ',', '?', IDENTIFIER, ESC_IDENTIFIER}".to_string()
                ),
            ]
        );
        assert!(matches!(p.mutations[5], CompiledMutation::Missing));
        assert!(!p.uses_authorizer);
    }
}
