//! The audit's question about an object already stored: "would it be admitted if it were
//! created now?" — asked as a CREATE of the object by celgate's scanner identity, with no
//! oldObject, as a server-side dry run, and answered from a validating outcome: the binding's
//! failed validation (denied, warned or audited), or none. The background audit and
//! `celgate scan` ask it the same way.

use std::sync::Arc;
use std::time::SystemTime;

use celgate_cel::Authorizer;
use celgate_engine::received::ReceivedRequest;
use celgate_engine::validate::Check;
use celgate_engine::validate::VALIDATION_FAILURE_KEY;
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

/// Resources never audited (group, resource): celgate's own reports (a policy over `*` would
/// report on its reports, endlessly), and Events and Leases, which the cluster's components
/// write all the time and no admission policy is about.
pub const NEVER_AUDITED: [(&str, &str); 7] = [
    ("wgpolicyk8s.io", "policyreports"),
    ("wgpolicyk8s.io", "clusterpolicyreports"),
    ("openreports.io", "reports"),
    ("openreports.io", "clusterreports"),
    ("", "events"),
    ("events.k8s.io", "events"),
    ("coordination.k8s.io", "leases"),
];

/// Whether the audit (and `celgate scan --cluster`) lists the resource `group`/`resource`:
/// never those of [`NEVER_AUDITED`], and Secrets only with `secrets` (a policy's message could
/// copy their data into a report).
pub fn audited(group: &str, resource: &str, secrets: bool) -> bool {
    if (group, resource) == ("", "secrets") {
        return secrets;
    }
    !NEVER_AUDITED.contains(&(group, resource))
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
    /// Denied (Deny, or an error under failurePolicy Fail), or recorded in the audit log
    /// (Audit, with or without Warn).
    Fail,
    /// Warned only (Warn alone).
    Warn,
    /// Not validated: a PolicyException excepts the object from the binding (reported as
    /// skipped, never as a violation).
    Skip,
}

/// A binding's failed validation for one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// How it would reach the user.
    pub verdict: Verdict,
    /// The failed validation's own message (as the Audit action records it), whichever the
    /// actions: without the `ValidatingAdmissionPolicy '…' with binding '…' denied request: `
    /// or `Validation failed for …: ` a denial or warning wraps it in.
    pub message: String,
}

/// The violation in the outcome of one binding's evaluation, if its validations failed: `Fail`
/// when it would be denied or audited, `Warn` when it would only be warned.
pub fn violation(outcome: &Outcome) -> Option<Violation> {
    let failed: Vec<&Check> = outcome
        .checks
        .iter()
        .filter(|c| c.enforcement_action != "allow")
        .collect();
    let audited = outcome
        .audit_annotations
        .iter()
        .find(|(key, _)| key == VALIDATION_FAILURE_KEY)
        .map(|(_, value)| value);
    let verdict = if outcome.denial.is_some()
        || audited.is_some()
        || failed.iter().any(|c| c.enforcement_action != "warn")
    {
        Verdict::Fail
    } else if !outcome.warnings.is_empty() || !failed.is_empty() {
        Verdict::Warn
    } else {
        return None;
    };
    // The checks carry the failed validation's message; a denial no check records (a param
    // that cannot be found, under failurePolicy Fail) gives its own, unwrapped.
    let message = failed
        .iter()
        .find_map(|c| c.message.as_deref().map(String::from))
        .or_else(|| {
            outcome.denial.as_ref().map(|d| {
                d.message
                    .split_once(" denied request: ")
                    .map_or(d.message.as_str(), |(_, m)| m)
                    .to_string()
            })
        })
        .or_else(|| audited.map(|a| audited_message(a)))
        .or_else(|| outcome.warnings.first().cloned())
        .unwrap_or_default();
    Some(Violation { verdict, message })
}

/// The finding of a binding's evaluation for the audit's reports: its violation, else, when a
/// PolicyException excepted the object from it, a [`Verdict::Skip`] naming the exception.
pub fn finding(outcome: &Outcome) -> Option<Violation> {
    violation(outcome).or_else(|| {
        outcome.excepted.first().map(|e| Violation {
            verdict: Verdict::Skip,
            message: format!("excepted by PolicyException {}", e.exception),
        })
    })
}

/// The message of the first failure in a `validation_failure` audit annotation (the annotation
/// itself when it cannot be read).
fn audited_message(annotation: &str) -> String {
    serde_json::from_str::<Vec<Value>>(annotation)
        .ok()
        .and_then(|failures| {
            failures
                .first()
                .and_then(|f| f.get("message"))
                .and_then(Value::as_str)
                .map(String::from)
        })
        .unwrap_or_else(|| annotation.to_string())
}

/// Decides `req` against `snapshot` at `now` as the webhook does (with no deadline), but each
/// binding alone that `wanted` picks (given its policy's name and its own): `each` gets the
/// binding's policy, its name, its outcome and whether it applied (its policy and binding
/// matched and, for at least one param, its match conditions held or failed with an error; a
/// binding a PolicyException excepts did not apply, its outcome's `excepted` names it), once
/// per binding (a policy's autogen variants' outcomes merged into its bindings').
pub fn decide_each_binding(
    snapshot: &Snapshot,
    req: &Request<'_>,
    authorizer: Option<&Arc<dyn Authorizer>>,
    now: SystemTime,
    wanted: impl Fn(&str, &str) -> bool,
    mut each: impl FnMut(&Arc<str>, &str, &Outcome, bool),
) {
    let ctx = crate::dispatch::context_at(snapshot, authorizer, None, None, now);
    snapshot.policies.validate_each_binding(
        req,
        &ctx,
        |policy, binding| wanted(&policy.name, &binding.name),
        |policy, one| each(&policy.name, &one.binding, &one.outcome, one.applied),
    );
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
    fn reports_events_and_leases_are_never_audited_and_secrets_only_when_asked() {
        for (group, resource) in NEVER_AUDITED {
            assert!(!audited(group, resource, true), "{group}/{resource}");
        }
        assert!(!audited("openreports.io", "reports", true));
        assert!(!audited("openreports.io", "clusterreports", true));
        assert!(!audited("", "secrets", false));
        assert!(audited("", "secrets", true));
        assert!(audited("", "configmaps", false));
        assert!(audited("apps", "deployments", false));
        assert!(audited("example.com", "leases", false));
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

    fn check(action: &'static str, message: &str) -> Check {
        Check {
            policy: "p".into(),
            binding: "b".into(),
            error_type: celgate_engine::validate::ErrorType::InvalidError,
            enforcement_action: action,
            message: Some(message.into()),
            elapsed: std::time::Duration::ZERO,
        }
    }

    #[test]
    fn a_violation_has_the_failed_validations_own_message_whichever_the_actions() {
        assert_eq!(violation(&Outcome::default()), None);
        let audit_record = (
            VALIDATION_FAILURE_KEY.to_string(),
            r#"[{"message":"no owner","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Warn","Audit"]}]"#.to_string(),
        );
        let warned_and_audited = Outcome {
            warnings: vec![
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': no owner"
                    .into(),
            ],
            audit_annotations: vec![audit_record.clone()],
            checks: vec![check("warn", "no owner"), check("audit", "no owner")],
            ..Outcome::default()
        };
        assert_eq!(
            violation(&warned_and_audited),
            Some(Violation {
                verdict: Verdict::Fail,
                message: "no owner".into()
            }),
            "Warn and Audit: fail, as the docs say"
        );
        let warned = Outcome {
            warnings: vec![
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': no owner"
                    .into(),
            ],
            checks: vec![check("warn", "no owner")],
            ..Outcome::default()
        };
        assert_eq!(
            violation(&warned),
            Some(Violation {
                verdict: Verdict::Warn,
                message: "no owner".into()
            })
        );
        let denied = Outcome {
            denial: Some(Denial {
                message: "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no owner"
                    .into(),
                reason: "Invalid".into(),
                code: 422,
            }),
            checks: vec![check("deny", "no owner")],
            ..Outcome::default()
        };
        assert_eq!(
            violation(&denied),
            Some(Violation {
                verdict: Verdict::Fail,
                message: "no owner".into()
            })
        );
        let unrecorded = Outcome {
            denial: Some(Denial {
                message: "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed to configure binding: no params found".into(),
                reason: "Invalid".into(),
                code: 422,
            }),
            ..Outcome::default()
        };
        assert_eq!(
            violation(&unrecorded).map(|v| v.message),
            Some("failed to configure binding: no params found".into())
        );
        let audited_only = Outcome {
            audit_annotations: vec![audit_record],
            ..Outcome::default()
        };
        assert_eq!(
            violation(&audited_only).map(|v| v.message),
            Some("no owner".into())
        );
        let allowed_with_an_error = Outcome {
            checks: vec![Check {
                enforcement_action: "allow",
                message: None,
                ..check("allow", "")
            }],
            ..Outcome::default()
        };
        assert_eq!(violation(&allowed_with_an_error), None);
    }
}
