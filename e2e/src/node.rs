//! A one-node cluster (`node/up.sh`): the control plane, kube-scheduler, a kubelet with containerd,
//! kube-proxy and a loopback registry; stopped and cleaned up (`node/down.sh`) when dropped.
//! celgate runs there as its Deployment, from an image pushed to that registry.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::workspace;

/// A running node and its control plane.
pub struct Node {
    dir: PathBuf,
    /// Path of the admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// Directory of kubectl (of the control plane's version).
    pub bin: PathBuf,
    /// The loopback registry, `127.0.0.1:<port>`.
    pub registry: String,
}

/// `stdout` and `stderr` of a command, for messages.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Node {
    /// Starts a node (building the node's binaries first if the cache is cold). Its state goes to
    /// a short directory under /tmp: containerd's socket paths must stay short.
    pub fn start() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() % 1_000_000_000_000)
            .unwrap_or_default();
        let dir = PathBuf::from(format!("/tmp/celgate-node-{}-{nanos}", std::process::id()));
        let mut node = Node {
            kubeconfig: dir.join("cluster/kubeconfig"),
            bin: PathBuf::new(),
            registry: String::new(),
            dir,
        };
        let out = Command::new(workspace().join("e2e/node/up.sh"))
            .arg(&node.dir)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run e2e/node/up.sh: {e}"));
        assert!(
            out.status.success(),
            "e2e/node/up.sh failed; logs in {}",
            node.dir.display()
        );
        let read = |file: &str| {
            std::fs::read_to_string(node.dir.join(file))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|e| panic!("up.sh wrote no {file}: {e}"))
        };
        node.bin = PathBuf::from(read("cluster/bin-dir"));
        node.registry = read("registry-address");
        node
    }

    /// The state directory (logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Builds celgate's image (`node/images.sh`) and pushes it as `<registry>/celgate:<tag>`;
    /// returns the reference.
    pub fn push_celgate(&self, tag: &str) -> String {
        let out = Command::new(workspace().join("e2e/node/images.sh"))
            .args(["celgate", &self.registry])
            .arg(self.dir.join("images"))
            .arg(tag)
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("cannot run e2e/node/images.sh: {e}"));
        assert!(out.status.success(), "e2e/node/images.sh celgate failed");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// A kube client for the admin user.
    pub async fn client(&self) -> Client {
        let kc = Kubeconfig::read_from(&self.kubeconfig)
            .unwrap_or_else(|e| panic!("cannot read kubeconfig: {e}"));
        let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
            .await
            .unwrap_or_else(|e| panic!("invalid kubeconfig: {e}"));
        Client::try_from(config).unwrap_or_else(|e| panic!("cannot build client: {e}"))
    }

    /// Runs `program` (a path, or a name on PATH) with the node's kubeconfig and `stdin`.
    pub fn run(&self, program: &Path, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new(program)
            .args(args)
            .current_dir(workspace())
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
        if let Some(mut input) = child.stdin.take() {
            input
                .write_all(stdin.as_bytes())
                .unwrap_or_else(|e| panic!("cannot write {}'s stdin: {e}", program.display()));
        }
        child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("{} did not finish: {e}", program.display()))
    }

    /// Runs kubectl with `stdin`.
    pub fn kubectl(&self, args: &[&str], stdin: &str) -> Output {
        self.run(&self.bin.join("kubectl"), args, stdin)
    }

    /// kubectl with `args`, asserting success; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args, "");
        assert!(
            out.status.success(),
            "kubectl {} failed: {}",
            args.join(" "),
            text(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let stopped = Command::new(workspace().join("e2e/node/down.sh"))
            .arg(&self.dir)
            .stdout(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        // The logs stay when something went wrong (or the test failed).
        if stopped && !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("node logs kept in {}", self.dir.display());
        }
    }
}
