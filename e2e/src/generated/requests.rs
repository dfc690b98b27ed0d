//! What a generated case acts on: the resource its policies match (a built-in kind, a
//! subresource, or the generated CRD), the objects that exist before it, and the requests it
//! sends (creates, updates, deletes, subresource writes; as other users), each a dry run.

use fastrand::Rng;
use serde_json::{Value, json};

use super::crd::Crd;
use super::expressions::{Scope, Ty};
use super::{Request, User};

/// The resource a case's policies match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `configmaps`.
    ConfigMap,
    /// `deployments` (apps/v1).
    Deployment,
    /// `deployments/scale` (an autoscaling/v1 Scale).
    DeploymentScale,
    /// `gadgets` of the generated CRD.
    Gadget,
    /// `gadgets/status`.
    GadgetStatus,
    /// `gadgets/scale`.
    GadgetScale,
}

impl Target {
    /// Any target.
    pub fn any(rng: &mut Rng) -> Self {
        use Target::*;
        [
            ConfigMap,
            ConfigMap,
            Deployment,
            DeploymentScale,
            Gadget,
            Gadget,
            GadgetStatus,
            GadgetScale,
        ][rng.usize(..8)]
    }

    /// apiGroup, apiVersion and resource (with its subresource) of a matching rule.
    pub fn rule(self, crd: &Crd) -> (String, &'static str, &'static str) {
        match self {
            Target::ConfigMap => (String::new(), "v1", "configmaps"),
            Target::Deployment => ("apps".into(), "v1", "deployments"),
            Target::DeploymentScale => ("apps".into(), "v1", "deployments/scale"),
            Target::Gadget => (crd.group.clone(), "v1", "gadgets"),
            Target::GadgetStatus => (crd.group.clone(), "v1", "gadgets/status"),
            Target::GadgetScale => (crd.group.clone(), "v1", "gadgets/scale"),
        }
    }

    /// The collection of the parent resource in namespace `ns` (a placeholder).
    fn collection(self, crd: &Crd, ns: &str) -> String {
        match self {
            Target::ConfigMap => format!("/api/v1/namespaces/{ns}/configmaps"),
            Target::Deployment | Target::DeploymentScale => {
                format!("/apis/apps/v1/namespaces/{ns}/deployments")
            }
            _ => format!("/apis/{}/v1/namespaces/{ns}/gadgets", crd.group),
        }
    }

    /// The subresource, if the target is one.
    fn subresource(self) -> Option<&'static str> {
        match self {
            Target::DeploymentScale | Target::GadgetScale => Some("scale"),
            Target::GadgetStatus => Some("status"),
            _ => None,
        }
    }

    /// Adds what a policy may read of the object (`object`, or `oldObject`) to `scope`.
    pub fn read_object(self, crd: &Crd, scope: &mut Scope, var: &str) {
        scope.add(Ty::Str, format!("{var}.metadata.name"));
        scope.add(Ty::StrMap, format!("{var}.metadata.labels"));
        scope.add(Ty::Bool, format!("has({var}.metadata.labels)"));
        scope.add(Ty::StrMap, format!("{var}.metadata.?labels.orValue({{}})"));
        match self {
            Target::ConfigMap => {
                scope.add(Ty::StrMap, format!("{var}.data"));
                scope.add(Ty::Bool, format!("has({var}.data)"));
                scope.add(Ty::Str, format!("{var}.data.k"));
            }
            Target::Deployment => {
                scope.add(Ty::Int, format!("{var}.spec.replicas"));
                scope.add(
                    Ty::StrList,
                    format!("{var}.spec.template.spec.containers.map(c, c.image)"),
                );
            }
            Target::DeploymentScale | Target::GadgetScale => {
                scope.add(Ty::Int, format!("{var}.spec.replicas"));
            }
            Target::Gadget | Target::GadgetStatus => {
                for (ty, field) in crd.typed_fields() {
                    scope.add(ty, format!("{var}.spec.{field}"));
                    scope.add(Ty::Bool, format!("has({var}.spec.{field})"));
                }
            }
        }
    }

    /// A whole object of the parent kind named `name`, labelled at random.
    pub fn object(self, rng: &mut Rng, crd: &Crd, name: &str) -> Value {
        let mut labels = serde_json::Map::new();
        for (k, v) in [("app", "web"), ("tier", "a"), ("env", "prod")] {
            if rng.bool() {
                labels.insert(k.into(), json!(v));
            }
        }
        let metadata = json!({"name": name, "labels": labels});
        match self {
            Target::ConfigMap => {
                let data = [
                    json!({"k": "v"}),
                    json!({}),
                    json!({"k": "é\n\"x\""}),
                    json!({"k": "9", "other": ""}),
                ][rng.usize(..4)]
                .clone();
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
            }
            Target::Deployment | Target::DeploymentScale => {
                let replicas = [0, 1, 3, 2147483647][rng.usize(..4)];
                let image = ["registry.example/app:1", "app"][rng.usize(..2)];
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
                    "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                            "spec": {"containers": [{"name": "c", "image": image}]}}}})
            }
            _ => json!({"apiVersion": format!("{}/v1", crd.group), "kind": "Gadget",
                "metadata": metadata, "spec": crd.sample_spec(rng)}),
        }
    }

    /// The objects that exist before the requests: `existing` in the case's first namespace.
    pub fn setup(self, rng: &mut Rng, crd: &Crd) -> Vec<Value> {
        let mut object = self.object(rng, crd, "existing");
        object["metadata"]["namespace"] = json!("{{ns}}");
        if object["kind"] == "Gadget" {
            // Within every limit of the schema, so that it can be created.
            object["spec"] = json!({"size": 3});
        }
        vec![object]
    }

    /// `count` requests of this target: writes of the parent kind and of the subresource.
    pub fn requests(self, rng: &mut Rng, crd: &Crd, count: usize) -> Vec<Request> {
        (0..count)
            .map(|i| {
                let ns = if rng.u8(..5) == 0 {
                    "{{ns2}}"
                } else {
                    "{{ns}}"
                };
                let collection = self.collection(crd, ns);
                let mut request = match (self.subresource(), rng.u8(..6)) {
                    (Some("scale"), 0..=3) => Request::new(
                        "update scale",
                        "PATCH",
                        format!("{}/existing/scale", self.collection(crd, "{{ns}}")),
                        Some(json!({"spec": {"replicas": ([0, 2, 5, 1001][rng.usize(..4)])}})),
                    ),
                    (Some("status"), 0..=3) => Request::new(
                        "update status",
                        "PATCH",
                        format!("{}/existing/status", self.collection(crd, "{{ns}}")),
                        Some(json!({"status": {"size": ([0, 4][rng.usize(..2)])},
                            "spec": crd.sample_spec(rng)})),
                    ),
                    (_, 0..=2) => Request::new(
                        "create",
                        "POST",
                        collection,
                        Some(self.object(rng, crd, &format!("new-{i}"))),
                    ),
                    (_, 3 | 4) => {
                        let patch = match self {
                            Target::ConfigMap => {
                                json!({"data": {"k": (["changed", "", "9"][rng.usize(..3)])}})
                            }
                            Target::Deployment | Target::DeploymentScale => {
                                json!({"spec": {"replicas": ([2, 0, 7][rng.usize(..3)])}})
                            }
                            _ => json!({"spec": crd.sample_spec(rng)}),
                        };
                        let labels = json!({"metadata": {"labels": {"changed": "yes"}}});
                        let body = if rng.bool() { patch } else { labels };
                        Request::new(
                            "update",
                            "PATCH",
                            format!("{}/existing", self.collection(crd, "{{ns}}")),
                            Some(body),
                        )
                    }
                    _ => Request::new(
                        "delete",
                        "DELETE",
                        format!("{}/existing", self.collection(crd, "{{ns}}")),
                        None,
                    ),
                };
                if rng.u8(..3) == 0 {
                    request.user = Some(User {
                        name: ["alice", "system:serviceaccount:team:bot", "bob@example.com"]
                            [rng.usize(..3)]
                        .into(),
                        groups: [
                            vec!["dev".to_string()],
                            vec![],
                            vec!["ops".into(), "dev".into()],
                        ][rng.usize(..3)]
                        .clone(),
                    });
                }
                request
            })
            .collect()
    }
}
