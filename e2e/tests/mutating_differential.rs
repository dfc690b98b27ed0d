//! The MutatingAdmissionPolicy differential suite: a table of scenarios (policies + bindings +
//! setup objects + a sequence of requests), each played three times against ONE control plane
//! and ONE celgate process — without policies (the baseline), with in-tree
//! `admissionregistration.k8s.io/v1` objects, and with celgate's `admission.celgate.io/v1`
//! objects (only the apiVersion differs) — comparing per request between in-tree and celgate:
//! allowed, HTTP code and reason, the inner message (after kube-apiserver's webhook prefix), the
//! warnings, and the object the API server returned, which is the object it stores (requests are
//! server-side dry runs), server-managed fields aside.
//!
//! Every scenario must show that its policies acted: in the in-tree phase at least one request
//! must come out differently from the baseline; a scenario where nothing happens would compare
//! "same" whatever celgate did.
//!
//! The order in which kube-apiserver applies several MutatingAdmissionPolicies to one request is
//! not stable from run to run (seen on kube-apiserver 1.36.3; docs/limitations.md), so scenarios
//! with several policies use policies whose effects commute, or that converge through
//! `reinvocationPolicy: IfNeeded`.
//!
//! Each phase is proven in force by sentinels (see [`celgate_e2e::differential`]): the mutating
//! sentinel of the engine, and the validating one for scenarios that also hold
//! ValidatingAdmissionPolicies. It runs in `make e2e`; `make map-differential` runs it alone, and
//! `CELGATE_DIFF_ONLY=<prefix>[,<prefix>…]` plays only the scenarios whose names start with one
//! of the prefixes.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use celgate_e2e::differential::{
    self, Driver, Engine, docs, indent, json_differences, parse_docs, strip_server_managed,
};
use celgate_e2e::version::{self, in_tree_map_flags};
use celgate_e2e::{Celgate, Cluster, inner_message};
use serde_json::{Map, Value, json};

// ------------------------------------------------------------------------------------------
// Scenarios and requests
// ------------------------------------------------------------------------------------------

/// One scenario. Placeholders in every text: `{{api}}` and `{{map_api}}` (the engine's
/// apiVersions of validating and of mutating policies), `{{ns}}` and
/// `{{ns2}}` (the scenario's two namespaces, `m-<name>` and `m-<name>-2`, created with
/// `ns_labels` before `setup`).
struct Scenario {
    topic: &'static str,
    name: &'static str,
    ns_labels: Value,
    /// Engine-independent objects (kubectl apply), created once before the phases.
    setup: String,
    /// Policies and bindings of any of the four kinds, applied per engine.
    policies: String,
    requests: Vec<Req>,
}

impl Scenario {
    fn new(topic: &'static str, name: &'static str, policies: String, requests: Vec<Req>) -> Self {
        Scenario {
            topic,
            name,
            ns_labels: json!({}),
            setup: String::new(),
            policies,
            requests,
        }
    }

    fn labels(mut self, labels: Value) -> Self {
        self.ns_labels = labels;
        self
    }

    fn setup(mut self, yaml: &str) -> Self {
        self.setup = yaml.to_string();
        self
    }

    fn ns(&self) -> String {
        format!("m-{}", self.name)
    }

    fn ns2(&self) -> String {
        format!("m-{}-2", self.name)
    }

    fn render(&self, text: &str, engine: Option<Engine>) -> String {
        let mut t = text
            .replace("{{ns2}}", &self.ns2())
            .replace("{{ns}}", &self.ns());
        if let Some(e) = engine {
            t = t
                .replace("{{map_api}}", e.map_api())
                .replace("{{api}}", e.api());
        }
        t
    }

    /// Whether the scenario also holds ValidatingAdmissionPolicies.
    fn has_validating(&self) -> bool {
        parse_docs(&self.render(&self.policies, Some(Engine::InTree)))
            .iter()
            .any(|d| d["kind"] == "ValidatingAdmissionPolicy")
    }
}

/// One request, a server-side dry run (the answer holds the object as it would be stored) but
/// for a connection.
#[derive(Clone, Debug)]
struct Req {
    label: String,
    method: &'static str,
    path: String,
    body: Value,
    /// A CONNECT (`kubectl exec`, `attach`, `port-forward`): no body, no dry run. Admission runs
    /// before kube-apiserver connects with the options it leaves, and no node runs the Pod, so
    /// a connection admission lets through fails afterwards with 400 BadRequest (`container …
    /// is not valid for pod …` when the options name a container the Pod lacks, else `pod …
    /// does not have a host assigned`); that failure counts as allowed, its message compared.
    connect: bool,
    /// Impersonated user and groups (the admin is `system:masters` and may impersonate).
    user: Option<(String, Vec<String>)>,
}

fn create(label: &str, path: &str, body: Value) -> Req {
    Req {
        label: label.to_string(),
        method: "POST",
        path: path.to_string(),
        body,
        connect: false,
        user: None,
    }
}

/// A JSON merge patch: an UPDATE in admission.
fn update(label: &str, path: &str, patch: Value) -> Req {
    Req {
        method: "PATCH",
        ..create(label, path, patch)
    }
}

/// A CONNECT to `subresource` of Pod `p` in the scenario's namespace with these query
/// parameters, as `kubectl exec`, `attach` and `port-forward` send it.
fn connect(label: &str, subresource: &str, query: &[(&str, &str)]) -> Req {
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    Req {
        connect: true,
        ..create(
            label,
            &format!("{PODS}/p/{subresource}?{}", query.join("&")),
            Value::Null,
        )
    }
}

impl Req {
    /// Impersonates `user` in `groups` (plus `system:masters`, so authorization passes).
    fn impersonating(mut self, user: &str, groups: &[&str]) -> Self {
        let mut g: Vec<String> = groups.iter().map(|s| s.to_string()).collect();
        g.push("system:masters".into());
        self.user = Some((user.to_string(), g));
        self
    }
}

const CMS: &str = "/api/v1/namespaces/{{ns}}/configmaps";
const CMS2: &str = "/api/v1/namespaces/{{ns2}}/configmaps";
const PODS: &str = "/api/v1/namespaces/{{ns}}/pods";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/{{ns}}/deployments";
const WIDGETS: &str = "/apis/diff.example.com/v1/namespaces/{{ns}}/widgets";

fn at(collection: &str, name: &str) -> String {
    format!("{collection}/{name}")
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn cm_meta(name: &str, metadata: Value, data: Value) -> Value {
    let mut m = metadata;
    m["name"] = json!(name);
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m, "data": data})
}

fn container(name: &str) -> Value {
    json!({"name": name, "image": "registry.example/app:1"})
}

/// A Pod with the given containers and initContainers (the latter left out when `None`).
fn pod(name: &str, containers: Vec<Value>, init: Option<Vec<Value>>) -> Value {
    let mut spec = json!({"containers": containers});
    if let Some(init) = init {
        spec["initContainers"] = json!(init);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

/// The Pod of the documentation's example: one app container and one initializer.
fn docs_pod(name: &str) -> Value {
    pod(
        name,
        vec![container("myapp")],
        Some(vec![
            json!({"name": "myapp-initializer", "image": "example/initializer:v1.0.0"}),
        ]),
    )
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}}})
}

fn widget(name: &str, spec: Option<Value>) -> Value {
    let mut w = json!({"apiVersion": "diff.example.com/v1", "kind": "Widget",
        "metadata": {"name": name}});
    if let Some(spec) = spec {
        w["spec"] = spec;
    }
    w
}

// YAML builders. Specs are written at column 0 and indented here.

/// A MutatingAdmissionPolicy (`reinvocationPolicy: Never` unless the spec sets one: the field
/// has no default).
fn map_policy(name: &str, spec: &str) -> String {
    let spec = if spec.contains("reinvocationPolicy:") {
        spec.to_string()
    } else {
        format!(
            "{}reinvocationPolicy: Never\n",
            spec.trim_start_matches('\n')
        )
    };
    format!(
        "apiVersion: \"{{{{map_api}}}}\"\nkind: MutatingAdmissionPolicy\nmetadata:\n  name: {name}\nspec:\n{}",
        indent(&spec, 2)
    )
}

fn map_binding(name: &str, policy: &str, spec: &str) -> String {
    format!(
        "apiVersion: \"{{{{map_api}}}}\"\nkind: MutatingAdmissionPolicyBinding\nmetadata:\n  name: {name}\nspec:\n  policyName: {policy}\n{}",
        indent(spec, 2)
    )
}

/// A MutatingAdmissionPolicy `<name>` and its binding `<name>-binding`, scoped to the
/// scenario's namespaces.
fn mpb(name: &str, spec: &str) -> String {
    docs(&[
        map_policy(name, spec),
        map_binding(&format!("{name}-binding"), name, &scoped()),
    ])
}

/// A ValidatingAdmissionPolicy `<name>` and its Deny binding, scoped to the scenario's
/// namespaces.
fn vpb(name: &str, spec: &str) -> String {
    docs(&[
        format!(
            "apiVersion: \"{{{{api}}}}\"\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {name}\nspec:\n{}",
            indent(spec, 2)
        ),
        format!(
            "apiVersion: \"{{{{api}}}}\"\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: {name}-binding\nspec:\n  policyName: {name}\n  validationActions: [Deny]\n{}",
            indent(&scoped(), 2)
        ),
    ])
}

/// Binding `matchResources` for the scenario's two namespaces.
fn scoped() -> String {
    "matchResources:\n  namespaceSelector:\n    matchExpressions:\n    - {key: kubernetes.io/metadata.name, operator: In, values: [\"{{ns}}\", \"{{ns2}}\"]}\n".to_string()
}

/// `matchConstraints` for `ops` on `resources` of `group`/v1.
fn rule(group: &str, ops: &str, resources: &str) -> String {
    format!(
        "matchConstraints:\n  resourceRules:\n  - apiGroups: [\"{group}\"]\n    apiVersions: [\"v1\"]\n    operations: [{ops}]\n    resources: [{resources}]\n"
    )
}

fn cm_rule(ops: &str) -> String {
    rule("", ops, "\"configmaps\"")
}

/// One ApplyConfiguration mutation (the expression on one line, as a YAML block scalar).
fn apply(expression: &str) -> String {
    format!(
        "- patchType: ApplyConfiguration\n  applyConfiguration:\n    expression: >\n{}",
        indent(expression.trim(), 6)
    )
}

/// One JSONPatch mutation.
fn patch(expression: &str) -> String {
    format!(
        "- patchType: JSONPatch\n  jsonPatch:\n    expression: >\n{}",
        indent(expression.trim(), 6)
    )
}

fn cm_yaml(name: &str, labels: &str, data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: \"{{{{ns}}}}\"\n  labels: {labels}\ndata: {data}\n---\n"
    )
}

fn deploy_yaml(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: \"{{{{ns}}}}\"\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, image: registry.example/app:1}}]}}\n---\n"
    )
}

// ------------------------------------------------------------------------------------------
// The table
// ------------------------------------------------------------------------------------------

/// The documentation's sidecar policy (ApplyConfiguration), with or without the container's
/// `args`.
fn docs_sidecar(with_args: bool) -> String {
    let args = if with_args {
        "args: [\"proxy\", \"sidecar\"], "
    } else {
        ""
    };
    format!(
        "{}matchConditions:\n- name: does-not-already-have-sidecar\n  expression: \"!object.spec.initContainers.exists(ic, ic.name == \\\"mesh-proxy\\\")\"\nfailurePolicy: Fail\nreinvocationPolicy: IfNeeded\nmutations:\n{}",
        rule("", "\"CREATE\"", "\"pods\""),
        apply(&format!(
            "Object{{spec: Object.spec{{initContainers: [Object.spec.initContainers{{name: \"mesh-proxy\", image: \"mesh/proxy:v1.0.0\", {args}restartPolicy: \"Always\"}}]}}}}"
        ))
    )
}

fn sidecar_requests() -> Vec<Req> {
    vec![
        create("pod of the docs", PODS, docs_pod("myapp")),
        create(
            "pod that already has mesh-proxy",
            PODS,
            pod(
                "meshed",
                vec![container("myapp")],
                Some(vec![
                    json!({"name": "mesh-proxy", "image": "mesh/proxy:v0.9.0"}),
                ]),
            ),
        ),
        create(
            "pod without initContainers (condition errors)",
            PODS,
            pod("bare", vec![container("myapp")], None),
        ),
    ]
}

fn scenarios() -> Vec<Scenario> {
    let mut s = Vec::new();

    // ---------------------------------------------------------------- the documentation
    s.push(Scenario::new(
        "docs",
        "docs-sidecar-args",
        mpb("docs-sidecar-args", &docs_sidecar(true)),
        sidecar_requests(),
    ));
    s.push(Scenario::new(
        "docs",
        "docs-sidecar-no-args",
        mpb("docs-sidecar-no-args", &docs_sidecar(false)),
        sidecar_requests(),
    ));
    s.push(Scenario::new(
        "docs",
        "docs-jsonpatch-sidecar",
        mpb(
            "docs-jsonpatch-sidecar",
            &format!(
                "{}matchConditions:\n- name: does-not-already-have-sidecar\n  expression: \"!object.spec.initContainers.exists(ic, ic.name == \\\"mesh-proxy\\\")\"\nfailurePolicy: Fail\nreinvocationPolicy: IfNeeded\nmutations:\n{}",
                rule("", "\"CREATE\"", "\"pods\""),
                patch(
                    r#"[JSONPatch{op: "add", path: "/spec/initContainers/-", value: Object.spec.initContainers{name: "mesh-proxy", image: "mesh-proxy/v1.0.0", restartPolicy: "Always"}}]"#
                )
            ),
        ),
        sidecar_requests(),
    ));
    s.push(Scenario::new(
        "docs",
        "docs-jsonpatch-test-replace",
        mpb(
            "docs-jsonpatch-test-replace",
            &format!(
                "{}mutations:\n{}",
                rule("diff.example.com", "\"CREATE\"", "\"widgets\""),
                patch(
                    r#"[JSONPatch{op: "test", path: "/spec/example", value: "Red"}, JSONPatch{op: "replace", path: "/spec/example", value: "Green"}]"#
                )
            ),
        ),
        vec![
            create(
                "example Red",
                WIDGETS,
                widget("red", Some(json!({"example": "Red"}))),
            ),
            create(
                "example Blue (test fails: skipped)",
                WIDGETS,
                widget("blue", Some(json!({"example": "Blue"}))),
            ),
            create(
                "spec without example",
                WIDGETS,
                widget("noexample", Some(json!({"size": 1}))),
            ),
            create("no spec at all", WIDGETS, widget("nospec", None)),
        ],
    ));
    // Integers a double cannot hold reach the patch as text (cel-go's JSON conversion).
    s.push(Scenario::new(
        "values",
        "jsonpatch-int-beyond-2-53-custom",
        mpb(
            "jsonpatch-int-beyond-2-53-custom",
            &format!(
                "{}mutations:\n{}",
                rule("diff.example.com", "\"CREATE\"", "\"widgets\""),
                patch(r#"[JSONPatch{op: "add", path: "/spec/size", value: 9007199254740992}]"#)
            ),
        ),
        vec![create(
            "an integer field",
            WIDGETS,
            widget("big", Some(json!({"example": "x"}))),
        )],
    ));
    s.push(Scenario::new(
        "values",
        "jsonpatch-int-beyond-2-53-built-in",
        mpb(
            "jsonpatch-int-beyond-2-53-built-in",
            &format!(
                "{}mutations:\n{}",
                rule("apps", "\"CREATE\"", "\"deployments\""),
                patch(r#"[JSONPatch{op: "replace", path: "/spec/replicas", value: -9007199254740992}]"#)
            ),
        ),
        vec![create("an int32 field", DEPLOYS, deployment("big", 1))],
    ));
    s.push(Scenario::new(
        "docs",
        "docs-jsonpatch-selector",
        mpb(
            "docs-jsonpatch-selector",
            &format!(
                "{}mutations:\n{}",
                rule("diff.example.com", "\"CREATE\"", "\"widgets\""),
                patch(
                    r#"[JSONPatch{op: "add", path: "/spec/selector", value: Object.spec.selector{matchLabels: {"environment": "test"}}}]"#
                )
            ),
        ),
        vec![
            create(
                "widget without selector",
                WIDGETS,
                widget("plain", Some(json!({"size": 1}))),
            ),
            create(
                "widget with a selector (replaced)",
                WIDGETS,
                widget(
                    "selected",
                    Some(json!({"selector": {"matchLabels": {"app": "x"}}})),
                ),
            ),
        ],
    ));
    s.push(Scenario::new(
        "docs",
        "docs-jsonpatch-escape-key",
        mpb(
            "docs-jsonpatch-escape-key",
            &format!(
                "{}mutations:\n{}",
                cm_rule("\"CREATE\""),
                patch(
                    r#"[JSONPatch{op: "add", path: "/metadata/labels/" + jsonpatch.escapeKey("example.com/environment"), value: "test"}]"#
                )
            ),
        ),
        vec![
            create(
                "labelled configmap",
                CMS,
                cm_meta("labelled", json!({"labels": {"app": "x"}}), json!({})),
            ),
            create(
                "configmap without labels (no parent)",
                CMS,
                cm("bare", json!({})),
            ),
        ],
    ));

    // ---------------------------------------------------------------- apply configurations
    s.push(
        Scenario::new(
            "apply",
            "apply-labels-annotations",
            mpb(
                "apply-labels-annotations",
                &format!(
                    "{}mutations:\n{}",
                    cm_rule("\"CREATE\", \"UPDATE\""),
                    apply(
                        r#"Object{metadata: Object.metadata{labels: {"team": "platform"}, annotations: {"owner": "platform@example.com"}}}"#
                    )
                ),
            ),
            vec![
                create("no labels", CMS, cm("bare", json!({}))),
                create(
                    "other labels (merged)",
                    CMS,
                    cm_meta(
                        "other",
                        json!({"labels": {"app": "x"}, "annotations": {"note": "n"}}),
                        json!({}),
                    ),
                ),
                create(
                    "team=other (replaced)",
                    CMS,
                    cm_meta("other-team", json!({"labels": {"team": "other"}}), json!({})),
                ),
                create(
                    "already mutated (idempotent)",
                    CMS,
                    cm_meta(
                        "done",
                        json!({"labels": {"team": "platform"}, "annotations": {"owner": "platform@example.com"}}),
                        json!({}),
                    ),
                ),
                update(
                    "update of an existing configmap",
                    &at(CMS, "existing"),
                    json!({"data": {"x": "2"}}),
                ),
            ],
        )
        .setup(&cm_yaml("existing", "{app: old}", "{x: '1'}")),
    );
    s.push(Scenario::new(
        "apply",
        "apply-default-when-absent",
        mpb(
            "apply-default-when-absent",
            &format!(
                "{}mutations:\n{}",
                cm_rule("\"CREATE\""),
                apply(
                    r#"!has(object.data) || !('tier' in object.data) ? Object{data: {"tier": "standard"}} : Object{}"#
                )
            ),
        ),
        vec![
            create("no data", CMS, cm("nodata", Value::Null)),
            create("other data (merged)", CMS, cm("other", json!({"a": "1"}))),
            create("tier set (kept)", CMS, cm("gold", json!({"tier": "gold"}))),
        ],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-container-limits-default",
        mpb(
            "apply-container-limits-default",
            &format!(
                "{}mutations:\n{}",
                rule("", "\"CREATE\"", "\"pods\""),
                apply(
                    r#"Object{spec: Object.spec{containers: object.spec.containers.filter(c, !has(c.resources) || !has(c.resources.limits)).map(c, Object.spec.containers{name: c.name, resources: Object.spec.containers.resources{limits: {"memory": "128Mi"}}})}}"#
                )
            ),
        ),
        vec![
            create(
                "one container with limits, one without",
                PODS,
                pod(
                    "mixed",
                    vec![
                        json!({"name": "limited", "image": "registry.example/app:1",
                            "resources": {"limits": {"memory": "1Gi", "cpu": "1"}}}),
                        container("unlimited"),
                    ],
                    None,
                ),
            ),
            create(
                "every container limited (unchanged)",
                PODS,
                pod(
                    "limited",
                    vec![json!({"name": "c", "image": "registry.example/app:1",
                        "resources": {"limits": {"memory": "64Mi"}}})],
                    None,
                ),
            ),
        ],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-env-merged-by-name",
        mpb(
            "apply-env-merged-by-name",
            &format!(
                "{}mutations:\n{}",
                rule("", "\"CREATE\"", "\"pods\""),
                apply(
                    r#"Object{spec: Object.spec{containers: [Object.spec.containers{name: "app", env: [Object.spec.containers.env{name: "LOG_LEVEL", value: "info"}]}]}}"#
                )
            ),
        ),
        vec![
            create(
                "container app with env A",
                PODS,
                pod(
                    "with-env",
                    vec![
                        json!({"name": "app", "image": "registry.example/app:1",
                            "env": [{"name": "A", "value": "1"}]}),
                        container("other"),
                    ],
                    None,
                ),
            ),
            create(
                "LOG_LEVEL=debug (replaced)",
                PODS,
                pod(
                    "debug",
                    vec![json!({"name": "app", "image": "registry.example/app:1",
                        "env": [{"name": "LOG_LEVEL", "value": "debug"}]})],
                    None,
                ),
            ),
            create(
                "no container app (one added, invalid without image)",
                PODS,
                pod("noapp", vec![container("web")], None),
            ),
        ],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-finalizers-set",
        mpb(
            "apply-finalizers-set",
            &format!(
                "{}mutations:\n{}",
                cm_rule("\"CREATE\""),
                apply(r#"Object{metadata: Object.metadata{finalizers: ["example.com/protect"]}}"#)
            ),
        ),
        vec![
            create("no finalizers", CMS, cm("bare", json!({}))),
            create(
                "another finalizer (set union)",
                CMS,
                cm_meta(
                    "other",
                    json!({"finalizers": ["example.com/other"]}),
                    json!({}),
                ),
            ),
            create(
                "same finalizer (unchanged)",
                CMS,
                cm_meta(
                    "same",
                    json!({"finalizers": ["example.com/protect"]}),
                    json!({}),
                ),
            ),
        ],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-crd-lists",
        mpb(
            "apply-crd-lists",
            &format!(
                "{}mutations:\n{}{}",
                rule("diff.example.com", "\"CREATE\"", "\"widgets\""),
                apply(
                    r#"Object{spec: Object.spec{tags: ["managed"], ports: [Object.spec.ports{name: "metrics", port: 9090}]}}"#
                ),
                apply(
                    r#"has(object.spec.size) ? Object{} : Object{spec: Object.spec{size: 3}}"#
                )
            ),
        ),
        vec![
            create(
                "tags, ports and size",
                WIDGETS,
                widget(
                    "full",
                    Some(json!({"size": 7, "tags": ["a", "managed"],
                        "ports": [{"name": "http", "port": 80}, {"name": "metrics", "port": 1}]})),
                ),
            ),
            create(
                "empty spec",
                WIDGETS,
                widget("empty", Some(json!({}))),
            ),
        ],
    ));
    // What kube-apiserver's conversion of an apply configuration to Go leaves of CEL values
    // (a null, a uint, a map literal inside another) its typed conversion refuses wherever they
    // stand, before the atomic rule; the case is picked by the widget's name.
    s.push(Scenario::new(
        "apply",
        "apply-go-values",
        mpb(
            "apply-go-values",
            &format!(
                "{}mutations:\n{}",
                rule("diff.example.com", "\"CREATE\"", "\"widgets\""),
                apply(
                    r#"object.metadata.name == "drop" ? Object{spec: Object.spec{extra: Object.spec.extra{drop: null, keep: "k"}}} : object.metadata.name == "nested" ? Object{spec: Object.spec{extra: {"nested": {"x": dyn(null), "y": dyn(2)}}}} : object.metadata.name == "setting" ? Object{spec: Object.spec{settings: {"a": null}}} : object.metadata.name == "setting-map" ? Object{spec: Object.spec{settings: {"a": {"x": dyn(null), "y": dyn(2)}}}} : object.metadata.name == "atomic" ? Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {"zone": null}}}} : object.metadata.name == "uint" ? Object{spec: Object.spec{size: 2u}} : object.metadata.name == "set" ? Object{spec: Object.spec{tags: [dyn("a"), dyn(null)]}} : object.metadata.name == "list-map" ? Object{spec: Object.spec{ports: [dyn(null)]}} : object.metadata.name == "null-key" ? Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {null: "a"}}}} : Object{spec: Object.spec{extra: Object.spec.extra{keep: object.metadata.name}}}"#
                )
            ),
        ),
        [
            "drop",
            "nested",
            "setting",
            "setting-map",
            "atomic",
            "uint",
            "set",
            "list-map",
            "null-key",
            "plain",
        ]
        .into_iter()
        .map(|n| create(n, WIDGETS, widget(n, Some(json!({"size": 1})))))
        .collect(),
    ));
    s.push(Scenario::new(
        "apply",
        "apply-null-node-selector",
        mpb(
            "apply-null-node-selector",
            &format!(
                "{}mutations:\n{}",
                rule("", "\"CREATE\"", "\"pods\""),
                apply(
                    r#"object.metadata.name == "null" ? Object{spec: Object.spec{nodeSelector: {"zone": null}}} : Object{spec: Object.spec{nodeSelector: {"zone": "a"}}}"#
                )
            ),
        ),
        vec![
            create("null in nodeSelector", PODS, pod("null", vec![container("c")], None)),
            create("zone a (atomic)", PODS, pod("plain", vec![container("c")], None)),
        ],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-atomic-args",
        mpb(
            "apply-atomic-args",
            &format!(
                "{}mutations:\n{}",
                rule("apps", "\"CREATE\"", "\"deployments\""),
                apply(
                    r#"Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: "c", args: ["--verbose"]}]}}}}"#
                )
            ),
        ),
        vec![create("deployment", DEPLOYS, deployment("web", 1))],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-atomic-crd-selector",
        // One atomic path per request: kube-apiserver lists several in Go map order, which
        // changes from request to request.
        mpb(
            "apply-atomic-crd-selector",
            &format!(
                "{}mutations:\n{}",
                rule("diff.example.com", "\"CREATE\"", "\"widgets\""),
                apply(
                    r#"object.metadata.name == "selector" ? Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {"environment": "test"}}}} : Object{spec: Object.spec{args: ["a"]}}"#
                )
            ),
        ),
        vec![
            create(
                "atomic struct",
                WIDGETS,
                widget("selector", Some(json!({"size": 1}))),
            ),
            create(
                "atomic list",
                WIDGETS,
                widget("args", Some(json!({"args": ["b"]}))),
            ),
        ],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-atomic-ignored",
        mpb(
            "apply-atomic-ignored",
            &format!(
                "{}failurePolicy: Ignore\nmutations:\n{}{}",
                rule("apps", "\"CREATE\"", "\"deployments\""),
                apply(
                    r#"Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {"tier": "web"}}}}"#
                ),
                apply(r#"Object{metadata: Object.metadata{labels: {"after": "error"}}}"#)
            ),
        ),
        vec![create("deployment", DEPLOYS, deployment("web", 1))],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-undeclared-field",
        mpb(
            "apply-undeclared-field",
            &format!(
                "{}mutations:\n{}",
                rule("apps", "\"CREATE\"", "\"deployments\""),
                apply(r#"Object{spec: Object.spec{replicasx: 1}}"#)
            ),
        ),
        vec![create("deployment", DEPLOYS, deployment("web", 1))],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-type-name-mismatch",
        mpb(
            "apply-type-name-mismatch",
            &format!(
                "{}mutations:\n{}",
                cm_rule("\"CREATE\""),
                apply(r#"Object{metadata: Object.spec{labels: {"a": "b"}}}"#)
            ),
        ),
        vec![create("configmap", CMS, cm("c", json!({})))],
    ));
    s.push(Scenario::new(
        "apply",
        "apply-in-order",
        mpb(
            "apply-in-order",
            &format!(
                "{}mutations:\n{}{}",
                cm_rule("\"CREATE\""),
                apply(r#"Object{metadata: Object.metadata{labels: {"first": "1"}}}"#),
                apply(
                    r#"Object{metadata: Object.metadata{annotations: {"saw-first": object.metadata.labels["first"]}}}"#
                )
            ),
        ),
        vec![create("configmap", CMS, cm("c", json!({})))],
    ));

    // ---------------------------------------------------------------- JSON patches
    s.push(Scenario::new(
        "jsonpatch",
        "jsonpatch-six-ops",
        mpb(
            "jsonpatch-six-ops",
            &format!(
                "{}mutations:\n{}",
                cm_rule("\"CREATE\""),
                patch(
                    r#"[JSONPatch{op: "test", path: "/data/a", value: "1"}, JSONPatch{op: "add", path: "/data/d", value: "4"}, JSONPatch{op: "replace", path: "/data/b", value: "two"}, JSONPatch{op: "remove", path: "/data/c"}, JSONPatch{op: "copy", from: "/data/a", path: "/data/a-copy"}, JSONPatch{op: "move", from: "/data/d", path: "/data/e"}]"#
                )
            ),
        ),
        vec![
            create(
                "a=1 b c",
                CMS,
                cm("all", json!({"a": "1", "b": "2", "c": "3"})),
            ),
            create(
                "a=9 (test fails: skipped)",
                CMS,
                cm("other", json!({"a": "9", "b": "2", "c": "3"})),
            ),
            create(
                "no c (remove fails)",
                CMS,
                cm("noc", json!({"a": "1", "b": "2"})),
            ),
        ],
    ));
    s.push(Scenario::new(
        "jsonpatch",
        "jsonpatch-test-guard",
        mpb(
            "jsonpatch-test-guard",
            &format!(
                "{}mutations:\n{}",
                cm_rule("\"CREATE\""),
                patch(
                    r#"[JSONPatch{op: "test", path: "/data/color", value: "red"}, JSONPatch{op: "replace", path: "/data/color", value: "blue"}]"#
                )
            ),
        ),
        vec![
            create("color=red", CMS, cm("red", json!({"color": "red"}))),
            create("color=green", CMS, cm("green", json!({"color": "green"}))),
            create("data without color", CMS, cm("nocolor", json!({"x": "1"}))),
            create("no data (missing parent)", CMS, cm("nodata", Value::Null)),
        ],
    ));
    s.push(Scenario::new(
        "jsonpatch",
        "jsonpatch-escape-tilde",
        mpb(
            "jsonpatch-escape-tilde",
            &format!(
                "{}mutations:\n{}",
                rule("diff.example.com", "\"CREATE\"", "\"widgets\""),
                patch(
                    r#"[JSONPatch{op: "add", path: "/spec/settings/" + jsonpatch.escapeKey("a~b/c"), value: "x"}, JSONPatch{op: "copy", from: "/spec/settings/" + jsonpatch.escapeKey("a~b/c"), path: "/spec/settings/" + jsonpatch.escapeKey("~/")}]"#
                )
            ),
        ),
        vec![
            create(
                "widget with settings",
                WIDGETS,
                widget("set", Some(json!({"settings": {"k": "v"}}))),
            ),
            create(
                "widget without settings (no parent)",
                WIDGETS,
                widget("unset", Some(json!({"size": 1}))),
            ),
        ],
    ));
    s.push(Scenario::new(
        "jsonpatch",
        "jsonpatch-strict-decode",
        mpb(
            "jsonpatch-strict-decode",
            &format!(
                "{}failurePolicy: Ignore\nmutations:\n{}",
                cm_rule("\"CREATE\""),
                patch(r#"[JSONPatch{op: "add", path: "/bogus", value: "x"}]"#)
            ),
        ),
        vec![create("configmap", CMS, cm("c", json!({})))],
    ));
    s.push(Scenario::new(
        "jsonpatch",
        "jsonpatch-value-types",
        mpb(
            "jsonpatch-value-types",
            &format!(
                "{}mutations:\n{}",
                rule("apps", "\"CREATE\"", "\"deployments\""),
                patch(
                    r#"object.metadata.name == "number" ? [JSONPatch{op: "replace", path: "/spec/replicas", value: 4}] : object.metadata.name == "string" ? [JSONPatch{op: "replace", path: "/spec/replicas", value: "4"}] : [JSONPatch{op: "add", path: "/metadata/labels", value: {"a": "b", "c": "d"}}]"#
                )
            ),
        ),
        vec![
            create("replicas ← 4", DEPLOYS, deployment("number", 1)),
            create("replicas ← \"4\"", DEPLOYS, deployment("string", 1)),
            create("labels ← a map", DEPLOYS, deployment("labels", 1)),
        ],
    ));
    s.push(Scenario::new(
        "jsonpatch",
        "jsonpatch-invalid-result",
        mpb(
            "jsonpatch-invalid-result",
            &format!(
                "{}mutations:\n{}",
                rule("apps", "\"CREATE\"", "\"deployments\""),
                patch(r#"[JSONPatch{op: "replace", path: "/spec/replicas", value: -1}]"#)
            ),
        ),
        vec![create("deployment", DEPLOYS, deployment("web", 1))],
    ));
    s.push(Scenario::new(
        "jsonpatch",
        "jsonpatch-name-namespace",
        mpb(
            "jsonpatch-name-namespace",
            &format!(
                "{}mutations:\n{}",
                cm_rule("\"CREATE\", \"UPDATE\""),
                patch(
                    r#"object.metadata.name == "rename" ? [JSONPatch{op: "replace", path: "/metadata/name", value: "renamed"}] : object.metadata.name.startsWith("move") ? [JSONPatch{op: "replace", path: "/metadata/namespace", value: "elsewhere"}] : []"#
                )
            ),
        ),
        vec![
            create("name replaced", CMS, cm("rename", json!({}))),
            create("namespace replaced", CMS, cm("move", json!({}))),
            update(
                "namespace replaced on update",
                &at(CMS, "move-existing"),
                json!({"data": {"x": "2"}}),
            ),
        ],
    )
    .setup(&cm_yaml("move-existing", "{}", "{x: '1'}")));

    // ---------------------------------------------------------------- params
    s.push(
        Scenario::new(
            "params",
            "params-configmap",
            docs(&[
                map_policy(
                    "params-configmap",
                    &format!(
                        "paramKind: {{apiVersion: v1, kind: ConfigMap}}\n{}mutations:\n{}",
                        cm_rule("\"CREATE\""),
                        apply(r#"Object{metadata: Object.metadata{labels: params.data}}"#)
                    ),
                ),
                map_binding(
                    "params-configmap-binding",
                    "params-configmap",
                    "paramRef: {name: label-params, namespace: \"{{ns}}\", parameterNotFoundAction: Deny}\nmatchResources:\n  namespaceSelector:\n    matchLabels: {kubernetes.io/metadata.name: \"{{ns}}\"}\n",
                ),
                map_binding(
                    "params-configmap-missing",
                    "params-configmap",
                    "paramRef: {name: no-such-params, namespace: \"{{ns2}}\", parameterNotFoundAction: Deny}\nmatchResources:\n  namespaceSelector:\n    matchLabels: {kubernetes.io/metadata.name: \"{{ns2}}\"}\n",
                ),
            ]),
            vec![
                create("configmap", CMS, cm("c", json!({}))),
                create("configmap (param missing)", CMS2, cm("c", json!({}))),
            ],
        )
        .setup(&cm_yaml(
            "label-params",
            "{}",
            "{team: blue, env: prod}",
        )),
    );
    s.push(
        Scenario::new(
            "params",
            "params-selector",
            docs(&[
                map_policy(
                    "params-selector",
                    &format!(
                        "paramKind: {{apiVersion: v1, kind: ConfigMap}}\n{}matchConditions:\n- name: not-a-param\n  expression: \"!has(object.metadata.labels) || !('role' in object.metadata.labels)\"\nmutations:\n{}",
                        cm_rule("\"CREATE\""),
                        apply(r#"Object{metadata: Object.metadata{labels: params.data}}"#)
                    ),
                ),
                map_binding(
                    "params-selector-binding",
                    "params-selector",
                    &format!(
                        "paramRef:\n  namespace: \"{{{{ns}}}}\"\n  selector: {{matchLabels: {{role: label-source}}}}\n  parameterNotFoundAction: Allow\n{}",
                        scoped()
                    ),
                ),
            ]),
            vec![create("configmap", CMS, cm("c", json!({})))],
        )
        .setup(
            &(cm_yaml("source-a", "{role: label-source}", "{a: '1'}")
                + &cm_yaml("source-b", "{role: label-source}", "{b: '2'}")),
        ),
    );
    {
        let data: Map<String, Value> = (0..400)
            .map(|i| (format!("key-{i:03}"), json!("v".repeat(100))))
            .collect();
        let data = serde_json::to_string(&data).unwrap_or_default();
        s.push(
            Scenario::new(
                "params",
                "params-huge-patch",
                docs(&[
                    map_policy(
                        "params-huge-patch",
                        &format!(
                            "paramKind: {{apiVersion: v1, kind: ConfigMap}}\n{}mutations:\n{}{}",
                            cm_rule("\"CREATE\""),
                            apply(r#"Object{metadata: Object.metadata{annotations: params.data}}"#),
                            patch(r#"[JSONPatch{op: "add", path: "/data", value: params.data}]"#)
                        ),
                    ),
                    map_binding(
                        "params-huge-patch-binding",
                        "params-huge-patch",
                        &format!(
                            "paramRef: {{name: huge, namespace: \"{{{{ns2}}}}\", parameterNotFoundAction: Deny}}\n{}",
                            scoped().replace(", \"{{ns2}}\"", "")
                        ),
                    ),
                ]),
                vec![create("configmap", CMS, cm("c", json!({"x": "1"})))],
            )
            .setup(&format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: huge, namespace: \"{{{{ns2}}}}\"}}\ndata: {data}\n---\n"
            )),
        );
    }

    // ---------------------------------------------------------------- several policies
    s.push(Scenario::new(
        "order",
        "order-commuting",
        docs(&[
            mpb(
                "order-commuting-label",
                &format!(
                    "{}mutations:\n{}",
                    cm_rule("\"CREATE\""),
                    apply(r#"Object{metadata: Object.metadata{labels: {"a": "1"}}}"#)
                ),
            ),
            mpb(
                "order-commuting-annotation",
                &format!(
                    "{}mutations:\n{}",
                    cm_rule("\"CREATE\""),
                    patch(
                        r#"has(object.metadata.annotations) ? [JSONPatch{op: "add", path: "/metadata/annotations/b", value: "2"}] : [JSONPatch{op: "add", path: "/metadata/annotations", value: {"b": "2"}}]"#
                    )
                ),
            ),
            mpb(
                "order-commuting-finalizer",
                &format!(
                    "{}mutations:\n{}",
                    cm_rule("\"CREATE\""),
                    apply(r#"Object{metadata: Object.metadata{finalizers: ["example.com/f"]}}"#)
                ),
            ),
        ]),
        vec![
            create("bare configmap", CMS, cm("bare", json!({}))),
            create(
                "annotated configmap",
                CMS,
                cm_meta("annotated", json!({"annotations": {"z": "0"}}), json!({})),
            ),
        ],
    ));
    s.push(Scenario::new(
        "order",
        "reinvoke-if-needed",
        docs(&[
            mpb(
                "reinvoke-if-needed-reader",
                &format!(
                    "{}reinvocationPolicy: IfNeeded\nmutations:\n{}",
                    cm_rule("\"CREATE\""),
                    apply(
                        r#"has(object.metadata.labels) && 'x' in object.metadata.labels ? Object{metadata: Object.metadata{annotations: {"seen": object.metadata.labels['x']}}} : Object{}"#
                    )
                ),
            ),
            mpb(
                "reinvoke-if-needed-writer",
                &format!(
                    "{}mutations:\n{}",
                    cm_rule("\"CREATE\""),
                    apply(r#"Object{metadata: Object.metadata{labels: {"x": "gold"}}}"#)
                ),
            ),
        ]),
        (0..4)
            .map(|i| create(&format!("configmap {i}"), CMS, cm(&format!("c{i}"), json!({}))))
            .collect(),
    ));
    s.push(Scenario::new(
        "order",
        "reinvoke-self",
        // kube-apiserver 1.36.3 runs an IfNeeded policy that changed the object once more in
        // the reinvocation pass, even when nothing else changed it: a non-idempotent mutation
        // shows it ("xx").
        mpb(
            "reinvoke-self",
            &format!(
                "{}reinvocationPolicy: IfNeeded\nmutations:\n{}",
                cm_rule("\"CREATE\""),
                apply(
                    r#"Object{metadata: Object.metadata{annotations: {"count": (has(object.metadata.annotations) && 'count' in object.metadata.annotations ? object.metadata.annotations['count'] : '') + 'x'}}}"#
                )
            ),
        ),
        vec![
            create("fresh configmap (twice: xx)", CMS, cm("fresh", json!({}))),
            create(
                "count=x already",
                CMS,
                cm_meta("counted", json!({"annotations": {"count": "x"}}), json!({})),
            ),
        ],
    ));
    s.push(Scenario::new(
        "order",
        "map-feeds-vap",
        docs(&[
            mpb(
                "map-feeds-vap-mutate",
                &format!(
                    "{}mutations:\n{}",
                    cm_rule("\"CREATE\""),
                    apply(
                        r#"has(object.data) && 'bad' in object.data ? Object{metadata: Object.metadata{labels: {"tier": "blocked"}}} : has(object.metadata.labels) && 'tier' in object.metadata.labels ? Object{} : Object{metadata: Object.metadata{labels: {"tier": "standard"}}}"#
                    )
                ),
            ),
            vpb(
                "map-feeds-vap-validate",
                &(cm_rule("\"CREATE\"")
                    + "validations:\n- expression: \"has(object.metadata.labels) && 'tier' in object.metadata.labels\"\n  message: \"a tier label is required\"\n- expression: \"object.metadata.labels['tier'] != 'blocked'\"\n  messageExpression: \"'tier ' + object.metadata.labels['tier'] + ' is not allowed'\"\n"),
            ),
        ]),
        vec![
            create("no labels (tier filled)", CMS, cm("bare", json!({}))),
            create(
                "tier=gold (kept)",
                CMS,
                cm_meta("gold", json!({"labels": {"tier": "gold"}}), json!({})),
            ),
            create("data.bad (blocked by the MAP)", CMS, cm("bad", json!({"bad": "1"}))),
        ],
    ));

    // ---------------------------------------------------------------- failures
    let runtime_error = |name: &str, failure: &str| {
        mpb(
            name,
            &format!(
                "{}failurePolicy: {failure}\nmutations:\n{}{}",
                cm_rule("\"CREATE\""),
                apply(
                    r#"Object{metadata: Object.metadata{annotations: {"m": object.data.missing}}}"#
                ),
                apply(r#"Object{metadata: Object.metadata{labels: {"second": "ran"}}}"#)
            ),
        )
    };
    let runtime_requests = || {
        vec![
            create("no data (no such key)", CMS, cm("nodata", Value::Null)),
            create(
                "data.missing present",
                CMS,
                cm("present", json!({"missing": "here"})),
            ),
        ]
    };
    s.push(Scenario::new(
        "failure",
        "failure-ignore-runtime",
        runtime_error("failure-ignore-runtime", "Ignore"),
        runtime_requests(),
    ));
    s.push(Scenario::new(
        "failure",
        "failure-fail-runtime",
        runtime_error("failure-fail-runtime", "Fail"),
        runtime_requests(),
    ));

    // ---------------------------------------------------------------- request context
    s.push(
        Scenario::new(
            "context",
            "update-old-object",
            mpb(
                "update-old-object",
                &format!(
                    "{}matchConditions:\n- name: is-update\n  expression: \"oldObject != null\"\nmutations:\n{}",
                    cm_rule("\"CREATE\", \"UPDATE\""),
                    apply(
                        r#"Object{metadata: Object.metadata{annotations: {"previous-x": string(oldObject.data.x), "operation": request.operation}}}"#
                    )
                ),
            ),
            vec![
                update(
                    "update x",
                    &at(CMS, "existing"),
                    json!({"data": {"x": "new"}}),
                ),
                create("create (no oldObject)", CMS, cm("fresh", json!({"x": "1"}))),
            ],
        )
        .setup(&cm_yaml("existing", "{}", "{x: old}")),
    );
    s.push(
        Scenario::new(
            "context",
            "subresource-scale",
            mpb(
                "subresource-scale",
                &format!(
                    "{}mutations:\n{}",
                    rule("apps", "\"UPDATE\"", "\"deployments/scale\""),
                    patch(
                        r#"object.spec.replicas > 5 ? [JSONPatch{op: "replace", path: "/spec/replicas", value: 5}] : []"#
                    )
                ),
            ),
            vec![
                update(
                    "scale to 10 (capped)",
                    &at(DEPLOYS, "web/scale"),
                    json!({"spec": {"replicas": 10}}),
                ),
                update(
                    "scale to 3",
                    &at(DEPLOYS, "web/scale"),
                    json!({"spec": {"replicas": 3}}),
                ),
                update(
                    "deployment itself to 10 (not matched)",
                    &at(DEPLOYS, "web"),
                    json!({"spec": {"replicas": 10}}),
                ),
            ],
        )
        .setup(&deploy_yaml("web", 1)),
    );
    // A Scale is no typed object to apply a configuration to, and a custom resource's Scale
    // cannot be converted for a mutation at all: kube-apiserver denies both.
    s.push(
        Scenario::new(
            "context",
            "subresource-scale-apply",
            mpb(
                "subresource-scale-apply",
                &format!(
                    "{}mutations:\n{}",
                    rule("apps", "\"UPDATE\"", "\"deployments/scale\""),
                    apply(r#"Object{spec: Object.spec{replicas: 5}}"#)
                ),
            ),
            vec![update(
                "scale to 10",
                &at(DEPLOYS, "web/scale"),
                json!({"spec": {"replicas": 10}}),
            )],
        )
        .setup(&deploy_yaml("web", 1)),
    );
    for (name, mutation) in [
        (
            "subresource-scale-custom-patch",
            patch(r#"[JSONPatch{op: "replace", path: "/spec/replicas", value: 5}]"#),
        ),
        (
            "subresource-scale-custom-apply",
            apply(r#"Object{spec: Object.spec{replicas: 5}}"#),
        ),
    ] {
        s.push(
            Scenario::new(
                "context",
                name,
                mpb(
                    name,
                    &format!(
                        "{}mutations:\n{mutation}",
                        rule("diff.example.com", "\"UPDATE\"", "\"widgets/scale\"")
                    ),
                ),
                vec![update(
                    "scale to 10",
                    &at(WIDGETS, "scaled/scale"),
                    json!({"spec": {"replicas": 10}}),
                )],
            )
            .setup("apiVersion: diff.example.com/v1\nkind: Widget\nmetadata:\n  name: scaled\n  namespace: \"{{ns}}\"\nspec:\n  size: 1\n---\n"),
        );
    }
    // Other subresources of built-in kinds: a Pod's ephemeral containers, by either patch type.
    for (name, mutation) in [
        (
            "subresource-ephemeral-apply",
            apply(
                r#"Object{spec: Object.spec{ephemeralContainers: [Object.spec.ephemeralContainers{name: "debug", image: "registry.example/debug:2"}]}}"#,
            ),
        ),
        (
            "subresource-ephemeral-patch",
            patch(
                r#"[JSONPatch{op: "replace", path: "/spec/ephemeralContainers/0/image", value: "registry.example/debug:2"}]"#,
            ),
        ),
    ] {
        s.push(
            Scenario::new(
                "context",
                name,
                mpb(
                    name,
                    &format!(
                        "{}mutations:\n{mutation}",
                        rule("", "\"UPDATE\"", "\"pods/ephemeralcontainers\"")
                    ),
                ),
                vec![update(
                    "add a debug container",
                    &at(PODS, "debugged/ephemeralcontainers"),
                    json!({"spec": {"ephemeralContainers": [{"name": "debug", "image": "registry.example/debug:1", "targetContainerName": "c"}]}}),
                )],
            )
            .setup("apiVersion: v1\nkind: Pod\nmetadata:\n  name: debugged\n  namespace: \"{{ns}}\"\nspec:\n  containers: [{name: c, image: registry.example/app:1}]\n---\n"),
        );
    }
    s.push(
        Scenario::new(
            "context",
            "subresource-status",
            mpb(
                "subresource-status",
                &format!(
                    "{}mutations:\n{}",
                    rule("apps", "\"UPDATE\"", "\"deployments/status\""),
                    apply(
                        r#"Object{metadata: Object.metadata{labels: {"status-touched": "yes"}}, status: Object.status{collisionCount: 7}}"#
                    )
                ),
            ),
            vec![
                update(
                    "status update",
                    &at(DEPLOYS, "web/status"),
                    json!({"status": {"observedGeneration": 1}}),
                ),
                update(
                    "main resource (not matched)",
                    &at(DEPLOYS, "web"),
                    json!({"metadata": {"labels": {"x": "y"}}}),
                ),
            ],
        )
        .setup(&deploy_yaml("web", 1)),
    );
    s.push(Scenario::new(
        "context",
        "match-conditions",
        mpb(
            "match-conditions",
            &format!(
                "{}matchConditions:\n- name: opted-in\n  expression: \"has(object.metadata.labels) && 'inject' in object.metadata.labels\"\n- name: not-skipped\n  expression: \"!object.metadata.name.startsWith('skip-')\"\n- name: flag-on\n  expression: \"object.data.flag == 'on'\"\nmutations:\n{}",
                cm_rule("\"CREATE\""),
                apply(r#"Object{metadata: Object.metadata{annotations: {"injected": "true"}}}"#)
            ),
        ),
        vec![
            create(
                "opted in, flag on",
                CMS,
                cm_meta("in", json!({"labels": {"inject": "1"}}), json!({"flag": "on"})),
            ),
            create("not opted in", CMS, cm("out", json!({"flag": "on"}))),
            create(
                "skip- prefix",
                CMS,
                cm_meta("skip-me", json!({"labels": {"inject": "1"}}), json!({"flag": "on"})),
            ),
            create(
                "opted in, no data (condition errors)",
                CMS,
                cm_meta("nodata", json!({"labels": {"inject": "1"}}), Value::Null),
            ),
        ],
    ));
    s.push(Scenario::new(
        "context",
        "variables",
        mpb(
            "variables",
            &format!(
                "{}variables:\n- name: team\n  expression: \"has(object.metadata.labels) && 'team' in object.metadata.labels ? object.metadata.labels['team'] : 'none'\"\n- name: owner\n  expression: \"variables.team + '@example.com'\"\nmutations:\n{}",
                cm_rule("\"CREATE\""),
                apply(r#"Object{metadata: Object.metadata{annotations: {"owner": variables.owner}}}"#)
            ),
        ),
        vec![
            create(
                "team=blue",
                CMS,
                cm_meta("blue", json!({"labels": {"team": "blue"}}), json!({})),
            ),
            create("no team", CMS, cm("none", json!({}))),
        ],
    ));
    s.push(
        Scenario::new(
            "context",
            "namespace-object",
            mpb(
                "namespace-object",
                &format!(
                    "{}mutations:\n{}",
                    cm_rule("\"CREATE\""),
                    apply(
                        r#"Object{metadata: Object.metadata{labels: {"team": namespaceObject.metadata.labels['team'], "user": request.userInfo.username.split(':')[0]}}}"#
                    )
                ),
            ),
            vec![create("configmap", CMS, cm("c", json!({})))],
        )
        .labels(json!({"team": "orange"})),
    );
    s.push(Scenario::new(
        "context",
        "binding-object-selector",
        docs(&[
            map_policy(
                "binding-object-selector",
                &format!(
                    "{}mutations:\n{}",
                    cm_rule("\"CREATE\""),
                    apply(r#"Object{data: {"selected": "yes"}}"#)
                ),
            ),
            map_binding(
                "binding-object-selector-binding",
                "binding-object-selector",
                &(scoped() + "  objectSelector:\n    matchLabels: {mutate: \"yes\"}\n"),
            ),
        ]),
        vec![
            create(
                "labelled",
                CMS,
                cm_meta("in", json!({"labels": {"mutate": "yes"}}), json!({})),
            ),
            create("not labelled", CMS, cm("out", json!({}))),
        ],
    ));

    // ---------------------------------------------------------------- CONNECT
    // `kubectl exec`, `attach` and `port-forward` into a Pod no node runs: the mutated options
    // are what kube-apiserver connects with (a container the Pod lacks fails the connection).
    let pod_p = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: \"{{ns}}\"\nspec:\n  containers:\n  - {name: a, image: registry.example/app:1}\n  - {name: b, image: registry.example/app:1}\n---\n";
    let exec = |label: &str, container: &str| {
        connect(
            label,
            "exec",
            &[
                ("container", container),
                ("command", "ls"),
                ("stdout", "true"),
            ],
        )
    };
    s.push(
        Scenario::new(
            "connect",
            "connect-container-params",
            docs(&[
                map_policy(
                    "connect-container-params",
                    r#"
paramKind: {apiVersion: v1, kind: ConfigMap}
matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CONNECT"], resources: ["pods/exec", "pods/attach"]}
matchConditions:
- name: not-breakglass
  expression: "!('breakglass' in request.userInfo.groups)"
failurePolicy: Fail
mutations:
- patchType: JSONPatch
  jsonPatch:
    expression: "[JSONPatch{op: 'add', path: '/container', value: params.data.container + '-' + request.userInfo.username + '-' + object.kind + '-' + string(oldObject == null)}]"
"#,
                ),
                map_binding(
                    "connect-container-params-binding",
                    "connect-container-params",
                    &(scoped()
                        + "paramRef: {name: exec-defaults, namespace: \"{{ns2}}\", parameterNotFoundAction: Deny}\n"),
                ),
            ]),
            vec![
                exec("exec into a as bob", "a").impersonating("bob", &["devs"]),
                exec("exec into a as breakglass", "a").impersonating("carol", &["breakglass"]),
                connect("attach to b", "attach", &[("container", "b"), ("stdout", "true")])
                    .impersonating("bob", &["devs"]),
            ],
        )
        .setup(&(pod_p.to_string()
            + "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: exec-defaults\n  namespace: \"{{ns2}}\"\ndata: {container: debug}\n---\n")),
    );
    // A validating policy after the mutation sees the options kube-apiserver connects with.
    s.push(
        Scenario::new(
            "connect",
            "connect-options-seen",
            docs(&[
                map_policy(
                    "connect-options-seen",
                    r#"
matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CONNECT"], resources: ["pods/exec", "pods/attach", "pods/portforward"]}
failurePolicy: Fail
mutations:
- patchType: JSONPatch
  jsonPatch:
    expression: >
      request.subResource == 'exec' ? [JSONPatch{op: 'replace', path: '/command', value: ['audit-wrap'] + object.command}, JSONPatch{op: 'add', path: '/tty', value: false}] :
      request.subResource == 'attach' ? [JSONPatch{op: 'add', path: '/stdin', value: true}] :
      [JSONPatch{op: 'add', path: '/ports/-', value: 9090}]
"#,
                ),
                map_binding(
                    "connect-options-seen-binding",
                    "connect-options-seen",
                    &scoped(),
                ),
                vpb(
                    "connect-options-shown",
                    r#"matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CONNECT"], resources: ["pods/exec", "pods/attach", "pods/portforward"]}
validations:
- expression: "false"
  messageExpression: "'saw ' + request.subResource + ': ' + (request.subResource == 'portforward' ? object.ports.map(p, string(p)).join(',') : request.subResource == 'exec' ? object.command.join(' ') + ' in ' + object.container + ', tty set ' + string(has(object.tty)) : object.container + ', stdin ' + string(has(object.stdin) && object.stdin))"
"#,
                ),
            ]),
            vec![
                exec("exec ls", "a"),
                connect("attach", "attach", &[("container", "b"), ("stdout", "true")]),
                connect("port-forward 80", "portforward", &[("ports", "80")]),
            ],
        )
        .setup(pod_p),
    );
    // What a connection's options cannot take, as in-tree refuses it: an apply configuration
    // (no typed model of the options), an unknown field or a value of the wrong type.
    s.push(
        Scenario::new(
            "connect",
            "connect-refused-patches",
            docs(&[
                mpb(
                    "connect-apply",
                    &format!(
                        "{}failurePolicy: Fail\nmutations:\n{}",
                        rule("", "\"CONNECT\"", "\"pods/exec\""),
                        apply("Object{container: 'b'}")
                    ),
                ),
                mpb(
                    "connect-json",
                    &format!(
                        "{}failurePolicy: Fail\nmutations:\n{}",
                        rule("", "\"CONNECT\"", "\"pods/attach\", \"pods/portforward\""),
                        patch(
                            "request.subResource == 'attach' ? [JSONPatch{op: 'add', path: '/bogus', value: 'x'}] : [JSONPatch{op: 'add', path: '/ports/-', value: 'http'}]"
                        )
                    ),
                ),
            ]),
            vec![
                exec("exec (apply configuration)", "a"),
                connect("attach (unknown field)", "attach", &[("container", "a"), ("stdout", "true")]),
                connect("port-forward (string port)", "portforward", &[("ports", "80")]),
            ],
        )
        .setup(pod_p),
    );

    s
}

// ------------------------------------------------------------------------------------------
// What one request gave
// ------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
struct Outcome {
    allowed: bool,
    code: u16,
    reason: String,
    /// The inner message: after `admission webhook "<name>" denied the request: ` (celgate) or
    /// `<resource> "<name>" is forbidden: ` (in-tree validating policies); the whole message
    /// otherwise.
    message: String,
    warnings: Vec<String>,
    /// The returned object without server-managed fields; `Null` for a failed request.
    object: Value,
}

fn describe(o: &Outcome) -> String {
    let mut s = format!(
        "{} {} {}",
        if o.allowed { "allowed" } else { "denied" },
        o.code,
        o.reason
    );
    if !o.message.is_empty() {
        let _ = write!(s, " {:?}", o.message);
    }
    for w in &o.warnings {
        let _ = write!(s, "\n        warning {w:?}");
    }
    s
}

fn differences(a: &Outcome, b: &Outcome) -> Vec<String> {
    let mut d: Vec<String> = [
        differential::difference("allowed", &a.allowed, &b.allowed, true),
        differential::difference("code", &a.code, &b.code, true),
        differential::difference("reason", &a.reason, &b.reason, true),
        differential::difference("message", &a.message, &b.message, false),
        differential::difference("warnings", &a.warnings, &b.warnings, false),
    ]
    .into_iter()
    .flatten()
    .collect();
    json_differences("", &a.object, &b.object, &mut d);
    d
}

// ------------------------------------------------------------------------------------------
// The harness
// ------------------------------------------------------------------------------------------

/// How long a sentinel or a webhook rule may take to be in force.
const IN_FORCE: Duration = Duration::from_secs(30);

/// Who plays a phase: nobody (the baseline) or an engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Baseline,
    With(Engine),
}

struct Harness<'c> {
    driver: Driver<'c>,
}

impl Harness<'_> {
    async fn play(&self, sc: &Scenario, phase: Phase, req: &Req) -> Outcome {
        let engine = match phase {
            Phase::Baseline => None,
            Phase::With(e) => Some(e),
        };
        let body: Value = serde_json::from_str(&sc.render(&req.body.to_string(), engine))
            .unwrap_or_else(|e| panic!("request body of {:?}: {e}", req.label));
        let (path, body) = if req.connect {
            (sc.render(&req.path, engine), None)
        } else {
            (
                format!("{}?dryRun=All", sc.render(&req.path, engine)),
                Some(&body),
            )
        };
        let mut headers = Vec::new();
        if let Some((user, groups)) = &req.user {
            headers.push(("Impersonate-User".to_string(), user.clone()));
            for g in groups {
                headers.push(("Impersonate-Group".to_string(), g.clone()));
            }
        }
        let resp = self.driver.http(req.method, &path, body, &headers);
        let connected = req.connect && resp.code == 400 && resp.reason() == "BadRequest";
        let allowed = resp.allowed() || connected;
        let mut warnings = resp.warnings.clone();
        warnings.sort();
        Outcome {
            allowed,
            code: resp.code,
            reason: resp.reason(),
            message: inner_message(&resp.message()).to_string(),
            warnings,
            object: if resp.allowed() {
                strip_server_managed(resp.body)
            } else {
                Value::Null
            },
        }
    }

    /// Proves the engine's objects (applied or deleted just before) in force.
    async fn settle(&mut self, sc: &Scenario, engine: Engine) {
        self.driver
            .bump_mutating_sentinel(engine, IN_FORCE)
            .await
            .unwrap_or_else(|e| panic!("[{}] {e}", sc.name));
        if sc.has_validating() {
            self.driver.bump_sentinel(engine).await;
        }
    }

    /// One phase: apply, prove in force, play, delete, prove gone.
    async fn phase(&mut self, sc: &Scenario, phase: Phase) -> Vec<Outcome> {
        let Phase::With(engine) = phase else {
            let mut outcomes = Vec::new();
            for req in &sc.requests {
                outcomes.push(self.play(sc, phase, req).await);
            }
            return outcomes;
        };
        let yaml = sc.render(&sc.policies, Some(engine));
        self.driver.apply_policies(&yaml).await;
        if engine == Engine::Celgate {
            self.driver
                .wait_mutating_rules(&yaml, IN_FORCE)
                .await
                .unwrap_or_else(|e| panic!("[{}] {e}", sc.name));
            if sc.has_validating() {
                self.driver.wait_validating_rules(&yaml).await;
            }
        }
        self.settle(sc, engine).await;
        let mut outcomes = Vec::new();
        for req in &sc.requests {
            outcomes.push(self.play(sc, phase, req).await);
        }
        self.driver.delete_policies(&yaml).await;
        self.settle(sc, engine).await;
        outcomes
    }
}

// ------------------------------------------------------------------------------------------
// Global fixtures
// ------------------------------------------------------------------------------------------

/// A namespaced kind with a structural schema: a granular map (`settings`, any keys), a `set`
/// list, a `map` list keyed by name, an atomic struct, an atomic (default) list and a struct
/// of maps (`extra`).
const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.diff.example.com
spec:
  group: diff.example.com
  names: {kind: Widget, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              example: {type: string}
              size: {type: integer}
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
              selector:
                type: object
                x-kubernetes-map-type: atomic
                properties:
                  matchLabels:
                    type: object
                    additionalProperties: {type: string}
              args:
                type: array
                items: {type: string}
              settings:
                type: object
                additionalProperties: {type: string}
              extra:
                type: object
                properties:
                  drop:
                    type: object
                    additionalProperties: {type: string}
                  nested:
                    type: object
                    additionalProperties: {type: integer}
                  keep: {type: string}
          status:
            type: object
            properties:
              size: {type: integer}
    subresources:
      scale: {specReplicasPath: .spec.size, statusReplicasPath: .status.size}
"#;

/// An in-tree MutatingAdmissionPolicy that keeps the ConfigMap paramKind bound for the whole run
/// (kubernetes#130887 freezes the in-tree param cache otherwise). It matches a resource nobody
/// requests.
fn keeper() -> String {
    docs(&[
        map_policy(
            "keep-configmap-mutating",
            &format!(
                "paramKind: {{apiVersion: v1, kind: ConfigMap}}\n{}mutations:\n{}",
                rule("keep.example.com", "\"CREATE\"", "\"nevers\""),
                apply("Object{}")
            ),
        ),
        map_binding(
            "keep-configmap-mutating-binding",
            "keep-configmap-mutating",
            "paramRef: {name: none, namespace: default, parameterNotFoundAction: Allow}\n",
        ),
    ])
    .replace("{{map_api}}", Engine::InTree.map_api())
}

// ------------------------------------------------------------------------------------------
// The test
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_tree_and_celgate_mutate_alike() {
    let started = Instant::now();
    let table = scenarios();
    let only = std::env::var("CELGATE_DIFF_ONLY").ok();
    let selected = differential::select(&table, |sc| sc.name, only.as_deref())
        .unwrap_or_else(|e| panic!("{e}"));

    let cluster = Cluster::start_with(&in_tree_map_flags(version::minor()));
    cluster.install_crds();
    let celgate = Celgate::start(&cluster).await;
    let driver = Driver::new(&cluster).await;
    driver.kubectl_apply(WIDGET_CRD);
    cluster.wait_established(&["crd/widgets.diff.example.com"]);
    driver.sentinel_namespaces().await;
    driver.apply_policies(&keeper()).await;
    let mut h = Harness { driver };
    for e in [Engine::InTree, Engine::Celgate] {
        h.driver
            .bump_mutating_sentinel(e, IN_FORCE)
            .await
            .unwrap_or_else(|err| panic!("{err}"));
    }
    for e in [Engine::InTree, Engine::Celgate] {
        h.driver.bump_sentinel(e).await;
    }
    eprintln!(
        "mutating differential: control plane and celgate ready after {:?}",
        started.elapsed()
    );

    let mut report = String::new();
    let mut differing = Vec::new();
    let mut difference_count = 0usize;
    let mut inert = Vec::new();
    for &sc in &selected {
        let t = Instant::now();
        h.driver.namespace(&sc.ns(), &sc.ns_labels).await;
        h.driver.namespace(&sc.ns2(), &sc.ns_labels).await;
        if !sc.setup.trim().is_empty() {
            h.driver.kubectl_apply(&sc.render(&sc.setup, None));
        }
        let baseline = h.phase(sc, Phase::Baseline).await;
        let theirs = h.phase(sc, Phase::With(Engine::InTree)).await;
        let ours = h.phase(sc, Phase::With(Engine::Celgate)).await;
        if baseline == theirs {
            inert.push(sc.name);
        }
        let mut diffs = String::new();
        for ((req, a), b) in sc.requests.iter().zip(&theirs).zip(&ours) {
            let d = differences(a, b);
            if !d.is_empty() {
                difference_count += 1;
                let _ = writeln!(
                    diffs,
                    "  request {:?} ({} {}):",
                    req.label,
                    req.method,
                    sc.render(&req.path, None)
                );
                for line in d {
                    let _ = writeln!(diffs, "    {line}");
                }
            }
        }
        eprintln!(
            "[{}/{}] {:>2} requests  {:<9} {:?}{}",
            sc.topic,
            sc.name,
            sc.requests.len(),
            if diffs.is_empty() {
                "same"
            } else {
                "DIFFERENT"
            },
            t.elapsed(),
            if baseline == theirs {
                "  (INERT: in-tree gave the baseline's outcome for every request)"
            } else {
                ""
            }
        );
        for ((req, a), base) in sc.requests.iter().zip(&theirs).zip(&baseline) {
            let mut changed = Vec::new();
            json_differences("", &base.object, &a.object, &mut changed);
            eprintln!(
                "      {:<48} {}{}",
                req.label,
                describe(a),
                if a.allowed && base.allowed {
                    format!("  ({} change(s) from baseline)", changed.len())
                } else {
                    String::new()
                }
            );
        }
        if !diffs.is_empty() {
            eprint!("{diffs}");
            differing.push(sc.name);
            let _ = writeln!(report, "scenario {} ({}):", sc.name, sc.topic);
            report.push_str(&diffs);
        }
    }
    assert!(
        !celgate.logs().contains("panicked"),
        "celgate panicked:\n{}",
        celgate.logs()
    );
    eprintln!(
        "mutating differential: {} scenarios in {:?}; {} differ ({difference_count} requests), {} inert",
        selected.len(),
        started.elapsed(),
        differing.len(),
        inert.len()
    );
    if !report.is_empty() {
        eprintln!("\n===== differences (in-tree vs celgate) =====\n{report}");
    }
    assert!(
        differing.is_empty(),
        "{} scenario(s) differ ({difference_count} requests): {differing:?}\n{report}",
        differing.len()
    );
    assert!(
        inert.is_empty(),
        "scenario(s) {inert:?}: every request gave the same outcome in-tree as without policies, \
         so comparing them proves nothing; add a request the policies act on"
    );
}

/// celgate's opt-in (beyond upstream, issue 11 item 6): the annotation that gives a policy full
/// server-side-apply semantics for atomic values.
const APPLY_SEMANTICS: &str = "admission.celgate.io/apply-semantics: server-side";

/// The documentation's sidecar example is rejected in-tree (an initContainer's `args` is an
/// atomic list); under celgate's opt-in it works as documented, and without the opt-in celgate
/// gives the in-tree rejection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_opt_in_runs_the_docs_sidecar_example_and_its_absence_keeps_upstream_behaviour() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let celgate = Celgate::start(&cluster).await;
    let driver = Driver::new(&cluster).await;
    driver.sentinel_namespaces().await;
    let mut h = Harness { driver };
    let sc = Scenario::new(
        "opt-in",
        "opt-in-sidecar",
        mpb("opt-in-sidecar", &docs_sidecar(true)),
        vec![create("pod of the docs", PODS, docs_pod("myapp"))],
    );
    h.driver.namespace(&sc.ns(), &json!({})).await;
    let plain = sc.render(&sc.policies, Some(Engine::Celgate));
    let opted_in = plain.replacen(
        "  name: opt-in-sidecar\n",
        &format!("  name: opt-in-sidecar\n  annotations: {{{APPLY_SEMANTICS}}}\n"),
        1,
    );
    assert_ne!(plain, opted_in, "the annotation was not placed");

    for (yaml, opt_in) in [(&opted_in, true), (&plain, false)] {
        h.driver.apply_policies(yaml).await;
        h.driver
            .wait_mutating_rules(yaml, IN_FORCE)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        h.driver
            .bump_mutating_sentinel(Engine::Celgate, IN_FORCE)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let o = h
            .play(&sc, Phase::With(Engine::Celgate), &sc.requests[0])
            .await;
        if opt_in {
            assert!(o.allowed, "opted in: {}", describe(&o));
            let init = o.object["spec"]["initContainers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let names: Vec<&str> = init.iter().filter_map(|c| c["name"].as_str()).collect();
            assert!(
                names.contains(&"myapp-initializer") && names.contains(&"mesh-proxy"),
                "opted in: initContainers {names:?}"
            );
            let proxy = init
                .iter()
                .find(|c| c["name"] == "mesh-proxy")
                .cloned()
                .unwrap_or_default();
            assert_eq!(proxy["args"], json!(["proxy", "sidecar"]), "{proxy}");
            assert_eq!(proxy["restartPolicy"], "Always", "{proxy}");
            assert_eq!(proxy["image"], "mesh/proxy:v1.0.0", "{proxy}");
        } else {
            assert!(!o.allowed, "without the opt-in: {}", describe(&o));
            assert_eq!(o.code, 403, "{}", describe(&o));
            assert_eq!(
                o.message,
                "policy 'opt-in-sidecar' with binding 'opt-in-sidecar-binding' denied request: \
                 error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, \
                 maps or structs: .spec.initContainers[0].args"
            );
        }
        h.driver.delete_policies(yaml).await;
    }
    assert!(
        !celgate.logs().contains("panicked"),
        "celgate panicked:\n{}",
        celgate.logs()
    );
}

// ------------------------------------------------------------------------------------------
// The checks above, without a cluster
// ------------------------------------------------------------------------------------------

#[test]
fn the_table_has_thirty_uniquely_named_scenarios_of_mutating_policies() {
    let table = scenarios();
    assert!(table.len() >= 30, "only {} scenarios", table.len());
    let mut names: Vec<_> = table.iter().map(|s| s.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), table.len(), "scenario names must be unique");
    for sc in &table {
        let docs = parse_docs(&sc.render(&sc.policies, Some(Engine::Celgate)));
        let policies: Vec<&Value> = docs
            .iter()
            .filter(|d| d["kind"] == "MutatingAdmissionPolicy")
            .collect();
        assert!(
            !policies.is_empty(),
            "{} has no MutatingAdmissionPolicy",
            sc.name
        );
        for p in &policies {
            assert!(
                p["spec"]["reinvocationPolicy"].is_string(),
                "{}: reinvocationPolicy has no default and must be set",
                sc.name
            );
            let name = &p["metadata"]["name"];
            assert!(
                docs.iter()
                    .any(|d| d["kind"] == "MutatingAdmissionPolicyBinding"
                        && d["spec"]["policyName"] == *name),
                "{}: policy {name} has no binding",
                sc.name
            );
        }
        assert!(
            docs.iter()
                .all(|d| d["apiVersion"] == Engine::Celgate.api()),
            "{}: every object takes the engine's apiVersion",
            sc.name
        );
        assert!(!sc.requests.is_empty(), "{} plays no request", sc.name);
    }
}

#[test]
fn server_managed_fields_are_not_compared_but_everything_else_is() {
    let a = json!({"metadata": {"name": "c", "uid": "1", "resourceVersion": "5",
        "creationTimestamp": "t", "managedFields": [{}], "labels": {"a": "1"}}, "data": {"x": "1"}});
    let b = json!({"metadata": {"name": "c", "uid": "2", "resourceVersion": "9",
        "creationTimestamp": "u", "labels": {"a": "1"}}, "data": {"x": "1"}});
    assert_eq!(strip_server_managed(a.clone()), strip_server_managed(b));
    let c = json!({"metadata": {"name": "c", "labels": {"a": "2"}}, "data": {"x": "1"}});
    let mut d = Vec::new();
    json_differences("", &strip_server_managed(a), &c, &mut d);
    assert_eq!(
        d,
        ["object /metadata/labels/a: in-tree \"1\" vs celgate \"2\""]
    );
}

#[test]
fn outcomes_differ_by_decision_message_and_object() {
    let allowed = Outcome {
        allowed: true,
        code: 201,
        reason: String::new(),
        message: String::new(),
        warnings: Vec::new(),
        object: json!({"metadata": {"labels": {"a": "1"}}}),
    };
    assert!(differences(&allowed, &allowed.clone()).is_empty());
    let denied = Outcome {
        allowed: false,
        code: 403,
        reason: "Invalid".into(),
        message: "policy 'p' with binding 'b' denied request: x".into(),
        object: Value::Null,
        ..allowed.clone()
    };
    let d = differences(&allowed, &denied);
    assert!(d.iter().any(|l| l.starts_with("allowed:")), "{d:?}");
    assert!(d.iter().any(|l| l.starts_with("code:")), "{d:?}");
    assert!(d.iter().any(|l| l.starts_with("message:")), "{d:?}");
    assert!(d.iter().any(|l| l.starts_with("object /:")), "{d:?}");
    let relabelled = Outcome {
        object: json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
        ..allowed.clone()
    };
    assert_eq!(
        differences(&allowed, &relabelled),
        ["object /metadata/labels/b: in-tree null vs celgate \"2\""]
    );
}
