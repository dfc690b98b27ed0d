//! Writes what the audit found, once a second: the reports of objects whose results
//! changed (paced, at most a second's writes a tick; a report stored as it would be written is
//! not written again), the `status.audit` of bindings whose audit changed, and the gauges;
//! removes `status.audit` from bindings not audited; and, once every resource of a plan has
//! completed a scan, deletes (paced like the writes) the reports of objects that no longer have
//! violations (left by an earlier leader or an earlier plan). Nothing is written before the
//! first plan, and nothing deleted before its scan completed.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use celgate_crds::{
    AuditStatus, AuditViolation, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use celgate_snapshot::audit::StoredAs;
use futures::StreamExt;
use futures::stream::{self, FuturesUnordered};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::{Interval, MissedTickBehavior};
use tracing::{debug, info, warn};

use super::findings::{Dirty, ReportChange, UnitKey};
use super::reports::{self, Reports};
use super::targets::{Targets, Unit};
use super::{Shared, key, lock};
use crate::controllers::stored_binding::BindingStore;
use crate::metrics;
use crate::retry::{self, Backoff};
use crate::serving::leader::Leadership;

/// How many violating objects a binding's status lists.
pub const LISTED_VIOLATIONS: usize = 10;
/// How often the writer looks for changes.
const PERIOD: Duration = Duration::from_secs(1);
/// How often the writer asks again whether the report CRDs are installed, while they are not.
const CRDS_RECHECK: Duration = Duration::from_secs(60);

/// A plan and when its scan started.
pub type Plan = (Arc<Targets>, SystemTime);

/// Writes until aborted; `plans` carries the current plan (none before the first).
pub async fn run(
    client: Client,
    findings: Shared,
    mut plans: watch::Receiver<Option<Plan>>,
    writes_per_second: u32,
    api: reports::ReportApi,
) {
    let reports = Reports::new(client.clone(), api);
    let writes_per_tick = writes_per_second.max(1) as usize;
    let mut served: Option<(bool, tokio::time::Instant)> = None;
    // The reports stored, by object uid: their fingerprints (none until listed).
    let mut stored: Option<HashMap<Arc<str>, u64>> = None;
    // The `status.audit` this replica wrote, by binding: its fingerprint.
    let mut written: HashMap<UnitKey, u64> = HashMap::new();
    let mut cleared: HashSet<String> = HashSet::new();
    let mut seen_plan: Option<SystemTime> = None;
    // The current plan's bindings by key, built once per plan.
    let mut units: HashMap<UnitKey, Arc<Unit>> = HashMap::new();
    let mut pruned_plan: Option<SystemTime> = None;
    let mut pace = tokio::time::interval(Duration::from_secs(1) / writes_per_second.max(1));
    pace.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut tick = tokio::time::interval(PERIOD);
    let mut backoff = Backoff::new(retry::WRITE);
    let mut retry_at: Option<tokio::time::Instant> = None;
    loop {
        tick.tick().await;
        let Some((plan, planned)) = plans.borrow_and_update().clone() else {
            continue;
        };
        if seen_plan != Some(planned) {
            // A new plan: every binding's status is written as this plan says.
            seen_plan = Some(planned);
            cleared.clear();
            units = plan.units.iter().map(|u| (key(u), u.clone())).collect();
            lock(&findings).retry_status();
        }

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
                        let why = "audit: the report CRDs are not installed; no reports are written (binding status and metrics still are) until they are: install them, or choose the installed API with --audit-report-api";
                        if served.is_none() {
                            warn!(kinds = %api.kinds(), "{why}");
                        } else {
                            info!(kinds = %api.kinds(), "{why}");
                        }
                    }
                    served = Some((ok, tokio::time::Instant::now()));
                }
                Err(e) => {
                    warn!(error = %e, kinds = %api.kinds(), "audit: cannot tell whether the reports are served")
                }
            }
        }
        let reports_served = served.is_some_and(|(ok, _)| ok);
        if reports_served && stored.is_none() {
            // What an earlier leader wrote: reports stored as they would be written are kept.
            match reports.list().await {
                Ok(list) => {
                    stored = Some(
                        (list.into_iter())
                            .map(|r| (Arc::from(r.uid), r.fingerprint))
                            .collect(),
                    );
                }
                Err(e) => warn!(error = %e, "audit: cannot list the reports; retrying"),
            }
        }
        if let Some(stored) = stored.as_mut().filter(|_| reports_served)
            && retry_at.is_none_or(|at| at <= tokio::time::Instant::now())
        {
            // One second's writes a tick, so the bindings' status and the gauges below are not
            // held back behind thousands of report writes.
            let failure = write_reports(
                &reports,
                &findings,
                &units,
                stored,
                &mut pace,
                writes_per_tick,
            )
            .await;
            // A failed write (RBAC, the API server) waits a growing delay, a write refused as
            // overloaded at least as long as kube-apiserver asked; the rest wait with it.
            retry_at = match failure {
                Some(Stop::Failed(e, uid)) => {
                    let delay = backoff.next_delay();
                    warn!(error = %e, object = %uid, retry_in_s = delay.as_secs_f64(), "audit: cannot write a report");
                    Some(tokio::time::Instant::now() + delay)
                }
                Some(Stop::Overloaded(after)) => {
                    let delay = after.max(backoff.next_delay());
                    info!(
                        retry_in_s = delay.as_secs_f64(),
                        "audit: kube-apiserver refused a report write as overloaded (429); waiting before the next"
                    );
                    Some(tokio::time::Instant::now() + delay)
                }
                None => {
                    backoff = Backoff::new(retry::WRITE);
                    None
                }
            };
            let complete = lock(&findings).completed_since(&plan.resources, |r| {
                plan.since.get(r).copied().unwrap_or(planned)
            });
            if complete && pruned_plan != Some(planned) {
                match reports.list().await {
                    Ok(list) => {
                        pruned_plan = Some(planned);
                        stored.clear();
                        let mut all = Vec::with_capacity(list.len());
                        for report in list {
                            let uid: Arc<str> = Arc::from(report.uid);
                            stored.insert(uid.clone(), report.fingerprint);
                            all.push((uid, Arc::from(report.namespace)));
                        }
                        let stale = lock(&findings).delete_stale(all);
                        if stale > 0 {
                            info!(
                                reports = stale,
                                "audit: deleting the reports of objects without violations"
                            );
                        }
                    }
                    Err(e) => {
                        warn!(error = %e, "audit: cannot list the reports to delete stale ones; retrying")
                    }
                }
            }
        } else if matches!(served, Some((false, _))) {
            // Nothing reads the changes while the reports are not served. (While a failed
            // write backs off, they wait.)
            drop(lock(&findings).take_reports(usize::MAX));
            stored = None;
        }

        // The bindings' status and gauges.
        for binding in &plan.stale_status {
            if cleared.contains(binding) {
                continue;
            }
            match clear_status(&client, binding).await {
                Ok(()) => {
                    cleared.insert(binding.clone());
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    cleared.insert(binding.clone());
                }
                Err(e) => {
                    warn!(error = %e, %binding, "audit: cannot remove a binding's status.audit; retrying");
                }
            }
        }
        let dirty = lock(&findings).take_status();
        if dirty.is_empty() {
            continue;
        }
        // Bindings leave only with a new plan, which marks every binding.
        let left: Vec<UnitKey> = (dirty == Dirty::All)
            .then_some(&written)
            .into_iter()
            .flat_map(HashMap::keys)
            .filter(|k| !units.contains_key(*k))
            .cloned()
            .collect();
        for unit in left {
            // Left the plan since this replica wrote its status (which the plan's stale
            // statuses may not show yet).
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
        // Only the bindings whose audit may have changed, and of those only the ones that have
        // something to say yet (`settled`).
        let audits: Vec<(UnitKey, AuditStatus, bool)> = {
            let findings = lock(&findings);
            let audit = |(k, u): (&UnitKey, &Arc<Unit>)| {
                let audit = findings.of_unit(k, &u.resources, LISTED_VIOLATIONS);
                let settled = settled(&audit, &u.resources);
                (k.clone(), status_of(&audit), settled)
            };
            match &dirty {
                Dirty::All => units.iter().map(audit).collect(),
                Dirty::Units(dirty) => (dirty.iter())
                    .filter_map(|k| units.get_key_value(k))
                    .map(audit)
                    .collect(),
            }
        };
        let changed: Vec<(UnitKey, AuditStatus)> = (audits.into_iter())
            .filter(|(unit, status, settled)| {
                metrics::audit_binding(&unit.0, &unit.1, status.scanned, status.violations);
                *settled && written.get(unit) != Some(&fingerprint(status))
            })
            .map(|(unit, status, _)| (unit, status))
            .collect();
        // Several at a time, as the reports.
        let client = &client;
        let results: Vec<_> = stream::iter(changed)
            .map(|(unit, status)| async move {
                let result = write_status(client, &unit.1, &status).await;
                (unit, status, result)
            })
            .buffer_unordered(WRITES_IN_FLIGHT)
            .collect()
            .await;
        let mut failed = false;
        for (unit, status, result) in results {
            match result {
                Ok(()) => {
                    written.insert(unit, fingerprint(&status));
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

/// How often, with the audit off, the leader looks for a `status.audit` to remove.
const OFF_PERIOD: Duration = Duration::from_secs(5);

/// With the audit off (`--audit=false`): while this replica leads, removes `status.audit` from
/// every binding in `bindings` that carries one (an earlier run's), looking every
/// [`OFF_PERIOD`]; one that cannot be removed is tried again the next time.
pub async fn clear_while_off(
    client: Client,
    bindings: BindingStore<ValidatingAdmissionPolicy>,
    mut leadership: Leadership,
) {
    let mut tick = tokio::time::interval(OFF_PERIOD);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        if leadership.wait_for(|leads| *leads).await.is_err() {
            return;
        }
        tick.tick().await;
        let audited: Vec<String> = (bindings.state().iter())
            .filter(|b| b.audited)
            .map(|b| b.name().to_string())
            .collect();
        for binding in audited {
            match clear_status(&client, &binding).await {
                Ok(()) => {
                    info!(%binding, "the audit is off: removed the status.audit an earlier run wrote")
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => {
                    warn!(error = %e, %binding, "the audit is off: cannot remove a binding's status.audit; retrying");
                }
            }
        }
    }
}

/// Report writes in flight at most. Each write waits for its round trip: one at a time, the
/// round trip and not the pace set the rate (31 writes/s under the default 50 measured).
pub const WRITES_IN_FLIGHT: usize = 8;

/// Why a tick's report writes stopped early.
#[derive(Debug)]
enum Stop {
    /// kube-apiserver refused a write as overloaded (429): it asked for this wait.
    Overloaded(Duration),
    /// A write failed: the error and the object.
    Failed(kube::Error, Arc<str>),
}

/// Writes up to `limit` changed reports (a report stored as it would be written, or a delete of
/// one not stored, costs no write), [`WRITES_IN_FLIGHT`] at a time, each started on a tick of
/// `pace`. After a failed write no other starts, the ones in flight finish, and those not
/// written wait for the next call; returns why they stopped.
async fn write_reports(
    reports: &Reports,
    findings: &Shared,
    units: &HashMap<UnitKey, Arc<Unit>>,
    stored: &mut HashMap<Arc<str>, u64>,
    pace: &mut Interval,
    limit: usize,
) -> Option<Stop> {
    let mut queue = Vec::new().into_iter();
    let mut started = 0;
    let mut next: Option<(ReportChange, Write)> = None;
    let mut in_flight = FuturesUnordered::new();
    let mut stop = None;
    loop {
        while next.is_none() && stop.is_none() && started < limit {
            let Some(change) = queue.next() else {
                queue = lock(findings).take_reports(limit - started).into_iter();
                if queue.len() == 0 {
                    break;
                }
                continue;
            };
            next = needed(reports, &change, units, stored).map(|write| (change, write));
        }
        let start = next.is_some() && stop.is_none() && in_flight.len() < WRITES_IN_FLIGHT;
        if !start && in_flight.is_empty() {
            break;
        }
        tokio::select! {
            _ = pace.tick(), if start => {
                if let Some((change, write)) = next.take() {
                    started += 1;
                    in_flight.push(perform(reports, change, write));
                }
            }
            Some((change, done)) = in_flight.next() => match done {
                Ok(Some(fingerprint)) => {
                    stored.insert(change.uid, fingerprint);
                }
                Ok(None) => {
                    stored.remove(&change.uid);
                }
                Err(e) => {
                    let uid = change.uid.clone();
                    lock(findings).retry_report(change);
                    let overloaded = match &e {
                        kube::Error::Api(status) => retry::overloaded(status),
                        _ => None,
                    };
                    stop.get_or_insert(match overloaded {
                        Some(after) => Stop::Overloaded(after),
                        None => Stop::Failed(e, uid),
                    });
                }
            },
        }
    }
    let mut findings = lock(findings);
    for change in next.map(|(change, _)| change).into_iter().chain(queue) {
        findings.retry_report(change);
    }
    stop
}

/// The write `change` needs, if any: none when the report is stored as it would be written, or
/// when a report to delete is not stored.
fn needed(
    reports: &Reports,
    change: &ReportChange,
    units: &HashMap<UnitKey, Arc<Unit>>,
    stored: &HashMap<Arc<str>, u64>,
) -> Option<Write> {
    match &change.findings {
        Some(found) => {
            let body = reports::body(reports.report_api(), found, |k| units.get(k).map(|u| &**u));
            let fingerprint = reports::fingerprint(&body);
            (stored.get(&change.uid) != Some(&fingerprint))
                .then_some(Write::Apply(body, fingerprint))
        }
        None => stored.contains_key(&change.uid).then_some(Write::Delete),
    }
}

/// Makes one write; returns the change with the fingerprint now stored (`None`: deleted).
async fn perform(
    reports: &Reports,
    change: ReportChange,
    write: Write,
) -> (ReportChange, Result<Option<u64>, kube::Error>) {
    let done = match write {
        Write::Apply(body, fingerprint) => reports
            .apply(&change.namespace, &body)
            .await
            .map(|()| Some(fingerprint)),
        Write::Delete => reports
            .delete(&change.namespace, &change.uid)
            .await
            .map(|()| None),
    };
    (change, done)
}

/// One report write.
enum Write {
    /// Apply this body, whose fingerprint is this.
    Apply(serde_json::Value, u64),
    /// Delete the report.
    Delete,
}

/// Whether a binding's audit is written: once each of its resources completed a scan in this
/// process, or one cannot be read (the error is news), or it has no resource to read. A count
/// taken mid-scan is not: each audited binding was written as the scan started (`scanned` 0,
/// no `lastScanTime`) and again as it completed, two writes per binding at start-up where one
/// says everything (100,000 writes more at 100,000 bindings).
fn settled(audit: &super::findings::UnitAudit, resources: &[StoredAs]) -> bool {
    audit.last_scan.is_some() || !audit.errors.is_empty() || resources.is_empty()
}

/// A binding's `status.audit`.
pub(super) fn status_of(audit: &super::findings::UnitAudit) -> AuditStatus {
    AuditStatus {
        scanned: audit.scanned,
        violations: i64::try_from(audit.violating).unwrap_or(i64::MAX),
        last_scan_time: audit.last_scan.map(time),
        violating_objects: audit
            .violations
            .iter()
            .take(LISTED_VIOLATIONS)
            .map(|(subject, _)| AuditViolation {
                api_version: subject.api_version.to_string(),
                kind: subject.kind.to_string(),
                namespace: subject.namespace.to_string(),
                name: subject.name.to_string(),
            })
            .collect(),
        errors: audit.errors.clone(),
    }
}

/// What a binding's `status.audit` says, hashed: what was written is remembered by it (held
/// whole, the statuses of 20,000 bindings took ~130 bytes each, `make bench-footprint`).
pub(super) fn fingerprint(status: &AuditStatus) -> u64 {
    let AuditStatus {
        scanned,
        violations,
        last_scan_time,
        violating_objects,
        errors,
    } = status;
    let mut hasher = DefaultHasher::new();
    (scanned, violations).hash(&mut hasher);
    (last_scan_time.as_ref())
        .map(|t| (t.0.as_second(), t.0.subsec_nanosecond()))
        .hash(&mut hasher);
    for AuditViolation {
        api_version,
        kind,
        namespace,
        name,
    } in violating_objects
    {
        (api_version, kind, namespace, name).hash(&mut hasher);
    }
    errors.hash(&mut hasher);
    hasher.finish()
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

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet, HashSet};
    use std::sync::Mutex;

    use celgate_engine::model::{ValidatingBindingSpec, ValidationAction};
    use celgate_snapshot::audit::{Verdict, Violation};
    use http::Method;
    use serde_json::Value;

    use super::super::findings::{Findings, ObjectFindings, Subject};
    use super::*;
    use crate::fixtures::{self, Reply};

    fn unit() -> Arc<Unit> {
        unit_of("b", Arc::new([fixtures::config_maps()]))
    }

    /// Binding `binding` (Audit) of policy `p`, on `resources`.
    fn unit_of(binding: &str, resources: Arc<[StoredAs]>) -> Arc<Unit> {
        Arc::new(Unit {
            policy: Arc::from("p"),
            binding: Arc::from(binding),
            annotations: Arc::default(),
            resources,
            compiled: crate::controllers::policy_set::compile(&fixtures::policy(
                "p", 1, "true", None,
            )),
            spec: Arc::new(ValidatingBindingSpec {
                name: binding.into(),
                policy_name: "p".into(),
                validation_actions: vec![ValidationAction::Audit],
                ..ValidatingBindingSpec::default()
            }),
        })
    }

    /// An API server's answers for the writer: each binding status written is recorded in
    /// `statuses` (the binding's name and its `status.audit`), lists are empty, other writes
    /// succeed.
    fn recording_statuses(
        statuses: &std::cell::RefCell<Vec<(String, Value)>>,
    ) -> impl FnMut(&fixtures::Call) -> Reply + '_ {
        move |call| {
            if call.method == Method::PATCH && call.path.ends_with("/status") {
                let binding = call.path.split('/').nth_back(1).unwrap_or_default();
                (statuses.borrow_mut())
                    .push((binding.to_string(), call.body["status"]["audit"].clone()));
                Reply::Json(200, fixtures::binding_json("b", "p"))
            } else if call.method == Method::GET {
                Reply::Json(200, fixtures::list(Vec::new()))
            } else {
                Reply::Json(200, json!({}))
            }
        }
    }

    fn found(name: &str) -> ObjectFindings {
        ObjectFindings::new(
            Subject {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "ns".into(),
                name: name.into(),
                uid: format!("uid-{name}").into(),
            },
            Arc::new(fixtures::config_maps()),
            BTreeMap::from([(
                (Arc::from("p"), Arc::from("b")),
                Violation {
                    verdict: Verdict::Fail,
                    message: format!("{name} has no owner"),
                },
            )]),
            BTreeSet::new(),
        )
    }

    /// `findings` hold `found`'s violations (none of its objects passing).
    fn hold(findings: &mut Findings, found: &ObjectFindings) {
        findings.set(
            found.subject.clone(),
            &found.resource,
            found.violations.iter().cloned().collect(),
            BTreeSet::new(),
        );
    }

    /// `found`'s report as an earlier leader stored it: another timestamp, and what the API
    /// server adds.
    fn stored_report(found: &ObjectFindings, unit: &Unit) -> Value {
        let mut report = reports::body(reports::ReportApi::Wgpolicyk8s, found, |_| Some(unit));
        report["results"][0]["timestamp"] = json!({"seconds": 1, "nanos": 0});
        report["metadata"]["uid"] = json!("report-uid");
        report["metadata"]["resourceVersion"] = json!("42");
        report["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
        report
    }

    /// Runs the writer for 10 s (paused time) with `findings` and `plan`, the API server
    /// holding `stored` PolicyReports; returns the calls it made (method and path).
    async fn write(
        findings: Findings,
        plan: Option<Plan>,
        stored: Vec<Value>,
    ) -> Vec<(Method, String)> {
        let (writer, mut server, _plans) = spawned(findings, plan);
        let mut calls = Vec::new();
        server
            .serve_until(
                |call| {
                    calls.push((call.method.clone(), call.path.clone()));
                    let reports = "/apis/wgpolicyk8s.io/v1alpha2/";
                    if call.method == Method::GET && call.path == format!("{reports}policyreports")
                    {
                        Reply::Json(200, fixtures::list(stored.clone()))
                    } else if call.method == Method::GET {
                        Reply::Json(200, fixtures::list(Vec::new()))
                    } else if call.path.ends_with("/status") {
                        Reply::Json(200, fixtures::binding_json("b", "p"))
                    } else {
                        Reply::Json(
                            200,
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                        )
                    }
                },
                tokio::time::sleep(Duration::from_secs(10)),
            )
            .await;
        writer.abort();
        calls
    }

    fn report_writes(calls: &[(Method, String)]) -> Vec<&(Method, String)> {
        calls
            .iter()
            .filter(|(m, p)| *m != Method::GET && p.contains("policyreports"))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_leader_rewrites_nothing_unchanged_and_deletes_only_after_its_scan() {
        let unit = unit();
        let plan_started = SystemTime::now();
        let mut findings = Findings::default();
        let kept = found("kept");
        hold(&mut findings, &kept);
        let mut pass = findings.start(&fixtures::config_maps());
        Findings::seen(&mut pass, &kept.subject.uid);
        findings.finish(&fixtures::config_maps(), pass, &[key(&unit)]);
        let stored = vec![
            stored_report(&kept, &unit),
            stored_report(&found("fixed"), &unit),
        ];
        let plan = Targets {
            units: vec![unit.clone()],
            resources: vec![fixtures::config_maps()],
            stale_status: Vec::new(),
            ..Targets::default()
        };
        let calls = write(
            findings,
            Some((Arc::new(plan), plan_started)),
            stored.clone(),
        )
        .await;
        assert_eq!(
            report_writes(&calls),
            [&(
                Method::DELETE,
                "/apis/wgpolicyk8s.io/v1alpha2/namespaces/ns/policyreports/celgate-uid-fixed"
                    .to_string()
            )],
            "the unchanged report is not written again; the fixed object's is deleted: {calls:?}"
        );
        assert!(
            calls.iter().any(|(m, p)| *m == Method::PATCH
                && p == "/apis/admission.celgate.io/v1/validatingadmissionpolicybindings/b/status"),
            "the binding's status is written: {calls:?}"
        );

        // Before a plan, or while its scan has not completed, nothing is deleted.
        let calls = write(Findings::default(), None, stored.clone()).await;
        assert!(report_writes(&calls).is_empty(), "{calls:?}");
        let plan = Targets {
            units: vec![unit],
            resources: vec![fixtures::config_maps()],
            stale_status: Vec::new(),
            ..Targets::default()
        };
        let calls = write(
            Findings::default(),
            Some((Arc::new(plan), SystemTime::now())),
            stored,
        )
        .await;
        assert!(report_writes(&calls).is_empty(), "{calls:?}");
    }

    /// Findings of `count` violating objects, and a plan of [`unit`] whose scan started now.
    fn violating(count: usize) -> (Findings, Plan) {
        let mut findings = Findings::default();
        for i in 0..count {
            let found = found(&format!("o{i}"));
            findings.set(
                found.subject,
                &found.resource,
                found.violations.into_iter().collect(),
                BTreeSet::new(),
            );
        }
        let plan = Targets {
            units: vec![unit()],
            resources: vec![fixtures::config_maps()],
            stale_status: Vec::new(),
            ..Targets::default()
        };
        (findings, (Arc::new(plan), SystemTime::now()))
    }

    /// Answers the writer's calls until it makes a report write, and returns that write
    /// unanswered; `None` if none comes within `within` (paused time).
    async fn next_report_write(
        server: &mut fixtures::ApiServer,
        within: Duration,
    ) -> Option<fixtures::Call> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let call = tokio::time::timeout_at(deadline, server.next())
                .await
                .ok()?;
            if call.method != Method::GET && call.path.contains("policyreports") {
                return Some(call);
            }
            if call.method == Method::GET {
                call.reply(200, fixtures::list(Vec::new()));
            } else {
                call.reply(200, fixtures::binding_json("b", "p"));
            }
        }
    }

    /// A running writer, its API server, and its plan's sender.
    type Spawned = (
        tokio::task::JoinHandle<()>,
        fixtures::ApiServer,
        watch::Sender<Option<Plan>>,
    );

    /// The writer, started on `findings` and `plan` at 50 writes a second, its API server, and
    /// the plan's sender (the writer stops once it is dropped).
    fn spawned(findings: Findings, plan: Option<Plan>) -> Spawned {
        spawned_over(Arc::new(Mutex::new(findings)), plan)
    }

    /// [`spawned`] over findings the test changes while the writer runs.
    fn spawned_over(findings: Shared, plan: Option<Plan>) -> Spawned {
        let (client, server) = fixtures::pair();
        let (plans, planned) = watch::channel(plan);
        let writer = tokio::spawn(run(
            client,
            findings,
            planned,
            50,
            reports::ReportApi::Wgpolicyk8s,
        ));
        (writer, server, plans)
    }

    /// [`spawned`] on `n` violating objects.
    fn writing_reports_of(
        n: usize,
    ) -> (
        tokio::task::JoinHandle<()>,
        fixtures::ApiServer,
        watch::Sender<Option<Plan>>,
    ) {
        let (findings, plan) = violating(n);
        spawned(findings, Some(plan))
    }

    #[tokio::test(start_paused = true)]
    async fn reports_are_written_several_at_a_time_and_no_more() {
        let (writer, mut server, _plans) = writing_reports_of(20);
        // None is answered: each arrives while the ones before it are still in flight.
        let mut held = Vec::new();
        for _ in 0..WRITES_IN_FLIGHT {
            let call = next_report_write(&mut server, Duration::from_secs(60))
                .await
                .expect("a report write waited for the one before it to be answered");
            assert_eq!(call.method, Method::PATCH, "{}", call.path);
            held.push(call);
        }
        assert!(
            next_report_write(&mut server, Duration::from_secs(30))
                .await
                .is_none(),
            "more than {WRITES_IN_FLIGHT} report writes in flight"
        );
        let mut written = HashSet::new();
        for call in held {
            written.insert(call.path.clone());
            call.reply(200, json!({}));
        }
        while written.len() < 20 {
            let call = next_report_write(&mut server, Duration::from_secs(60))
                .await
                .expect("the other reports are written once the first are answered");
            written.insert(call.path.clone());
            call.reply(200, json!({}));
        }
        writer.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_report_write_refused_as_overloaded_waits_as_long_as_kube_apiserver_asks() {
        let (writer, mut server, _plans) = writing_reports_of(20);
        let first = next_report_write(&mut server, Duration::from_secs(60))
            .await
            .expect("a report write");
        let mut overloaded = fixtures::status(429, "TooManyRequests");
        overloaded["details"] = json!({"retryAfterSeconds": 7});
        let refused_at = tokio::time::Instant::now();
        first.reply(429, overloaded);
        // Those already in flight finish; none starts until the wait is over.
        let mut before = 0;
        let after = loop {
            let call = next_report_write(&mut server, Duration::from_secs(60))
                .await
                .expect("report writes resume after the wait");
            if refused_at.elapsed() >= Duration::from_secs(7) {
                break call;
            }
            before += 1;
            call.reply(200, json!({}));
        };
        assert!(
            before < WRITES_IN_FLIGHT,
            "{before} report writes during the wait kube-apiserver asked for"
        );
        assert_eq!(after.method, Method::PATCH);
        writer.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn every_binding_of_a_new_plan_gets_its_status_though_nothing_else_changed() {
        let (client, mut server) = fixtures::pair();
        let empty = Targets::default();
        let (plans, planned) = watch::channel(Some((Arc::new(empty), SystemTime::now())));
        let mut findings = Findings::default();
        let pass = findings.start(&fixtures::config_maps());
        findings.finish(&fixtures::config_maps(), pass, &[]);
        let writer = tokio::spawn(run(
            client,
            Arc::new(Mutex::new(findings)),
            planned,
            50,
            reports::ReportApi::Wgpolicyk8s,
        ));
        let mut calls = Vec::new();
        let mut answer = |call: &fixtures::Call| {
            calls.push((call.method.clone(), call.path.clone()));
            if call.path.ends_with("/status") {
                Reply::Json(200, fixtures::binding_json("b", "p"))
            } else {
                Reply::Json(200, fixtures::list(Vec::new()))
            }
        };
        // The first plan's status (none) is written: nothing is dirty any more.
        server
            .serve_until(&mut answer, tokio::time::sleep(Duration::from_secs(3)))
            .await;
        let plan = Targets {
            units: vec![unit()],
            resources: vec![fixtures::config_maps()],
            stale_status: Vec::new(),
            ..Targets::default()
        };
        plans.send_replace(Some((Arc::new(plan), SystemTime::now())));
        server
            .serve_until(&mut answer, tokio::time::sleep(Duration::from_secs(3)))
            .await;
        writer.abort();
        assert!(
            calls.iter().any(|(m, p)| *m == Method::PATCH
                && p == "/apis/admission.celgate.io/v1/validatingadmissionpolicybindings/b/status"),
            "the new plan's binding gets its status: {calls:?}"
        );
    }

    /// A binding's status is written once its resources' scans complete (or one fails), not
    /// with the counts of a scan under way: one write per binding at start-up, not two.
    #[tokio::test(start_paused = true)]
    async fn a_bindings_status_waits_for_its_first_completed_scan_or_an_error() {
        let secrets = StoredAs {
            resource: "secrets".into(),
            kind: "Secret".into(),
            ..fixtures::config_maps()
        };
        let failing = unit_of("b2", Arc::new([secrets.clone()]));
        let plan = Targets {
            units: vec![unit(), failing.clone()],
            resources: vec![fixtures::config_maps(), secrets.clone()],
            stale_status: Vec::new(),
            ..Targets::default()
        };
        let mut findings = Findings::default();
        let mut pass = findings.start(&fixtures::config_maps());
        let kept = found("kept");
        hold(&mut findings, &kept);
        let findings = Arc::new(Mutex::new(findings));
        let (writer, mut server, _plans) =
            spawned_over(findings.clone(), Some((Arc::new(plan), SystemTime::now())));
        let statuses = std::cell::RefCell::new(Vec::new());
        let mut answer = recording_statuses(&statuses);
        // ConfigMaps are being scanned (one violation found so far): nothing is written.
        server
            .serve_until(&mut answer, tokio::time::sleep(Duration::from_secs(3)))
            .await;
        assert_eq!(*statuses.borrow(), [], "written mid-scan");
        // Secrets cannot be read: b2 says so at once; b waits for the ConfigMaps' scan.
        lock(&findings).failed(&secrets, &[key(&failing)], "forbidden");
        server
            .serve_until(&mut answer, tokio::time::sleep(Duration::from_secs(3)))
            .await;
        {
            let statuses = statuses.borrow();
            assert_eq!(statuses.len(), 1, "{statuses:?}");
            assert_eq!(statuses[0].0, "b2");
            assert_eq!(statuses[0].1["errors"].as_array().map(Vec::len), Some(1));
        }
        Findings::seen(&mut pass, &kept.subject.uid);
        lock(&findings).finish(&fixtures::config_maps(), pass, &[key(&unit())]);
        server
            .serve_until(&mut answer, tokio::time::sleep(Duration::from_secs(3)))
            .await;
        writer.abort();
        let statuses = statuses.borrow();
        assert_eq!(statuses.len(), 2, "{statuses:?}");
        let (binding, audit) = &statuses[1];
        assert_eq!(binding, "b");
        assert_eq!(audit["violations"], json!(1), "{audit}");
        assert!(audit["lastScanTime"].is_string(), "{audit}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_violation_found_later_rewrites_its_bindings_status_and_no_others() {
        let other = unit_of("b2", unit().resources.clone());
        let plan = Targets {
            units: vec![unit(), other.clone()],
            resources: vec![fixtures::config_maps()],
            stale_status: Vec::new(),
            ..Targets::default()
        };
        let mut findings = Findings::default();
        let pass = findings.start(&fixtures::config_maps());
        findings.finish(&fixtures::config_maps(), pass, &[key(&unit()), key(&other)]);
        let findings = Arc::new(Mutex::new(findings));
        let (writer, mut server, _plans) =
            spawned_over(findings.clone(), Some((Arc::new(plan), SystemTime::now())));
        let statuses = std::cell::RefCell::new(Vec::new());
        let mut answer = recording_statuses(&statuses);
        server
            .serve_until(&mut answer, tokio::time::sleep(Duration::from_secs(3)))
            .await;
        let kept = found("kept");
        hold(&mut lock(&findings), &kept);
        server
            .serve_until(&mut answer, tokio::time::sleep(Duration::from_secs(3)))
            .await;
        writer.abort();
        let statuses = statuses.borrow();
        let mut written: Vec<(&str, Value)> = (statuses.iter())
            .map(|(b, audit)| (b.as_str(), audit["violations"].clone()))
            .collect();
        assert_eq!(written.len(), 3, "{statuses:?}");
        written[..2].sort_by(|a, b| a.0.cmp(b.0));
        assert_eq!(
            written,
            [("b", json!(0)), ("b2", json!(0)), ("b", json!(1))],
            "{statuses:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_binding_not_audited_loses_the_status_audit_an_earlier_leader_wrote() {
        let plan = Targets {
            units: Vec::new(),
            resources: Vec::new(),
            stale_status: vec!["opted-out".to_string()],
            ..Targets::default()
        };
        let calls = write(
            Findings::default(),
            Some((Arc::new(plan), SystemTime::now())),
            Vec::new(),
        )
        .await;
        let clears: Vec<_> = calls
            .iter()
            .filter(|(m, p)| *m == Method::PATCH && p.ends_with("/opted-out/status"))
            .collect();
        assert_eq!(clears.len(), 1, "cleared once: {calls:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn with_the_audit_off_the_leader_removes_an_earlier_runs_status_audit() {
        let binding = |name: &str, audited: bool| {
            let mut b = fixtures::binding_json(name, "p");
            if audited {
                b["status"] = json!({"audit": {"scanned": 3, "violations": 1}});
            }
            serde_json::from_value::<ValidatingAdmissionPolicyBinding>(b).unwrap()
        };
        let (bindings, mut stored) =
            crate::controllers::stored_binding::store::<ValidatingAdmissionPolicy>();
        for b in [binding("audited", true), binding("never", false)] {
            stored.apply_watcher_event(&kube::runtime::watcher::Event::Apply(b));
        }
        let (client, mut server) = fixtures::pair();
        let (leading, leadership) = watch::channel(false);
        let clearing = tokio::spawn(clear_while_off(client, bindings, leadership));
        let calls = std::cell::RefCell::new(Vec::new());
        let mut answer = |call: &fixtures::Call| {
            calls
                .borrow_mut()
                .push((call.method.clone(), call.path.clone(), call.body.clone()));
            Reply::Json(200, fixtures::binding_json("audited", "p"))
        };
        // Not leading: nothing is written.
        server
            .serve_until(&mut answer, tokio::time::sleep(Duration::from_secs(20)))
            .await;
        assert!(calls.borrow().is_empty(), "{calls:?}");
        leading.send_replace(true);
        server
            .serve_until(&mut answer, tokio::time::sleep(Duration::from_secs(1)))
            .await;
        clearing.abort();
        let calls = calls.into_inner();
        assert_eq!(calls.len(), 1, "{calls:?}");
        let (method, path, body) = &calls[0];
        assert_eq!(*method, Method::PATCH);
        assert_eq!(
            path,
            "/apis/admission.celgate.io/v1/validatingadmissionpolicybindings/audited/status"
        );
        assert_eq!(
            body["status"],
            json!({}),
            "an apply without the audit's fields"
        );
    }
}
