//! Everything a change of which starts a new scan: the bound validating policies (by compiled
//! policy and binding spec), the params each binding reads, the namespaces, the served
//! resources and the audit's annotations. A write of a param no binding reads (any ConfigMap,
//! when ConfigMap is a param kind) changes nothing here.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use celgate_engine::model::{ParamKind, ValidatingBindingSpec};
use celgate_snapshot::{ParamKindEntry, ParamViews, Snapshot};
use kube::ResourceExt;
use serde_json::Value;

use super::{Sources, targets};

/// The inputs of a scan, compared to tell whether a new one starts. The bound validating
/// policies are compared by compiled policy and binding spec, not by the published set: every
/// binding event (a status write, the audit's own among them) publishes a new set.
#[derive(PartialEq)]
pub struct Inputs {
    policies: Vec<(usize, Vec<ValidatingBindingSpec>)>,
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
            .map(|b| format!("binding {}", b.name_any()))
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
                .map(|b| {
                    (
                        Arc::as_ptr(&b.policy) as usize,
                        b.bindings
                            .iter()
                            .map(|b| ValidatingBindingSpec::clone(b))
                            .collect(),
                    )
                })
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
            param_ref: Some(ParamRef {
                name: name.map(String::from),
                namespace: namespace.map(String::from),
                ..ParamRef::default()
            }),
            ..ValidatingBindingSpec::default()
        }
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
