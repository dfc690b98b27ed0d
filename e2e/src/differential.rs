//! What the differential suites share (`tests/differential.rs` for validating policies,
//! `tests/mutating_differential.rs` for mutating ones): the two engines, requests over HTTPS with
//! curl (so codes, warnings and impersonation are those of the wire), policy objects applied and
//! deleted by kind, and the sentinels that prove what was applied or deleted is in force.
//!
//! A sentinel is a policy of one engine bound in the namespace `sentinel-<engine>` that acts on a
//! probe resource no scenario touches. Each bump gives it a new binding name, a new expected
//! effect and the other of two probe resources; once a probe shows the new effect, everything
//! applied or deleted before the bump is in force in that engine (the policy and binding streams
//! are each ordered, and the bump changes both; in celgate's case the probe is only routed once
//! kube-apiserver has a webhook configuration written after the bump).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use crate::Cluster;

/// The line a difference between the in-tree and the celgate value of `what` adds to a report:
/// on one line for short values, on two indented lines otherwise; `None` when they agree.
pub fn difference<T: PartialEq + std::fmt::Debug>(
    what: &str,
    in_tree: &T,
    celgate: &T,
    short: bool,
) -> Option<String> {
    (in_tree != celgate).then(|| {
        if short {
            format!("{what}: in-tree {in_tree:?} vs celgate {celgate:?}")
        } else {
            format!("{what}:\n        in-tree {in_tree:?}\n        celgate {celgate:?}")
        }
    })
}

/// Metadata the API server sets by itself, different on every request.
pub const SERVER_MANAGED: [&str; 6] = [
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
];

/// `object` without the [`SERVER_MANAGED`] metadata.
pub fn strip_server_managed(mut object: Value) -> Value {
    if let Some(meta) = object.get_mut("metadata").and_then(|m| m.as_object_mut()) {
        for f in SERVER_MANAGED {
            meta.remove(f);
        }
    }
    object
}

/// Paths (`/a/b/0`) where two JSON values differ, with both sides.
pub fn json_differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                json_differences(
                    &format!("{path}/{k}"),
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                json_differences(&format!("{path}/{i}"), p, q, out);
            }
        }
        _ if a != b => out.push(format!(
            "object {}: in-tree {} vs celgate {}",
            if path.is_empty() { "/" } else { path },
            a,
            b
        )),
        _ => {}
    }
}

/// The engine a phase plays with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// kube-apiserver's own plugins (`admissionregistration.k8s.io/v1` objects).
    InTree,
    /// celgate's webhook (`admission.celgate.io/v1` objects).
    Celgate,
}

impl Engine {
    /// The apiVersion of the engine's policies and bindings.
    pub fn api(self) -> &'static str {
        match self {
            Engine::InTree => "admissionregistration.k8s.io/v1",
            Engine::Celgate => "admission.celgate.io/v1",
        }
    }

    /// The apiVersion of the engine's MutatingAdmissionPolicies and bindings: in-tree, that of
    /// the control plane's minor ([`crate::version::in_tree_map_api`]; panics before 1.32,
    /// which has none).
    pub fn map_api(self) -> &'static str {
        match self {
            Engine::InTree => {
                let minor = crate::version::minor();
                crate::version::in_tree_map_api(minor).unwrap_or_else(|| {
                    panic!("Kubernetes 1.{minor} has no in-tree MutatingAdmissionPolicy (alpha from 1.32)")
                })
            }
            Engine::Celgate => self.api(),
        }
    }

    /// A short name for logs and object names.
    pub fn tag(self) -> &'static str {
        match self {
            Engine::InTree => "intree",
            Engine::Celgate => "celgate",
        }
    }
}

/// One HTTP answer of kube-apiserver.
#[derive(Clone, Debug)]
pub struct Response {
    /// HTTP status code.
    pub code: u16,
    /// The JSON body (`Null` when it is not JSON).
    pub body: Value,
    /// The texts of the `Warning` headers, in order.
    pub warnings: Vec<String>,
}

impl Response {
    /// Whether the status code is 2xx.
    pub fn allowed(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// The Status message of a failed request, empty when the request succeeded.
    pub fn message(&self) -> String {
        if self.allowed() {
            String::new()
        } else {
            self.body["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    }

    /// The Status reason of a failed request, empty when the request succeeded.
    pub fn reason(&self) -> String {
        if self.allowed() {
            String::new()
        } else {
            self.body["reason"].as_str().unwrap_or_default().to_string()
        }
    }
}

/// Parses one `Warning` header value: `299 - "text"` (text quoted with `\"` and `\\`).
pub fn parse_warning(v: &str) -> String {
    let Some(start) = v.find('"') else {
        return v.to_string();
    };
    let inner = &v[start + 1..];
    let inner = inner.strip_suffix('"').unwrap_or(inner);
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Splits a multi-document YAML text into JSON values (empty documents skipped).
pub fn parse_docs(yaml: &str) -> Vec<Value> {
    yaml.split("\n---\n")
        .flat_map(|d| d.split("---\n"))
        .filter(|d| !d.trim().is_empty())
        .map(|d| {
            serde_saphyr::from_str::<Value>(d)
                .unwrap_or_else(|e| panic!("invalid YAML document: {e}\n{d}"))
        })
        .collect()
}

/// Indents every non-empty line of `text` (leading newlines dropped) by `by` spaces.
pub fn indent(text: &str, by: usize) -> String {
    let pad = " ".repeat(by);
    text.trim_start_matches('\n')
        .lines()
        .map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{pad}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// Joins YAML documents.
pub fn docs(parts: &[String]) -> String {
    parts.join("---\n")
}

/// The entries of `table` that `only` selects: comma-separated prefixes of their `name`
/// (`None`: every entry). A prefix that selects nothing (a typo, a renamed scenario) is an error,
/// and so is an empty one, which would select everything.
pub fn select<'a, T>(
    table: &'a [T],
    name: impl Fn(&T) -> &str,
    only: Option<&str>,
) -> Result<Vec<&'a T>, String> {
    let Some(only) = only else {
        return Ok(table.iter().collect());
    };
    let prefixes: Vec<&str> = only.split(',').map(str::trim).collect();
    if prefixes.iter().any(|p| p.is_empty()) {
        return Err(format!(
            "CELGATE_DIFF_ONLY={only:?} holds an empty name; unset it to play every scenario"
        ));
    }
    let unmatched: Vec<&str> = prefixes
        .iter()
        .copied()
        .filter(|p| !table.iter().any(|sc| name(sc).starts_with(p)))
        .collect();
    if !unmatched.is_empty() {
        let names: Vec<&str> = table.iter().map(&name).collect();
        return Err(format!(
            "CELGATE_DIFF_ONLY: {unmatched:?} select(s) no scenario; the scenarios are {names:?}"
        ));
    }
    Ok(table
        .iter()
        .filter(|sc| prefixes.iter().any(|p| name(sc).starts_with(p)))
        .collect())
}

/// The four policy kinds, as the API serves them under either engine's group.
pub fn policy_resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let plural = match kind {
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
        "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
        other => panic!("policies YAML may only hold policies and bindings, not {other}"),
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The control plane as the suites drive it: raw HTTPS requests, policy objects, namespaces and
/// the sentinels of both engines.
pub struct Driver<'c> {
    /// The control plane.
    pub cluster: &'c Cluster,
    /// A client for the admin user.
    pub client: kube::Client,
    base: String,
    pki: PathBuf,
    step: u32,
    /// The sentinel binding currently in place, per (engine, mutating).
    sentinel_binding: HashMap<(Engine, bool), String>,
}

impl<'c> Driver<'c> {
    /// A driver for `cluster`.
    pub async fn new(cluster: &'c Cluster) -> Self {
        let port = std::fs::read_to_string(cluster.dir().join("apiserver-port"))
            .unwrap_or_else(|e| panic!("no apiserver-port: {e}"));
        Driver {
            cluster,
            client: cluster.client().await,
            base: format!("https://127.0.0.1:{}", port.trim()),
            pki: cluster.dir().join("pki"),
            step: 0,
            sentinel_binding: HashMap::new(),
        }
    }

    /// One HTTPS request as the admin, with extra `headers` (impersonation, audit ID). A body
    /// goes as JSON, or as a JSON merge patch for `PATCH`.
    pub fn http(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(String, String)],
    ) -> Response {
        self.http_as(method, path, body, None, headers)
    }

    /// [`Driver::http`] with the body sent as `content_type` when given.
    pub fn http_as(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        content_type: Option<&str>,
        headers: &[(String, String)],
    ) -> Response {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "-i", "--max-time", "30", "-X", method])
            .arg("--cacert")
            .arg(self.pki.join("ca.crt"))
            .arg("--cert")
            .arg(self.pki.join("admin.crt"))
            .arg("--key")
            .arg(self.pki.join("admin.key"))
            .env("NO_PROXY", "127.0.0.1")
            .env("no_proxy", "127.0.0.1");
        for (k, v) in headers {
            cmd.arg("-H").arg(format!("{k}: {v}"));
        }
        if let Some(b) = body {
            let ct = match content_type {
                Some(ct) => ct,
                None if method == "PATCH" => "application/merge-patch+json",
                None => "application/json",
            };
            cmd.arg("-H")
                .arg(format!("Content-Type: {ct}"))
                .arg("--data-binary")
                .arg(b.to_string());
        }
        cmd.arg(format!("{}{path}", self.base));
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run curl: {e}"));
        assert!(
            out.status.success(),
            "curl {method} {path} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (head, body) = text
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no HTTP header in curl output: {text}"));
        let mut lines = head.lines();
        let code = lines
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {head}"));
        let warnings = lines
            .filter_map(|l| l.split_once(':'))
            .filter(|(k, _)| k.trim().eq_ignore_ascii_case("warning"))
            .map(|(_, v)| parse_warning(v.trim()))
            .collect();
        Response {
            code,
            body: serde_json::from_str(body).unwrap_or(Value::Null),
            warnings,
        }
    }

    /// Applies policies and bindings (any of the four kinds) with server-side apply.
    pub async fn apply_policies(&self, yaml: &str) {
        for doc in parse_docs(yaml) {
            self.try_apply_policy(&doc)
                .await
                .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        }
    }

    /// Applies one policy or binding with server-side apply; the API server's message when it
    /// refuses it.
    pub async fn try_apply_policy(&self, doc: &Value) -> Result<(), String> {
        let ar = policy_resource(
            doc["apiVersion"].as_str().unwrap_or_default(),
            doc["kind"].as_str().unwrap_or_default(),
        );
        let name = doc["metadata"]["name"].as_str().unwrap_or_default();
        Api::<DynamicObject>::all_with(self.client.clone(), &ar)
            .patch(
                name,
                &PatchParams::apply("celgate-differential").force(),
                &Patch::Apply(doc),
            )
            .await
            .map(|_| ())
            .map_err(|e| match e {
                kube::Error::Api(status) => status.message,
                other => format!("cannot apply {} {name}: {other}", ar.kind),
            })
    }

    /// Deletes policies and bindings, bindings first; absent objects are fine.
    pub async fn delete_policies(&self, yaml: &str) {
        let mut docs = parse_docs(yaml);
        docs.sort_by_key(|d| !d["kind"].as_str().unwrap_or_default().ends_with("Binding"));
        for doc in docs {
            let ar = policy_resource(
                doc["apiVersion"].as_str().unwrap_or_default(),
                doc["kind"].as_str().unwrap_or_default(),
            );
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            self.delete_one(&ar, name).await;
        }
    }

    async fn delete_one(&self, ar: &ApiResource, name: &str) {
        match Api::<DynamicObject>::all_with(self.client.clone(), ar)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("cannot delete {} {name}: {e}", ar.kind),
        }
    }

    /// `kubectl apply -f -`, asserting success.
    pub fn kubectl_apply(&self, yaml: &str) {
        self.cluster.apply(yaml);
    }

    /// Creates a namespace with `labels` (an existing one is fine).
    pub async fn namespace(&self, name: &str, labels: &Value) {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))
                .unwrap_or_else(|e| panic!("namespace fixture: {e}"));
        match Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("cannot create namespace {name}: {e}"),
        }
    }

    /// Creates the sentinel namespaces of both engines.
    pub async fn sentinel_namespaces(&self) {
        for e in [Engine::InTree, Engine::Celgate] {
            self.namespace(&format!("sentinel-{}", e.tag()), &json!({}))
                .await;
        }
    }

    /// Moves the validating sentinel of `engine` to a new step and waits (30 s at most) until a
    /// probe is denied with exactly the new step's message.
    pub async fn bump_sentinel(&mut self, engine: Engine) {
        self.bump(engine, false, Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Moves the mutating sentinel of `engine` to a new step and waits up to `limit` until a
    /// probe comes back labelled with the new step; the error tells what the last probe gave.
    pub async fn bump_mutating_sentinel(
        &mut self,
        engine: Engine,
        limit: Duration,
    ) -> Result<(), String> {
        self.bump(engine, true, limit).await
    }

    async fn bump(
        &mut self,
        engine: Engine,
        mutating: bool,
        limit: Duration,
    ) -> Result<(), String> {
        self.step += 1;
        let tag = engine.tag();
        let step = self.step;
        let old = self
            .sentinel_binding
            .insert(
                (engine, mutating),
                format!("{}sentinel-{tag}-{step}", if mutating { "m" } else { "" }),
            )
            .unwrap_or_default();
        let yaml = sentinel_yaml(engine, mutating, step);
        self.apply_policies(&yaml).await;
        if !old.is_empty() {
            let kind = if mutating {
                "MutatingAdmissionPolicyBinding"
            } else {
                "ValidatingAdmissionPolicyBinding"
            };
            let api = if mutating {
                engine.map_api()
            } else {
                engine.api()
            };
            self.delete_one(&policy_resource(api, kind), &old).await;
        }
        let resource = probe_resource(step, mutating);
        let path = format!("/api/v1/namespaces/sentinel-{tag}/{resource}?dryRun=All");
        let body = probe_body(resource);
        let want = format!(
            "ValidatingAdmissionPolicy 'sentinel-{tag}' with binding 'sentinel-{tag}-{step}' denied request: step-{step}"
        );
        let deadline = Instant::now() + limit;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let r = self.http("POST", &path, Some(&body), &[]);
            let done = if mutating {
                r.allowed()
                    && r.body["metadata"]["labels"]["sentinel-step"]
                        .as_str()
                        .and_then(|v| v.parse::<u32>().ok())
                        == Some(step)
            } else {
                r.message().ends_with(&want)
            };
            if done {
                return Ok(());
            }
            if Instant::now() >= deadline || attempts >= 600 {
                return Err(format!(
                    "{tag}: {} sentinel step {step} not in force after {limit:?} ({attempts} probes); last: {} {} labels {}",
                    if mutating { "mutating" } else { "validating" },
                    r.code,
                    r.message(),
                    r.body["metadata"]["labels"]
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (30 s at most) until celgate's ValidatingWebhookConfiguration holds every resource
    /// rule of the ValidatingAdmissionPolicies in `yaml` under the webhook of their failurePolicy.
    pub async fn wait_validating_rules(&self, yaml: &str) {
        let docs = parse_docs(yaml);
        let mut wanted = Vec::new();
        for doc in bound(&docs, "ValidatingAdmissionPolicy") {
            let webhook = if doc["spec"]["failurePolicy"] == "Ignore" {
                "validate-ignore.celgate.io"
            } else {
                "validate.celgate.io"
            };
            for r in registered_rules(doc) {
                wanted.push((Some(webhook), r));
            }
        }
        let api = Api::<ValidatingWebhookConfiguration>::all(self.client.clone());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let cfg = api.get_opt("celgate").await.ok().flatten();
            let cfg = cfg
                .map(|c| serde_json::to_value(c).unwrap_or_default())
                .unwrap_or_default();
            let missing = missing_rules(&cfg, &wanted);
            if missing.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "celgate's webhook configuration lacks {missing:?} after 30s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits up to `limit` until celgate's MutatingWebhookConfiguration holds every resource rule
    /// of the MutatingAdmissionPolicies in `yaml` (under any of its webhooks); the error lists
    /// the rules still missing.
    pub async fn wait_mutating_rules(&self, yaml: &str, limit: Duration) -> Result<(), String> {
        let docs = parse_docs(yaml);
        let wanted: Vec<(Option<&str>, Value)> = bound(&docs, "MutatingAdmissionPolicy")
            .flat_map(registered_rules)
            .map(|r| (None, r))
            .collect();
        let api = Api::<MutatingWebhookConfiguration>::all(self.client.clone());
        let deadline = Instant::now() + limit;
        loop {
            let cfg = api.get_opt("celgate").await.ok().flatten();
            let cfg = cfg
                .map(|c| serde_json::to_value(c).unwrap_or_default())
                .unwrap_or_default();
            let missing = missing_rules(&cfg, &wanted);
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "celgate's MutatingWebhookConfiguration lacks {missing:?} after {limit:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The sentinel policy and binding of `engine` at `step` (see the module documentation).
fn sentinel_yaml(engine: Engine, mutating: bool, step: u32) -> String {
    let resource = probe_resource(step, mutating);
    let tag = engine.tag();
    let (kind, name, body, binding_extra) = if mutating {
        (
            "MutatingAdmissionPolicy",
            format!("msentinel-{tag}"),
            format!(
                "reinvocationPolicy: Never\nmutations:\n- patchType: ApplyConfiguration\n  applyConfiguration:\n    expression: \"Object{{metadata: Object.metadata{{labels: {{'sentinel-step': '{step}'}}}}}}\"\n"
            ),
            "",
        )
    } else {
        (
            "ValidatingAdmissionPolicy",
            format!("sentinel-{tag}"),
            format!("validations:\n- expression: \"false\"\n  message: \"step-{step}\"\n"),
            "validationActions: [Deny]\n",
        )
    };
    format!(
        "apiVersion: \"{api}\"\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  matchConstraints:\n    resourceRules:\n    - {{apiGroups: [\"\"], apiVersions: [\"v1\"], operations: [\"CREATE\"], resources: [\"{resource}\"]}}\n{body}---\napiVersion: \"{api}\"\nkind: {kind}Binding\nmetadata:\n  name: {name}-{step}\nspec:\n  policyName: {name}\n{binding}  matchResources:\n    namespaceSelector:\n      matchLabels: {{kubernetes.io/metadata.name: sentinel-{tag}}}\n",
        api = if mutating {
            engine.map_api()
        } else {
            engine.api()
        },
        body = indent(&body, 2),
        binding = if binding_extra.is_empty() {
            String::new()
        } else {
            indent(binding_extra, 2)
        },
    )
}

/// The policies of `kind` in `docs` that a binding in `docs` names: celgate registers no rule
/// for a policy nothing binds.
fn bound<'a>(docs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    let binding = format!("{kind}Binding");
    docs.iter().filter(move |d| {
        d["kind"] == kind
            && docs.iter().any(|b| {
                b["kind"] == binding.as_str() && b["spec"]["policyName"] == d["metadata"]["name"]
            })
    })
}

/// The resource rules of a policy as celgate registers them by default: `*` spelled out as
/// CREATE, UPDATE, DELETE; the operations a rule names (CONNECT included) as they are.
fn registered_rules(policy: &Value) -> Vec<Value> {
    let rules = policy["spec"]["matchConstraints"]["resourceRules"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    rules
        .into_iter()
        .map(|mut rule| {
            let operations = rule["operations"].as_array().cloned().unwrap_or_default();
            if operations.iter().any(|o| o == "*") {
                rule["operations"] = json!(["CREATE", "UPDATE", "DELETE"]);
            }
            rule
        })
        .collect()
}

/// The rules of `wanted` that no webhook of `cfg` (named as given, or any) sends: celgate
/// registers a policy's rule unless another registered rule covers it.
fn missing_rules(cfg: &Value, wanted: &[(Option<&str>, Value)]) -> Vec<Value> {
    wanted
        .iter()
        .filter(|(webhook, rule)| {
            !cfg["webhooks"].as_array().into_iter().flatten().any(|w| {
                webhook.is_none_or(|name| w["name"] == name)
                    && w["rules"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|have| sends_all(have, rule))
            })
        })
        .map(|(_, rule)| rule.clone())
        .collect()
}

/// Whether kube-apiserver sends a webhook with rule `have` every request rule `want` matches:
/// each operation, group and version of `want` is `have`'s or `have` names `*`; each resource
/// entry is matched by one of `have`'s (resource and subresource each `*` or the same, a
/// subresource `*` matching none too); the scope is `*` or the same.
fn sends_all(have: &Value, want: &Value) -> bool {
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect()
    };
    let within = |field: &str| {
        let held = names(&have[field]);
        held.iter().any(|h| h == "*") || names(&want[field]).iter().all(|w| held.contains(w))
    };
    let entry = |held: &str, wanted: &str| {
        let (held_resource, held_sub) = held.split_once('/').unwrap_or((held, ""));
        let (resource, sub) = wanted.split_once('/').unwrap_or((wanted, ""));
        (held_resource == "*" || held_resource == resource) && (held_sub == "*" || held_sub == sub)
    };
    let held = names(&have["resources"]);
    let scope = |v: &Value| v.as_str().unwrap_or("*").to_string();
    ["operations", "apiGroups", "apiVersions"]
        .iter()
        .all(|f| within(f))
        && names(&want["resources"])
            .iter()
            .all(|w| held.iter().any(|h| entry(h, w)))
        && (scope(&have["scope"]) == "*" || scope(&have["scope"]) == scope(&want["scope"]))
}

/// The probe resource of a sentinel step: two per kind of sentinel, alternating, none of them
/// touched by a scenario.
fn probe_resource(step: u32, mutating: bool) -> &'static str {
    match (mutating, step.is_multiple_of(2)) {
        (false, true) => "resourcequotas",
        (false, false) => "limitranges",
        (true, true) => "serviceaccounts",
        (true, false) => "podtemplates",
    }
}

fn probe_body(resource: &str) -> Value {
    match resource {
        "resourcequotas" => {
            json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "probe"}, "spec": {}})
        }
        "limitranges" => json!({"apiVersion": "v1", "kind": "LimitRange",
            "metadata": {"name": "probe"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]}}),
        "serviceaccounts" => {
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "probe"}})
        }
        _ => json!({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "probe"},
            "template": {"spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_is_reported_only_when_the_values_differ() {
        assert_eq!(difference("code", &403, &403, true), None);
        assert_eq!(
            difference("code", &403, &500, true).as_deref(),
            Some("code: in-tree 403 vs celgate 500")
        );
        assert_eq!(
            difference("message", &"a", &"b", false).as_deref(),
            Some("message:\n        in-tree \"a\"\n        celgate \"b\"")
        );
    }

    #[test]
    fn a_warning_header_is_unquoted() {
        assert_eq!(parse_warning(r#"299 - "a \"b\" \\ c""#), r#"a "b" \ c"#);
        assert_eq!(parse_warning("no quotes"), "no quotes");
    }

    #[test]
    fn a_filter_selects_by_prefix_and_fails_when_a_prefix_selects_nothing() {
        let table = ["rules-basic", "rules-exclude", "params"];
        fn name<'a>(s: &'a &str) -> &'a str {
            s
        }
        assert_eq!(select(&table, name, None).map(|s| s.len()), Ok(3));
        assert_eq!(select(&table, name, Some("rules")).map(|s| s.len()), Ok(2));
        let err = select(&table, name, Some("params,nope"))
            .err()
            .unwrap_or_else(|| panic!("a prefix that selects nothing was accepted"));
        assert!(err.contains("\"nope\""), "{err}");
        assert!(select(&table, name, Some("")).is_err());
        assert!(select(&table, name, Some("params,")).is_err());
    }

    #[test]
    fn a_rule_counts_only_under_the_named_webhook() {
        let rule = json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["configmaps"]});
        let cfg = json!({"webhooks": [{"name": "a", "rules": [rule.clone()]}]});
        assert!(missing_rules(&cfg, &[(None, rule.clone())]).is_empty());
        assert!(missing_rules(&cfg, &[(Some("a"), rule.clone())]).is_empty());
        assert_eq!(
            missing_rules(&cfg, &[(Some("b"), rule.clone())]),
            std::slice::from_ref(&rule)
        );
        let other = json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"],
            "resources": ["configmaps"]});
        assert_eq!(missing_rules(&cfg, &[(None, other.clone())]), [other]);
    }

    #[test]
    fn sentinels_of_both_kinds_parse_into_a_policy_and_its_binding() {
        let yaml = |engine, mutating, step| parse_docs(&sentinel_yaml(engine, mutating, step));
        for engine in [Engine::InTree, Engine::Celgate] {
            for mutating in [false, true] {
                let docs = yaml(engine, mutating, 3);
                assert_eq!(docs.len(), 2);
                let api = if mutating {
                    engine.map_api()
                } else {
                    engine.api()
                };
                assert_eq!(docs[0]["apiVersion"], api);
                assert_eq!(
                    docs[1]["kind"],
                    format!("{}Binding", docs[0]["kind"].as_str().unwrap_or_default())
                );
                assert_eq!(docs[1]["spec"]["policyName"], docs[0]["metadata"]["name"]);
                assert_eq!(
                    docs[0]["spec"]["matchConstraints"]["resourceRules"][0]["resources"][0],
                    probe_resource(3, mutating)
                );
                assert_eq!(
                    docs[1]["spec"]["validationActions"].is_null(),
                    mutating,
                    "only validating bindings carry actions"
                );
            }
        }
    }
}
