//! Writes what the audit found, once a second: the PolicyReports of objects whose violations
//! changed (paced, at most a second's writes a tick), the `status.audit` of bindings whose
//! audit changed, and the gauges; and, once every resource of a plan has been scanned, deletes
//! the reports of objects that no longer have violations (left by an earlier leader or an
//! earlier plan).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use celgate_crds::{AuditStatus, AuditViolation, ValidatingAdmissionPolicyBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tracing::{debug, info, warn};

use super::findings::{ReportChange, UnitKey};
use super::reports::{self, Reports};
use super::targets::{Targets, Unit};
use super::{Shared, key, lock};
use crate::metrics;
use crate::retry::{self, Backoff};

/// How many violating objects a binding's status lists.
pub const LISTED_VIOLATIONS: usize = 10;
/// How often the writer looks for changes.
const PERIOD: Duration = Duration::from_secs(1);
/// How often the writer asks again whether the report CRDs are installed, while they are not.
const CRDS_RECHECK: Duration = Duration::from_secs(60);

/// Writes until aborted; `plans` carries the current plan and when it started.
pub async fn run(
    client: Client,
    findings: Shared,
    mut plans: watch::Receiver<(Arc<Targets>, SystemTime)>,
    writes_per_second: u32,
) {
    let reports = Reports::new(client.clone());
    let mut served: Option<(bool, tokio::time::Instant)> = None;
    let mut written: HashMap<UnitKey, AuditStatus> = HashMap::new();
    let mut pruned_plan: Option<SystemTime> = None;
    let mut pace = tokio::time::interval(Duration::from_secs(1) / writes_per_second.max(1));
    pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut tick = tokio::time::interval(PERIOD);
    let mut backoff = Backoff::new(retry::WRITE);
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        tick.tick().await;
        let (plan, planned) = plans.borrow_and_update().clone();
        let units: HashMap<UnitKey, &Arc<Unit>> = plan.units.iter().map(|u| (key(u), u)).collect();

        // The reports, if their CRDs are installed.
        let due = served.is_none_or(|(ok, at)| !ok && at.elapsed() >= CRDS_RECHECK);
        if due {
            match reports.served().await {
                Ok(ok) => {
                    if ok && served.is_some() {
                        // Installed since the last check: every report is written now.
                        lock(&findings).rewrite_all();
                    }
                    if !ok {
                        info!(
                            "audit: the wgpolicyk8s.io PolicyReport CRDs are not installed; no reports are written (binding status and metrics still are)"
                        );
                    }
                    served = Some((ok, tokio::time::Instant::now()));
                }
                Err(e) => warn!(error = %e, "audit: cannot tell whether PolicyReports are served"),
            }
        }
        let reports_served = served.is_some_and(|(ok, _)| ok);
        if reports_served && retry_at.is_none_or(|at| at <= tokio::time::Instant::now()) {
            // One second's writes a tick, so the bindings' status and the gauges below are not
            // held back behind thousands of report writes.
            let changes = lock(&findings).take_reports(writes_per_second.max(1) as usize);
            let mut failure = None;
            for change in changes {
                if failure.is_some() {
                    lock(&findings).retry_report(change);
                    continue;
                }
                pace.tick().await;
                if let Err(e) = write_report(&reports, &change, &units).await {
                    failure = Some((e, change.uid.clone()));
                    lock(&findings).retry_report(change);
                }
            }
            // A failed write (RBAC, the API server) waits a growing delay; the rest wait with it.
            retry_at = match failure {
                Some((e, uid)) => {
                    let delay = backoff.next_delay();
                    warn!(error = %e, object = %uid, retry_in_s = delay.as_secs_f64(), "audit: cannot write a PolicyReport");
                    Some(tokio::time::Instant::now() + delay)
                }
                None => {
                    backoff = Backoff::new(retry::WRITE);
                    None
                }
            };
            let complete = lock(&findings).completed_since(&plan.resources, planned);
            if complete && pruned_plan != Some(planned) {
                let keep = lock(&findings).reported();
                match reports.prune(&keep).await {
                    Ok(n) => {
                        pruned_plan = Some(planned);
                        if n > 0 {
                            info!(
                                reports = n,
                                "audit: deleted reports of objects without violations"
                            );
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "audit: cannot delete stale PolicyReports; retrying")
                    }
                }
            }
        } else if matches!(served, Some((false, _))) {
            // Nothing reads the changes while the reports are not served. (While a failed
            // write backs off, they wait.)
            drop(lock(&findings).take_reports(usize::MAX));
        }

        // The bindings' status and gauges.
        if !lock(&findings).take_status() {
            continue;
        }
        let left: Vec<UnitKey> = written
            .keys()
            .filter(|k| !units.contains_key(*k))
            .cloned()
            .collect();
        for unit in left {
            metrics::audit_binding_gone(&unit.0, &unit.1);
            match clear_status(&client, &unit.1).await {
                Ok(()) => {
                    written.remove(&unit);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    written.remove(&unit);
                }
                Err(e) => {
                    warn!(error = %e, binding = %unit.1, "audit: cannot remove a binding's status.audit; retrying");
                    lock(&findings).retry_status();
                }
            }
        }
        let audits: Vec<(UnitKey, AuditStatus)> = {
            let findings = lock(&findings);
            plan.units
                .iter()
                .map(|u| (key(u), status_of(&findings.of_unit(&key(u), &u.resources))))
                .collect()
        };
        let mut failed = false;
        for (unit, status) in audits {
            metrics::audit_binding(&unit.0, &unit.1, status.scanned, status.violations);
            if written.get(&unit) == Some(&status) {
                continue;
            }
            match write_status(&client, &unit.1, &status).await {
                Ok(()) => {
                    written.insert(unit, status);
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    debug!(binding = %unit.1, "audit: binding deleted before its status was written");
                }
                Err(e) => {
                    warn!(error = %e, binding = %unit.1, "audit: cannot write a binding's status.audit; retrying");
                    failed = true;
                }
            }
        }
        if failed {
            lock(&findings).retry_status();
        }
    }
}

/// Applies or deletes one object's report.
async fn write_report(
    reports: &Reports,
    change: &ReportChange,
    units: &HashMap<UnitKey, &Arc<Unit>>,
) -> Result<(), kube::Error> {
    match &change.findings {
        Some(findings) => {
            let body = reports::body(findings, |k| units.get(k).map(|u| &***u));
            reports.apply(&change.namespace, &body).await
        }
        None => reports.delete(&change.namespace, &change.uid).await,
    }
}

/// A binding's `status.audit`.
fn status_of(audit: &super::findings::UnitAudit) -> AuditStatus {
    AuditStatus {
        scanned: audit.scanned,
        violations: i64::try_from(audit.violations.len()).unwrap_or(i64::MAX),
        last_scan_time: audit.last_scan.map(time),
        violating_objects: audit
            .violations
            .iter()
            .take(LISTED_VIOLATIONS)
            .map(|(subject, violation)| AuditViolation {
                api_version: subject.api_version.clone(),
                kind: subject.kind.clone(),
                namespace: subject.namespace.clone(),
                name: subject.name.clone(),
                message: violation.message.clone(),
            })
            .collect(),
        errors: audit.errors.clone(),
    }
}

/// A system time as the API's timestamp, to whole seconds (as the API server keeps them).
fn time(t: SystemTime) -> Time {
    let seconds = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    Time(Timestamp::from_second(seconds).unwrap_or_default())
}

/// Applies a binding's `status.audit` (field manager `celgate-audit`: the status writer's
/// fields are left as they are).
async fn write_status(
    client: &Client,
    binding: &str,
    audit: &AuditStatus,
) -> Result<(), kube::Error> {
    apply_status(client, binding, json!({"audit": audit})).await
}

/// Removes a binding's `status.audit` (it left the audit): an apply without the fields the
/// audit's field manager owned.
async fn clear_status(client: &Client, binding: &str) -> Result<(), kube::Error> {
    apply_status(client, binding, json!({})).await
}

async fn apply_status(
    client: &Client,
    binding: &str,
    status: serde_json::Value,
) -> Result<(), kube::Error> {
    let body = json!({
        "apiVersion": ValidatingAdmissionPolicyBinding::api_version(&()),
        "kind": ValidatingAdmissionPolicyBinding::kind(&()),
        "metadata": {"name": binding},
        "status": status,
    });
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .patch_status(
            binding,
            &PatchParams::apply(reports::FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map(|_| ())
}
