//! The background audit's fixture, for its e2e test and its benchmark: a policy over three
//! kinds (ConfigMaps, Secrets, ServiceAccounts) with a ConfigMap param, variables, a match
//! condition and message expressions, bound in namespaces labelled `audited=yes`; objects of the
//! three kinds spread over namespaces, some of which break one rule or another; and the in-tree
//! oracle: each stored object created again in a server-side dry run under the in-tree policy
//! with a Deny binding.

use std::collections::BTreeSet;

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

/// The policy's name.
pub const POLICY: &str = "audit-owners";
/// The namespace of the param.
pub const PARAMS_NAMESPACE: &str = "audit-params";
/// The param's name.
pub const PARAM: &str = "audit-limits";

/// The policy and its binding for `api` (celgate's or the in-tree group), the binding named
/// `binding` with `actions`, selecting namespaces labelled `audited=<audited>`.
pub fn policy(api: &str, binding: &str, actions: &str, audited: &str) -> String {
    format!(
        r#"apiVersion: {api}
kind: ValidatingAdmissionPolicy
metadata:
  name: {POLICY}
  annotations:
    audit.celgate.io/severity: high
    audit.celgate.io/category: Ownership
spec:
  failurePolicy: Fail
  paramKind: {{apiVersion: v1, kind: ConfigMap}}
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps", "secrets", "serviceaccounts"]
  matchConditions:
  - name: not-the-params
    expression: "object.metadata.name != '{PARAM}'"
  variables:
  - name: labels
    expression: "has(object.metadata.labels) ? object.metadata.labels : {{}}"
  validations:
  - expression: "'owner' in variables.labels"
    messageExpression: "object.kind + ' ' + object.metadata.name + ' has no owner label'"
  - expression: "object.kind != 'ConfigMap' || !has(object.data) || size(object.data) <= int(params.data.maxKeys)"
    messageExpression: "'ConfigMap ' + object.metadata.name + ' has ' + string(size(object.data)) + ' keys, more than ' + params.data.maxKeys"
  - expression: "object.kind != 'Secret' || object.type != 'kubernetes.io/basic-auth'"
    message: "basic-auth Secrets are not allowed"
  - expression: "object.kind != 'ServiceAccount' || !has(object.automountServiceAccountToken) || !object.automountServiceAccountToken"
    message: "ServiceAccounts must not automount their token"
---
apiVersion: {api}
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {binding}
spec:
  policyName: {POLICY}
  validationActions: [{actions}]
  paramRef: {{name: {PARAM}, namespace: {PARAMS_NAMESPACE}, parameterNotFoundAction: Deny}}
  matchResources:
    namespaceSelector:
      matchLabels: {{audited: "{audited}"}}
"#
    )
}

/// The param, allowing ConfigMaps of at most `max_keys` keys.
pub fn param(max_keys: u32) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {PARAM}\n  namespace: {PARAMS_NAMESPACE}\ndata:\n  maxKeys: \"{max_keys}\"\n"
    )
}

/// Namespace `i` of `count`: every one but the last is audited (the last proves the
/// binding's namespace selector).
pub fn namespaces(prefix: &str, count: usize) -> Vec<Value> {
    (0..count)
        .map(|i| {
            let audited = if i + 1 < count { "yes" } else { "no" };
            json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": format!("{prefix}-{i}"), "labels": {"audited": audited}}})
        })
        .collect()
}

/// Object `i` of the fixture, in one of `namespaces` namespaces named `<prefix>-<n>`: a
/// ConfigMap, a Secret or a ServiceAccount, which may lack its owner label, have too many keys,
/// be a basic-auth Secret or automount its token.
pub fn object(prefix: &str, namespaces: usize, i: usize) -> Value {
    let namespace = format!("{prefix}-{}", i % namespaces.max(1));
    let mut metadata = json!({"name": format!("obj-{i}"), "namespace": namespace});
    if !i.is_multiple_of(4) {
        metadata["labels"] = json!({"owner": format!("team-{}", i % 3)});
    }
    match i % 3 {
        0 => {
            let data: serde_json::Map<String, Value> = (0..i % 7)
                .map(|k| (format!("key-{k}"), json!(format!("value {k}"))))
                .collect();
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
        }
        1 => {
            let (kind, data) = if i % 5 == 2 {
                ("kubernetes.io/basic-auth", json!({"username": "YWRtaW4="}))
            } else {
                ("Opaque", json!({"token": "c2VjcmV0"}))
            };
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": kind, "data": data})
        }
        _ => json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata,
            "automountServiceAccountToken": i % 6 == 1}),
    }
}

/// The three kinds' resources.
pub fn kinds() -> [ApiResource; 3] {
    [
        ("ConfigMap", "configmaps"),
        ("Secret", "secrets"),
        ("ServiceAccount", "serviceaccounts"),
    ]
    .map(|(kind, plural)| ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    })
}

/// A stored object: kind, namespace, name.
pub type Key = (String, String, String);

/// Every stored object of the three kinds in the namespaces `in_namespace` accepts.
pub async fn stored(client: &Client, in_namespace: impl Fn(&str) -> bool) -> Vec<(Key, Value)> {
    let mut out = Vec::new();
    for kind in kinds() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind);
        let list = api
            .list(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", kind.plural));
        for object in list.items {
            let namespace = object.metadata.namespace.clone().unwrap_or_default();
            if !in_namespace(&namespace) {
                continue;
            }
            let name = object.metadata.name.clone().unwrap_or_default();
            let mut value = serde_json::to_value(&object)
                .unwrap_or_else(|e| panic!("{} {name} as JSON: {e}", kind.kind));
            value["apiVersion"] = json!("v1");
            value["kind"] = json!(kind.kind);
            out.push(((kind.kind.clone(), namespace, name), value));
        }
    }
    out
}

/// What the in-tree plugin answers each stored object created again in a server-side dry run
/// (without its resourceVersion): the denied ones, each with the denial's own message (after
/// `denied request: `). An object admitted meets its stored self (AlreadyExists).
pub async fn in_tree_denials(client: &Client, objects: &[(Key, Value)]) -> BTreeSet<(Key, String)> {
    let mut denied = BTreeSet::new();
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    for ((kind, namespace, name), object) in objects {
        let resource = kinds()
            .into_iter()
            .find(|k| &k.kind == kind)
            .unwrap_or_else(|| panic!("{kind} is not a fixture kind"));
        let mut object = object.clone();
        if let Some(metadata) = object["metadata"].as_object_mut() {
            metadata.remove("resourceVersion");
        }
        let object: DynamicObject = serde_json::from_value(object)
            .unwrap_or_else(|e| panic!("{kind} {name} as an object: {e}"));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        match api.create(&params, &object).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => {
                let message = s
                    .message
                    .split_once("denied request: ")
                    .map_or(s.message.as_str(), |(_, m)| m)
                    .to_string();
                denied.insert(((kind.clone(), namespace.clone(), name.clone()), message));
            }
            Err(e) => panic!("dry-run create of {kind} {namespace}/{name}: {e}"),
        }
    }
    denied
}

/// What celgate's PolicyReports list: each object with a result of the policy, with the result's
/// message.
pub async fn reported(client: &Client) -> BTreeSet<(Key, String)> {
    let resource = ApiResource {
        group: "wgpolicyk8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "wgpolicyk8s.io/v1alpha2".into(),
        kind: "PolicyReport".into(),
        plural: "policyreports".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let list = api
        .list(&ListParams::default().labels("app.kubernetes.io/managed-by=celgate"))
        .await
        .unwrap_or_else(|e| panic!("cannot list PolicyReports: {e}"));
    let mut out = BTreeSet::new();
    for report in list.items {
        let scope = &report.data["scope"];
        let key = (
            scope["kind"].as_str().unwrap_or_default().to_string(),
            scope["namespace"].as_str().unwrap_or_default().to_string(),
            scope["name"].as_str().unwrap_or_default().to_string(),
        );
        for result in report.data["results"].as_array().into_iter().flatten() {
            if result["policy"] == POLICY {
                let message = result["message"].as_str().unwrap_or_default().to_string();
                out.insert((key.clone(), message));
            }
        }
    }
    out
}
