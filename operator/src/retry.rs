//! Delays between retries of one failing operation, and the delays each kind of operation
//! uses, named once here (the client has no retry layer of its own). The delays are backon's
//! exponential backoff (doubling from a first delay up to a cap), started again after a
//! success. Operations retry without jitter: each is one of a handful per process, so
//! predictable delays cost nothing and keep retries testable with paused time; watches
//! ([`watch`]) add jitter, since every replica's watches fail together when kube-apiserver
//! restarts. (The backoff is backon's: a hand-written one was no faster at anything that
//! matters here, so it went.)

use std::time::Duration;

use std::fmt::Debug;
use std::time::Instant;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use futures::{Stream, StreamExt as _};
use kube::runtime::utils::ResetTimerBackoff;
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tracing::debug;

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
/// A resource the audit cannot list or watch (forbidden, no longer served): it is tried again
/// this slowly, beside the watch's own quick retries, so a resource that stays unreadable costs
/// kube-apiserver a list a minute, not four a second.
pub const UNREADABLE: Delays = Delays {
    first: Duration::from_secs(1),
    max: Duration::from_secs(60),
};
/// A list or watch kube-apiserver refused as overloaded (429, 503): at least as long as its
/// `Retry-After` says.
pub const OVERLOADED: Delays = Delays {
    first: Duration::from_millis(500),
    max: Duration::from_secs(30),
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

/// A watch of `api` that recovers from errors with little delay: it waits from 100 ms doubling
/// to at most 250 ms (with jitter), back to 100 ms after 10 s without errors, and lists again at
/// once after a 410 Gone (as client-go's reflector does), unless another came within the last
/// second. When a watch cannot start because kube-apiserver answers 503 or 429 (after a restart
/// its watch cache takes seconds to start, while lists are served from etcd), it lists again
/// rather than retrying the watch, at most every 500 ms, so changes made meanwhile are seen.
/// After a kube-apiserver restart a watch is so back within a few hundred milliseconds of the
/// API server answering, where kube-runtime's default (800 ms doubling to 30 s, every error a
/// step) left policy changes unseen for seconds. A handful of watches retrying a few times a
/// second costs an API server that is down nothing.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let delays = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_millis(250))
        .with_factor(2.0)
        .without_max_times()
        .with_jitter();
    let mut last_gone: Option<Instant> = None;
    relisting(api, config)
        .filter(move |event| {
            let relist_now = matches!(event, Err(watcher::Error::WatchError(status)) if status.code == 410)
                && last_gone.is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
            if relist_now {
                last_gone = Some(Instant::now());
                debug!("watch expired (410 Gone); listing again at once");
            }
            std::future::ready(!relist_now)
        })
        .backoff(ResetTimerBackoff::new(
            watcher::ExponentialBackoff::from(delays),
            Duration::from_secs(10),
        ))
}

/// The shortest time between two lists [`relisting`] starts.
const RELIST_SPACING: Duration = Duration::from_millis(500);

/// kube-runtime's watcher of `api`, started again (from a list) when a watch cannot start
/// because kube-apiserver is not serving watches yet: by itself the watcher would retry the
/// watch from its last list until the watch cache is up, and see nothing changed meanwhile.
/// A list or watch refused with 429 or 503 waits before the next try: as long as the answer's
/// `retryAfterSeconds` (the `Retry-After` header's value) says and at least [`OVERLOADED`]'s
/// growing delay, so an overloaded API server gets fewer requests, not one every 500 ms.
fn relisting<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let inner = watcher(api.clone(), config.clone()).boxed();
    let last_list: Option<Instant> = None;
    let overloaded = Backoff::new(OVERLOADED);
    futures::stream::unfold(
        (inner, last_list, overloaded),
        move |(mut inner, mut last_list, mut overloaded)| {
            let (api, config) = (api.clone(), config.clone());
            async move {
                let event = inner.next().await?;
                match &event {
                    Err(error) => {
                        if let Some(retry_after) = overloaded_for(error) {
                            let delay = retry_after.max(overloaded.next_delay());
                            debug!(
                                delay_s = delay.as_secs_f64(),
                                "kube-apiserver is overloaded; waiting before the next try"
                            );
                            tokio::time::sleep(delay).await;
                        }
                    }
                    // A list starting is no sign the API server recovered; what it brings is.
                    Ok(watcher::Event::Init) => {}
                    Ok(_) => overloaded.reset(),
                }
                let not_serving_watches = matches!(&event,
                    Err(watcher::Error::WatchStartFailed(kube::Error::Api(status)))
                        if status.code == 503 || status.code == 429);
                if not_serving_watches && last_list.is_none_or(|at| at.elapsed() >= RELIST_SPACING)
                {
                    debug!("kube-apiserver serves no watch yet; listing again");
                    last_list = Some(Instant::now());
                    inner = watcher(api, config).boxed();
                }
                Some((event, (inner, last_list, overloaded)))
            }
        },
    )
}

/// When `error` is kube-apiserver refusing a list or watch as overloaded (429 or 503): how long
/// it asked to wait (zero when it did not say).
fn overloaded_for(error: &watcher::Error) -> Option<Duration> {
    let status = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status,
        watcher::Error::WatchError(status) => status,
        _ => return None,
    };
    overloaded(status)
}

/// When `status` is kube-apiserver refusing a request as overloaded (429 Too Many Requests, its
/// fairness pushing back, or 503): how long it asked to wait (its `Retry-After`, as
/// `retryAfterSeconds`; zero when it did not say).
pub fn overloaded(status: &kube::core::Status) -> Option<Duration> {
    (status.code == 429 || status.code == 503).then(|| {
        Duration::from_secs(
            status
                .details
                .as_ref()
                .map_or(0, |d| u64::from(d.retry_after_seconds)),
        )
    })
}

/// The backoff of a kube-runtime Controller whose trigger streams are watches that already
/// back off ([`watch`]): none. Left to its default (800 ms doubling to 30 s), the Controller
/// paused every trigger once more after each watch error, so after a kube-apiserver restart a
/// policy change waited seconds (up to 18 s measured) to be seen.
#[derive(Debug, Clone, Copy, Default)]
pub struct AlreadyDelayed;

impl Iterator for AlreadyDelayed {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl kube::runtime::utils::Backoff for AlreadyDelayed {
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{self, list, policy_json};
    use celgate_crds::ValidatingAdmissionPolicy;

    /// Plays a list, then a watch that fails with `code`; returns whether the client's next
    /// call is a list and, when it is, the name of the policy that list brought.
    async fn after_a_watch_failing_with(code: u16) -> (bool, Option<String>) {
        let (client, mut server) = fixtures::pair();
        let mut events = Box::pin(watch(
            Api::<ValidatingAdmissionPolicy>::all(client),
            watcher::Config::default(),
        ));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                if let Ok(watcher::Event::InitApply(p)) = event {
                    let _ = tx.send(p.metadata.name.unwrap_or_default());
                }
            }
        });
        let call = server.next().await;
        assert!(!call.is_watch(), "the first call lists");
        call.reply(200, list(vec![]));
        let call = server.next().await;
        assert!(call.is_watch(), "then it watches");
        call.reply(code, fixtures::status(code, "Failing"));
        let call = server.next().await;
        let listed = !call.is_watch();
        let seen = if listed {
            call.reply(200, list(vec![policy_json("changed", 2, "true", None)]));
            rx.recv().await
        } else {
            None
        };
        reader.abort();
        (listed, seen)
    }

    #[tokio::test]
    async fn a_watch_kube_apiserver_cannot_serve_yet_lists_again_and_sees_what_changed() {
        for code in [503, 429] {
            assert_eq!(
                after_a_watch_failing_with(code).await,
                (true, Some("changed".to_string())),
                "after {code}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn lists_refused_as_overloaded_wait_for_retry_after_and_back_off() {
        let (client, mut server) = fixtures::pair();
        let mut events = Box::pin(watch(
            Api::<ValidatingAdmissionPolicy>::all(client),
            watcher::Config::default(),
        ));
        let reader = tokio::spawn(async move { while events.next().await.is_some() {} });
        let mut overloaded = fixtures::status(429, "TooManyRequests");
        overloaded["details"] = serde_json::json!({"retryAfterSeconds": 3});
        let call = server.next().await;
        let mut at = tokio::time::Instant::now();
        call.reply(429, overloaded);
        let mut gaps = Vec::new();
        for _ in 0..4 {
            let call = server.next().await;
            gaps.push(at.elapsed());
            at = tokio::time::Instant::now();
            call.reply(503, fixtures::status(503, "ServiceUnavailable"));
        }
        reader.abort();
        assert!(
            gaps[0] >= Duration::from_secs(3),
            "Retry-After is honoured: {gaps:?}"
        );
        assert!(
            gaps.windows(2).skip(1).all(|w| w[1] > w[0]) && gaps[3] >= Duration::from_secs(2),
            "503s without Retry-After back off: {gaps:?}"
        );
    }

    #[tokio::test]
    async fn a_watch_failing_otherwise_is_retried_from_the_last_list() {
        assert_eq!(after_a_watch_failing_with(500).await, (false, None));
    }

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
