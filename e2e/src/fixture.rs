//! The realistic benchmark fixture (issue 13): a generated set of policies of the mix users write
//! (ConfigMap params, variables, message expressions, match conditions, one wildcard rule), of
//! which a chosen number match a 6 KB Pod create and the rest match other resources, and the
//! Pod's AdmissionReview.
//!
//! Shared by the in-process webhook load test (`webhook/benches/load.rs`, which compiles
//! [`Policy`] into engine specs), `make bench-scale` (which applies [`validating_manifests`]
//! through kube-apiserver) and `make bench-e2e`'s realistic part (which applies
//! [`validating_manifests`] and [`mutating_manifests`] in-tree and as celgate objects). It depends on `serde_json` alone so both can include it.

use serde_json::{Value, json};

/// The namespace of the Pod under review (labelled `env: prod`, `team: storefront`).
pub const REVIEW_NAMESPACE: &str = "shop";
/// The namespace of the ConfigMaps the policies' params are.
pub const PARAMS_NAMESPACE: &str = "bench-params";
/// How many param ConfigMaps there are; policy `i` with params reads `bench-params-{i % PARAM_MAPS}`.
pub const PARAM_MAPS: usize = 10;
/// The service account the Pod runs as (created in [`REVIEW_NAMESPACE`] by the cluster bench).
pub const SERVICE_ACCOUNT: &str = "web";

/// The requests a policy's match constraints select.
#[derive(Clone, Debug)]
pub struct Rule {
    /// `apiGroups`.
    pub api_groups: Vec<String>,
    /// `apiVersions`.
    pub api_versions: Vec<String>,
    /// `resources`.
    pub resources: Vec<String>,
    /// `operations`.
    pub operations: Vec<String>,
}

/// One validation.
#[derive(Clone, Debug)]
pub struct Validation {
    /// The CEL expression that must hold.
    pub expression: String,
    /// A CEL message expression, if any.
    pub message_expression: Option<String>,
}

/// One mutation.
#[derive(Clone, Debug)]
pub enum Mutation {
    /// An `ApplyConfiguration` expression.
    Apply(String),
    /// A `JSONPatch` expression.
    JsonPatch(String),
}

/// One generated policy with its binding.
#[derive(Clone, Debug)]
pub struct Policy {
    /// The policy's name; its binding is `<name>-binding`.
    pub name: String,
    /// The policy's one resource rule.
    pub rule: Rule,
    /// The ConfigMap (in [`PARAMS_NAMESPACE`]) the binding's paramRef names, if any (every
    /// param ConfigMap has every key the policies read).
    pub param: Option<String>,
    /// Variables, in order.
    pub variables: Vec<(String, String)>,
    /// Match conditions.
    pub match_conditions: Vec<(String, String)>,
    /// The binding's namespace selector (`matchLabels`), empty for all namespaces.
    pub namespace_labels: Vec<(String, String)>,
    /// Validations (validating policies).
    pub validations: Vec<Validation>,
    /// Mutations (mutating policies).
    pub mutations: Vec<Mutation>,
    /// Whether it matches the Pod review.
    pub matches_review: bool,
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn rule(group: &str, resources: &[&str], operations: &[&str]) -> Rule {
    Rule {
        api_groups: strings(&[group]),
        api_versions: strings(&["*"]),
        resources: strings(resources),
        operations: strings(operations),
    }
}

fn pods() -> Rule {
    rule("", &["pods"], &["CREATE", "UPDATE"])
}

/// Every resource of the core group, on create: the fixture's one wildcard rule.
fn core_wildcard() -> Rule {
    rule("", &["*"], &["CREATE"])
}

/// The resources the non-matching policies select, in turn.
const OTHER_RESOURCES: [(&str, &str); 16] = [
    ("apps", "deployments"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("apps", "replicasets"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("", "services"),
    ("", "configmaps"),
    ("", "secrets"),
    ("", "serviceaccounts"),
    ("networking.k8s.io", "ingresses"),
    ("networking.k8s.io", "networkpolicies"),
    ("rbac.authorization.k8s.io", "roles"),
    ("autoscaling", "horizontalpodautoscalers"),
    ("policy", "poddisruptionbudgets"),
    ("example.com", "widgets"),
];

fn check(expression: &str, message: Option<&str>) -> Validation {
    Validation {
        expression: expression.to_string(),
        message_expression: message.map(str::to_string),
    }
}

fn named(name: &str, expression: &str) -> (String, String) {
    (name.to_string(), expression.to_string())
}

/// The twenty checks of the Pod policies: each holds for [`pod`]. Index 19 is the wildcard.
fn pod_policy(j: usize) -> Policy {
    let mut p = Policy {
        name: String::new(),
        rule: pods(),
        param: None,
        variables: Vec::new(),
        match_conditions: Vec::new(),
        namespace_labels: Vec::new(),
        validations: Vec::new(),
        mutations: Vec::new(),
        matches_review: true,
    };
    let containers = "object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])";
    let v = match j {
        0 => {
            p.param = Some(String::new());
            check(
                "object.spec.containers.all(c, c.image.startsWith(params.data.registry))",
                Some(
                    "'images of ' + object.metadata.name + ' must come from ' + params.data.registry",
                ),
            )
        }
        1 => check(
            "object.spec.containers.all(c, has(c.securityContext) && has(c.securityContext.runAsNonRoot) && c.securityContext.runAsNonRoot)",
            None,
        ),
        2 => check(
            "!has(object.spec.hostNetwork) || !object.spec.hostNetwork",
            None,
        ),
        3 => {
            p.variables = vec![named("containers", containers)];
            check(
                "variables.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)",
                Some("'every container of ' + object.metadata.name + ' needs a memory limit'"),
            )
        }
        4 => check(
            "['app', 'team', 'version'].all(l, has(object.metadata.labels) && l in object.metadata.labels)",
            Some("'pod ' + object.metadata.name + ' lacks a required label'"),
        ),
        5 => check(
            "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged) || !c.securityContext.privileged)",
            None,
        ),
        6 => {
            p.variables = vec![named("containers", containers)];
            check(
                "variables.containers.all(c, has(c.securityContext) && has(c.securityContext.allowPrivilegeEscalation) && !c.securityContext.allowPrivilegeEscalation)",
                None,
            )
        }
        7 => check(
            "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath))",
            Some("'pod ' + object.metadata.name + ' mounts a host path'"),
        ),
        8 => check(
            "!object.spec.containers.exists(c, c.image.endsWith(':latest'))",
            Some("'an image of ' + object.metadata.name + ' uses :latest'"),
        ),
        9 => {
            p.match_conditions = vec![
                named(
                    "not-exempt",
                    "!has(object.metadata.labels) || !('policy.example.com/exempt' in object.metadata.labels)",
                ),
                named(
                    "not-system",
                    "!request.userInfo.username.startsWith('system:node:')",
                ),
            ];
            check(
                "object.spec.containers.all(c, has(c.readinessProbe) && has(c.livenessProbe))",
                None,
            )
        }
        10 => {
            p.param = Some(String::new());
            check(
                "size(object.spec.containers) <= int(params.data.maxcontainers)",
                Some("'at most ' + params.data.maxcontainers + ' containers'"),
            )
        }
        11 => {
            p.param = Some(String::new());
            p.namespace_labels = vec![("env".into(), "prod".into())];
            check(
                "params.data.required in object.metadata.labels",
                Some("'label ' + params.data.required + ' is required in production'"),
            )
        }
        12 => check(
            "has(object.spec.serviceAccountName) && object.spec.serviceAccountName != 'default'",
            None,
        ),
        13 => check(
            "object.spec.containers.all(c, has(c.securityContext) && has(c.securityContext.capabilities) && has(c.securityContext.capabilities.drop) && 'ALL' in c.securityContext.capabilities.drop)",
            None,
        ),
        14 => check(
            "has(object.spec.securityContext) && has(object.spec.securityContext.seccompProfile) && object.spec.securityContext.seccompProfile.type in ['RuntimeDefault', 'Localhost']",
            None,
        ),
        15 => {
            p.match_conditions = vec![named(
                "has-ports",
                "object.spec.containers.exists(c, has(c.ports))",
            )];
            check(
                "object.spec.containers.all(c, !has(c.ports) || c.ports.all(p, p.containerPort >= 1024))",
                Some("'pod ' + object.metadata.name + ' binds a privileged port'"),
            )
        }
        16 => {
            p.variables = vec![
                named("containers", containers),
                named(
                    "envs",
                    "variables.containers.filter(c, has(c.env)).map(c, c.env).size()",
                ),
            ];
            check(
                "variables.envs == 0 || variables.containers.all(c, !has(c.env) || c.env.all(e, !e.name.contains('PASSWORD') || has(e.valueFrom)))",
                None,
            )
        }
        17 => {
            p.param = Some(String::new());
            check(
                "!has(object.spec.tolerations) || size(object.spec.tolerations) <= int(params.data.maxtolerations)",
                None,
            )
        }
        18 => {
            p.namespace_labels = vec![("team".into(), "storefront".into())];
            check(
                "object.metadata.labels.team == namespaceObject.metadata.labels.team",
                Some("'pods of ' + namespaceObject.metadata.name + ' belong to its team'"),
            )
        }
        _ => {
            p.rule = core_wildcard();
            check("object.metadata.name.size() <= 253", None)
        }
    };
    p.validations = vec![v];
    p
}

/// A policy over another resource (never matches the Pod review), varied by `i`: params every
/// 4th, variables every 3rd, a message expression every 2nd, match conditions every 5th.
fn other_policy(i: usize) -> Policy {
    let (group, resource) = OTHER_RESOURCES[i % OTHER_RESOURCES.len()];
    let mut p = Policy {
        name: String::new(),
        rule: rule(group, &[resource], &["CREATE", "UPDATE"]),
        param: None,
        variables: Vec::new(),
        match_conditions: Vec::new(),
        namespace_labels: Vec::new(),
        validations: Vec::new(),
        mutations: Vec::new(),
        matches_review: false,
    };
    let message = i
        .is_multiple_of(2)
        .then(|| format!("'{resource} ' + object.metadata.name + ' breaks rule {i}'"));
    let mut validations = vec![check(
        &format!("object.metadata.name.size() <= {}", 200 + i % 53),
        message.as_deref(),
    )];
    if i.is_multiple_of(3) {
        p.variables = vec![named("labelled", "has(object.metadata.labels)")];
        validations.push(check(
            &format!(
                "!variables.labelled || !('forbidden.example.com/k{i}' in object.metadata.labels)"
            ),
            None,
        ));
    }
    if i.is_multiple_of(4) {
        p.param = Some(String::new());
        validations.push(check(
            "!has(object.metadata.labels) || !(params.data.forbidden in object.metadata.labels)",
            Some("'label ' + params.data.forbidden + ' is forbidden'"),
        ));
    }
    if i.is_multiple_of(5) {
        p.match_conditions = vec![named(
            "not-controller",
            "!request.userInfo.username.startsWith('system:serviceaccount:kube-system:')",
        )];
    }
    p.validations = validations;
    p
}

/// Which of `total` policies match the review: every `total / matching`-th, the first `matching`.
fn matching_index(i: usize, total: usize, matching: usize) -> Option<usize> {
    let step = (total / matching.max(1)).max(1);
    (i.is_multiple_of(step) && i / step < matching).then_some(i / step)
}

/// `total` validating policies of which `matching` (at most 20) match the Pod review; the
/// wildcard rule is the 20th matching one.
pub fn validating(total: usize, matching: usize) -> Vec<Policy> {
    (0..total)
        .map(|i| {
            let mut p = match matching_index(i, total, matching) {
                Some(j) => pod_policy(j),
                None => other_policy(i),
            };
            p.name = format!("bench-vap-{i:04}.example.com");
            if p.param.is_some() {
                p.param = Some(format!("bench-params-{}", i % PARAM_MAPS));
            }
            p
        })
        .collect()
}

/// The mutations of the Pod's mutating policies: labels and annotations by apply
/// configuration and JSON patch, some from params and variables. Index 19 is the wildcard.
fn pod_mutating(j: usize) -> Policy {
    let mut p = Policy {
        name: String::new(),
        rule: pods(),
        param: None,
        variables: Vec::new(),
        match_conditions: Vec::new(),
        namespace_labels: Vec::new(),
        validations: Vec::new(),
        mutations: Vec::new(),
        matches_review: true,
    };
    let label = |key: &str, value: &str| {
        Mutation::Apply(format!(
            "Object{{metadata: Object.metadata{{labels: {{'{key}': {value}}}}}}}"
        ))
    };
    let annotate = |key: &str, value: &str| {
        Mutation::JsonPatch(format!(
            "[JSONPatch{{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('{key}'), value: {value}}}]"
        ))
    };
    p.mutations = match j % 5 {
        0 => vec![label(&format!("policy.example.com/m{j}"), "'true'")],
        1 => {
            p.param = Some(String::new());
            vec![label(
                &format!("policy.example.com/tier{j}"),
                "params.data.tier",
            )]
        }
        2 => {
            p.variables = vec![named("owner", "request.userInfo.username")];
            vec![annotate(
                &format!("policy.example.com/admitted-by-{j}"),
                "variables.owner",
            )]
        }
        3 => {
            p.match_conditions = vec![named(
                "labelled",
                "has(object.metadata.labels) && 'app' in object.metadata.labels",
            )];
            vec![
                label(
                    &format!("policy.example.com/app{j}"),
                    "object.metadata.labels.app",
                ),
                annotate(&format!("policy.example.com/checked-{j}"), "'yes'"),
            ]
        }
        _ => vec![Mutation::Apply(format!(
            "Object{{metadata: Object.metadata{{annotations: {{'policy.example.com/containers-{j}': string(size(object.spec.containers))}}}}}}"
        ))],
    };
    if j == 19 {
        p.rule = core_wildcard();
        p.mutations = vec![annotate("policy.example.com/seen", "'true'")];
    }
    p
}

fn other_mutating(i: usize) -> Policy {
    let mut p = other_policy(i);
    p.validations.clear();
    p.mutations = vec![Mutation::Apply(format!(
        "Object{{metadata: Object.metadata{{labels: {{'policy.example.com/n{i}': 'true'}}}}}}"
    ))];
    if p.param.is_some() {
        p.mutations.push(Mutation::JsonPatch(format!(
            "[JSONPatch{{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('policy.example.com/tier{i}'), value: params.data.tier}}]"
        )));
    }
    p
}

/// `total` mutating policies of which `matching` (at most 20) match the Pod review.
pub fn mutating(total: usize, matching: usize) -> Vec<Policy> {
    (0..total)
        .map(|i| {
            let mut p = match matching_index(i, total, matching) {
                Some(j) => pod_mutating(j),
                None => other_mutating(i),
            };
            p.name = format!("bench-map-{i:04}.example.com");
            if p.param.is_some() {
                p.param = Some(format!("bench-params-{}", i % PARAM_MAPS));
            }
            p
        })
        .collect()
}

/// The param ConfigMaps, in [`PARAMS_NAMESPACE`].
pub fn param_configmaps() -> Vec<Value> {
    (0..PARAM_MAPS)
        .map(|k| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("bench-params-{k}"), "namespace": PARAMS_NAMESPACE,
                    "labels": {"app.kubernetes.io/part-of": "celgate-bench"}},
                "data": {"registry": "registry.example.com/", "maxcontainers": "8",
                    "maxtolerations": "10", "required": "team", "forbidden": format!("forbidden.example.com/p{k}"),
                    "tier": "gold"}})
        })
        .collect()
}

/// The review's namespace as a Namespace object.
pub fn review_namespace() -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": REVIEW_NAMESPACE,
            "labels": {"kubernetes.io/metadata.name": REVIEW_NAMESPACE, "env": "prod", "team": "storefront"}}})
}

fn container(name: &str, port: u16) -> Value {
    json!({"name": name, "image": format!("registry.example.com/storefront/{name}:2.14.3"),
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "env": [{"name": "LOG_LEVEL", "value": "info"},
                {"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}],
        "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                      "requests": {"cpu": "100m", "memory": "128Mi"}},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": port, "scheme": "HTTP"},
            "periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": {"httpGet": {"path": "/live", "port": port, "scheme": "HTTP"},
            "initialDelaySeconds": 5, "periodSeconds": 10, "failureThreshold": 3},
        "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false, "privileged": false,
            "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/storefront", "readOnly": true},
                         {"name": "tmp", "mountPath": "/tmp"}],
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"})
}

/// The Pod under review (about 5.5 KB of JSON; admitted by every policy of the fixture).
pub fn pod(name: &str) -> Value {
    // A native sidecar (an init container that keeps running), so it may have probes.
    let mut init = container("log-shipper", 9090);
    init["restartPolicy"] = json!("Always");
    init["ports"] = json!([{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]);
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": REVIEW_NAMESPACE,
            "labels": {"app": "storefront", "team": "storefront", "version": "2.14.3",
                "pod-template-hash": "6d9f7c8b5"},
            "annotations": {"owner": "storefront@example.com", "prometheus.io/scrape": "true",
                "prometheus.io/port": "9102"},
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                "apiVersion": "v1", "time": "2026-11-22T07:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:team": {}, "f:version": {}},
                    "f:annotations": {".": {}, "f:owner": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}]},
        "spec": {
            "serviceAccountName": SERVICE_ACCOUNT, "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 10001, "fsGroup": 10001,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "initContainers": [init],
            "containers": [container("web", 8080), container("envoy", 8443), container("auth-proxy", 4180)],
            "volumes": [{"name": "config", "configMap": {"name": "storefront-config", "defaultMode": 420}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
            "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler", "enableServiceLinks": false},
        "status": {}})
}

/// [`pod`] as a client sends it to kube-apiserver (no managed fields, no status).
pub fn client_pod(name: &str) -> Value {
    let mut pod = pod(name);
    if let Some(meta) = pod["metadata"].as_object_mut() {
        meta.remove("managedFields");
    }
    if let Some(object) = pod.as_object_mut() {
        object.remove("status");
    }
    pod
}

/// The AdmissionReview of the Pod's create as kube-apiserver sends it (about 6 KB).
pub fn pod_review() -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "0c7f2b8e-3f6d-4f1e-8d2a-5b9c1e7a4d30",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "storefront-6d9f7c8b5-x2x7k", "namespace": REVIEW_NAMESPACE, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "5b0e6f3c-2c1d-4b8e-9f7a-3d2e1c0b9a87",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]},
            "object": pod("storefront-6d9f7c8b5-x2x7k"), "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}})
}

/// [`pod_review`] as an UPDATE: the same Pod as object and old object (an update that changes
/// nothing the policies check), as kube-apiserver sends it.
pub fn pod_update_review() -> Value {
    let mut review = pod_review();
    let request = &mut review["request"];
    request["operation"] = json!("UPDATE");
    request["oldObject"] = pod("storefront-6d9f7c8b5-x2x7k");
    request["options"] = json!({"apiVersion": "meta.k8s.io/v1", "kind": "UpdateOptions"});
    review
}

fn match_constraints(rule: &Rule) -> Value {
    json!({"resourceRules": [{"apiGroups": rule.api_groups, "apiVersions": rule.api_versions,
        "resources": rule.resources, "operations": rule.operations}]})
}

fn named_list(items: &[(String, String)]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|(name, expression)| json!({"name": name, "expression": expression}))
            .collect(),
    )
}

/// The spec parts every policy kind shares: failure policy Fail, match constraints, variables,
/// match conditions and param kind.
fn common_spec(p: &Policy) -> Value {
    let mut spec = json!({"failurePolicy": "Fail", "matchConstraints": match_constraints(&p.rule)});
    if !p.variables.is_empty() {
        spec["variables"] = named_list(&p.variables);
    }
    if !p.match_conditions.is_empty() {
        spec["matchConditions"] = named_list(&p.match_conditions);
    }
    if p.param.is_some() {
        spec["paramKind"] = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    }
    spec
}

/// The ValidatingAdmissionPolicy and its binding (`validationActions: [Deny]`) of each of
/// `policies`, in `api` (`admission.celgate.io/v1` or `admissionregistration.k8s.io/v1`).
pub fn validating_manifests(api: &str, policies: &[Policy]) -> Vec<Value> {
    let mut out = Vec::with_capacity(policies.len() * 2);
    for p in policies {
        let mut spec = common_spec(p);
        spec["validations"] = p
            .validations
            .iter()
            .map(|v| {
                let mut o = json!({"expression": v.expression, "reason": "Invalid"});
                if let Some(m) = &v.message_expression {
                    o["messageExpression"] = json!(m);
                }
                o
            })
            .collect();
        out.push(
            json!({"apiVersion": api, "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": p.name}, "spec": spec}),
        );
        let binding = json!({"policyName": p.name, "validationActions": ["Deny"]});
        out.push(
            json!({"apiVersion": api, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": format!("{}-binding", p.name)}, "spec": binding_spec(p, binding)}),
        );
    }
    out
}

/// `manifests` (from [`validating_manifests`]) with `per_policy` bindings for each policy: its
/// own, and `per_policy - 1` more, each selecting the namespaces of one more tenant
/// (`celgate-bench/tenant: t<j>`, a label no namespace of the benches carries), so a request is
/// still reviewed by the policies' own bindings while celgate holds them all.
pub fn with_tenant_bindings(mut manifests: Vec<Value>, per_policy: usize) -> Vec<Value> {
    let firsts: Vec<Value> = manifests
        .iter()
        .filter(|o| o["kind"] == "ValidatingAdmissionPolicyBinding")
        .cloned()
        .collect();
    for j in 1..per_policy {
        for first in &firsts {
            let mut binding = first.clone();
            let name = format!(
                "{}-{j}",
                first["metadata"]["name"].as_str().unwrap_or_default()
            );
            binding["metadata"]["name"] = json!(name);
            binding["spec"]["matchResources"] = json!({"namespaceSelector":
                {"matchLabels": {"celgate-bench/tenant": format!("t{j}")}}});
            manifests.push(binding);
        }
    }
    manifests
}

/// The MutatingAdmissionPolicy (reinvocation Never) and its binding of each of `policies`, in
/// `api` (`admission.celgate.io/v1`, or the in-tree version the control plane serves).
pub fn mutating_manifests(api: &str, policies: &[Policy]) -> Vec<Value> {
    let mut out = Vec::with_capacity(policies.len() * 2);
    for p in policies {
        let mut spec = common_spec(p);
        spec["reinvocationPolicy"] = json!("Never");
        spec["mutations"] = p
            .mutations
            .iter()
            .map(|m| match m {
                Mutation::Apply(e) => json!({"patchType": "ApplyConfiguration",
                    "applyConfiguration": {"expression": e}}),
                Mutation::JsonPatch(e) => json!({"patchType": "JSONPatch",
                    "jsonPatch": {"expression": e}}),
            })
            .collect();
        out.push(json!({"apiVersion": api, "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": p.name}, "spec": spec}));
        let binding = json!({"policyName": p.name});
        out.push(
            json!({"apiVersion": api, "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": format!("{}-binding", p.name)}, "spec": binding_spec(p, binding)}),
        );
    }
    out
}

/// Adds `key: value` to the namespace selector of every binding of `manifests`, so that the
/// policies apply only in namespaces so labelled.
pub fn bind_to_namespaces_labelled(manifests: &mut [Value], key: &str, value: &str) {
    for m in manifests
        .iter_mut()
        .filter(|m| m["kind"].as_str().is_some_and(|k| k.ends_with("Binding")))
    {
        m["spec"]["matchResources"]["namespaceSelector"]["matchLabels"][key] = json!(value);
    }
}

/// The binding spec of `p` from `binding` (its policy name and actions): the paramRef and the
/// namespace selector the fixture gives it.
fn binding_spec(p: &Policy, mut binding: Value) -> Value {
    if let Some(param) = &p.param {
        binding["paramRef"] = json!({"name": param, "namespace": PARAMS_NAMESPACE,
            "parameterNotFoundAction": "Deny"});
    }
    if !p.namespace_labels.is_empty() {
        let labels: serde_json::Map<String, Value> = p
            .namespace_labels
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        binding["matchResources"] = json!({"namespaceSelector": {"matchLabels": labels}});
    }
    binding
}
