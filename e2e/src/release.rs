//! A release folder (`make release`, e2e/release/build.sh) taken the way docs/release.md tells a
//! user to take it: published to a registry (e2e/release/publish.sh, the publisher's step), then
//! its checksums and the signatures of the image and the chart verified with the folder's
//! `cosign.pub` before anything is installed.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::node::{Node, text};
use crate::workspace;

/// A release published to a node's loopback registry.
pub struct Release {
    dir: PathBuf,
    /// The release's version: the chart's version and the image's tag.
    pub version: String,
    /// The image index's digest, `sha256:…`.
    pub image_digest: String,
    /// The image by digest, `<registry>/celgate@sha256:…`.
    pub image: String,
    /// The image by tag, `<registry>/celgate:<version>`: the same index.
    pub image_by_tag: String,
    /// The image's repository, `<registry>/celgate`.
    pub repository: String,
    /// The chart by digest, `oci://<registry>/charts/celgate@sha256:…`.
    pub chart: String,
}

/// The path a build script (`e2e/…/build-*.sh`) prints: the tool it built or found cached.
fn built(script: &str) -> PathBuf {
    let out = Command::new(workspace().join(script))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
    assert!(out.status.success(), "{script}: {}", text(&out));
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs `program` with `args`, printing the command line; its output.
fn run(program: &Path, args: &[&OsStr]) -> Output {
    let line: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
    eprintln!("$ {} {}", program.display(), line.join(" "));
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

impl Release {
    /// The folder of CELGATE_RELEASE (`make e2e-node-release`), if set.
    pub fn from_env() -> Option<PathBuf> {
        std::env::var_os("CELGATE_RELEASE").map(PathBuf::from)
    }

    /// Publishes the folder `dir` to the node's registry with the release key and reads what
    /// publish.sh wrote (`published.env`).
    pub fn publish(node: &Node, dir: &Path) -> Self {
        let script = workspace().join("e2e/release/publish.sh");
        let out = run(&script, &[dir.as_os_str(), node.registry.as_ref()]);
        assert!(out.status.success(), "publish.sh: {}", text(&out));
        let published = std::fs::read_to_string(dir.join("published.env"))
            .unwrap_or_else(|e| panic!("publish.sh wrote no published.env: {e}"));
        let field = |name: &str| {
            published
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("published.env has no {name}: {published}"))
                .to_string()
        };
        let (version, image, chart) = (field("VERSION"), field("IMAGE"), field("CHART"));
        let digest_file = dir.join(format!("celgate-{version}-image.digest"));
        let image_digest = std::fs::read_to_string(&digest_file)
            .unwrap_or_else(|e| panic!("{}: {e}", digest_file.display()))
            .trim()
            .to_string();
        let repository = format!("{}/celgate", node.registry);
        assert_eq!(image, format!("{repository}@{image_digest}"));
        Release {
            dir: dir.to_path_buf(),
            image_by_tag: format!("{repository}:{version}"),
            version,
            image_digest,
            image,
            repository,
            chart,
        }
    }

    /// What a user does first, as docs/release.md says: the checksums' signature and the files
    /// (e2e/release/verify-sums.sh), then `cosign verify` of the image and of the chart by digest
    /// with the folder's public key; each verified payload names the digest. A key of another
    /// release verifies neither.
    pub fn verify_as_a_user(&self, scratch: &Path) {
        let sums = run(
            &workspace().join("e2e/release/verify-sums.sh"),
            &[self.dir.as_os_str()],
        );
        assert!(sums.status.success(), "verify-sums.sh: {}", text(&sums));
        let cosign = built("e2e/release/build-cosign.sh");
        let key = self.dir.join("cosign.pub");
        let chart = self
            .chart
            .strip_prefix("oci://")
            .unwrap_or_else(|| panic!("the chart's reference is not oci://: {}", self.chart));
        for reference in [self.image.as_str(), chart] {
            let out = verify(&cosign, &key, reference);
            assert!(
                out.status.success(),
                "cosign verify {reference}: {}",
                text(&out)
            );
            let payloads: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!("cosign verify's output is not JSON: {e}: {}", text(&out))
            });
            let digest = reference
                .rsplit_once('@')
                .map(|(_, d)| d)
                .unwrap_or_default();
            assert_eq!(
                payloads[0]["critical"]["image"]["docker-manifest-digest"], digest,
                "{payloads:#}"
            );
            eprintln!("verified {reference} with {}", key.display());
        }
        // Another key pair: cosign verify refuses what it did not sign.
        std::fs::create_dir_all(scratch).unwrap_or_else(|e| panic!("{}: {e}", scratch.display()));
        let generated = Command::new(&cosign)
            .arg("generate-key-pair")
            .current_dir(scratch)
            .env("COSIGN_PASSWORD", "")
            .output()
            .unwrap_or_else(|e| panic!("cannot run cosign: {e}"));
        assert!(generated.status.success(), "{}", text(&generated));
        for reference in [self.image.as_str(), chart] {
            let out = verify(&cosign, &scratch.join("cosign.pub"), reference);
            assert!(
                !out.status.success(),
                "another key verified {reference}: {}",
                text(&out)
            );
        }
    }
}

/// `cosign verify` as docs/release.md gives it, for the node's plain-HTTP registry.
fn verify(cosign: &Path, key: &Path, reference: &str) -> Output {
    run(
        cosign,
        &[
            "verify".as_ref(),
            "--key".as_ref(),
            key.as_os_str(),
            "--insecure-ignore-tlog=true".as_ref(),
            "--allow-http-registry".as_ref(),
            "--allow-insecure-registry".as_ref(),
            reference.as_ref(),
        ],
    )
}
