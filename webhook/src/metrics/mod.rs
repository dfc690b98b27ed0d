//! The webhook's Prometheus metric families, registered into the process's one registry:
//! upstream's policy check families under a `celgate_` prefix (so dashboards for the in-tree
//! plugin work for celgate too), the same check durations in buckets fine enough for celgate's
//! microsecond checks, and the webhook's requests, latency and admission decisions.
//! Every label is a shared or static string (or a number), so recording allocates nothing.

mod series;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use hashbrown::Equivalent;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use celgate_engine::mutate::MutationCheck;
use celgate_engine::validate::{Check, Excepted};
use celgate_snapshot::dispatch::{Decided, Mutated};

use serde_json::Value;

use crate::decision_log::{self, AdmissionKind, DecisionLog, Line};
use series::{Borrowed, CheckFamilies, CheckSeries};

pub use prometheus_client::metrics::histogram::Histogram;

/// Labels of the policy check metrics (upstream: policy, policy_binding, error_type, enforcement_action).
/// Shared and static strings: looking a series up allocates nothing.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CheckLabels {
    /// Policy name.
    pub policy: Arc<str>,
    /// Binding name.
    pub policy_binding: Arc<str>,
    /// `no_error`, `compile_error`, `out_of_budget` or `invalid_error`.
    pub error_type: &'static str,
    /// `allow`, `deny`, `warn` or `audit`.
    pub enforcement_action: &'static str,
}

/// Labels of the excepted requests metric: the PolicyException.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExceptionLabels {
    /// The exception as `namespace/name`.
    pub exception: Arc<str>,
}

/// How many requests one PolicyException let through in this process, and when it last did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExceptedTally {
    /// Requests excepted.
    pub requests: u64,
    /// The last one's time.
    pub last: std::time::SystemTime,
}

/// Labels of the mutating policy check metrics (upstream: policy, policy_binding, error_type).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MutationLabels {
    /// Policy name.
    pub policy: Arc<str>,
    /// Binding name.
    pub policy_binding: Arc<str>,
    /// `no_error`, `compile_error`, `out_of_budget` or `invalid_error`.
    pub error_type: &'static str,
}

/// [`CheckLabels`] as a check holds them, to find their series without cloning the names.
#[derive(Hash)]
struct CheckView<'a> {
    policy: &'a Arc<str>,
    policy_binding: &'a Arc<str>,
    error_type: &'static str,
    enforcement_action: &'static str,
}

impl Equivalent<CheckLabels> for CheckView<'_> {
    fn equivalent(&self, labels: &CheckLabels) -> bool {
        *self.policy == labels.policy
            && *self.policy_binding == labels.policy_binding
            && self.error_type == labels.error_type
            && self.enforcement_action == labels.enforcement_action
    }
}

impl Borrowed<CheckLabels> for CheckView<'_> {
    fn owned(&self) -> CheckLabels {
        CheckLabels {
            policy: self.policy.clone(),
            policy_binding: self.policy_binding.clone(),
            error_type: self.error_type,
            enforcement_action: self.enforcement_action,
        }
    }
}

/// [`MutationLabels`] as a mutation check holds them.
#[derive(Hash)]
struct MutationView<'a> {
    policy: &'a Arc<str>,
    policy_binding: &'a Arc<str>,
    error_type: &'static str,
}

impl Equivalent<MutationLabels> for MutationView<'_> {
    fn equivalent(&self, labels: &MutationLabels) -> bool {
        *self.policy == labels.policy
            && *self.policy_binding == labels.policy_binding
            && self.error_type == labels.error_type
    }
}

impl Borrowed<MutationLabels> for MutationView<'_> {
    fn owned(&self) -> MutationLabels {
        MutationLabels {
            policy: self.policy.clone(),
            policy_binding: self.policy_binding.clone(),
            error_type: self.error_type,
        }
    }
}

/// Labels of one webhook request: the route it was sent to and the HTTP code answered.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// One of [`ADMISSION_PATHS`], or [`OTHER_PATH`].
    pub path: &'static str,
    /// The HTTP status code.
    pub code: u16,
}

/// Labels of the request latency: the route.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabels {
    /// One of [`ADMISSION_PATHS`], or [`OTHER_PATH`].
    pub path: &'static str,
}

/// Labels of the requests the webhook could not decide: the route and why.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// One of [`ADMISSION_PATHS`], or [`OTHER_PATH`].
    pub path: &'static str,
    /// `not_ready`, `bad_request`, `internal`, `unauthenticated` (401), `overloaded` (429:
    /// the limit of reviews or of review bytes in flight), `too_large` (413: a body past the
    /// size limit, or one whose decoding alone would pass the bytes in flight) or `timeout`
    /// (408: not read and decided within the call's timeout).
    pub reason: &'static str,
}

/// Labels of a connection the server closed on its own.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionLabels {
    /// `over_limit` (closed at once: as many connections were open as allowed), `tls` (the
    /// handshake failed), `header_timeout` (no complete request headers in time, handshake
    /// included), `idle` (no request for the idle timeout), `unauthenticated` (after a
    /// request that failed authentication was answered) or `control_frames` (more HTTP/2
    /// PRIORITY and WINDOW_UPDATE frames than its requests allow).
    pub reason: &'static str,
}

/// Labels of an admission decision.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `validating` or `mutating`.
    pub kind: &'static str,
    /// `allowed` or `denied`.
    pub decision: &'static str,
}

/// One route's series that every answered review records, once resolved.
#[derive(Debug, Default)]
struct RouteSeries {
    /// Requests answered 200.
    answered: OnceLock<Counter>,
    /// The latency.
    duration: OnceLock<Histogram>,
}

/// The `decision` label's values, in the order of [`Metrics`]' decision series.
const DECISIONS: [&str; 2] = ["allowed", "denied"];

/// The routes the request metrics count (every other path, such as `/healthz`, is not counted),
/// so the `path` label has a fixed set of values.
pub const ADMISSION_PATHS: [&str; 9] = [
    "/validate",
    "/validate/fail",
    "/validate/ignore",
    "/mutate",
    "/mutate/fail/never",
    "/mutate/fail/ifneeded",
    "/mutate/ignore/never",
    "/mutate/ignore/ifneeded",
    "/validate-policies",
];

/// The `path` label of a request to any path but [`ADMISSION_PATHS`] and the probes' (answered
/// 401 without credentials, else 404).
pub const OTHER_PATH: &str = "other";

/// The [`ADMISSION_PATHS`] entry `path` is, if any.
pub fn admission_path(path: &str) -> Option<&'static str> {
    ADMISSION_PATHS.into_iter().find(|p| *p == path)
}

/// Upstream's buckets of a check's duration, kept for upstream's dashboards: a check of a few
/// microseconds lands in the 1 ms bucket, so no quantile of them says more than "under 1 ms".
fn check_histogram() -> Histogram {
    Histogram::new([0.0000005, 0.001, 0.01, 0.1, 1.0])
}

/// Buckets of a check's duration in celgate's own families: 1 µs to 100 ms in steps of 2 to
/// 2.5 (1, 2.5, 5 per decade), so a quantile resolves checks of a few microseconds as well as
/// one that runs into its cost budget.
pub const FINE_CHECK_BUCKETS: [f64; 16] = [
    0.000001, 0.0000025, 0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
    0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
];

fn fine_check_histogram() -> Histogram {
    Histogram::new(FINE_CHECK_BUCKETS)
}

/// Buckets of the webhook's request latency: from well under a millisecond (a request no
/// policy matches) to the API server's default 10 s timeout.
fn request_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

/// The webhook's metric families (registered into the process registry by [`Metrics::register`])
/// and its decision log.
#[derive(Debug)]
pub struct Metrics {
    checks: CheckSeries<CheckLabels>,
    mutations: CheckSeries<MutationLabels>,
    requests: Family<RequestLabels, Counter>,
    request_duration: Family<PathLabels, Histogram, fn() -> Histogram>,
    /// The series of requests answered 200 and of the latency, by route (the index in
    /// [`ADMISSION_PATHS`], then [`OTHER_PATH`]), each resolved on its route's first request.
    routes: [RouteSeries; ADMISSION_PATHS.len() + 1],
    errors: Family<ErrorLabels, Counter>,
    /// The decision series, by kind (validating, mutating) and allowed or denied: all exist
    /// from the start.
    decisions: [[Counter; 2]; 2],
    connections_closed: Family<ConnectionLabels, Counter>,
    connections_open: Gauge,
    excepted: Family<ExceptionLabels, Counter>,
    /// The same counts with the last time, by exception, for its status.
    excepted_tally: std::sync::Mutex<std::collections::HashMap<Arc<str>, ExceptedTally>>,
    /// One structured line per denial, warning and audited failure, at most a set number per
    /// second.
    decision_log: DecisionLog,
}

impl Metrics {
    /// Registers the webhook's families into `registry` (the process's one registry, prefixed
    /// `celgate`); denials are logged at most `decision_log_rate` times per second, the rest
    /// counted as dropped.
    pub fn register(registry: &mut Registry, decision_log_rate: u32) -> Self {
        let checks = Family::<CheckLabels, Counter>::default();
        let check_duration =
            Family::<CheckLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                check_histogram,
            );
        registry.register(
            "validating_admission_policy_check",
            "Validation admission policy check total, labeled by policy and further identified by binding and enforcement action taken",
            checks.clone(),
        );
        registry.register(
            "validating_admission_policy_check_duration_seconds",
            "Validation admission latency for individual validation expressions in seconds, labeled by policy and further including binding and enforcement action taken",
            check_duration.clone(),
        );
        let check_duration_fine =
            Family::<CheckLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                fine_check_histogram,
            );
        registry.register(
            "validating_admission_policy_check_fine_duration_seconds",
            "Validation admission latency for individual validation expressions in seconds, as validating_admission_policy_check_duration_seconds with its labels, in celgate's buckets of 1 microsecond to 100 ms (upstream's put nearly every check in the 1 ms bucket)",
            check_duration_fine.clone(),
        );
        let mutations = Family::<MutationLabels, Counter>::default();
        let mutation_duration =
            Family::<MutationLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                check_histogram,
            );
        registry.register(
            "mutating_admission_policy_check",
            "Mutation admission policy check total, labeled by policy and further identified by binding",
            mutations.clone(),
        );
        registry.register(
            "mutating_admission_policy_check_duration_seconds",
            "Mutation admission latency for individual mutation expressions in seconds, labeled by policy and binding",
            mutation_duration.clone(),
        );
        let mutation_duration_fine =
            Family::<MutationLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                fine_check_histogram,
            );
        registry.register(
            "mutating_admission_policy_check_fine_duration_seconds",
            "Mutation admission latency for individual mutation expressions in seconds, as mutating_admission_policy_check_duration_seconds with its labels, in celgate's buckets of 1 microsecond to 100 ms (upstream's put nearly every check in the 1 ms bucket)",
            mutation_duration_fine.clone(),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "webhook_requests",
            "Admission webhook requests, by route and HTTP code answered",
            requests.clone(),
        );
        let request_duration =
            Family::<PathLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                request_histogram,
            );
        registry.register(
            "webhook_request_duration_seconds",
            "Admission webhook request latency in seconds, from the request's headers to the answer, by route",
            request_duration.clone(),
        );
        let errors = Family::<ErrorLabels, Counter>::default();
        registry.register(
            "webhook_errors",
            "Admission webhook requests that could not be decided (the API server applies the webhook's failurePolicy), by route and reason",
            errors.clone(),
        );
        let decision_family = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "admission_decisions",
            "Admission decisions of celgate's policies, by kind (validating, mutating) and decision (allowed, denied)",
            decision_family.clone(),
        );
        // Every decision series exists from the start, so a rate over it is 0, not absent.
        let decisions = [AdmissionKind::Validating, AdmissionKind::Mutating].map(|kind| {
            DECISIONS.map(|decision| {
                decision_family.get_or_create_owned(&DecisionLabels {
                    kind: kind.as_str(),
                    decision,
                })
            })
        });
        let connections_closed = Family::<ConnectionLabels, Counter>::default();
        registry.register(
            "webhook_connections_closed",
            "Connections to the admission webhook closed by celgate, by reason (a limit or a timeout of the server)",
            connections_closed.clone(),
        );
        let connections_open = Gauge::default();
        registry.register(
            "webhook_connections_open",
            "Connections to the admission webhook open now",
            connections_open.clone(),
        );
        let excepted = Family::<ExceptionLabels, Counter>::default();
        registry.register(
            "policy_exception_excepted_requests",
            "Admission requests a PolicyException let through (a binding it names was not evaluated), by exception (namespace/name); counted once per request and exception",
            excepted.clone(),
        );
        let decision_log = DecisionLog::register(registry, decision_log_rate);
        Self {
            excepted,
            excepted_tally: Default::default(),
            checks: CheckSeries::new(CheckFamilies {
                total: checks,
                duration: check_duration,
                fine: check_duration_fine,
            }),
            mutations: CheckSeries::new(CheckFamilies {
                total: mutations,
                duration: mutation_duration,
                fine: mutation_duration_fine,
            }),
            requests,
            request_duration,
            routes: Default::default(),
            errors,
            decisions,
            connections_closed,
            connections_open,
            decision_log,
        }
    }

    /// Records the policy checks of one request: each counted, and its duration observed in
    /// upstream's buckets and in celgate's fine ones. Checks are those that fail or deny, as
    /// upstream counts them; the three series of a label set are found in one lookup
    /// ([`series`]).
    pub fn record(&self, checks: &[Check]) {
        if checks.is_empty() {
            return;
        }
        self.checks.record(checks.iter().map(|c| {
            let labels = CheckView {
                policy: &c.policy,
                policy_binding: &c.binding,
                error_type: c.error_type.as_str(),
                enforcement_action: c.enforcement_action,
            };
            (labels, c.elapsed.as_secs_f64())
        }));
    }

    /// Records the PolicyExceptions that let one request through (at `at`): each counted once,
    /// however many of its bindings it excepted.
    pub fn record_excepted(&self, excepted: &[Excepted], at: std::time::SystemTime) {
        if excepted.is_empty() {
            return;
        }
        let mut seen: Vec<&Arc<str>> = Vec::new();
        let Ok(mut tally) = self.excepted_tally.lock() else {
            return;
        };
        for e in excepted {
            if seen.contains(&&e.exception) {
                continue;
            }
            seen.push(&e.exception);
            let labels = ExceptionLabels {
                exception: e.exception.clone(),
            };
            self.excepted.get_or_create(&labels).inc();
            let entry = tally.entry(e.exception.clone()).or_insert(ExceptedTally {
                requests: 0,
                last: at,
            });
            entry.requests += 1;
            entry.last = entry.last.max(at);
        }
    }

    /// The requests each PolicyException let through in this process, by `namespace/name`.
    pub fn excepted(&self) -> std::collections::HashMap<Arc<str>, ExceptedTally> {
        self.excepted_tally
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }

    /// Records the mutation checks of one request (one per mutation evaluated), as [`Self::record`].
    pub fn record_mutations(&self, checks: &[MutationCheck]) {
        if checks.is_empty() {
            return;
        }
        self.mutations.record(checks.iter().map(|c| {
            let labels = MutationView {
                policy: &c.policy,
                policy_binding: &c.binding,
                error_type: c.error_type.as_str(),
            };
            (labels, c.elapsed.as_secs_f64())
        }));
    }

    /// Records one decided validation (of a call that arrived at `at`) as the webhook's
    /// handler does: its checks, the PolicyExceptions that let it through, the decision (a
    /// denial logged with the first check that denied), and its warnings and audited failures.
    pub fn validated(&self, decided: &Decided, at: std::time::SystemTime) {
        let outcome = &decided.outcome;
        self.record(&outcome.checks);
        self.record_excepted(&outcome.excepted, at);
        let denied = outcome.denial.as_ref().map(|denial| {
            // The first check that denied is the denial reported.
            let by = outcome
                .checks
                .iter()
                .find(|c| c.enforcement_action == "deny");
            Line::denied(by.map(|c| (&*c.policy, &*c.binding)), &denial.message)
        });
        self.decided(AdmissionKind::Validating, decided.review.fields(), denied);
        self.noted(decided.review.fields(), &outcome.checks);
    }

    /// Records one decided mutation as the webhook's handler does: its checks and the
    /// decision (a denial logged with the first mutation that failed).
    pub fn mutated(&self, mutated: &Mutated) {
        let outcome = &mutated.outcome;
        self.record_mutations(&outcome.checks);
        let denied = outcome.denial.as_ref().map(|denial| {
            // The first mutation that failed is the denial reported.
            let by = outcome
                .checks
                .iter()
                .find(|c| c.error_type != celgate_engine::validate::ErrorType::NoError);
            Line::denied(by.map(|c| (&*c.policy, &*c.binding)), &denial.message)
        });
        self.decided(AdmissionKind::Mutating, mutated.review.fields(), denied);
    }

    /// Records one answered request on an admission route.
    pub fn request(&self, path: &'static str, code: u16, elapsed: Duration) {
        let route = ADMISSION_PATHS
            .iter()
            .position(|p| *p == path)
            .map_or(&self.routes[ADMISSION_PATHS.len()], |i| &self.routes[i]);
        let requests = RequestLabels { path, code };
        if code == 200 {
            route
                .answered
                .get_or_init(|| self.requests.get_or_create_owned(&requests))
                .inc();
        } else {
            self.requests.get_or_create(&requests).inc();
        }
        route
            .duration
            .get_or_init(|| {
                self.request_duration
                    .get_or_create_owned(&PathLabels { path })
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Records a request on `path` that could not be decided, for `reason`.
    pub fn error(&self, path: &'static str, reason: &'static str) {
        self.errors
            .get_or_create(&ErrorLabels { path, reason })
            .inc();
    }

    /// Records a connection closed by the server, for `reason`.
    pub fn connection_closed(&self, reason: &'static str) {
        self.connections_closed
            .get_or_create(&ConnectionLabels { reason })
            .inc();
    }

    /// Counts a connection opened (`1`) or closed (`-1`).
    pub fn connections_open(&self, delta: i64) {
        self.connections_open.inc_by(delta);
    }

    /// Records one admission decision of `request` (its members): allowed, or `denied` (which also goes to
    /// the decision log).
    pub fn decided(&self, kind: AdmissionKind, request: &Value, denied: Option<Line<'_>>) {
        let kind_index = match kind {
            AdmissionKind::Validating => 0,
            AdmissionKind::Mutating => 1,
        };
        self.decisions[kind_index][usize::from(denied.is_some())].inc();
        if let Some(denied) = denied {
            self.decision_log.write(kind, request, denied);
        }
    }

    /// Writes the warnings and audited failures among a validating decision's `checks` to the
    /// decision log.
    pub fn noted(&self, request: &Value, checks: &[Check]) {
        for check in checks {
            let decided = match check.enforcement_action {
                "warn" => decision_log::Decided::Warned,
                "audit" => decision_log::Decided::Audited,
                _ => continue,
            };
            if let Some(message) = &check.message {
                let line = Line {
                    decided,
                    policy: &check.policy,
                    binding: &check.binding,
                    message,
                };
                self.decision_log
                    .write(AdmissionKind::Validating, request, line);
            }
        }
    }
}

/// The OpenMetrics text exposition of every metric in `registry`.
pub fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn an_exception_counts_once_per_request_with_its_last_time() {
        let mut registry = Registry::with_prefix("celgate");
        let metrics = Metrics::register(&mut registry, 10);
        let excepted = |binding: &str, exception: &str| Excepted {
            policy: Arc::from("p"),
            binding: Arc::from(binding),
            exception: Arc::from(exception),
        };
        let t = |s: u64| std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        // One request that two bindings of one exception let through, and another exception.
        metrics.record_excepted(&[excepted("a", "ns/x"), excepted("b", "ns/x")], t(10));
        metrics.record_excepted(&[excepted("a", "ns/x"), excepted("a", "ns/y")], t(20));
        let tally = metrics.excepted();
        assert_eq!(
            tally.get("ns/x"),
            Some(&ExceptedTally {
                requests: 2,
                last: t(20)
            })
        );
        assert_eq!(tally.get("ns/y").map(|t| t.requests), Some(1));
        let text = encode(&registry).unwrap();
        assert!(
            text.contains("celgate_policy_exception_excepted_requests_total{exception=\"ns/x\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn every_admission_route_and_nothing_else_is_a_path_label() {
        assert_eq!(admission_path("/validate/fail"), Some("/validate/fail"));
        assert_eq!(
            admission_path("/mutate/ignore/ifneeded"),
            Some("/mutate/ignore/ifneeded")
        );
        assert_eq!(admission_path("/healthz"), None);
        assert_eq!(admission_path("/validate/sometimes"), None);
    }

    #[test]
    fn requests_and_decisions_are_exposed_with_bounded_labels() {
        let mut registry = Registry::with_prefix("celgate");
        let metrics = Metrics::register(&mut registry, 10);
        metrics.request("/validate/fail", 200, Duration::from_millis(3));
        metrics.request("/validate/fail", 503, Duration::from_millis(1));
        // Each route's resolved series are its own.
        metrics.request("/mutate/ignore/ifneeded", 200, Duration::from_millis(1));
        metrics.request(OTHER_PATH, 200, Duration::from_millis(1));
        metrics.request(OTHER_PATH, 200, Duration::from_millis(1));
        metrics.error("/validate/fail", "not_ready");
        metrics.decided(
            AdmissionKind::Mutating,
            &Value::Null,
            Some(Line::denied(None, "denied")),
        );
        let text = encode(&registry).unwrap();
        for line in [
            "celgate_webhook_requests_total{path=\"/validate/fail\",code=\"200\"} 1",
            "celgate_webhook_requests_total{path=\"/validate/fail\",code=\"503\"} 1",
            "celgate_webhook_request_duration_seconds_count{path=\"/validate/fail\"} 2",
            "celgate_webhook_requests_total{path=\"/mutate/ignore/ifneeded\",code=\"200\"} 1",
            "celgate_webhook_request_duration_seconds_count{path=\"/mutate/ignore/ifneeded\"} 1",
            "celgate_webhook_requests_total{path=\"other\",code=\"200\"} 2",
            "celgate_webhook_request_duration_seconds_count{path=\"other\"} 2",
            "celgate_webhook_errors_total{path=\"/validate/fail\",reason=\"not_ready\"} 1",
            "celgate_admission_decisions_total{kind=\"mutating\",decision=\"denied\"} 1",
            "celgate_admission_decisions_total{kind=\"validating\",decision=\"allowed\"} 0",
            "celgate_decision_log_lines_total 1",
            "celgate_decision_log_dropped_total 0",
        ] {
            assert!(text.contains(line), "missing {line}:\n{text}");
        }
    }

    #[test]
    fn warnings_and_audited_failures_go_to_the_decision_log_and_nothing_else_does() {
        use celgate_engine::validate::ErrorType;
        let mut registry = Registry::with_prefix("celgate");
        let metrics = Metrics::register(&mut registry, 10);
        let check = |enforcement_action, message: Option<&str>| Check {
            policy: Arc::from("p"),
            binding: Arc::from("b"),
            error_type: ErrorType::NoError,
            enforcement_action,
            message: message.map(Arc::from),
            elapsed: Duration::ZERO,
        };
        let checks = [
            check("warn", Some("replicas > 5")),
            check("audit", Some("replicas > 5")),
            check("allow", None),
            // A denial is logged once, by `decided`.
            check("deny", Some("replicas > 5")),
        ];
        metrics.noted(&Value::Null, &checks);
        let text = encode(&registry).unwrap();
        assert!(
            text.contains("celgate_decision_log_lines_total 2"),
            "{text}"
        );
    }

    #[test]
    fn a_check_of_microseconds_is_resolved_by_the_fine_family_and_upstreams_is_kept() {
        use celgate_engine::validate::ErrorType;
        let mut registry = Registry::with_prefix("celgate");
        let metrics = Metrics::register(&mut registry, 10);
        metrics.record(&[Check {
            policy: Arc::from("p"),
            binding: Arc::from("b"),
            error_type: ErrorType::NoError,
            enforcement_action: "allow",
            message: None,
            elapsed: Duration::from_micros(5),
        }]);
        metrics.record_mutations(&[MutationCheck {
            policy: Arc::from("m"),
            binding: Arc::from("mb"),
            error_type: ErrorType::NoError,
            elapsed: Duration::from_micros(7),
        }]);
        let text = encode(&registry).unwrap();
        let labels = "policy=\"p\",policy_binding=\"b\",error_type=\"no_error\",enforcement_action=\"allow\"";
        let mutation = "policy=\"m\",policy_binding=\"mb\",error_type=\"no_error\"";
        for line in [
            // Upstream's family, names and buckets unchanged: 5 µs is only "under 1 ms".
            format!(
                "celgate_validating_admission_policy_check_duration_seconds_bucket{{le=\"5e-7\",{labels}}} 0"
            ),
            format!(
                "celgate_validating_admission_policy_check_duration_seconds_bucket{{le=\"0.001\",{labels}}} 1"
            ),
            format!(
                "celgate_mutating_admission_policy_check_duration_seconds_bucket{{le=\"0.001\",{mutation}}} 1"
            ),
            // Celgate's: 5 µs is in the 5 µs bucket, not in the 2.5 µs one.
            format!(
                "celgate_validating_admission_policy_check_fine_duration_seconds_bucket{{le=\"0.0000025\",{labels}}} 0"
            ),
            format!(
                "celgate_validating_admission_policy_check_fine_duration_seconds_bucket{{le=\"0.000005\",{labels}}} 1"
            ),
            format!(
                "celgate_validating_admission_policy_check_fine_duration_seconds_count{{{labels}}} 1"
            ),
            format!(
                "celgate_mutating_admission_policy_check_fine_duration_seconds_bucket{{le=\"0.000005\",{mutation}}} 0"
            ),
            format!(
                "celgate_mutating_admission_policy_check_fine_duration_seconds_bucket{{le=\"0.00001\",{mutation}}} 1"
            ),
        ] {
            assert!(text.contains(&line), "missing {line}:\n{text}");
        }
        // Bounded: one series per bucket (and +Inf) for each label set.
        let buckets = text
            .lines()
            .filter(|l| {
                l.starts_with(
                    "celgate_validating_admission_policy_check_fine_duration_seconds_bucket",
                )
            })
            .count();
        assert_eq!(buckets, FINE_CHECK_BUCKETS.len() + 1);
    }
}
