//! What one scan covers: every binding of a bound ValidatingAdmissionPolicy (unless the binding
//! opts out) as a unit evaluated alone, the served resources whose objects a CREATE-matching
//! rule of those policies could select (never the reports, Events or Leases; Secrets only when
//! asked), and the bindings not audited that still carry a `status.audit`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use celgate_crds::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use celgate_engine::{BoundPolicy, PolicySet};
use celgate_kinds::served::ServedResources;
use celgate_snapshot::Snapshot;
use celgate_snapshot::audit::{StoredAs, audited};
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
    /// Bindings not audited whose `status.audit` is set (by this replica or an earlier
    /// leader): it is removed.
    pub stale_status: Vec<String>,
    /// Since when each resource has been followed (unchanged) for this plan: its scan is
    /// complete once each completed a scan since then (since the plan, for one not here).
    pub since: HashMap<StoredAs, SystemTime>,
}

/// Whether `binding` has opted out of the audit.
pub fn opted_out(binding: &ValidatingAdmissionPolicyBinding) -> bool {
    binding
        .annotations()
        .get(SCAN_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("false"))
}

/// The units and resources of the snapshot's bound validating policies, with the policies'
/// annotations from `policies` and the opt-outs of `bindings`; Secrets only with `secrets`.
pub fn plan(
    snapshot: &Snapshot,
    policies: &Store<ValidatingAdmissionPolicy>,
    bindings: &Store<ValidatingAdmissionPolicyBinding>,
    served: &ServedResources,
    secrets: bool,
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
        let resources: Vec<StoredAs> = resources_of(bound, served)
            .into_iter()
            .filter(|r| audited(&r.group, &r.resource, secrets))
            .collect();
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
    let stale_status = bindings
        .state()
        .iter()
        .filter(|b| b.status.as_ref().is_some_and(|s| s.audit.is_some()))
        .map(|b| b.name_any())
        .filter(|name| !units.iter().any(|u| &*u.binding == name))
        .collect();
    Targets {
        units,
        resources: all.into_iter().collect(),
        stale_status,
        since: HashMap::new(),
    }
}

/// The served resources a CREATE rule of the policy may select.
fn resources_of(bound: &BoundPolicy, served: &ServedResources) -> Vec<StoredAs> {
    let Some(constraints) = &bound.policy.spec.match_constraints else {
        return Vec::new();
    };
    served
        .created_by(constraints)
        .into_iter()
        .map(|r| StoredAs {
            group: r.group.clone(),
            version: r.version.clone(),
            resource: r.resource.clone(),
            kind: r.kind.kind.clone(),
            namespaced: r.namespaced,
        })
        .collect()
}
