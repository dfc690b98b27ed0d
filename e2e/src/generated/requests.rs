//! What a generated case acts on: the resource its policies match (a built-in kind, namespaced
//! or cluster-scoped, a subresource, or one of the generated CRDs), the objects that exist
//! before it, and the requests it sends (creates; updates as JSON merge patch, JSON patch,
//! strategic merge patch, server-side apply or PUT; deletes with and without options,
//! deletecollection; subresource writes; as other users), each a dry run.
//!
//! Cluster-scoped objects are named after the case (`{{ns}}-…`) and labelled
//! `fuzz-case: {{ns}}`, which their bindings select (namespace selectors do not scope them).

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
    /// `namespaces` (cluster-scoped).
    Namespace,
    /// `clusterroles` (rbac.authorization.k8s.io/v1, cluster-scoped).
    ClusterRole,
    /// `pods/ephemeralcontainers`.
    PodEphemeral,
    /// `pods/resize`.
    PodResize,
    /// `gizmos` of the namespaced tree CRD.
    Gizmo,
    /// `widgets` of the cluster-scoped tree CRD.
    Widget,
    /// `widgets/status`.
    WidgetStatus,
}

/// The label every cluster-scoped object of a case carries, with the case's namespace as value.
pub const CASE_LABEL: &str = "fuzz-case";

/// How an update's body is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Body {
    Merge,
    Json,
    Strategic,
    Apply,
    Put,
}

impl Target {
    /// Every target, in the order the first cases of a run take them.
    pub const ALL: [Target; 13] = [
        Target::ConfigMap,
        Target::Deployment,
        Target::DeploymentScale,
        Target::Gadget,
        Target::GadgetStatus,
        Target::GadgetScale,
        Target::Namespace,
        Target::ClusterRole,
        Target::PodEphemeral,
        Target::PodResize,
        Target::Gizmo,
        Target::Widget,
        Target::WidgetStatus,
    ];

    /// Any target.
    pub fn any(rng: &mut Rng) -> Self {
        Target::ALL[rng.usize(..Target::ALL.len())]
    }

    /// Whether its objects are cluster-scoped.
    pub fn cluster_scoped(self) -> bool {
        matches!(
            self,
            Target::Namespace | Target::ClusterRole | Target::Widget | Target::WidgetStatus
        )
    }

    /// Whether its kind is a custom resource (no strategic merge patch, no unconditional PUT).
    fn custom(self) -> bool {
        matches!(
            self,
            Target::Gadget
                | Target::GadgetStatus
                | Target::GadgetScale
                | Target::Gizmo
                | Target::Widget
                | Target::WidgetStatus
        )
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
            Target::Namespace => (String::new(), "v1", "namespaces"),
            Target::ClusterRole => ("rbac.authorization.k8s.io".into(), "v1", "clusterroles"),
            Target::PodEphemeral => (String::new(), "v1", "pods/ephemeralcontainers"),
            Target::PodResize => (String::new(), "v1", "pods/resize"),
            Target::Gizmo => (crd.group.clone(), "v1", "gizmos"),
            Target::Widget => (crd.group.clone(), "v1", "widgets"),
            Target::WidgetStatus => (crd.group.clone(), "v1", "widgets/status"),
        }
    }

    /// The collection of the parent resource in namespace `ns` (a placeholder).
    fn collection(self, crd: &Crd, ns: &str) -> String {
        match self {
            Target::ConfigMap => format!("/api/v1/namespaces/{ns}/configmaps"),
            Target::Deployment | Target::DeploymentScale => {
                format!("/apis/apps/v1/namespaces/{ns}/deployments")
            }
            Target::Gadget | Target::GadgetStatus | Target::GadgetScale => {
                format!("/apis/{}/v1/namespaces/{ns}/gadgets", crd.group)
            }
            Target::Namespace => "/api/v1/namespaces".into(),
            Target::ClusterRole => "/apis/rbac.authorization.k8s.io/v1/clusterroles".into(),
            Target::PodEphemeral | Target::PodResize => format!("/api/v1/namespaces/{ns}/pods"),
            Target::Gizmo => format!("/apis/{}/v1/namespaces/{ns}/gizmos", crd.group),
            Target::Widget | Target::WidgetStatus => format!("/apis/{}/v1/widgets", crd.group),
        }
    }

    /// The subresource, if the target is one.
    fn subresource(self) -> Option<&'static str> {
        match self {
            Target::DeploymentScale | Target::GadgetScale => Some("scale"),
            Target::GadgetStatus | Target::WidgetStatus => Some("status"),
            Target::PodEphemeral => Some("ephemeralcontainers"),
            Target::PodResize => Some("resize"),
            _ => None,
        }
    }

    /// The name of an object of the case: `existing` or `new-<i>` in a namespace, prefixed
    /// with the case's namespace when cluster-scoped.
    fn name(self, base: &str) -> String {
        if self.cluster_scoped() {
            format!("{{{{ns}}}}-{base}")
        } else {
            base.to_string()
        }
    }

    /// The object `existing` of the case.
    fn existing(self, crd: &Crd) -> String {
        format!(
            "{}/{}",
            self.collection(crd, "{{ns}}"),
            self.name("existing")
        )
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
            Target::Gizmo | Target::Widget | Target::WidgetStatus => {
                let tree = crd.tree(self);
                for (ty, field) in tree.typed_fields() {
                    scope.add(ty, format!("{var}.spec.{field}"));
                    scope.add(Ty::Bool, format!("has({var}.spec.{field})"));
                }
            }
            Target::Namespace => {
                scope.add(Ty::StrList, format!("{var}.spec.?finalizers.orValue([])"));
                scope.add(Ty::Str, format!("{var}.status.phase"));
            }
            Target::ClusterRole => {
                scope.add(
                    Ty::StrList,
                    format!("{var}.?rules.orValue([]).map(r, r.verbs.join(','))"),
                );
                scope.add(Ty::Bool, format!("has({var}.aggregationRule)"));
            }
            Target::PodEphemeral | Target::PodResize => {
                scope.add(
                    Ty::StrList,
                    format!("{var}.spec.containers.map(c, c.image)"),
                );
                scope.add(
                    Ty::StrList,
                    format!("{var}.spec.?ephemeralContainers.orValue([]).map(c, c.name)"),
                );
                scope.add(
                    Ty::Str,
                    format!("string({var}.spec.containers[0].resources.requests.cpu)"),
                );
            }
        }
    }

    /// A whole object of the parent kind named `name` (made the case's when cluster-scoped),
    /// labelled at random.
    pub fn object(self, rng: &mut Rng, crd: &Crd, name: &str) -> Value {
        let mut labels = serde_json::Map::new();
        for (k, v) in [("app", "web"), ("tier", "a"), ("env", "prod")] {
            if rng.bool() {
                labels.insert(k.into(), json!(v));
            }
        }
        if self.cluster_scoped() {
            labels.insert(CASE_LABEL.into(), json!("{{ns}}"));
        }
        let metadata = json!({"name": self.name(name), "labels": labels});
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
            Target::Gadget | Target::GadgetStatus | Target::GadgetScale => {
                json!({"apiVersion": format!("{}/v1", crd.group), "kind": "Gadget",
                    "metadata": metadata, "spec": crd.sample_spec(rng)})
            }
            Target::Namespace => {
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": metadata})
            }
            Target::ClusterRole => {
                let mut role = json!({"apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole", "metadata": metadata, "rules": rules(rng)});
                if rng.u8(..5) == 0 {
                    role["aggregationRule"] = json!({"clusterRoleSelectors":
                        [{"matchLabels": {"aggregate-to": "{{ns}}"}}]});
                }
                role
            }
            Target::PodEphemeral | Target::PodResize => {
                let image = ["registry.example/app:1", "app"][rng.usize(..2)];
                let cpu = ["100m", "1"][rng.usize(..2)];
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                    "spec": {"containers": [{"name": "c", "image": image,
                        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"},
                            "limits": {"cpu": cpu, "memory": "64Mi"}}}]}})
            }
            Target::Gizmo | Target::Widget | Target::WidgetStatus => {
                let tree = crd.tree(self);
                json!({"apiVersion": format!("{}/v1", crd.group), "kind": tree.kind,
                    "metadata": metadata, "spec": tree.sample_spec(rng)})
            }
        }
    }

    /// The objects that exist before the requests: `existing` in the case's first namespace
    /// (or of the case, when cluster-scoped).
    pub fn setup(self, rng: &mut Rng, crd: &Crd) -> Vec<Value> {
        let mut object = self.object(rng, crd, "existing");
        if !self.cluster_scoped() {
            object["metadata"]["namespace"] = json!("{{ns}}");
        }
        // Within every limit of the schema, so that it can be created.
        match self {
            Target::Gadget | Target::GadgetStatus | Target::GadgetScale => {
                object["spec"] = json!({"size": 3});
            }
            Target::Gizmo | Target::Widget | Target::WidgetStatus => object["spec"] = json!({}),
            Target::ClusterRole => {
                object["rules"] = json!([{"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": ["get"]}]);
            }
            _ => {}
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
                let mut request = match (self.subresource(), rng.u8(..8)) {
                    (Some(sub), 0..=2) => self.subresource_write(rng, crd, sub),
                    (_, 0..=2) => Request::new(
                        "create",
                        "POST",
                        self.collection(crd, ns),
                        Some(self.object(rng, crd, &format!("new-{i}"))),
                    ),
                    (_, 3..=5) => self.update(rng, crd),
                    _ => self.delete(rng, crd, ns),
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

    /// A write of subresource `sub` of the object `existing`.
    fn subresource_write(self, rng: &mut Rng, crd: &Crd, sub: &str) -> Request {
        let path = format!("{}/{sub}", self.existing(crd));
        let (label, body, content_type) = match sub {
            "scale" => (
                "update scale",
                json!({"spec": {"replicas": ([0, 2, 5, 1001][rng.usize(..4)])}}),
                None,
            ),
            "ephemeralcontainers" => {
                let mut debug = json!({"name": format!("debug-{}", rng.u8(..3)),
                    "image": (["busybox", ""][rng.usize(..2)])});
                if rng.bool() {
                    debug["targetContainerName"] = json!(["c", "absent"][rng.usize(..2)]);
                }
                (
                    "add an ephemeral container",
                    json!({"spec": {"ephemeralContainers": [debug]}}),
                    Some(STRATEGIC),
                )
            }
            "resize" => {
                let cpu = ["200m", "1", "50m", "x"][rng.usize(..4)];
                (
                    "resize",
                    json!({"spec": {"containers": [{"name": "c", "resources": {
                        "requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}),
                    Some(STRATEGIC),
                )
            }
            _ => {
                let (status, spec) = match self {
                    Target::WidgetStatus => (
                        json!({"phase": (["Ready", ""][rng.usize(..2)])}),
                        crd.tree(self).sample_spec(rng),
                    ),
                    _ => (
                        json!({"size": ([0, 4][rng.usize(..2)])}),
                        crd.sample_spec(rng),
                    ),
                };
                (
                    "update status",
                    json!({"status": status, "spec": spec}),
                    None,
                )
            }
        };
        let mut request = Request::new(label, "PATCH", path, Some(body));
        request.content_type = content_type.map(str::to_string);
        request
    }

    /// An update of the object `existing`, its body of any type the kind takes.
    fn update(self, rng: &mut Rng, crd: &Crd) -> Request {
        let custom = self.custom();
        let bodies: &[Body] = if custom {
            &[Body::Merge, Body::Json, Body::Json, Body::Apply]
        } else {
            &[
                Body::Merge,
                Body::Json,
                Body::Strategic,
                Body::Apply,
                Body::Put,
            ]
        };
        let path = self.existing(crd);
        match bodies[rng.usize(..bodies.len())] {
            Body::Merge | Body::Strategic => {
                let body = if rng.bool() {
                    self.change(rng, crd)
                } else {
                    json!({"metadata": {"labels": {"changed": "yes"}}})
                };
                let mut request = Request::new("update", "PATCH", path, Some(body));
                if !custom && rng.bool() {
                    request.label = "update (strategic merge)".into();
                    request.content_type = Some(STRATEGIC.into());
                }
                request
            }
            Body::Json => {
                let ops = self.json_patch(rng, crd);
                let mut request = Request::new("update (JSON patch)", "PATCH", path, Some(ops));
                request.content_type = Some(JSON_PATCH.into());
                request
            }
            Body::Apply => {
                let mut object = self.object(rng, crd, "existing");
                if !self.cluster_scoped() {
                    object["metadata"]["namespace"] = json!("{{ns}}");
                }
                let force = if rng.bool() { "&force=true" } else { "" };
                let mut request = Request::new(
                    "update (server-side apply)",
                    "PATCH",
                    format!("{path}?fieldManager=fuzz{force}"),
                    Some(object),
                );
                request.content_type = Some(APPLY.into());
                request
            }
            Body::Put => {
                let mut object = self.object(rng, crd, "existing");
                if !self.cluster_scoped() {
                    object["metadata"]["namespace"] = json!("{{ns}}");
                }
                Request::new("replace (PUT)", "PUT", path, Some(object))
            }
        }
    }

    /// A merge or strategic merge patch of the kind's own fields.
    fn change(self, rng: &mut Rng, crd: &Crd) -> Value {
        match self {
            Target::ConfigMap => json!({"data": {"k": (["changed", "", "9"][rng.usize(..3)])}}),
            Target::Deployment | Target::DeploymentScale => {
                if rng.bool() {
                    json!({"spec": {"replicas": ([2, 0, 7][rng.usize(..3)])}})
                } else {
                    json!({"spec": {"template": {"spec": {"containers": [
                        {"name": (["c", "sidecar"][rng.usize(..2)]), "image": "app:2"}]}}}})
                }
            }
            Target::Namespace => json!({"metadata": {"annotations": {"note": "x"}}}),
            Target::ClusterRole => json!({"rules": rules(rng)}),
            Target::PodEphemeral | Target::PodResize => {
                json!({"spec": {"containers": [{"name": "c", "image": "app:2"}]}})
            }
            Target::Gadget | Target::GadgetStatus | Target::GadgetScale => {
                json!({"spec": crd.sample_spec(rng)})
            }
            Target::Gizmo | Target::Widget | Target::WidgetStatus => {
                json!({"spec": crd.tree(self).sample_spec(rng)})
            }
        }
    }

    /// A JSON patch (RFC 6902) of one or two operations, putting nulls, empty maps, wrong
    /// types and values at any depth of the kind's fields.
    fn json_patch(self, rng: &mut Rng, crd: &Crd) -> Value {
        let mut paths: Vec<String> = vec![
            "/metadata/labels/changed".into(),
            "/metadata/annotations".into(),
        ];
        match self {
            Target::ConfigMap => paths.extend(["/data/k".into(), "/data".into()]),
            Target::Deployment | Target::DeploymentScale => paths.extend([
                "/spec/replicas".into(),
                "/spec/template/spec/containers/0/image".into(),
            ]),
            Target::Namespace => paths.push("/spec/finalizers".into()),
            Target::ClusterRole => {
                paths.extend(["/rules/0/verbs/-".into(), "/rules".into()]);
            }
            Target::PodEphemeral | Target::PodResize => paths.extend([
                "/spec/containers/0/image".into(),
                "/spec/activeDeadlineSeconds".into(),
            ]),
            Target::Gadget | Target::GadgetStatus | Target::GadgetScale => {
                paths.extend(crd.field_names().iter().map(|f| format!("/spec/{f}")));
            }
            Target::Gizmo | Target::Widget | Target::WidgetStatus => paths.extend(
                crd.tree(self)
                    .pointers(false)
                    .iter()
                    .map(|p| p.trim_matches('"').to_string()),
            ),
        }
        let ops: Vec<Value> = (0..1 + rng.usize(..2))
            .map(|_| {
                let path = paths[rng.usize(..paths.len())].clone();
                let op = ["add", "replace", "remove", "test"][rng.usize(..4)];
                let mut o = json!({"op": op, "path": path});
                if op != "remove" {
                    o["value"] = [
                        Value::Null,
                        json!({}),
                        json!([]),
                        json!("s"),
                        json!(1),
                        json!(true),
                        json!({"k": null}),
                        json!(["a"]),
                    ][rng.usize(..8)]
                    .clone();
                }
                o
            })
            .collect();
        Value::Array(ops)
    }

    /// A delete of `existing` (with options, or not) or of the collection in `ns` (of the
    /// case's objects when cluster-scoped).
    fn delete(self, rng: &mut Rng, crd: &Crd, ns: &str) -> Request {
        match rng.u8(..3) {
            0 => Request::new("delete", "DELETE", self.existing(crd), None),
            1 => {
                // A body's options replace the query's: the dry run is asked for in both.
                let mut options = json!({"apiVersion": "v1", "kind": "DeleteOptions",
                    "dryRun": ["All"],
                    "propagationPolicy": (["Orphan", "Foreground", "Background"][rng.usize(..3)])});
                match rng.u8(..3) {
                    0 => options["gracePeriodSeconds"] = json!(0),
                    1 => {
                        options["preconditions"] =
                            json!({"uid": "00000000-0000-4000-8000-000000000000"});
                    }
                    _ => {}
                }
                Request::new(
                    "delete with options",
                    "DELETE",
                    self.existing(crd),
                    Some(options),
                )
            }
            _ => {
                let selector = if self.cluster_scoped() {
                    format!("{CASE_LABEL}%3D{{{{ns}}}}")
                } else {
                    ["app%3Dweb", "tier%21%3Db"][rng.usize(..2)].to_string()
                };
                Request::new(
                    "deletecollection",
                    "DELETE",
                    format!("{}?labelSelector={selector}", self.collection(crd, ns)),
                    None,
                )
            }
        }
    }
}

/// The content type of a JSON patch.
pub const JSON_PATCH: &str = "application/json-patch+json";
/// The content type of a strategic merge patch.
pub const STRATEGIC: &str = "application/strategic-merge-patch+json";
/// The content type of a server-side apply.
pub const APPLY: &str = "application/apply-patch+yaml";

/// A ClusterRole's rules: one or two, or none.
fn rules(rng: &mut Rng) -> Value {
    [
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}]),
        json!([]),
        json!([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["*"],
            "resourceNames": ["a"]}, {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]),
    ][rng.usize(..3)]
    .clone()
}
