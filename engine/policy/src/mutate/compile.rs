//! Compiles a MutatingAdmissionPolicy once: variables and match conditions as a validating
//! policy's, each mutation's expression in the mutation environment with its patch type's
//! result type. An expression that fails to compile keeps its error, so the policy stays in
//! force and its failurePolicy decides the requests it matches.

use std::fmt;

use celgate_cel::{Activation, Budget, Literal, PER_CALL_LIMIT, RUNTIME_BUDGET, Type};

use super::apply::ApplySemantics;
use super::patch_values::{self, Patch, patch};
use crate::compile::{
    CompiledExpr, CompiledPolicy, PolicyKind, compile_checked, match_condition_errors,
    result_types, variable_errors,
};
use crate::environment::mutation_environment;
use crate::model::{MutatingPolicySpec, PatchType};

/// What one mutation's expression builds.
#[derive(Debug)]
pub enum CompiledMutation {
    /// An `Object{…}` merged as server-side apply.
    ApplyConfiguration(CompiledPatch),
    /// A `list(JSONPatch)`.
    JsonPatch(CompiledPatch),
    /// A mutation without an expression for its patch type (API validation rejects it; a
    /// request it would mutate gets upstream's internal error).
    Missing,
}

/// A mutation's compiled expression, with its patch when the expression reads nothing of the
/// request (9 of the 24 in the realistic set: a fixed label or annotation), worked out here once:
/// every evaluation would give the same at the same cost.
#[derive(Debug)]
pub struct CompiledPatch {
    /// The compiled expression.
    pub expr: CompiledExpr,
    pub(super) constant: Option<Patch>,
    /// Otherwise, when the expression is a literal around the expressions it reads (most are:
    /// `Object{metadata: Object.metadata{labels: {'app': x}}}`), the shape whose leaves alone
    /// are evaluated (`patch_values::shape`).
    pub(super) literal: Option<Literal>,
}

impl CompiledPatch {
    fn new(expr: CompiledExpr, is_apply: bool) -> Self {
        let constant = match &expr {
            Ok(program) if !program.reads_activation() => {
                let act = Activation::new();
                let mut budget = Budget::new(PER_CALL_LIMIT, RUNTIME_BUDGET);
                // An error is left to each evaluation to give.
                let value = program.eval(&act, &mut budget).ok();
                value.and_then(|v| patch(&v, is_apply).ok())
            }
            _ => None,
        };
        let literal = match (&expr, &constant) {
            (Ok(program), None) => patch_values::shape(program.literal(), is_apply),
            _ => None,
        };
        CompiledPatch {
            expr,
            constant,
            literal,
        }
    }
}

/// A MutatingAdmissionPolicy ready to evaluate.
pub type MutatingPolicy = CompiledPolicy<Mutating>;

/// What a MutatingAdmissionPolicy compiles of its own.
pub struct Mutating {
    /// Compiled mutations, in order.
    pub mutations: Vec<CompiledMutation>,
    /// How apply configurations treat atomic values.
    pub apply_semantics: ApplySemantics,
}

impl PolicyKind for Mutating {
    type Spec = MutatingPolicySpec;
    const NAME: &'static str = "MutatingPolicy";

    fn authorizer_sources(spec: &MutatingPolicySpec) -> impl Iterator<Item = &str> {
        (spec.mutations.iter()).flat_map(|m| {
            (m.apply_configuration.as_deref().into_iter()).chain(m.json_patch.as_deref())
        })
    }

    fn programs(&self) -> impl Iterator<Item = &CompiledExpr> {
        self.mutations.iter().filter_map(|m| match m {
            CompiledMutation::ApplyConfiguration(p) | CompiledMutation::JsonPatch(p) => {
                Some(&p.expr)
            }
            CompiledMutation::Missing => None,
        })
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("mutations", &self.mutations.len())
            .field("apply_semantics", &self.apply_semantics);
    }
}

impl MutatingPolicy {
    /// Compile errors of the policy's expressions (and its autogen variants'), with their
    /// field paths, for status and logs.
    pub fn compile_errors(&self) -> Vec<(String, String)> {
        self.with_autogen_errors(self.own_compile_errors(), Self::own_compile_errors)
    }

    fn own_compile_errors(&self) -> Vec<(String, String)> {
        let mut out = variable_errors(&self.variables);
        out.extend(match_condition_errors(&self.match_conditions));
        for (i, m) in self.mutations.iter().enumerate() {
            let (field, compiled) = match m {
                CompiledMutation::ApplyConfiguration(c) => ("applyConfiguration", c),
                CompiledMutation::JsonPatch(c) => ("jsonPatch", c),
                CompiledMutation::Missing => continue,
            };
            if let Err(e) = &compiled.expr {
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
    let variants = crate::autogen::mutating_variants(&spec);
    compile_mutating_one(spec, semantics)
        .with_variants(variants, |v| compile_mutating_one(v, semantics))
}

/// Compiles every expression of one MutatingAdmissionPolicy (or variant).
fn compile_mutating_one(spec: MutatingPolicySpec, semantics: ApplySemantics) -> MutatingPolicy {
    MutatingPolicy::compile(spec, |spec, variables| {
        let env = mutation_environment(variables.env());
        let compile = |src: &str, want: &[Type]| compile_checked(&env, src, want);
        let mutations = (spec.mutations.iter())
            .map(
                |m| match (&m.patch_type, &m.apply_configuration, &m.json_patch) {
                    (PatchType::ApplyConfiguration, Some(src), _) => {
                        let want = result_types::apply_configuration();
                        let expr = compile(src, &want);
                        CompiledMutation::ApplyConfiguration(CompiledPatch::new(expr, true))
                    }
                    (PatchType::JsonPatch, _, Some(src)) => {
                        let expr = compile(src, &result_types::json_patch());
                        CompiledMutation::JsonPatch(CompiledPatch::new(expr, false))
                    }
                    _ => CompiledMutation::Missing,
                },
            )
            .collect();
        Mutating {
            mutations,
            apply_semantics: semantics,
        }
    })
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

    #[test]
    fn a_mutation_reading_nothing_of_the_request_has_its_patch_worked_out_once() {
        let spec = MutatingPolicySpec {
            name: "p".into(),
            variables: vec![NamedExpression {
                name: "fixed".into(),
                expression: "'x'".into(),
            }],
            mutations: vec![
                mutation(
                    PatchType::ApplyConfiguration,
                    "Object{metadata: Object.metadata{labels: {'a': 'b'}}}",
                ),
                mutation(
                    PatchType::JsonPatch,
                    "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b'), value: 'c'}]",
                ),
                // A composited variable, the request, an error at evaluation, a patch its
                // conversion refuses: each evaluation gives its own outcome.
                mutation(
                    PatchType::ApplyConfiguration,
                    "Object{metadata: Object.metadata{labels: {'a': variables.fixed}}}",
                ),
                mutation(
                    PatchType::ApplyConfiguration,
                    "Object{metadata: Object.metadata{labels: {'a': object.metadata.name}}}",
                ),
                mutation(
                    PatchType::ApplyConfiguration,
                    "Object{metadata: Object.metadata{labels: {'a': string(1 / 0)}}}",
                ),
                mutation(
                    PatchType::ApplyConfiguration,
                    "Object{spec: Object.metadata{}}",
                ),
            ],
            ..Default::default()
        };
        let p = compile_mutating(spec, ApplySemantics::Upstream);
        assert!(p.compile_errors().is_empty(), "{:?}", p.compile_errors());
        let constants: Vec<Option<&Patch>> = (p.mutations.iter())
            .map(|m| match m {
                CompiledMutation::ApplyConfiguration(c) | CompiledMutation::JsonPatch(c) => {
                    c.constant.as_ref()
                }
                CompiledMutation::Missing => None,
            })
            .collect();
        match constants[0] {
            Some(Patch::Apply((config, None))) => {
                assert_eq!(
                    *config,
                    serde_json::json!({"metadata": {"labels": {"a": "b"}}})
                );
            }
            other => panic!("apply configuration: {other:?}"),
        }
        match constants[1] {
            Some(Patch::Json(ops)) => {
                assert_eq!(ops.len(), 1);
                assert_eq!(
                    (ops[0].op.as_str(), ops[0].path.as_str()),
                    ("add", "/metadata/labels/a~1b")
                );
                assert_eq!(ops[0].value, Some(serde_json::json!("c")));
            }
            other => panic!("JSON patch: {other:?}"),
        }
        assert!(constants[2..].iter().all(Option::is_none), "{constants:?}");
    }
}
