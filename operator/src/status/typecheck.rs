//! Type checking for status: the checker seam (the cluster's schemas in production, fixed
//! reports in tests), and how a report becomes `status.typeChecking` and the `TypeChecked`
//! condition.

use std::sync::Arc;

use celgate_crds::{PolicyStatus, TypeChecking};
use celgate_engine::model::{MutatingPolicySpec, ValidatingPolicySpec};
pub use celgate_engine::typecheck::TypeCheckReport as Report;
use celgate_engine::typecheck::{ExpressionWarning, TypeCheckReport};
use futures::future::BoxFuture;
use tokio::sync::watch;

pub use shim::ClusterChecker;

use super::conditions::{self, TYPE_CHECKED, Want};

/// TEMPORARY until h-schemas merges.
mod shim {
    #![allow(missing_docs, dead_code)]
    use super::Report;
    use std::sync::Arc;
    pub struct ClusterChecker(tokio::sync::watch::Sender<u64>);
    impl ClusterChecker {
        pub fn start(_: kube::Client) -> Arc<dyn super::Checker> {
            Arc::new(Self(tokio::sync::watch::Sender::new(0)))
        }
    }
    impl super::Checker for ClusterChecker {
        fn revisions(&self) -> tokio::sync::watch::Receiver<u64> {
            self.0.subscribe()
        }
        fn check(&self, _: super::Policy) -> futures::future::BoxFuture<'_, Arc<Report>> {
            Box::pin(std::future::ready(Arc::new(Report::default())))
        }
    }
}

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
        let skipped: Vec<String> = report
            .skipped
            .iter()
            .map(|s| format!("{} ({})", s.what, s.reason))
            .collect();
        message.push_str(&format!(
            "; skipped {}: {}",
            skipped.len(),
            skipped.join("; ")
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
