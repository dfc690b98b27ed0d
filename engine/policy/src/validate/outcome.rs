//! What validating one request comes to: the denial, warnings, audit annotations and metric
//! checks, and how the outcomes of several policies are merged.

use std::sync::Arc;
use std::time::Duration;

use crate::autogen;
use crate::check::ErrorType;
use crate::compile::ValidatingPolicy;

/// Audit annotation key of validation failures routed to the Audit action.
pub const VALIDATION_FAILURE_KEY: &str = "validation.policy.admission.k8s.io/validation_failure";

/// The rejection of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The message (`ValidatingAdmissionPolicy '<p>' with binding '<b>' denied request: …`).
    pub message: String,
    /// The status reason (`Invalid`, `Forbidden`, …).
    pub reason: String,
    /// The HTTP code for the reason.
    pub code: u16,
}

/// One metric observation: a (policy, binding) check and the enforcement it led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Policy name.
    pub policy: Arc<str>,
    /// Binding name.
    pub binding: Arc<str>,
    /// Error classification.
    pub error_type: ErrorType,
    /// `allow`, `deny`, `warn` or `audit`.
    pub enforcement_action: &'static str,
    /// The failed validation's message (`deny`, `warn` and `audit` only).
    pub message: Option<Arc<str>>,
    /// Time spent evaluating the binding.
    pub elapsed: Duration,
}

/// The result of validating one request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Set when the request is rejected: the first denial, as kube-apiserver reports it.
    pub denial: Option<Denial>,
    /// HTTP warnings for the client.
    pub warnings: Vec<String>,
    /// Audit annotations with upstream's keys (`<policy>/<key>`, `validation.policy…`).
    pub audit_annotations: Vec<(String, String)>,
    /// Metric observations.
    pub checks: Vec<Check>,
    /// The bindings a PolicyException excepted the request from, in evaluation order.
    pub excepted: Vec<Excepted>,
}

/// A binding a PolicyException excepted a request from: it was not evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excepted {
    /// Policy name.
    pub policy: Arc<str>,
    /// Binding name.
    pub binding: Arc<str>,
    /// The exception, as `namespace/name`.
    pub exception: Arc<str>,
}

impl Outcome {
    /// True when the request is admitted.
    pub fn allowed(&self) -> bool {
        self.denial.is_none()
    }

    /// Whether a failed validation is recorded under [`VALIDATION_FAILURE_KEY`].
    pub fn records_validation_failure(&self) -> bool {
        self.audit_annotations
            .iter()
            .any(|(k, _)| k == VALIDATION_FAILURE_KEY)
    }

    /// Adds the outcome of a later policy: its denial counts only if none came before, and
    /// only the first validation failure is recorded under [`VALIDATION_FAILURE_KEY`].
    pub fn merge(&mut self, later: Outcome) {
        if self.denial.is_none() {
            self.denial = later.denial;
        }
        self.warnings.extend(later.warnings);
        let recorded = self.records_validation_failure();
        self.audit_annotations.extend(
            later
                .audit_annotations
                .into_iter()
                .filter(|(k, _)| !(recorded && k == VALIDATION_FAILURE_KEY)),
        );
        self.checks.extend(later.checks);
        if !later.excepted.is_empty() {
            self.excepted.extend(later.excepted);
        }
    }
}

/// A denial message naming the policy and, when one decided, the binding.
/// A variant for a Pod controller is named with its controller ([`autogen::variant_label`]).
pub(super) fn policy_message(
    policy: &ValidatingPolicy,
    binding: Option<&str>,
    message: &str,
) -> String {
    let name = &policy.name;
    let variant = autogen::variant_label(policy.spec.pod_controller);
    match binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{name}'{variant} with binding '{b}' denied request: {message}"
        ),
        None => format!("ValidatingAdmissionPolicy '{name}'{variant} denied request: {message}"),
    }
}

/// The HTTP code kube-apiserver answers a denial's status reason with.
fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// Sets the outcome's denial unless an earlier one is set: the first denial is the one reported.
pub(super) fn deny_first(out: &mut Outcome, message: String, reason: Option<&str>) {
    if out.denial.is_none() {
        let reason = reason.unwrap_or("Invalid").to_string();
        out.denial = Some(Denial {
            code: reason_code(&reason),
            message,
            reason,
        });
    }
}
