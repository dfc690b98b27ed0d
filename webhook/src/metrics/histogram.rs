//! A Prometheus histogram whose observations take no lock: prometheus-client's `Histogram`
//! locks a mutex for each one, and the request path observes one per policy check and one per
//! request. Each bucket is an atomic count and the sum an `f64` kept as bits in an atomic word.
//! A scrape reads the buckets one by one and gives their total as the count, so count and
//! buckets always agree; the sum may include an observation the buckets do not show yet.
//!
//! Measured against prometheus-client's with the same 16 buckets, it is not faster beyond
//! noise: 25.9 against 28.9 ns per observation on one thread (medians of 11 alternating
//! rounds, ×1.12; ×1.43 and ×1.00 in two other runs), and with two threads observing into one
//! histogram 83.4 against 83.4 ns (×1.00; ×0.52 and ×0.63: slower). Locking and unlocking
//! a parking_lot mutex costs about what this one's two atomic updates do.
//! `cargo bench -p celgate-webhook --bench hand_written`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// A histogram with fixed bucket bounds; clones share the counts.
#[derive(Clone, Debug)]
pub struct Histogram {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The finite upper bounds, ascending; the last bucket (`+Inf`) has none.
    bounds: Box<[f64]>,
    /// Observations per bucket (not cumulative), one more than `bounds`.
    counts: Box<[AtomicU64]>,
    /// The sum of the observations, as `f64` bits.
    sum: AtomicU64,
}

impl Histogram {
    /// A histogram with these upper bounds (ascending; any that is not finite is left out, as
    /// the `+Inf` bucket is always there).
    pub fn new(bounds: impl IntoIterator<Item = f64>) -> Self {
        let bounds: Box<[f64]> = bounds.into_iter().filter(|b| b.is_finite()).collect();
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram {
            inner: Arc::new(Inner {
                bounds,
                counts,
                sum: AtomicU64::new(0f64.to_bits()),
            }),
        }
    }

    /// Counts `v` in the first bucket whose bound is at least `v` (`NaN` in `+Inf`), and adds
    /// it to the sum.
    pub fn observe(&self, v: f64) {
        let inner = &*self.inner;
        let bucket = if v.is_nan() {
            inner.bounds.len()
        } else {
            inner.bounds.partition_point(|bound| *bound < v)
        };
        if let Some(count) = inner.counts.get(bucket) {
            count.fetch_add(1, Ordering::Relaxed);
        }
        // The closure always gives a value, so the update cannot fail.
        let _ = (inner.sum).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
            Some((f64::from_bits(bits) + v).to_bits())
        });
    }

    /// The sum, the count and each bucket's upper bound with its own (not cumulative) count.
    fn read(&self) -> (f64, u64, Vec<(f64, u64)>) {
        let inner = &*self.inner;
        let bounds = inner.bounds.iter().copied().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(inner.counts.iter())
            .map(|(bound, count)| (bound, count.load(Ordering::Relaxed)))
            .collect();
        let count = buckets.iter().map(|(_, n)| n).sum();
        (
            f64::from_bits(inner.sum.load(Ordering::Relaxed)),
            count,
            buckets,
        )
    }
}

impl TypedMetric for Histogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let (sum, count, buckets) = self.read();
        encoder.encode_histogram::<NoLabelSet>(sum, count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use prometheus_client::encoding::text::encode;
    use prometheus_client::registry::Registry;

    use super::Histogram;

    /// The text a registry holding `histogram` as `latency_seconds` exposes.
    fn exposed(histogram: &Histogram) -> String {
        let mut registry = Registry::default();
        registry.register("latency_seconds", "Latency", histogram.clone());
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn observations_are_exposed_as_prometheus_client_exposes_its_own_histogram() {
        let bounds = [0.001, 0.01, 0.1];
        let ours = Histogram::new(bounds.into_iter().chain([f64::INFINITY]));
        let theirs = prometheus_client::metrics::histogram::Histogram::new(bounds);
        // On a bound, past the last bound, and NaN (counted in +Inf, as theirs does).
        for v in [0.0005, 0.001, 0.002, 0.05, 0.05, 7.0, f64::NAN] {
            ours.observe(v);
            theirs.observe(v);
        }
        let mut reference = Registry::default();
        reference.register("latency_seconds", "Latency", theirs);
        let mut want = String::new();
        encode(&mut want, &reference).unwrap();
        assert_eq!(exposed(&ours), want);
        assert!(
            want.contains("latency_seconds_bucket{le=\"0.001\"} 2\n"),
            "{want}"
        );
        assert!(want.contains("latency_seconds_count 7\n"), "{want}");
    }

    #[test]
    fn observations_from_many_threads_are_all_counted_and_summed() {
        let histogram = Histogram::new([1.0]);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..10_000 {
                        histogram.observe(0.5);
                        histogram.observe(2.0);
                    }
                });
            }
        });
        let (sum, count, buckets) = histogram.read();
        assert_eq!(count, 80_000);
        assert_eq!(buckets, [(1.0, 40_000), (f64::INFINITY, 40_000)]);
        assert!((sum - 100_000.0).abs() < 1e-6, "{sum}");
    }
}
