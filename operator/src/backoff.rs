//! Delays between retries of one failing operation: doubling from a first delay up to a cap,
//! and back to the first delay after a success. There is no jitter: each retried operation is
//! one of a handful per process, so predictable delays cost nothing and keep retries testable
//! with paused time.

use std::time::Duration;

use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::watcher::ExponentialBackoff;

/// The retry delays of one operation.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

impl Backoff {
    /// Delays of `first`, twice that, and so on up to `max`.
    pub const fn new(first: Duration, max: Duration) -> Self {
        Self {
            first,
            max,
            next: first,
        }
    }

    /// How long to wait before the next try.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        delay
    }

    /// Starts again from the first delay (after a success).
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// The retry delays of a watch that failed (the API server restarting, a network blip): from
/// 200 ms doubling to at most 2 s, with jitter, back to 200 ms after a minute without errors.
/// kube-runtime's default grows to 30 s, which would leave policy changes unseen for that long
/// after a brief outage; a handful of watches retrying every 2 s costs the API server nothing.
pub fn watch() -> ResetTimerBackoff<ExponentialBackoff> {
    let delays = backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(2))
        .with_factor(2.0)
        .without_max_times()
        .with_jitter();
    ResetTimerBackoff::new(delays.into(), Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_restart_after_a_reset() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let delays: Vec<u64> = (0..5).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_secs(1));
    }
}
