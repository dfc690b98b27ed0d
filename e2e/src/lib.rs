//! The e2e harness: a real control plane on loopback ports (started by `cluster/up.sh`, stopped on
//! drop), a celgate process running out of cluster against it (as the admin, or as its
//! ServiceAccount with the shipped RBAC), kubectl of the same version, and bounded waits. Tests
//! treat celgate as a black box.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

pub mod audit;
pub mod bench;
pub mod differential;
pub mod fixture;
pub mod generated;
pub mod log;
pub mod node;
pub mod release;
pub mod scan_fixture;
pub mod schemas;
pub mod version;

/// celgate's CRDs, as `kubectl` names them.
pub const CRDS: [&str; 5] = [
    "crd/validatingadmissionpolicies.admission.celgate.io",
    "crd/validatingadmissionpolicybindings.admission.celgate.io",
    "crd/mutatingadmissionpolicies.admission.celgate.io",
    "crd/mutatingadmissionpolicybindings.admission.celgate.io",
    "crd/policyexceptions.admission.celgate.io",
];

/// celgate's ServiceAccount as config/rbac binds it: namespace, name.
pub const SERVICE_ACCOUNT: (&str, &str) = ("celgate-system", "celgate");

/// The user name the API server gives celgate's ServiceAccount (in the audit log, for one).
pub const SERVICE_ACCOUNT_USER: &str = "system:serviceaccount:celgate-system:celgate";

/// The kustomize directories of celgate's RBAC for a run out of cluster as its ServiceAccount:
/// what a cluster install ships, and what registering the webhooks by URL adds.
pub const RBAC_DIRS: [&str; 2] = ["config/rbac", "config/rbac/out-of-cluster"];

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Polls `f` every 100 ms until it returns `Some`, at most `limit`; panics with `what` otherwise.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline && attempts < 10_000,
            "timed out after {limit:?} ({attempts} attempts) waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The AdmissionReview kube-apiserver sends a webhook for the create of the ConfigMap `object`
/// (named by its metadata) in `namespace` by `user`; a server-side dry run when `dry_run`.
pub fn configmap_create_review(
    namespace: &str,
    object: &serde_json::Value,
    user: &str,
    dry_run: bool,
) -> serde_json::Value {
    let gvk = serde_json::json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    let gvr = serde_json::json!({"group": "", "version": "v1", "resource": "configmaps"});
    serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "00000000-0000-0000-0000-000000000001",
            "kind": gvk, "resource": gvr, "requestKind": gvk, "requestResource": gvr,
            "name": object["metadata"]["name"], "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": user, "groups": ["system:authenticated"]},
            "object": object, "oldObject": null, "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}})
}

/// A free loopback TCP port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free loopback port: {e}"))
}

/// A running control plane; stopped when dropped.
pub struct Cluster {
    dir: tempdir::Dir,
    /// Path of the admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Directory of kube-apiserver, kubectl and friends.
    pub bin: PathBuf,
}

mod tempdir {
    //! A scratch directory removed on drop.
    use std::path::{Path, PathBuf};

    /// The directory.
    pub struct Dir(PathBuf);

    impl Dir {
        /// Creates a fresh directory under the system temp dir.
        pub fn new(prefix: &str) -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            let path =
                std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&path)
                .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
            Dir(path)
        }

        /// Its path.
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Cluster {
    /// Starts a control plane (building it first if the cache is cold) of the minor
    /// [`version::minor`] names.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`Self::start`] with extra kube-apiserver flags (`--feature-gates=…`,
    /// `--runtime-config=…`).
    pub fn start_with(apiserver_flags: &[String]) -> Self {
        let dir = tempdir::Dir::new("celgate-e2e");
        let out = Command::new(workspace().join("e2e/cluster/up.sh"))
            .arg(dir.path())
            .env("CELGATE_APISERVER_FLAGS", apiserver_flags.join(" "))
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run e2e/cluster/up.sh: {e}"));
        assert!(
            out.status.success(),
            "e2e/cluster/up.sh failed; logs in {}",
            dir.path().display()
        );
        let bin = std::fs::read_to_string(dir.path().join("bin-dir"))
            .unwrap_or_else(|e| panic!("up.sh wrote no bin-dir: {e}"));
        Cluster {
            kubeconfig: dir.path().join("kubeconfig"),
            bin: PathBuf::from(bin.trim()),
            dir,
        }
    }

    /// The state directory (logs, audit log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id of the control plane's `component` (`etcd`, `kube-apiserver`, …), as
    /// `e2e/cluster/up.sh` recorded it (and a restart of kube-apiserver updated it).
    pub fn pid(&self, component: &str) -> Option<u32> {
        let pids = std::fs::read_to_string(self.dir().join("pids")).ok()?;
        pids.lines().find_map(|line| {
            let (name, pid) = line.split_once(' ')?;
            (name == component)
                .then(|| pid.trim().parse().ok())
                .flatten()
        })
    }

    /// A kube client for the admin user.
    pub async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("cannot read kubeconfig: {e}"));
        let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("invalid kubeconfig: {e}"));
        Client::try_from(config).unwrap_or_else(|e| panic!("cannot build client: {e}"))
    }

    /// Runs kubectl (of the control plane's version) with `stdin`.
    pub fn kubectl(&self, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(self.bin.join("kubectl"))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run kubectl: {e}"));
        if let Some(mut input) = child.stdin.take() {
            input
                .write_all(stdin.as_bytes())
                .unwrap_or_else(|e| panic!("cannot write kubectl stdin: {e}"));
        }
        child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("kubectl did not finish: {e}"))
    }

    /// `kubectl apply -f -`, asserting success.
    pub fn apply(&self, yaml: &str) {
        let out = self.kubectl(&["apply", "-f", "-"], yaml);
        assert!(
            out.status.success(),
            "kubectl apply failed: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Restarts kube-apiserver (same port, same etcd) and waits until it is ready again;
    /// returns how many seconds it was away.
    pub fn restart_apiserver(&self) -> f64 {
        let out = Command::new(workspace().join("e2e/cluster/restart-apiserver.sh"))
            .arg(self.dir.path())
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run e2e/cluster/restart-apiserver.sh: {e}"));
        assert!(out.status.success(), "restart-apiserver.sh failed");
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("restart-apiserver.sh printed no duration: {e}"))
    }

    /// `kubectl` with `args`, asserting success; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args, "");
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Installs celgate's shipped RBAC ([`RBAC_DIRS`]) for its ServiceAccount (the namespace
    /// and the ServiceAccount are created here: config/manager ships them), waits (up to 30 s)
    /// until the controller manager has aggregated the default param kinds into
    /// `celgate-params`, and writes a kubeconfig that authenticates with a two-hour token of
    /// the ServiceAccount (server and CA as in the admin kubeconfig); returns its path.
    pub async fn service_account_kubeconfig(&self) -> PathBuf {
        let (namespace, name) = SERVICE_ACCOUNT;
        self.apply(&format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {namespace}\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
        ));
        for dir in RBAC_DIRS {
            self.kubectl_ok(&["apply", "-k", &workspace().join(dir).to_string_lossy()]);
        }
        let user = format!("--as={SERVICE_ACCOUNT_USER}");
        wait_for(
            "celgate-params to aggregate the default param kinds",
            Duration::from_secs(30),
            || async {
                let out = self.kubectl(&["auth", "can-i", "watch", "configmaps", "-A", &user], "");
                out.status.success().then_some(())
            },
        )
        .await;
        self.token_kubeconfig(namespace, name)
    }

    /// Writes a kubeconfig that authenticates with a two-hour token of the ServiceAccount
    /// `namespace/name` (server and CA as in the admin kubeconfig); returns its path.
    pub fn token_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self.kubectl_ok(&["create", "token", name, "-n", namespace, "--duration=2h"]);
        let admin = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("cannot read kubeconfig: {e}"));
        let cluster = admin
            .clusters
            .first()
            .and_then(|c| c.cluster.as_ref())
            .unwrap_or_else(|| panic!("the admin kubeconfig names no cluster"));
        let server = cluster.server.clone().unwrap_or_default();
        let ca = cluster.certificate_authority.clone().unwrap_or_default();
        let path = self.dir().join(format!("{namespace}-{name}.kubeconfig"));
        let config = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {name}\n  user:\n    token: {}\ncontexts:\n- name: local\n  context: {{cluster: local, user: {name}}}\ncurrent-context: local\n",
            token.trim()
        );
        std::fs::write(&path, config)
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }

    /// Installs celgate's CRDs from `config/crd` and waits until they are Established.
    pub fn install_crds(&self) {
        self.kubectl_ok(&[
            "apply",
            "-k",
            &workspace().join("config/crd").to_string_lossy(),
        ]);
        self.wait_established(&CRDS);
    }

    /// Waits (at most 60 s) until each CRD of `crds` (`crd/<name>`) is Established, with
    /// `e2e/cluster/established.sh` (as `make run` does): unlike `kubectl wait`, it does not fail
    /// on a CRD created a moment ago, which has no conditions yet.
    pub fn wait_established(&self, crds: &[&str]) {
        let out = Command::new(workspace().join("e2e/cluster/established.sh"))
            .args(crds)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECTL", self.bin.join("kubectl"))
            .output()
            .unwrap_or_else(|e| panic!("cannot run e2e/cluster/established.sh: {e}"));
        assert!(
            out.status.success(),
            "CRDs {crds:?} not Established: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(workspace().join("e2e/cluster/down.sh"))
            .arg(self.dir.path())
            .status();
    }
}

/// Whom a celgate process authenticates as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The cluster's admin (system:masters): allowed everything.
    Admin,
    /// celgate's ServiceAccount, with only the shipped RBAC
    /// ([`Cluster::service_account_kubeconfig`] installs it).
    ServiceAccount,
}

/// A celgate process running out of cluster; killed when dropped.
pub struct Celgate {
    child: Child,
    /// The webhook's port on 127.0.0.1.
    pub port: u16,
    /// The plain-HTTP metrics port on 127.0.0.1 (`--metrics-port`, a free port unless `args`
    /// name one).
    pub metrics_port: u16,
    /// Log file of the process.
    pub log: PathBuf,
}

impl Celgate {
    /// Starts `celgate run` against the cluster as the admin, registered by URL, and waits
    /// until it is ready.
    pub async fn start(cluster: &Cluster) -> Self {
        Self::start_as(cluster, Identity::Admin).await
    }

    /// Starts `celgate run` against the cluster as `identity`, registered by URL, and waits
    /// until it is ready.
    pub async fn start_as(cluster: &Cluster, identity: Identity) -> Self {
        let celgate = Self::spawn_as(cluster, identity, free_port(), "celgate", &[], "info").await;
        celgate.wait_ready().await;
        celgate
    }

    /// Starts `celgate run` against the cluster as the admin with `args` added, registered by
    /// URL, and waits until it is ready.
    pub async fn start_with(cluster: &Cluster, args: &[&str]) -> Self {
        let celgate = Self::spawn_with(cluster, free_port(), "celgate", args, "info");
        celgate.wait_ready().await;
        celgate
    }

    /// The celgate binary run: `CELGATE_BIN`, else the debug build in the target directory.
    pub fn binary() -> PathBuf {
        std::env::var_os("CELGATE_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                std::env::var_os("CARGO_TARGET_DIR")
                    .map(|d| workspace().join(d))
                    .unwrap_or_else(|| workspace().join("target"))
                    .join("debug/celgate")
            })
    }

    /// Starts `celgate run` as the admin serving on `port` (registered as
    /// `https://127.0.0.1:<port>`) without waiting for it, with `args` added, the log in
    /// `<name>.log` in the cluster's directory (appended to, so a restart keeps the earlier
    /// lines) and `rust_log` as the log filter (`RUST_LOG`): several processes on one control
    /// plane each get their own log.
    pub fn spawn_with(
        cluster: &Cluster,
        port: u16,
        name: &str,
        args: &[&str],
        rust_log: &str,
    ) -> Self {
        Self::spawn_kubeconfig(cluster, &cluster.kubeconfig, port, name, args, rust_log)
    }

    /// Like [`Celgate::spawn_with`], authenticated as `identity` (as the ServiceAccount, the
    /// shipped RBAC is installed first and a fresh token made).
    pub async fn spawn_as(
        cluster: &Cluster,
        identity: Identity,
        port: u16,
        name: &str,
        args: &[&str],
        rust_log: &str,
    ) -> Self {
        let kubeconfig = match identity {
            Identity::Admin => cluster.kubeconfig.clone(),
            Identity::ServiceAccount => cluster.service_account_kubeconfig().await,
        };
        Self::spawn_kubeconfig(cluster, &kubeconfig, port, name, args, rust_log)
    }

    /// Like [`Celgate::spawn_with`], reaching the API server as `kubeconfig` says (through a
    /// proxy, say).
    pub fn spawn_kubeconfig(
        cluster: &Cluster,
        kubeconfig: &Path,
        port: u16,
        name: &str,
        args: &[&str],
        rust_log: &str,
    ) -> Self {
        let bin = Self::binary();
        assert!(
            bin.exists(),
            "{} is missing; run `cargo build -p celgate` (make e2e does)",
            bin.display()
        );
        let log = cluster.dir().join(format!("{name}.log"));
        let file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap_or_else(|e| panic!("cannot open log: {e}"));
        let err = file
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot clone log handle: {e}"));
        let named = args
            .iter()
            .position(|a| *a == "--metrics-port")
            .and_then(|i| args.get(i + 1))
            .map(|p| {
                p.parse()
                    .unwrap_or_else(|e| panic!("--metrics-port {p}: {e}"))
            });
        let metrics_port = named.unwrap_or_else(free_port);
        let metrics_arg = format!("--metrics-port={metrics_port}");
        let mut command = Command::new(&bin);
        command.args([
            "run",
            "--bind-address",
            "127.0.0.1",
            "--webhook-port",
            &port.to_string(),
        ]);
        // Registered at its own port unless the caller names another URL (a load balancer).
        if !args.iter().any(|a| a.starts_with("--webhook-url")) {
            command.arg(format!("--webhook-url=https://127.0.0.1:{port}"));
        }
        let child = command
            .args(named.is_none().then_some(&metrics_arg))
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", rust_log)
            .stdout(file)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        Celgate {
            child,
            port,
            metrics_port,
            log,
        }
    }

    /// The process id (for `/proc/<pid>/status`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the process at once (SIGKILL: no shutdown, nothing released) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM (what the kubelet sends a stopping pod) and waits up to `limit` for the
    /// process to exit; returns how long it took and its exit status (`None`: still running,
    /// then killed).
    pub fn terminate(&mut self, limit: Duration) -> (Duration, Option<std::process::ExitStatus>) {
        let started = std::time::Instant::now();
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(sent.success(), "kill -TERM failed");
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return (started.elapsed(), Some(status));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        (started.elapsed(), None)
    }

    /// Waits up to `limit` for the process to exit by itself; its exit status, or `None` if it
    /// still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let started = std::time::Instant::now();
        while started.elapsed() < limit {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// Waits until `/readyz` answers 200 (the first snapshot is published).
    pub async fn wait_ready(&self) {
        let url = format!("https://127.0.0.1:{}/readyz", self.port);
        wait_for("celgate /readyz", Duration::from_secs(60), || {
            let url = url.clone();
            async move { curl(&["-skf", &url]).status.success().then_some(()) }
        })
        .await;
    }

    /// The text `/metrics` on the metrics port answers now.
    pub fn metrics(&self) -> String {
        let url = format!("http://127.0.0.1:{}/metrics", self.metrics_port);
        let out = curl(&["-sf", &url]);
        assert!(out.status.success(), "GET {url} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The process log so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Celgate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs curl with `args`.
pub fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run curl: {e}"))
}

/// The message inside a denial, without kube-apiserver's prefix: after
/// `admission webhook "<name>" denied the request: ` (celgate) or `… is forbidden: ` (in-tree).
pub fn inner_message(message: &str) -> &str {
    if let Some((_, inner)) = message.split_once("denied the request: ") {
        return inner;
    }
    message
        .split_once(" is forbidden: ")
        .map_or(message, |(_, inner)| inner)
}

/// The ValidatingAdmissionPolicies of `api_version` (the in-tree group's or celgate's), as
/// dynamic objects.
pub fn policies_api(client: &Client, api_version: &str) -> kube::Api<kube::api::DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = kube::discovery::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: "ValidatingAdmissionPolicy".into(),
        plural: "validatingadmissionpolicies".into(),
    };
    kube::Api::all_with(client.clone(), &resource)
}

/// Creates a namespace labelled `engine=<engine>` (bindings select engines by that label).
pub async fn create_namespace(client: &Client, name: &str, engine: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let ns: Namespace = serde_json::from_value(
        serde_json::json!({"metadata": {"name": name, "labels": {"engine": engine}}}),
    )
    .unwrap_or_else(|e| panic!("namespace fixture: {e}"));
    kube::Api::<Namespace>::all(client.clone())
        .create(&kube::api::PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("cannot create namespace {name}: {e}"));
}

/// A minimal valid apps/v1 Deployment.
pub fn deployment(name: &str, replicas: i32) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.example/app:1"}]}}}
    }))
    .unwrap_or_else(|e| panic!("invalid deployment fixture: {e}"))
}

/// Waits (up to 30 s) until a dry-run Deployment of `replicas` in `ns` is denied; its message and code.
pub async fn wait_denied(client: &Client, ns: &str, replicas: i32) -> (String, u16) {
    wait_for(
        &format!("{replicas} replicas to be denied in {ns}"),
        Duration::from_secs(30),
        || async move { dry_run_deployment(client, ns, replicas).await.err() },
    )
    .await
}

/// Waits (up to 30 s) until a dry-run Deployment of `replicas` in `ns` is admitted.
pub async fn wait_admitted(client: &Client, ns: &str, replicas: i32) {
    wait_for(
        &format!("{replicas} replicas to be admitted in {ns}"),
        Duration::from_secs(30),
        || async move { dry_run_deployment(client, ns, replicas).await.ok() },
    )
    .await
}

/// Creates a Deployment of `replicas` in `ns` as a server-side dry run: `Err((message, code))`
/// when admission rejects it (any other failure panics).
pub async fn dry_run_deployment(
    client: &Client,
    ns: &str,
    replicas: i32,
) -> Result<(), (String, u16)> {
    use k8s_openapi::api::apps::v1::Deployment;
    let params = kube::api::PostParams {
        dry_run: true,
        ..Default::default()
    };
    match kube::Api::<Deployment>::namespaced(client.clone(), ns)
        .create(&params, &deployment(&format!("web-{replicas}"), replicas))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.message, s.code)),
        Err(e) => panic!("create failed for a reason other than admission: {e}"),
    }
}

/// The demo policy of the README (a replica limit on Deployments) and its binding, for either
/// engine: only the apiVersion differs.
pub mod demo {
    /// celgate's apiVersion for policies and bindings.
    pub const CELGATE_API: &str = "admission.celgate.io/v1";
    /// The in-tree plugin's apiVersion for policies and bindings.
    pub const IN_TREE_API: &str = "admissionregistration.k8s.io/v1";
    /// The policy's name.
    pub const POLICY_NAME: &str = "demo-policy.example.com";
    /// The binding's name.
    pub const BINDING_NAME: &str = "demo-binding-test.example.com";

    const POLICY: &str = r#"
apiVersion: API
kind: ValidatingAdmissionPolicy
metadata:
  name: "demo-policy.example.com"
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups:   ["apps"]
      apiVersions: ["v1"]
      operations:  ["CREATE", "UPDATE"]
      resources:   ["deployments"]
  validations:
    - expression: "object.spec.replicas <= LIMIT"
"#;

    const BINDING: &str = r#"
apiVersion: API
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: "demo-binding-test.example.com"
spec:
  policyName: "demo-policy.example.com"
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        engine: ENGINE
"#;

    /// The policy under `api`, denying Deployments of more than `limit` replicas.
    pub fn policy(api: &str, limit: u32) -> String {
        POLICY
            .replace("API", api)
            .replace("LIMIT", &limit.to_string())
    }

    /// The binding under `api`, selecting the namespaces labelled `engine=<engine>`.
    pub fn binding(api: &str, engine: &str) -> String {
        BINDING.replace("API", api).replace("ENGINE", engine)
    }
}
