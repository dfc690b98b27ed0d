//! The API server's audit log as the differential suites read it: incrementally, indexed by
//! audit ID, with celgate's audit annotation keys mapped back to the in-tree ones.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The audit log file, read from where the last read stopped.
pub struct AuditLog {
    path: PathBuf,
    offset: u64,
    partial: String,
    events: HashMap<String, BTreeMap<String, String>>,
}

impl AuditLog {
    /// The log at `path`, read from its start.
    pub fn new(path: PathBuf) -> Self {
        AuditLog {
            path,
            offset: 0,
            partial: String::new(),
            events: HashMap::new(),
        }
    }

    fn read_new(&mut self) {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = String::new();
        let Ok(n) = f.read_to_string(&mut buf) else {
            return;
        };
        self.offset += n as u64;
        self.partial.push_str(&buf);
        let Some(last) = self.partial.rfind('\n') else {
            return;
        };
        let complete: String = self.partial.drain(..=last).collect();
        for line in complete.lines() {
            let Ok(ev) = serde_json::from_str::<Value>(line) else {
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
