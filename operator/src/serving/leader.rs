//! The leader Lease: every replica serves admission and builds its snapshot, but only the one
//! holding the Lease writes the webhook configurations, status, events and reports. The
//! election follows client-go's, and is written here because kube-lease-manager, the only
//! election crate for kube 5, renews, takes over and releases with unconditional patches and
//! judges expiry by comparing the holder's `renewTime` with the local clock:
//! - every change of the Lease is a replace carrying the resourceVersion it was read at, so of
//!   two replicas racing (a takeover and a renewal, a release and a takeover) the later write
//!   fails with a conflict instead of landing;
//! - another holder's Lease has expired only once this process has seen it unchanged for its
//!   duration, on its own monotonic clock, whatever the clocks of the nodes say;
//! - the holder leads until the renew deadline (two thirds of the duration) after it sent the
//!   last renewal that landed, and its writes stop there ([`Fence`]).

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::fence::Fence;

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
    fn duration(&self) -> Duration {
        Duration::from_secs(self.duration_seconds)
    }

    /// How long after it sent its last renewal that landed a holder stops leading: two thirds
    /// of the duration (client-go's RenewDeadline, below LeaseDuration). The last third is
    /// what a write sent just before the deadline has to reach the API server before another
    /// replica may take the Lease over.
    pub fn renew_deadline(&self) -> Duration {
        Duration::from_millis(self.duration_seconds * 2000 / 3)
    }

    /// How often a replica reads the Lease and, holding it, renews it: a sixth of the
    /// duration (client-go's RetryPeriod), so a holder tries about four times before its
    /// renew deadline.
    fn retry_period(&self) -> Duration {
        Duration::from_millis(self.duration_seconds * 1000 / 6).max(Duration::from_millis(250))
    }
}

/// A version of the Lease and when this process first saw it (client-go's observed record and
/// time): another replica's hold expires its duration after that instant, unless the Lease
/// changes meanwhile.
#[derive(Debug)]
struct Observed {
    version: String,
    at: Instant,
}

/// What one round of the election found.
#[derive(Debug, PartialEq)]
enum Round {
    /// This replica holds the Lease and leads until this instant.
    Leads(Instant),
    /// Another replica holds the Lease, or won the race to it.
    Follows,
}

/// One replica's side of the election.
struct Elector {
    leases: Api<Lease>,
    config: LeaseConfig,
    observed: Option<Observed>,
    /// The Lease as this replica last wrote it, while it holds it.
    written: Option<Lease>,
}

impl Elector {
    fn new(client: Client, config: LeaseConfig) -> Self {
        Self {
            leases: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            written: None,
        }
    }

    /// Reads the Lease, and takes or renews it if it is free, expired or this replica's.
    async fn round(&mut self) -> Result<Round, kube::Error> {
        let Some(mut lease) = self.leases.get_opt(&self.config.name).await? else {
            return self.create().await;
        };
        let now = Instant::now();
        let version = lease.metadata.resource_version.clone().unwrap_or_default();
        if self.observed.as_ref().is_none_or(|o| o.version != version) {
            self.observed = Some(Observed { version, at: now });
        }
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
        let ours = holder == Some(self.config.identity.as_str());
        if holder.is_some() && !ours {
            self.written = None;
            let duration = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map_or(self.config.duration(), Duration::from_secs);
            let seen = self.observed.as_ref().map_or(now, |o| o.at);
            if now < seen + duration {
                return Ok(Round::Follows);
            }
        }
        let stamp = MicroTime(Timestamp::now());
        if !ours {
            spec.acquire_time = Some(stamp.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = Some(self.config.identity.clone());
        spec.renew_time = Some(stamp);
        spec.lease_duration_seconds = Some(self.duration_field());
        // The replace carries the resourceVersion read above: if the Lease changed since, it
        // fails and this replica does not lead.
        let sent = Instant::now();
        let written = self
            .leases
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await;
        self.landed(written, sent)
    }

    /// Creates the Lease, held by this replica; if another replica created it first, follows.
    async fn create(&mut self) -> Result<Round, kube::Error> {
        let stamp = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                acquire_time: Some(stamp.clone()),
                renew_time: Some(stamp),
                lease_duration_seconds: Some(self.duration_field()),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        let sent = Instant::now();
        let created = self.leases.create(&PostParams::default(), &lease).await;
        self.landed(created, sent)
    }

    fn duration_field(&self) -> i32 {
        i32::try_from(self.config.duration_seconds).unwrap_or(i32::MAX)
    }

    /// Notes the answer to a write of the Lease sent at `sent`: once it landed, this replica
    /// leads until the renew deadline after `sent`; a conflict means another wrote first.
    fn landed(
        &mut self,
        written: Result<Lease, kube::Error>,
        sent: Instant,
    ) -> Result<Round, kube::Error> {
        match written {
            Ok(lease) => {
                self.observed = lease
                    .metadata
                    .resource_version
                    .clone()
                    .map(|version| Observed {
                        version,
                        at: Instant::now(),
                    });
                self.written = Some(lease);
                Ok(Round::Leads(sent + self.config.renew_deadline()))
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                self.written = None;
                Ok(Round::Follows)
            }
            Err(error) => Err(error),
        }
    }

    /// Hands the Lease over (no holder, expiring a second from now), only if it is still as
    /// this replica last wrote it: a replica that took it over meanwhile keeps it.
    async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(mut lease) = self.written.take() else {
            return Ok(());
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = None;
        spec.acquire_time = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        spec.lease_duration_seconds = Some(1);
        match self
            .leases
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => {
                debug!(lease = %self.config.name, "the leader lease changed since this replica last renewed it; left to its new holder");
                Ok(())
            }
            Err(error) => Err(error),
        }
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
    /// The fence of the leader's writes, open while this replica leads.
    pub fence: Fence,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Election {
    /// Starts electing with `config`: contends for the Lease until [`Election::stop`].
    pub fn start(client: Client, config: LeaseConfig) -> Self {
        let (leading, leadership) = watch::channel(false);
        let fence = Fence::default();
        let (stop, stopped) = oneshot::channel();
        let elector = Elector::new(client, config);
        let task = tokio::spawn(run(elector, fence.clone(), leading, stopped));
        Self {
            leadership,
            fence,
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

/// Runs rounds of the election every retry period, opening the fence and saying `leading`
/// while this replica holds the Lease, until `stopped`; then releases it.
async fn run(
    mut elector: Elector,
    fence: Fence,
    leading: watch::Sender<bool>,
    mut stopped: oneshot::Receiver<()>,
) {
    let config = elector.config.clone();
    let period = config.retry_period();
    let mut until: Option<Instant> = None;
    let mut lost = false;
    let mut next_round = Instant::now();
    loop {
        let leads = until.is_some_and(|u| u > Instant::now());
        match until {
            Some(u) if leads => fence.open_until(u),
            _ => fence.close(),
        }
        if leading.send_replace(leads) != leads {
            if leads {
                info!(identity = %config.identity, lease = %config.name, "acquired the leader lease; writing status");
            } else if lost {
                info!(identity = %config.identity, lease = %config.name, "lost the leader lease; no longer writing status");
            } else {
                warn!(identity = %config.identity, lease = %config.name, renew_deadline_s = config.renew_deadline().as_secs_f64(), "cannot renew the leader lease; no longer writing status or webhook configurations");
            }
        }
        let deadline = until.unwrap_or(next_round);
        tokio::select! {
            _ = &mut stopped => break,
            // The renew deadline passed: loop to step down.
            () = tokio::time::sleep_until(deadline), if leads => continue,
            () = tokio::time::sleep_until(next_round) => {}
        }
        next_round = Instant::now() + period;
        tokio::select! {
            _ = &mut stopped => break,
            // Stepping down never waits on the API server.
            () = tokio::time::sleep_until(deadline), if leads => continue,
            round = tokio::time::timeout(period, elector.round()) => match round {
                Ok(Ok(Round::Leads(deadline))) => (until, lost) = (Some(deadline), false),
                Ok(Ok(Round::Follows)) => (until, lost) = (None, true),
                Ok(Err(error)) if leads => warn!(%error, lease = %config.name, "cannot renew the leader lease"),
                Ok(Err(error)) => debug!(%error, lease = %config.name, "cannot read or take the leader lease"),
                Err(_) => debug!(lease = %config.name, "reading or writing the leader lease timed out"),
            },
        }
    }
    fence.close();
    leading.send_replace(false);
    if let Err(error) = elector.release().await {
        warn!(%error, lease = %config.name, "cannot release the leader lease; another replica takes it once it expires");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    use futures::future::BoxFuture;
    use http::{Method, Request, Response};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Patch, PatchParams};
    use kube::client::{Body, ClientBuilder};
    use serde_json::{Value, json};

    use super::*;

    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/n/leases";

    /// An API server holding Leases as kube-apiserver does (a replace whose resourceVersion is
    /// not the stored one fails with 409), and taking every other write as landed.
    #[derive(Clone, Default)]
    struct Server {
        leases: Arc<Mutex<HashMap<String, Value>>>,
        version: Arc<Mutex<u64>>,
        /// Every write that was not to a Lease, as `<replica> <method> <path>`.
        landed: Arc<Mutex<Vec<String>>>,
    }

    /// One replica's connection to the [`Server`]; while `cut`, its requests are never answered.
    #[derive(Clone)]
    struct Connection {
        server: Server,
        replica: &'static str,
        cut: Arc<AtomicBool>,
    }

    fn reply(code: u16, body: Value) -> Response<Body> {
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap()
    }

    fn status(code: u16, reason: &str) -> Response<Body> {
        reply(
            code,
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                   "message": reason, "reason": reason, "code": code}),
        )
    }

    impl Server {
        fn answer(
            &self,
            replica: &str,
            method: &Method,
            path: &str,
            body: Value,
        ) -> Response<Body> {
            let Some(rest) = path.strip_prefix(LEASES) else {
                self.landed
                    .lock()
                    .unwrap()
                    .push(format!("{replica} {method} {path}"));
                return reply(
                    200,
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
                );
            };
            let name = rest.trim_start_matches('/');
            let mut leases = self.leases.lock().unwrap();
            let stored = |mut lease: Value| {
                let mut version = self.version.lock().unwrap();
                *version += 1;
                lease["metadata"]["resourceVersion"] = json!(version.to_string());
                lease
            };
            match *method {
                Method::GET => match leases.get(name) {
                    Some(lease) => reply(200, lease.clone()),
                    None => status(404, "NotFound"),
                },
                Method::POST => {
                    let name = body["metadata"]["name"].as_str().unwrap().to_string();
                    if leases.contains_key(&name) {
                        return status(409, "AlreadyExists");
                    }
                    let lease = stored(body);
                    leases.insert(name, lease.clone());
                    reply(201, lease)
                }
                Method::PUT => {
                    // As kube-apiserver: a replace without a resourceVersion is unconditional.
                    let current = leases
                        .get(name)
                        .map(|l| l["metadata"]["resourceVersion"].clone());
                    let expected = &body["metadata"]["resourceVersion"];
                    if !expected.is_null() && current.as_ref() != Some(expected) {
                        return status(409, "Conflict");
                    }
                    let lease = stored(body);
                    leases.insert(name.to_string(), lease.clone());
                    reply(200, lease)
                }
                _ => status(405, "MethodNotAllowed"),
            }
        }

        fn holder(&self) -> Option<String> {
            self.leases
                .lock()
                .unwrap()
                .get("l")
                .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        }

        fn landed(&self) -> Vec<String> {
            self.landed.lock().unwrap().clone()
        }
    }

    impl tower_service::Service<Request<Body>> for Connection {
        type Response = Response<Body>;
        type Error = std::convert::Infallible;
        type Future = BoxFuture<'static, Result<Response<Body>, Self::Error>>;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: Request<Body>) -> Self::Future {
            let this = self.clone();
            Box::pin(async move {
                if this.cut.load(Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                let (parts, body) = request.into_parts();
                let bytes = body.collect_bytes().await.unwrap();
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                Ok(this
                    .server
                    .answer(this.replica, &parts.method, parts.uri.path(), body))
            })
        }
    }

    /// A replica: its election, and the fenced client its leader-only writers use.
    struct Replica {
        election: Election,
        writer: Client,
        cut: Arc<AtomicBool>,
    }

    fn replica(server: &Server, identity: &'static str) -> Replica {
        let cut = Arc::new(AtomicBool::new(false));
        let connection = Connection {
            server: server.clone(),
            replica: identity,
            cut: cut.clone(),
        };
        let election = Election::start(
            Client::new(connection.clone(), "n"),
            LeaseConfig {
                name: "l".into(),
                namespace: "n".into(),
                duration_seconds: 15,
                identity: identity.into(),
            },
        );
        let writer = ClientBuilder::new(connection, "n")
            .with_layer(&election.fence.layer())
            .build();
        Replica {
            election,
            writer,
            cut,
        }
    }

    /// A leader-only write (any object: the fence does not look at what is written).
    async fn write(client: &Client) -> Result<(), kube::Error> {
        Api::<ConfigMap>::namespaced(client.clone(), "n")
            .patch(
                "x",
                &PatchParams::apply("celgate").force(),
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap"})),
            )
            .await
            .map(drop)
    }

    #[test]
    fn the_deadline_leaves_a_third_of_the_duration_and_rounds_come_every_sixth() {
        let config = |duration_seconds| LeaseConfig {
            name: "l".into(),
            namespace: "n".into(),
            duration_seconds,
            identity: "i".into(),
        };
        assert_eq!(config(15).renew_deadline(), Duration::from_secs(10));
        assert_eq!(config(15).retry_period(), Duration::from_millis(2500));
        assert!(config(2).renew_deadline() < Duration::from_secs(2));
        assert_eq!(config(1).retry_period(), Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_leader_writes_nothing_once_its_renew_deadline_passed_and_another_takes_over()
    {
        let server = Server::default();
        let a = replica(&server, "a");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(server.holder().as_deref(), Some("a"));
        assert!(*a.election.leadership.borrow());
        write(&a.writer).await.expect("the leader writes");
        let b = replica(&server, "b");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            !*b.election.leadership.borrow(),
            "b follows a renewing leader"
        );

        // a stalls: nothing it sends reaches the API server or comes back. A write it sends
        // now is held by the network, and abandoned at its renew deadline.
        a.cut.store(true, Ordering::SeqCst);
        let stalled_at = Instant::now();
        let in_flight = tokio::spawn({
            let writer = a.writer.clone();
            async move { write(&writer).await }
        });
        let cut_off = tokio::time::timeout(Duration::from_secs(20), in_flight)
            .await
            .expect("the in-flight write ends")
            .unwrap()
            .expect_err("abandoned at the deadline");
        assert!(cut_off.to_string().contains("renew deadline"), "{cut_off}");
        assert!(stalled_at.elapsed() <= Duration::from_secs(10));

        // b takes over once it has seen the Lease unchanged for its duration.
        let waited = Instant::now();
        while server.holder().as_deref() != Some("b") {
            assert!(
                waited.elapsed() < Duration::from_secs(30),
                "b never took over"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(stalled_at.elapsed() >= Duration::from_secs(15));
        assert!(*b.election.leadership.borrow());

        // Whatever a's writers still believe, the fence refuses their writes before they are
        // sent, and none lands once b holds the Lease.
        a.cut.store(false, Ordering::SeqCst);
        let refused = write(&a.writer).await.expect_err("a no longer leads");
        assert!(
            refused
                .to_string()
                .contains("does not hold the leader Lease"),
            "{refused}"
        );
        write(&b.writer).await.expect("the new leader writes");
        assert_eq!(
            server.landed(),
            [
                "a PATCH /api/v1/namespaces/n/configmaps/x",
                "b PATCH /api/v1/namespaces/n/configmaps/x"
            ]
        );
        b.election.stop().await;
        a.election.stop().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_releasing_ex_leader_leaves_the_lease_to_its_new_holder() {
        let server = Server::default();
        let a = replica(&server, "a");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let b = replica(&server, "b");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(server.holder().as_deref(), Some("a"));

        // a is cut off until b has taken the Lease; then a stops before it read the Lease
        // again, and releases the Lease it last renewed.
        a.cut.store(true, Ordering::SeqCst);
        let waited = Instant::now();
        while server.holder().as_deref() != Some("b") {
            assert!(
                waited.elapsed() < Duration::from_secs(30),
                "b never took over"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        a.cut.store(false, Ordering::SeqCst);
        a.election.stop().await;
        assert_eq!(
            server.holder().as_deref(),
            Some("b"),
            "a's release cleared b's hold"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(*b.election.leadership.borrow());

        // b's own release hands the Lease over.
        b.election.stop().await;
        assert_eq!(server.holder(), None);
    }
}
