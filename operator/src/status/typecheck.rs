//! Type checking for status: the checker seam (the cluster's schemas in production, fixed
//! reports in tests), and how a report becomes `status.typeChecking` and the `TypeChecked`
//! condition.

use std::sync::Arc;

use celgate_crds::{PolicyStatus, TypeChecking};
use celgate_engine::autogen::covered_constraints;
use celgate_engine::model::{MutatingPolicySpec, ValidatingPolicySpec};
pub use celgate_engine::typecheck::TypeCheckReport as Report;
use celgate_engine::typecheck::{
    ExpressionWarning, SkippedKind, TypeCheckReport, check_mutating, check_validating,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tracing::warn;

use super::conditions::{self, TYPE_CHECKED, Want};
use crate::cluster::discovery::Discovery;
use crate::cluster::schemas::SchemaCache;
use crate::cluster::types::ClusterTypes;

/// TypeChecked reason: every kind the policy matches was checked.
pub const CHECKED: &str = "Checked";
/// TypeChecked reason: some kinds or rules could not be checked (the message says why).
pub const KINDS_SKIPPED: &str = "KindsSkipped";

/// A policy to type check, in the engine's model.
pub enum Policy {
    /// A ValidatingAdmissionPolicy.
    Validating(ValidatingPolicySpec),
    /// A MutatingAdmissionPolicy.
    Mutating(MutatingPolicySpec),
}

/// Type checks policies against the kinds they match.
pub trait Checker: Send + Sync {
    /// The revision of the schemas checks use; each change re-checks every policy.
    fn revisions(&self) -> watch::Receiver<u64>;
    /// The report of one policy.
    fn check(&self, policy: Policy) -> BoxFuture<'_, Arc<TypeCheckReport>>;
}

/// Type checks against the cluster: served resources from discovery, schemas from
/// `/openapi/v3`, fetched before each check; the check itself runs on a blocking thread.
pub struct ClusterChecker {
    discovery: Discovery,
    schemas: Arc<SchemaCache>,
    revisions: watch::Receiver<u64>,
}

impl ClusterChecker {
    /// A checker over the cluster's served resources (`discovery`) and OpenAPI schemas
    /// (`schemas`). Every discovery that may have changed what is served (after a CRD change,
    /// periodically) is a new revision, so every policy is checked again against the schemas
    /// then current.
    pub fn start(discovery: Discovery, schemas: Arc<SchemaCache>) -> Arc<dyn Checker> {
        Arc::new(Self {
            revisions: discovery.revisions(),
            discovery,
            schemas,
        })
    }

    async fn report(&self, policy: Policy) -> Result<TypeCheckReport, String> {
        let (constraints, autogen, param_kind) = match &policy {
            Policy::Validating(s) => (&s.match_constraints, &s.autogen, &s.param_kind),
            Policy::Mutating(s) => (&s.match_constraints, &s.autogen, &s.param_kind),
        };
        // The schemas of the Pod controllers its autogen variants are checked against too.
        let constraints = covered_constraints(constraints.as_ref(), autogen.as_deref());
        let types = ClusterTypes::for_policy(
            &self.discovery,
            &self.schemas,
            constraints.as_ref(),
            param_kind.as_ref(),
        )
        .await
        .map_err(|e| e.to_string())?;
        let failures: Vec<SkippedKind> = types
            .failures()
            .iter()
            .map(|e| SkippedKind {
                what: "schemas".into(),
                reason: e.to_string(),
            })
            .collect();
        let mut report = tokio::task::spawn_blocking(move || match &policy {
            Policy::Validating(s) => check_validating(s, &types),
            Policy::Mutating(s) => check_mutating(s, &types),
        })
        .await
        .map_err(|e| format!("the type checker failed: {e}"))?;
        report.skipped.extend(failures);
        Ok(report)
    }
}

impl Checker for ClusterChecker {
    fn revisions(&self) -> watch::Receiver<u64> {
        self.revisions.clone()
    }

    fn check(&self, policy: Policy) -> BoxFuture<'_, Arc<TypeCheckReport>> {
        Box::pin(async move {
            let report = self.report(policy).await.unwrap_or_else(|reason| {
                warn!(%reason, "cannot type check a policy");
                TypeCheckReport {
                    skipped: vec![SkippedKind {
                        what: "every kind".into(),
                        reason,
                    }],
                    ..TypeCheckReport::default()
                }
            });
            Arc::new(report)
        })
    }
}

fn warnings(list: &[ExpressionWarning]) -> Option<Vec<celgate_crds::ExpressionWarning>> {
    (!list.is_empty()).then(|| {
        list.iter()
            .map(|w| celgate_crds::ExpressionWarning {
                field_ref: w.field_ref.clone(),
                warning: w.warning.clone(),
            })
            .collect()
    })
}

/// `status.typeChecking` for a report: upstream's warnings as upstream writes them (absent
/// when none), celgate's own beside them, and the total.
pub fn type_checking(report: &TypeCheckReport) -> TypeChecking {
    let total = report.expression_warnings.len() + report.additional_warnings.len();
    TypeChecking {
        expression_warnings: warnings(&report.expression_warnings),
        additional_expression_warnings: warnings(&report.additional_warnings),
        warning_count: Some(i32::try_from(total).unwrap_or(i32::MAX)),
    }
}

/// The `TypeChecked` condition: how many kinds were checked (and which), and which were
/// skipped and why.
pub fn type_checked(report: &TypeCheckReport) -> Want {
    let checked: Vec<String> = report.checked.iter().map(ToString::to_string).collect();
    let mut message = match checked.len() {
        0 => "checked no kind".to_string(),
        1 => format!("checked 1 kind: {}", checked[0]),
        n => format!("checked {n} kinds: {}", checked.join("; ")),
    };
    if !report.skipped.is_empty() {
        // One reason per group of kinds (in the order the reasons first appear), so a cap
        // that skips many kinds says why once.
        let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
        for s in &report.skipped {
            match groups.iter_mut().find(|(reason, _)| *reason == s.reason) {
                Some((_, what)) => what.push(&s.what),
                None => groups.push((&s.reason, vec![&s.what])),
            }
        }
        let groups: Vec<String> = groups
            .iter()
            .map(|(reason, what)| format!("{} ({reason})", what.join("; ")))
            .collect();
        message.push_str(&format!(
            "; skipped {}: {}",
            report.skipped.len(),
            groups.join("; ")
        ));
    }
    Want {
        type_: TYPE_CHECKED,
        status: true,
        reason: if report.skipped.is_empty() {
            CHECKED
        } else {
            KINDS_SKIPPED
        },
        message,
    }
}

/// The status of a policy at `generation` with this report and Ready condition; conditions
/// keep their transition times from `previous`.
pub fn policy_status(
    generation: i64,
    report: &TypeCheckReport,
    ready: Want,
    previous: Option<&PolicyStatus>,
) -> PolicyStatus {
    PolicyStatus {
        observed_generation: Some(generation),
        type_checking: Some(type_checking(report)),
        conditions: Some(conditions::merge(
            &[ready, type_checked(report)],
            generation,
            previous.and_then(|p| p.conditions.as_deref()),
            &conditions::now(),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use celgate_engine::schema::Gvk;
    use celgate_engine::typecheck::SkippedKind;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn warning(field_ref: &str) -> ExpressionWarning {
        ExpressionWarning {
            field_ref: field_ref.into(),
            warning: "w".into(),
        }
    }

    #[test]
    fn upstream_warnings_stay_apart_from_celgates_and_are_counted_together() {
        let report = TypeCheckReport {
            expression_warnings: vec![warning("spec.validations[0].expression")],
            additional_warnings: vec![
                warning("spec.matchConditions[0].expression"),
                warning("spec.variables[0].expression"),
            ],
            ..TypeCheckReport::default()
        };
        let t = type_checking(&report);
        assert_eq!(
            t.expression_warnings.unwrap()[0].field_ref,
            "spec.validations[0].expression"
        );
        assert_eq!(t.additional_expression_warnings.unwrap().len(), 2);
        assert_eq!(t.warning_count, Some(3));
        // No warnings: both lists absent (upstream writes `typeChecking: {}`), the count 0.
        let clean = type_checking(&TypeCheckReport::default());
        assert_eq!(
            (
                clean.expression_warnings,
                clean.additional_expression_warnings,
                clean.warning_count
            ),
            (None, None, Some(0))
        );
    }

    #[test]
    fn type_checked_names_the_kinds_checked_and_skipped() {
        let report = TypeCheckReport {
            checked: vec![
                Gvk::new("apps", "v1", "Deployment"),
                Gvk::new("", "v1", "Pod"),
            ],
            skipped: vec![
                SkippedKind {
                    what: "example.com/v1, Kind=Widget".into(),
                    reason: "its schema is not published".into(),
                },
                SkippedKind {
                    what: "batch/v1, Kind=Job".into(),
                    reason: "past the cap".into(),
                },
                SkippedKind {
                    what: "example.com/v1, Kind=Gadget".into(),
                    reason: "its schema is not published".into(),
                },
            ],
            ..TypeCheckReport::default()
        };
        let want = type_checked(&report);
        assert_eq!(
            (want.type_, want.status, want.reason),
            (TYPE_CHECKED, true, KINDS_SKIPPED)
        );
        assert_eq!(
            want.message,
            "checked 2 kinds: apps/v1, Kind=Deployment; /v1, Kind=Pod; skipped 3: example.com/v1, Kind=Widget; example.com/v1, Kind=Gadget (its schema is not published); batch/v1, Kind=Job (past the cap)"
        );
        let none = type_checked(&TypeCheckReport::default());
        assert_eq!(
            (none.reason, none.message.as_str()),
            (CHECKED, "checked no kind")
        );
    }

    #[test]
    fn a_new_generation_keeps_unchanged_conditions_transition_times() {
        let t0 = Time(Timestamp::from_second(1_000).unwrap());
        let ready = |status| Want {
            type_: conditions::READY,
            status,
            reason: "R",
            message: String::new(),
        };
        let mut previous = policy_status(1, &TypeCheckReport::default(), ready(false), None);
        for c in previous.conditions.iter_mut().flatten() {
            c.last_transition_time = t0.clone();
        }
        let next = policy_status(2, &TypeCheckReport::default(), ready(true), Some(&previous));
        let conditions = next.conditions.unwrap();
        assert_eq!(next.observed_generation, Some(2));
        assert_eq!(conditions[0].type_, "Ready");
        assert_ne!(
            conditions[0].last_transition_time, t0,
            "Ready went False → True"
        );
        assert_eq!(conditions[1].type_, "TypeChecked");
        assert_eq!(
            conditions[1].last_transition_time, t0,
            "TypeChecked stayed True"
        );
        assert!(conditions.iter().all(|c| c.observed_generation == Some(2)));
    }
}
