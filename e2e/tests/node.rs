//! celgate installed as a cluster installs it, on a real node (e2e/node: kubelet, containerd,
//! kube-proxy, kube-scheduler, and a loopback registry the image is pulled from by reference):
//!
//! 1. `kubectl apply -k config/default` (a copy pointing `images:` at the registry) brings up two
//!    ready replicas; the API server calls the webhook through the `celgate-webhook` Service and
//!    a denial of the docs' first example (config/samples/demo-policy.yaml) comes back; from the
//!    Pods, as the ServiceAccount (the audit log says who wrote), celgate writes status and
//!    events, holds the Lease and serves metrics.
//!    While 1,000 idle connections from another of the node's addresses are held to a Pod's
//!    probe port (re-opened as they are closed), a probe from the kubelet's address is answered
//!    within the kubelet's default 1 s timeout, and both replicas stay Ready.
//!    The shipped samples hold on real workloads: pod-non-root (autogen) denies a Deployment of
//!    root Pods at the Deployment, naming the controller and the Pod policy, so no ReplicaSet
//!    is made, while a non-root Deployment rolls out; no-exec-in-prod denies `kubectl exec` into
//!    a running Pod in a prod namespace, while exec in dev, on-call's exec in prod and exec into
//!    celgate's own Pods (never sent to it) connect.
//! 2. Under 200 creates/s through the API server with a `Fail` policy, a rolling update to the
//!    next image and then the deletion of one Pod: no failed admission, no wrong decision.
//! 3. `kubectl delete -k` leaves nothing; `helm install --create-namespace`, `helm test` (the
//!    probe pod of the same image), `helm upgrade` to the next image and `helm uninstall` do the
//!    same with the chart, which keeps its CRDs; with them and the namespace deleted, nothing is
//!    left.
//!
//! With CELGATE_RELEASE=<release folder> (`make e2e-node-release`) the suite runs the release
//! instead of images it builds: published to the node's registry (e2e/release/publish.sh), its
//! checksums and the image's and chart's signatures verified first (celgate_e2e::release), the
//! image by digest and, for the updates, by its version's tag (the same index); the chart from
//! `oci://` pinned by digest. Every running Pod's image is the release's index.
//!
//! Needs root (the kubelet). Run by `make e2e-node`; `make e2e` skips it.

// A test fails on the first thing that goes wrong.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use celgate_e2e::node::{Node, text};
use celgate_e2e::release::Release;
use celgate_e2e::{CRDS, SERVICE_ACCOUNT_USER, curl, dry_run_deployment, wait_for, workspace};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::Value;
use tokio::sync::Semaphore;

const NAMESPACE: &str = "celgate-system";
/// The namespace the docs' example binds (labelled environment=test).
const DEMO_NAMESPACE: &str = "demo";
/// The namespace of the load.
const LOAD_NAMESPACE: &str = "node-load";
/// Creates per second sent through kube-apiserver.
const RATE: u64 = 200;
/// Requests in flight at most.
const IN_FLIGHT: usize = 64;
/// The longest a load runs, whatever happens.
const LOAD_LIMIT: Duration = Duration::from_secs(240);
/// The text of the load policy's denials.
const DENIED: &str =
    "ValidatingAdmissionPolicy 'node-load-policy' with binding 'node-load-binding' denied request";

/// The namespace of the autogen step's Deployments.
const WORKLOADS_NAMESPACE: &str = "node-workloads";
/// The namespaces of the exec step: one no-exec-in-prod selects (env=prod), one it does not.
const PROD_NAMESPACE: &str = "node-prod";
const DEV_NAMESPACE: &str = "node-dev";

/// A fail-closed policy denying ConfigMaps labelled verdict=deny in the load namespace.
const LOAD_POLICY: &str = r#"apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: node-load-policy
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  validations:
  - expression: "!has(object.metadata.labels) || object.metadata.labels[?'verdict'].orValue('') != 'deny'"
    message: denied by verdict
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: node-load-binding
spec:
  policyName: node-load-policy
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: node-load}
"#;

/// Copies config/ under `dir` and points config/default's `images:` at `image` (`name:tag` or
/// `name@sha256:…`), as `kustomize edit set image` would; returns the copy's config/default.
fn kustomization(dir: &Path, image: &str) -> PathBuf {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            let target = to.join(entry.file_name());
            if entry.file_type().unwrap().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
    let config = dir.join("config");
    let _ = std::fs::remove_dir_all(&config);
    copy(&workspace().join("config"), &config);
    let file = config.join("default/kustomization.yaml");
    let original = std::fs::read_to_string(&file).unwrap();
    let (resources, _) = original
        .split_once("\nimages:\n")
        .expect("config/default/kustomization.yaml ends with its images: entry");
    let entry = match image.split_once('@') {
        Some((name, digest)) => format!("newName: {name}\n  digest: {digest}"),
        None => {
            let (name, tag) = image
                .rsplit_once(':')
                .expect("an image reference with a tag");
            format!("newName: {name}\n  newTag: {tag}")
        }
    };
    std::fs::write(
        &file,
        format!("{resources}\nimages:\n- name: celgate\n  {entry}\n"),
    )
    .unwrap();
    config.join("default")
}

/// `kubectl get pods -n celgate-system -o wide`, printed, and the JSON of the Deployment's Pods
/// (not the `helm test` pod's).
fn pods(node: &Node) -> Vec<Value> {
    eprintln!(
        "$ kubectl get pods -n {NAMESPACE} -o wide\n{}",
        node.kubectl_ok(&["get", "pods", "-n", NAMESPACE, "-o", "wide"])
    );
    let list: Value = serde_json::from_str(&node.kubectl_ok(&[
        "get",
        "pods",
        "-n",
        NAMESPACE,
        "-l",
        "app.kubernetes.io/name=celgate",
        "-o",
        "json",
    ]))
    .unwrap();
    list["items"].as_array().cloned().unwrap_or_default()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Waits until the Deployment has rolled out: two ready replicas of the newest template.
fn rolled_out(node: &Node, limit: Duration) {
    let timeout = format!("--timeout={}s", limit.as_secs());
    let out = node.kubectl(
        &[
            "rollout",
            "status",
            "deployment/celgate",
            "-n",
            NAMESPACE,
            &timeout,
        ],
        "",
    );
    assert!(
        out.status.success(),
        "the Deployment did not roll out within {limit:?}: {}\nlogs in {}",
        text(&out),
        node.dir().display()
    );
}

/// The running, ready celgate Pods run `image`, two of them, on the node; with a release, the
/// image the node pulled is the release's index (`digest`).
fn assert_serving(node: &Node, image: &str, digest: Option<&str>) -> Vec<Value> {
    let pods = pods(node);
    let running: Vec<&Value> = pods
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .collect();
    assert_eq!(running.len(), 2, "two replicas: {pods:#?}");
    for pod in &running {
        assert!(ready(pod), "a replica is not ready: {pod:#}");
        assert_eq!(pod["spec"]["nodeName"], "celgate-node");
        assert_eq!(pod["status"]["phase"], "Running");
        assert_eq!(pod["spec"]["containers"][0]["image"], image);
        if let Some(digest) = digest {
            let pulled = pod["status"]["containerStatuses"][0]["imageID"]
                .as_str()
                .unwrap_or_default();
            assert!(
                pulled.ends_with(&format!("@{digest}")),
                "the Pod runs {pulled}, not the release's {digest}"
            );
        }
    }
    running.into_iter().cloned().collect()
}

/// The API server calls celgate through the Service, and the docs' first example is enforced: a
/// Deployment of 10 replicas is denied with the policy's message, one of 3 admitted.
async fn assert_denial_through_the_service(node: &Node, client: &kube::Client) {
    let webhooks: Value = serde_json::from_str(&node.kubectl_ok(&[
        "get",
        "validatingwebhookconfiguration",
        "celgate",
        "-o",
        "json",
    ]))
    .unwrap();
    let webhooks = webhooks["webhooks"].as_array().cloned().unwrap_or_default();
    assert!(!webhooks.is_empty(), "celgate registers its webhooks");
    for w in &webhooks {
        assert_eq!(
            w["clientConfig"]["service"]["name"], "celgate-webhook",
            "{w:#}"
        );
        assert_eq!(
            w["clientConfig"]["service"]["namespace"], NAMESPACE,
            "{w:#}"
        );
        assert!(w["clientConfig"]["url"].is_null(), "{w:#}");
    }
    // Until kube-proxy has programmed the new Service, kube-apiserver's call is refused (a 500
    // under the Fail policy): wait for the denial itself.
    let (message, code) = wait_for(
        "the docs' example to deny 10 replicas",
        Duration::from_secs(60),
        || async {
            dry_run_deployment(client, DEMO_NAMESPACE, 10)
                .await
                .err()
                .filter(|(message, code)| {
                    !(*code == 500 && message.contains("failed calling webhook"))
                })
        },
    )
    .await;
    eprintln!("denied through the celgate-webhook Service: HTTP {code}: {message}");
    assert_eq!(code, 422, "{message}");
    assert!(
        message.contains(
            "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding \
             'demo-binding-test.example.com' denied request: failed expression: \
             object.spec.replicas <= 5"
        ),
        "{message}"
    );
    dry_run_deployment(client, DEMO_NAMESPACE, 3)
        .await
        .unwrap_or_else(|e| panic!("3 replicas are admitted: {e:?}"));
}

/// celgate in its Pods, as its ServiceAccount: one holds the Lease (and says so in its metrics),
/// the policy's status and events are written, and every Pod serves metrics counting decisions.
async fn assert_in_cluster_duties(node: &Node, running: &[Value]) {
    let names: Vec<&str> = running
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    let holder = wait_for(
        "a replica to hold the Lease",
        Duration::from_secs(60),
        || {
            let out = node.kubectl(
                &[
                    "get",
                    "lease",
                    "celgate-leader",
                    "-n",
                    NAMESPACE,
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                ],
                "",
            );
            let holder = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let found = names.contains(&holder.as_str()).then_some(holder);
            async move { found }
        },
    )
    .await;
    wait_for("the policy's Ready status", Duration::from_secs(60), || {
        let out = node.kubectl(
            &[
                "get",
                "validatingadmissionpolicies.admission.celgate.io",
                "demo-policy.example.com",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            "",
        );
        let done = String::from_utf8_lossy(&out.stdout).trim() == "True";
        async move { done.then_some(()) }
    })
    .await;
    let events = wait_for("events on the policy", Duration::from_secs(60), || {
        let out = node.kubectl(
            &["get", "events.events.k8s.io", "-n", "default", "-o", "json"],
            "",
        );
        let list: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let reasons: Vec<String> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["regarding"]["name"] == "demo-policy.example.com")
            .map(|e| format!("{} ({})", e["reason"], e["reportingController"]))
            .collect();
        async move { (!reasons.is_empty()).then_some(reasons) }
    })
    .await;
    let mut leaders = 0;
    let mut denied = 0.0;
    for pod in running {
        let ip = pod["status"]["podIP"].as_str().unwrap();
        let out = curl(&[
            "-sf",
            "--max-time",
            "5",
            &format!("http://{ip}:8080/metrics"),
        ]);
        assert!(out.status.success(), "metrics of {ip}: {}", text(&out));
        let metrics = String::from_utf8_lossy(&out.stdout);
        let value = |prefix: &str| -> f64 {
            metrics
                .lines()
                .filter(|l| l.starts_with(prefix))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        leaders += value("celgate_leader ") as u32;
        denied +=
            value("celgate_admission_decisions_total{kind=\"validating\",decision=\"denied\"}");
    }
    eprintln!(
        "Lease held by {holder}; events on the policy: {events:?}; metrics: {leaders} leader, \
         {denied} denials counted"
    );
    assert_eq!(leaders, 1, "exactly one replica says it leads");
    assert!(
        denied >= 1.0,
        "the denial is counted in a replica's metrics"
    );
    assert_written_as_the_service_account(node);
}

/// The audit log shows the policy's status, the Lease and the events written by celgate's
/// ServiceAccount (the Pods have no other credentials; this proves their RBAC suffices).
/// An IPv4 address of the node other than the pod bridge's (where the kubelet's probes come
/// from): a client of another address.
fn other_node_address() -> std::net::Ipv4Addr {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.contains("celgate0"))
        .find_map(|l| {
            let cidr = l.split_whitespace().skip_while(|w| *w != "inet").nth(1)?;
            cidr.split('/').next()?.parse().ok()
        })
        .unwrap_or_else(|| {
            panic!(
                "the node has no IPv4 address beside the pod bridge's: {}",
                text(&out)
            )
        })
}

/// Idle connections held to the probe port while the kubelet-style probes run.
const IDLE_PROBE_CONNECTIONS: usize = 1_000;

/// While [`IDLE_PROBE_CONNECTIONS`] idle connections from another address are held to the first
/// Pod's probe port (and re-opened as they are closed), ten probes from the node's default
/// address (the kubelet's, on the pod bridge) each get 200 within the kubelet's default 1 s
/// timeout; afterwards both replicas are still Ready.
async fn assert_probes_answered_under_idle_connections(node: &Node, running: &[Value]) {
    let ip: std::net::Ipv4Addr = running[0]["status"]["podIP"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let target = std::net::SocketAddr::from((ip, 8081));
    let from = std::net::SocketAddr::from((other_node_address(), 0));
    let connect = || async move {
        let socket = tokio::net::TcpSocket::new_v4().ok()?;
        socket.bind(from).ok()?;
        tokio::time::timeout(Duration::from_secs(2), socket.connect(target))
            .await
            .ok()?
            .ok()
    };
    let mut idle = Vec::with_capacity(IDLE_PROBE_CONNECTIONS);
    for _ in 0..IDLE_PROBE_CONNECTIONS {
        idle.push(connect().await);
    }
    let opened = idle.iter().flatten().count();
    let mut reopened = 0;
    let mut latencies = Vec::new();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        for held in &mut idle {
            let cut = held
                .as_ref()
                .is_none_or(|s| s.try_read(&mut [0u8; 1]).is_ok_and(|n| n == 0));
            if cut {
                *held = connect().await;
                reopened += 1;
            }
        }
        let started = Instant::now();
        let out = tokio::task::block_in_place(|| {
            curl(&[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "1",
                &format!("http://{target}/readyz"),
            ])
        });
        let took = started.elapsed();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "200",
            "a kubelet-style probe of {target} with {opened} idle connections from {from} held: {}",
            text(&out)
        );
        latencies.push(took);
    }
    latencies.sort();
    drop(idle);
    let pods = pods(node);
    for pod in pods
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
    {
        assert!(ready(pod), "a replica became unready: {pod:#}");
    }
    eprintln!(
        "probes: with {opened} idle connections to {target} from {} ({reopened} re-opened as cut), \
         10 kubelet-style probes answered 200 in {:.1?} (median), {:.1?} (max); both replicas Ready",
        from.ip(),
        latencies[latencies.len() / 2],
        latencies[latencies.len() - 1]
    );
}

fn assert_written_as_the_service_account(node: &Node) {
    let log = std::fs::read_to_string(node.dir().join("cluster/audit.log")).unwrap();
    let mut writes = std::collections::BTreeSet::new();
    for line in log.lines() {
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let code = event["responseStatus"]["code"].as_u64().unwrap_or(0);
        if event["user"]["username"] != SERVICE_ACCOUNT_USER
            || event["stage"] != "ResponseComplete"
            || !(200..300).contains(&code)
            || !matches!(event["verb"].as_str(), Some("create" | "update" | "patch"))
        {
            continue;
        }
        let object = &event["objectRef"];
        writes.insert(format!(
            "{}{}",
            object["resource"].as_str().unwrap_or_default(),
            object["subresource"]
                .as_str()
                .map(|s| format!("/{s}"))
                .unwrap_or_default()
        ));
    }
    eprintln!("written by {SERVICE_ACCOUNT_USER}: {writes:?}");
    for written in ["validatingadmissionpolicies/status", "leases", "events"] {
        assert!(
            writes.contains(written),
            "no {written} written by {SERVICE_ACCOUNT_USER}: {writes:?}"
        );
    }
}

/// Nothing of celgate is left: no namespace, webhook configuration, CRD, cluster role or binding.
fn assert_nothing_left(node: &Node) {
    wait_for_sync(
        "celgate-system to be deleted",
        Duration::from_secs(120),
        || {
            !node
                .kubectl(&["get", "namespace", NAMESPACE], "")
                .status
                .success()
        },
    );
    for kind in [
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
        "customresourcedefinitions",
        "clusterroles",
        "clusterrolebindings",
    ] {
        let left = node.kubectl_ok(&["get", kind, "-o", "name"]);
        let ours: Vec<&str> = left.lines().filter(|l| l.contains("celgate")).collect();
        assert!(ours.is_empty(), "{kind} left after the uninstall: {ours:?}");
    }
    let pods = node.kubectl_ok(&["get", "pods", "-A", "-o", "name"]);
    assert!(
        !pods.contains("celgate"),
        "celgate Pods left after the uninstall: {pods}"
    );
}

/// A Deployment `name` of one replica of the node's pause image in the workloads namespace,
/// its container running as non-root only when `non_root` says so.
fn pause_deployment(node: &Node, name: &str, non_root: bool) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {WORKLOADS_NAMESPACE}}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers:\n      - name: app\n        image: {}/pause:celgate\n        securityContext: {{runAsNonRoot: {non_root}}}\n",
        node.registry
    )
}

/// config/samples' pod-non-root (autogen: all) on real workloads: a Deployment whose Pods would
/// run as root is denied when it is written, the denial naming the controller and the Pod
/// policy, so no ReplicaSet exists to fail; a non-root Deployment's ReplicaSet makes its Pod.
fn assert_autogen_denies_at_the_controller(node: &Node) {
    let policy = "config/samples/tests/pod-non-root/policy.yaml";
    node.kubectl_ok(&["create", "namespace", WORKLOADS_NAMESPACE]);
    node.kubectl_ok(&["apply", "-f", policy]);
    let root = pause_deployment(node, "root", false);
    let denial = "ValidatingAdmissionPolicy 'pod-non-root' (Pod template of Deployment) with \
                  binding 'pod-non-root' denied request: containers must run as non-root: app";
    wait_for_sync(
        "pod-non-root to deny a root Deployment",
        Duration::from_secs(60),
        || text(&node.kubectl(&["create", "--dry-run=server", "-f", "-"], &root)).contains(denial),
    );
    let out = node.kubectl(&["create", "-f", "-"], &root);
    assert!(
        !out.status.success() && text(&out).contains(denial),
        "{}",
        text(&out)
    );
    let non_root = pause_deployment(node, "non-root", true);
    let out = node.kubectl(&["create", "-f", "-"], &non_root);
    assert!(out.status.success(), "{}", text(&out));
    node.kubectl_ok(&[
        "rollout",
        "status",
        "deployment/non-root",
        "-n",
        WORKLOADS_NAMESPACE,
        "--timeout=90s",
    ]);
    let sets: Value = serde_json::from_str(&node.kubectl_ok(&[
        "get",
        "replicasets",
        "-n",
        WORKLOADS_NAMESPACE,
        "-o",
        "json",
    ]))
    .unwrap();
    let sets = sets["items"].as_array().cloned().unwrap_or_default();
    let owners: Vec<&str> = sets
        .iter()
        .map(|rs| {
            rs["metadata"]["ownerReferences"][0]["name"]
                .as_str()
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(
        owners,
        ["non-root"],
        "only the admitted Deployment has a ReplicaSet"
    );
    for rs in &sets {
        assert_eq!(rs["status"]["replicas"], 1, "{rs:#}");
        let failing = rs["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "ReplicaFailure");
        assert!(!failing, "{rs:#}");
    }
    eprintln!(
        "autogen: the root Deployment denied at the Deployment ({denial}); non-root rolled out"
    );
    node.kubectl_ok(&["delete", "-f", policy]);
    node.kubectl_ok(&["delete", "namespace", WORKLOADS_NAMESPACE, "--wait=false"]);
}

/// What `kubectl exec` came to.
#[derive(Debug)]
enum Exec {
    /// Still connected after a few seconds: the command (`/pause`) runs until stopped.
    Connected,
    /// kubectl exited: a refusal, or a command that finished.
    Exited(Output),
}

/// `kubectl exec <args>`, stopped once it has stayed connected for 5 s (for commands that
/// print little: its output is read once it exits).
fn exec(node: &Node, args: &[&str]) -> Exec {
    let mut child = Command::new(node.bin.join("kubectl"))
        .env("KUBECONFIG", &node.kubeconfig)
        .arg("exec")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return Exec::Exited(child.wait_with_output().unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    Exec::Connected
}

/// config/samples' no-exec-in-prod on running Pods: `kubectl exec` into a Pod of a prod namespace
/// is refused with the policy's message (before kube-apiserver reaches the kubelet), a shell
/// even for on-call; exec into a Pod of a dev namespace, on-call's exec in prod and exec into
/// celgate's own Pods (its namespace is never sent to it) connect.
fn assert_exec_denied_in_prod_only(node: &Node, running: &[Value]) {
    let policy = "config/samples/tests/no-exec-in-prod/policy.yaml";
    let target = |ns: &str, env: &str| {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: {ns}, labels: {{env: {env}}}}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: target, namespace: {ns}}}\nspec:\n  containers:\n  - name: app\n    image: {}/pause:celgate\n    securityContext: {{runAsNonRoot: true}}\n---\n",
            node.registry
        )
    };
    let out = node.kubectl(
        &["apply", "-f", "-"],
        &(target(PROD_NAMESPACE, "prod") + &target(DEV_NAMESPACE, "dev")),
    );
    assert!(out.status.success(), "{}", text(&out));
    node.kubectl_ok(&["apply", "-f", policy]);
    for ns in [PROD_NAMESPACE, DEV_NAMESPACE] {
        node.kubectl_ok(&[
            "wait",
            "--for=condition=Ready",
            "pod/target",
            "-n",
            ns,
            "--timeout=90s",
        ]);
    }
    let denial = format!(
        "ValidatingAdmissionPolicy 'no-exec-in-prod' with binding 'no-exec-in-prod' denied \
         request: only on-call may exec into Pods in {PROD_NAMESPACE}"
    );
    let in_prod = ["-n", PROD_NAMESPACE, "target", "--", "/pause"];
    wait_for_sync(
        "exec into prod to be denied",
        Duration::from_secs(60),
        || matches!(exec(node, &in_prod), Exec::Exited(out) if text(&out).contains(&denial)),
    );
    let connected = |what: &str, args: &[&str]| {
        let got = exec(node, args);
        assert!(matches!(got, Exec::Connected), "{what}: {got:?}");
    };
    connected(
        "exec in dev",
        &["-n", DEV_NAMESPACE, "target", "--", "/pause"],
    );
    let on_call = [
        "--as=alice",
        "--as-group=oncall",
        "--as-group=system:masters",
    ];
    connected("on-call's exec in prod", &[&on_call[..], &in_prod].concat());
    let shell = [
        &on_call[..],
        &["-n", PROD_NAMESPACE, "target", "--", "/bin/sh"],
    ]
    .concat();
    match exec(node, &shell) {
        Exec::Exited(out) => assert!(
            text(&out).contains(&format!("no shell in {PROD_NAMESPACE}: /bin/sh")),
            "{}",
            text(&out)
        ),
        Exec::Connected => panic!("on-call's shell in prod connected"),
    }
    // `celgate crds` finishes (kubectl reads its output as it comes).
    let celgate_pod = running[0]["metadata"]["name"].as_str().unwrap();
    let out = node.kubectl(
        &[
            "exec",
            "-n",
            NAMESPACE,
            celgate_pod,
            "--",
            "/celgate",
            "crds",
        ],
        "",
    );
    assert!(
        out.status.success() && text(&out).contains("CustomResourceDefinition"),
        "{}",
        text(&out)
    );
    eprintln!(
        "no-exec-in-prod: exec into prod denied ({denial}); dev, on-call and celgate's Pods connected"
    );
    node.kubectl_ok(&["delete", "-f", policy]);
    for ns in [PROD_NAMESPACE, DEV_NAMESPACE] {
        node.kubectl_ok(&["delete", "namespace", ns, "--wait=false"]);
    }
}

fn wait_for_sync(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(
            Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What became of one create.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Correct,
    /// The webhook could not be called (the API server's "failed calling webhook").
    Failed(String),
    /// The opposite decision, or an error that is not the policy's.
    Wrong(String),
}

/// The creates of one load run.
#[derive(Default)]
struct Counts {
    creates: usize,
    failed: Vec<String>,
    wrong: Vec<String>,
}

/// Sends creates at [`RATE`] (every other one to be denied) until `stop` is set (at most
/// [`LOAD_LIMIT`]) and counts what became of them.
async fn load(client: kube::Client, prefix: &'static str, stop: Arc<AtomicBool>) -> Counts {
    let api: Api<ConfigMap> = Api::namespaced(client, LOAD_NAMESPACE);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut ticks = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let start = Instant::now();
    let mut tasks = Vec::new();
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) && start.elapsed() < LOAD_LIMIT {
        ticks.tick().await;
        let slot = slots.clone().acquire_owned().await.unwrap();
        let api = api.clone();
        let deny = i % 2 == 1;
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: Some(format!("{prefix}-{i}")),
                labels: Some(
                    [("verdict".into(), if deny { "deny" } else { "allow" }.into())].into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        i += 1;
        tasks.push(tokio::spawn(async move {
            let result = api.create(&PostParams::default(), &cm).await;
            drop(slot);
            match (deny, result) {
                (false, Ok(_)) => Outcome::Correct,
                (true, Err(kube::Error::Api(s))) if s.message.contains(DENIED) => Outcome::Correct,
                (_, Err(kube::Error::Api(s))) if s.message.contains("failed calling webhook") => {
                    Outcome::Failed(s.message)
                }
                (true, Ok(_)) => Outcome::Wrong("admitted".into()),
                (_, Err(e)) => Outcome::Wrong(e.to_string()),
            }
        }));
    }
    let mut counts = Counts::default();
    for task in tasks {
        counts.creates += 1;
        match task.await.unwrap() {
            Outcome::Correct => {}
            Outcome::Failed(m) => counts.failed.push(m),
            Outcome::Wrong(m) => counts.wrong.push(m),
        }
    }
    counts
}

/// Runs `disrupt` (blocking) under the load, then 3 s more; returns the counts.
async fn under_load(
    client: &kube::Client,
    prefix: &'static str,
    disrupt: impl FnOnce() + Send + 'static,
) -> (Counts, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let run = tokio::spawn(load(client.clone(), prefix, stop.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let start = Instant::now();
    tokio::task::spawn_blocking(disrupt).await.unwrap();
    let took = start.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    (run.await.unwrap(), took)
}

fn report(what: &str, counts: &Counts, took: Duration) {
    eprintln!(
        "{what} (took {took:.1?}): {} creates at ~{RATE}/s, {} failed admissions, {} wrong decisions",
        counts.creates,
        counts.failed.len(),
        counts.wrong.len()
    );
    assert!(counts.creates > 0, "{what}: no creates were sent");
    assert!(
        counts.failed.is_empty(),
        "{what}: failed admissions: {:?}",
        counts.failed.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        counts.wrong.is_empty(),
        "{what}: wrong decisions: {:?}",
        counts.wrong.iter().take(5).collect::<Vec<_>>()
    );
}

/// The demo namespace, the docs' example policy, and the load's namespace and policy.
fn apply_policies(node: &Node) {
    node.kubectl_ok(&["create", "namespace", DEMO_NAMESPACE]);
    node.kubectl_ok(&["label", "namespace", DEMO_NAMESPACE, "environment=test"]);
    node.kubectl_ok(&["create", "namespace", LOAD_NAMESPACE]);
    node.kubectl_ok(&["apply", "-f", "config/samples/demo-policy.yaml"]);
    let out = node.kubectl(&["apply", "-f", "-"], LOAD_POLICY);
    assert!(out.status.success(), "{}", text(&out));
}

/// The policies and their namespaces go before celgate does (its CRDs would take them anyway).
fn delete_policies(node: &Node) {
    node.kubectl_ok(&["delete", "-f", "config/samples/demo-policy.yaml"]);
    let out = node.kubectl(&["delete", "-f", "-"], LOAD_POLICY);
    assert!(out.status.success(), "{}", text(&out));
    node.kubectl_ok(&[
        "delete",
        "namespace",
        DEMO_NAMESPACE,
        LOAD_NAMESPACE,
        "--timeout=120s",
    ]);
}

/// Waits until a create labelled verdict=deny is denied by the load policy.
async fn until_load_policy_enforced(client: &kube::Client) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), LOAD_NAMESPACE);
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for("the load policy to deny", Duration::from_secs(60), || {
        let (api, params) = (api.clone(), params.clone());
        async move {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some("probe".into()),
                    labels: Some([("verdict".into(), "deny".into())].into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match api.create(&params, &cm).await {
                Err(kube::Error::Api(s)) if s.message.contains(DENIED) => Some(()),
                _ => None,
            }
        }
    })
    .await;
}

fn helm(node: &Node, helm: &Path, args: &[&str]) -> String {
    eprintln!("$ helm {}", args.join(" "));
    let out = node.run(helm, args, "");
    let transcript = text(&out);
    eprintln!("{transcript}");
    assert!(out.status.success(), "helm {} failed", args.join(" "));
    transcript
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_node_deployment_serves_through_its_service_rolls_without_a_gap_and_uninstalls_cleanly()
 {
    let started = Instant::now();
    let node = Node::start();
    let client = node.client().await;
    let release = Release::from_env().map(|dir| {
        let release = Release::publish(&node, &dir);
        release.verify_as_a_user(&node.dir().join("other-key"));
        release
    });
    let (first, next) = match &release {
        Some(r) => (r.image.clone(), r.image_by_tag.clone()),
        None => (node.push_celgate("node-1"), node.push_celgate("node-2")),
    };
    let digest = release.as_ref().map(|r| r.image_digest.as_str());
    eprintln!(
        "images: {first}, {next} ({:.0?} since the start)",
        started.elapsed()
    );

    // 1. kubectl apply -k config/default, with the image from the registry.
    let work = node.dir().join("work");
    let default = kustomization(&work, &first);
    let default = default.to_str().unwrap();
    node.kubectl_ok(&["apply", "-k", default]);
    rolled_out(&node, Duration::from_secs(180));
    let running = assert_serving(&node, &first, digest);
    apply_policies(&node);
    assert_denial_through_the_service(&node, &client).await;
    assert_in_cluster_duties(&node, &running).await;
    assert_probes_answered_under_idle_connections(&node, &running).await;
    assert_autogen_denies_at_the_controller(&node);
    assert_exec_denied_in_prod_only(&node, &running);
    until_load_policy_enforced(&client).await;

    // 2. A rolling update to the next image under load, then one Pod deleted under load.
    let next_default = kustomization(&work.join("next"), &next);
    let old_hash = running[0]["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap()
        .to_string();
    let (counts, took) = {
        let kubectl = node.bin.join("kubectl");
        let kubeconfig = node.kubeconfig.clone();
        under_load(&client, "roll", move || {
            let out = std::process::Command::new(&kubectl)
                .env("KUBECONFIG", &kubeconfig)
                .args(["apply", "-k"])
                .arg(&next_default)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out));
            let out = std::process::Command::new(&kubectl)
                .env("KUBECONFIG", &kubeconfig)
                .args([
                    "rollout",
                    "status",
                    "deployment/celgate",
                    "-n",
                    NAMESPACE,
                    "--timeout=180s",
                ])
                .output()
                .unwrap();
            assert!(out.status.success(), "rollout: {}", text(&out));
            // The old Pods' shutdown belongs to the update: until they are gone.
            let out = std::process::Command::new(&kubectl)
                .env("KUBECONFIG", &kubeconfig)
                .args([
                    "wait",
                    "--for=delete",
                    "pod",
                    "-n",
                    NAMESPACE,
                    "--timeout=90s",
                ])
                .arg(format!("--selector=pod-template-hash={old_hash}"))
                .output()
                .unwrap();
            assert!(out.status.success(), "old Pods: {}", text(&out));
        })
        .await
    };
    report("rolling update node-1 → node-2", &counts, took);
    let running = assert_serving(&node, &next, digest);
    let victim = running[0]["metadata"]["name"].as_str().unwrap().to_string();
    let (counts, took) = {
        let kubectl = node.bin.join("kubectl");
        let kubeconfig = node.kubeconfig.clone();
        under_load(&client, "delete", move || {
            let out = std::process::Command::new(&kubectl)
                .env("KUBECONFIG", &kubeconfig)
                .args([
                    "delete",
                    "pod",
                    &victim,
                    "-n",
                    NAMESPACE,
                    "--wait=true",
                    "--timeout=90s",
                ])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out));
            let out = std::process::Command::new(&kubectl)
                .env("KUBECONFIG", &kubeconfig)
                .args([
                    "rollout",
                    "status",
                    "deployment/celgate",
                    "-n",
                    NAMESPACE,
                    "--timeout=120s",
                ])
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", text(&out));
        })
        .await
    };
    report("one Pod deleted", &counts, took);
    assert_serving(&node, &next, digest);

    // 3. kubectl delete -k leaves nothing.
    delete_policies(&node);
    node.kubectl_ok(&["delete", "-k", default, "--wait=true", "--timeout=120s"]);
    assert_nothing_left(&node);

    // Helm: install, upgrade to the next image, uninstall.
    let helm_bin = {
        let out = std::process::Command::new(workspace().join("e2e/cluster/build-helm.sh"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    };
    // The chart and how the image is chosen: the checkout's chart with the built images' tags,
    // or the release's from oci:// pinned by digest (its image.digest pins the release's image,
    // only the repository is the user's), upgraded to the image by its version's tag.
    let (chart, install_values, upgrade_values) = match &release {
        Some(r) => (
            vec![
                r.chart.clone(),
                "--version".into(),
                r.version.clone(),
                "--plain-http".into(),
            ],
            vec![format!("image.repository={}", r.repository)],
            vec![
                "image.digest=".to_string(),
                format!("image.tag={}", r.version),
            ],
        ),
        None => {
            let (repository, first_tag) = first.rsplit_once(':').unwrap();
            let next_tag = next.rsplit_once(':').unwrap().1;
            (
                vec!["charts/celgate".to_string()],
                vec![
                    format!("image.repository={repository}"),
                    format!("image.tag={first_tag}"),
                ],
                vec![format!("image.tag={next_tag}")],
            )
        }
    };
    let with_values = |args: &[&str], chart: &[String], values: &[String]| -> Vec<String> {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.splice(2..2, chart.iter().cloned());
        for value in values {
            all.extend(["--set".to_string(), value.clone()]);
        }
        all.extend(["--wait", "--timeout", "3m"].map(String::from));
        all
    };
    // As the docs say: Helm makes the namespace, the chart leaves it alone.
    let install = with_values(
        &[
            "install",
            "celgate",
            "--namespace",
            NAMESPACE,
            "--create-namespace",
        ],
        &chart,
        &install_values,
    );
    helm(
        &node,
        &helm_bin,
        &install.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    rolled_out(&node, Duration::from_secs(60));
    let running = assert_serving(&node, &first, digest);
    apply_policies(&node);
    assert_denial_through_the_service(&node, &client).await;
    assert_in_cluster_duties(&node, &running).await;
    // The chart's test: a pod of the same image runs `celgate probe`.
    let tested = helm(
        &node,
        &helm_bin,
        &[
            "test",
            "celgate",
            "--namespace",
            NAMESPACE,
            "--logs",
            "--timeout",
            "3m",
        ],
    );
    assert!(
        tested.contains("denied by celgate's webhook"),
        "the probe's log: {tested}"
    );
    let upgrade = with_values(
        &[
            "upgrade",
            "celgate",
            "--namespace",
            NAMESPACE,
            "--reset-then-reuse-values",
        ],
        &chart,
        &upgrade_values,
    );
    helm(
        &node,
        &helm_bin,
        &upgrade.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    rolled_out(&node, Duration::from_secs(60));
    assert_serving(&node, &next, digest);
    assert_denial_through_the_service(&node, &client).await;
    helm(&node, &helm_bin, &["list", "--namespace", NAMESPACE]);
    delete_policies(&node);
    helm(
        &node,
        &helm_bin,
        &["uninstall", "celgate", "--namespace", NAMESPACE],
    );
    // The CRDs are kept (helm.sh/resource-policy); the namespace is Helm's, not the chart's.
    // Both go by hand, as the chart's README says.
    for crd in CRDS {
        node.kubectl_ok(&["get", crd]);
    }
    let mut delete = vec!["delete", "--wait=true", "--timeout=120s"];
    delete.extend(CRDS);
    node.kubectl_ok(&delete);
    node.kubectl_ok(&["delete", "namespace", NAMESPACE, "--timeout=120s"]);
    assert_nothing_left(&node);
    eprintln!("real node suite: {:.0?} from the start", started.elapsed());
}
