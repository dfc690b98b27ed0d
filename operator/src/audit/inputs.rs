//! Everything a change of which starts a new scan: the bound validating policies (by compiled
//! policy and binding spec), the params each binding reads, the namespaces, the served
//! resources and the audit's annotations. A write of a param no binding reads (any ConfigMap,
//! when ConfigMap is a param kind) changes nothing here.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use celgate_engine::PolicySet;
use celgate_engine::model::{LabelSelector, ParamKind, ValidatingBindingSpec};
use celgate_snapshot::audit::StoredAs;
use celgate_snapshot::{ParamKindEntry, ParamViews, Snapshot};
use kube::ResourceExt;
use serde_json::Value;

use super::findings::UnitKey;
use super::targets::{Targets, Unit};
use super::{Sources, key, targets};

/// The inputs of a scan, compared to tell whether a new one starts. The bound validating
/// policies are compared by compiled policy and binding spec, not by the published set: every
/// binding event (a status write, the audit's own among them) publishes a new set. The specs
/// are the published set's own (a binding is converted once per generation), not copies: a
/// spec unchanged is the same allocation, compared by address before by value, and holding
/// copies cost ~950 bytes per binding, built again every [`super::POLL`].
#[derive(PartialEq)]
pub struct Inputs {
    policies: Vec<(usize, Arc<[Arc<ValidatingBindingSpec>]>)>,
    /// Per binding, in the order of `policies`: a hash of the params it may read.
    params: Vec<u64>,
    namespaces: usize,
    discovery: u64,
    annotations: Vec<String>,
}

impl Inputs {
    /// The inputs now.
    pub fn now(snapshot: &Snapshot, sources: &Sources) -> Self {
        let mut annotations: Vec<String> = sources
            .stores
            .bindings
            .state()
            .iter()
            .filter(|b| targets::opted_out(b))
            .map(|b| format!("binding {}", b.name()))
            .chain(sources.stores.policies.state().iter().flat_map(|p| {
                [targets::SEVERITY_ANNOTATION, targets::CATEGORY_ANNOTATION]
                    .into_iter()
                    .filter_map(|key| {
                        p.annotations()
                            .get(key)
                            .map(|v| format!("policy {} {key}={v}", p.name_any()))
                    })
                    .collect::<Vec<_>>()
            }))
            .collect();
        annotations.sort_unstable();
        let validating = snapshot.policies.validating();
        Self {
            policies: validating
                .iter()
                .map(|b| (Arc::as_ptr(&b.policy) as usize, b.bindings.clone()))
                .collect(),
            params: validating
                .iter()
                .flat_map(|b| {
                    let kind = b.policy.spec.param_kind.as_ref();
                    b.bindings
                        .iter()
                        .map(move |binding| params_read(binding, kind, &snapshot.params))
                })
                .collect(),
            namespaces: Arc::as_ptr(&snapshot.namespaces) as usize,
            discovery: *sources.discovery.revisions().borrow(),
            annotations,
        }
    }
}

/// What deciding one unit reads: its compiled policy, its binding's spec (the published one,
/// as in [`Inputs`]), the params it may read, and the namespaces when it reads them. Slices,
/// not `Vec`s: collected from iterators of unknown length, a `Vec` of one got room for four.
#[derive(Debug, PartialEq)]
pub struct UnitInputs {
    unit: UnitKey,
    policy: usize,
    binding: Box<[Arc<ValidatingBindingSpec>]>,
    params: Box<[u64]>,
    namespaces: Option<usize>,
}

/// For each resource of `plan`, what deciding its objects reads: the inputs of each unit that
/// may select it. A resource whose inputs are unchanged after a change elsewhere is not
/// scanned again: what it found still holds.
pub fn resource_inputs(
    plan: &Targets,
    snapshot: &Snapshot,
) -> HashMap<StoredAs, Box<[Arc<UnitInputs>]>> {
    let namespaces = Arc::as_ptr(&snapshot.namespaces) as usize;
    let units: Vec<(&Arc<Unit>, Arc<UnitInputs>)> = (plan.units.iter())
        .map(|unit| {
            let set = unit.set();
            let bound = set.validating();
            let inputs = UnitInputs {
                unit: key(unit),
                policy: bound.first().map_or(0, |b| Arc::as_ptr(&b.policy) as usize),
                binding: (bound.iter())
                    .flat_map(|b| b.bindings.iter().cloned())
                    .collect(),
                params: (bound.iter())
                    .flat_map(|b| {
                        let kind = b.policy.spec.param_kind.as_ref();
                        (b.bindings.iter())
                            .map(move |binding| params_read(binding, kind, &snapshot.params))
                    })
                    .collect(),
                namespaces: reads_namespaces(&set).then_some(namespaces),
            };
            (unit, Arc::new(inputs))
        })
        .collect();
    (plan.resources.iter())
        .map(|resource| {
            let reading = (units.iter())
                .filter(|(u, _)| u.resources.contains(resource))
                .map(|(_, inputs)| inputs.clone())
                .collect();
            (resource.clone(), reading)
        })
        .collect()
}

/// Whether deciding a unit (its `set`) reads the namespaces: a namespaceSelector in its
/// policy's or its binding's match, or `namespaceObject` in one of its policy's expressions (a
/// textual test: a false positive only costs a rescan).
fn reads_namespaces(set: &PolicySet) -> bool {
    let selects = |selector: &LabelSelector| {
        !selector.match_labels.is_empty() || !selector.match_expressions.is_empty()
    };
    set.validating().iter().any(|bound| {
        let spec = &bound.policy.spec;
        let expressions = (spec.validations.iter())
            .flat_map(|v| [Some(&v.expression), v.message_expression.as_ref()])
            .flatten()
            .chain(spec.audit_annotations.iter().map(|a| &a.value_expression))
            .chain(spec.match_conditions.iter().map(|c| &c.expression))
            .chain(spec.variables.iter().map(|v| &v.expression));
        (spec.match_constraints.iter())
            .chain(
                bound
                    .bindings
                    .iter()
                    .filter_map(|b| b.match_resources.as_ref()),
            )
            .any(|m| selects(&m.namespace_selector))
            || expressions
                .into_iter()
                .any(|e| e.contains(NAMESPACE_OBJECT))
    })
}

/// The CEL variable holding the request's namespace.
const NAMESPACE_OBJECT: &str = "namespaceObject";

/// A hash of the params `binding` may read (each by namespace, name and resourceVersion) and
/// of how their kind's watch stands: those its `paramRef` names, in the namespace it names (in
/// every namespace when it names none, since each request's namespace is then used).
pub fn params_read(
    binding: &ValidatingBindingSpec,
    kind: Option<&ParamKind>,
    params: &ParamViews,
) -> u64 {
    let mut hasher = DefaultHasher::new();
    let (Some(kind), Some(param_ref)) = (kind, &binding.param_ref) else {
        return hasher.finish();
    };
    let objects = match params.entry(&kind.api_version, &kind.kind) {
        None => {
            0u8.hash(&mut hasher);
            return hasher.finish();
        }
        Some(ParamKindEntry::Syncing) => {
            1u8.hash(&mut hasher);
            return hasher.finish();
        }
        Some(ParamKindEntry::NotServed) => {
            2u8.hash(&mut hasher);
            return hasher.finish();
        }
        Some(ParamKindEntry::Forbidden(why)) => {
            (3u8, &**why).hash(&mut hasher);
            return hasher.finish();
        }
        Some(ParamKindEntry::TooLarge(why)) => {
            (5u8, &**why).hash(&mut hasher);
            return hasher.finish();
        }
        Some(ParamKindEntry::Ready(objects)) => objects,
    };
    4u8.hash(&mut hasher);
    let mut read = |namespace: &str, name: &str, object: &Value| {
        let version = object
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str);
        (namespace, name, version).hash(&mut hasher);
    };
    let namespace = if objects.namespaced {
        param_ref.namespace.as_deref()
    } else {
        Some("")
    };
    match (param_ref.name.as_deref(), namespace) {
        (Some(name), Some(namespace)) => {
            if let Some(object) = objects.get(namespace, name) {
                read(namespace, name, object);
            }
        }
        (Some(name), None) => {
            for (namespace, _, object) in objects.iter().filter(|(_, n, _)| *n == name) {
                read(namespace, name, object);
            }
        }
        (None, Some(namespace)) => {
            for (name, object) in objects.in_namespace(namespace) {
                read(namespace, name, object);
            }
        }
        (None, None) => {
            for (namespace, name, object) in objects.iter() {
                read(namespace, name, object);
            }
        }
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use celgate_engine::ParamObjects;
    use celgate_engine::model::ParamRef;
    use serde_json::json;

    use super::*;

    fn config_map(namespace: &str, name: &str, version: &str) -> Arc<Value> {
        Arc::new(
            json!({"metadata": {"namespace": namespace, "name": name, "resourceVersion": version}}),
        )
    }

    fn views(objects: &[(&str, &str, &str)]) -> ParamViews {
        let mut all = ParamObjects::new(true);
        for (namespace, name, version) in objects {
            all.insert(namespace, name, config_map(namespace, name, version));
        }
        let mut views = ParamViews::default();
        views.set(
            &("v1".to_string(), "ConfigMap".to_string()),
            Some(ParamKindEntry::Ready(Arc::new(all))),
        );
        views
    }

    fn binding(name: Option<&str>, namespace: Option<&str>) -> ValidatingBindingSpec {
        ValidatingBindingSpec {
            param_ref: Some(Box::new(ParamRef {
                name: name.map(String::from),
                namespace: namespace.map(String::from),
                ..ParamRef::default()
            })),
            ..ValidatingBindingSpec::default()
        }
    }

    /// A unit of policy `name` (expression `expression`, ConfigMap params when `params`) whose
    /// binding is `binding`, selecting `resource`.
    fn unit(
        name: &str,
        expression: &str,
        params: bool,
        binding: ValidatingBindingSpec,
        resource: &str,
    ) -> Arc<Unit> {
        let kind = params.then_some(("v1", "ConfigMap"));
        let policy = crate::controllers::policy_set::compile(&crate::fixtures::policy(
            name, 1, expression, kind,
        ));
        Arc::new(Unit {
            policy: Arc::from(name),
            binding: Arc::from(name),
            annotations: Arc::default(),
            resources: Arc::new([StoredAs {
                resource: resource.into(),
                ..crate::fixtures::config_maps()
            }]),
            compiled: policy,
            spec: Arc::new(ValidatingBindingSpec {
                name: name.into(),
                policy_name: name.into(),
                ..binding
            }),
        })
    }

    /// Four bindings, each alone on its resource: one reading a param (on `limited`), one
    /// selecting namespaces (`selected`), one reading `namespaceObject` (`read`) and one
    /// reading neither (`plain`); and a snapshot with the param and a ConfigMap no binding reads.
    fn four_bindings() -> (Targets, Snapshot) {
        let by_namespace = ValidatingBindingSpec {
            match_resources: Some(celgate_engine::model::MatchResources {
                namespace_selector: LabelSelector {
                    match_labels: [("team".to_string(), "a".to_string())].into(),
                    ..LabelSelector::default()
                },
                ..Default::default()
            }),
            ..ValidatingBindingSpec::default()
        };
        let units = vec![
            unit(
                "params",
                "true",
                true,
                binding(Some("limits"), Some("params")),
                "limited",
            ),
            unit("selector", "true", false, by_namespace, "selected"),
            unit(
                "reader",
                "namespaceObject.metadata.name != 'x'",
                false,
                ValidatingBindingSpec::default(),
                "read",
            ),
            unit(
                "plain",
                "object.metadata.name != 'x'",
                false,
                ValidatingBindingSpec::default(),
                "plain",
            ),
        ];
        let plan = Targets {
            resources: units.iter().flat_map(|u| u.resources.to_vec()).collect(),
            units,
            ..Targets::default()
        };
        let snapshot = Snapshot {
            params: Arc::new(views(&[("params", "limits", "1"), ("team", "other", "1")])),
            ..Snapshot::default()
        };
        (plan, snapshot)
    }

    /// `snapshot` with the param the first binding reads changed.
    fn param_changed(snapshot: &Snapshot) -> Snapshot {
        Snapshot {
            params: Arc::new(views(&[("params", "limits", "2"), ("team", "other", "1")])),
            ..snapshot.clone()
        }
    }

    #[test]
    fn a_change_rescans_only_the_resources_of_the_bindings_that_read_it() {
        let (plan, snapshot) = four_bindings();
        let changed = |after: &Snapshot| {
            let (before, after) = (
                resource_inputs(&plan, &snapshot),
                resource_inputs(&plan, after),
            );
            let mut changed: Vec<String> = (plan.resources.iter())
                .filter(|r| before[*r] != after[*r])
                .map(|r| r.resource.clone())
                .collect();
            changed.sort();
            changed
        };
        // A param no binding reads changes nothing; the param one reads, only its resources.
        let other = Snapshot {
            params: Arc::new(views(&[("params", "limits", "1"), ("team", "other", "2")])),
            ..snapshot.clone()
        };
        assert_eq!(changed(&other), Vec::<String>::new());
        assert_eq!(changed(&param_changed(&snapshot)), ["limited"]);
        // A namespace change: the resources of the bindings that select or read namespaces.
        let namespaces = Snapshot {
            namespaces: Arc::default(),
            ..snapshot.clone()
        };
        assert_eq!(changed(&namespaces), ["read", "selected"]);
    }

    #[test]
    fn the_inputs_hold_the_published_binding_specs_not_copies() {
        let (plan, snapshot) = four_bindings();
        let reads = resource_inputs(&plan, &snapshot);
        for unit in &plan.units {
            let published = &unit.spec;
            let resource = &unit.resources[0];
            let held = &reads[resource][0].binding[0];
            assert!(Arc::ptr_eq(held, published), "unit {}", unit.binding);
        }
    }

    #[tokio::test]
    async fn after_a_change_only_the_resources_reading_it_are_followed_anew() {
        let (mut plan, snapshot) = four_bindings();
        let mut followed = super::super::Followed::default();
        let at = |s: u64| std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s);
        let names = |r: &[(StoredAs, super::super::Reads)]| -> Vec<String> {
            let mut names: Vec<String> = r.iter().map(|(r, _)| r.resource.clone()).collect();
            names.sort();
            names
        };
        let first = {
            let reads = resource_inputs(&plan, &snapshot);
            followed.update(&mut plan, reads, at(10))
        };
        assert_eq!(names(&first), ["limited", "plain", "read", "selected"]);
        let mut tasks = HashMap::new();
        for (resource, reads) in first {
            let task = tokio::spawn(std::future::pending::<()>());
            followed.started(resource.clone(), reads, at(10), task.abort_handle());
            tasks.insert(resource.resource, task);
        }

        // The param one binding reads changes: only its resource is listed and watched anew;
        // the others' follows go on, and the plan's scan counts their scans since 10 s.
        let again = {
            let reads = resource_inputs(&plan, &param_changed(&snapshot));
            followed.update(&mut plan, reads, at(20))
        };
        assert_eq!(names(&again), ["limited"]);
        let since: HashMap<String, std::time::SystemTime> = (plan.since.iter())
            .map(|(r, t)| (r.resource.clone(), *t))
            .collect();
        assert_eq!(since["limited"], at(20));
        assert_eq!(since["plain"], at(10));
        let limited = tasks.remove("limited").unwrap();
        assert!(
            limited.await.unwrap_err().is_cancelled(),
            "the old follow stops"
        );
        tokio::task::yield_now().await;
        assert!(tasks.values().all(|t| !t.is_finished()), "the others go on");

        // After a full stop (the interval), every resource is followed anew.
        followed.stop_all();
        let all = {
            let reads = resource_inputs(&plan, &snapshot);
            followed.update(&mut plan, reads, at(30))
        };
        assert_eq!(names(&all), ["limited", "plain", "read", "selected"]);
    }

    #[test]
    fn only_a_change_of_a_param_the_binding_may_read_changes_its_inputs() {
        let kind = ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        };
        let before = views(&[("params", "limits", "1"), ("team", "other", "1")]);
        let other_changed = views(&[("params", "limits", "1"), ("team", "other", "2")]);
        let param_changed = views(&[("params", "limits", "2"), ("team", "other", "1")]);
        let named = binding(Some("limits"), Some("params"));
        let read = |b: &ValidatingBindingSpec, v: &ParamViews| params_read(b, Some(&kind), v);
        assert_eq!(read(&named, &before), read(&named, &other_changed));
        assert_ne!(read(&named, &before), read(&named, &param_changed));
        let in_team = binding(None, Some("team"));
        assert_ne!(read(&in_team, &before), read(&in_team, &other_changed));
        assert_eq!(read(&in_team, &before), read(&in_team, &param_changed));
        let anywhere = binding(Some("other"), None);
        assert_ne!(read(&anywhere, &before), read(&anywhere, &other_changed));
        assert_ne!(
            read(&named, &before),
            read(&named, &ParamViews::default()),
            "a param kind not watched yet is a change when it is"
        );
    }
}
