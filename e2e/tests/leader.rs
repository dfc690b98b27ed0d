//! One writer of status: two celgate processes on one control plane (both serve admission), only
//! the one holding the leader Lease writes status and events. When the leader dies without
//! releasing the Lease (SIGKILL), a policy changed meanwhile gets its status from the other
//! process once the Lease has expired. A leader cut off from the API server (a black hole in
//! front of it, for that replica only) stops leading before its Lease expires, so two replicas
//! never write at once.
//!
//! Who wrote is read from the outside: the Lease's holder, the `reportingInstance` of the events
//! about the policy (celgate's recorder reports its identity), and each process's own log.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use celgate_e2e::demo::CELGATE_API;
use celgate_e2e::{Celgate, Cluster, free_port, policies_api, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// The Lease celgate holds (its default name, in its default namespace).
const LEASE: &str = "celgate-leader";
const NAMESPACE: &str = "celgate-system";
/// The Lease duration the processes run with, in seconds: short, so the test does not wait long.
const LEASE_SECONDS: u64 = 6;
const POLICY: &str = "leader-policy";
/// What celgate logs when it acquires the Lease.
const ACQUIRED: &str = "acquired the leader lease";

/// Starts `identity` with the short Lease, reaching the API server as `kubeconfig` says.
fn spawn_through(cluster: &Cluster, kubeconfig: &std::path::Path, identity: &str) -> Celgate {
    let duration = LEASE_SECONDS.to_string();
    Celgate::spawn_kubeconfig(
        cluster,
        kubeconfig,
        free_port(),
        identity,
        &[
            "--identity",
            identity,
            "--lease-duration-seconds",
            &duration,
        ],
        "info",
    )
}

fn spawn(cluster: &Cluster, identity: &str) -> Celgate {
    spawn_through(cluster, &cluster.kubeconfig, identity)
}

/// Waits (60 s at most) until `identity` holds the Lease.
async fn wait_holder(client: &kube::Client, identity: &str) {
    wait_for(
        &format!("{identity} to hold the Lease"),
        Duration::from_secs(60),
        || async { (holder(client).await.as_deref() == Some(identity)).then_some(()) },
    )
    .await;
}

async fn holder(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), NAMESPACE)
        .get(LEASE)
        .await
        .ok()?
        .spec?
        .holder_identity
}

fn policy(expression: &str) -> String {
    format!(
        "apiVersion: {CELGATE_API}\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {POLICY}\nspec:\n  matchConstraints:\n    resourceRules:\n    - {{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}}\n  validations:\n  - expression: \"{expression}\"\n"
    )
}

/// Waits (up to `limit`) until the policy's status describes generation `generation`; returns
/// its `typeChecking`.
async fn wait_status(
    api: &Api<kube::api::DynamicObject>,
    generation: i64,
    limit: Duration,
) -> Value {
    wait_for(
        &format!("the status of generation {generation}"),
        limit,
        || async {
            let object = api.get(POLICY).await.ok()?;
            let status = object.data.get("status")?;
            (object.metadata.generation == Some(generation)
                && status["observedGeneration"].as_i64() == Some(generation))
            .then(|| status["typeChecking"].clone())
        },
    )
    .await
}

/// The `reportingInstance` of every event about the policy.
async fn reporters(client: &kube::Client) -> Vec<String> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("cannot list events: {e}"))
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(POLICY))
        .map(|e| e.reporting_instance.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_status_and_the_other_takes_over() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    let policies = policies_api(&client, CELGATE_API);

    // `a` starts first and leads; `b` starts once the Lease is `a`'s.
    let mut a = spawn(&cluster, "celgate-a");
    a.wait_ready().await;
    wait_holder(&client, "celgate-a").await;
    let b = spawn(&cluster, "celgate-b");
    b.wait_ready().await;

    // Generation 1, written by the leader only.
    cluster.apply(&policy("object.spec.replica > 1"));
    let first = wait_status(&policies, 1, Duration::from_secs(60)).await;
    assert!(
        first.to_string().contains("undefined field 'replica'"),
        "generation 1 is not type checked: {first}"
    );
    let before = wait_for(
        "events about the policy",
        Duration::from_secs(30),
        || async {
            let r = reporters(&client).await;
            (!r.is_empty()).then_some(r)
        },
    )
    .await;
    assert!(
        before.iter().all(|r| r == "celgate-a"),
        "events about the policy come from other replicas than the leader: {before:?}"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("celgate-a"));
    assert!(
        a.logs().contains(ACQUIRED),
        "celgate-a never logged leading"
    );
    assert!(
        !b.logs().contains(ACQUIRED),
        "celgate-b leads while celgate-a holds the Lease:\n{}",
        b.logs()
    );

    // The leader dies without releasing the Lease; the policy changes while nobody leads.
    a.kill();
    let killed = Instant::now();
    let fixed: Value = serde_saphyr::from_str(&policy("object.spec.replicas > 1"))
        .unwrap_or_else(|e| panic!("policy fixture: {e}"));
    policies
        .patch(
            POLICY,
            &PatchParams::apply("leader-e2e").force(),
            &Patch::Apply(&fixed),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot change the policy: {e}"));

    // The other writes it once the Lease expired: within the lease duration after the last
    // renewal, bounded here with a generous factor for a loaded machine.
    let limit = Duration::from_secs(LEASE_SECONDS * 4 + 10);
    let second = wait_status(&policies, 2, limit).await;
    let took = killed.elapsed();
    println!(
        "status of the change written {:.1} s after the leader was killed (lease {LEASE_SECONDS} s)",
        took.as_secs_f64()
    );
    assert!(
        second.get("expressionWarnings").is_none_or(Value::is_null),
        "generation 2 still has warnings: {second}"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("celgate-b"));
    assert!(
        b.logs().contains(ACQUIRED),
        "celgate-b wrote status without logging that it leads"
    );
    let after = wait_for(
        "an event from celgate-b",
        Duration::from_secs(30),
        || async {
            let r = reporters(&client).await;
            r.iter().any(|r| r == "celgate-b").then_some(r)
        },
    )
    .await;
    assert!(
        after.iter().all(|r| r == "celgate-a" || r == "celgate-b"),
        "events from unknown reporters: {after:?}"
    );
}

/// A TCP proxy in front of the API server for one replica. Once cut it is a black hole: bytes
/// either way are dropped and connections stay open, new ones are accepted and never answered
/// (a partition, which is worse than a refusal: requests hang instead of failing).
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("proxy: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("proxy: {e}"))
            .port();
        let cut = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let cut = cut.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let cut = cut.clone();
                    tokio::spawn(async move {
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                            return;
                        };
                        let (from_client, to_client) = client.into_split();
                        let (from_server, to_server) = server.into_split();
                        tokio::join!(
                            pump(from_client, to_server, cut.clone()),
                            pump(from_server, to_client, cut)
                        );
                    });
                }
            }
        });
        Proxy { port, cut, task }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies `from` to `to` until either ends, dropping the bytes while `cut` is set.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, cut: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                if !cut.load(Ordering::SeqCst) {
                    let _ = to.shutdown().await;
                }
                return;
            }
            Ok(n) if !cut.load(Ordering::SeqCst) => {
                if to.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
        }
    }
}

/// The value of the gauge `celgate_leader` a replica reports.
fn leading(celgate: &Celgate) -> Option<bool> {
    celgate
        .metrics()
        .lines()
        .find_map(|l| l.strip_prefix("celgate_leader "))
        .map(|v| v.trim() == "1")
}

/// The renewTime of the Lease, as wall-clock time.
async fn renewed_at(client: &kube::Client) -> SystemTime {
    let lease = Api::<Lease>::namespaced(client.clone(), NAMESPACE)
        .get(LEASE)
        .await
        .unwrap_or_else(|e| panic!("the Lease: {e}"));
    let renewed = lease
        .spec
        .and_then(|s| s.renew_time)
        .unwrap_or_else(|| panic!("the Lease has no renewTime"));
    SystemTime::UNIX_EPOCH + Duration::from_micros(renewed.0.as_microsecond().unsigned_abs())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_from_the_api_server_stops_leading_before_its_lease_expires() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    let api_port: u16 = std::fs::read_to_string(cluster.dir().join("apiserver-port"))
        .unwrap_or_else(|e| panic!("apiserver-port: {e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("apiserver-port: {e}"));
    let proxy = Proxy::start(api_port).await;
    let kubeconfig = cluster.dir().join("through-proxy.kubeconfig");
    let text = std::fs::read_to_string(&cluster.kubeconfig)
        .unwrap_or_else(|e| panic!("kubeconfig: {e}"))
        .replace(
            &format!("https://127.0.0.1:{api_port}"),
            &format!("https://127.0.0.1:{}", proxy.port),
        );
    std::fs::write(&kubeconfig, text).unwrap_or_else(|e| panic!("kubeconfig: {e}"));

    let a = spawn_through(&cluster, &kubeconfig, "celgate-a");
    a.wait_ready().await;
    wait_holder(&client, "celgate-a").await;
    let b = spawn(&cluster, "celgate-b");
    b.wait_ready().await;
    assert_eq!(leading(&a), Some(true));
    assert_eq!(leading(&b), Some(false));

    proxy.cut.store(true, Ordering::SeqCst);
    let cut = Instant::now();
    // The last renewal celgate-a made: the Lease is its until this plus the duration.
    let renewed = renewed_at(&client).await;
    let cut_after_renewal = SystemTime::now()
        .duration_since(renewed)
        .unwrap_or_default();
    let expires = renewed + Duration::from_secs(LEASE_SECONDS);
    let stepped_down = wait_for(
        "celgate-a to stop leading",
        Duration::from_secs(LEASE_SECONDS * 3),
        || async { (leading(&a) == Some(false)).then(SystemTime::now) },
    )
    .await;
    let stepped_down_after = cut.elapsed();
    assert!(
        stepped_down < expires,
        "celgate-a still led {:?} after its Lease expired",
        stepped_down.duration_since(expires).unwrap_or_default()
    );
    let margin = expires.duration_since(stepped_down).unwrap_or_default();
    wait_for(
        "celgate-b to take the Lease",
        Duration::from_secs(LEASE_SECONDS * 4),
        || async { (holder(&client).await.as_deref() == Some("celgate-b")).then_some(()) },
    )
    .await;
    let taken_over_after = cut.elapsed();
    assert!(
        a.logs().contains("cannot renew the leader lease"),
        "celgate-a did not say why it stopped leading:\n{}",
        a.logs()
    );

    // The partition heals: celgate-a finds the Lease held and does not lead again.
    proxy.cut.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(LEASE_SECONDS)).await;
    assert_eq!(
        leading(&a),
        Some(false),
        "celgate-a leads again\n--- a:\n{}\n--- b:\n{}",
        a.logs(),
        b.logs()
    );
    assert_eq!(holder(&client).await.as_deref(), Some("celgate-b"));
    println!(
        "leader: cut off {:.1} s after its last renewal, celgate-a stopped leading {:.1} s after the cut, \
         {:.1} s before its Lease would have expired (lease {LEASE_SECONDS} s); celgate-b took over {:.1} s after the cut",
        cut_after_renewal.as_secs_f64(),
        stepped_down_after.as_secs_f64(),
        margin.as_secs_f64(),
        taken_over_after.as_secs_f64()
    );
}
