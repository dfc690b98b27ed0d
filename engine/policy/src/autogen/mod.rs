//! Pod policies that also cover the controllers that make Pods (opt-in per policy, with the
//! annotation [`ANNOTATION`]): a policy whose rules match Pods also applies to Deployments,
//! ReplicaSets, StatefulSets, DaemonSets, Jobs and CronJobs, reading and patching each one's
//! Pod template where it reads and patches the Pod.
//!
//! This is the one expansion every path uses: compiling a policy compiles its variants (one per
//! controller, [`validating_variants`], [`mutating_variants`]), a [`crate::PolicySet`] binds
//! each variant with the policy's bindings ([`binding_match`]), and type checking checks each
//! variant against its controller's schema. The expressions are rewritten on their checked trees
//! ([`celgate_cel::Env::relocate`]), never on their text.

use std::sync::Arc;

use celgate_cel::{Env, Relocation, RelocationError, Variables};

use crate::environment::{mutation_environment, policy_variables};
use crate::model::{
    MatchResources, MutatingBindingSpec, MutatingPolicySpec, NamedExpression, ResourceRule,
    ValidatingBindingSpec, ValidatingPolicySpec,
};
use crate::pod_controller::PodController;

/// The annotation that opts a policy in: `all`, or a comma-separated list of controller kinds
/// (`Deployment, CronJob`), case-insensitive; `none` or empty opts out.
pub const ANNOTATION: &str = "admission.celgate.io/autogen";

/// What messages add after a policy's quoted name when a variant decided:
/// ` (Pod template of Deployment)`; empty for the policy itself.
pub fn variant_label(controller: Option<PodController>) -> String {
    controller.map_or_else(String::new, |c| format!(" (Pod template of {})", c.kind()))
}

/// Why a policy's autogen cannot be applied. The policy keeps applying to Pods; the error is
/// reported with its compile errors (status, `celgate check`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AutogenError {
    /// The annotation names something that is not a Pod controller.
    #[error(
        "annotation {ANNOTATION}: unknown controller {0:?}; write all, none, or a comma-separated list of Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob"
    )]
    UnknownController(String),
    /// The policy's rules match no Pods.
    #[error(
        "annotation {ANNOTATION}: the policy's matchConstraints.resourceRules name no pods (group \"\"), so there is nothing to apply to Pod controllers"
    )]
    NoPodRules,
    /// An expression cannot be moved to a controller's template.
    #[error("annotation {ANNOTATION}: {field} cannot be applied to {kind}: {error}")]
    Expression {
        /// The expression's field path.
        field: String,
        /// The controller's kind.
        kind: &'static str,
        /// Why.
        error: RelocationError,
    },
}

/// The controllers an annotation value names, in [`PodController::ALL`]'s order.
pub fn parse_annotation(value: &str) -> Result<Vec<PodController>, AutogenError> {
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name.eq_ignore_ascii_case("all") {
            return Ok(PodController::ALL.to_vec());
        }
        if name.eq_ignore_ascii_case("none") {
            continue;
        }
        let c = PodController::named(name)
            .ok_or_else(|| AutogenError::UnknownController(name.to_string()))?;
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out.sort();
    Ok(out)
}

/// Whether a resource rule names Pods (the resource itself, not a subresource).
fn names_pods(rule: &ResourceRule) -> bool {
    rule.api_groups.iter().any(|g| g.is_empty() || g == "*")
        && rule.resources.iter().any(|r| r == "pods")
}

/// The rules for `controller` standing for the Pod rules among `rules`.
fn controller_rules(rules: &[ResourceRule], controller: PodController) -> Vec<ResourceRule> {
    (rules.iter().filter(|r| names_pods(r)))
        .map(|r| ResourceRule {
            api_groups: vec![controller.group().into()],
            api_versions: vec!["v1".into()],
            resources: vec![controller.resource().into()],
            ..r.clone()
        })
        .collect()
}

/// A policy's match constraints as its `controller` variant has them: the Pod rules turned
/// into the controller's, the selectors as written.
fn variant_constraints(m: &MatchResources, controller: PodController) -> MatchResources {
    MatchResources {
        resource_rules: controller_rules(&m.resource_rules, controller),
        exclude_resource_rules: controller_rules(&m.exclude_resource_rules, controller),
        ..m.clone()
    }
}

/// A binding of either kind, as a policy's variant for a controller binds it.
pub trait BindingMatch: Sized {
    /// This binding with its match resources as [`binding_match`] gives them.
    fn for_controller(&self, controller: PodController) -> Self;
}

impl BindingMatch for ValidatingBindingSpec {
    fn for_controller(&self, controller: PodController) -> Self {
        ValidatingBindingSpec {
            match_resources: (self.match_resources.as_ref()).map(|m| binding_match(m, controller)),
            ..self.clone()
        }
    }
}

impl BindingMatch for MutatingBindingSpec {
    fn for_controller(&self, controller: PodController) -> Self {
        MutatingBindingSpec {
            match_resources: (self.match_resources.as_ref()).map(|m| binding_match(m, controller)),
            ..self.clone()
        }
    }
}

/// A binding's match resources for a policy's `controller` variant: rules that name Pods also
/// name the controller (a binding without rules keeps taking everything the policy matches).
pub fn binding_match(m: &MatchResources, controller: PodController) -> MatchResources {
    let extend = |rules: &[ResourceRule]| -> Vec<ResourceRule> {
        let mut out = rules.to_vec();
        out.extend(controller_rules(rules, controller));
        out
    };
    MatchResources {
        resource_rules: extend(&m.resource_rules),
        exclude_resource_rules: extend(&m.exclude_resource_rules),
        ..m.clone()
    }
}

/// The controllers a policy's annotation asks for, if its rules match Pods.
fn requested(
    annotation: Option<&str>,
    constraints: Option<&MatchResources>,
) -> Result<Vec<PodController>, AutogenError> {
    let controllers = parse_annotation(annotation.unwrap_or_default())?;
    let pods = constraints.is_some_and(|m| m.resource_rules.iter().any(names_pods));
    if !controllers.is_empty() && !pods {
        return Err(AutogenError::NoPodRules);
    }
    Ok(controllers)
}

/// Rewrites expressions for one controller, naming the field of any that cannot be.
struct Mover<'e> {
    env: &'e Env,
    relocation: Relocation,
    kind: &'static str,
}

impl Mover<'_> {
    /// `src` moved; an expression that does not compile is kept as written (its variant
    /// reports the same compile error as the policy).
    fn moved(&self, field: String, src: &str) -> Result<String, AutogenError> {
        match self.env.relocate(src, &self.relocation) {
            Ok(s) => Ok(s),
            Err(RelocationError::Compile(_)) => Ok(src.to_string()),
            Err(error) => Err(AutogenError::Expression {
                field,
                kind: self.kind,
                error,
            }),
        }
    }

    fn named(
        &self,
        list: &str,
        items: &[NamedExpression],
    ) -> Result<Vec<NamedExpression>, AutogenError> {
        (items.iter().enumerate())
            .map(|(i, e)| {
                let field = format!("spec.{list}[{i}].expression");
                Ok(NamedExpression {
                    name: e.name.clone(),
                    expression: self.moved(field, &e.expression)?,
                })
            })
            .collect()
    }
}

/// The controllers to make variants for, and the policy's compiled variables.
type VariantInputs = (Vec<PodController>, Arc<Variables>);

/// The controllers a policy's annotation names, and its variables compiled in its base
/// environment (the variants' expressions are rewritten against them); `None` when the
/// annotation names none.
fn controllers_and_variables(
    annotation: Option<&str>,
    constraints: Option<&MatchResources>,
    has_params: bool,
    variables: &[NamedExpression],
) -> Result<Option<VariantInputs>, AutogenError> {
    let controllers = requested(annotation, constraints)?;
    if controllers.is_empty() {
        return Ok(None);
    }
    let named = variables
        .iter()
        .map(|v| (v.name.as_str(), v.expression.as_str()));
    Ok(Some((
        controllers,
        policy_variables(has_params, true, named),
    )))
}

/// The variants of a ValidatingAdmissionPolicy, one per controller its annotation names
/// (none without the annotation).
pub fn validating_variants(
    spec: &ValidatingPolicySpec,
) -> Result<Vec<ValidatingPolicySpec>, AutogenError> {
    let Some((controllers, variables)) = controllers_and_variables(
        spec.autogen.as_deref(),
        spec.match_constraints.as_ref(),
        spec.param_kind.is_some(),
        &spec.variables,
    )?
    else {
        return Ok(Vec::new());
    };
    let env = variables.env();
    controllers
        .into_iter()
        .map(|c| {
            let m = Mover {
                env,
                relocation: c.relocation(),
                kind: c.kind(),
            };
            let mut v = spec.clone();
            v.autogen = None;
            v.pod_controller = Some(c);
            v.match_constraints = spec
                .match_constraints
                .as_ref()
                .map(|mc| variant_constraints(mc, c));
            v.variables = m.named("variables", &spec.variables)?;
            v.match_conditions = m.named("matchConditions", &spec.match_conditions)?;
            for (i, val) in v.validations.iter_mut().enumerate() {
                let at = format!("spec.validations[{i}]");
                val.expression = m.moved(format!("{at}.expression"), &val.expression)?;
                if let Some(msg) = &val.message_expression {
                    val.message_expression = Some(m.moved(format!("{at}.messageExpression"), msg)?);
                }
            }
            for (i, a) in v.audit_annotations.iter_mut().enumerate() {
                let field = format!("spec.auditAnnotations[{i}].valueExpression");
                a.value_expression = m.moved(field, &a.value_expression)?;
            }
            Ok(v)
        })
        .collect()
}

/// The variants of a MutatingAdmissionPolicy, one per controller its annotation names (none
/// without the annotation): the mutations patch the controller's Pod template.
pub fn mutating_variants(
    spec: &MutatingPolicySpec,
) -> Result<Vec<MutatingPolicySpec>, AutogenError> {
    let Some((controllers, variables)) = controllers_and_variables(
        spec.autogen.as_deref(),
        spec.match_constraints.as_ref(),
        spec.param_kind.is_some(),
        &spec.variables,
    )?
    else {
        return Ok(Vec::new());
    };
    let env = variables.env();
    let mutation_env = mutation_environment(env);
    controllers
        .into_iter()
        .map(|c| {
            let m = Mover {
                env,
                relocation: c.relocation(),
                kind: c.kind(),
            };
            let mutations = Mover {
                env: &mutation_env,
                relocation: c.relocation(),
                kind: c.kind(),
            };
            let mut v = spec.clone();
            v.autogen = None;
            v.pod_controller = Some(c);
            v.match_constraints = spec
                .match_constraints
                .as_ref()
                .map(|mc| variant_constraints(mc, c));
            v.variables = m.named("variables", &spec.variables)?;
            v.match_conditions = m.named("matchConditions", &spec.match_conditions)?;
            for (i, mu) in v.mutations.iter_mut().enumerate() {
                let at = format!("spec.mutations[{i}]");
                if let Some(src) = &mu.apply_configuration {
                    let field = format!("{at}.applyConfiguration.expression");
                    mu.apply_configuration = Some(mutations.moved(field, src)?);
                }
                if let Some(src) = &mu.json_patch {
                    let field = format!("{at}.jsonPatch.expression");
                    mu.json_patch = Some(mutations.moved(field, src)?);
                }
            }
            Ok(v)
        })
        .collect()
}

/// The match constraints that cover a policy and its variants, for fetching the schemas type
/// checking needs: the policy's rules and its variants'.
pub fn covered_constraints(
    constraints: Option<&MatchResources>,
    annotation: Option<&str>,
) -> Option<MatchResources> {
    let m = constraints?;
    let controllers = requested(annotation, Some(m)).unwrap_or_default();
    let mut out = m.clone();
    for c in controllers {
        out.resource_rules
            .extend(controller_rules(&m.resource_rules, c));
    }
    Some(out)
}

#[cfg(test)]
mod tests;
