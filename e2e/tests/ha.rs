//! HA and lifecycle, end to end: three celgate processes behind a real load balancer (Debian's
//! haproxy in TCP mode, health-checking `/readyz` over TLS), registered by the balancer's URL.
//! Creates go through kube-apiserver at 500/s, half of them denied by a fail-closed policy.
//!
//! 1. The Lease holder gets SIGTERM: its readiness goes false first, in-flight reviews finish,
//!    it exits within the grace period, and **no** admission fails.
//! 2. The next Lease holder gets SIGKILL: the failed admissions are counted and reported; no
//!    decision is ever wrong, and admission works again once the balancer has noticed.
//! 3. kube-apiserver is restarted under load: celgate's watches resume, and a policy changed
//!    after the restart is enforced (the time it took is reported).

// A test fails on the first thing that goes wrong.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use celgate_e2e::demo::CELGATE_API;
use celgate_e2e::{Celgate, Cluster, free_port, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::Semaphore;

const NAMESPACE: &str = "ha";
/// Creates per second sent through kube-apiserver.
const RATE: u64 = 500;
/// Requests in flight at most (kube-apiserver's default limit for mutating requests is 200).
const IN_FLIGHT: usize = 128;
const LEASE_SECONDS: &str = "6";
const SHUTDOWN_DELAY_SECONDS: u64 = 2;
const SHUTDOWN_GRACE_SECONDS: u64 = 10;
/// The text of the policy's denials.
const DENIED: &str =
    "ValidatingAdmissionPolicy 'ha-policy' with binding 'ha-binding' denied request";

/// The balancer: haproxy in front of the replicas, stopped on drop.
struct Balancer {
    child: Child,
    port: u16,
}

impl Balancer {
    fn start(dir: &std::path::Path, backends: &[(&str, u16)]) -> Self {
        let port = free_port();
        let servers: String = backends
            .iter()
            .map(|(name, p)| format!("  server {name} 127.0.0.1:{p}\n"))
            .collect();
        // TCP passthrough (the replicas terminate TLS with the certificate the API server
        // trusts); a replica whose /readyz fails once gets no new connections.
        let config = format!(
            "global\n  maxconn 4000\ndefaults\n  mode tcp\n  timeout connect 2s\n  timeout client 120s\n  timeout server 120s\n  option redispatch\n  retries 3\nfrontend celgate\n  bind 127.0.0.1:{port}\n  default_backend replicas\nbackend replicas\n  balance roundrobin\n  option httpchk GET /readyz\n  http-check expect status 200\n  default-server check check-ssl verify none inter 300ms fall 1 rise 2\n{servers}"
        );
        let path = dir.join("haproxy.cfg");
        std::fs::write(&path, config).unwrap_or_else(|e| panic!("cannot write {path:?}: {e}"));
        let log = std::fs::File::create(dir.join("haproxy.log")).expect("haproxy log");
        let binary = ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("haproxy");
        let child = Command::new(binary)
            .args(["-f", &path.to_string_lossy(), "-db"])
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start haproxy ({e}); `make deps` installs it (e2e/cluster/deps.sh)")
            });
        Balancer { child, port }
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(cluster: &Cluster, port: u16, name: &str, url: &str) -> Celgate {
    let (delay, grace) = (
        SHUTDOWN_DELAY_SECONDS.to_string(),
        SHUTDOWN_GRACE_SECONDS.to_string(),
    );
    Celgate::spawn_with(
        cluster,
        port,
        name,
        &[
            &format!("--webhook-url={url}"),
            "--identity",
            name,
            "--lease-duration-seconds",
            LEASE_SECONDS,
            "--shutdown-delay-seconds",
            &delay,
            "--shutdown-grace-seconds",
            &grace,
        ],
        "info",
    )
}

async fn holder(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "celgate-system")
        .get("celgate-leader")
        .await
        .ok()?
        .spec?
        .holder_identity
}

fn policy(denied_values: &str) -> String {
    format!(
        r#"apiVersion: {CELGATE_API}
kind: ValidatingAdmissionPolicy
metadata:
  name: ha-policy
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}
  validations:
  - expression: "!has(object.metadata.labels) || !('verdict' in object.metadata.labels) || !(object.metadata.labels['verdict'] in [{denied_values}])"
    message: denied by verdict
---
apiVersion: {CELGATE_API}
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: ha-binding
spec:
  policyName: ha-policy
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{kubernetes.io/metadata.name: {NAMESPACE}}}
"#
    )
}

fn config_map(name: String, verdict: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some([("verdict".to_string(), verdict.to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// What became of one create.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    /// Admitted when it should be, or denied by the policy when it should be.
    Correct,
    /// The webhook could not be called (the API server's "failed calling webhook").
    FailedAdmission(String),
    /// The opposite decision: admitted though denied by the policy, or denied otherwise.
    Wrong(String),
    /// The API server itself did not answer (it is restarting).
    ApiUnavailable(String),
}

struct Sample {
    /// When its answer came, from the start of the run: a request in flight when a replica
    /// stops belongs to that stop.
    at: Duration,
    outcome: Outcome,
}

fn classify(deny: bool, result: Result<ConfigMap, kube::Error>) -> Outcome {
    match (deny, result) {
        (false, Ok(_)) => Outcome::Correct,
        (true, Ok(_)) => Outcome::Wrong("admitted".into()),
        (true, Err(kube::Error::Api(s))) if s.message.contains(DENIED) => Outcome::Correct,
        (_, Err(kube::Error::Api(s))) if s.message.contains("failed calling webhook") => {
            Outcome::FailedAdmission(s.message)
        }
        (_, Err(kube::Error::Api(s))) if s.code >= 500 || s.code == 429 => {
            Outcome::ApiUnavailable(format!("{}: {}", s.code, s.message))
        }
        (_, Err(kube::Error::Api(s))) => Outcome::Wrong(format!("{}: {}", s.code, s.message)),
        (_, Err(other)) => Outcome::ApiUnavailable(other.to_string()),
    }
}

/// Sends creates at [`RATE`] from `start` for `length` (every other one labelled to be denied),
/// and returns what became of each.
async fn load(
    client: kube::Client,
    prefix: &'static str,
    start: Instant,
    length: Duration,
) -> Vec<Sample> {
    let api: Api<ConfigMap> = Api::namespaced(client, NAMESPACE);
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let mut ticks = tokio::time::interval(Duration::from_micros(1_000_000 / RATE));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut tasks = Vec::new();
    let mut i = 0u64;
    while start.elapsed() < length {
        ticks.tick().await;
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let api = api.clone();
        let deny = i % 2 == 1;
        let name = format!("{prefix}-{i}");
        i += 1;
        tasks.push(tokio::spawn(async move {
            let verdict = if deny { "deny" } else { "allow" };
            let result = api
                .create(&PostParams::default(), &config_map(name, verdict))
                .await;
            drop(slot);
            Sample {
                at: start.elapsed(),
                outcome: classify(deny, result),
            }
        }));
    }
    let mut samples = Vec::with_capacity(tasks.len());
    for task in tasks {
        samples.push(task.await.expect("a create task panicked"));
    }
    samples
}

/// Samples answered in `[from, to)` that did not come out correct.
fn failures(samples: &[Sample], from: Duration, to: Duration) -> Vec<(Duration, Outcome)> {
    samples
        .iter()
        .filter(|s| s.at >= from && s.at < to && s.outcome != Outcome::Correct)
        .map(|s| (s.at, s.outcome.clone()))
        .collect()
}

fn count(samples: &[Sample], from: Duration, to: Duration) -> usize {
    samples.iter().filter(|s| s.at >= from && s.at < to).count()
}

/// Waits until a dry-run create labelled `verdict` is denied by the policy; returns how long.
async fn until_denied(client: &kube::Client, verdict: &str, limit: Duration) -> Duration {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let start = Instant::now();
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let mut n = 0;
    wait_for(&format!("a '{verdict}' ConfigMap denied"), limit, || {
        n += 1;
        let (api, params, cm) = (
            api.clone(),
            params.clone(),
            config_map(format!("probe-{verdict}-{n}"), verdict),
        );
        async move {
            match api.create(&params, &cm).await {
                Err(kube::Error::Api(s)) if s.message.contains(DENIED) => Some(()),
                _ => None,
            }
        }
    })
    .await;
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_failed_admission_when_a_replica_stops_and_watches_resume_after_an_api_server_restart() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    let out = cluster.kubectl(&["create", "namespace", NAMESPACE], "");
    assert!(out.status.success(), "{out:?}");

    // Three replicas, registered by the balancer's URL; `ha-a` starts first and leads.
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let names = ["ha-a", "ha-b", "ha-c"];
    let backends: Vec<(&str, u16)> = names.iter().copied().zip(ports.iter().copied()).collect();
    let balancer = Balancer::start(cluster.dir(), &backends);
    let url = format!("https://127.0.0.1:{}", balancer.port);
    let mut replicas: Vec<Celgate> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let replica = spawn(&cluster, ports[i], name, &url);
        replica.wait_ready().await;
        if i == 0 {
            wait_for("ha-a to lead", Duration::from_secs(30), || async {
                (holder(&client).await.as_deref() == Some("ha-a")).then_some(())
            })
            .await;
        }
        replicas.push(replica);
    }
    cluster.apply(&policy("'deny'"));
    until_denied(&client, "deny", Duration::from_secs(60)).await;
    let registered = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get("celgate")
        .await
        .expect("the webhook configuration");
    let urls: Vec<String> = registered
        .webhooks
        .unwrap_or_default()
        .into_iter()
        .filter_map(|w| w.client_config.url)
        .collect();
    assert!(
        !urls.is_empty() && urls.iter().all(|u| u.starts_with(&url)),
        "the leader registers the balancer's URL: {urls:?}"
    );

    // Phase 1: SIGTERM the leader at 5 s, SIGKILL the next leader at 13 s, load until 24 s.
    let start = Instant::now();
    let run = tokio::spawn(load(client.clone(), "p1", start, Duration::from_secs(24)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut leader = replicas.remove(0);
    let terminated_at = start.elapsed();
    let (exited_in, status) =
        tokio::task::block_in_place(|| leader.terminate(Duration::from_secs(40)));
    let status = status.expect("celgate did not exit within 40 s of SIGTERM");
    assert!(
        status.success(),
        "celgate exited with {status} after SIGTERM"
    );
    assert!(
        exited_in < Duration::from_secs(SHUTDOWN_DELAY_SECONDS + SHUTDOWN_GRACE_SECONDS + 2),
        "celgate took {exited_in:?} to exit after SIGTERM (delay {SHUTDOWN_DELAY_SECONDS} s + grace {SHUTDOWN_GRACE_SECONDS} s)"
    );
    let next = wait_for(
        "another replica to lead",
        Duration::from_secs(20),
        || async { holder(&client).await.filter(|h| h == "ha-b" || h == "ha-c") },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(13).saturating_sub(start.elapsed())).await;
    let index = replicas
        .iter()
        .position(|r| r.log.ends_with(format!("{next}.log")))
        .expect("the leader is one of the replicas");
    let killed_at = start.elapsed();
    replicas[index].kill();
    let samples = run.await.expect("the load task");

    let end = Duration::from_secs(3600);
    let before = failures(&samples, Duration::ZERO, terminated_at);
    let after_term = failures(&samples, terminated_at, killed_at);
    let after_kill = failures(&samples, killed_at, end);
    let wrong: Vec<_> = samples
        .iter()
        .filter(|s| matches!(s.outcome, Outcome::Wrong(_)))
        .map(|s| (s.at, s.outcome.clone()))
        .collect();
    let rate = samples.len() as f64 / 24.0;
    eprintln!(
        "ha: {} creates at {rate:.0}/s through kube-apiserver, 3 replicas behind haproxy\n\
         ha: SIGTERM to the leader ha-a at {terminated_at:.1?}: exited (status {status}) in {exited_in:.2?}; \
         failed admissions after it, until the SIGKILL: {} of {}\n\
         ha: SIGKILL to the next leader {next} at {killed_at:.1?}: failed admissions after it: {} of {} (first {:?}, last {:?})",
        samples.len(),
        after_term.len(),
        count(&samples, terminated_at, killed_at),
        after_kill.len(),
        count(&samples, killed_at, end),
        after_kill.first().map(|f| f.0),
        after_kill.last().map(|f| f.0),
    );
    assert!(
        before.is_empty(),
        "failures before any replica stopped: {before:?}"
    );
    assert!(
        after_term.is_empty(),
        "failed admissions after the SIGTERM: {} of {}: {:?}",
        after_term.len(),
        count(&samples, terminated_at, killed_at),
        after_term.iter().take(5).collect::<Vec<_>>()
    );
    assert!(wrong.is_empty(), "wrong decisions: {wrong:?}");
    let late: Vec<_> = after_kill
        .iter()
        .filter(|(at, _)| *at > killed_at + Duration::from_secs(8))
        .collect();
    assert!(
        late.is_empty(),
        "admission still failing 8 s after the SIGKILL: {late:?}"
    );

    // Phase 2: kube-apiserver restarted under load; then the policy is changed and enforced.
    let run = tokio::spawn(load(
        client.clone(),
        "p2",
        Instant::now(),
        Duration::from_secs(20),
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let down = tokio::task::block_in_place(|| cluster.restart_apiserver());
    let restarted = Instant::now();
    cluster.apply(&policy("'deny', 'deny-too'"));
    let changed_in = restarted.elapsed();
    let enforced_in = until_denied(&client, "deny-too", Duration::from_secs(60)).await;
    // Once the watches are back, a change propagates at the usual speed.
    let changed = Instant::now();
    cluster.apply(&policy("'deny', 'deny-too', 'deny-three'"));
    let apply_took = changed.elapsed();
    let next_enforced_in = until_denied(&client, "deny-three", Duration::from_secs(60)).await;
    let samples = run.await.expect("the load task");
    let failed: Vec<_> = samples
        .iter()
        .filter(|s| matches!(s.outcome, Outcome::FailedAdmission(_) | Outcome::Wrong(_)))
        .map(|s| (s.at, s.outcome.clone()))
        .collect();
    let unavailable = samples
        .iter()
        .filter(|s| matches!(s.outcome, Outcome::ApiUnavailable(_)))
        .count();
    eprintln!(
        "ha: kube-apiserver restarted under load: away {down:.1} s; {} creates, {unavailable} unanswered by the API server, {} failed admissions or wrong decisions\n\
         ha: policy changed {changed_in:.2?} after the restart, enforced {enforced_in:.2?} after the change; \
         the next change enforced {:.0?} after kubectl apply returned ({apply_took:.0?} for the apply itself)",
        samples.len(),
        failed.len(),
        next_enforced_in,
    );
    assert!(
        failed.is_empty(),
        "failed admissions or wrong decisions around the restart: {:?}",
        failed.iter().take(5).collect::<Vec<_>>()
    );
    drop(balancer);
}
