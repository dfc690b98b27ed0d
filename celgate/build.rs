//! Sets CELGATE_REVISION, the git revision `celgate --version` prints: the environment's
//! CELGATE_REVISION when set (an image build from a source archive), else `git rev-parse --short
//! HEAD`, else `unknown` (not a git checkout, or no git).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=CELGATE_REVISION");
    let revision = match std::env::var("CELGATE_REVISION") {
        Ok(r) if !r.is_empty() => r,
        _ => {
            // A new commit moves HEAD or the branch it names (a loose ref, or packed-refs).
            if let (Some(dir), Some(common)) = (
                git(&["rev-parse", "--path-format=absolute", "--git-dir"]),
                git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]),
            ) {
                let mut watched = vec![Path::new(&dir).join("HEAD")];
                if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                    watched.push(Path::new(&common).join(branch));
                }
                watched.push(Path::new(&common).join("packed-refs"));
                // A path that does not exist would rerun this script on every build.
                for path in watched.iter().filter(|p| p.exists()) {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
            git(&["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".to_string())
        }
    };
    println!("cargo:rustc-env=CELGATE_REVISION={revision}");
}
