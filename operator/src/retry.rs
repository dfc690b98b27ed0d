//! Delays between retries of one failing operation, and the delays each kind of operation
//! uses, named once here. The delays are backon's exponential backoff (doubling from a first
//! delay up to a cap), started again after a success. There is no jitter: each retried
//! operation is one of a handful per process, so predictable delays cost nothing and keep
//! retries testable with paused time. (The backoff is backon's: a hand-written one was no
//! faster at anything that matters here, so it went.)

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use kube::runtime::utils::ResetTimerBackoff;

/// The first delay and the cap of one kind of retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delays {
    /// The first delay.
    pub first: Duration,
    /// The longest delay.
    pub max: Duration,
}

/// A reconcile that failed (a policy before the first lists, schemas a mutating policy needs).
pub const RECONCILE: Delays = Delays {
    first: Duration::from_secs(1),
    max: Duration::from_secs(300),
};
/// A write of status or of the webhook configurations that failed.
pub const WRITE: Delays = Delays {
    first: Duration::from_millis(500),
    max: Duration::from_secs(60),
};
/// A read of what the cluster serves or holds that failed (discovery, the Lease, the
/// certificate Secret cert-manager has not issued yet).
pub const CLUSTER: Delays = Delays {
    first: Duration::from_secs(1),
    max: Duration::from_secs(30),
};
/// A lookup of a param a request is waiting for.
pub const LOOKUP: Delays = Delays {
    first: Duration::from_secs(1),
    max: Duration::from_secs(10),
};

/// The retry delays of one operation.
#[derive(Debug)]
pub struct Backoff {
    delays: Delays,
    next: ExponentialBackoff,
}

impl Delays {
    fn start(self) -> ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(self.first)
            .with_max_delay(self.max)
            .with_factor(2.0)
            .without_max_times()
            .build()
    }
}

impl Backoff {
    /// Delays of `delays.first`, twice that, and so on up to `delays.max`.
    pub fn new(delays: Delays) -> Self {
        Self {
            delays,
            next: delays.start(),
        }
    }

    /// How long to wait before the next try.
    pub fn next_delay(&mut self) -> Duration {
        self.next.next().unwrap_or(self.delays.max)
    }

    /// Starts again from the first delay (after a success).
    pub fn reset(&mut self) {
        self.next = self.delays.start();
    }
}

/// The retry delays of a watch that failed (the API server restarting, a network blip, a 410
/// after it): from 100 ms doubling to at most 500 ms, with jitter, back to 100 ms after 10 s
/// without errors. A watch is then back within half a second of the API server answering
/// again, where a 2 s cap that reset only after a quiet minute left policy changes unseen for
/// seconds after each restart (a restart brings connection errors, then a 410 and a re-list,
/// each a step of the backoff). kube-runtime's default grows to 30 s. A handful of watches
/// retrying twice a second costs an API server that is down nothing.
pub fn watch() -> ResetTimerBackoff<kube::runtime::watcher::ExponentialBackoff> {
    let delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_millis(500))
        .with_factor(2.0)
        .without_max_times()
        .with_jitter();
    ResetTimerBackoff::new(delays.into(), Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap_and_restart_after_a_reset() {
        let mut backoff = Backoff::new(Delays {
            first: Duration::from_secs(1),
            max: Duration::from_secs(5),
        });
        let delays: Vec<u64> = (0..5).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_secs(1));
    }
}
