//! The audit's question about an object already stored: "would it be admitted if it were
//! created now?" — asked as a CREATE of the object by celgate's scanner identity, with no
//! oldObject, as a server-side dry run, and answered from a validating outcome: the binding's
//! failed validation (denied, warned or audited), or none. The background audit and
//! `celgate scan` ask it the same way.

use std::cell::Cell;
use std::sync::Arc;

use celgate_cel::Authorizer;
use celgate_engine::received::ReceivedRequest;
use celgate_engine::validate::VALIDATION_FAILURE_KEY;
use celgate_engine::validate::trace::{Effect, Skip, Step, StepKind, Trace};
use celgate_engine::{Outcome, Request};
use serde_json::{Value, json};

use crate::view::Snapshot;

/// The user the audit's requests are made by.
pub const SCANNER_USER: &str = "celgate:scanner";
/// The groups of [`SCANNER_USER`].
pub const SCANNER_GROUPS: [&str; 1] = ["system:authenticated"];

/// The resource an object is stored as.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StoredAs {
    /// API group, empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Resource (plural).
    pub resource: String,
    /// Kind.
    pub kind: String,
    /// Whether its objects live in a namespace.
    pub namespaced: bool,
}

impl StoredAs {
    /// `group/version` (`version` alone for the core group).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// The AdmissionRequest of a CREATE of `object`, stored as `stored`, by [`SCANNER_USER`], as a
/// dry run; `object` loses only its `metadata.resourceVersion`, which a create cannot carry.
pub fn create_request(stored: &StoredAs, mut object: Value, uid: &str) -> ReceivedRequest {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("resourceVersion");
    }
    let metadata = |key: &str| {
        object
            .pointer(&format!("/metadata/{key}"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (name, namespace) = (metadata("name"), metadata("namespace"));
    let kind = json!({"group": stored.group, "version": stored.version, "kind": stored.kind});
    let resource =
        json!({"group": stored.group, "version": stored.version, "resource": stored.resource});
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": name,
        "operation": "CREATE",
        "userInfo": {"username": SCANNER_USER, "groups": SCANNER_GROUPS},
        "object": object,
        "oldObject": null,
        "dryRun": true,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    });
    if stored.namespaced && !namespace.is_empty() {
        request["namespace"] = Value::String(namespace);
    }
    ReceivedRequest::from_value(request)
}

/// How a binding's failed validation would reach the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// Denied (Deny, or an error under failurePolicy Fail), or recorded in the audit log (Audit).
    Fail,
    /// Warned only (Warn).
    Warn,
}

/// A binding's failed validation for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// How it would reach the user.
    pub verdict: Verdict,
    /// The message it would carry: the denial, else the warning, else the audited failure's.
    pub message: String,
}

/// The violation in the outcome of one binding's evaluation, if its validations failed.
pub fn violation(outcome: &Outcome) -> Option<Violation> {
    if let Some(denial) = &outcome.denial {
        return Some(Violation {
            verdict: Verdict::Fail,
            message: denial.message.clone(),
        });
    }
    if let Some(warning) = outcome.warnings.first() {
        return Some(Violation {
            verdict: Verdict::Warn,
            message: warning.clone(),
        });
    }
    let (_, audited) = outcome
        .audit_annotations
        .iter()
        .find(|(key, _)| key == VALIDATION_FAILURE_KEY)?;
    let message = serde_json::from_str::<Vec<Value>>(audited)
        .ok()
        .and_then(|failures| {
            failures
                .first()
                .and_then(|f| f.get("message"))
                .and_then(Value::as_str)
                .map(String::from)
        });
    Some(Violation {
        verdict: Verdict::Fail,
        message: message.unwrap_or_else(|| audited.clone()),
    })
}

/// Decides `req` against `snapshot` as the webhook does (with no deadline), and tells whether
/// any binding applied to it: its policy and binding matched and, for at least one param, its
/// match conditions held (or failed with an error).
pub fn decide(
    snapshot: &Snapshot,
    req: &Request<'_>,
    authorizer: Option<&Arc<dyn Authorizer>>,
) -> (Outcome, bool) {
    let applied = Applied::default();
    let outcome = crate::dispatch::decide_traced(snapshot, req, authorizer, &applied);
    let applied = applied.evaluations.get() > applied.not_matched.get();
    (outcome, applied)
}

/// Counts the evaluations that started and those a match condition ended.
#[derive(Default)]
struct Applied {
    evaluations: Cell<u32>,
    not_matched: Cell<u32>,
}

impl Trace for Applied {
    fn evaluation(&self, _: &str, _: &str, _: Option<&Value>) {
        self.evaluations.set(self.evaluations.get() + 1);
    }

    fn step(&self, step: &Step<'_, '_>) {
        if step.kind == StepKind::MatchCondition && step.effect == Effect::NotMatched {
            self.not_matched.set(self.not_matched.get() + 1);
        }
    }

    fn skipped(&self, _: &str, _: Option<&str>, _: Skip) {}
}

#[cfg(test)]
mod tests {
    use celgate_engine::validate::Denial;

    use super::*;

    fn config_maps() -> StoredAs {
        StoredAs {
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
            kind: "ConfigMap".into(),
            namespaced: true,
        }
    }

    #[test]
    fn the_request_is_a_dry_run_create_by_the_scanner_without_a_resource_version() {
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7", "uid": "u"}});
        let received = create_request(&config_maps(), object, "scan-1");
        let req = received.request().expect("a valid request");
        assert_eq!(req.uid, "scan-1");
        assert_eq!(req.namespace, "ns");
        assert_eq!(req.raw["operation"], "CREATE");
        assert_eq!(req.raw["userInfo"]["username"], SCANNER_USER);
        assert_eq!(req.raw["dryRun"], true);
        let object = req.cel_object().to_json().expect("the object as JSON");
        assert_eq!(object["metadata"]["uid"], "u");
        assert!(object["metadata"].get("resourceVersion").is_none());
    }

    #[test]
    fn a_violation_is_the_denial_else_the_warning_else_the_audited_failure() {
        assert_eq!(violation(&Outcome::default()), None);
        let audited = Outcome {
            audit_annotations: vec![(
                VALIDATION_FAILURE_KEY.into(),
                r#"[{"message":"no owner","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Audit"]}]"#.into(),
            )],
            ..Outcome::default()
        };
        assert_eq!(
            violation(&audited),
            Some(Violation {
                verdict: Verdict::Fail,
                message: "no owner".into()
            })
        );
        let warned = Outcome {
            warnings: vec!["careful".into()],
            ..audited.clone()
        };
        assert_eq!(violation(&warned).map(|v| v.verdict), Some(Verdict::Warn));
        let denied = Outcome {
            denial: Some(Denial {
                message: "no".into(),
                reason: "Invalid".into(),
                code: 422,
            }),
            ..warned
        };
        assert_eq!(violation(&denied).map(|v| v.message), Some("no".into()));
    }
}
