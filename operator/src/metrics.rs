//! The process's metrics: the one registry (prefix `celgate`) the metrics port serves, the
//! webhook's families registered into it, and the operator's own families, which the
//! controllers update through the functions below (one static set of families, so a hook is
//! one line wherever the event happens; nothing here is on the admission request path).
//!
//! Propagation (`celgate_policy_propagation_seconds`) is timed from the moment a watch event
//! of a policy or binding reached this process (the objects' own timestamps have whole
//! seconds only) to the publish of the first snapshot that carries it.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use celgate_engine::PolicySet;
use celgate_engine::model::FailurePolicy;
use kube::Resource;
use kube::runtime::watcher;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use x509_parser::pem::parse_x509_pem;

/// The validating policy controller (`policies`).
pub const VALIDATING_POLICIES: &str = "validating_policies";
/// The mutating policy loop (`mutating`).
pub const MUTATING_POLICIES: &str = "mutating_policies";
/// The status writer (leader only).
pub const STATUS: &str = "status";
/// The webhook configurations' registration.
pub const REGISTRATION: &str = "registration";
const CONTROLLERS: [&str; 4] = [VALIDATING_POLICIES, MUTATING_POLICIES, STATUS, REGISTRATION];

/// Watched resources, the `resource` label of the watch metrics.
pub mod resource {
    /// ValidatingAdmissionPolicies.
    pub const VALIDATING_POLICIES: &str = "validatingadmissionpolicies";
    /// ValidatingAdmissionPolicyBindings.
    pub const VALIDATING_BINDINGS: &str = "validatingadmissionpolicybindings";
    /// MutatingAdmissionPolicies.
    pub const MUTATING_POLICIES: &str = "mutatingadmissionpolicies";
    /// MutatingAdmissionPolicyBindings.
    pub const MUTATING_BINDINGS: &str = "mutatingadmissionpolicybindings";
    /// Namespaces.
    pub const NAMESPACES: &str = "namespaces";
    /// CustomResourceDefinitions (discovery of served kinds).
    pub const CRDS: &str = "customresourcedefinitions";
    /// PolicyExceptions.
    pub const EXCEPTIONS: &str = "policyexceptions";
    /// Every resource above.
    pub const ALL: [&str; 7] = [
        VALIDATING_POLICIES,
        VALIDATING_BINDINGS,
        MUTATING_POLICIES,
        MUTATING_BINDINGS,
        NAMESPACES,
        CRDS,
        EXCEPTIONS,
    ];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResourceLabels {
    resource: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BoundLabels {
    kind: &'static str,
    failure_policy: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertificateLabels {
    certificate: &'static str,
}

/// The names are the audit's own (shared, not copied: two families hold one label set for
/// each of 100,000 bindings).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AuditLabels {
    policy: Arc<str>,
    binding: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// Changes not yet published, by resource and object name: when each was first observed (on
/// the monotonic clock, and as wall time for the gauge).
type Pending = HashMap<(&'static str, String), (Instant, SystemTime)>;

/// The operator's metric families.
struct Families {
    reconciles: Family<ControllerLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    watch_restarts: Family<ResourceLabels, Counter>,
    snapshot_generation: Gauge,
    snapshot_published: FloatGauge,
    propagation: Histogram,
    changes_pending: Gauge,
    oldest_pending: FloatGauge,
    compile_errors: Family<KindLabels, Gauge>,
    bound: Family<BoundLabels, Gauge>,
    certificate_expiry: Family<CertificateLabels, FloatGauge>,
    leader: Gauge,
    build_info: Family<BuildLabels, Gauge>,
    audit_violations: Family<AuditLabels, Gauge>,
    audit_scanned: Family<AuditLabels, Gauge>,
    audit_scans: Counter,
    /// Policy and binding changes observed and not yet published: when each was first seen.
    pending: Mutex<Pending>,
}

static FAMILIES: LazyLock<Families> = LazyLock::new(|| Families {
    reconciles: Family::default(),
    reconcile_errors: Family::default(),
    watch_restarts: Family::default(),
    snapshot_generation: Gauge::default(),
    snapshot_published: FloatGauge::default(),
    propagation: Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    ]),
    changes_pending: Gauge::default(),
    oldest_pending: FloatGauge::default(),
    compile_errors: Family::default(),
    bound: Family::default(),
    certificate_expiry: Family::default(),
    leader: Gauge::default(),
    build_info: Family::default(),
    audit_violations: Family::default(),
    audit_scanned: Family::default(),
    audit_scans: Counter::default(),
    pending: Mutex::new(HashMap::new()),
});

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unix_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn failure_policy(f: FailurePolicy) -> &'static str {
    match f {
        FailurePolicy::Fail => "Fail",
        FailurePolicy::Ignore => "Ignore",
    }
}

/// The process's registry with every family in it: the operator's and the webhook's (returned,
/// for the webhook server), whose decision log writes at most `decision_log_rate` lines a second.
pub fn registry(decision_log_rate: u32) -> (Registry, celgate_webhook::metrics::Metrics) {
    let mut registry = Registry::with_prefix("celgate");
    register(&mut registry);
    let webhook = celgate_webhook::metrics::Metrics::register(&mut registry, decision_log_rate);
    (registry, webhook)
}

/// Registers the operator's families into `registry`, each series of a fixed label set
/// created at zero so a rate or sum over it exists before the first event.
fn register(registry: &mut Registry) {
    let f = &*FAMILIES;
    registry.register(
        "reconcile",
        "Reconciles run, by controller",
        f.reconciles.clone(),
    );
    registry.register(
        "reconcile_errors",
        "Reconciles that failed (and are retried with backoff), by controller",
        f.reconcile_errors.clone(),
    );
    for controller in CONTROLLERS {
        drop(f.reconciles.get_or_create(&ControllerLabels { controller }));
        drop(
            f.reconcile_errors
                .get_or_create(&ControllerLabels { controller }),
        );
    }
    registry.register(
        "watch_restarts",
        "Times a watch failed (and was retried with backoff) or listed its resource again after its first list, by resource",
        f.watch_restarts.clone(),
    );
    for resource in resource::ALL {
        drop(f.watch_restarts.get_or_create(&ResourceLabels { resource }));
    }
    registry.register(
        "snapshot_generation",
        "Revision of the snapshot the webhook decides with, as of the last policy set published",
        f.snapshot_generation.clone(),
    );
    registry.register(
        "snapshot_published_timestamp_seconds",
        "Unix time the last policy set was published to the webhook",
        f.snapshot_published.clone(),
    );
    registry.register(
        "policy_propagation_seconds",
        "Seconds from a policy or binding change reaching celgate (its watch event) to the publish of the first snapshot enforcing it",
        f.propagation.clone(),
    );
    registry.register(
        "policy_changes_pending",
        "Policy and binding changes observed and not yet published to the webhook",
        f.changes_pending.clone(),
    );
    registry.register(
        "policy_change_oldest_pending_timestamp_seconds",
        "Unix time the oldest policy or binding change not yet published was observed; 0 when none is pending",
        f.oldest_pending.clone(),
    );
    registry.register(
        "policy_compile_errors",
        "Policies whose expressions do not all compile (their failurePolicy decides matching requests), by kind",
        f.compile_errors.clone(),
    );
    registry.register(
        "bound_policies",
        "Policies with at least one binding in the published set, by kind and failurePolicy",
        f.bound.clone(),
    );
    for kind in ["validating", "mutating"] {
        drop(f.compile_errors.get_or_create(&KindLabels { kind }));
        for failure_policy in ["Fail", "Ignore"] {
            drop(f.bound.get_or_create(&BoundLabels {
                kind,
                failure_policy,
            }));
        }
    }
    registry.register(
        "certificate_expiry_timestamp_seconds",
        "Unix time the webhook's CA or serving certificate expires (notAfter)",
        f.certificate_expiry.clone(),
    );
    registry.register(
        "leader",
        "1 while this replica holds the leader Lease (writes status and events), else 0",
        f.leader.clone(),
    );
    registry.register(
        "build_info",
        "Always 1, labeled by celgate's version",
        f.build_info.clone(),
    );
    f.build_info
        .get_or_create(&BuildLabels {
            version: env!("CARGO_PKG_VERSION"),
        })
        .set(1);
    registry.register(
        "audit_violations",
        "Stored objects whose create the binding would deny, warn or audit now (background audit, leader only), by policy and binding",
        f.audit_violations.clone(),
    );
    registry.register(
        "audit_scanned_objects",
        "Stored objects the binding matched at the last completed audit scan of its resources, by policy and binding",
        f.audit_scanned.clone(),
    );
    registry.register(
        "audit_resource_scans",
        "Completed audit scans of one resource (a full list, paged)",
        f.audit_scans.clone(),
    );
}

/// Sets a binding's audit gauges.
pub fn audit_binding(policy: &Arc<str>, binding: &Arc<str>, scanned: i64, violations: i64) {
    let labels = AuditLabels {
        policy: policy.clone(),
        binding: binding.clone(),
    };
    FAMILIES.audit_scanned.get_or_create(&labels).set(scanned);
    FAMILIES
        .audit_violations
        .get_or_create(&labels)
        .set(violations);
}

/// Removes a binding's audit gauges (it left the audit, or this replica stopped leading).
pub fn audit_binding_gone(policy: &Arc<str>, binding: &Arc<str>) {
    let labels = AuditLabels {
        policy: policy.clone(),
        binding: binding.clone(),
    };
    FAMILIES.audit_scanned.remove(&labels);
    FAMILIES.audit_violations.remove(&labels);
}

/// Removes every binding's audit gauges (this replica stopped leading: the new leader's count).
pub fn audit_cleared() {
    FAMILIES.audit_scanned.clear();
    FAMILIES.audit_violations.clear();
}

/// Counts one completed audit scan of a resource.
pub fn audit_resource_scanned() {
    FAMILIES.audit_scans.inc();
}

/// Counts one reconcile of `controller`.
pub fn reconciled(controller: &'static str) {
    FAMILIES
        .reconciles
        .get_or_create(&ControllerLabels { controller })
        .inc();
}

/// Counts one failed reconcile of `controller`.
pub fn reconcile_failed(controller: &'static str) {
    FAMILIES
        .reconcile_errors
        .get_or_create(&ControllerLabels { controller })
        .inc();
}

/// An observer of one watch's events (for `.inspect`): counts its failures and its lists
/// after the first as restarts of `resource`; when `propagates`, also records each object
/// applied or deleted as a change pending until a policy set carrying it is published.
pub fn watch<K: Resource>(
    resource: &'static str,
    propagates: bool,
) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) {
    let mut listed = false;
    move |event| match event {
        Err(_) => restarted(resource),
        Ok(watcher::Event::Init) => {
            if listed {
                restarted(resource);
            }
            listed = true;
        }
        Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) if propagates => {
            changed(resource, object.meta().name.as_deref().unwrap_or_default());
        }
        Ok(_) => {}
    }
}

fn restarted(resource: &'static str) {
    FAMILIES
        .watch_restarts
        .get_or_create(&ResourceLabels { resource })
        .inc();
}

/// Records a change of the object `name` of `resource`, pending until published.
fn changed(resource: &'static str, name: &str) {
    let f = &*FAMILIES;
    let mut pending = lock(&f.pending);
    pending
        .entry((resource, name.to_string()))
        .or_insert_with(|| (Instant::now(), SystemTime::now()));
    pending_gauges(&pending);
}

fn pending_gauges(pending: &Pending) {
    let f = &*FAMILIES;
    f.changes_pending
        .set(i64::try_from(pending.len()).unwrap_or(i64::MAX));
    let oldest = pending.values().map(|(_, at)| *at).min();
    f.oldest_pending.set(oldest.map_or(0.0, unix_seconds));
}

/// What a published policy set says about the policies, for the gauges.
pub struct Published<'a> {
    /// The store's revision after the publish.
    pub revision: u64,
    /// The set published.
    pub set: &'a PolicySet,
    /// Stored validating and mutating policies whose expressions do not all compile.
    pub failing: (usize, usize),
}

/// Records a published policy set: the snapshot gauges, and the propagation of every
/// pending change `carried` says the set carries (by resource and object name).
pub fn published(published: &Published<'_>, carried: impl Fn(&str, &str) -> bool) {
    let f = &*FAMILIES;
    let now = Instant::now();
    {
        let mut pending = lock(&f.pending);
        pending.retain(|(resource, name), (seen, _)| {
            if carried(resource, name) {
                f.propagation
                    .observe(now.saturating_duration_since(*seen).as_secs_f64());
                false
            } else {
                true
            }
        });
        pending_gauges(&pending);
    }
    f.snapshot_generation
        .set(i64::try_from(published.revision).unwrap_or(i64::MAX));
    f.snapshot_published.set(unix_seconds(SystemTime::now()));
    let set = published.set;
    let count = |kind, failure: FailurePolicy, n: usize| {
        f.bound
            .get_or_create(&BoundLabels {
                kind,
                failure_policy: failure_policy(failure),
            })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    };
    for failure in [FailurePolicy::Fail, FailurePolicy::Ignore] {
        let validating = set
            .validating()
            .iter()
            .filter(|b| b.policy.failure_policy() == failure)
            .count();
        let mutating = set
            .mutating()
            .iter()
            .filter(|b| b.policy.failure_policy() == failure)
            .count();
        count("validating", failure, validating);
        count("mutating", failure, mutating);
    }
    let (validating, mutating) = published.failing;
    for (kind, n) in [("validating", validating), ("mutating", mutating)] {
        f.compile_errors
            .get_or_create(&KindLabels { kind })
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// Why a certificate's expiry cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ExpiryError {
    /// Not a PEM certificate.
    #[error("the {0} certificate is not a PEM certificate: {1}")]
    Pem(&'static str, String),
    /// The PEM does not hold an X.509 certificate.
    #[error("the {0} certificate cannot be parsed: {1}")]
    X509(&'static str, String),
}

/// The notAfter of the first certificate in `pem`, as Unix seconds.
pub fn not_after(which: &'static str, pem: &str) -> Result<i64, ExpiryError> {
    let (_, pem) =
        parse_x509_pem(pem.as_bytes()).map_err(|e| ExpiryError::Pem(which, e.to_string()))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| ExpiryError::X509(which, e.to_string()))?;
    Ok(cert.validity().not_after.timestamp())
}

/// Records when the CA (`ca_pem`) and the serving certificate (`serving_pem`) expire.
pub fn certificates(ca_pem: &str, serving_pem: &str) -> Result<(), ExpiryError> {
    for (certificate, pem) in [("ca", ca_pem), ("serving", serving_pem)] {
        let at = not_after(certificate, pem)?;
        // Unix seconds of a certificate fit in f64 exactly.
        FAMILIES
            .certificate_expiry
            .get_or_create(&CertificateLabels { certificate })
            .set(at as f64);
    }
    Ok(())
}

/// Keeps the leader gauge equal to `leadership` until its sender is gone.
pub async fn follow_leadership(mut leadership: watch::Receiver<bool>) {
    loop {
        let leading = *leadership.borrow_and_update();
        FAMILIES.leader.set(i64::from(leading));
        if leadership.changed().await.is_err() {
            FAMILIES.leader.set(0);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn cert(days: i64) -> (String, i64) {
        let mut params = rcgen::CertificateParams::new(vec!["a.example".to_string()]).unwrap();
        let not_after = time::OffsetDateTime::from_unix_timestamp(1_900_000_000).unwrap()
            + time::Duration::days(days);
        params.not_after = not_after;
        let key = rcgen::KeyPair::generate().unwrap();
        (
            params.self_signed(&key).unwrap().pem(),
            not_after.unix_timestamp(),
        )
    }

    #[test]
    fn the_expiry_of_a_pem_certificate_is_its_not_after() {
        let (pem, at) = cert(3);
        assert_eq!(not_after("serving", &pem).unwrap(), at);
        let error = not_after("ca", "not a certificate").unwrap_err();
        assert!(
            error.to_string().starts_with("the ca certificate"),
            "{error}"
        );
    }

    #[test]
    fn the_registry_holds_every_family_with_its_fixed_series_at_zero() {
        let (registry, _) = registry(10);
        let (ca, ca_at) = cert(10);
        let (serving, serving_at) = cert(1);
        certificates(&ca, &serving).unwrap();
        let text = celgate_webhook::metrics::encode(&registry).unwrap();
        for line in [
            "celgate_reconcile_errors_total{controller=\"status\"}".to_string(),
            "celgate_watch_restarts_total{resource=\"namespaces\"}".to_string(),
            "celgate_bound_policies{kind=\"validating\",failure_policy=\"Fail\"}".to_string(),
            "celgate_policy_compile_errors{kind=\"mutating\"}".to_string(),
            format!("celgate_certificate_expiry_timestamp_seconds{{certificate=\"ca\"}} {ca_at}.0"),
            format!(
                "celgate_certificate_expiry_timestamp_seconds{{certificate=\"serving\"}} {serving_at}.0"
            ),
            format!(
                "celgate_build_info{{version=\"{}\"}} 1",
                env!("CARGO_PKG_VERSION")
            ),
            "# TYPE celgate_policy_propagation_seconds histogram".to_string(),
            "celgate_admission_decisions_total{kind=\"validating\",decision=\"allowed\"} 0"
                .to_string(),
            "# HELP celgate_leader 1 while this replica holds the leader Lease (writes status and events), else 0.\n"
                .to_string(),
            "# TYPE celgate_leader gauge".to_string(),
        ] {
            assert!(text.contains(&line), "missing {line}:\n{text}");
        }
    }

    #[test]
    fn a_change_is_pending_until_a_set_carrying_it_is_published() {
        // Names of its own: the families are shared by every test of the process.
        changed(resource::VALIDATING_POLICIES, "propagation-test-a");
        changed(resource::VALIDATING_BINDINGS, "propagation-test-b");
        let pending = |name: &str| {
            lock(&FAMILIES.pending).contains_key(&(
                if name.ends_with('a') {
                    resource::VALIDATING_POLICIES
                } else {
                    resource::VALIDATING_BINDINGS
                },
                name.to_string(),
            ))
        };
        assert!(pending("propagation-test-a") && pending("propagation-test-b"));
        let set = PolicySet::default();
        let publish = Published {
            revision: 7,
            set: &set,
            failing: (0, 0),
        };
        published(&publish, |_, name| name == "propagation-test-b");
        assert!(pending("propagation-test-a"));
        assert!(!pending("propagation-test-b"));
        published(&publish, |_, name| name == "propagation-test-a");
        assert!(!pending("propagation-test-a"));
    }
}
