//! Compiles a policy once: every expression parsed, checked and planned. An expression that fails
//! to compile keeps its error, so the policy stays in force and its failurePolicy decides requests.

use std::fmt;
use std::sync::Arc;

use celgate_cel::{Env, Program, Type, Variables, authz};

use crate::autogen::{self, AutogenError};
use crate::environment::policy_variables;
use crate::model::{
    FailurePolicy, MatchResources, MutatingPolicySpec, NamedExpression, ParamKind,
    ValidatingPolicySpec,
};
use crate::pod_controller::PodController;

/// A stored expression after compilation: its program, or why it has none (a request it
/// matches then sees `compilation error: <why>` under the policy's failurePolicy).
pub type CompiledExpr = Result<Program, ExprError>;

/// Whether any of a policy's compiled expressions, or its variables, may read `oldObject`.
/// When none does, the request's old object is bound as `null` (nothing can tell) and so is
/// never decoded for the policy.
fn reads_old_object<'p>(
    expressions: impl IntoIterator<Item = &'p CompiledExpr>,
    variables: &Variables,
) -> bool {
    let variables = variables.iter().filter_map(|(_, p)| p.ok());
    expressions
        .into_iter()
        .filter_map(|p| p.as_ref().ok())
        .chain(variables)
        .any(|p| p.reads(OLD_OBJECT))
}

/// The CEL variable holding the request's old object.
const OLD_OBJECT: &str = "oldObject";

/// One validation, compiled.
#[derive(Debug)]
pub struct CompiledValidation {
    /// The expression's source, for `failed expression: …` messages.
    pub expression: String,
    /// The compiled expression.
    pub program: CompiledExpr,
    /// The static message, if any.
    pub message: Option<String>,
    /// The failure reason (`Invalid` when unset).
    pub reason: Option<String>,
    /// The compiled message expression, if any.
    pub message_expression: Option<CompiledExpr>,
}

/// One audit annotation, compiled.
#[derive(Debug)]
pub struct CompiledAuditAnnotation {
    /// The annotation key (without the policy prefix).
    pub key: String,
    /// The value expression's source.
    pub expression: String,
    /// The compiled value expression.
    pub program: CompiledExpr,
}

/// One match condition, compiled.
#[derive(Debug)]
pub struct CompiledMatchCondition {
    /// The condition's name.
    pub name: String,
    /// The compiled condition.
    pub program: CompiledExpr,
}

/// What a policy spec of either kind holds alike.
pub trait PolicySpec {
    /// The policy's name.
    fn name(&self) -> &str;
    /// The policy's generation.
    fn generation(&self) -> i64;
    /// The policy's failure policy.
    fn failure_policy(&self) -> FailurePolicy;
    /// The policy's paramKind, if any.
    fn param_kind(&self) -> Option<&ParamKind>;
    /// The policy's match constraints (required: `None` is a configuration error).
    fn match_constraints(&self) -> Option<&MatchResources>;
    /// `spec.variables`.
    fn variables(&self) -> &[NamedExpression];
    /// `spec.matchConditions`.
    fn match_conditions(&self) -> &[NamedExpression];
    /// The Pod controller this policy is the variant for, if it is one.
    fn pod_controller(&self) -> Option<PodController>;
}

/// Implements [`PolicySpec`] for specs whose fields are named as the trait's methods.
macro_rules! impl_policy_spec {
    ($($spec:ty),+) => {$(
        impl PolicySpec for $spec {
            fn name(&self) -> &str {
                &self.name
            }
            fn generation(&self) -> i64 {
                self.generation
            }
            fn failure_policy(&self) -> FailurePolicy {
                self.failure_policy
            }
            fn param_kind(&self) -> Option<&ParamKind> {
                self.param_kind.as_ref()
            }
            fn match_constraints(&self) -> Option<&MatchResources> {
                self.match_constraints.as_ref()
            }
            fn variables(&self) -> &[NamedExpression] {
                &self.variables
            }
            fn match_conditions(&self) -> &[NamedExpression] {
                &self.match_conditions
            }
            fn pod_controller(&self) -> Option<PodController> {
                self.pod_controller
            }
        }
    )+};
}

impl_policy_spec!(ValidatingPolicySpec, MutatingPolicySpec);

/// A kind of policy: its spec, and what it compiles of its own.
pub trait PolicyKind {
    /// The kind's spec.
    type Spec: PolicySpec;
    /// The compiled policy's name, for `Debug`.
    const NAME: &'static str;
    /// The sources of the kind's own expressions that may bind `authorizer`.
    fn authorizer_sources(spec: &Self::Spec) -> impl Iterator<Item = &str>;
    /// The kind's compiled expressions, for whether any may read `oldObject`.
    fn programs(&self) -> impl Iterator<Item = &CompiledExpr>;
    /// Adds the kind's fields to the policy's `Debug`.
    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>);
}

/// A policy of either kind ready to evaluate: what both kinds compile alike, and `kind`, what
/// the kind compiles of its own (its fields read as the policy's, through `Deref`).
pub struct CompiledPolicy<K: PolicyKind> {
    /// The policy as written.
    pub spec: K::Spec,
    /// Shared copy of the name, for decisions, errors and metrics labels.
    pub name: Arc<str>,
    /// Compiled match conditions, in order.
    pub match_conditions: Vec<CompiledMatchCondition>,
    /// Compiled variables, evaluated lazily per activation.
    pub variables: Arc<Variables>,
    /// Whether any expression may read `authorizer` (so requests need one built).
    pub uses_authorizer: bool,
    /// Whether any expression may read `oldObject` (so the old object is decoded for it).
    pub reads_old_object: bool,
    /// What the kind compiles of its own.
    pub kind: K,
    /// The policy's variants for the Pod controllers its autogen annotation names, each
    /// compiled ([`crate::autogen`]); empty without the annotation.
    pub autogen: Vec<Arc<CompiledPolicy<K>>>,
    /// Why the policy's autogen annotation cannot be applied, if it cannot.
    pub autogen_error: Option<AutogenError>,
}

impl<K: PolicyKind> std::ops::Deref for CompiledPolicy<K> {
    type Target = K;

    fn deref(&self) -> &K {
        &self.kind
    }
}

impl<K: PolicyKind> fmt::Debug for CompiledPolicy<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct(K::NAME);
        d.field("name", &self.name)
            .field("generation", &self.spec.generation())
            .field("variables", &self.variables.len());
        self.kind.debug_fields(&mut d);
        d.finish_non_exhaustive()
    }
}

impl<K: PolicyKind> CompiledPolicy<K> {
    /// Compiles `spec`: its variables and match conditions as every policy's, then its own
    /// expressions with `compile_kind`, given the spec and its variables (whose environment
    /// declares them).
    pub(crate) fn compile(
        spec: K::Spec,
        compile_kind: impl FnOnce(&K::Spec, &Arc<Variables>) -> K,
    ) -> Self {
        let has_params = spec.param_kind().is_some();
        let variables = policy_variables(has_params, true, named(spec.variables()));
        let env = variables.env();
        let match_conditions: Vec<CompiledMatchCondition> = (spec.match_conditions().iter())
            .map(|c| CompiledMatchCondition {
                name: c.name.clone(),
                program: compile_checked(env, &c.expression, result_types::CONDITION),
            })
            .collect();
        let kind = compile_kind(&spec, &variables);
        // A textual test: a false positive only costs building an authorizer per request.
        let uses_authorizer = (spec.match_conditions().iter())
            .chain(spec.variables())
            .map(|e| e.expression.as_str())
            .chain(K::authorizer_sources(&spec))
            .any(|src| src.contains(authz::AUTHORIZER_VARIABLE));
        let reads_old_object = reads_old_object(
            (kind.programs()).chain(match_conditions.iter().map(|c| &c.program)),
            &variables,
        );
        CompiledPolicy {
            name: Arc::from(spec.name()),
            spec,
            match_conditions,
            variables,
            uses_authorizer,
            reads_old_object,
            kind,
            autogen: Vec::new(),
            autogen_error: None,
        }
    }

    /// This policy with its autogen variants (or why it has none), compiled by `compile`.
    pub(crate) fn with_variants(
        mut self,
        variants: Result<Vec<K::Spec>, AutogenError>,
        compile: impl Fn(K::Spec) -> Self,
    ) -> Self {
        match variants {
            Ok(specs) => self.autogen = specs.into_iter().map(|s| Arc::new(compile(s))).collect(),
            Err(e) => self.autogen_error = Some(e),
        }
        self
    }

    /// `errors` (the policy's compile errors) with the autogen error and the errors of its
    /// variants' expressions that the policy's own do not already report.
    pub(crate) fn with_autogen_errors(
        &self,
        mut errors: Vec<(String, String)>,
        variant_errors: impl Fn(&Self) -> Vec<(String, String)>,
    ) -> Vec<(String, String)> {
        if let Some(e) = &self.autogen_error {
            errors.push((
                format!("metadata.annotations[{}]", autogen::ANNOTATION),
                e.to_string(),
            ));
        }
        for v in &self.autogen {
            let kind = v.spec.pod_controller().map_or("", PodController::kind);
            for (field, e) in variant_errors(v) {
                if !errors.iter().any(|(f, _)| *f == field) {
                    errors.push((format!("{field} (autogen for {kind})"), e));
                }
            }
        }
        errors
    }

    /// The policy's failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.spec.failure_policy()
    }
}

/// A policy's variables as (name, expression) pairs.
fn named(variables: &[NamedExpression]) -> impl ExactSizeIterator<Item = (&str, &str)> {
    (variables.iter()).map(|v| (v.name.as_str(), v.expression.as_str()))
}

/// A ValidatingAdmissionPolicy ready to evaluate.
pub type ValidatingPolicy = CompiledPolicy<Validating>;

/// What a ValidatingAdmissionPolicy compiles of its own.
pub struct Validating {
    /// Compiled validations, in order.
    pub validations: Vec<CompiledValidation>,
    /// Compiled audit annotations, in order.
    pub audit_annotations: Vec<CompiledAuditAnnotation>,
    /// The variables as message expressions see them (without `authorizer`).
    pub message_variables: Arc<Variables>,
}

impl PolicyKind for Validating {
    type Spec = ValidatingPolicySpec;
    const NAME: &'static str = "ValidatingPolicy";

    fn authorizer_sources(spec: &ValidatingPolicySpec) -> impl Iterator<Item = &str> {
        spec.validations.iter().map(|v| v.expression.as_str())
    }

    fn programs(&self) -> impl Iterator<Item = &CompiledExpr> {
        (self.validations.iter())
            .flat_map(|v| std::iter::once(&v.program).chain(&v.message_expression))
            .chain(self.audit_annotations.iter().map(|a| &a.program))
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("validations", &self.validations.len());
    }
}

impl ValidatingPolicy {
    /// Compile errors of the policy's expressions (and its autogen variants'), with their
    /// field paths, for status and logs.
    pub fn compile_errors(&self) -> Vec<(String, String)> {
        self.with_autogen_errors(self.own_compile_errors(), Self::own_compile_errors)
    }

    fn own_compile_errors(&self) -> Vec<(String, String)> {
        let mut out = variable_errors(&self.variables);
        for (i, v) in self.validations.iter().enumerate() {
            if let Err(e) = &v.program {
                out.push((format!("spec.validations[{i}].expression"), e.to_string()));
            }
            if let Some(Err(e)) = &v.message_expression {
                out.push((
                    format!("spec.validations[{i}].messageExpression"),
                    e.to_string(),
                ));
            }
        }
        out.extend(match_condition_errors(&self.match_conditions));
        for (i, a) in self.audit_annotations.iter().enumerate() {
            if let Err(e) = &a.program {
                out.push((
                    format!("spec.auditAnnotations[{i}].valueExpression"),
                    e.to_string(),
                ));
            }
        }
        out
    }
}

/// Compile errors of a policy's variables, with their field paths.
pub(crate) fn variable_errors(variables: &Variables) -> Vec<(String, String)> {
    variables
        .iter()
        .enumerate()
        .filter_map(|(i, (_, compiled))| {
            let e = compiled.as_ref().err()?;
            Some((format!("spec.variables[{i}].expression"), e.to_string()))
        })
        .collect()
}

/// Compile errors of a policy's match conditions, with their field paths.
pub(crate) fn match_condition_errors(
    conditions: &[CompiledMatchCondition],
) -> impl Iterator<Item = (String, String)> + '_ {
    conditions.iter().enumerate().filter_map(|(i, c)| {
        let e = c.program.as_ref().err()?;
        Some((
            format!("spec.matchConditions[{i}].expression"),
            e.to_string(),
        ))
    })
}

/// Why an expression cannot be used, worded as kube-apiserver's API validation words it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// Parse or type-check issues (cel-go's issue text).
    #[error("compilation failed: {0}")]
    Compile(String),
    /// The expression checks but its program cannot be built (cel-go's `Program()` failed: a
    /// constant conversion it folds, e.g. `uint('1.5')`, or an invalid constant regular
    /// expression); Kubernetes reports it as an internal error.
    #[error("program instantiation failed: {0}")]
    Program(String),
    /// The checked result type is not exactly one the field allows (`dyn` is not accepted).
    #[error("must evaluate to {want} but got {got}")]
    ResultType {
        /// The allowed type(s), e.g. `bool` or `one of [string null_type]`.
        want: String,
        /// The checked type.
        got: String,
    },
}

/// Compiles `src` and checks its result type is exactly one of `want` (any type when empty).
/// As Kubernetes: parse and check, then the result type, then the program.
pub fn compile_checked(env: &Env, src: &str, want: &[Type]) -> Result<Program, ExprError> {
    let compiled = env.compile(src);
    let got = match &compiled {
        Ok(p) => p.output_type(),
        Err(e) => match e.checked_output_type() {
            Some(t) if e.is_program() => t,
            _ => return Err(ExprError::Compile(e.to_string())),
        },
    };
    if want.is_empty() || want.contains(got) {
        return compiled.map_err(|e| ExprError::Program(e.to_string()));
    }
    let want = match want {
        [one] => one.to_string(),
        many => format!(
            "one of [{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        ),
    };
    Err(ExprError::ResultType {
        want,
        got: got.to_string(),
    })
}

/// The result types each expression field allows.
pub mod result_types {
    use celgate_cel::Type;

    /// mutations[].applyConfiguration.expression: exactly the root `Object` type.
    pub fn apply_configuration() -> [Type; 1] {
        [Type::object("Object", [])]
    }

    /// mutations[].jsonPatch.expression: exactly `list(JSONPatch)`.
    pub fn json_patch() -> [Type; 1] {
        [Type::list(Type::object("JSONPatch", []))]
    }

    /// validations[].expression and matchConditions[].expression.
    pub const CONDITION: &[Type] = &[Type::Bool];
    /// validations[].messageExpression.
    pub const MESSAGE: &[Type] = &[Type::String];
    /// auditAnnotations[].valueExpression.
    pub const AUDIT_VALUE: &[Type] = &[Type::String, Type::Null];
}

/// Compiles every expression of a ValidatingAdmissionPolicy, and of its autogen variants.
pub fn compile_validating(spec: ValidatingPolicySpec) -> ValidatingPolicy {
    let variants = autogen::validating_variants(&spec);
    compile_validating_one(spec).with_variants(variants, compile_validating_one)
}

/// Compiles every expression of one ValidatingAdmissionPolicy (or variant).
fn compile_validating_one(spec: ValidatingPolicySpec) -> ValidatingPolicy {
    ValidatingPolicy::compile(spec, |spec, variables| {
        let has_params = spec.param_kind.is_some();
        // Message expressions see the variables without `authorizer`: compiled apart only for
        // a policy that has message expressions (no other expression reads them).
        let has_messages = (spec.validations.iter()).any(|v| v.message_expression.is_some());
        let message_variables = if has_messages {
            policy_variables(has_params, false, named(&spec.variables))
        } else {
            variables.clone()
        };
        let (env, message_env) = (variables.env(), message_variables.env());
        let validations = (spec.validations.iter())
            .map(|v| CompiledValidation {
                expression: v.expression.clone(),
                program: compile_checked(env, &v.expression, result_types::CONDITION),
                message: v.message.clone(),
                reason: v.reason.clone(),
                message_expression: v
                    .message_expression
                    .as_deref()
                    .map(|m| compile_checked(message_env, m, result_types::MESSAGE)),
            })
            .collect();
        let audit_annotations = (spec.audit_annotations.iter())
            .map(|a| CompiledAuditAnnotation {
                key: a.key.clone(),
                expression: a.value_expression.clone(),
                program: compile_checked(env, &a.value_expression, result_types::AUDIT_VALUE),
            })
            .collect();
        Validating {
            validations,
            audit_annotations,
            message_variables,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NamedExpression, Validation};

    fn spec(variables: &[(&str, &str)], message_expression: Option<&str>) -> ValidatingPolicySpec {
        ValidatingPolicySpec {
            name: "p".into(),
            validations: vec![Validation {
                expression: "variables.x == 1".into(),
                message_expression: message_expression.map(str::to_string),
                ..Default::default()
            }],
            variables: variables
                .iter()
                .map(|(name, expression)| NamedExpression {
                    name: name.to_string(),
                    expression: expression.to_string(),
                })
                .collect(),
            ..Default::default()
        }
    }

    /// What compiles once is shared, and reads as it did when compiled per policy.
    #[test]
    fn variables_compile_once_where_they_can_be_shared() {
        // No variables: one shared empty set, which still declares `variables`.
        let (a, b) = (
            compile_validating(spec(&[], None)),
            compile_validating(spec(&[], None)),
        );
        assert!(Arc::ptr_eq(&a.variables, &b.variables));
        let error = a.validations[0]
            .program
            .as_ref()
            .err()
            .map(ToString::to_string);
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("undefined field 'x'")),
            "{error:?}"
        );
        // No message expression: messages never read the variables, which are not compiled
        // twice; with one, messages get their own (without `authorizer`).
        let plain = compile_validating(spec(&[("x", "1")], None));
        assert!(Arc::ptr_eq(&plain.variables, &plain.message_variables));
        assert!(plain.validations[0].program.is_ok());
        let with_message = compile_validating(spec(&[("x", "authorizer != null")], Some("'m'")));
        assert!(!Arc::ptr_eq(
            &with_message.variables,
            &with_message.message_variables
        ));
        assert!(
            with_message
                .message_variables
                .env()
                .variable_type("authorizer")
                .is_none()
        );
        assert!(
            with_message
                .variables
                .env()
                .variable_type("authorizer")
                .is_some()
        );
    }
}
