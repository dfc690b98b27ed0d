//! The leader Lease: every replica serves admission and builds its snapshot, but only the one
//! holding the Lease writes status and events. Election is kube-lease-manager's (server-side
//! apply on a `coordination.k8s.io/v1` Lease in celgate's namespace); this module keeps it
//! running through API errors and publishes whether this replica leads right now. A holder
//! that cannot renew the Lease steps down after the renew deadline, before the Lease expires
//! and another replica may take it (client-go's RenewDeadline): kube-lease-manager keeps
//! saying it holds the Lease while its renewals fail, so this module reads the Lease itself.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::{oneshot, watch};
use tracing::{debug, info, warn};

use crate::retry::{self, Backoff};

/// How long a stopping leader waits for the Lease to be released.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Which Lease to hold, and as whom.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// Name of the Lease.
    pub name: String,
    /// Namespace of the Lease (celgate's own by default).
    pub namespace: String,
    /// How long a holder keeps the Lease without renewing it, in seconds.
    pub duration_seconds: u64,
    /// This replica's identity in the Lease (the pod name, or host name and process id).
    pub identity: String,
}

impl LeaseConfig {
    /// How long before expiry the holder renews: two thirds of the duration (so it renews every
    /// third of it, and one failed renewal is not yet fatal), at least a second and less than
    /// the duration.
    fn grace_seconds(&self) -> u64 {
        (self.duration_seconds * 2 / 3).clamp(1, self.duration_seconds.saturating_sub(1).max(1))
    }

    /// How long after it last saw its renewal land a holder stops leading: two thirds of the
    /// duration (client-go's RenewDeadline, below LeaseDuration). The last third is the clock
    /// skew between nodes the election tolerates.
    pub fn renew_deadline(&self) -> Duration {
        Duration::from_millis(self.duration_seconds * 2000 / 3)
    }

    /// How often the holder reads the Lease to learn that its renewals still land: half the
    /// renewal interval, so the renewal it sees is never older than the deadline allows.
    fn check_interval(&self) -> Duration {
        Duration::from_millis(self.duration_seconds * 1000 / 6).max(Duration::from_millis(250))
    }
}

/// Until when this replica may act as leader: the renew deadline after this process last saw
/// its renewal land (the Lease naming it with a `renewTime` it had not seen before), judged on
/// its own monotonic clock as client-go judges expiry, so a clock skew between nodes cannot
/// stretch it; nothing while the Lease names another holder or was not read yet.
#[derive(Debug, Default)]
struct Tenure {
    /// The last renewal seen, and when this process saw it.
    renewal: Option<(MicroTime, Instant)>,
}

impl Tenure {
    /// Notes the Lease as the API server holds it `now` (`None`: it does not exist).
    fn observe(&mut self, lease: Option<&Lease>, identity: &str, now: Instant) {
        let spec = lease.and_then(|l| l.spec.as_ref());
        let holder = spec.and_then(|s| s.holder_identity.as_deref());
        self.renewal = match spec.and_then(|s| s.renew_time.as_ref()) {
            Some(renewed) if holder == Some(identity) => match self.renewal.take() {
                Some((seen, at)) if seen == *renewed => Some((seen, at)),
                _ => Some((renewed.clone(), now)),
            },
            _ => None,
        };
    }

    /// How long this replica may still lead at `now`, `deadline` after the renewal it last
    /// saw: zero once that has passed.
    fn remaining(&self, now: Instant, deadline: Duration) -> Duration {
        self.renewal
            .as_ref()
            .map(|(_, at)| (*at + deadline).saturating_duration_since(now))
            .unwrap_or(Duration::ZERO)
    }
}

/// The identity of this replica when no pod name is given: `<host name>-<process id>`.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "celgate".to_string());
    format!("{host}-{}", std::process::id())
}

/// Whether this replica holds the Lease now; `false` until it is acquired and as soon as it is
/// lost.
pub type Leadership = watch::Receiver<bool>;

/// A running election.
pub struct Election {
    /// Whether this replica leads.
    pub leadership: Leadership,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Election {
    /// Starts electing with `config`: contends for the Lease until [`Election::stop`], starting
    /// again with growing delays when the Lease cannot be read or created.
    pub fn start(client: Client, config: LeaseConfig) -> Self {
        let (leading, leadership) = watch::channel(false);
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(run(client, config, leading, stopped));
        Self {
            leadership,
            stop,
            task,
        }
    }

    /// Stops contending and releases the Lease if this replica holds it (waiting at most
    /// two seconds), so another replica takes over without waiting for it to expire.
    pub async fn stop(self) {
        // An error means the task already ended, and then there is nothing to release.
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(RELEASE_TIMEOUT, self.task).await;
    }
}

async fn build(client: &Client, config: &LeaseConfig) -> kube_lease_manager::Result<LeaseManager> {
    LeaseManagerBuilder::new(client.clone(), config.name.clone())
        .with_namespace(config.namespace.clone())
        .with_identity(config.identity.clone())
        .with_duration(config.duration_seconds)
        .with_grace(config.grace_seconds())
        .with_field_manager(format!("celgate-{}", config.identity))
        .build()
        .await
}

async fn run(
    client: Client,
    config: LeaseConfig,
    leading: watch::Sender<bool>,
    mut stopped: oneshot::Receiver<()>,
) {
    let mut retry = Backoff::new(retry::CLUSTER);
    let leases = Api::<Lease>::namespaced(client.clone(), &config.namespace);
    let deadline = config.renew_deadline();
    loop {
        let manager = tokio::select! {
            _ = &mut stopped => return,
            built = build(&client, &config) => built,
        };
        let manager = match manager {
            Ok(manager) => manager,
            Err(error) => {
                let delay = retry.next_delay();
                warn!(%error, lease = %config.name, namespace = %config.namespace, retry_in_s = delay.as_secs_f64(), "cannot start the leader election; this replica does not write status until it can");
                tokio::select! {
                    _ = &mut stopped => return,
                    () = tokio::time::sleep(delay) => continue,
                }
            }
        };
        retry.reset();
        let (mut state, task) = manager.watch().await;
        let mut tenure = Tenure::default();
        let mut next_check = tokio::time::Instant::now();
        loop {
            let held = *state.borrow_and_update();
            let remaining = tenure.remaining(Instant::now(), deadline);
            let now = held && !remaining.is_zero();
            if leading.send_replace(now) != now {
                if now {
                    info!(identity = %config.identity, lease = %config.name, "acquired the leader lease; writing status");
                } else if held {
                    warn!(identity = %config.identity, lease = %config.name, renew_deadline_s = deadline.as_secs_f64(), "cannot renew the leader lease; no longer writing status or webhook configurations");
                } else {
                    info!(identity = %config.identity, lease = %config.name, "lost the leader lease; no longer writing status");
                }
            }
            tokio::select! {
                _ = &mut stopped => {
                    leading.send_replace(false);
                    // Closing the channel makes the manager release the Lease and end.
                    drop(state);
                    let _ = task.await;
                    return;
                }
                changed = state.changed() => {
                    next_check = tokio::time::Instant::now();
                    if changed.is_err() {
                        // The manager's task ended (it only does on an error): not leading.
                        leading.send_replace(false);
                        warn!(lease = %config.name, "the leader election stopped; starting it again");
                        break;
                    }
                }
                // The renew deadline passed: loop to step down.
                () = tokio::time::sleep(remaining), if now => {}
                // While the manager holds the Lease, read it: the holder leads only until the
                // renew deadline after the last renewal the Lease records.
                () = tokio::time::sleep_until(next_check), if held => {
                    let interval = config.check_interval();
                    next_check = tokio::time::Instant::now() + interval;
                    // Never read past the deadline: stepping down must not wait on the API server.
                    let wait = if now { remaining.min(interval) } else { interval };
                    match tokio::time::timeout(wait, leases.get_opt(&config.name)).await {
                        Ok(Ok(lease)) => tenure.observe(lease.as_ref(), &config.identity, Instant::now()),
                        Ok(Err(error)) => debug!(%error, lease = %config.name, "cannot read the leader lease"),
                        Err(_) => debug!(lease = %config.name, "reading the leader lease timed out"),
                    }
                }
            }
        }
        let _ = task.await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grace_is_a_third_of_the_duration_and_at_least_a_second() {
        let config = |duration_seconds| LeaseConfig {
            name: "l".into(),
            namespace: "n".into(),
            duration_seconds,
            identity: "i".into(),
        };
        assert_eq!(config(15).grace_seconds(), 10);
        assert_eq!(config(3).grace_seconds(), 2);
        assert_eq!(config(2).grace_seconds(), 1);
        // The holder stops leading before the Lease expires, and after a renewal it missed.
        assert_eq!(config(15).renew_deadline(), Duration::from_secs(10));
        assert!(config(2).renew_deadline() < Duration::from_secs(2));
        assert!(config(2).renew_deadline() > Duration::from_secs(1));
        // It reads the Lease twice per renewal.
        assert_eq!(config(15).check_interval(), Duration::from_millis(2500));
    }

    fn lease(holder: &str, renewed_second: i64) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "l", "namespace": "n"},
            "spec": {"holderIdentity": holder,
                     "renewTime": format!("2026-01-01T00:00:{renewed_second:02}.000000Z")},
        }))
        .unwrap()
    }

    #[test]
    fn a_holder_leads_until_the_renew_deadline_after_it_last_saw_its_renewal_land() {
        let deadline = Duration::from_secs(10);
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut tenure = Tenure::default();
        assert_eq!(
            tenure.remaining(at(0), deadline),
            Duration::ZERO,
            "not read yet"
        );

        // Its renewal is seen at 0 s: it leads until 10 s, whatever renewTime says (a
        // renewTime far in the past or future, from a skewed clock, changes nothing).
        tenure.observe(Some(&lease("me", 1)), "me", at(0));
        assert_eq!(tenure.remaining(at(4), deadline), Duration::from_secs(6));
        // Read again with no renewal since: the deadline still counts from 0 s.
        tenure.observe(Some(&lease("me", 1)), "me", at(6));
        assert_eq!(tenure.remaining(at(6), deadline), Duration::from_secs(4));
        assert_eq!(tenure.remaining(at(11), deadline), Duration::ZERO);

        // A new renewal seen at 12 s: leads again until 22 s.
        tenure.observe(Some(&lease("me", 30)), "me", at(12));
        assert_eq!(tenure.remaining(at(12), deadline), Duration::from_secs(10));
        // Another holder, or no Lease: not leading.
        tenure.observe(Some(&lease("other", 31)), "me", at(13));
        assert_eq!(tenure.remaining(at(13), deadline), Duration::ZERO);
        tenure.observe(Some(&lease("me", 32)), "me", at(14));
        tenure.observe(None, "me", at(15));
        assert_eq!(tenure.remaining(at(15), deadline), Duration::ZERO);
    }

    #[test]
    fn the_default_identity_names_the_process() {
        let identity = default_identity();
        assert!(identity.ends_with(&format!("-{}", std::process::id())));
        assert!(identity.len() > 1 + std::process::id().to_string().len());
    }
}
