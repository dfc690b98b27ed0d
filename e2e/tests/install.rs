//! `kubectl apply -k config/default` installs every object of celgate's install, the Deployment's
//! pod template meets its namespace's `restricted` Pod Security Standard, and
//! `kubectl delete -k config/default` removes it all, leaving no webhook configuration behind.
//! No kubelet runs here: the pods are never scheduled, and nothing waits for them. `make run`
//! against a cluster that already runs installs the CRDs and enforces the README's first policy.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use celgate_e2e::{Cluster, free_port, workspace};
use serde_json::{Value, json};

/// celgate's namespace, as config/manager names it.
const NAMESPACE: &str = "celgate-system";

/// One object of the install, as `kubectl get` names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Object {
    /// `Kind` or `Kind.group`.
    resource: String,
    name: String,
    namespace: Option<String>,
}

impl Object {
    fn from_manifest(doc: &Value) -> Self {
        let field = |value: &Value, what: &str| {
            value
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| panic!("an object of config/default has no {what}: {doc}"))
        };
        let api_version = field(&doc["apiVersion"], "apiVersion");
        let kind = field(&doc["kind"], "kind");
        let resource = match api_version.rsplit_once('/') {
            Some((group, _)) => format!("{kind}.{group}"),
            None => kind,
        };
        Object {
            resource,
            name: field(&doc["metadata"]["name"], "metadata.name"),
            namespace: doc["metadata"]["namespace"].as_str().map(str::to_string),
        }
    }

    /// `kubectl get` arguments for this object.
    fn get_args(&self) -> Vec<&str> {
        let mut args = vec!["get", self.resource.as_str(), self.name.as_str()];
        if let Some(ns) = &self.namespace {
            args.extend(["-n", ns.as_str()]);
        }
        args
    }

    /// Its line in `kubectl apply -o name`: `kind.group/name`, lowercase.
    fn apply_name(&self) -> String {
        format!("{}/{}", self.resource.to_lowercase(), self.name)
    }
}

fn config_default() -> String {
    workspace()
        .join("config/default")
        .to_string_lossy()
        .into_owned()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn kubectl_ok(cluster: &Cluster, args: &[&str], stdin: &str) -> Output {
    let out = cluster.kubectl(args, stdin);
    assert!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        text(&out)
    );
    out
}

/// Polls `done` every 200 ms for at most `limit`; panics with `what` and the last state otherwise.
fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> Result<(), String>) {
    let deadline = Instant::now() + limit;
    for _ in 0..2_000 {
        match done() {
            Ok(()) => return,
            Err(state) if Instant::now() >= deadline => {
                panic!("{what} not reached within {limit:?}: {state}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
    panic!("{what} not reached after 2000 polls");
}

#[test]
fn config_default_installs_meets_restricted_pod_security_and_uninstalls_cleanly() {
    let cluster = Cluster::start();
    let dir = config_default();

    // What the install consists of, as kustomize renders it.
    let rendered = kubectl_ok(&cluster, &["kustomize", &dir], "");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8_lossy(&rendered.stdout))
        .unwrap_or_else(|e| panic!("kubectl kustomize printed no YAML: {e}"));
    let mut objects: Vec<Object> = docs.iter().map(Object::from_manifest).collect();
    objects.sort();
    let mut kinds: Vec<&str> = objects.iter().map(|o| o.resource.as_str()).collect();
    kinds.dedup();
    assert_eq!(
        kinds,
        [
            "ClusterRole.rbac.authorization.k8s.io",
            "ClusterRoleBinding.rbac.authorization.k8s.io",
            "CustomResourceDefinition.apiextensions.k8s.io",
            "Deployment.apps",
            "MutatingWebhookConfiguration.admissionregistration.k8s.io",
            "Namespace",
            "PodDisruptionBudget.policy",
            "Role.rbac.authorization.k8s.io",
            "RoleBinding.rbac.authorization.k8s.io",
            "Service",
            "ServiceAccount",
            "ValidatingWebhookConfiguration.admissionregistration.k8s.io",
        ],
        "the kinds config/default installs"
    );
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .unwrap()
        .clone();
    assert_eq!(
        deployment["spec"]["template"]["spec"]["containers"][0]["image"],
        format!("celgate:{}", env!("CARGO_PKG_VERSION")),
        "config/default installs the image `make image` builds"
    );

    // A server-side dry run admits every object. It creates nothing, so the objects in
    // celgate-system would be refused for want of the namespace: that one is created first.
    let namespace = docs
        .iter()
        .find(|d| d["kind"] == "Namespace")
        .unwrap()
        .to_string();
    kubectl_ok(&cluster, &["apply", "-f", "-"], &namespace);
    let dry = kubectl_ok(
        &cluster,
        &["apply", "-k", &dir, "--dry-run=server", "-o", "name"],
        "",
    );
    let mut listed: Vec<String> = String::from_utf8_lossy(&dry.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    listed.sort();
    let mut expected: Vec<String> = objects.iter().map(Object::apply_name).collect();
    expected.sort();
    assert_eq!(
        listed, expected,
        "the server-side dry run lists every object"
    );

    kubectl_ok(&cluster, &["apply", "-k", &dir], "");
    for object in &objects {
        kubectl_ok(&cluster, &object.get_args(), "");
    }
    let labelled = kubectl_ok(
        &cluster,
        &[
            "get",
            "validatingwebhookconfigurations,mutatingwebhookconfigurations",
            "-l",
            "app.kubernetes.io/name=celgate",
            "-o",
            "name",
        ],
        "",
    );
    assert_eq!(
        String::from_utf8_lossy(&labelled.stdout).lines().count(),
        2,
        "both webhook configurations carry the app.kubernetes.io/name=celgate label"
    );
    for kind in [
        "validatingwebhookconfiguration",
        "mutatingwebhookconfiguration",
    ] {
        let out = kubectl_ok(&cluster, &["get", kind, "celgate", "-o", "json"], "");
        let configuration: Value = serde_json::from_slice(&out.stdout).unwrap();
        let webhooks = configuration["webhooks"].as_array().map_or(0, Vec::len);
        assert_eq!(
            webhooks, 0,
            "the installed {kind} has webhooks before celgate runs: {configuration}"
        );
    }

    // The pod the Deployment would create is admitted by the namespace's `restricted` enforcement
    // without a warning; without its seccomp profile it is refused, so the enforcement is in force.
    let stored = kubectl_ok(
        &cluster,
        &[
            "get",
            "deployment",
            "celgate",
            "-n",
            NAMESPACE,
            "-o",
            "json",
        ],
        "",
    );
    let stored: Value = serde_json::from_slice(&stored.stdout).unwrap();
    let pod = |spec: &Value| {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "celgate-pod-security", "namespace": NAMESPACE},
            "spec": spec,
        })
        .to_string()
    };
    let spec = stored["spec"]["template"]["spec"].clone();
    let admitted = kubectl_ok(
        &cluster,
        &["create", "-f", "-", "--dry-run=server", "-o", "name"],
        &pod(&spec),
    );
    let said = String::from_utf8_lossy(&admitted.stderr);
    assert!(
        !said.contains("PodSecurity") && !said.contains("Warning"),
        "the pod template draws Pod Security warnings: {said}"
    );
    let mut unconfined = spec;
    unconfined["securityContext"]
        .as_object_mut()
        .unwrap()
        .remove("seccompProfile");
    unconfined["containers"][0]["securityContext"]
        .as_object_mut()
        .unwrap()
        .remove("seccompProfile");
    let refused = cluster.kubectl(
        &["create", "-f", "-", "--dry-run=server"],
        &pod(&unconfined),
    );
    assert!(
        !refused.status.success() && text(&refused).contains("violates PodSecurity \"restricted"),
        "a pod without a seccomp profile in {NAMESPACE} is not refused by Pod Security: {}",
        text(&refused)
    );

    // Uninstall: the webhook configurations go at once, everything else within a bound (the
    // namespace and the CRDs are finalized by controllers), and writes are not held up.
    kubectl_ok(&cluster, &["delete", "-k", &dir, "--wait=false"], "");
    wait_until(
        "no celgate webhook configuration left",
        Duration::from_secs(30),
        || {
            let out = kubectl_ok(
                &cluster,
                &[
                    "get",
                    "validatingwebhookconfigurations,mutatingwebhookconfigurations",
                    "-l",
                    "app.kubernetes.io/name=celgate",
                    "-o",
                    "name",
                ],
                "",
            );
            let left = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if left.is_empty() { Ok(()) } else { Err(left) }
        },
    );
    kubectl_ok(
        &cluster,
        &["create", "configmap", "after-uninstall", "-n", "default"],
        "",
    );
    // A CRD goes only once kube-apiserver's finalizer has emptied it; on a loaded machine that
    // has taken over two minutes.
    wait_until(
        "every installed object deleted",
        Duration::from_secs(300),
        || {
            let left: Vec<String> = objects
                .iter()
                .filter(|o| {
                    let out = cluster.kubectl(&o.get_args(), "");
                    !(text(&out).contains("NotFound") || text(&out).contains("not found"))
                })
                .map(Object::apply_name)
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("still there: {left:?}"))
            }
        },
    );
}

/// `e2e/cluster/run.sh` (what `make run` runs after building), in its own process group, which is
/// stopped when dropped (the script's celgate is its child).
struct MakeRun(Child);

impl Drop for MakeRun {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        let _ = self.0.wait();
    }
}

#[test]
fn make_run_against_a_running_cluster_installs_the_crds_and_enforces_the_first_policy() {
    let cluster = Cluster::start();
    let log_path = cluster.dir().join("make-run.log");
    let log = std::fs::File::create(&log_path)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", log_path.display()));
    let err = log
        .try_clone()
        .unwrap_or_else(|e| panic!("cannot share {}: {e}", log_path.display()));
    let run = MakeRun(
        Command::new(workspace().join("e2e/cluster/run.sh"))
            .env("KUBECONFIG", &cluster.kubeconfig)
            .env("WEBHOOK_PORT", free_port().to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run e2e/cluster/run.sh: {e}")),
    );
    let run_log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    let sample = workspace().join("config/samples/demo-policy.yaml");
    let sample = sample.to_string_lossy();
    kubectl_ok(
        &cluster,
        &[
            "label",
            "namespace",
            "default",
            "environment=test",
            "--overwrite",
        ],
        "",
    );
    // The CRDs exist once run.sh has applied them and waited for them.
    wait_until(
        "the README's first policy applied",
        Duration::from_secs(90),
        || {
            let out = cluster.kubectl(&["apply", "-f", &sample], "");
            out.status
                .success()
                .then_some(())
                .ok_or_else(|| format!("{}\nmake run: {}", text(&out), run_log()))
        },
    );
    let create = [
        "create",
        "deployment",
        "web",
        "-n",
        "default",
        "--image=nginx",
        "--replicas=6",
        "--dry-run=server",
    ];
    wait_until(
        "a Deployment of 6 replicas denied",
        Duration::from_secs(60),
        || {
            let out = cluster.kubectl(&create, "");
            let said = text(&out);
            (!out.status.success() && said.contains("demo-policy.example.com"))
                .then_some(())
                .ok_or_else(|| format!("{said}\nmake run: {}", run_log()))
        },
    );
    let allowed = cluster.kubectl(
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "default",
            "--image=nginx",
            "--replicas=5",
            "--dry-run=server",
        ],
        "",
    );
    assert!(
        allowed.status.success(),
        "5 replicas are allowed: {}",
        text(&allowed)
    );
    drop(run);
}
