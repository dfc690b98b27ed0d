//! The API server's audit log as the differential suites read it: incrementally, indexed by
//! audit ID, with celgate's audit annotation keys mapped back to the in-tree ones.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The audit log file, read from where the last read stopped. kube-apiserver rotates it at
/// 100 MB (renaming it and starting a new one): the renamed file's last events are read, then
/// the new file from its start.
pub struct AuditLog {
    path: PathBuf,
    /// The file read (its inode), and how far.
    inode: Option<u64>,
    offset: u64,
    partial: Vec<u8>,
    events: HashMap<String, BTreeMap<String, String>>,
}

impl AuditLog {
    /// The log at `path`, read from its start.
    pub fn new(path: PathBuf) -> Self {
        AuditLog {
            path,
            inode: None,
            offset: 0,
            partial: Vec::new(),
            events: HashMap::new(),
        }
    }

    fn read_new(&mut self) {
        let Ok(file) = File::open(&self.path) else {
            return;
        };
        let Ok(inode) = file.metadata().map(|m| m.ino()) else {
            return;
        };
        if let Some(old) = self.inode.filter(|old| *old != inode) {
            if let Some(rotated) = self.renamed(old) {
                self.read_from(rotated);
            }
            self.offset = 0;
        }
        self.inode = Some(inode);
        self.read_from(file);
    }

    /// The rotated file that was the log (inode `inode`), in the log's folder.
    fn renamed(&self, inode: u64) -> Option<File> {
        std::fs::read_dir(self.path.parent()?)
            .ok()?
            .filter_map(Result::ok)
            .find(|e| e.metadata().is_ok_and(|m| m.ino() == inode))
            .and_then(|e| File::open(e.path()).ok())
    }

    fn read_from(&mut self, mut file: File) {
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let Ok(n) = file.read_to_end(&mut self.partial) else {
            return;
        };
        self.offset += n as u64;
        let Some(last) = self.partial.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        let complete: Vec<u8> = self.partial.drain(..=last).collect();
        for line in complete.split(|&b| b == b'\n') {
            let Ok(ev) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            if ev["stage"] != "ResponseComplete" {
                continue;
            }
            let Some(id) = ev["auditID"].as_str() else {
                continue;
            };
            let annotations = ev["annotations"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                        .collect()
                })
                .unwrap_or_default();
            self.events.insert(id.to_string(), annotations);
        }
    }

    /// The annotations of the ResponseComplete event with `id`, waiting up to 30 s for it (a
    /// loaded machine writes the audit log late).
    pub async fn annotations(&mut self, id: &str) -> BTreeMap<String, String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.read_new();
            if let Some(a) = self.events.remove(id) {
                return a;
            }
            assert!(
                Instant::now() < deadline,
                "no ResponseComplete audit event with auditID {id} within 30s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The key in-tree writes a failed validation of an Audit binding under.
pub const IN_TREE_FAILURE_KEY: &str = "validation.policy.admission.k8s.io/validation_failure";

/// Audit annotations with celgate's keys (`validate[-ignore].celgate.io/<policy>_<key>`) mapped
/// to in-tree's (`<policy>/<key>`) and those of other plugins dropped, sorted; a key seen twice
/// after mapping is suffixed ` (twice, as <key>)`.
pub fn normalise_audit(annotations: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in annotations {
        let key = if let Some(rest) = k
            .strip_prefix("validate.celgate.io/")
            .or_else(|| k.strip_prefix("validate-ignore.celgate.io/"))
        {
            if rest == "validation_failure" {
                IN_TREE_FAILURE_KEY.to_string()
            } else {
                // Policy names are DNS subdomains (no `_`): the first `_` is the separator.
                match rest.split_once('_') {
                    Some((p, key)) => format!("{p}/{key}"),
                    None => rest.to_string(),
                }
            }
        } else if [
            // kube-apiserver's record of each mutating webhook call: in-tree policies are no
            // webhooks, so only celgate's calls have them.
            "mutation.webhook.admission.k8s.io/",
            "patch.webhook.admission.k8s.io/",
            "authorization.k8s.io/",
            "pod-security.kubernetes.io/",
            "apiserver.latency.k8s.io/",
        ]
        .iter()
        .any(|p| k.starts_with(p))
        {
            continue;
        } else {
            k.clone()
        };
        let key = if out.iter().any(|(seen, _)| *seen == key) {
            format!("{key} (twice, as {k})")
        } else {
            key
        };
        out.push((key, v.clone()));
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn event(id: &str, annotation: &str) -> String {
        format!(
            "{{\"stage\":\"ResponseComplete\",\"auditID\":\"{id}\",\"annotations\":{{\"k\":\"{annotation}\"}}}}\n"
        )
    }

    #[test]
    fn events_written_before_and_after_a_rotation_are_all_found() {
        let dir = std::env::temp_dir().join(format!("celgate-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let path = dir.join("audit.log");
        let append = |p: &PathBuf, text: &str| {
            let mut f = File::options()
                .create(true)
                .append(true)
                .open(p)
                .unwrap_or_else(|e| panic!("{e}"));
            f.write_all(text.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
        };
        let mut log = AuditLog::new(path.clone());
        append(&path, &event("a", "é"));
        log.read_new();
        // Written, then rotated before the next read; then a new file.
        append(&path, &event("b", "2"));
        let rotated = dir.join("audit-2026-11-28T18-00-00.000.log");
        std::fs::rename(&path, &rotated).unwrap_or_else(|e| panic!("{e}"));
        append(&path, &event("c", "3"));
        log.read_new();
        let found: Vec<Option<String>> = ["a", "b", "c"]
            .iter()
            .map(|id| log.events.get(*id).and_then(|a| a.get("k").cloned()))
            .collect();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            found,
            [Some("é".into()), Some("2".into()), Some("3".into())]
        );
    }
}
