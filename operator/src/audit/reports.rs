//! The audit's results where policy tools read them: one `wgpolicyk8s.io/v1alpha2`
//! PolicyReport (ClusterPolicyReport for a cluster-scoped object), or with
//! `--audit-report-api=openreports` one `openreports.io/v1alpha1` Report (ClusterReport), per
//! object with violations, named `celgate-<object uid>`, owned by the object (so it goes with
//! it), with one result per binding whose validations fail; with `--audit-report-passes` also
//! per object that a binding evaluated and allowed, with a `pass` result for each such binding.
//! Written by server-side apply (field manager `celgate-audit`); deleted when the object has
//! no result left. Without the CRDs installed, nothing is written.

use std::time::{SystemTime, UNIX_EPOCH};

use celgate_snapshot::audit::Verdict;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

pub use crate::args::ReportApi;

use super::findings::{ObjectFindings, UnitKey};
use super::targets::Unit;

/// The field manager of the audit's writes.
pub const FIELD_MANAGER: &str = "celgate-audit";
/// The label on every report celgate writes.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "celgate");
/// The `source` of every result.
const SOURCE: &str = "celgate";

/// Where each report API keeps its reports.
impl ReportApi {
    /// The API group.
    pub fn group(self) -> &'static str {
        match self {
            Self::Wgpolicyk8s => "wgpolicyk8s.io",
            Self::Openreports => "openreports.io",
        }
    }

    /// The report kind for namespaced or cluster-scoped objects.
    pub fn resource(self, namespaced: bool) -> ApiResource {
        let (version, kind, plural) = match (self, namespaced) {
            (Self::Wgpolicyk8s, true) => ("v1alpha2", "PolicyReport", "policyreports"),
            (Self::Wgpolicyk8s, false) => {
                ("v1alpha2", "ClusterPolicyReport", "clusterpolicyreports")
            }
            (Self::Openreports, true) => ("v1alpha1", "Report", "reports"),
            (Self::Openreports, false) => ("v1alpha1", "ClusterReport", "clusterreports"),
        };
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group(), version, kind),
            plural,
        )
    }

    /// The reports' kinds, for messages: `PolicyReport/ClusterPolicyReport (wgpolicyk8s.io)`.
    pub fn kinds(self) -> String {
        format!(
            "{}/{} ({})",
            self.resource(true).kind,
            self.resource(false).kind,
            self.group()
        )
    }
}

/// The name of an object's report.
pub fn name(uid: &str) -> String {
    format!("celgate-{uid}")
}

/// The report of one object's findings in `api`; `units` give each binding's actions and
/// annotations. Results: the violations, then the passes, each in binding order.
pub fn body<'u>(
    api: ReportApi,
    findings: &ObjectFindings,
    unit: impl Fn(&UnitKey) -> Option<&'u Unit>,
) -> Value {
    let subject = &findings.subject;
    let namespaced = !subject.namespace.is_empty();
    let kind = api.resource(namespaced);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut summary = json!({"pass": 0, "fail": 0, "warn": 0, "error": 0, "skip": 0});
    let violations = findings.violations.iter().map(|(key, violation)| {
        let result = match violation.verdict {
            Verdict::Fail => "fail",
            Verdict::Warn => "warn",
            Verdict::Skip => "skip",
        };
        (key, result, Some(violation.message.as_str()))
    });
    let passes = findings.passes.iter().map(|key| (key, "pass", None));
    let results: Vec<Value> = violations
        .chain(passes)
        .map(|(key, result, message)| {
            summary[result] = json!(summary[result].as_i64().unwrap_or(0) + 1);
            let unit = unit(key);
            let mut out = json!({
                "source": SOURCE,
                "policy": &*key.0,
                "rule": &*key.1,
                "result": result,
                "scored": true,
                "timestamp": {"seconds": now, "nanos": 0},
                "properties": {
                    "binding": &*key.1,
                    "validationActions": unit.map(|u| u.actions()).unwrap_or_default(),
                },
            });
            if let Some(message) = message {
                out["message"] = json!(message);
            }
            if let Some(severity) = unit.and_then(|u| u.annotations.severity.as_deref()) {
                out["severity"] = json!(severity);
            }
            if let Some(category) = unit.and_then(|u| u.annotations.category.as_deref()) {
                out["category"] = json!(category);
            }
            out
        })
        .collect();
    let mut metadata = json!({
        "name": name(&subject.uid),
        "labels": {MANAGED_BY.0: MANAGED_BY.1},
        "ownerReferences": [{
            "apiVersion": &*subject.api_version,
            "kind": &*subject.kind,
            "name": &*subject.name,
            "uid": &*subject.uid,
        }],
    });
    let mut scope = json!({
        "apiVersion": &*subject.api_version,
        "kind": &*subject.kind,
        "name": &*subject.name,
        "uid": &*subject.uid,
    });
    if namespaced {
        metadata["namespace"] = json!(&*subject.namespace);
        scope["namespace"] = json!(&*subject.namespace);
    }
    let mut report = json!({
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": metadata,
        "scope": scope,
        "summary": summary,
        "results": results,
    });
    if api == ReportApi::Openreports {
        // OpenReports names the producer once, for the whole report.
        report["source"] = json!(SOURCE);
    }
    report
}

/// Writes the reports of celgate's audit.
#[derive(Clone)]
pub struct Reports {
    client: Client,
    api: ReportApi,
}

impl Reports {
    /// Reports of `api` written with `client`.
    pub fn new(client: Client, api: ReportApi) -> Self {
        Self { client, api }
    }

    /// The report API written.
    pub fn report_api(&self) -> ReportApi {
        self.api
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        let kind = self.api.resource(!namespace.is_empty());
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
            let api: Api<DynamicObject> =
                Api::all_with(self.client.clone(), &self.api.resource(namespaced));
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
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::Arc;

    use celgate_snapshot::audit::{StoredAs, Violation};

    use super::super::findings::Subject;
    use super::*;

    fn deployment(
        violations: BTreeMap<UnitKey, Violation>,
        passes: BTreeSet<UnitKey>,
    ) -> ObjectFindings {
        ObjectFindings::new(
            Subject {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: "team-a".into(),
                name: "web".into(),
                uid: "1234".into(),
            },
            Arc::new(StoredAs {
                group: "apps".into(),
                version: "v1".into(),
                resource: "deployments".into(),
                kind: "Deployment".into(),
                namespaced: true,
            }),
            violations,
            passes,
        )
    }

    fn binding(name: &str) -> UnitKey {
        (Arc::from("p"), Arc::from(name))
    }

    #[test]
    fn a_report_is_owned_by_its_object_and_has_a_result_per_failing_binding() {
        let findings = deployment(
            BTreeMap::from([
                (
                    binding("b1"),
                    Violation {
                        verdict: Verdict::Fail,
                        message: "denied".into(),
                    },
                ),
                (
                    binding("b2"),
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
            BTreeSet::new(),
        );
        let report = body(ReportApi::Wgpolicyk8s, &findings, |_| None);
        assert_eq!(report["apiVersion"], "wgpolicyk8s.io/v1alpha2");
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
        assert_eq!(report["summary"]["pass"], 0);
        assert_eq!(report["results"].as_array().map(Vec::len), Some(3));
        assert_eq!(report["results"][0]["rule"], "b1");
        assert_eq!(report["results"][0]["message"], "denied");
        assert_eq!(report["results"][1]["result"], "warn");
        assert!(report.get("source").is_none(), "{report}");
    }

    #[test]
    fn passes_are_results_counted_in_the_summary_after_the_violations() {
        let findings = deployment(
            BTreeMap::from([(
                binding("b2"),
                Violation {
                    verdict: Verdict::Fail,
                    message: "denied".into(),
                },
            )]),
            BTreeSet::from([binding("b1"), binding("b3")]),
        );
        let report = body(ReportApi::Wgpolicyk8s, &findings, |_| None);
        assert_eq!(report["summary"]["fail"], 1);
        assert_eq!(report["summary"]["pass"], 2);
        let results: Vec<(&str, &str)> = report["results"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                (
                    r["rule"].as_str().unwrap_or_default(),
                    r["result"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(results, [("b2", "fail"), ("b1", "pass"), ("b3", "pass")]);
        let pass = &report["results"][1];
        assert_eq!(pass["policy"], "p");
        assert_eq!(pass["source"], "celgate");
        assert_eq!(pass["scored"], true);
        assert!(
            pass.get("message").is_none(),
            "a pass has no message: {pass}"
        );

        // A report of passes only (an object every binding allowed).
        let allowed = deployment(BTreeMap::new(), BTreeSet::from([binding("b1")]));
        let report = body(ReportApi::Wgpolicyk8s, &allowed, |_| None);
        assert_eq!(report["summary"]["pass"], 1);
        assert_eq!(report["summary"]["fail"], 0);
        assert_eq!(report["results"][0]["result"], "pass");
    }

    #[test]
    fn openreports_reports_are_report_and_cluster_report_with_the_same_results() {
        let findings = deployment(
            BTreeMap::from([(
                binding("b1"),
                Violation {
                    verdict: Verdict::Fail,
                    message: "denied".into(),
                },
            )]),
            BTreeSet::from([binding("b2")]),
        );
        let report = body(ReportApi::Openreports, &findings, |_| None);
        assert_eq!(report["apiVersion"], "openreports.io/v1alpha1");
        assert_eq!(report["kind"], "Report");
        assert_eq!(report["source"], "celgate");
        assert_eq!(report["metadata"]["namespace"], "team-a");
        assert_eq!(report["scope"]["name"], "web");
        assert_eq!(report["summary"]["fail"], 1);
        assert_eq!(report["summary"]["pass"], 1);
        let wg = body(ReportApi::Wgpolicyk8s, &findings, |_| None);
        assert_eq!(fingerprint(&report), fingerprint(&wg), "the same results");

        let mut node = findings;
        node.subject.namespace = Arc::from("");
        let report = body(ReportApi::Openreports, &node, |_| None);
        assert_eq!(report["kind"], "ClusterReport");
        assert!(report["metadata"].get("namespace").is_none(), "{report}");
        let cluster = ReportApi::Openreports.resource(false);
        assert_eq!(
            (
                cluster.group.as_str(),
                cluster.version.as_str(),
                cluster.plural.as_str()
            ),
            ("openreports.io", "v1alpha1", "clusterreports")
        );
        let namespaced = ReportApi::Openreports.resource(true);
        assert_eq!(namespaced.plural, "reports");
    }
}
