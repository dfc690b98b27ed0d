//! The audit's results where policy tools read them: one `wgpolicyk8s.io/v1alpha2`
//! PolicyReport (ClusterPolicyReport for a cluster-scoped object) per object with violations,
//! named `celgate-<object uid>`, owned by the object (so it goes with it), with one result per
//! binding whose validations fail. Written by server-side apply (field manager
//! `celgate-audit`); deleted when the object has no violation left. Without the CRDs installed,
//! nothing is written.

use std::time::{SystemTime, UNIX_EPOCH};

use celgate_snapshot::audit::Verdict;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::findings::{ObjectFindings, UnitKey};
use super::targets::Unit;

/// The field manager of the audit's writes.
pub const FIELD_MANAGER: &str = "celgate-audit";
/// The label on every report celgate writes.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "celgate");
/// The reports' API group and version.
const GROUP: &str = "wgpolicyk8s.io";
const VERSION: &str = "v1alpha2";

/// The `source` of every result.
const SOURCE: &str = "celgate";

/// The report kind for namespaced (`PolicyReport`) or cluster-scoped objects.
fn resource(namespaced: bool) -> ApiResource {
    let (kind, plural) = if namespaced {
        ("PolicyReport", "policyreports")
    } else {
        ("ClusterPolicyReport", "clusterpolicyreports")
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
}

/// The name of an object's report.
pub fn name(uid: &str) -> String {
    format!("celgate-{uid}")
}

/// The report of one object's findings; `units` give each binding's actions and annotations.
pub fn body<'u>(findings: &ObjectFindings, unit: impl Fn(&UnitKey) -> Option<&'u Unit>) -> Value {
    let subject = &findings.subject;
    let namespaced = !subject.namespace.is_empty();
    let kind = resource(namespaced);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut summary = json!({"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0});
    let results: Vec<Value> = findings
        .violations
        .iter()
        .map(|(key, violation)| {
            let result = match violation.verdict {
                Verdict::Fail => "fail",
                Verdict::Warn => "warn",
                Verdict::Skip => "skip",
            };
            summary[result] = json!(summary[result].as_i64().unwrap_or(0) + 1);
            let unit = unit(key);
            let mut out = json!({
                "source": SOURCE,
                "policy": &*key.0,
                "rule": &*key.1,
                "result": result,
                "message": violation.message,
                "scored": true,
                "timestamp": {"seconds": now, "nanos": 0},
                "properties": {
                    "binding": &*key.1,
                    "validationActions": unit.map(|u| u.actions.as_str()).unwrap_or(""),
                },
            });
            if let Some(severity) = unit.and_then(|u| u.severity.as_deref()) {
                out["severity"] = json!(severity);
            }
            if let Some(category) = unit.and_then(|u| u.category.as_deref()) {
                out["category"] = json!(category);
            }
            out
        })
        .collect();
    let mut metadata = json!({
        "name": name(&subject.uid),
        "labels": {MANAGED_BY.0: MANAGED_BY.1},
        "ownerReferences": [{
            "apiVersion": subject.api_version,
            "kind": subject.kind,
            "name": subject.name,
            "uid": subject.uid,
        }],
    });
    let mut scope = json!({
        "apiVersion": subject.api_version,
        "kind": subject.kind,
        "name": subject.name,
        "uid": subject.uid,
    });
    if namespaced {
        metadata["namespace"] = json!(subject.namespace);
        scope["namespace"] = json!(subject.namespace);
    }
    json!({
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": metadata,
        "scope": scope,
        "summary": summary,
        "results": results,
    })
}

/// Writes the reports of celgate's audit.
#[derive(Clone)]
pub struct Reports {
    client: Client,
}

impl Reports {
    /// Reports written with `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        let kind = resource(!namespace.is_empty());
        if namespace.is_empty() {
            Api::all_with(self.client.clone(), &kind)
        } else {
            Api::namespaced_with(self.client.clone(), namespace, &kind)
        }
    }

    /// Whether the API server serves the reports (their CRDs are installed).
    pub async fn served(&self) -> Result<bool, kube::Error> {
        match self
            .api("")
            .list_metadata(&ListParams::default().limit(1))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Applies the report of `body`.
    pub async fn apply(&self, namespace: &str, body: &Value) -> Result<(), kube::Error> {
        let name = body
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        self.api(namespace)
            .patch(
                name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(body),
            )
            .await
            .map(|_| ())
    }

    /// Deletes the report of the object `uid` in `namespace`; one already gone is fine.
    pub async fn delete(&self, namespace: &str, uid: &str) -> Result<(), kube::Error> {
        match self
            .api(namespace)
            .delete(&name(uid), &DeleteParams::background())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Every report celgate wrote, as it is stored: the object uid it is about, its namespace
    /// (empty for a ClusterPolicyReport) and its [`fingerprint`]. Listed in pages of 500.
    pub async fn list(&self) -> Result<Vec<Stored>, kube::Error> {
        let selector = format!("{}={}", MANAGED_BY.0, MANAGED_BY.1);
        let mut stored = Vec::new();
        for namespaced in [true, false] {
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource(namespaced));
            let mut params = ListParams::default().labels(&selector).limit(500);
            loop {
                let page = api.list(&params).await?;
                for report in page.items {
                    let name = report.name_any();
                    let Some(uid) = name.strip_prefix("celgate-") else {
                        continue;
                    };
                    let uid = uid.to_string();
                    let namespace = report.namespace().unwrap_or_default();
                    let value = serde_json::to_value(&report).unwrap_or(Value::Null);
                    stored.push(Stored {
                        uid,
                        namespace,
                        fingerprint: fingerprint(&value),
                    });
                }
                match page.metadata.continue_ {
                    Some(token) if !token.is_empty() => params = params.continue_token(&token),
                    _ => break,
                }
            }
        }
        Ok(stored)
    }
}

/// One report as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The uid of the object it is about.
    pub uid: String,
    /// Its namespace; empty for a ClusterPolicyReport.
    pub namespace: String,
    /// Its [`fingerprint`].
    pub fingerprint: u64,
}

/// What a report says, hashed: the fields celgate writes (name, namespace, label, owner, scope,
/// summary and results) without the results' timestamps, so a report written again with the
/// same findings has the same fingerprint as the one stored, and is not written.
pub fn fingerprint(report: &Value) -> u64 {
    let metadata = &report["metadata"];
    let owners: Vec<Value> = metadata["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|o| json!([o["apiVersion"], o["kind"], o["name"], o["uid"]]))
        .collect();
    let results: Vec<Value> = report["results"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let mut r = r.clone();
            if let Some(r) = r.as_object_mut() {
                r.remove("timestamp");
            }
            r
        })
        .collect();
    let said = json!([
        metadata["name"],
        metadata["namespace"],
        metadata["labels"][MANAGED_BY.0],
        owners,
        report["scope"],
        report["summary"],
        results,
    ]);
    let mut hasher = std::hash::DefaultHasher::new();
    hash_value(&said, &mut hasher);
    std::hash::Hasher::finish(&hasher)
}

/// Hashes a JSON value with object keys in sorted order (whatever order they were read in).
fn hash_value(value: &Value, hasher: &mut std::hash::DefaultHasher) {
    use std::hash::Hash;
    match value {
        Value::Null => 0u8.hash(hasher),
        Value::Bool(b) => (1u8, b).hash(hasher),
        Value::Number(n) => (2u8, n.to_string()).hash(hasher),
        Value::String(s) => (3u8, s).hash(hasher),
        Value::Array(items) => {
            (4u8, items.len()).hash(hasher);
            for item in items {
                hash_value(item, hasher);
            }
        }
        Value::Object(map) => {
            (5u8, map.len()).hash(hasher);
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort_unstable();
            for key in keys {
                key.hash(hasher);
                hash_value(&map[key], hasher);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use celgate_snapshot::audit::{StoredAs, Violation};

    use super::super::findings::Subject;
    use super::*;

    #[test]
    fn a_report_is_owned_by_its_object_and_has_a_result_per_failing_binding() {
        let findings = ObjectFindings {
            subject: Subject {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "team-a".into(),
                name: "web".into(),
                uid: "1234".into(),
            },
            resource: StoredAs {
                group: "apps".into(),
                version: "v1".into(),
                resource: "deployments".into(),
                kind: "Deployment".into(),
                namespaced: true,
            },
            violations: BTreeMap::from([
                (
                    (Arc::from("p"), Arc::from("b1")),
                    Violation {
                        verdict: Verdict::Fail,
                        message: "denied".into(),
                    },
                ),
                (
                    (Arc::from("p"), Arc::from("b2")),
                    Violation {
                        verdict: Verdict::Warn,
                        message: "warned".into(),
                    },
                ),
                (
                    (Arc::from("p"), Arc::from("b3")),
                    Violation {
                        verdict: Verdict::Skip,
                        message: "excepted by PolicyException team-a/web".into(),
                    },
                ),
            ]),
        };
        let report = body(&findings, |_| None);
        // An excepted binding is a skip naming the exception, not a failure.
        assert_eq!(report["summary"]["skip"], 1);
        assert_eq!(report["results"][2]["result"], "skip");
        assert_eq!(
            report["results"][2]["message"],
            "excepted by PolicyException team-a/web"
        );
        assert_eq!(report["kind"], "PolicyReport");
        assert_eq!(report["metadata"]["name"], "celgate-1234");
        assert_eq!(report["metadata"]["namespace"], "team-a");
        assert_eq!(report["metadata"]["ownerReferences"][0]["uid"], "1234");
        assert_eq!(report["scope"]["kind"], "Deployment");
        assert_eq!(report["summary"]["fail"], 1);
        assert_eq!(report["summary"]["warn"], 1);
        assert_eq!(report["results"][0]["rule"], "b1");
        assert_eq!(report["results"][0]["message"], "denied");
        assert_eq!(report["results"][1]["result"], "warn");
    }
}
