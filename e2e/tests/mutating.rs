//! celgate enforces a MutatingAdmissionPolicy end to end through the real kube-apiserver: the
//! stored object carries the mutation, a failing mutation denies with upstream's message, and
//! the policy and its binding report Ready.

use std::time::Duration;

use celgate_e2e::{Celgate, Cluster, create_namespace, inner_message, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::PostParams;
use kube::{Api, Client};

const NAMESPACE: &str = "mutated";

/// A celgate MutatingAdmissionPolicy over ConfigMap creates whose names start with `prefix`.
fn policy(name: &str, prefix: &str, mutation: &str) -> String {
    format!(
        r#"apiVersion: admission.celgate.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: {name}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  matchConditions:
  - name: prefix
    expression: "object.metadata.name.startsWith('{prefix}')"
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "{mutation}"
---
apiVersion: admission.celgate.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: {name}-binding
spec:
  policyName: {name}
"#
    )
}

fn config_map(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name}, "data": {"k": "v"}
    }))
    .unwrap_or_else(|e| panic!("config map fixture: {e}"))
}

/// Creates ConfigMaps `<prefix>-<n>` until one is admitted with the label `team` set (the
/// policy is enforced once it is); returns the stored object.
async fn wait_mutated(client: &Client, prefix: &str) -> ConfigMap {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let mut n = 0;
    wait_for(
        "a created ConfigMap to carry the label",
        Duration::from_secs(30),
        || {
            n += 1;
            let (api, name) = (api.clone(), format!("{prefix}-{n}"));
            async move {
                let created = api.create(&PostParams::default(), &config_map(&name)).await;
                let created = created.unwrap_or_else(|e| panic!("cannot create {name}: {e}"));
                let labels = created.metadata.labels.clone().unwrap_or_default();
                labels.contains_key("team").then_some(created)
            }
        },
    )
    .await
}

/// The status of condition `Ready` of a celgate object (`kind` as kubectl names it).
fn ready(cluster: &Cluster, kind: &str, name: &str) -> Option<String> {
    let out = cluster.kubectl(
        &[
            "get",
            kind,
            name,
            "-o",
            "jsonpath={.status.conditions[?(@.type=='Ready')].status}",
        ],
        "",
    );
    let status = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !status.is_empty()).then_some(status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutating_policy_mutates_stored_objects_denies_failures_and_is_ready() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let celgate = Celgate::start(&cluster).await;
    let client = cluster.client().await;
    create_namespace(&client, NAMESPACE, "celgate").await;

    // A label added through the real kube-apiserver: the stored object has it.
    cluster.apply(&policy(
        "label.example.com",
        "labelled",
        "Object{metadata: Object.metadata{labels: {'team': 'a'}}}",
    ));
    let created = wait_mutated(&client, "labelled").await;
    let name = created.metadata.name.clone().unwrap_or_default();
    let stored = Api::<ConfigMap>::namespaced(client.clone(), NAMESPACE)
        .get(&name)
        .await
        .unwrap_or_else(|e| panic!("cannot read {name}: {e}"));
    let labels = stored.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("team").map(String::as_str), Some("a"));
    assert_eq!(
        stored.data.unwrap_or_default().get("k").map(String::as_str),
        Some("v"),
        "the rest of the object is untouched"
    );

    // A mutation the schema rejects denies the request with upstream's message and code.
    cluster.apply(&policy(
        "broken.example.com",
        "broken",
        "Object{spec: Object.spec{replicas: 1}}",
    ));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let mut n = 0;
    let (message, code) = wait_for(
        "a ConfigMap the broken policy matches to be denied",
        Duration::from_secs(30),
        || {
            n += 1;
            let (api, name) = (api.clone(), format!("broken-{n}"));
            async move {
                match api.create(&PostParams::default(), &config_map(&name)).await {
                    Err(kube::Error::Api(status)) => Some((status.message, status.code)),
                    Err(e) => panic!("cannot create {name}: {e}"),
                    Ok(_) => None,
                }
            }
        },
    )
    .await;
    assert!(
        message.starts_with("admission webhook \"mutate.celgate.io\" denied the request: "),
        "{message}"
    );
    assert_eq!(
        inner_message(&message),
        "policy 'broken.example.com' with binding 'broken.example.com-binding' denied request: \
         error applying patch: failed to convert patch object to typed object: .spec: field not \
         declared in schema"
    );
    assert_eq!(code, 403);

    // Both report Ready, as validating policies do once enforced.
    wait_for(
        "the mutating policy to be Ready",
        Duration::from_secs(30),
        || {
            let status = ready(&cluster, "cmap", "label.example.com");
            async move { (status.as_deref() == Some("True")).then_some(()) }
        },
    )
    .await;
    wait_for("the binding to be Ready", Duration::from_secs(30), || {
        let status = ready(&cluster, "cmapb", "label.example.com-binding");
        async move { (status.as_deref() == Some("True")).then_some(()) }
    })
    .await;
    assert!(
        !celgate.logs().contains("does not enforce"),
        "celgate still says it does not enforce mutating policies"
    );
}
