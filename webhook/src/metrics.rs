//! Prometheus metrics with upstream's names and labels under a `celgate_` prefix, so dashboards
//! for the in-tree plugin work for celgate too.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use celgate_engine::mutate::MutationCheck;
use celgate_engine::validate::Check;

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

fn check_histogram() -> Histogram {
    Histogram::new([0.0000005, 0.001, 0.01, 0.1, 1.0])
}

/// The webhook's metric families and their registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    checks: Family<CheckLabels, Counter>,
    check_duration: Family<CheckLabels, Histogram, fn() -> Histogram>,
    mutations: Family<MutationLabels, Counter>,
    mutation_duration: Family<MutationLabels, Histogram, fn() -> Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("celgate");
        let checks = Family::<CheckLabels, Counter>::default();
        let check_duration =
            Family::<CheckLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                check_histogram,
            );
        registry.register(
            "validating_admission_policy_check",
            "Validation admission policy check total, labeled by policy and further identified by binding and enforcement action taken.",
            checks.clone(),
        );
        registry.register(
            "validating_admission_policy_check_duration_seconds",
            "Validation admission latency for individual validation expressions in seconds, labeled by policy and further including binding and enforcement action taken.",
            check_duration.clone(),
        );
        let mutations = Family::<MutationLabels, Counter>::default();
        let mutation_duration =
            Family::<MutationLabels, Histogram, fn() -> Histogram>::new_with_constructor(
                check_histogram,
            );
        registry.register(
            "mutating_admission_policy_check",
            "Mutation admission policy check total, labeled by policy and further identified by binding.",
            mutations.clone(),
        );
        registry.register(
            "mutating_admission_policy_check_duration_seconds",
            "Mutation admission latency for individual mutation expressions in seconds, labeled by policy and binding.",
            mutation_duration.clone(),
        );
        Self {
            registry,
            checks,
            check_duration,
            mutations,
            mutation_duration,
        }
    }
}

impl Metrics {
    /// Records the policy checks of one request.
    pub fn record(&self, checks: &[Check]) {
        for c in checks {
            let labels = CheckLabels {
                policy: c.policy.clone(),
                policy_binding: c.binding.clone(),
                error_type: c.error_type.as_str(),
                enforcement_action: c.enforcement_action,
            };
            self.checks.get_or_create(&labels).inc();
            self.check_duration
                .get_or_create(&labels)
                .observe(c.elapsed.as_secs_f64());
        }
    }

    /// Records the mutation checks of one request (one per mutation evaluated).
    pub fn record_mutations(&self, checks: &[MutationCheck]) {
        for c in checks {
            let labels = MutationLabels {
                policy: c.policy.clone(),
                policy_binding: c.binding.clone(),
                error_type: c.error_type.as_str(),
            };
            self.mutations.get_or_create(&labels).inc();
            self.mutation_duration
                .get_or_create(&labels)
                .observe(c.elapsed.as_secs_f64());
        }
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)?;
        Ok(out)
    }
}
