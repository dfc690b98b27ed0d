//! Params, with celgate running as its ServiceAccount under the shipped RBAC: a ConfigMap
//! paramKind read by name, a missing param under `Deny`, an unserved kind that heals, a kind
//! celgate may not read (denied at once with the permission to grant, reported in status and an
//! event) that heals when an admin grants it through the aggregated ClusterRole, and param
//! watches that follow use (a kind unbound and bound again is watched afresh). Each decision is
//! compared with the in-tree plugin's where the in-tree plugin is a valid oracle (its paramKind
//! stays bound for the whole run, kubernetes#130887). After a restart, a request whose params
//! are still syncing waits for them instead of being denied (kubernetes#141367).

use std::time::Duration;

use celgate_e2e::{
    Celgate, Cluster, Identity, create_namespace, dry_run_deployment, inner_message, wait_for,
};

const POLICY: &str = r#"
apiVersion: API
kind: ValidatingAdmissionPolicy
metadata:
  name: "replicalimit-policy.example.com"
spec:
  failurePolicy: Fail
  paramKind:
    apiVersion: PARAM_API
    kind: PARAM_KIND
  matchConstraints:
    resourceRules:
    - apiGroups:   ["apps"]
      apiVersions: ["v1"]
      operations:  ["CREATE", "UPDATE"]
      resources:   ["deployments"]
  validations:
    - expression: "object.spec.replicas <= int(params.data.maxreplicas)"
      reason: Invalid
---
apiVersion: API
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: "replicalimit-binding-test.example.com"
spec:
  policyName: "replicalimit-policy.example.com"
  validationActions: [Deny]
  paramRef:
    name: "replica-limit-test.example.com"
    namespace: "params"
    parameterNotFoundAction: Deny
  matchResources:
    namespaceSelector:
      matchLabels:
        engine: ENGINE
"#;

fn policy(api: &str, engine: &str, param_api: &str, param_kind: &str) -> String {
    POLICY
        .replace("PARAM_API", param_api)
        .replace("PARAM_KIND", param_kind)
        .replace("API", api)
        .replace("ENGINE", engine)
}

async fn try_create(client: &kube::Client, ns: &str, replicas: i32) -> Result<(), String> {
    dry_run_deployment(client, ns, replicas)
        .await
        .map_err(|(message, _)| inner_message(&message).to_string())
}

/// Waits until a create of `replicas` in `ns` gives `want` (`None` = admitted).
async fn expect(client: &kube::Client, ns: &str, replicas: i32, want: Option<&str>) {
    expect_within(client, ns, replicas, want, Duration::from_secs(30)).await;
}

/// [`expect`], waiting up to `limit`.
async fn expect_within(
    client: &kube::Client,
    ns: &str,
    replicas: i32,
    want: Option<&str>,
    limit: Duration,
) {
    let want = want.map(str::to_string);
    let what = format!("{replicas} replicas in {ns} → {want:?}");
    wait_for(&what, limit, || {
        let want = want.clone();
        async move { (try_create(client, ns, replicas).await.err() == want).then_some(()) }
    })
    .await;
}

fn configmap(cluster: &Cluster, max: u32) {
    cluster.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: replica-limit-test.example.com\n  namespace: params\ndata:\n  maxreplicas: \"{max}\"\n"
    ));
}

const PREFIX: &str = "ValidatingAdmissionPolicy 'replicalimit-policy.example.com' with binding 'replicalimit-binding-test.example.com' denied request: ";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_decide_like_in_tree_and_follow_the_cluster() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let _celgate = Celgate::start_as(&cluster, Identity::ServiceAccount).await;
    let client = cluster.client().await;
    for (ns, engine) in [
        ("params", "none"),
        ("ours", "celgate"),
        ("theirs", "intree"),
    ] {
        create_namespace(&client, ns, engine).await;
    }
    cluster.apply(&policy(
        "admission.celgate.io/v1",
        "celgate",
        "v1",
        "ConfigMap",
    ));
    cluster.apply(&policy(
        "admissionregistration.k8s.io/v1",
        "intree",
        "v1",
        "ConfigMap",
    ));

    // No param yet: both deny with the Deny action's configuration error.
    let missing = format!(
        "{PREFIX}failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
    );
    for ns in ["ours", "theirs"] {
        expect(&client, ns, 1, Some(&missing)).await;
    }

    // The param appears: its value decides, in both engines, with the same message.
    configmap(&cluster, 3);
    let too_many =
        format!("{PREFIX}failed expression: object.spec.replicas <= int(params.data.maxreplicas)");
    for ns in ["ours", "theirs"] {
        expect(&client, ns, 4, Some(&too_many)).await;
        expect(&client, ns, 3, None).await;
    }
    // The param changes: the new value is used.
    configmap(&cluster, 5);
    for ns in ["ours", "theirs"] {
        expect(&client, ns, 4, None).await;
        expect(&client, ns, 6, Some(&too_many)).await;
    }

    // Churn (celgate only): unbind the ConfigMap kind, change the param, bind again: the
    // watch starts afresh and sees the new value (in-tree 1.36 would keep a frozen cache).
    let out = cluster.kubectl(
        &[
            "delete",
            "cvapb",
            "replicalimit-binding-test.example.com",
            "--wait",
        ],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    expect(&client, "ours", 100, None).await;
    configmap(&cluster, 8);
    cluster.apply(&policy(
        "admission.celgate.io/v1",
        "celgate",
        "v1",
        "ConfigMap",
    ));
    expect(&client, "ours", 8, None).await;
    expect(&client, "ours", 9, Some(&too_many)).await;

    // An unserved paramKind is a policy configuration error in both engines ...
    let unserved = "ValidatingAdmissionPolicy 'replicalimit-policy.example.com' denied request: failed to configure policy: failed to find resource referenced by paramKind: 'example.invalid/v1, Kind=Nope'";
    cluster.apply(&policy(
        "admission.celgate.io/v1",
        "celgate",
        "example.invalid/v1",
        "Nope",
    ));
    expect(&client, "ours", 1, Some(unserved)).await;

    // ... and heals in celgate when the kind appears.
    cluster.apply(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: nopes.example.invalid
spec:
  group: example.invalid
  names: {kind: Nope, plural: nopes, singular: nope}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#,
    );
    cluster.wait_established(&["crd/nopes.example.invalid"]);
    cluster.apply("apiVersion: example.invalid/v1\nkind: Nope\nmetadata:\n  name: replica-limit-test.example.com\n  namespace: params\ndata:\n  maxreplicas: \"2\"\n");

    // The shipped RBAC lets celgate read ConfigMaps only: the binding fails at once with the
    // permission to grant, ...
    let forbidden = "celgate may not list nopes.example.invalid (RBAC: grant list, watch on \"nopes\" in API group \"example.invalid\" to ServiceAccount celgate-system/celgate, e.g. with a ClusterRole labelled admission.celgate.io/aggregate-to-params=true)";
    let denied = format!("{PREFIX}failed to configure binding: {forbidden}");
    // (engine/snapshot's dispatch tests prove on a paused clock that it is not waited for).
    expect(&client, "ours", 2, Some(&denied)).await;
    // ... which the policy's Ready condition and a Warning event say too.
    wait_for(
        "Ready=False ParamKindForbidden on the policy",
        Duration::from_secs(30),
        || async {
            let out = cluster.kubectl(
                &[
                    "get",
                    "cvap",
                    "replicalimit-policy.example.com",
                    "-o",
                    "json",
                ],
                "",
            );
            let policy: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            let ready = policy["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")?
                .clone();
            (ready["status"] == "False"
                && ready["reason"] == "ParamKindForbidden"
                && ready["message"] == forbidden)
                .then_some(())
        },
    )
    .await;
    wait_for(
        "a ParamKindForbidden Warning event on the policy",
        Duration::from_secs(30),
        || async {
            let out = cluster.kubectl(
                &["get", "events.events.k8s.io", "-n", "default", "-o", "json"],
                "",
            );
            let events: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            events["items"]
                .as_array()?
                .iter()
                .any(|e| {
                    e["reason"] == "ParamKindForbidden"
                        && e["type"] == "Warning"
                        && e["note"] == forbidden
                        && e["regarding"]["name"] == "replicalimit-policy.example.com"
                })
                .then_some(())
        },
    )
    .await;

    // An admin grants the kind with a labelled ClusterRole (as config/samples/param-kind-rbac.yaml
    // shows): celgate's next list succeeds and the params decide. The watch retries a forbidden
    // list with kube's backoff (up to 30 s between tries), hence the longer wait.
    cluster.apply(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: celgate-params-nopes
  labels:
    admission.celgate.io/aggregate-to-params: "true"
rules:
- apiGroups: ["example.invalid"]
  resources: ["nopes"]
  verbs: ["list", "watch"]
"#,
    );
    expect_within(&client, "ours", 2, None, Duration::from_secs(90)).await;
    expect(&client, "ours", 3, Some(&too_many)).await;
}

/// Filler ConfigMaps in `params`, so the param kind's first list after a restart takes a while.
fn filler_configmaps(cluster: &Cluster, count: usize) {
    let items: Vec<String> = (0..count)
        .map(|i| {
            format!(
                "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: filler-{i}\n    namespace: params\n  data:\n    blob: \"{}\"\n",
                "x".repeat(2048)
            )
        })
        .collect();
    cluster.apply(&format!(
        "apiVersion: v1\nkind: List\nitems:\n{}",
        items.concat()
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_requests_wait_for_params_still_syncing_instead_of_denying() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let celgate = Celgate::start_as(&cluster, Identity::ServiceAccount).await;
    let client = cluster.client().await;
    create_namespace(&client, "params", "none").await;
    create_namespace(&client, "ours", "celgate").await;
    configmap(&cluster, 3);
    filler_configmaps(&cluster, 400);
    cluster.apply(&policy(
        "admission.celgate.io/v1",
        "celgate",
        "v1",
        "ConfigMap",
    ));
    let too_many =
        format!("{PREFIX}failed expression: object.spec.replicas <= int(params.data.maxreplicas)");
    expect(&client, "ours", 4, Some(&too_many)).await;

    // Restart on the same port (the registration stays valid) and ask at once, again and
    // again: until the new process answers, the API server reports the failed call; the first
    // answer celgate gives must already use the param, not "not yet synced".
    let port = celgate.port;
    drop(celgate);
    let celgate = Celgate::spawn_as(
        &cluster,
        Identity::ServiceAccount,
        port,
        "celgate",
        &[],
        "info",
    )
    .await;
    // Asked in a tight loop (bounded by count and time), so the first request celgate answers
    // lands as close to its start as the API server allows.
    let mut unreachable = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let first = loop {
        assert!(
            unreachable < 20_000 && std::time::Instant::now() < deadline,
            "the restarted celgate never answered\n{}",
            celgate.logs()
        );
        match dry_run_deployment(&client, "ours", 4).await {
            Err((message, _)) if message.contains("failed calling webhook") => {
                unreachable += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err((message, _)) => break Some(inner_message(&message).to_string()),
            Ok(_) => break None,
        }
    };
    assert!(
        unreachable > 0,
        "no request reached the API server while celgate was down; the test proved nothing"
    );
    assert_eq!(
        first.as_deref(),
        Some(too_many.as_str()),
        "the first decision after the restart\n{}",
        celgate.logs()
    );
    expect(&client, "ours", 3, None).await;
}
