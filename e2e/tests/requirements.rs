//! What celgate needs of its cluster, on the control plane of the minor under test
//! (`CELGATE_K8S_MINOR`): it refuses to start when an API it calls is switched off, naming it;
//! on a supported cluster it compiles new expressions at the cluster's CEL compatibility version
//! (its minor minus one) unless `--cel-compatibility-version` says otherwise, and rejects what
//! came later with kube-apiserver's message.

use std::time::Duration;

use celgate_e2e::{Celgate, Cluster, free_port, version, wait_for};

/// A celgate ValidatingAdmissionPolicy named `name` with one validation `expression`.
fn policy(name: &str, expression: &str) -> String {
    format!(
        "apiVersion: admission.celgate.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {name}\nspec:\n  matchConstraints:\n    resourceRules:\n    - {{apiGroups: [\"\"], apiVersions: [\"v1\"], operations: [\"CREATE\"], resources: [\"configmaps\"]}}\n  validations:\n  - expression: {expression:?}\n"
    )
}

/// An expression of the CEL library Kubernetes introduced in `1.<minor>`, if one came then.
fn introduced_in(minor: u32) -> Option<(&'static str, &'static str)> {
    match minor {
        30 => Some(("ip('1.2.3.4').family() == 4", "ip")),
        31 => Some(("format.dns1123Label().validate('a').hasValue()", "format")),
        32 => Some(("[1].all(i, v, v > 0)", "all")),
        33 => Some(("isSemver('1.2.3')", "isSemver")),
        34 => Some(("[2, 1].sortBy(x, x) == [1, 2]", "sortBy")),
        _ => None,
    }
}

/// `kubectl apply` of `yaml`: whether it succeeded, and stderr.
fn apply(cluster: &Cluster, yaml: &str) -> (bool, String) {
    apply_with(cluster, &[], yaml)
}

/// `kubectl apply` of `yaml` with `flags`: whether it succeeded, and stderr.
fn apply_with(cluster: &Cluster, flags: &[&str], yaml: &str) -> (bool, String) {
    let mut args = vec!["apply", "-f", "-"];
    args.extend(flags);
    let out = cluster.kubectl(&args, yaml);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celgate_refuses_a_cluster_without_an_api_it_calls() {
    let cluster =
        Cluster::start_with(&["--runtime-config=authorization.k8s.io/v1=false".to_string()]);
    cluster.install_crds();
    let mut celgate = Celgate::spawn_with(&cluster, free_port(), "celgate", &[], "info");
    let status = celgate.wait_exit(Duration::from_secs(30));
    let logs = celgate.logs();
    celgate.kill();
    let status = status.unwrap_or_else(|| panic!("celgate kept running:\n{logs}"));
    assert!(!status.success(), "celgate exited successfully:\n{logs}");
    assert!(
        logs.contains(
            "the cluster does not serve authorization.k8s.io/v1 subjectaccessreviews (the authorizer of policy expressions)"
        ),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_expressions_compile_at_the_clusters_compatibility_version() {
    let minor = version::minor();
    let cluster = Cluster::start();
    cluster.install_crds();
    let celgate = Celgate::start_with(&cluster, &["--log-json"]).await;
    // The default follows the cluster: its minor minus one.
    let compatibility = format!("\"compatibility\":\"1.{}\"", (minor - 1).max(29));
    assert!(
        celgate.logs().contains(&compatibility),
        "no {compatibility} at start:\n{}",
        celgate.logs()
    );
    // What this minor introduced is not yet allowed in new expressions, as in-tree.
    if let Some((expression, name)) = introduced_in(minor) {
        let (ok, stderr) = apply(&cluster, &policy("newer-than-default", expression));
        assert!(!ok, "{expression} accepted at 1.{}", minor - 1);
        assert!(
            stderr.contains(&format!(
                "undeclared reference to '{name}' (in container '')"
            )),
            "{stderr}"
        );
    }
    // An explicit, older setting: sortBy (1.34) is rejected, semver (1.33) is not. On the
    // same port, so the registered webhook reaches it at once.
    let port = celgate.port;
    drop(celgate);
    let mut older = Celgate::spawn_with(
        &cluster,
        port,
        "celgate-1.33",
        &["--cel-compatibility-version=1.33"],
        "info",
    );
    older.wait_ready().await;
    // The policy webhook fails open (Ignore) until kube-apiserver reaches the new process (a
    // moment after it is ready; longer on a busy machine): a server-side dry run tells when.
    let sort_by = policy("sort-by", "[2, 1].sortBy(x, x) == [1, 2]");
    wait_for(
        "kube-apiserver to send policy writes to celgate-1.33",
        Duration::from_secs(30),
        || async { (!apply_with(&cluster, &["--dry-run=server"], &sort_by).0).then_some(()) },
    )
    .await;
    let (ok, stderr) = apply(&cluster, &sort_by);
    assert!(!ok, "sortBy accepted at 1.33");
    assert!(
        stderr.contains(
            "compilation failed: ERROR: <input>:1:14: undeclared reference to 'sortBy' (in container '')"
        ),
        "{stderr}"
    );
    let (ok, stderr) = apply(&cluster, &policy("semver", "isSemver('1.2.3')"));
    assert!(ok, "isSemver rejected at 1.33: {stderr}");
    older.kill();
}
