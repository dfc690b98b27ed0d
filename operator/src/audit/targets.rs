//! What one scan covers: every binding of a bound ValidatingAdmissionPolicy (unless the binding
//! opts out) as a unit evaluated alone (holding only what it shares with the published set and
//! with its policy's other units), the served resources whose objects a CREATE-matching
//! rule of those policies could select (never the reports, Events or Leases; Secrets only when
//! asked), and the bindings not audited that still carry a `status.audit`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use celgate_crds::ValidatingAdmissionPolicy;
use celgate_engine::model::ValidatingBindingSpec;
use celgate_engine::{BoundPolicy, PolicySet, ValidatingPolicy};
use celgate_kinds::served::ServedResources;
use celgate_snapshot::Snapshot;
use celgate_snapshot::audit::{StoredAs, audited};
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::controllers::stored_binding::{BindingStore, StoredBinding};

pub use crate::controllers::stored_binding::SCAN_ANNOTATION;
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
    /// The policy's annotations its report results carry (one for all the policy's units).
    pub annotations: Arc<ResultAnnotations>,
    /// The resources its policy's rules may select with a CREATE (one list for all the
    /// policy's units).
    pub resources: Arc<[StoredAs]>,
    /// The policy, as published.
    pub compiled: Arc<ValidatingPolicy>,
    /// The binding, as published.
    pub spec: Arc<ValidatingBindingSpec>,
}

/// A policy's annotations that the report results of its units carry.
#[derive(Debug, Default)]
pub struct ResultAnnotations {
    /// The severity annotation, if set.
    pub severity: Option<String>,
    /// The category annotation, if set.
    pub category: Option<String>,
}

impl Unit {
    /// The binding's validation actions, comma-separated.
    pub fn actions(&self) -> String {
        (self.spec.validation_actions.iter())
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The policy with only this binding (and the policy's autogen variants under it): decided
    /// against the current snapshot's namespaces and params by the webhook's own dispatch.
    /// Built for each use, not kept: a set of its own for each of 20,000 bindings held ~800
    /// bytes each (`make bench-footprint`).
    pub fn set(&self) -> PolicySet {
        let alone = BoundPolicy {
            policy: self.compiled.clone(),
            bindings: vec![self.spec.clone()].into(),
        };
        PolicySet::new(vec![alone], Vec::new())
    }
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
pub fn opted_out(binding: &StoredBinding<ValidatingAdmissionPolicy>) -> bool {
    binding
        .annotation(SCAN_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("false"))
}

/// The units and resources of the snapshot's bound validating policies, with the policies'
/// annotations from `policies` and the opt-outs of `bindings`; Secrets only with `secrets`.
pub fn plan(
    snapshot: &Snapshot,
    policies: &Store<ValidatingAdmissionPolicy>,
    bindings: &BindingStore<ValidatingAdmissionPolicy>,
    served: &ServedResources,
    secrets: bool,
) -> Targets {
    let mut units = Vec::new();
    let mut all = BTreeSet::new();
    // A policy's autogen variants are bound after it in the set: its unit's set holds them
    // again, and its resources cover their controllers, so each binding stays one unit.
    let policies_themselves =
        (snapshot.policies.validating().iter()).filter(|b| b.policy.spec.pod_controller.is_none());
    for bound in policies_themselves {
        let stored = policies.get(&ObjectRef::new(&bound.policy.name));
        let annotation = |key: &str| {
            stored
                .as_ref()
                .and_then(|p| p.annotations().get(key).cloned())
        };
        let annotations = Arc::new(ResultAnnotations {
            severity: annotation(SEVERITY_ANNOTATION),
            category: annotation(CATEGORY_ANNOTATION),
        });
        let resources: Arc<[StoredAs]> = resources_of(bound, served)
            .into_iter()
            .filter(|r| audited(&r.group, &r.resource, secrets))
            .collect();
        for binding in bound.bindings.iter() {
            let opted = bindings.get(&binding.name).is_some_and(|b| opted_out(&b));
            if opted || resources.is_empty() {
                continue;
            }
            all.extend(resources.iter().cloned());
            units.push(Arc::new(Unit {
                policy: bound.policy.name.clone(),
                binding: binding.name.clone(),
                annotations: annotations.clone(),
                resources: resources.clone(),
                compiled: bound.policy.clone(),
                spec: binding.clone(),
            }));
        }
    }
    // A set: every binding audited carries a `status.audit`, and looking each up among the
    // units was 10^10 comparisons at 100,000.
    let audited: HashSet<&str> = units.iter().map(|u| &*u.binding).collect();
    let stale_status = bindings
        .state()
        .iter()
        .filter(|b| b.audited && !audited.contains(b.name()))
        .map(|b| b.name().to_string())
        .collect();
    Targets {
        units,
        resources: all.into_iter().collect(),
        stale_status,
        since: HashMap::new(),
    }
}

/// The served resources a CREATE rule of the policy may select.
/// With its autogen variants', the Pod controllers.
fn resources_of(bound: &BoundPolicy, served: &ServedResources) -> Vec<StoredAs> {
    let variants = bound
        .policy
        .autogen
        .iter()
        .map(|v| &v.spec.match_constraints);
    let constraints = std::iter::once(&bound.policy.spec.match_constraints).chain(variants);
    constraints
        .flatten()
        .flat_map(|c| served.created_by(c))
        .map(|r| StoredAs {
            group: r.group.clone(),
            version: r.version.clone(),
            resource: r.resource.clone(),
            kind: r.kind.kind.clone(),
            namespaced: r.namespaced,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use celgate_engine::compile_validating;
    use celgate_engine::model::{MatchResources, ResourceRule, ValidatingPolicySpec};
    use celgate_kinds::builtin::BuiltinDiscovery;

    use super::*;
    use crate::controllers::stored_binding;

    /// A Pod policy bound as the audit plans it, with this autogen annotation.
    fn pod_policy(autogen: Option<&str>) -> BoundPolicy {
        let spec = ValidatingPolicySpec {
            name: "p".into(),
            match_constraints: Some(MatchResources {
                resource_rules: vec![ResourceRule {
                    operations: vec!["CREATE".into()],
                    api_groups: vec!["".into()],
                    api_versions: vec!["v1".into()],
                    resources: vec!["pods".into()],
                    scope: "*".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            autogen: autogen.map(String::from),
            ..Default::default()
        };
        BoundPolicy {
            policy: Arc::new(compile_validating(spec)),
            bindings: Arc::from([]),
        }
    }

    #[test]
    fn units_share_what_is_published_and_bindings_opted_out_are_stale() {
        use crate::controllers::policy_set::{PolicyCache, Stored, compile};
        use crate::fixtures;
        use kube::runtime::reflector;
        use kube::runtime::watcher::Event;

        let policy = fixtures::policy("p", 1, "true", None);
        let mut cache = PolicyCache::default();
        cache.insert(&policy, compile(&policy));
        let (policies, mut policy_writer) = reflector::store();
        policy_writer.apply_watcher_event(&Event::Apply(policy.clone()));
        let (bindings, mut binding_writer) = stored_binding::store();
        for name in ["b1", "b2", "opted-out"] {
            let mut binding = fixtures::binding_json(name, "p");
            // Each audited before (by an earlier leader): the one opted out since is stale.
            binding["status"] = serde_json::json!({"audit": {"scanned": 1, "violations": 0}});
            if name == "opted-out" {
                binding["metadata"]["annotations"] = serde_json::json!({SCAN_ANNOTATION: "false"});
            }
            let binding: celgate_crds::ValidatingAdmissionPolicyBinding =
                serde_json::from_value(binding).unwrap();
            binding_writer.apply_watcher_event(&Event::Apply(binding));
        }
        let set = cache.build(
            Stored {
                policies: policies.state(),
                bindings: bindings.clone(),
            },
            Stored {
                policies: Vec::new(),
                bindings: BindingStore::default(),
            },
        );
        let snapshot = Snapshot {
            policies: Arc::new(set),
            ..Snapshot::default()
        };
        let served = ServedResources::from_discovery(&BuiltinDiscovery::load().unwrap().discovery);

        let plan = plan(&snapshot, &policies, &bindings, &served, false);
        let published = &snapshot.policies.validating()[0];
        assert_eq!(plan.units.len(), 2);
        assert_eq!(plan.stale_status, ["opted-out"]);
        for (unit, binding) in plan.units.iter().zip(published.bindings.iter()) {
            assert!(Arc::ptr_eq(&unit.compiled, &published.policy));
            assert!(Arc::ptr_eq(&unit.spec, binding));
            let set = unit.set();
            assert_eq!(set.validating().len(), 1);
            assert!(Arc::ptr_eq(&set.validating()[0].bindings[0], binding));
        }
        assert!(!plan.units[0].resources.is_empty());
        assert!(Arc::ptr_eq(
            &plan.units[0].resources,
            &plan.units[1].resources
        ));
    }

    #[test]
    fn a_pod_policy_with_autogen_audits_its_controllers_too() {
        let discovery = BuiltinDiscovery::load().unwrap();
        let served = ServedResources::from_discovery(&discovery.discovery);
        let listed = |bound: &BoundPolicy| -> Vec<String> {
            let resources = resources_of(bound, &served).into_iter();
            resources
                .map(|r| format!("{}/{}", r.group, r.resource))
                .collect()
        };
        assert_eq!(listed(&pod_policy(None)), ["/pods"]);
        assert_eq!(
            listed(&pod_policy(Some("Deployment, CronJob"))),
            ["/pods", "apps/deployments", "batch/cronjobs"]
        );
    }
}
