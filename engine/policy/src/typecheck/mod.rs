//! Type checking of policies against the schemas of the kinds they match, for
//! `status.typeChecking`. Never changes admission behaviour.
//!
//! For a ValidatingAdmissionPolicy, [`TypeCheckReport::expression_warnings`] is exactly what
//! kube-controller-manager writes: each validation's `expression` and `messageExpression`
//! checked against upstream's kinds ([`kinds_to_check`]) in upstream's environment, one
//! warning per expression that fails for some kind, reading `"<gvk>: <issues>\n"` per failing
//! kind joined with `"\n"` (the issues as cel-go prints them). Upstream names the root types
//! `<Kind><nanoseconds>`; celgate names them `<Kind>`.
//!
//! Beyond upstream, [`TypeCheckReport::additional_warnings`] holds, in the same format and each
//! with its own field path, in this order: variables, matchConditions, the validations against
//! the kinds upstream leaves out (in upstream's environment), auditAnnotations; for a
//! MutatingAdmissionPolicy its variables, matchConditions and mutations (apply configurations
//! checked field by field against the kind's schema, and JSON patches). Variables,
//! matchConditions, auditAnnotations and mutations are checked against every selected kind
//! with the declarations they have at run time.

mod environment;
mod selection;

use std::sync::Arc;

use celgate_cel::{CheckedVariables, CompileError, Type};

use crate::autogen;
use crate::model::{MatchResources, MutatingPolicySpec, ParamKind, ValidatingPolicySpec};
use crate::schema::{Gvk, Schema, resource_type};
use environment::{Declarations, Flavour, environment};

pub use selection::{KindSelection, MAX_KINDS, UPSTREAM_MAX_KINDS, kinds_to_check, matched_kinds};

/// A served resource or subresource, as discovery lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiResource {
    /// The API group; empty for the core group.
    pub group: String,
    /// The version.
    pub version: String,
    /// `deployments`, or `deployments/scale` for a subresource.
    pub resource: String,
    /// The kind discovery reports for it (for a subresource e.g. `autoscaling/v1, Kind=Scale`).
    pub kind: Gvk,
}

/// What the cluster (or an offline snapshot) knows about resources and their schemas. Every
/// method is synchronous and cheap: the operator fetches what [`kinds_to_check`] selects
/// (and the paramKind's schema) before checking on a blocking thread.
pub trait TypeSource {
    /// The kinds of `resource` (no subresource) in `group`/`version`, as the RESTMapper's
    /// `KindsFor` gives them; empty when unknown.
    fn kinds_for(&self, group: &str, version: &str, resource: &str) -> Vec<Gvk>;
    /// Every served resource and subresource.
    fn resources(&self) -> Vec<ApiResource>;
    /// The schema of a kind, if known.
    fn schema(&self, gvk: &Gvk) -> Option<Arc<Schema>>;
}

/// A warning about one expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpressionWarning {
    /// The expression's field path, e.g. `spec.validations[0].expression`.
    pub field_ref: String,
    /// The issues, per failing kind.
    pub warning: String,
}

/// A kind or rule that was not checked against, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedKind {
    /// The kind (`apps/v1, Kind=Deployment`) or field path of the rule.
    pub what: String,
    /// Why, as a sentence a user can act on.
    pub reason: String,
}

/// The result of type-checking one policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeCheckReport {
    /// Exactly kube-controller-manager's `status.typeChecking.expressionWarnings` (empty for a
    /// MutatingAdmissionPolicy, which upstream does not check).
    pub expression_warnings: Vec<ExpressionWarning>,
    /// celgate's checks beyond upstream, each with its own field path.
    pub additional_warnings: Vec<ExpressionWarning>,
    /// The kinds checked against, in order: upstream's, then celgate's.
    pub checked: Vec<Gvk>,
    /// Kinds and rules not checked against, and why.
    pub skipped: Vec<SkippedKind>,
}

/// Type-checks a ValidatingAdmissionPolicy.
/// A policy with an autogen annotation also has each variant checked against its controller's
/// schema ([`with_variants`]).
pub fn check_validating(spec: &ValidatingPolicySpec, source: &dyn TypeSource) -> TypeCheckReport {
    let report = check_validating_one(spec, source);
    with_variants(report, autogen::validating_variants(spec), |v| {
        check_validating_one(v, source)
    })
}

fn check_validating_one(spec: &ValidatingPolicySpec, source: &dyn TypeSource) -> TypeCheckReport {
    let (kinds, mut report) = prepare(
        spec.match_constraints.as_ref(),
        spec.param_kind.as_ref(),
        source,
    );
    let vars = &spec.variables;
    let envs: Vec<[CheckedVariables; 2]> = kinds
        .iter()
        .map(|k| [Flavour::Upstream, Flavour::Runtime].map(|f| environment(&k.decls, f, vars)))
        .collect();
    let [upstream, runtime] = [0, 1];
    let all = |_: &Kind| true;
    let theirs = |k: &Kind| k.upstream;
    let ours = |k: &Kind| !k.upstream;

    let mut out = Warnings::new(&kinds, &envs);
    for (i, v) in spec.validations.iter().enumerate() {
        let at = format!("spec.validations[{i}]");
        out.expression(format!("{at}.expression"), &v.expression, upstream, theirs);
        if let Some(m) = v.message_expression.as_deref().filter(|m| !m.is_empty()) {
            out.expression(format!("{at}.messageExpression"), m, upstream, theirs);
        }
    }
    report.expression_warnings = std::mem::take(&mut out.warnings);

    out.variables(runtime);
    for (i, c) in spec.match_conditions.iter().enumerate() {
        let field = format!("spec.matchConditions[{i}].expression");
        out.expression(field, &c.expression, runtime, all);
    }
    for (i, v) in spec.validations.iter().enumerate() {
        let at = format!("spec.validations[{i}]");
        out.expression(format!("{at}.expression"), &v.expression, upstream, ours);
        if let Some(m) = v.message_expression.as_deref().filter(|m| !m.is_empty()) {
            out.expression(format!("{at}.messageExpression"), m, upstream, ours);
        }
    }
    for (i, a) in spec.audit_annotations.iter().enumerate() {
        let field = format!("spec.auditAnnotations[{i}].valueExpression");
        out.expression(field, &a.value_expression, runtime, all);
    }
    report.additional_warnings = out.warnings;
    report
        .additional_warnings
        .extend(wildcard_connect_warnings(spec.match_constraints.as_ref()));
    report
}

/// The subresources kube-apiserver serves as connections (CONNECT).
const CONNECT_SUBRESOURCES: [&str; 4] = ["exec", "attach", "portforward", "proxy"];

/// A warning for each resource rule whose `*` operations would take connections in-tree (its
/// resources hold `<resource>/*` or a connection subresource) but do not in celgate, where `*`
/// is CREATE, UPDATE and DELETE unless `--wildcard-includes-connect`.
fn wildcard_connect_warnings(constraints: Option<&MatchResources>) -> Vec<ExpressionWarning> {
    let rules = constraints.map_or(&[][..], |c| c.resource_rules.as_slice());
    rules
        .iter()
        .enumerate()
        .filter(|(_, r)| r.operations.iter().any(|o| o == "*"))
        .filter_map(|(i, r)| {
            let connectable: Vec<&str> = r
                .resources
                .iter()
                .filter(|entry| {
                    entry.split_once('/').is_some_and(|(_, sub)| {
                        sub == "*" || CONNECT_SUBRESOURCES.contains(&sub)
                    })
                })
                .map(String::as_str)
                .collect();
            (!connectable.is_empty()).then(|| ExpressionWarning {
                field_ref: format!("spec.matchConstraints.resourceRules[{i}].operations"),
                warning: format!(
                    "'*' includes CONNECT in-tree, so this rule would also decide connections (kubectl exec, attach, port-forward, proxy) to {}; celgate applies '*' to CREATE, UPDATE and DELETE only unless started with --wildcard-includes-connect: name CONNECT in the operations to decide connections",
                    connectable.join(", ")
                ),
            })
        })
        .collect()
}

/// Type-checks a MutatingAdmissionPolicy (all of it beyond upstream, which checks none).
pub fn check_mutating(spec: &MutatingPolicySpec, source: &dyn TypeSource) -> TypeCheckReport {
    let report = check_mutating_one(spec, source);
    with_variants(report, autogen::mutating_variants(spec), |v| {
        check_mutating_one(v, source)
    })
}

/// `report` with what checking each autogen variant found, each warning's field path followed
/// by the variant's controller (`spec.validations[0].expression (Pod template of Deployment)`),
/// or with why the annotation cannot be applied.
fn with_variants<S: crate::compile::PolicySpec>(
    mut report: TypeCheckReport,
    variants: Result<Vec<S>, autogen::AutogenError>,
    check: impl Fn(&S) -> TypeCheckReport,
) -> TypeCheckReport {
    let variants = match variants {
        Ok(v) => v,
        Err(e) => {
            report.additional_warnings.push(ExpressionWarning {
                field_ref: format!("metadata.annotations[{}]", autogen::ANNOTATION),
                warning: e.to_string(),
            });
            return report;
        }
    };
    for v in &variants {
        let label = autogen::variant_label(v.pod_controller());
        let found = check(v);
        let warnings = found
            .expression_warnings
            .into_iter()
            .chain(found.additional_warnings);
        report
            .additional_warnings
            .extend(warnings.map(|w| ExpressionWarning {
                field_ref: format!("{}{label}", w.field_ref),
                warning: w.warning,
            }));
        report.checked.extend(found.checked);
        report.skipped.extend(found.skipped);
    }
    report
}

fn check_mutating_one(spec: &MutatingPolicySpec, source: &dyn TypeSource) -> TypeCheckReport {
    let (kinds, mut report) = prepare(
        spec.match_constraints.as_ref(),
        spec.param_kind.as_ref(),
        source,
    );
    let envs: Vec<[CheckedVariables; 1]> = kinds
        .iter()
        .map(|k| [environment(&k.decls, Flavour::Mutation, &spec.variables)])
        .collect();
    let all = |_: &Kind| true;
    let mut out = Warnings::new(&kinds, &envs);
    out.variables(0);
    for (i, c) in spec.match_conditions.iter().enumerate() {
        let field = format!("spec.matchConditions[{i}].expression");
        out.expression(field, &c.expression, 0, all);
    }
    for (i, m) in spec.mutations.iter().enumerate() {
        let at = format!("spec.mutations[{i}]");
        if let Some(src) = &m.apply_configuration {
            let field = format!("{at}.applyConfiguration.expression");
            out.expression(field, src, 0, all);
        }
        if let Some(src) = &m.json_patch {
            out.expression(format!("{at}.jsonPatch.expression"), src, 0, all);
        }
    }
    report.additional_warnings = out.warnings;
    report
        .additional_warnings
        .extend(wildcard_connect_warnings(spec.match_constraints.as_ref()));
    report
}

/// A kind to check against.
struct Kind {
    gvk: Gvk,
    /// Whether upstream checks it.
    upstream: bool,
    decls: Declarations,
}

/// The kinds to check against (those with a schema) and a report listing them and the ones
/// skipped.
fn prepare(
    match_constraints: Option<&crate::model::MatchResources>,
    param_kind: Option<&ParamKind>,
    source: &dyn TypeSource,
) -> (Vec<Kind>, TypeCheckReport) {
    let selection = kinds_to_check(match_constraints, source);
    let params = param_type(param_kind, source);
    let mut report = TypeCheckReport {
        skipped: selection.skipped.clone(),
        ..TypeCheckReport::default()
    };
    let mut kinds = Vec::new();
    for (gvk, upstream) in selection
        .upstream
        .iter()
        .map(|k| (k, true))
        .chain(selection.additional.iter().map(|k| (k, false)))
    {
        let Some(schema) = source.schema(gvk) else {
            report.skipped.push(SkippedKind {
                what: gvk.to_string(),
                reason: "the cluster publishes no OpenAPI schema for this kind".into(),
            });
            continue;
        };
        let object = resource_type(&schema, &gvk.kind).unwrap_or(Type::Dyn);
        report.checked.push(gvk.clone());
        kinds.push(Kind {
            gvk: gvk.clone(),
            upstream,
            decls: Declarations {
                object,
                params: params.clone(),
                schema,
            },
        });
    }
    (kinds, report)
}

/// The declared type of `params`: `None` when not declared (no paramKind, or an apiVersion
/// upstream cannot parse), `dyn` when the paramKind's schema is unknown.
fn param_type(param_kind: Option<&ParamKind>, source: &dyn TypeSource) -> Option<Type> {
    let p = param_kind?;
    if p.api_version.matches('/').count() > 1 {
        return None;
    }
    let gvk = Gvk::from_api_version(&p.api_version, &p.kind);
    if gvk == Gvk::default() {
        return None;
    }
    let t = source
        .schema(&gvk)
        .and_then(|s| resource_type(&s, &gvk.kind));
    Some(t.unwrap_or(Type::Dyn))
}

/// Collects warnings over the kinds' environments (`N` flavours per kind).
struct Warnings<'a, const N: usize> {
    kinds: &'a [Kind],
    envs: &'a [[CheckedVariables; N]],
    warnings: Vec<ExpressionWarning>,
}

impl<'a, const N: usize> Warnings<'a, N> {
    fn new(kinds: &'a [Kind], envs: &'a [[CheckedVariables; N]]) -> Self {
        Self {
            kinds,
            envs,
            warnings: Vec::new(),
        }
    }

    /// Checks `src` in flavour `flavour` of the kinds `which` selects.
    fn expression(
        &mut self,
        field_ref: String,
        src: &str,
        flavour: usize,
        which: impl Fn(&Kind) -> bool,
    ) {
        let results = self
            .kinds
            .iter()
            .zip(self.envs)
            .filter(|(k, _)| which(k))
            .map(|(k, envs)| (&k.gvk, envs[flavour].env().check(src).err()));
        self.push(field_ref, results);
    }

    /// The variables' own issues, as checked in flavour `flavour` of every kind.
    fn variables(&mut self, flavour: usize) {
        let count = self.envs.first().map_or(0, |e| e[flavour].iter().count());
        for i in 0..count {
            let results = self.kinds.iter().zip(self.envs).map(|(k, envs)| {
                let issue = envs[flavour]
                    .iter()
                    .nth(i)
                    .and_then(|(_, r)| r.err().cloned());
                (&k.gvk, issue)
            });
            self.push(format!("spec.variables[{i}].expression"), results);
        }
    }

    fn push<'k>(
        &mut self,
        field_ref: String,
        results: impl Iterator<Item = (&'k Gvk, Option<CompileError>)>,
    ) {
        let parts: Vec<String> = results
            .filter_map(|(gvk, e)| e.map(|e| format!("{gvk}: {e}\n")))
            .collect();
        if !parts.is_empty() {
            self.warnings.push(ExpressionWarning {
                field_ref,
                warning: parts.join("\n"),
            });
        }
    }
}

#[cfg(test)]
mod tests;
