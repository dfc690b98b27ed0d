//! The leader Lease: every replica serves admission and builds its snapshot, but only the one
//! holding the Lease writes status and events. Election is kube-lease-manager's (server-side
//! apply on a `coordination.k8s.io/v1` Lease in celgate's namespace); this module keeps it
//! running through API errors and publishes whether this replica leads right now.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::{oneshot, watch};
use tracing::{info, warn};

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
    /// How long before expiry the holder renews: a third of the duration, at least a second.
    /// It is also the clock skew between nodes the election tolerates.
    fn grace_seconds(&self) -> u64 {
        (self.duration_seconds / 3).max(1)
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
        loop {
            let now = *state.borrow_and_update();
            if leading.send_replace(now) != now {
                if now {
                    info!(identity = %config.identity, lease = %config.name, "acquired the leader lease; writing status");
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
                    if changed.is_err() {
                        // The manager's task ended (it only does on an error): not leading.
                        leading.send_replace(false);
                        warn!(lease = %config.name, "the leader election stopped; starting it again");
                        break;
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
        assert_eq!(config(15).grace_seconds(), 5);
        assert_eq!(config(2).grace_seconds(), 1);
    }

    #[test]
    fn the_default_identity_names_the_process() {
        let identity = default_identity();
        assert!(identity.ends_with(&format!("-{}", std::process::id())));
        assert!(identity.len() > 1 + std::process::id().to_string().len());
    }
}
