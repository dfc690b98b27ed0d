//! The series of the policy check families, found by a check's labels in one lookup: a check
//! is counted and observed in three families with the same labels (the count, upstream's
//! duration buckets, celgate's fine ones), and each family's own lookup hashes the label set
//! and takes the family's lock. Here the three handles of a label set are resolved in the
//! families once, the first time the set is recorded (so a series appears in the exposition
//! exactly when it would without this index), and kept by label set; a request takes the
//! index's lock once for all its checks, and looks its label sets up borrowed (no `Arc` of a
//! policy or binding name is cloned) with a fast hash.
//!
//! The index holds a label set as long as its families do: a series of a deleted policy stays
//! exposed with its last values, as without the index (the families never drop one).

use std::hash::Hash;
use std::sync::{PoisonError, RwLock};

use hashbrown::{Equivalent, HashMap};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// The three families of one kind of policy check, by label set `L`.
#[derive(Debug)]
pub(super) struct CheckFamilies<L> {
    /// Checks counted.
    pub total: Family<L, Counter>,
    /// Their durations in upstream's buckets.
    pub duration: Family<L, Histogram, fn() -> Histogram>,
    /// Their durations in celgate's fine buckets.
    pub fine: Family<L, Histogram, fn() -> Histogram>,
}

/// One label set's series in the three families.
#[derive(Debug)]
struct Series {
    total: Counter,
    duration: Histogram,
    fine: Histogram,
}

impl Series {
    fn observe(&self, seconds: f64) {
        self.total.inc();
        self.duration.observe(seconds);
        self.fine.observe(seconds);
    }
}

/// A label set as a check holds it, borrowed: it hashes as its owned label set `L` does and
/// compares equal to it ([`Equivalent`]), so it finds `L`'s entry without building one.
pub(super) trait Borrowed<L>: Hash + Equivalent<L> {
    /// The owned label set, to store (the first time it is seen).
    fn owned(&self) -> L;
}

/// The families, and their series resolved so far by label set.
#[derive(Debug)]
pub(super) struct CheckSeries<L> {
    families: CheckFamilies<L>,
    resolved: RwLock<HashMap<L, Series>>,
}

impl<L: Clone + Hash + Eq> CheckSeries<L> {
    pub(super) fn new(families: CheckFamilies<L>) -> Self {
        Self {
            families,
            resolved: RwLock::default(),
        }
    }

    /// Counts each check and observes its duration (seconds) in the three families.
    pub(super) fn record<B: Borrowed<L>>(&self, checks: impl Iterator<Item = (B, f64)>) {
        let mut unresolved = Vec::new();
        {
            let resolved = self.resolved.read().unwrap_or_else(PoisonError::into_inner);
            for (labels, seconds) in checks {
                match resolved.get(&labels) {
                    Some(series) => series.observe(seconds),
                    None => unresolved.push((labels.owned(), seconds)),
                }
            }
        }
        if unresolved.is_empty() {
            return;
        }
        let mut resolved = self
            .resolved
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        for (labels, seconds) in unresolved {
            let series = resolved.entry(labels).or_insert_with_key(|labels| Series {
                total: self.families.total.get_or_create_owned(labels),
                duration: self.families.duration.get_or_create_owned(labels),
                fine: self.families.fine.get_or_create_owned(labels),
            });
            series.observe(seconds);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use prometheus_client::registry::Registry;

    use super::*;
    use crate::metrics::{CheckLabels, CheckView, encode};

    fn series() -> (Registry, CheckSeries<CheckLabels>) {
        let mut registry = Registry::default();
        let families = CheckFamilies {
            total: Family::default(),
            duration: Family::new_with_constructor((|| Histogram::new([0.001])) as fn() -> _),
            fine: Family::new_with_constructor((|| Histogram::new([0.00001])) as fn() -> _),
        };
        registry.register("checks", "", families.total.clone());
        registry.register("check_duration", "", families.duration.clone());
        registry.register("check_fine_duration", "", families.fine.clone());
        (registry, CheckSeries::new(families))
    }

    #[test]
    fn a_label_set_is_resolved_once_found_borrowed_and_exposed_only_once_recorded() {
        let (registry, series) = series();
        let (p, a, b): (Arc<str>, Arc<str>, Arc<str>) = ("p".into(), "a".into(), "b".into());
        let view = |binding| CheckView {
            policy: &p,
            policy_binding: binding,
            error_type: "no_error",
            enforcement_action: "deny",
        };
        series.record([(view(&a), 0.000_002), (view(&a), 0.000_002)].into_iter());
        // Another request's binding name is another allocation with the same text.
        let a_again: Arc<str> = "a".into();
        series.record([(view(&a_again), 0.5)].into_iter());
        {
            let resolved = series.resolved.read().unwrap();
            assert_eq!(resolved.len(), 1);
            // The borrowed labels hash as the owned ones: a request finds its series in the
            // read pass and never takes the write lock again.
            assert!(resolved.get(&view(&a)).is_some());
            assert!(resolved.get(&view(&b)).is_none());
        }
        let text = encode(&registry).unwrap();
        let labels =
            "policy=\"p\",policy_binding=\"a\",error_type=\"no_error\",enforcement_action=\"deny\"";
        for line in [
            format!("checks_total{{{labels}}} 3"),
            format!("check_duration_count{{{labels}}} 3"),
            format!("check_duration_bucket{{le=\"0.001\",{labels}}} 2"),
            format!("check_fine_duration_bucket{{le=\"0.00001\",{labels}}} 2"),
        ] {
            assert!(text.contains(&line), "missing {line}:\n{text}");
        }
        // A label set never recorded has no series.
        assert!(!text.contains("policy_binding=\"b\""), "{text}");
    }
}
