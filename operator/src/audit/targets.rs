//! What one scan covers: every binding of a bound ValidatingAdmissionPolicy (unless the binding
//! opts out) as a unit evaluated alone, and the served resources whose objects a CREATE-matching
//! rule of those policies could select.

use std::collections::BTreeSet;
use std::sync::Arc;

use celgate_crds::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use celgate_engine::model::{MatchPolicy, ResourceRule};
use celgate_engine::{BoundPolicy, PolicySet};
use celgate_kinds::served::ServedResources;
use celgate_snapshot::Snapshot;
use celgate_snapshot::audit::StoredAs;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

/// A binding annotation: `"false"` leaves the binding out of the audit.
pub const SCAN_ANNOTATION: &str = "audit.celgate.io/scan";
/// A policy annotation: the `severity` of its report results (`critical`, `high`, `medium`,
/// `low` or `info`).
pub const SEVERITY_ANNOTATION: &str = "audit.celgate.io/severity";
/// A policy annotation: the `category` of its report results.
pub const CATEGORY_ANNOTATION: &str = "audit.celgate.io/category";

/// One binding, evaluated alone against every object it may match.
#[derive(Debug)]
pub struct Unit {
    /// The policy's name.
    pub policy: Arc<str>,
    /// The binding's name.
    pub binding: Arc<str>,
    /// The binding's validation actions, comma-separated.
    pub actions: String,
    /// The policy's severity annotation, if set.
    pub severity: Option<String>,
    /// The policy's category annotation, if set.
    pub category: Option<String>,
    /// The resources its policy's rules may select with a CREATE.
    pub resources: Vec<StoredAs>,
    /// The policy with only this binding: decided against the current snapshot's namespaces
    /// and params by the webhook's own dispatch.
    pub set: Arc<PolicySet>,
}

/// Everything one scan covers.
#[derive(Debug, Default)]
pub struct Targets {
    /// The units, by policy then binding name.
    pub units: Vec<Arc<Unit>>,
    /// The resources any unit may select, each listed once.
    pub resources: Vec<StoredAs>,
}

/// Whether `binding` has opted out of the audit.
pub fn opted_out(binding: &ValidatingAdmissionPolicyBinding) -> bool {
    binding
        .annotations()
        .get(SCAN_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("false"))
}

/// The units and resources of the snapshot's bound validating policies, with the policies'
/// annotations from `policies` and the opt-outs of `bindings`.
pub fn plan(
    snapshot: &Snapshot,
    policies: &Store<ValidatingAdmissionPolicy>,
    bindings: &Store<ValidatingAdmissionPolicyBinding>,
    served: &ServedResources,
) -> Targets {
    let mut units = Vec::new();
    let mut all = BTreeSet::new();
    for bound in snapshot.policies.validating() {
        let stored = policies.get(&ObjectRef::new(&bound.policy.name));
        let annotation = |key: &str| {
            stored
                .as_ref()
                .and_then(|p| p.annotations().get(key).cloned())
        };
        let resources = resources_of(bound, served);
        for binding in &bound.bindings {
            let opted = bindings
                .get(&ObjectRef::new(&binding.name))
                .is_some_and(|b| opted_out(&b));
            if opted || resources.is_empty() {
                continue;
            }
            all.extend(resources.iter().cloned());
            let alone = BoundPolicy {
                policy: bound.policy.clone(),
                bindings: vec![binding.clone()],
            };
            units.push(Arc::new(Unit {
                policy: bound.policy.name.clone(),
                binding: Arc::from(binding.name.as_str()),
                actions: binding
                    .validation_actions
                    .iter()
                    .map(|a| format!("{a:?}"))
                    .collect::<Vec<_>>()
                    .join(","),
                severity: annotation(SEVERITY_ANNOTATION),
                category: annotation(CATEGORY_ANNOTATION),
                resources: resources.clone(),
                set: Arc::new(PolicySet::new(vec![alone], Vec::new())),
            }));
        }
    }
    Targets {
        units,
        resources: all.into_iter().collect(),
    }
}

/// The served resources (no subresources) a CREATE rule of the policy may select: for each
/// group and resource, the first served version the rule names (any version under
/// matchPolicy Equivalent, which matches the others as equivalents), in the API server's
/// order of preference.
fn resources_of(bound: &BoundPolicy, served: &ServedResources) -> Vec<StoredAs> {
    let Some(constraints) = &bound.policy.spec.match_constraints else {
        return Vec::new();
    };
    let equivalent = constraints.match_policy == MatchPolicy::Equivalent;
    let mut out: Vec<StoredAs> = Vec::new();
    for rule in constraints
        .resource_rules
        .iter()
        .filter(|r| creates(r) && r.resource_names.is_empty())
    {
        for r in served.resources() {
            if r.resource.contains('/')
                || !names(&rule.api_groups, &r.group)
                || !(equivalent || names(&rule.api_versions, &r.version))
                || !rule.resources.iter().any(|x| selects(x, &r.resource))
                || !scope(&rule.scope, r.namespaced)
                || out
                    .iter()
                    .any(|o| o.group == r.group && o.resource == r.resource)
            {
                continue;
            }
            out.push(StoredAs {
                group: r.group.clone(),
                version: r.version.clone(),
                resource: r.resource.clone(),
                kind: r.kind.kind.clone(),
                namespaced: r.namespaced,
            });
        }
    }
    out
}

/// Whether the rule's operations include CREATE.
fn creates(rule: &ResourceRule) -> bool {
    rule.operations.iter().any(|o| o == "CREATE" || o == "*")
}

/// Whether `names` holds `name` or `*`.
fn names(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n == "*" || n == name)
}

/// Whether a rule's resource entry selects the resource itself (not only its subresources).
fn selects(entry: &str, resource: &str) -> bool {
    entry == "*" || entry == "*/*" || entry == resource
}

/// Whether a rule's scope admits a resource that is (or is not) namespaced.
fn scope(scope: &str, namespaced: bool) -> bool {
    match scope {
        "Cluster" => !namespaced,
        "Namespaced" => namespaced,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], versions: &[&str], resources: &[&str], ops: &[&str]) -> ResourceRule {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        ResourceRule {
            resource_names: Vec::new(),
            operations: strings(ops),
            api_groups: strings(groups),
            api_versions: strings(versions),
            resources: strings(resources),
            scope: "*".into(),
        }
    }

    #[test]
    fn a_rule_selects_resources_it_names_or_wildcards_for_creates_only() {
        assert!(creates(&rule(
            &[""],
            &["v1"],
            &["pods"],
            &["CREATE", "UPDATE"]
        )));
        assert!(creates(&rule(&[""], &["v1"], &["pods"], &["*"])));
        assert!(!creates(&rule(
            &[""],
            &["v1"],
            &["pods"],
            &["UPDATE", "DELETE"]
        )));
        assert!(selects("*", "pods") && selects("*/*", "pods") && selects("pods", "pods"));
        assert!(!selects("pods/status", "pods") && !selects("pods/*", "pods"));
        assert!(scope("Cluster", false) && !scope("Cluster", true));
        assert!(scope("Namespaced", true) && scope("*", false));
        assert!(names(&["*".into()], "apps") && !names(&["".into()], "apps"));
    }
}
