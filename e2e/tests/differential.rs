//! The differential suite: a table of scenarios (policy + binding + params + setup objects + a
//! sequence of requests), each played twice against ONE control plane and ONE celgate process —
//! once with in-tree `admissionregistration.k8s.io/v1` objects, once with celgate's
//! `admission.celgate.io/v1` objects (only the apiVersion differs) — comparing per request: allowed,
//! HTTP code and reason, the inner message (after kube-apiserver's prefix), the warnings (from the
//! `Warning` response headers) and the audit annotations (from the audit log, matched by the
//! request's `Audit-ID`, with celgate's documented key mapping undone).
//!
//! The phases run one after another per scenario: the engine's objects are applied, a sentinel
//! policy proves they are in force (see [`Harness::bump_sentinel`]), the requests are played over
//! HTTPS with curl (so warnings, codes and impersonation are those of the wire), the objects are
//! deleted and the sentinel proves they are gone. In-tree keeper bindings hold every paramKind
//! bound for the whole run (kubernetes#130887 freezes the in-tree param cache otherwise).
//!
//! Every scenario must show that its policies acted: in the in-tree phase at least one of its
//! requests is denied or warned by one of them, or carries an audit annotation of one of them;
//! a scenario where nothing happens would compare "same" whatever celgate did. A scenario about
//! a policy that must not act therefore also holds a request it does act on.
//! `CELGATE_DIFF_ONLY=<prefix>[,<prefix>…]` plays only the scenarios whose names start with one of
//! the prefixes; a prefix that selects no scenario fails the test.
//!
//! Scenarios marked `known` differ because of a documented celgate limitation or a reported bug:
//! they are still played and their differences printed; the test fails if they stop differing (so
//! the mark gets removed) and, with `CELGATE_DIFF_STRICT=1`, also when they differ.

use std::fmt::Write as _;
use std::time::Instant;

use celgate_e2e::audit::{AuditLog, IN_TREE_FAILURE_KEY, normalise_audit};
use celgate_e2e::differential::{self, Driver, Engine, docs, indent, parse_docs};
use celgate_e2e::{Celgate, Cluster, version};
use serde_json::{Value, json};

// ------------------------------------------------------------------------------------------
// Scenarios and requests
// ------------------------------------------------------------------------------------------

/// One scenario. Placeholders in every text: `{{api}}` (the engine's apiVersion), `{{ns}}` and
/// `{{ns2}}` (the scenario's two namespaces, `d-<name>` and `d-<name>-2`, created with
/// `ns_labels` / `ns2_labels` before `setup`).
struct Scenario {
    topic: &'static str,
    name: &'static str,
    ns_labels: Value,
    ns2_labels: Value,
    /// Engine-independent objects (kubectl apply), created once before both phases.
    setup: String,
    /// ValidatingAdmissionPolicies and bindings (`{{api}}`), applied per engine.
    policies: String,
    requests: Vec<Req>,
    /// Why this scenario is expected to differ (a known limitation or a reported bug).
    known: Option<&'static str>,
}

impl Scenario {
    fn new(topic: &'static str, name: &'static str, policies: String, requests: Vec<Req>) -> Self {
        Scenario {
            topic,
            name,
            ns_labels: json!({}),
            ns2_labels: json!({}),
            setup: String::new(),
            policies,
            requests,
            known: None,
        }
    }

    fn labels(mut self, ns: Value, ns2: Value) -> Self {
        self.ns_labels = ns;
        self.ns2_labels = ns2;
        self
    }

    fn setup(mut self, yaml: &str) -> Self {
        self.setup = yaml.to_string();
        self
    }

    fn ns(&self) -> String {
        format!("d-{}", self.name)
    }

    fn ns2(&self) -> String {
        format!("d-{}-2", self.name)
    }

    fn render(&self, text: &str, engine: Option<Engine>) -> String {
        let mut t = text
            .replace("{{ns2}}", &self.ns2())
            .replace("{{ns}}", &self.ns());
        if let Some(e) = engine {
            t = t.replace("{{api}}", e.api());
        }
        t
    }
}

#[derive(Clone, Debug)]
struct Req {
    label: String,
    method: &'static str,
    path: String,
    body: Option<Value>,
    dry_run: bool,
    query: Vec<(String, String)>,
    /// Impersonated user and groups (the admin is `system:masters` and may impersonate).
    user: Option<(String, Vec<String>)>,
    extra: Vec<(String, String)>,
    /// A CONNECT: admission runs before kube-apiserver reaches a kubelet, and there is none,
    /// so a connection admission lets through fails afterwards (`pod … does not have a host
    /// assigned`); such a failure counts as allowed, with its code and message compared.
    connect: bool,
}

impl Req {
    fn new(label: &str, method: &'static str, path: &str, body: Option<Value>) -> Self {
        Req {
            label: label.to_string(),
            method,
            path: path.to_string(),
            body,
            dry_run: true,
            query: Vec::new(),
            user: None,
            extra: Vec::new(),
            connect: false,
        }
    }

    /// Impersonates `user` in `groups` (plus `system:masters`, so authorization passes).
    fn impersonating(mut self, user: &str, groups: &[&str]) -> Self {
        let mut g: Vec<String> = groups.iter().map(|s| s.to_string()).collect();
        g.push("system:masters".into());
        self.user = Some((user.to_string(), g));
        self
    }

    fn extra(mut self, key: &str, value: &str) -> Self {
        self.extra.push((key.to_string(), value.to_string()));
        self
    }

    /// Not a dry run (only for requests every engine denies, so nothing is stored).
    fn for_real(mut self) -> Self {
        self.dry_run = false;
        self
    }

    fn param(mut self, key: &str, value: &str) -> Self {
        self.query.push((key.to_string(), value.to_string()));
        self
    }
}

fn create(label: &str, path: &str, body: Value) -> Req {
    Req::new(label, "POST", path, Some(body))
}

/// A JSON merge patch: an UPDATE in admission.
fn update(label: &str, path: &str, patch: Value) -> Req {
    Req::new(label, "PATCH", path, Some(patch))
}

fn delete(label: &str, path: &str) -> Req {
    Req::new(label, "DELETE", path, None)
}

/// A CONNECT to `subresource` of Pod `pod` (`exec`, `attach`, `portforward`) with these query
/// parameters, as `kubectl exec`, `attach` and `port-forward` send it (POST; connections take no
/// dry run).
fn connect(label: &str, pod: &str, subresource: &str, query: &[(&str, &str)]) -> Req {
    let mut req = Req::new(label, "POST", &format!("{PODS}/{pod}/{subresource}"), None).for_real();
    req.connect = true;
    for (k, v) in query {
        req = req.param(k, v);
    }
    req
}

const CMS: &str = "/api/v1/namespaces/{{ns}}/configmaps";
const CMS2: &str = "/api/v1/namespaces/{{ns2}}/configmaps";
const SECRETS: &str = "/api/v1/namespaces/{{ns}}/secrets";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/{{ns}}/deployments";
const PODS: &str = "/api/v1/namespaces/{{ns}}/pods";
const CLUSTERROLES: &str = "/apis/rbac.authorization.k8s.io/v1/clusterroles";
const NAMESPACES: &str = "/api/v1/namespaces";

fn at(collection: &str, name: &str) -> String {
    format!("{collection}/{name}")
}

fn cm(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn cm_labeled(name: &str, labels: Value, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels}, "data": data})
}

fn secret(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "stringData": {"k": "v"}})
}

fn clusterrole(name: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": []})
}

fn namespace_obj(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
}

fn deployment(name: &str, replicas: i64) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}}})
}

// YAML builders. Specs are written at column 0 and indented here.

fn policy(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: \"{{{{api}}}}\"\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {name}\nspec:\n{}",
        indent(spec, 2)
    )
}

fn binding(name: &str, policy: &str, spec: &str) -> String {
    format!(
        "apiVersion: \"{{{{api}}}}\"\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: {name}\nspec:\n  policyName: {policy}\n{}",
        indent(spec, 2)
    )
}

/// A policy `<name>` and its binding `<name>-binding`.
fn pb(name: &str, policy_spec: &str, binding_spec: &str) -> String {
    docs(&[
        policy(name, policy_spec),
        binding(&format!("{name}-binding"), name, binding_spec),
    ])
}

/// Binding spec: the given actions, scoped to the scenario's namespaces (cluster-scoped requests
/// are not filtered by a namespaceSelector).
fn scoped(actions: &str) -> String {
    format!(
        "validationActions: [{actions}]\nmatchResources:\n  namespaceSelector:\n    matchExpressions:\n    - {{key: kubernetes.io/metadata.name, operator: In, values: [\"{{{{ns}}}}\", \"{{{{ns2}}}}\"]}}\n"
    )
}

fn deny() -> String {
    scoped("Deny")
}

/// `matchConstraints` for the given operations on core `resources`.
fn core_rule(ops: &str, resources: &str) -> String {
    format!(
        "matchConstraints:\n  resourceRules:\n  - apiGroups: [\"\"]\n    apiVersions: [\"v1\"]\n    operations: [{ops}]\n    resources: [{resources}]\n"
    )
}

fn cm_rule(ops: &str) -> String {
    core_rule(ops, "\"configmaps\"")
}

fn cm_yaml(name: &str, ns: &str, labels: &str, data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: \"{ns}\"\n  labels: {labels}\ndata: {data}\n---\n"
    )
}

fn deploy_yaml(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: \"{{{{ns}}}}\"\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, image: registry.example/app:1}}]}}\n---\n"
    )
}

fn pod_yaml(name: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: \"{{{{ns}}}}\"\nspec: {{containers: [{{name: c, image: registry.example/app:1}}]}}\n---\n"
    )
}

// ------------------------------------------------------------------------------------------
// The table
// ------------------------------------------------------------------------------------------

fn scenarios() -> Vec<Scenario> {
    let mut s = Vec::new();

    // ---------------------------------------------------------------- resource rules
    s.push(
        Scenario::new(
            "rules",
            "rules-basic",
            pb(
                "rules-basic",
                &(cm_rule("\"CREATE\"")
                    + "validations:\n- expression: \"object.data.x == 'ok'\"\n"),
                &deny(),
            ),
            vec![
                create("create x=ok", CMS, cm("a", json!({"x": "ok"}))),
                create("create x=bad", CMS, cm("b", json!({"x": "bad"}))),
                create("create x=bad in ns2", CMS2, cm("b", json!({"x": "bad"}))),
                create("create secret (other resource)", SECRETS, secret("s")),
                update(
                    "update (other operation)",
                    &at(CMS, "existing"),
                    json!({"data": {"x": "bad"}}),
                ),
            ],
        )
        .setup(&cm_yaml("existing", "{{ns}}", "{}", "{x: ok}")),
    );

    s.push(Scenario::new(
        "rules",
        "rules-exclude",
        pb(
            "rules-exclude",
            r#"
matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps", "secrets"]}
  excludeResourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["*"], resources: ["secrets"]}
validations:
- expression: "false"
  message: "excluded resources pass"
"#,
            &deny(),
        ),
        vec![
            create("create configmap", CMS, cm("a", json!({}))),
            create("create secret (excluded)", SECRETS, secret("s")),
        ],
    ));

    s.push(
        Scenario::new(
            "rules",
            "rules-wildcard",
            pb(
                "rules-wildcard",
                r#"
matchConstraints:
  resourceRules:
  - {apiGroups: ["*"], apiVersions: ["*"], operations: ["CREATE", "UPDATE"], resources: ["*"]}
validations:
- expression: "request.kind.kind != 'Secret' && request.kind.kind != 'Pod'"
  messageExpression: "'no ' + request.kind.kind + ' via ' + request.resource.resource"
"#,
                &deny(),
            ),
            vec![
                create("create secret", SECRETS, secret("s")),
                create("create configmap", CMS, cm("c", json!({}))),
                update(
                    "update pod",
                    &at(PODS, "p"),
                    json!({"metadata": {"labels": {"x": "y"}}}),
                ),
                update(
                    "update pods/status (`*` has no subresources)",
                    &at(PODS, "p/status"),
                    json!({"status": {"message": "hi"}}),
                ),
            ],
        )
        .setup(&pod_yaml("p")),
    );

    s.push(
        Scenario::new(
            "rules",
            "rules-scale",
            pb(
                "rules-scale",
                r#"
matchConstraints:
  resourceRules:
  - {apiGroups: ["apps"], apiVersions: ["v1"], operations: ["UPDATE"], resources: ["deployments/scale"]}
validations:
- expression: "object.spec.replicas <= 3"
  messageExpression: "'scale of ' + request.name + ' (' + object.kind + ' ' + object.apiVersion + ', subresource ' + request.subResource + ') to ' + string(object.spec.replicas)"
"#,
                &deny(),
            ),
            vec![
                update("scale to 5", &at(DEPLOYS, "web/scale"), json!({"spec": {"replicas": 5}})),
                update("scale to 2", &at(DEPLOYS, "web/scale"), json!({"spec": {"replicas": 2}})),
                update(
                    "deployment itself to 5 (main resource not matched)",
                    &at(DEPLOYS, "web"),
                    json!({"spec": {"replicas": 5}}),
                ),
            ],
        )
        .setup(&deploy_yaml("web", 1)),
    );

    s.push(
        Scenario::new(
            "rules",
            "rules-any-scale",
            pb(
                "rules-any-scale",
                r#"
matchConstraints:
  resourceRules:
  - {apiGroups: ["*"], apiVersions: ["*"], operations: ["*"], resources: ["*/scale"]}
validations:
- expression: "object.spec.replicas < 10"
  reason: Forbidden
"#,
                &deny(),
            ),
            vec![
                update(
                    "scale to 20",
                    &at(DEPLOYS, "web/scale"),
                    json!({"spec": {"replicas": 20}}),
                ),
                update(
                    "scale to 4",
                    &at(DEPLOYS, "web/scale"),
                    json!({"spec": {"replicas": 4}}),
                ),
            ],
        )
        .setup(&deploy_yaml("web", 1)),
    );

    s.push(
        Scenario::new(
            "rules",
            "rules-pod-subresources",
            pb(
                "rules-pod-subresources",
                r#"
matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["UPDATE"], resources: ["pods/*"]}
validations:
- expression: "request.subResource != 'status' || object.status.message != 'forbidden'"
  messageExpression: "'subresource ' + request.subResource + ' of ' + request.name + ' old phase ' + oldObject.status.phase"
"#,
                &deny(),
            ),
            vec![
                update("pods/status forbidden", &at(PODS, "p/status"), json!({"status": {"message": "forbidden"}})),
                update("pods/status fine", &at(PODS, "p/status"), json!({"status": {"message": "fine"}})),
                update("pod itself (not matched)", &at(PODS, "p"), json!({"metadata": {"labels": {"a": "b"}}})),
            ],
        )
        .setup(&pod_yaml("p")),
    );

    s.push(Scenario::new(
        "rules",
        "rules-scope-cluster",
        pb(
            "rules-scope-cluster",
            r#"
matchConstraints:
  resourceRules:
  - {apiGroups: ["", "rbac.authorization.k8s.io"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["*"], scope: Cluster}
validations:
- expression: "!object.metadata.name.startsWith('d-rules-scope-cluster')"
  messageExpression: "'cluster-scoped ' + request.kind.kind + ' ' + object.metadata.name"
"#,
            // Unscoped: the expression limits it to this scenario's names.
            "validationActions: [Deny]\n",
        ),
        vec![
            create("create clusterrole", CLUSTERROLES, clusterrole("d-rules-scope-cluster-role")),
            create("create namespace", NAMESPACES, namespace_obj("d-rules-scope-cluster-x", json!({}))),
            create("create configmap (namespaced)", CMS, cm("d-rules-scope-cluster-cm", json!({}))),
        ],
    ));

    s.push(Scenario::new(
        "rules",
        "rules-scope-namespaced",
        pb(
            "rules-scope-namespaced",
            r#"
matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["namespaces", "configmaps"], scope: Namespaced}
validations:
- expression: "!object.metadata.name.endsWith('-deny')"
"#,
            &deny(),
        ),
        vec![
            create("create configmap x-deny", CMS, cm("x-deny", json!({}))),
            create(
                "create namespace …-deny (Namespaced excludes namespaces)",
                NAMESPACES,
                namespace_obj("d-rules-scope-namespaced-deny", json!({})),
            ),
        ],
    ));

    s.push(
        Scenario::new(
            "rules",
            "rules-resource-names",
            pb(
                "rules-resource-names",
                r#"
matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE", "DELETE"], resources: ["configmaps"], resourceNames: ["target"]}
validations:
- expression: "false"
  messageExpression: "request.operation + ' of ' + request.name"
"#,
                &deny(),
            ),
            vec![
                update("update target", &at(CMS, "target"), json!({"data": {"a": "b"}})),
                update("update other", &at(CMS, "other"), json!({"data": {"a": "b"}})),
                delete("delete target", &at(CMS, "target")),
                create("create named target", CMS, cm("target2", json!({}))),
                create(
                    "create with generateName (empty name)",
                    CMS,
                    json!({"metadata": {"generateName": "target-"}}),
                ),
            ],
        )
        .setup(&(cm_yaml("target", "{{ns}}", "{}", "{}") + &cm_yaml("other", "{{ns}}", "{}", "{}"))),
    );

    s.push(
        Scenario::new(
            "rules",
            "rules-delete",
            pb(
                "rules-delete",
                &(cm_rule("\"DELETE\"")
                    + r#"validations:
- expression: "object == null && oldObject.data.locked != 'true'"
  messageExpression: "'configmap ' + oldObject.metadata.name + ' is locked'"
"#),
                &deny(),
            ),
            vec![
                delete("delete locked", &at(CMS, "locked")),
                delete("delete unlocked", &at(CMS, "unlocked")),
            ],
        )
        .setup(
            &(cm_yaml("locked", "{{ns}}", "{}", "{locked: \"true\"}")
                + &cm_yaml("unlocked", "{{ns}}", "{}", "{locked: \"false\"}")),
        ),
    );

    let events_policy = |name: &str, match_policy: &str| {
        pb(
            name,
            &format!(
                r#"
matchConstraints:
  matchPolicy: {match_policy}
  resourceRules:
  - {{apiGroups: ["events.k8s.io"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["events"]}}
validations:
- expression: "object.note != 'bad'"
  messageExpression: "'kind ' + request.kind.group + '/' + request.kind.version + ' ' + request.kind.kind + ', resource ' + request.resource.group + '/' + request.resource.resource + ', requestKind ' + request.requestKind.group + '/' + request.requestKind.version + ', requestResource ' + request.requestResource.resource + ', object ' + object.apiVersion"
"#
            ),
            &deny(),
        )
    };
    let core_event = |name: &str, message: &str| {
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
            "involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": "d-rules-equivalent"},
            "reason": "Test", "message": message, "type": "Normal",
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1})
    };
    s.push(Scenario::new(
        "rules",
        "rules-equivalent",
        events_policy("rules-equivalent", "Equivalent"),
        vec![
            create(
                "core v1 event note=bad (converted)",
                "/api/v1/namespaces/{{ns}}/events",
                core_event("e1", "bad"),
            ),
            create(
                "core v1 event note=ok",
                "/api/v1/namespaces/{{ns}}/events",
                core_event("e2", "ok"),
            ),
        ],
    ));
    let mut exact_event = core_event("e1", "bad");
    exact_event["involvedObject"]["namespace"] = json!("d-rules-exact");
    s.push(Scenario::new(
        "rules",
        "rules-exact",
        events_policy("rules-exact", "Exact"),
        vec![
            create("core v1 event (Exact: not matched)", "/api/v1/namespaces/{{ns}}/events", exact_event),
            create(
                "events.k8s.io/v1 event (matched)",
                "/apis/events.k8s.io/v1/namespaces/{{ns}}/events",
                json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e2"},
                    "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "example.com/diff",
                    "reportingInstance": "i", "action": "Test", "reason": "Test", "type": "Normal",
                    "regarding": {"kind": "ConfigMap", "name": "x", "namespace": "d-rules-exact"},
                    "note": "bad"}),
            ),
        ],
    ));

    // ---------------------------------------------------------------- selectors
    s.push(
        Scenario::new(
            "selectors",
            "ns-selector-labels",
            pb(
                "ns-selector-labels",
                &(cm_rule("\"CREATE\"")
                    + r#"  namespaceSelector:
    matchLabels: {env: prod}
validations:
- expression: "false"
  messageExpression: "'prod namespace ' + request.namespace"
"#),
                &deny(),
            ),
            vec![
                create("create in env=prod", CMS, cm("a", json!({}))),
                create("create in env=dev", CMS2, cm("a", json!({}))),
            ],
        )
        .labels(json!({"env": "prod"}), json!({"env": "dev"})),
    );

    s.push(
        Scenario::new(
            "selectors",
            "ns-selector-expressions",
            pb(
                "ns-selector-expressions",
                &(cm_rule("\"CREATE\"")
                    + r#"  namespaceSelector:
    matchExpressions:
    - {key: env, operator: NotIn, values: [dev, test]}
    - {key: tier, operator: Exists}
validations:
- expression: "false"
"#),
                &deny(),
            ),
            vec![
                create("create in env=prod,tier=web", CMS, cm("a", json!({}))),
                create("create in env=dev,tier=web", CMS2, cm("a", json!({}))),
            ],
        )
        .labels(
            json!({"env": "prod", "tier": "web"}),
            json!({"env": "dev", "tier": "web"}),
        ),
    );

    s.push(
        Scenario::new(
            "selectors",
            "ns-selector-namespace-update",
            pb(
                "ns-selector-namespace-update",
                &(core_rule("\"CREATE\", \"UPDATE\"", "\"namespaces\"")
                    + r#"  namespaceSelector:
    matchLabels: {env: prod}
validations:
- expression: "false"
  messageExpression: "'namespace ' + object.metadata.name + ' labelled env=' + object.metadata.labels.env + ', namespaceObject is null: ' + string(namespaceObject == null)"
"#),
                // Unscoped: a Namespace's own (incoming) labels decide.
                "validationActions: [Deny]\n",
            ),
            vec![
                update("label dev→prod (incoming labels match)", &at(NAMESPACES, "{{ns}}"), json!({"metadata": {"labels": {"env": "prod"}}})),
                update("label prod→dev (incoming labels do not)", &at(NAMESPACES, "{{ns2}}"), json!({"metadata": {"labels": {"env": "dev"}}})),
                create(
                    "create namespace env=prod",
                    NAMESPACES,
                    namespace_obj("d-ns-selector-namespace-update-3", json!({"env": "prod"})),
                ),
            ],
        )
        .labels(json!({"env": "dev"}), json!({"env": "prod"})),
    );

    s.push(
        Scenario::new(
            "selectors",
            "ns-selector-cluster-scoped",
            pb(
                "ns-selector-cluster-scoped",
                r#"
matchConstraints:
  namespaceSelector:
    matchLabels: {env: prod}
  resourceRules:
  - {apiGroups: ["rbac.authorization.k8s.io"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["clusterroles"]}
validations:
- expression: "!object.metadata.name.startsWith('d-ns-selector-cluster-scoped')"
  message: "cluster-scoped objects ignore namespaceSelector"
"#,
                &deny(),
            ),
            vec![create(
                "create clusterrole",
                CLUSTERROLES,
                clusterrole("d-ns-selector-cluster-scoped-r"),
            )],
        ),
    );

    // cel-go's list trackers assert their arguments' types unchecked, after the call: a failed
    // variable or a wrong dyn argument makes them panic, and the panic is the expression's
    // error, which `|| true` does not absorb.
    s.push(Scenario::new(
        "cel",
        "cel-tracker-panics",
        pb(
            "cel-tracker-panics",
            &(cm_rule("\"CREATE\"")
                + r#"variables:
- name: nums
  expression: "object.data.missing"
validations:
- expression: "object.metadata.name == 'var' ? variables.nums.distinct() == [] : object.metadata.name == 'absorbed' ? variables.nums.distinct() == [] || true : object.metadata.name == 'plain' ? variables.nums == [] || true : object.metadata.name == 'sortby' ? [0, 1].sortBy(x, 1 / x) == [] : object.metadata.name == 'depth' ? [[1]].flatten(dyn('a')) == [] : object.metadata.name == 'dyn' ? dyn(1).distinct() == [] : false"
  message: "reached"
"#),
            &deny(),
        ),
        ["var", "absorbed", "plain", "sortby", "depth", "dyn", "other"]
            .into_iter()
            .map(|n| create(&format!("create {n}"), CMS, cm(n, json!({}))))
            .collect(),
    ));

    s.push(Scenario::new(
        "selectors",
        "object-selector-create",
        pb(
            "object-selector-create",
            &(cm_rule("\"CREATE\"")
                + r#"  objectSelector:
    matchLabels: {team: a}
validations:
- expression: "false"
  messageExpression: "'team a object ' + object.metadata.name"
"#),
            &deny(),
        ),
        vec![
            create(
                "create team=a",
                CMS,
                cm_labeled("a", json!({"team": "a"}), json!({})),
            ),
            create(
                "create team=b",
                CMS,
                cm_labeled("b", json!({"team": "b"}), json!({})),
            ),
            create("create unlabelled", CMS, cm("c", json!({}))),
        ],
    ));

    s.push(
        Scenario::new(
            "selectors",
            "object-selector-old-new",
            pb(
                "object-selector-old-new",
                &(cm_rule("\"UPDATE\", \"DELETE\"")
                    + r#"  objectSelector:
    matchLabels: {team: a}
validations:
- expression: "false"
  messageExpression: "request.operation + ' ' + oldObject.metadata.name + ' old team ' + (has(oldObject.metadata.labels) && 'team' in oldObject.metadata.labels ? oldObject.metadata.labels.team : '-') + ' new team ' + (object != null && has(object.metadata.labels) && 'team' in object.metadata.labels ? object.metadata.labels.team : '-')"
"#),
                &deny(),
            ),
            vec![
                update("relabel a→b (old matches)", &at(CMS, "old-a"), json!({"metadata": {"labels": {"team": "b"}}})),
                update("relabel b→a (new matches)", &at(CMS, "old-b"), json!({"metadata": {"labels": {"team": "a"}}})),
                update("data change on team=c", &at(CMS, "old-c"), json!({"data": {"x": "y"}})),
                delete("delete team=a (old object)", &at(CMS, "old-a")),
                delete("delete team=c", &at(CMS, "old-c")),
            ],
        )
        .setup(
            &(cm_yaml("old-a", "{{ns}}", "{team: a}", "{}")
                + &cm_yaml("old-b", "{{ns}}", "{team: b}", "{}")
                + &cm_yaml("old-c", "{{ns}}", "{team: c}", "{}")),
        ),
    );

    // ---------------------------------------------------------------- bindings
    s.push(Scenario::new(
        "bindings",
        "binding-intersection",
        docs(&[
            policy(
                "binding-intersection",
                r#"
matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps", "secrets"]}
validations:
- expression: "false"
  messageExpression: "'binding narrowed to ' + request.resource.resource"
"#,
            ),
            binding(
                "binding-intersection-binding",
                "binding-intersection",
                r#"
validationActions: [Deny]
matchResources:
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: "{{ns}}"}
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["secrets", "pods"]}
"#,
            ),
        ]),
        vec![
            create("create configmap (policy only)", CMS, cm("a", json!({}))),
            create("create secret (both)", SECRETS, secret("s")),
            create("create configmap in ns2", CMS2, cm("a", json!({}))),
        ],
    ));

    s.push(Scenario::new(
        "bindings",
        "binding-exclude-names",
        docs(&[
            policy(
                "binding-exclude-names",
                &(cm_rule("\"CREATE\"") + "validations:\n- expression: \"false\"\n"),
            ),
            binding(
                "binding-exclude-names-binding",
                "binding-exclude-names",
                r#"
validationActions: [Deny]
matchResources:
  namespaceSelector:
    matchLabels: {kubernetes.io/metadata.name: "{{ns}}"}
  objectSelector:
    matchExpressions:
    - {key: skip, operator: DoesNotExist}
  excludeResourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE"], resources: ["configmaps"], resourceNames: ["skip-me"]}
"#,
            ),
        ]),
        vec![
            create("create skip-me (excluded by name)", CMS, cm("skip-me", json!({}))),
            create("create labelled skip (objectSelector)", CMS, cm_labeled("l", json!({"skip": "1"}), json!({}))),
            create("create other", CMS, cm("other", json!({}))),
        ],
    ));

    s.push(Scenario::new(
        "bindings",
        "binding-two-bindings",
        docs(&[
            policy(
                "binding-two-bindings",
                &(cm_rule("\"CREATE\"") + "validations:\n- expression: \"object.metadata.name != 'bad'\"\n  message: \"name bad\"\n"),
            ),
            binding(
                "binding-two-bindings-deny",
                "binding-two-bindings",
                "validationActions: [Deny]\nmatchResources:\n  namespaceSelector:\n    matchLabels: {kubernetes.io/metadata.name: \"{{ns}}\"}\n",
            ),
            binding(
                "binding-two-bindings-warn",
                "binding-two-bindings",
                "validationActions: [Warn]\nmatchResources:\n  namespaceSelector:\n    matchLabels: {kubernetes.io/metadata.name: \"{{ns2}}\"}\n",
            ),
        ]),
        vec![
            create("bad in ns (Deny binding)", CMS, cm("bad", json!({}))),
            create("bad in ns2 (Warn binding)", CMS2, cm("bad", json!({}))),
            create("good in ns", CMS, cm("good", json!({}))),
        ],
    ));

    // ---------------------------------------------------------------- matchConditions
    s.push(Scenario::new(
        "matchConditions",
        "match-conditions-false",
        pb(
            "match-conditions-false",
            &(cm_rule("\"CREATE\"")
                + r#"matchConditions:
- name: only-checked
  expression: "object.metadata.name.startsWith('check-')"
validations:
- expression: "false"
  message: "checked"
"#),
            &deny(),
        ),
        vec![
            create("create check-a", CMS, cm("check-a", json!({}))),
            create("create other", CMS, cm("other", json!({}))),
        ],
    ));

    for (name, failure) in [
        ("match-conditions-error-fail", "Fail"),
        ("match-conditions-error-ignore", "Ignore"),
    ] {
        s.push(Scenario::new(
            "matchConditions",
            name,
            pb(
                name,
                &(format!("failurePolicy: {failure}\n")
                    + &cm_rule("\"CREATE\"")
                    + r#"matchConditions:
- name: flag-is-x
  expression: "object.data.flag == 'x'"
validations:
- expression: "object.data.value == 'ok'"
"#),
                &deny(),
            ),
            vec![
                create(
                    "no flag key (condition errors)",
                    CMS,
                    cm("a", json!({"value": "bad"})),
                ),
                create(
                    "flag=x, value=bad",
                    CMS,
                    cm("b", json!({"flag": "x", "value": "bad"})),
                ),
                create(
                    "flag=y (condition false)",
                    CMS,
                    cm("c", json!({"flag": "y", "value": "bad"})),
                ),
            ],
        ));
    }

    s.push(Scenario::new(
        "matchConditions",
        "match-conditions-mixed",
        pb(
            "match-conditions-mixed",
            &(cm_rule("\"CREATE\"")
                + r#"matchConditions:
- name: first
  expression: "object.data.a == 'x'"
- name: second
  expression: "object.data.b == 'x'"
validations:
- expression: "false"
  message: "all conditions true"
"#),
            &deny(),
        ),
        vec![
            create(
                "a errors, b false → skipped",
                CMS,
                cm("m1", json!({"b": "y"})),
            ),
            create("both error → aggregated", CMS, cm("m2", json!({}))),
            create("a true, b errors", CMS, cm("m3", json!({"a": "x"}))),
            create("both true", CMS, cm("m4", json!({"a": "x", "b": "x"}))),
        ],
    ));

    s.push(Scenario::new(
        "matchConditions",
        "match-conditions-user",
        pb(
            "match-conditions-user",
            &(cm_rule("\"CREATE\"")
                + r#"matchConditions:
- name: not-alice
  expression: "request.userInfo.username != 'alice'"
- name: not-breakglass
  expression: "!('breakglass' in request.userInfo.groups)"
validations:
- expression: "false"
  messageExpression: "'user ' + request.userInfo.username + ' may not'"
"#),
            &deny(),
        ),
        vec![
            create("as admin", CMS, cm("a", json!({}))),
            create("as alice", CMS, cm("b", json!({}))).impersonating("alice", &[]),
            create("as bob", CMS, cm("c", json!({}))).impersonating("bob", &["devs"]),
            create("as bob in breakglass", CMS, cm("d", json!({})))
                .impersonating("bob", &["breakglass"]),
        ],
    ));

    // ---------------------------------------------------------------- CONNECT
    // `kubectl exec`, `attach` and `port-forward` into a Pod no node runs: admission decides
    // before kube-apiserver looks for a kubelet.
    let exec = |label: &str, command: &[&str]| {
        let mut q: Vec<(&str, &str)> = vec![("container", "c"), ("stdout", "true")];
        q.extend(command.iter().map(|c| ("command", *c)));
        connect(label, "p", "exec", &q)
    };
    s.push(
        Scenario::new(
            "connect",
            "connect-exec-params",
            docs(&[
                policy(
                    "connect-exec-params",
                    r#"
paramKind: {apiVersion: v1, kind: ConfigMap}
matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CONNECT"], resources: ["pods/exec", "pods/attach", "pods/portforward"]}
validations:
- expression: "request.subResource != 'exec' || !object.command.exists(c, c in params.data.shells.split(','))"
  messageExpression: "'no shell in ' + request.name + ': ' + object.command.join(' ') + ' (' + object.kind + ' ' + object.apiVersion + ', ' + request.operation + ' ' + request.resource.resource + '/' + request.subResource + ', kind ' + request.kind.kind + ', oldObject null: ' + string(oldObject == null) + ', dryRun ' + string(request.dryRun) + ')'"
- expression: "request.subResource != 'attach' || !object.tty"
  message: "no tty attach"
  reason: Forbidden
- expression: "request.subResource != 'portforward' || object.ports.all(p, p != 22)"
  messageExpression: "'no port 22 (' + object.kind + ')'"
"#,
                ),
                binding(
                    "connect-exec-params-binding",
                    "connect-exec-params",
                    &(deny() + "paramRef: {name: shells, namespace: \"{{ns2}}\", parameterNotFoundAction: Deny}\n"),
                ),
            ]),
            vec![
                exec("exec sh", &["sh", "-c", "id"]),
                exec("exec ls", &["ls"]),
                connect("attach tty", "p", "attach", &[("container", "c"), ("stdout", "true"), ("tty", "true")]),
                connect("attach", "p", "attach", &[("container", "c"), ("stdout", "true")]),
                connect("port-forward 22", "p", "portforward", &[("ports", "22")]),
                connect("port-forward 8080", "p", "portforward", &[("ports", "8080")]),
            ],
        )
        .setup(&(pod_yaml("p") + &cm_yaml("shells", "{{ns2}}", "{}", "{shells: \"sh,bash\"}"))),
    );
    s.push(
        Scenario::new(
            "connect",
            "connect-exec-user",
            pb(
                "connect-exec-user",
                r#"
matchConstraints:
  resourceRules:
  - {apiGroups: [""], apiVersions: ["v1"], operations: ["CONNECT"], resources: ["pods/exec"]}
matchConditions:
- name: not-breakglass
  expression: "!('breakglass' in request.userInfo.groups)"
validations:
- expression: "false"
  messageExpression: "'user ' + request.userInfo.username + ' may not exec into ' + request.namespace + '/' + request.name"
"#,
                &deny(),
            ),
            vec![
                exec("exec as bob", &["ls"]).impersonating("bob", &["devs"]),
                exec("exec as bob in breakglass", &["ls"]).impersonating("bob", &["breakglass"]),
            ],
        )
        .setup(&pod_yaml("p")),
    );

    // ---------------------------------------------------------------- variables
    s.push(
        Scenario::new(
            "variables",
            "variables",
            pb(
                "variables",
                &(cm_rule("\"CREATE\"")
                    + r#"variables:
- name: name
  expression: "object.metadata.name"
- name: isProd
  expression: "has(namespaceObject.metadata.labels) && 'env' in namespaceObject.metadata.labels && namespaceObject.metadata.labels.env == 'prod'"
- name: prefixed
  expression: "variables.name.startsWith('prod-')"
validations:
- expression: "!variables.isProd || variables.prefixed"
  messageExpression: "'in ' + namespaceObject.metadata.name + ' names start with prod-, not ' + variables.name"
"#),
                &deny(),
            ),
            vec![
                create("prod ns, bad name", CMS, cm("web", json!({}))),
                create("prod ns, good name", CMS, cm("prod-web", json!({}))),
                create("dev ns, bad name", CMS2, cm("web", json!({}))),
            ],
        )
        .labels(json!({"env": "prod"}), json!({"env": "dev"})),
    );

    s.push(Scenario::new(
        "variables",
        "variables-error",
        pb(
            "variables-error",
            &(cm_rule("\"CREATE\"")
                + r#"variables:
- name: level
  expression: "int(object.data.level)"
validations:
- expression: "variables.level < 5"
  messageExpression: "'level ' + string(variables.level)"
"#),
            &deny(),
        ),
        vec![
            create("level 7", CMS, cm("a", json!({"level": "7"}))),
            create("level 2", CMS, cm("b", json!({"level": "2"}))),
            create("no level (variable errors)", CMS, cm("c", json!({}))),
            create(
                "level abc (conversion error)",
                CMS,
                cm("d", json!({"level": "abc"})),
            ),
        ],
    ));

    // ---------------------------------------------------------------- messages
    s.push(Scenario::new(
        "messages",
        "message-expression",
        pb(
            "message-expression",
            &(cm_rule("\"CREATE\"")
                + r#"validations:
- expression: "object.data.case != 'a'"
  messageExpression: "'custom: ' + object.metadata.name"
- expression: "object.data.case != 'b'"
  message: "static message b"
  messageExpression: "'x' + object.data.nope"
- expression: "object.data.case != 'c'"
  messageExpression: "'x' + object.data.nope"
- expression: "object.data.case != 'd'"
  message: "newline fallback"
  messageExpression: "'line1\\nline2'"
- expression: "object.data.case != 'e'"
  messageExpression: "'   padded   '"
- expression: "object.data.case != 'f'"
  message: "empty fallback"
  messageExpression: "''"
- expression: "object.data.case != 'g'"
  message: "too long fallback"
  messageExpression: "string(object.data.long)"
- expression: "object.data.case != 'h'"
  message: "   trimmed static   "
- expression: "  object.data.case != 'i'  "
"#),
            &deny(),
        ),
        ["a", "b", "c", "d", "e", "f", "g", "h", "i", "z"]
            .iter()
            .map(|c| {
                create(
                    &format!("case {c}"),
                    CMS,
                    cm(
                        &format!("m-{c}"),
                        json!({"case": c, "long": "y".repeat(5200)}),
                    ),
                )
            })
            .collect(),
    ));

    s.push(Scenario::new(
        "messages",
        "reason-codes",
        pb(
            "reason-codes",
            &(cm_rule("\"CREATE\"")
                + r#"validations:
- expression: "object.data.case != 'forbidden'"
  reason: Forbidden
- expression: "object.data.case != 'toolarge'"
  reason: RequestEntityTooLarge
- expression: "object.data.case != 'invalid'"
  reason: Invalid
- expression: "object.data.case != 'none'"
"#),
            &deny(),
        ),
        ["forbidden", "toolarge", "invalid", "none"]
            .iter()
            .map(|c| {
                create(
                    &format!("reason {c}"),
                    CMS,
                    cm(&format!("r-{c}"), json!({"case": c})),
                )
            })
            .collect(),
    ));

    // ---------------------------------------------------------------- validationActions
    for (name, actions) in [
        ("actions-warn", "Warn"),
        ("actions-audit", "Audit"),
        ("actions-deny-audit", "Deny, Audit"),
        ("actions-warn-audit", "Warn, Audit"),
    ] {
        s.push(Scenario::new(
            "validationActions",
            name,
            pb(
                name,
                &(cm_rule("\"CREATE\"")
                    + r#"validations:
- expression: "object.data.ok == 'true'"
  messageExpression: "'<' + object.metadata.name + '> & \"quoted\" is not ok'"
- expression: "object.data.second == 'true'"
  reason: Forbidden
"#),
                &scoped(actions),
            ),
            vec![
                create(
                    "not ok",
                    CMS,
                    cm("a", json!({"ok": "false", "second": "true"})),
                ),
                create(
                    "second fails",
                    CMS,
                    cm("b", json!({"ok": "true", "second": "false"})),
                ),
                create("ok", CMS, cm("c", json!({"ok": "true", "second": "true"}))),
            ],
        ));
    }

    s.push(Scenario::new(
        "validationActions",
        "actions-two-warn-policies",
        docs(&[
            pb(
                "actions-two-warn-policies-a",
                &(cm_rule("\"CREATE\"")
                    + "validations:\n- expression: \"false\"\n  message: \"warning from a\"\n"),
                &scoped("Warn"),
            ),
            pb(
                "actions-two-warn-policies-b",
                &(cm_rule("\"CREATE\"")
                    + "validations:\n- expression: \"false\"\n  message: \"warning from b\"\n"),
                &scoped("Warn"),
            ),
        ]),
        vec![create("create", CMS, cm("a", json!({})))],
    ));

    // ---------------------------------------------------------------- auditAnnotations
    s.push(Scenario::new(
        "auditAnnotations",
        "audit-annotations",
        pb(
            "audit-annotations",
            &(cm_rule("\"CREATE\"")
                + r#"validations:
- expression: "object.data.deny != 'true'"
auditAnnotations:
- key: name
  valueExpression: "'configmap ' + object.metadata.name"
- key: null-value
  valueExpression: "null"
- key: empty
  valueExpression: "''"
- key: padded
  valueExpression: "'  spaces around  '"
- key: user
  valueExpression: "request.userInfo.username"
"#),
            &deny(),
        ),
        vec![
            create("allowed", CMS, cm("a", json!({}))),
            create("denied", CMS, cm("b", json!({"deny": "true"}))),
            create("as carol", CMS, cm("c", json!({}))).impersonating("carol", &[]),
        ],
    ));

    for (name, failure) in [
        ("audit-annotations-error-fail", "Fail"),
        ("audit-annotations-error-ignore", "Ignore"),
    ] {
        s.push(Scenario::new(
            "auditAnnotations",
            name,
            pb(
                name,
                &(format!("failurePolicy: {failure}\n")
                    + &cm_rule("\"CREATE\"")
                    + r#"validations:
- expression: "true"
auditAnnotations:
- key: tier
  valueExpression: "'tier ' + object.data.tier"
- key: always
  valueExpression: "'always'"
"#),
                &scoped("Warn"),
            ),
            vec![
                create("with tier", CMS, cm("a", json!({"tier": "gold"}))),
                create(
                    "without tier (valueExpression errors)",
                    CMS,
                    cm("b", json!({})),
                ),
            ],
        ));
    }

    s.push(Scenario::new(
        "auditAnnotations",
        "audit-annotations-two-bindings",
        docs(&[
            policy(
                "audit-annotations-two-bindings",
                &(cm_rule("\"CREATE\"")
                    + r#"validations:
- expression: "true"
auditAnnotations:
- key: same
  valueExpression: "'same value'"
"#),
            ),
            binding(
                "audit-annotations-two-bindings-1",
                "audit-annotations-two-bindings",
                &deny(),
            ),
            binding(
                "audit-annotations-two-bindings-2",
                "audit-annotations-two-bindings",
                &scoped("Audit"),
            ),
        ]),
        vec![create(
            "create (two bindings, one value)",
            CMS,
            cm("a", json!({})),
        )],
    ));

    // ---------------------------------------------------------------- failurePolicy
    for (name, failure, actions) in [
        ("runtime-error-fail", "Fail", "Deny"),
        ("runtime-error-ignore", "Ignore", "Deny"),
        ("runtime-error-fail-warn", "Fail", "Warn, Audit"),
    ] {
        s.push(Scenario::new(
            "failurePolicy",
            name,
            pb(
                name,
                &(format!("failurePolicy: {failure}\n")
                    + &cm_rule("\"CREATE\"")
                    + r#"validations:
- expression: "object.data.x == 'y'"
- expression: "object.data.case != 'div' || 10 / int(object.data.zero) == 1"
- expression: "object.data.case != 'int' || int(object.data.word) == 1"
- expression: "object.data.case != 'index' || object.data.list[3] == 'x'"
"#),
                &scoped(actions),
            ),
            vec![
                create("no key x", CMS, cm("a", json!({}))),
                create("x=y", CMS, cm("b", json!({"x": "y"}))),
                // False, not an error: acted on under every failurePolicy, so that the errors
                // Ignore lets through are not the only thing this scenario sees.
                create("x=n", CMS, cm("f", json!({"x": "n"}))),
                create(
                    "division by zero",
                    CMS,
                    cm("c", json!({"x": "y", "case": "div", "zero": "0"})),
                ),
                create(
                    "int('abc')",
                    CMS,
                    cm("d", json!({"x": "y", "case": "int", "word": "abc"})),
                ),
                create(
                    "index a string",
                    CMS,
                    cm("e", json!({"x": "y", "case": "index", "list": "ab"})),
                ),
            ],
        ));
    }

    s.push(Scenario::new(
        "failurePolicy",
        "mixed-failure-policies",
        docs(&[
            pb(
                "mixed-failure-policies-fail",
                &(cm_rule("\"CREATE\"") + "validations:\n- expression: \"false\"\n  message: \"from the Fail policy\"\n"),
                &scoped("Warn"),
            ),
            pb(
                "mixed-failure-policies-ignore",
                &("failurePolicy: Ignore\n".to_string()
                    + &cm_rule("\"CREATE\"")
                    + "validations:\n- expression: \"false\"\n  message: \"from the Ignore policy\"\nauditAnnotations:\n- key: k\n  valueExpression: \"'v'\"\n"),
                &scoped("Warn"),
            ),
        ]),
        vec![create("create (matches both webhooks)", CMS, cm("a", json!({})))],
    ));

    // ---------------------------------------------------------------- params
    let cm_param_policy = |name: &str, extra_validation: &str| {
        policy(
            name,
            &(cm_rule("\"CREATE\"")
                + "paramKind: {apiVersion: v1, kind: ConfigMap}\n"
                + "validations:\n- expression: \"int(object.data.replicas) <= int(params.data.max)\"\n  messageExpression: \"'at most ' + params.data.max + ' (param ' + params.metadata.name + ' ' + params.kind + ')'\"\n"
                + extra_validation),
        )
    };
    s.push(
        Scenario::new(
            "params",
            "params-by-name",
            docs(&[
                cm_param_policy("params-by-name", ""),
                binding(
                    "params-by-name-binding",
                    "params-by-name",
                    &(deny() + "paramRef: {name: limit, namespace: \"{{ns2}}\", parameterNotFoundAction: Deny}\n"),
                ),
            ]),
            vec![
                create("replicas 5 > 3", CMS, cm("a", json!({"replicas": "5"}))),
                create("replicas 2", CMS, cm("b", json!({"replicas": "2"}))),
            ],
        )
        .setup(&cm_yaml("limit", "{{ns2}}", "{}", "{max: \"3\"}")),
    );

    for (name, action) in [
        ("params-per-namespace-deny", "Deny"),
        ("params-per-namespace-allow", "Allow"),
    ] {
        s.push(
            Scenario::new(
                "params",
                name,
                docs(&[
                    cm_param_policy(name, ""),
                    binding(
                        &format!("{name}-binding"),
                        name,
                        &(deny()
                            + &format!(
                                "paramRef: {{name: limit, parameterNotFoundAction: {action}}}\n"
                            )),
                    ),
                ]),
                vec![
                    create(
                        "ns has param, replicas 5",
                        CMS,
                        cm("a", json!({"replicas": "5"})),
                    ),
                    create(
                        "ns has param, replicas 1",
                        CMS,
                        cm("b", json!({"replicas": "1"})),
                    ),
                    create("ns2 has none", CMS2, cm("c", json!({"replicas": "5"}))),
                ],
            )
            .setup(&cm_yaml("limit", "{{ns}}", "{}", "{max: \"2\"}")),
        );
    }

    s.push(
        Scenario::new(
            "params",
            "params-selector-and",
            docs(&[
                cm_param_policy("params-selector-and", ""),
                binding(
                    "params-selector-and-binding",
                    "params-selector-and",
                    &(deny()
                        + "paramRef:\n  namespace: \"{{ns2}}\"\n  selector: {matchLabels: {role: limit}}\n  parameterNotFoundAction: Deny\n"),
                ),
            ]),
            vec![
                create("replicas 2 (both allow)", CMS, cm("a", json!({"replicas": "2"}))),
                create("replicas 4 (one denies)", CMS, cm("b", json!({"replicas": "4"}))),
                // Not "both deny": which param's denial is reported first is the in-tree lister's
                // (map) order, i.e. unspecified upstream.
            ],
        )
        .setup(
            &(cm_yaml("limit-low", "{{ns2}}", "{role: limit}", "{max: \"3\"}")
                + &cm_yaml("limit-high", "{{ns2}}", "{role: limit}", "{max: \"5\"}")
                + &cm_yaml("unrelated", "{{ns2}}", "{role: other}", "{max: \"0\"}")),
        ),
    );

    s.push(Scenario::new(
        "params",
        "params-selector-none",
        docs(&[
            cm_param_policy("params-selector-none", ""),
            binding(
                "params-selector-none-binding",
                "params-selector-none",
                &(deny()
                    + "paramRef:\n  namespace: \"{{ns2}}\"\n  selector: {matchLabels: {role: nothing}}\n  parameterNotFoundAction: Deny\n"),
            ),
        ]),
        vec![create("no param matches the selector", CMS, cm("a", json!({"replicas": "1"})))],
    ));

    s.push(
        Scenario::new(
            "params",
            "params-cluster-crd",
            docs(&[
                policy(
                    "params-cluster-crd",
                    &(cm_rule("\"CREATE\"")
                        + r#"paramKind: {apiVersion: diff.example.com/v1, kind: DiffParam}
validations:
- expression: "size(object.data) <= params.spec.maxKeys"
  messageExpression: "'at most ' + string(params.spec.maxKeys) + ' keys (' + params.apiVersion + ' ' + params.kind + ' ' + params.metadata.name + ')'"
"#),
                ),
                binding(
                    "params-cluster-crd-binding",
                    "params-cluster-crd",
                    &(deny() + "paramRef: {name: d-params-cluster-crd, parameterNotFoundAction: Deny}\n"),
                ),
            ]),
            vec![
                create("3 keys", CMS, cm("a", json!({"a": "1", "b": "2", "c": "3"}))),
                create("1 key", CMS, cm("b", json!({"a": "1"}))),
            ],
        )
        .setup("apiVersion: diff.example.com/v1\nkind: DiffParam\nmetadata:\n  name: d-params-cluster-crd\nspec:\n  maxKeys: 2\n"),
    );

    s.push(Scenario::new(
        "params",
        "params-cluster-with-namespace",
        docs(&[
            policy(
                "params-cluster-with-namespace",
                &(cm_rule("\"CREATE\"")
                    + "paramKind: {apiVersion: diff.example.com/v1, kind: DiffParam}\nvalidations:\n- expression: \"true\"\n"),
            ),
            binding(
                "params-cluster-with-namespace-binding",
                "params-cluster-with-namespace",
                &(deny() + "paramRef: {name: x, namespace: \"{{ns}}\", parameterNotFoundAction: Deny}\n"),
            ),
        ]),
        vec![create("paramRef.namespace on a cluster-scoped kind", CMS, cm("a", json!({})))],
    ));

    s.push(Scenario::new(
        "params",
        "params-no-paramref",
        docs(&[
            policy(
                "params-no-paramref",
                &(cm_rule("\"CREATE\"")
                    + "paramKind: {apiVersion: v1, kind: ConfigMap}\nvalidations:\n- expression: \"params != null\"\n  message: \"params is null without paramRef\"\n"),
            ),
            binding("params-no-paramref-binding", "params-no-paramref", &deny()),
        ]),
        vec![create("create", CMS, cm("a", json!({})))],
    ));

    s.push(Scenario::new(
        "params",
        "params-namespaced-cluster-request",
        docs(&[
            policy(
                "params-namespaced-cluster-request",
                r#"
matchConstraints:
  resourceRules:
  - {apiGroups: ["rbac.authorization.k8s.io"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["clusterroles"]}
paramKind: {apiVersion: v1, kind: ConfigMap}
validations:
- expression: "true"
"#,
            ),
            binding(
                "params-namespaced-cluster-request-binding",
                "params-namespaced-cluster-request",
                "validationActions: [Deny]\nmatchResources:\n  objectSelector: {matchLabels: {diff: params-namespaced-cluster-request}}\nparamRef: {name: limit, parameterNotFoundAction: Deny}\n",
            ),
        ]),
        vec![create(
            "cluster-scoped request, paramRef without namespace",
            CLUSTERROLES,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "d-params-namespaced-cluster-request",
                    "labels": {"diff": "params-namespaced-cluster-request"}}, "rules": []}),
        )],
    ));

    s.push(
        Scenario::new(
            "params",
            "params-audit-and-warn",
            docs(&[
                policy(
                    "params-audit-and-warn",
                    &(cm_rule("\"CREATE\"")
                        + r#"paramKind: {apiVersion: v1, kind: ConfigMap}
validations:
- expression: "!(object.metadata.name in params.data.banned.split(','))"
  messageExpression: "'banned by ' + params.metadata.name"
auditAnnotations:
- key: param
  valueExpression: "string(params.metadata.name)"
"#),
                ),
                binding(
                    "params-audit-and-warn-binding",
                    "params-audit-and-warn",
                    &(scoped("Warn, Audit") + "paramRef: {name: banned, namespace: \"{{ns2}}\", parameterNotFoundAction: Deny}\n"),
                ),
            ]),
            vec![
                create("banned name", CMS, cm("evil", json!({}))),
                create("fine name", CMS, cm("nice", json!({}))),
            ],
        )
        .setup(&cm_yaml(
            "banned",
            "{{ns2}}",
            "{}",
            "{banned: \"evil,bad\"}",
        )),
    );

    // ---------------------------------------------------------------- request.*
    s.push(Scenario::new(
        "request",
        "request-fields",
        pb(
            "request-fields",
            &(cm_rule("\"CREATE\", \"UPDATE\", \"DELETE\"")
                + r#"validations:
- expression: "false"
  messageExpression: "request.operation + ' ' + request.kind.group + '/' + request.kind.version + '/' + request.kind.kind + ' ' + request.resource.group + '/' + request.resource.version + '/' + request.resource.resource + ' hasSubResource=' + string(has(request.subResource)) + ' ns=' + request.namespace + ' name=' + request.name + ' dryRun=' + string(request.dryRun) + ' user=' + request.userInfo.username + ' options=' + request.options.kind"
"#),
            &deny(),
        ),
        vec![
            create("create dry-run", CMS, cm("a", json!({}))),
            create("create for real (denied, nothing stored)", CMS, cm("a", json!({}))).for_real(),
            update("update", &at(CMS, "existing"), json!({"data": {"k": "v"}})),
            delete("delete", &at(CMS, "existing")),
        ],
    )
    .setup(&cm_yaml("existing", "{{ns}}", "{}", "{}")));

    s.push(Scenario::new(
        "request",
        "request-user-info",
        pb(
            "request-user-info",
            &(cm_rule("\"CREATE\"")
                + r#"validations:
- expression: "false"
  messageExpression: "'user=' + request.userInfo.username + ' groups=' + request.userInfo.groups.join(',') + ' uid=' + (has(request.userInfo.uid) ? request.userInfo.uid : '<none>') + ' extra=' + (has(request.userInfo.extra) && 'scopes' in request.userInfo.extra ? request.userInfo.extra['scopes'].join(',') : '<none>')"
"#),
            &deny(),
        ),
        vec![
            create("as admin", CMS, cm("a", json!({}))),
            create("as alice in devs with extra", CMS, cm("b", json!({})))
                .impersonating("alice", &["devs", "qa"])
                .extra("scopes", "view"),
        ],
    ));

    s.push(Scenario::new(
        "request",
        "request-options",
        pb(
            "request-options",
            &(cm_rule("\"CREATE\", \"UPDATE\"")
                + r#"validations:
- expression: "false"
  messageExpression: "request.options.kind + ' ' + request.options.apiVersion + ' dryRun=' + (has(request.options.dryRun) ? request.options.dryRun.join(',') : '<none>') + ' fieldManager=' + (has(request.options.fieldManager) ? request.options.fieldManager : '<none>')"
"#),
            &deny(),
        ),
        vec![
            create("create with fieldManager", CMS, cm("a", json!({}))).param("fieldManager", "diff-manager"),
            update("patch", &at(CMS, "existing"), json!({"data": {"a": "b"}})),
        ],
    )
    .setup(&cm_yaml("existing", "{{ns}}", "{}", "{}")));

    s.push(Scenario::new(
        "request",
        "request-cluster-scoped",
        pb(
            "request-cluster-scoped",
            r#"
matchConstraints:
  resourceRules:
  - {apiGroups: ["rbac.authorization.k8s.io"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["clusterroles"]}
validations:
- expression: "!object.metadata.name.startsWith('d-request-cluster-scoped')"
  messageExpression: "'has namespace: ' + string(has(request.namespace)) + ', namespaceObject null: ' + string(namespaceObject == null) + ', name=' + request.name"
"#,
            &deny(),
        ),
        vec![create("create clusterrole", CLUSTERROLES, clusterrole("d-request-cluster-scoped-r"))],
    ));

    s.push(Scenario::new(
        "request",
        "request-generate-name",
        pb(
            "request-generate-name",
            &(cm_rule("\"CREATE\"")
                + r#"validations:
- expression: "false"
  messageExpression: "'has name: ' + string(has(request.name)) + ' generateName=' + object.metadata.generateName"
"#),
            &deny(),
        ),
        vec![create("generateName", CMS, json!({"metadata": {"generateName": "gen-"}}))],
    ));

    // ---------------------------------------------------------------- namespaceObject
    s.push(
        Scenario::new(
            "namespaceObject",
            "namespace-object",
            pb(
                "namespace-object",
                &(cm_rule("\"CREATE\"")
                    + r#"validations:
- expression: "namespaceObject.metadata.labels.env == 'prod'"
  messageExpression: "'namespace ' + namespaceObject.metadata.name + ' is ' + namespaceObject.metadata.labels.env + ', phase ' + namespaceObject.status.phase"
"#),
                &deny(),
            ),
            vec![
                create("prod namespace", CMS, cm("a", json!({}))),
                create("dev namespace", CMS2, cm("a", json!({}))),
            ],
        )
        .labels(json!({"env": "prod"}), json!({"env": "dev"})),
    );

    // Declared timestamps, valued as the object's strings: what compiles, what fails at run time.
    for (name, expression) in [
        (
            "namespace-object-time-methods",
            "type(namespaceObject.metadata.creationTimestamp) == string && !has(namespaceObject.metadata.deletionTimestamp) && namespaceObject.metadata.creationTimestamp.getFullYear() > 2000",
        ),
        (
            "namespace-object-time-conversion",
            "timestamp(namespaceObject.metadata.creationTimestamp) > timestamp('2000-01-01T00:00:00Z')",
        ),
        (
            "namespace-object-time-compare",
            "namespaceObject.metadata.creationTimestamp - duration('1h') < timestamp('2100-01-01T00:00:00Z')",
        ),
    ] {
        s.push(Scenario::new(
            "namespaceObject",
            name,
            pb(
                name,
                &(cm_rule("\"CREATE\"") + &format!("validations:\n- expression: {expression:?}\n")),
                &deny(),
            ),
            vec![create("a config map", CMS, cm("a", json!({})))],
        ));
    }

    // A variable past the per-expression cost limit: its error is the reading validation's,
    // charged once however many validations read it.
    {
        let hundred = (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let scan =
            format!("[{hundred}].all(a, [{hundred}].all(b, [{hundred}].all(c, a + b + c >= 0)))");
        for (name, reading) in [
            ("variable-cost-limit", "variables.scan"),
            ("variable-cost-limit-absorbed", "variables.scan || true"),
        ] {
            // A last validation fails, so a scenario whose reads all pass still denies.
            let validations: String = (0..12)
                .map(|_| format!("- expression: {reading:?}\n"))
                .chain(std::iter::once(
                    "- expression: \"false\"\n  message: every read passed\n".to_string(),
                ))
                .collect();
            s.push(Scenario::new(
                "variables",
                name,
                pb(
                    name,
                    &(cm_rule("\"CREATE\"")
                        + &format!("variables:\n- name: scan\n  expression: {scan:?}\nvalidations:\n{validations}")),
                    &deny(),
                ),
                vec![create("a config map", CMS, cm("a", json!({})))],
            ));
        }
    }

    s.push(Scenario::new(
        "namespaceObject",
        "namespace-object-null",
        pb(
            "namespace-object-null",
            &(core_rule("\"UPDATE\"", "\"namespaces\"")
                + r#"validations:
- expression: "false"
  messageExpression: "'namespaceObject null for a Namespace: ' + string(namespaceObject == null) + ', request.namespace=' + request.namespace"
"#),
            &deny(),
        ),
        vec![update("label the namespace", &at(NAMESPACES, "{{ns}}"), json!({"metadata": {"labels": {"x": "y"}}}))],
    ));

    // ---------------------------------------------------------------- UPDATE / DELETE
    s.push(
        Scenario::new(
            "update",
            "update-old-object",
            pb(
                "update-old-object",
                &(cm_rule("\"CREATE\", \"UPDATE\"")
                    + r#"validations:
- expression: "oldObject == null || object.data.id == oldObject.data.id"
  messageExpression: "'id is immutable: ' + oldObject.data.id + ' → ' + object.data.id"
"#),
                &deny(),
            ),
            vec![
                update(
                    "change id",
                    &at(CMS, "immutable"),
                    json!({"data": {"id": "2"}}),
                ),
                update(
                    "keep id",
                    &at(CMS, "immutable"),
                    json!({"data": {"other": "x"}}),
                ),
                create(
                    "create (oldObject null)",
                    CMS,
                    cm("new", json!({"id": "9"})),
                ),
            ],
        )
        .setup(&cm_yaml("immutable", "{{ns}}", "{}", "{id: \"1\"}")),
    );

    s.push(
        Scenario::new(
            "update",
            "update-deployment",
            pb(
                "update-deployment",
                r#"
matchConstraints:
  resourceRules:
  - {apiGroups: ["apps"], apiVersions: ["v1"], operations: ["UPDATE"], resources: ["deployments"]}
validations:
- expression: "object.spec.replicas <= oldObject.spec.replicas + 2"
  messageExpression: "'from ' + string(oldObject.spec.replicas) + ' to ' + string(object.spec.replicas) + ' is too fast'"
  reason: Forbidden
"#,
                &deny(),
            ),
            vec![
                update("1 → 5", &at(DEPLOYS, "web"), json!({"spec": {"replicas": 5}})),
                update("1 → 3", &at(DEPLOYS, "web"), json!({"spec": {"replicas": 3}})),
                create("create (not matched)", DEPLOYS, deployment("other", 50)),
            ],
        )
        .setup(&deploy_yaml("web", 1)),
    );

    for sc in &mut s {
        if let Some((_, why)) = KNOWN.iter().find(|(name, _)| *name == sc.name) {
            sc.known = Some(why);
        }
    }
    s
}

/// Scenarios that differ because of a reported celgate bug: they still run and print their
/// differences without failing, and fail once they stop differing (so the entry is removed).
/// Empty: every scenario must agree.
const KNOWN: &[(&str, &str)] = &[];

// ------------------------------------------------------------------------------------------
// What one request gave
// ------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
struct Outcome {
    allowed: bool,
    code: u16,
    reason: String,
    /// The inner message: after `admission webhook "<name>" denied the request: ` (celgate) or
    /// `<resource> "<name>" is forbidden: ` (in-tree); the whole message otherwise.
    message: String,
    warnings: Vec<String>,
    /// Normalised to the in-tree keys (celgate's `validate[-ignore].celgate.io/<policy>_<key>`
    /// → `<policy>/<key>`); a key seen twice after mapping is suffixed ` (twice)`.
    audit: Vec<(String, String)>,
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
    for (k, v) in &o.audit {
        let _ = write!(s, "\n        audit {k} = {v:?}");
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
    d.extend(differential::difference(
        "audit annotations",
        &a.audit,
        &b.audit,
        false,
    ));
    d
}

// ------------------------------------------------------------------------------------------
// The harness
// ------------------------------------------------------------------------------------------

struct Harness<'c> {
    driver: Driver<'c>,
    audit: AuditLog,
    seq: u64,
    run_id: u32,
}

impl<'c> Harness<'c> {
    async fn new(cluster: &'c Cluster) -> Self {
        Harness {
            driver: Driver::new(cluster).await,
            audit: AuditLog::new(cluster.dir().join("audit.log")),
            seq: 0,
            run_id: std::process::id(),
        }
    }

    fn next_audit_id(&mut self) -> String {
        self.seq += 1;
        format!("{:08x}-d1ff-4000-8000-{:012x}", self.run_id, self.seq)
    }

    /// Plays one request and reads its outcome, audit annotations included.
    async fn play(&mut self, sc: &Scenario, engine: Engine, req: &Req) -> Outcome {
        let id = self.next_audit_id();
        let mut headers = vec![("Audit-ID".to_string(), id.clone())];
        if let Some((user, groups)) = &req.user {
            headers.push(("Impersonate-User".into(), user.clone()));
            for g in groups {
                headers.push(("Impersonate-Group".into(), g.clone()));
            }
        }
        for (k, v) in &req.extra {
            headers.push((format!("Impersonate-Extra-{k}"), v.clone()));
        }
        let mut query: Vec<String> = req.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if req.dry_run {
            query.push("dryRun=All".into());
        }
        let mut path = sc.render(&req.path, Some(engine));
        if !query.is_empty() {
            path = format!("{path}?{}", query.join("&"));
        }
        let body = req.body.as_ref().map(|b| {
            serde_json::from_str(&sc.render(&b.to_string(), Some(engine)))
                .unwrap_or_else(|e| panic!("{e}"))
        });
        let resp = self.driver.http(req.method, &path, body.as_ref(), &headers);
        let from_admission =
            |m: &str| m.contains("ValidatingAdmissionPolicy") || m.contains("admission webhook");
        let allowed = (200..300).contains(&resp.code)
            || (req.connect && !from_admission(resp.body["message"].as_str().unwrap_or_default()));
        let full = if (200..300).contains(&resp.code) {
            String::new()
        } else {
            resp.body["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        let message = if let Some((_, inner)) = full.split_once("denied the request: ") {
            inner.to_string()
        } else if let Some((_, inner)) = full.split_once(" is forbidden: ") {
            inner.to_string()
        } else {
            full.clone()
        };
        if engine == Engine::InTree && !allowed && !message.contains("ValidatingAdmissionPolicy") {
            panic!(
                "[{}] {:?} ({}): {} {path} failed outside admission policy: {} {full}",
                sc.name,
                req.label,
                engine.tag(),
                req.method,
                resp.code
            );
        }
        let mut warnings = resp.warnings;
        warnings.sort();
        let annotations = self.audit.annotations(&id).await;
        Outcome {
            allowed,
            code: resp.code,
            reason: if (200..300).contains(&resp.code) {
                String::new()
            } else {
                resp.body["reason"].as_str().unwrap_or_default().to_string()
            },
            message,
            warnings,
            audit: normalise_audit(&annotations),
        }
    }

    /// One phase: apply, prove in force, play, delete, prove gone.
    async fn phase(&mut self, sc: &Scenario, engine: Engine) -> Vec<Outcome> {
        let yaml = sc.render(&sc.policies, Some(engine));
        self.driver.apply_policies(&yaml).await;
        if engine == Engine::Celgate {
            self.driver.wait_validating_rules(&yaml).await;
        }
        self.driver.bump_sentinel(engine).await;
        let mut outcomes = Vec::new();
        for req in &sc.requests {
            outcomes.push(self.play(sc, engine, req).await);
        }
        self.driver.delete_policies(&yaml).await;
        self.driver.bump_sentinel(engine).await;
        outcomes
    }
}

// ------------------------------------------------------------------------------------------
// Global fixtures
// ------------------------------------------------------------------------------------------

const PARAM_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: diffparams.diff.example.com
spec:
  group: diff.example.com
  names: {kind: DiffParam, plural: diffparams, singular: diffparam}
  scope: Cluster
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

/// In-tree policies that keep each paramKind bound for the whole run (kubernetes#130887). They
/// match a resource nobody requests.
fn keepers() -> String {
    let keeper = |name: &str, kind: &str, param_ref: &str| {
        docs(&[
            policy(
                name,
                &format!(
                    "paramKind: {kind}\nmatchConstraints:\n  resourceRules:\n  - {{apiGroups: [\"keep.example.com\"], apiVersions: [\"v1\"], operations: [\"CREATE\"], resources: [\"nevers\"]}}\nvalidations:\n- expression: \"true\"\n"
                ),
            ),
            binding(
                &format!("{name}-binding"),
                name,
                &format!("validationActions: [Deny]\nparamRef: {param_ref}\n"),
            ),
        ])
    };
    docs(&[
        keeper(
            "keep-configmap",
            "{apiVersion: v1, kind: ConfigMap}",
            "{name: none, namespace: default, parameterNotFoundAction: Allow}",
        ),
        keeper(
            "keep-diffparam",
            "{apiVersion: diff.example.com/v1, kind: DiffParam}",
            "{name: none, parameterNotFoundAction: Allow}",
        ),
    ])
    .replace("{{api}}", Engine::InTree.api())
}

// ------------------------------------------------------------------------------------------
// Selection and proof of action
// ------------------------------------------------------------------------------------------

/// The scenarios `only` selects (see [`celgate_e2e::differential::select`]).
fn select<'a>(table: &'a [Scenario], only: Option<&str>) -> Result<Vec<&'a Scenario>, String> {
    differential::select(table, |sc| sc.name, only)
}

/// The names of the ValidatingAdmissionPolicies a scenario applies.
fn policy_names(sc: &Scenario) -> Vec<String> {
    parse_docs(&sc.render(&sc.policies, Some(Engine::InTree)))
        .into_iter()
        .filter(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .filter_map(|d| d["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// Whether one of `policies` acted on the request that gave `o`: a denial or a warning naming it
/// (kube-apiserver's `ValidatingAdmissionPolicy '<name>' …`), an audit annotation under its name
/// (`<name>/<key>`), or a validation failure it recorded for the Audit action.
fn policy_acted(o: &Outcome, policies: &[String]) -> bool {
    policies.iter().any(|p| {
        let named = format!("ValidatingAdmissionPolicy '{p}'");
        let failure = format!("\"policy\":\"{p}\"");
        (!o.allowed && o.message.contains(&named))
            || o.warnings.iter().any(|w| w.contains(&named))
            || o.audit.iter().any(|(k, v)| {
                k.strip_prefix(p.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
                    || (k == IN_TREE_FAILURE_KEY && v.contains(&failure))
            })
    })
}

// ------------------------------------------------------------------------------------------
// The test
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_tree_and_celgate_decide_alike() {
    let started = Instant::now();
    let table = scenarios();
    {
        let mut names: Vec<_> = table.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), table.len(), "scenario names must be unique");
    }
    let only = std::env::var("CELGATE_DIFF_ONLY").ok();
    let selected = select(&table, only.as_deref()).unwrap_or_else(|e| panic!("{e}"));
    // On an older minor, scenarios whose CEL its in-tree plugin refuses in a new policy are
    // left out, by name.
    let minor = version::minor();
    let (selected, too_new): (Vec<&Scenario>, Vec<&Scenario>) = selected
        .into_iter()
        .partition(|sc| version::cel_minor_needed(&sc.policies) <= minor);
    if !too_new.is_empty() {
        eprintln!(
            "differential: {} scenarios need a newer in-tree CEL than 1.{minor}'s: {:?}",
            too_new.len(),
            too_new.iter().map(|sc| sc.name).collect::<Vec<_>>()
        );
    }
    let strict = std::env::var("CELGATE_DIFF_STRICT").is_ok_and(|v| v == "1");

    let cluster = Cluster::start();
    cluster.install_crds();
    // Every request is sent, as in-tree: the events scenarios compare matchPolicy.
    let celgate = Celgate::start_with(&cluster, &["--never-sent=none"]).await;
    let mut h = Harness::new(&cluster).await;
    h.driver.kubectl_apply(PARAM_CRD);
    cluster.wait_established(&["crd/diffparams.diff.example.com"]);
    h.driver.sentinel_namespaces().await;
    h.driver.apply_policies(&keepers()).await;
    for e in [Engine::InTree, Engine::Celgate] {
        h.driver.bump_sentinel(e).await;
    }
    eprintln!(
        "differential: control plane and celgate ready after {:?}",
        started.elapsed()
    );

    let mut report = String::new();
    let mut unexpected = 0usize;
    let mut known_differing = 0usize;
    let mut known_but_equal = Vec::new();
    let mut inert = Vec::new();
    for &sc in &selected {
        let t = Instant::now();
        h.driver.namespace(&sc.ns(), &sc.ns_labels).await;
        h.driver.namespace(&sc.ns2(), &sc.ns2_labels).await;
        if !sc.setup.trim().is_empty() {
            h.driver.kubectl_apply(&sc.render(&sc.setup, None));
        }
        let theirs = h.phase(sc, Engine::InTree).await;
        let ours = h.phase(sc, Engine::Celgate).await;
        let policies = policy_names(sc);
        let acted = theirs.iter().any(|o| policy_acted(o, &policies));
        if !acted {
            inert.push(sc.name);
        }
        let mut diffs = String::new();
        for ((req, a), b) in sc.requests.iter().zip(&theirs).zip(&ours) {
            let d = differences(a, b);
            if !d.is_empty() {
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
        let status = match (diffs.is_empty(), sc.known) {
            (true, None) => "same",
            (true, Some(_)) => {
                known_but_equal.push(sc.name);
                "SAME (but marked known: remove the mark)"
            }
            (false, None) => {
                unexpected += 1;
                "DIFFERENT"
            }
            (false, Some(_)) => {
                known_differing += 1;
                "different (known)"
            }
        };
        eprintln!(
            "[{}/{}] {:<38} {:>2} requests  {:<10} {:?}{}",
            sc.topic,
            sc.name,
            "",
            sc.requests.len(),
            status,
            t.elapsed(),
            if acted {
                ""
            } else {
                "  (INERT: no request denied, warned or annotated by its policies in-tree)"
            }
        );
        for (req, a) in sc.requests.iter().zip(&theirs) {
            eprintln!("      {:<48} {}", req.label, describe(a));
        }
        if !diffs.is_empty() {
            eprint!("{diffs}");
            let _ = writeln!(
                report,
                "scenario {} ({}){}:",
                sc.name,
                sc.topic,
                sc.known
                    .map(|k| format!(" — known: {k}"))
                    .unwrap_or_default()
            );
            report.push_str(&diffs);
        }
    }
    assert!(
        !celgate.logs().contains("panicked"),
        "celgate panicked:\n{}",
        celgate.logs()
    );
    eprintln!(
        "differential: {} scenarios in {:?}; {unexpected} differ unexpectedly, {known_differing} known differences, {} inert",
        selected.len(),
        started.elapsed(),
        inert.len()
    );
    if !report.is_empty() {
        eprintln!("\n===== differences (in-tree vs celgate) =====\n{report}");
    }
    assert!(
        unexpected == 0 && known_but_equal.is_empty() && (!strict || known_differing == 0),
        "{unexpected} scenario(s) differ unexpectedly; known scenarios that no longer differ: {known_but_equal:?}; strict={strict}\n{report}"
    );
    assert!(
        inert.is_empty(),
        "scenario(s) {inert:?}: no request was denied, warned or audit-annotated by the scenario's \
         policies in the in-tree phase, so comparing them proves nothing; add a request the \
         policies act on"
    );
}

// ------------------------------------------------------------------------------------------
// The checks above, without a cluster
// ------------------------------------------------------------------------------------------

fn allowed_outcome() -> Outcome {
    Outcome {
        allowed: true,
        code: 201,
        reason: String::new(),
        message: String::new(),
        warnings: Vec::new(),
        audit: Vec::new(),
    }
}

#[test]
fn a_filter_selects_by_prefix_and_fails_when_a_prefix_selects_nothing() {
    let table = scenarios();
    assert_eq!(select(&table, None).map(|s| s.len()), Ok(table.len()));
    let picked: Vec<&str> = select(&table, Some("rules-basic"))
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .map(|sc| sc.name)
        .collect();
    assert_eq!(picked, ["rules-basic"]);
    let err = select(&table, Some("rules-basic,no-such-scenario"))
        .err()
        .unwrap_or_else(|| panic!("a prefix that selects nothing was accepted"));
    assert!(err.contains("\"no-such-scenario\""), "{err}");
    assert!(select(&table, Some("no-such-scenario")).is_err());
    assert!(
        select(&table, Some("")).is_err(),
        "an empty filter selects all"
    );
    assert!(select(&table, Some("rules-basic,")).is_err());
}

#[test]
fn only_the_scenarios_own_policies_count_as_acting() {
    let mine = vec!["p.example.com".to_string()];
    assert!(!policy_acted(&allowed_outcome(), &mine));

    let denial = |name: &str| Outcome {
        allowed: false,
        code: 422,
        reason: "Invalid".into(),
        message: format!(
            "ValidatingAdmissionPolicy '{name}' with binding 'b' denied request: failed expression: false"
        ),
        ..allowed_outcome()
    };
    assert!(policy_acted(&denial("p.example.com"), &mine));
    assert!(!policy_acted(&denial("other.example.com"), &mine));
    // A prefix of the name is another policy.
    assert!(!policy_acted(&denial("p.example.co"), &mine));

    let warned = |name: &str| Outcome {
        warnings: vec![format!(
            "Validation failed for ValidatingAdmissionPolicy '{name}' with binding 'b': no"
        )],
        ..allowed_outcome()
    };
    assert!(policy_acted(&warned("p.example.com"), &mine));
    assert!(!policy_acted(&warned("other.example.com"), &mine));
    let unrelated = Outcome {
        warnings: vec!["metadata.name: this is used in Pod names".into()],
        ..allowed_outcome()
    };
    assert!(!policy_acted(&unrelated, &mine));

    let annotated = |key: &str, value: &str| Outcome {
        audit: vec![(key.to_string(), value.to_string())],
        ..allowed_outcome()
    };
    assert!(policy_acted(&annotated("p.example.com/why", "x"), &mine));
    assert!(!policy_acted(&annotated("p.example.comx/why", "x"), &mine));
    assert!(!policy_acted(
        &annotated("other.example.com/why", "x"),
        &mine
    ));
    assert!(policy_acted(
        &annotated(
            IN_TREE_FAILURE_KEY,
            r#"[{"message":"no","policy":"p.example.com","binding":"b","expressionIndex":0,"validationActions":["Audit"]}]"#
        ),
        &mine
    ));
    assert!(!policy_acted(
        &annotated(
            IN_TREE_FAILURE_KEY,
            r#"[{"message":"no","policy":"other.example.com","binding":"b","expressionIndex":0,"validationActions":["Audit"]}]"#
        ),
        &mine
    ));
}

#[test]
fn every_scenario_names_its_policies() {
    for sc in scenarios() {
        assert!(
            !policy_names(&sc).is_empty(),
            "scenario {} applies no ValidatingAdmissionPolicy",
            sc.name
        );
    }
}
