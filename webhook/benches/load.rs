//! Load generator for the admission webhook: the real HTTPS server (rustls, axum) on loopback,
//! the client in the same process. Three sets of measurements, printed a line each and written
//! to `target/bench/webhook.json`:
//!
//! 1. Five bound policies of the kind users write and AdmissionReviews of a 2 KB Deployment as
//!    kube-apiserver sends them (managedFields included), on `/validate`, and on
//!    `/mutate/fail/never` with one bound MutatingAdmissionPolicy mutating the same review (two
//!    apply configurations and a JSON patch, against the Deployment schema of the committed
//!    built-in snapshot `kinds/schemas/builtin-1.36.json`). HTTP/1.1, or HTTP/2 with
//!    `WEBHOOK_BENCH_HTTP2=1`. Top-level fields of the report.
//! 2. The realistic fixture (issue 13, item 2; `e2e/src/fixture.rs`): first the server's own
//!    cost of one review without HTTP or TLS (decode, decide, encode on one thread;
//!    `realistic.in_process_us_per_review`, `realistic.mutation.in_process_us_per_review`), then
//!    over HTTP/2, every client
//!    task sharing one connection (kube-apiserver calls a webhook at a loopback URL over HTTP/2
//!    and multiplexes its calls on one connection): a 6 KB Pod create against `WEBHOOK_BENCH_MATCHING` (20) matching of `WEBHOOK_BENCH_POLICIES`
//!    (1,000) loaded validating policies (ConfigMap params published into the snapshot's param
//!    views, variables, message expressions, match conditions, one wildcard rule), then the
//!    same against as many mutating policies (apply configurations and JSON patches), and the
//!    validating throughput for the same Pod as an UPDATE (old object included, which no policy
//!    reads). The `realistic` field. Then the validating and mutating pairs again over
//!    HTTP/1.1, one review at a time per keep-alive connection, as kube-apiserver calls a
//!    webhook behind a Service, the in-cluster install (its webhook client offers only
//!    `http/1.1` there, so that concurrent calls spread over the Service's endpoints;
//!    `k8s.io/apiserver/pkg/util/webhook/client.go`, kubernetes issue 75791 and pull 122558):
//!    `realistic.http1`. Then the validating pair over HTTP/2 with a connection per client
//!    task, the shape earlier figures used: `realistic.separate_connections`. Last, the
//!    validating and mutating throughputs over HTTP/2 with nghttp2's `h2load` as the load
//!    generator in place of the in-process client (same cores, 32 streams on one connection,
//!    CPU per review for both processes and for the server alone; skipped when it is not
//!    installed): `realistic.h2load`.
//! 3. Scale (issue 13, item 4): throughput for the Pod when 5 of 1,000 validating policies
//!    match, and when 5 are loaded in all. The `scale` field, with their ratio.
//!
//! Each measurement is a pair:
//! - throughput: `CONNECTIONS` keep-alive connections send reviews back to back (closed loop)
//!   for `SECONDS`; reviews answered per second, and process CPU per review.
//! - latency at a fixed rate: reviews sent on a schedule at `RATE` per second, kept by a thread
//!   of its own (open loop: the latency of a late send counts from when it was due), p50/p99/max.
//!
//! The client runs in the same process on the same cores as the server, so both numbers are
//! pessimistic for a server that has the machine to itself; hyper's HTTP/2 client costs about
//! a sixth of the CPU per review, more than h2load does. Run with `make bench-webhook`.
//! Environment: `WEBHOOK_BENCH_SECONDS` (default 10), `WEBHOOK_BENCH_CONNECTIONS` (default 32),
//! `WEBHOOK_BENCH_RATE` (default 2000), `WEBHOOK_BENCH_REALISTIC_RATE` (default 5000),
//! `WEBHOOK_BENCH_POLICIES` (default 1000), `WEBHOOK_BENCH_MATCHING` (default 20, at most 20),
//! `WEBHOOK_BENCH_REPORT` (report path), `WEBHOOK_BENCH_HTTP2=1` (set 1 over HTTP/2),
//! `WEBHOOK_BENCH_ONLY` (`small`, `realistic` or `scale`: run that set alone, for profiling;
//! `serve`: no measurement, the realistic fixture's server alone, for an outside client and
//! profiler, see [`serve_only`]; with `WEBHOOK_BENCH_SERVER=hyper` the same routes are served
//! by hyper's HTTP/2 connection alone, without the webhook's own accept loop, to measure what
//! that loop costs per review).

#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)] // A benchmark harness.

use std::net::SocketAddr;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use celgate_engine::model::{
    FailurePolicy, MatchResources, MutatingBindingSpec, MutatingPolicySpec, Mutation,
    NamedExpression, PatchType, ResourceRule, ValidatingBindingSpec, ValidatingPolicySpec,
    Validation, ValidationAction,
};
use celgate_engine::mutate::{ApplySemantics, KindSchema, compile_mutating};
use celgate_engine::schema::schemas_from_openapi;
use celgate_engine::{BoundMutatingPolicy, BoundPolicy, PolicySet, compile_validating};
use celgate_snapshot::dispatch::{self, Call};
use celgate_snapshot::{Deps, KindSchemaView, NamespaceView, SnapshotStore};
use celgate_webhook::review;
use celgate_webhook::server::{Server, TlsMaterial};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

mod common;

use common::{env_or, fixture, fixture_mutating, fixture_store, fixture_validating};

/// Where the measurements send reviews.
const VALIDATE_PATH: &str = "/validate";
const MUTATE_PATH: &str = "/mutate/fail/never";

/// Creates and updates of deployments.
fn deployment_rules() -> MatchResources {
    MatchResources {
        resource_rules: vec![ResourceRule {
            operations: vec!["CREATE".into(), "UPDATE".into()],
            api_groups: vec!["apps".into()],
            api_versions: vec!["v1".into()],
            resources: vec!["deployments".into()],
            scope: "*".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Five validating policies over deployments (a replica limit, required labels, an image
/// registry, a variable-based resource check and a message expression) and one mutating
/// policy (see [`mutating_policy`]).
fn policies() -> PolicySet {
    let rules = deployment_rules();
    let validation = |expression: &str, message_expression: Option<&str>| Validation {
        expression: expression.into(),
        message_expression: message_expression.map(str::to_string),
        ..Default::default()
    };
    let specs = [
        (
            "replica-limit",
            vec![],
            vec![validation("object.spec.replicas <= 50", None)],
        ),
        (
            "required-labels",
            vec![],
            vec![validation(
                "['app', 'team'].all(l, l in object.metadata.labels)",
                None,
            )],
        ),
        (
            "trusted-registry",
            vec![],
            vec![validation(
                "object.spec.template.spec.containers.all(c, c.image.startsWith('registry.example.com/'))",
                None,
            )],
        ),
        (
            "resources-set",
            vec![NamedExpression {
                name: "containers".into(),
                expression: "object.spec.template.spec.containers".into(),
            }],
            vec![validation(
                "variables.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)",
                None,
            )],
        ),
        (
            "no-latest",
            vec![],
            vec![validation(
                "!object.spec.template.spec.containers.exists(c, c.image.endsWith(':latest'))",
                Some("'image of ' + object.metadata.name + ' uses :latest'"),
            )],
        ),
    ];
    PolicySet::new(
        specs
            .into_iter()
            .map(|(name, variables, validations)| {
                let spec = ValidatingPolicySpec {
                    name: name.into(),
                    match_constraints: Some(rules.clone()),
                    validations,
                    variables,
                    failure_policy: FailurePolicy::Fail,
                    ..Default::default()
                };
                let policy = compile_validating(spec);
                assert!(
                    policy.compile_errors().is_empty(),
                    "{name}: {:?}",
                    policy.compile_errors()
                );
                BoundPolicy {
                    policy: Arc::new(policy),
                    bindings: vec![Arc::new(ValidatingBindingSpec {
                        name: format!("{name}-binding").into(),
                        policy_name: name.into(),
                        match_resources: None,
                        param_ref: None,
                        validation_actions: vec![ValidationAction::Deny],
                    })]
                    .into(),
                }
            })
            .collect(),
        vec![mutating_policy()],
    )
}

/// A mutating policy over deployments of the kind users write: a label and a default
/// container security context (applied to the containers, a list keyed by name, that set
/// none) as apply configurations, and an annotation as a JSON patch. Failure policy Fail,
/// reinvocation Never: served on `/mutate/fail/never`.
fn mutating_policy() -> BoundMutatingPolicy {
    let apply = |expression: &str| Mutation {
        patch_type: PatchType::ApplyConfiguration,
        apply_configuration: Some(expression.into()),
        json_patch: None,
    };
    let spec = MutatingPolicySpec {
        name: "deployment-defaults".into(),
        match_constraints: Some(deployment_rules()),
        mutations: vec![
            apply("Object{metadata: Object.metadata{labels: {'policy.example.com/defaulted': 'true'}}}"),
            apply(
                "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{\
                 containers: object.spec.template.spec.containers.filter(c, !has(c.securityContext)).map(c, \
                 Object.spec.template.spec.containers{name: c.name, securityContext: \
                 Object.spec.template.spec.containers.securityContext{allowPrivilegeEscalation: false}})}}}}",
            ),
            Mutation {
                patch_type: PatchType::JsonPatch,
                apply_configuration: None,
                json_patch: Some(
                    "[JSONPatch{op: 'add', path: '/metadata/annotations/' + \
                     jsonpatch.escapeKey('policy.example.com/admitted-by'), value: request.userInfo.username}]"
                        .into(),
                ),
            },
        ],
        failure_policy: FailurePolicy::Fail,
        ..Default::default()
    };
    let policy = compile_mutating(spec, ApplySemantics::Upstream);
    assert!(
        policy.compile_errors().is_empty(),
        "deployment-defaults: {:?}",
        policy.compile_errors()
    );
    BoundMutatingPolicy {
        policy: Arc::new(policy),
        bindings: vec![Arc::new(MutatingBindingSpec {
            name: "deployment-defaults-binding".into(),
            policy_name: "deployment-defaults".into(),
            ..Default::default()
        })]
        .into(),
    }
}

/// The schemas of `apps/v1` from the committed built-in snapshot, as the operator publishes
/// them for the kinds mutating policies match.
fn apps_v1_schemas() -> KindSchemaView {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kinds/schemas/builtin-1.36.json"
    );
    let snapshot: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let schemas = schemas_from_openapi(&snapshot["openapi"]["apis/apps/v1"]).unwrap();
    assert!(!schemas.is_empty(), "no apps/v1 schemas in {path}");
    KindSchemaView::new(schemas.into_iter().map(|(gvk, schema)| {
        (
            gvk,
            KindSchema {
                schema,
                built_in: true,
            },
        )
    }))
}

/// A Deployment create as kube-apiserver sends it (admitted by every policy above).
fn review() -> Bytes {
    let container = |name: &str| {
        json!({"name": name, "image": format!("registry.example.com/{name}:1.4.2"),
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "resources": {"limits": {"cpu": "500m", "memory": "256Mi"},
                          "requests": {"cpu": "100m", "memory": "128Mi"}},
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File", "imagePullPolicy": "IfNotPresent"})
    };
    let object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop",
            "labels": {"app": "web", "team": "storefront"},
            "annotations": {"owner": "storefront@example.com"},
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update",
                "apiVersion": "apps/v1", "time": "2026-11-22T07:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:team": {}}},
                    "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {}}}}}}]},
        "spec": {"replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [container("web"), container("envoy")],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler"}}},
        "status": {}
    });
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "6a2c4e0e-5a1f-4c5e-9a53-0c3c4f1b2d7e",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": "web", "namespace": "shop", "operation": "CREATE",
            "userInfo": {"username": "alice", "uid": "1001",
                "groups": ["developers", "system:authenticated"]},
            "object": object, "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions",
                "fieldManager": "kubectl-client-side-apply"}}});
    Bytes::from(review.to_string())
}

fn tls_material() -> (TlsMaterial, rustls::RootCertStore) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    (
        TlsMaterial {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        },
        roots,
    )
}

/// One client connection: HTTP/1.1, or HTTP/2 (as kube-apiserver calls webhooks over TLS).
enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

fn http2_wanted() -> bool {
    env_or("WEBHOOK_BENCH_HTTP2", 0) == 1
}

async fn connect(addr: SocketAddr, tls: &TlsConnector, http2: bool) -> Sender {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let stream = tls
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    if http2 {
        let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        Sender::H2(sender)
    } else {
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        Sender::H1(sender)
    }
}

/// Sends one review to `path` and checks the answer admits it; returns the answer.
async fn send(sender: &mut Sender, path: &str, body: &Bytes) -> Bytes {
    let post = |uri: &str| {
        hyper::Request::post(uri)
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .unwrap()
    };
    let resp = match sender {
        Sender::H1(s) => {
            s.ready().await.unwrap();
            // HTTP/1.1 sends the path alone, with a host header.
            let mut req = post(&format!("{path}?timeout=10s"));
            req.headers_mut()
                .insert("host", hyper::header::HeaderValue::from_static("localhost"));
            s.send_request(req).await.unwrap()
        }
        Sender::H2(s) => {
            s.ready().await.unwrap();
            s.send_request(post(&format!("https://localhost{path}?timeout=10s")))
                .await
                .unwrap()
        }
    };
    assert_eq!(resp.status(), 200);
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(
        bytes.windows(14).any(|w| w == b"\"allowed\":true"),
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    bytes
}

/// Sends the review to `path` once and panics unless the answer carries a non-empty JSON
/// patch, so the mutation measurements cannot time errors or no-ops. Returns the patch.
async fn checked_patch(m: &Measure<'_>) -> serde_json::Value {
    use base64::Engine as _;
    let path = m.path;
    let mut sender = connect(m.addr, m.tls, m.http2).await;
    let answer: serde_json::Value =
        serde_json::from_slice(&send(&mut sender, path, m.body).await).unwrap();
    let response = &answer["response"];
    let encoded = response["patch"]
        .as_str()
        .unwrap_or_else(|| panic!("{path} answered without a patch: {answer}"));
    assert_eq!(response["patchType"], "JSONPatch", "{answer}");
    let patch: serde_json::Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap();
    assert!(
        patch.as_array().is_some_and(|ops| !ops.is_empty()),
        "{path} answered an empty patch: {patch}"
    );
    patch
}

async fn throughput(m: &Measure<'_>, conns: u64, secs: u64) -> Throughput {
    let path = m.path;
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for mut sender in senders(m, conns).await {
        let (done, stop, body) = (done.clone(), stop.clone(), m.body.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                send(&mut sender, path, &body).await;
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Warm up, then count over the measured window only.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start_count = done.load(Ordering::Relaxed);
    let start = Instant::now();
    let start_cpu = process_cpu_seconds();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let count = done.load(Ordering::Relaxed) - start_count;
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = process_cpu_seconds() - start_cpu;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    Throughput {
        per_second: count as f64 / elapsed,
        cpu_us_per_review: cpu * 1e6 / count as f64,
    }
}

struct Throughput {
    per_second: f64,
    /// Process CPU time (client and server, user and system) per review: steadier than the
    /// rate on a machine shared with other work.
    cpu_us_per_review: f64,
}

/// User plus system CPU time of this process so far, from `/proc/self/stat` (0 elsewhere).
fn process_cpu_seconds() -> f64 {
    cpu_seconds(false)
}

/// User plus system CPU time of this process so far, with that of its children it has waited
/// for when `children` (from `/proc/self/stat`; 0 elsewhere).
fn cpu_seconds(children: bool) -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime
    // 15, cutime 16, cstime 17.
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let last = if children { 14 } else { 12 };
    let ticks: f64 = fields[11..=last]
        .iter()
        .map(|f| f.parse::<f64>().unwrap())
        .sum();
    // USER_HZ is 100 on Linux.
    ticks / 100.0
}

/// Whether nghttp2's HTTP/2 load generator `h2load` is installed (Debian's `nghttp2-client`,
/// which `make deps` installs).
fn h2load_installed() -> bool {
    std::process::Command::new("h2load")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The server's own cost of one review (validating, or with `mutate` mutating), without HTTP or
/// TLS: the body decoded, decided against the snapshot in `store` and the answer encoded, one
/// review after another on this task for `secs`; µs per review. Much steadier than the HTTP
/// figures, for before/after comparisons.
async fn in_process(store: &SnapshotStore, body: &Bytes, secs: u64, mutate: bool) -> f64 {
    let deps = Deps::default();
    let mut reviews = 0u64;
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    while Instant::now() < until {
        for _ in 0..100 {
            let (allowed, answer) = if mutate {
                let review = review::decode(body, review::ObjectRead::TapeToMutate).unwrap();
                let mutated = dispatch::mutate(store, &deps, review, Call::now(), None)
                    .await
                    .unwrap();
                let answer = review::mutation_response(&mutated.uid, &mutated.outcome);
                (mutated.outcome.allowed(), answer)
            } else {
                let review = review::decode(body, review::ObjectRead::Tape).unwrap();
                let decided = dispatch::validate(store, &deps, review, Call::now(), None)
                    .await
                    .unwrap();
                let answer = review::response(&decided.uid, &decided.outcome);
                (decided.outcome.allowed(), answer)
            };
            assert!(allowed, "{}", String::from_utf8_lossy(&answer));
        }
        reviews += 100;
    }
    start.elapsed().as_secs_f64() * 1e6 / reviews as f64
}

/// What one h2load run reports: reviews answered (2xx) and its rate over the run's duration.
struct H2load {
    succeeded: u64,
    per_second: f64,
}

/// Runs h2load against `url` with `streams` concurrent reviews (the body in `body_file`) on one
/// HTTP/2 connection for `secs` (`-D`); panics unless every answer was a 2xx.
fn run_h2load(url: &str, body_file: &std::path::Path, streams: u64, secs: u64) -> H2load {
    let out = std::process::Command::new("h2load")
        .args(["-c", "1", "-t", "1", "-m", &streams.to_string()])
        .args(["-D", &secs.to_string()])
        .arg("-d")
        .arg(body_file)
        .args(["-H", "content-type: application/json", url])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "h2load failed: {report}");
    // The number before `word` on the line starting with `line`, e.g. `requests: 9 total, 9
    // started, 9 done, …` or `finished in 4.00s, 29875.25 req/s, …`.
    let field = |line: &str, word: &str| -> f64 {
        let found = report
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no {line:?} line in h2load's report: {report}"));
        let before = found.split(word).next().unwrap_or_default();
        before
            .rsplit([' ', ','])
            .find(|w| !w.is_empty())
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no {word:?} figure in {found:?}"))
    };
    // Every answer was a 2xx; only the reviews still in flight when the run ends (at most one
    // per stream) may count as failed or errored, and h2load counts the status of such a
    // review when its answer arrives after the end without counting it as succeeded.
    let succeeded = field("requests:", " succeeded") as u64;
    assert!(succeeded > 0, "h2load sent nothing: {report}");
    let ok = field("status codes:", " 2xx") as u64;
    assert!((succeeded..=succeeded + streams).contains(&ok), "{report}");
    for code in [" 3xx", " 4xx", " 5xx"] {
        assert_eq!(field("status codes:", code) as u64, 0, "{report}");
    }
    let unanswered = field("requests:", " failed") + field("requests:", " errored");
    assert!(unanswered as u64 <= streams, "{report}");
    H2load {
        succeeded,
        per_second: field("finished in", " req/s"),
    }
}

/// Throughput as measured by h2load in place of the in-process client: `streams` concurrent
/// reviews on one HTTP/2 connection over TLS for `secs`, after a second of warm-up. The rate
/// is h2load's; CPU per review counts both processes (this one, where only the server is
/// busy, and h2load as a child waited for). `None` when h2load is not installed.
async fn h2load_throughput(m: &Measure<'_>, streams: u64, secs: u64) -> Option<H2loadThroughput> {
    if !h2load_installed() {
        println!("{}: skipped, h2load is not installed (make deps)", m.label);
        return None;
    }
    // Every answer is the one `send` checks here: the same review to the same snapshot.
    send(&mut connect(m.addr, m.tls, true).await, m.path, m.body).await;
    let body_file =
        std::env::temp_dir().join(format!("celgate-load-{}-review.json", std::process::id()));
    std::fs::write(&body_file, m.body).unwrap();
    let url = format!("https://127.0.0.1:{}{}?timeout=10s", m.addr.port(), m.path);
    // Off the runtime's workers, which serve the reviews.
    let (run, (all, server), body_file) = tokio::task::spawn_blocking(move || {
        run_h2load(&url, &body_file, streams, 1);
        let before = (cpu_seconds(true), cpu_seconds(false));
        let run = run_h2load(&url, &body_file, streams, secs);
        let spent = (cpu_seconds(true) - before.0, cpu_seconds(false) - before.1);
        (run, spent, body_file)
    })
    .await
    .unwrap();
    std::fs::remove_file(&body_file).unwrap();
    let per_review = |seconds: f64| seconds * 1e6 / run.succeeded as f64;
    Some(H2loadThroughput {
        per_second: run.per_second,
        cpu_us_per_review: per_review(all),
        server_cpu_us_per_review: per_review(server),
    })
}

/// What [`h2load_throughput`] measured.
struct H2loadThroughput {
    per_second: f64,
    /// Both processes' CPU time per review.
    cpu_us_per_review: f64,
    /// This process's alone: the server's.
    server_cpu_us_per_review: f64,
}

/// Open-loop latency at `rate` reviews/s over `conns` connections, each taking every
/// `conns`-th send of one schedule; a send that starts late is timed from when it was due.
///
/// The schedule is kept by a dedicated thread sleeping to each due time, which hands the due
/// instant to the connection's task: tokio's timer has a 1 ms tick, so `sleep_until` would wake
/// up to a millisecond late and that lateness, the client's own, would be counted as the
/// server's latency.
///
/// The pacer asks the kernel to wake it on time (a timer slack of 1 ns): with Linux's default
/// of 50 µs it woke about 80 µs late at the median, all of which counted as the server's.
/// How late it still wakes (scheduling, a busy CPU) is returned as [`Latencies::pacer_late`].
///
/// A server slower than `rate` falls ever further behind; a send due more than [`OVERLOADED`]
/// ago is not made but counted as abandoned, so an overloaded run ends about when it was
/// scheduled to instead of draining its backlog for minutes.
async fn latency_at(m: &Measure<'_>, rate: u64, secs: u64) -> Latencies {
    let path = m.path;
    let conns = 16u64;
    let period = Duration::from_secs_f64(1.0 / rate as f64);
    let total = secs * rate;
    let mut tasks = Vec::new();
    let mut schedules = Vec::new();
    for mut sender in senders(m, conns).await {
        let body = m.body.clone();
        let (due_tx, mut due_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
        schedules.push(due_tx);
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity((total / conns) as usize + 1);
            let mut abandoned = 0u64;
            while let Some(due) = due_rx.recv().await {
                if due.elapsed() > OVERLOADED {
                    abandoned += 1;
                    continue;
                }
                send(&mut sender, path, &body).await;
                latencies.push(due.elapsed());
            }
            (latencies, abandoned)
        }));
    }
    let pacer = std::thread::spawn(move || {
        if let Err(e) = rustix::thread::set_current_timer_slack(NonZeroU64::new(1)) {
            eprintln!("warning: the pacer keeps the default timer slack ({e}): it wakes late");
        }
        let start = Instant::now() + Duration::from_millis(200);
        let mut late = Vec::with_capacity(total as usize);
        for k in 0..total {
            let due = start + period * k as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            late.push(due.elapsed());
            schedules[(k % conns) as usize].send(due).unwrap();
        }
        // Dropping the senders ends the connections' loops.
        late.sort();
        late
    });
    let (mut all, mut abandoned) = (Vec::new(), 0);
    for t in tasks {
        let (latencies, skipped) = t.await.unwrap();
        all.extend(latencies);
        abandoned += skipped;
    }
    let pacer_late = pacer.join().unwrap();
    all.sort();
    Latencies {
        sorted: all,
        abandoned,
        pacer_late,
    }
}

/// What a latency run measured.
struct Latencies {
    /// Each review's latency from when it was due, shortest first.
    sorted: Vec<Duration>,
    /// Sends not made because they were due over [`OVERLOADED`] ago.
    abandoned: u64,
    /// How late the pacer handed each send over, shortest first: the client's own share of
    /// the latencies (counted in them, since a send is timed from when it was due).
    pacer_late: Vec<Duration>,
}

/// How late a scheduled send may start before the latency run counts it abandoned.
const OVERLOADED: Duration = Duration::from_secs(2);

fn protocol(http2: bool) -> &'static str {
    if http2 { "HTTP/2" } else { "HTTP/1.1" }
}

/// What one pair of measurements sends, and how its lines name it.
struct Measure<'a> {
    addr: SocketAddr,
    tls: &'a TlsConnector,
    path: &'static str,
    body: &'a Bytes,
    /// The lines' prefix.
    label: &'static str,
    /// The policies the path runs, for the throughput line.
    policies: &'a str,
    /// HTTP/2 rather than HTTP/1.1.
    http2: bool,
    /// Over HTTP/2, every client task shares one connection, as kube-apiserver's HTTP/2
    /// client multiplexes its concurrent calls; otherwise each task has its own.
    multiplex: bool,
}

/// The connections of `tasks` client tasks: one shared by all when `m.multiplex` (HTTP/2),
/// else one each.
async fn senders(m: &Measure<'_>, tasks: u64) -> Vec<Sender> {
    let mut out = Vec::new();
    if m.multiplex && m.http2 {
        let Sender::H2(shared) = connect(m.addr, m.tls, true).await else {
            unreachable!("an HTTP/2 connection")
        };
        for _ in 0..tasks {
            out.push(Sender::H2(shared.clone()));
        }
    } else {
        for _ in 0..tasks {
            out.push(connect(m.addr, m.tls, m.http2).await);
        }
    }
    out
}

/// Throughput, then latency at `rate`, on one path: prints one line each and returns their
/// report fields.
async fn measure(m: &Measure<'_>, conns: u64, rate: u64, secs: u64) -> serde_json::Value {
    let Throughput {
        per_second,
        cpu_us_per_review,
    } = throughput(m, conns, secs).await;
    let shape = if m.multiplex && m.http2 {
        format!("{conns} concurrent on 1 HTTP/2 connection")
    } else {
        format!("{conns} {} connections", protocol(m.http2))
    };
    println!(
        "{} throughput: {per_second:.0} reviews/s, {cpu_us_per_review:.1} µs CPU per review ({shape}, {secs} s, {} byte reviews, {})",
        m.label,
        m.body.len(),
        m.policies
    );
    let Latencies {
        sorted: latencies,
        abandoned,
        pacer_late,
    } = latency_at(m, rate, secs).await;
    let (late50, late99) = (percentile(&pacer_late, 0.50), percentile(&pacer_late, 0.99));
    let (p50, p99, max) = (
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.last().copied().unwrap_or_default(),
    );
    let overloaded = if abandoned > 0 {
        format!(", overloaded: {abandoned} sends abandoned, due over {OVERLOADED:?} ago")
    } else {
        String::new()
    };
    println!(
        "{} latency at {rate}/s: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms ({} reviews{overloaded}; of which the pacer's lateness: p50 {:.3} ms, p99 {:.3} ms)",
        m.label,
        ms(p50),
        ms(p99),
        ms(max),
        latencies.len(),
        ms(late50),
        ms(late99)
    );
    json!({
        "throughput_reviews_per_second": per_second.round(),
        "cpu_us_per_review": (cpu_us_per_review * 10.0).round() / 10.0,
        "latency": {"rate_per_second": rate, "reviews": latencies.len(), "abandoned": abandoned,
            "p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(max),
            "pacer_late_p50_ms": ms(late50), "pacer_late_p99_ms": ms(late99)},
    })
}

/// Adds the fields of the object `from` to the object `into`.
fn merge(into: &mut serde_json::Value, from: serde_json::Value) {
    if let (Some(into), serde_json::Value::Object(from)) = (into.as_object_mut(), from) {
        into.extend(from);
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The client TLS configuration trusting `roots`, offering HTTP/2 by ALPN when `http2`.
fn connector(roots: &rustls::RootCertStore, http2: bool) -> TlsConnector {
    let mut client = rustls::ClientConfig::builder()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    if http2 {
        client.alpn_protocols = vec![b"h2".to_vec()];
    }
    TlsConnector::from(Arc::new(client))
}

/// The real HTTPS server over `store` on a free loopback port, serving once this returns.
async fn start_server(store: Arc<SnapshotStore>, material: TlsMaterial) -> (SocketAddr, Server) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    // The product registers its families in the process's registry the same way.
    let metrics = celgate_webhook::metrics::Metrics::register(
        &mut prometheus_client::registry::Registry::default(),
        10,
    );
    let state = celgate_webhook::AppState::new(store, Deps::default(), metrics);
    let server = Server::new(addr, state, material).await.unwrap();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve().await });
    for _ in 0..100 {
        if TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (addr, server)
}

/// Load parameters shared by every measurement.
#[derive(Clone, Copy)]
struct Load {
    conns: u64,
    secs: u64,
}

/// The first measurements (5 policies over a 2 KB Deployment, on `WEBHOOK_BENCH_HTTP2`'s
/// protocol); returns their report.
async fn small(
    load: Load,
    rate: u64,
    roots: &rustls::RootCertStore,
    material: TlsMaterial,
) -> serde_json::Value {
    let http2 = http2_wanted();
    let store = SnapshotStore::new();
    store.publish_namespaces(NamespaceView::new([(
        "shop".to_string(),
        json!({"metadata": {"name": "shop"}}),
    )]));
    store.publish_policies(
        Arc::new(policies()),
        Arc::default(),
        Arc::new(apps_v1_schemas()),
    );
    let (addr, server) = start_server(store, material).await;
    let tls = connector(roots, http2);
    let body = review();
    let at = |path, label, policies| Measure {
        addr,
        tls: &tls,
        path,
        body: &body,
        label,
        policies,
        http2,
        multiplex: false,
    };
    let patch = checked_patch(&at(MUTATE_PATH, "", "")).await;
    let validating = measure(
        &at(VALIDATE_PATH, "webhook", "5 policies"),
        load.conns,
        rate,
        load.secs,
    )
    .await;
    let mutating = measure(
        &at(MUTATE_PATH, "webhook mutation", "1 mutating policy"),
        load.conns,
        rate,
        load.secs,
    )
    .await;
    server.shutdown(Duration::from_secs(5));
    let mut report = json!({
        "connections": load.conns,
        "seconds": load.secs,
        "review_bytes": body.len(),
        "protocol": protocol(http2),
        "policies": 5,
        "mutation": {"path": MUTATE_PATH, "mutating_policies": 1,
            "patch_operations": patch.as_array().map_or(0, Vec::len)},
    });
    merge(&mut report, validating);
    merge(&mut report["mutation"], mutating);
    report
}

/// The realistic fixture (issue 13, item 2) over HTTP/2: the 6 KB Pod review against
/// `matching` of `total` validating policies, then of `total` mutating policies.
async fn realistic(
    load: Load,
    rate: u64,
    (total, matching): (usize, usize),
    roots: &rustls::RootCertStore,
    material: TlsMaterial,
) -> serde_json::Value {
    let validating_policies = fixture::validating(total, matching);
    let mutating_policies = fixture::mutating(total, matching);
    let compile_start = Instant::now();
    let set = PolicySet::new(
        fixture_validating(&validating_policies),
        fixture_mutating(&mutating_policies),
    );
    let compile_ms = ms(compile_start.elapsed());
    let store = fixture_store(set);
    let body = Bytes::from(fixture::pod_review().to_string());
    let in_process_us = in_process(&store, &body, load.secs.min(3), false).await;
    let in_process_mutation_us = in_process(&store, &body, load.secs.min(3), true).await;
    println!(
        "realistic in-process: {in_process_us:.1} µs per review, mutation {in_process_mutation_us:.1} µs (decode, decide, encode; no HTTP or TLS; one thread)"
    );
    let (addr, server) = start_server(store, material).await;
    let tls = connector(roots, true);
    let tls1 = connector(roots, false);
    let label_v = format!("{matching} of {total} validating policies match");
    let label_m = format!("{matching} of {total} mutating policies match");
    let at = |path, label, policies| Measure {
        addr,
        tls: &tls,
        path,
        body: &body,
        label,
        policies,
        http2: true,
        multiplex: true,
    };
    let patch = checked_patch(&at(MUTATE_PATH, "", "")).await;
    let validating = measure(
        &at(VALIDATE_PATH, "realistic", &label_v),
        load.conns,
        rate,
        load.secs,
    )
    .await;
    let mutating = measure(
        &at(MUTATE_PATH, "realistic mutation", &label_m),
        load.conns,
        rate,
        load.secs,
    )
    .await;
    // The same Pod as an UPDATE, whose old object no policy reads (its tape is written in the
    // review's pass all the same).
    let update_body = Bytes::from(fixture::pod_update_review().to_string());
    let update = Measure {
        body: &update_body,
        ..at(VALIDATE_PATH, "realistic update", &label_v)
    };
    let update = throughput(&update, load.conns, load.secs).await;
    println!(
        "realistic update throughput: {:.0} reviews/s, {:.1} µs CPU per review ({} byte reviews, {label_v})",
        update.per_second,
        update.cpu_us_per_review,
        update_body.len()
    );
    // As kube-apiserver calls a webhook behind a Service: HTTP/1.1, one review at a time per
    // keep-alive connection.
    let http1 = |path, label, policies| Measure {
        tls: &tls1,
        http2: false,
        multiplex: false,
        ..at(path, label, policies)
    };
    let validating_http1 = measure(
        &http1(VALIDATE_PATH, "realistic HTTP/1.1", &label_v),
        load.conns,
        rate,
        load.secs,
    )
    .await;
    let mutating_http1 = measure(
        &http1(MUTATE_PATH, "realistic mutation HTTP/1.1", &label_m),
        load.conns,
        rate,
        load.secs,
    )
    .await;
    // The shape of earlier sessions' figures: HTTP/2 with a connection per client task.
    let separate = measure(
        &Measure {
            multiplex: false,
            ..at(VALIDATE_PATH, "realistic HTTP/2 separate", &label_v)
        },
        load.conns,
        rate,
        load.secs,
    )
    .await;
    // The same HTTP/2 throughputs with nghttp2's h2load as the load generator: a client in C
    // that costs the shared cores less than hyper's, as kube-apiserver's Go client does.
    let mut by_h2load = json!({"load_generator": "h2load", "streams": load.conns});
    for (path, label, field) in [
        (VALIDATE_PATH, "realistic h2load", None),
        (MUTATE_PATH, "realistic mutation h2load", Some("mutation")),
    ] {
        let policies = if field.is_some() { &label_m } else { &label_v };
        let Some(t) = h2load_throughput(&at(path, label, policies), load.conns, load.secs).await
        else {
            by_h2load = serde_json::Value::Null;
            break;
        };
        println!(
            "{label} throughput: {:.0} reviews/s, {:.1} µs CPU per review, h2load's included (the server's {:.1}; {} concurrent on 1 HTTP/2 connection, {} s, {} byte reviews, {policies})",
            t.per_second,
            t.cpu_us_per_review,
            t.server_cpu_us_per_review,
            load.conns,
            load.secs,
            body.len()
        );
        let figures = json!({"throughput_reviews_per_second": t.per_second.round(),
            "cpu_us_per_review": (t.cpu_us_per_review * 10.0).round() / 10.0,
            "server_cpu_us_per_review": (t.server_cpu_us_per_review * 10.0).round() / 10.0});
        match field {
            Some(f) => by_h2load[f] = figures,
            None => merge(&mut by_h2load, figures),
        }
    }
    server.shutdown(Duration::from_secs(5));
    let mut report = json!({
        "protocol": "HTTP/2",
        "multiplexed": true,
        "connections": load.conns,
        "seconds": load.secs,
        "review_bytes": body.len(),
        "policies_loaded": total,
        "policies_matching": matching,
        "compile_ms_validating_and_mutating": compile_ms,
        "in_process_us_per_review": (in_process_us * 100.0).round() / 100.0,
        "mutation": {"path": MUTATE_PATH, "mutating_policies_loaded": total,
            "mutating_policies_matching": matching,
            "in_process_us_per_review": (in_process_mutation_us * 100.0).round() / 100.0,
            "patch_operations": patch.as_array().map_or(0, Vec::len)},
        "update": {"review_bytes": update_body.len(),
            "throughput_per_second": update.per_second.round(),
            "cpu_us_per_review": (update.cpu_us_per_review * 10.0).round() / 10.0},
    });
    merge(&mut report, validating);
    merge(&mut report["mutation"], mutating);
    let mut http1 = json!({"protocol": "HTTP/1.1", "connections": load.conns, "mutation": {}});
    merge(&mut http1, validating_http1);
    merge(&mut http1["mutation"], mutating_http1);
    report["http1"] = http1;
    let mut separate_report = json!({"protocol": "HTTP/2", "multiplexed": false});
    merge(&mut separate_report, separate);
    report["separate_connections"] = separate_report;
    report["h2load"] = by_h2load;
    report
}

/// Throughput alone (HTTP/2, the Pod review) with `matching` of `total` validating policies
/// matching: the scale comparison of issue 13, item 4 (5 of 1,000 vs 5 of 5).
async fn scale_throughput(
    load: Load,
    (total, matching): (usize, usize),
    roots: &rustls::RootCertStore,
    material: TlsMaterial,
) -> serde_json::Value {
    let set = PolicySet::new(
        fixture_validating(&fixture::validating(total, matching)),
        Vec::new(),
    );
    let (addr, server) = start_server(fixture_store(set), material).await;
    let tls = connector(roots, true);
    let body = Bytes::from(fixture::pod_review().to_string());
    let label = format!("{matching} of {total} validating policies match");
    let m = Measure {
        addr,
        tls: &tls,
        path: VALIDATE_PATH,
        body: &body,
        label: "scale",
        policies: &label,
        http2: true,
        multiplex: false,
    };
    let Throughput {
        per_second,
        cpu_us_per_review,
    } = throughput(&m, load.conns, load.secs).await;
    println!(
        "scale throughput: {per_second:.0} reviews/s, {cpu_us_per_review:.1} µs CPU per review ({} HTTP/2 connections, {} s, {label})",
        load.conns, load.secs
    );
    server.shutdown(Duration::from_secs(5));
    json!({"policies_loaded": total, "policies_matching": matching,
        "throughput_reviews_per_second": per_second.round(),
        "cpu_us_per_review": (cpu_us_per_review * 10.0).round() / 10.0})
}

fn report_path() -> std::path::PathBuf {
    std::env::var("WEBHOOK_BENCH_REPORT").map_or_else(
        |_| {
            let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .unwrap();
            workspace.join("target/bench/webhook.json")
        },
        std::path::PathBuf::from,
    )
}

fn main() {
    // `cargo bench` passes `--bench`; a filter naming another bench means "not me".
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && a != "load")
    {
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let load = Load {
        secs: env_or("WEBHOOK_BENCH_SECONDS", 10),
        conns: env_or("WEBHOOK_BENCH_CONNECTIONS", 32),
    };
    let rate = env_or("WEBHOOK_BENCH_RATE", 2000);
    let realistic_rate = env_or("WEBHOOK_BENCH_REALISTIC_RATE", 5000);
    let total = env_or("WEBHOOK_BENCH_POLICIES", 1000) as usize;
    let matching = env_or("WEBHOOK_BENCH_MATCHING", 20) as usize;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap();
    let only = std::env::var("WEBHOOK_BENCH_ONLY").ok();
    let wanted = |set: &str| only.as_deref().is_none_or(|o| o == set);
    runtime.block_on(async {
        let (material, roots) = tls_material();
        if only.as_deref() == Some("serve") {
            return serve_only((total, matching), material).await;
        }
        let mut report = json!({});
        if wanted("small") {
            report = small(load, rate, &roots, material.clone()).await;
        }
        if wanted("realistic") {
            report["realistic"] = realistic(
                load,
                realistic_rate,
                (total, matching),
                &roots,
                material.clone(),
            )
            .await;
        }
        if wanted("scale") {
            report["scale"] = scale(load, total, &roots, material).await;
        }
        report["loadavg"] = json!(
            std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
        );
        let path = report_path();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
        println!("report: {}", path.display());
    });
}

/// The server of the realistic fixture (`matching` of `total` validating and mutating
/// policies) alone, for a client and a profiler outside: writes the review's body to a file,
/// prints the file and the two routes' URLs, and serves until its standard input closes. With
/// valgrind started `--instr-atstart=no`, `callgrind_control -i on` once the URLs are printed
/// counts only what serving reviews costs.
async fn serve_only((total, matching): (usize, usize), material: TlsMaterial) {
    let store = fixture_store(PolicySet::new(
        fixture_validating(&fixture::validating(total, matching)),
        fixture_mutating(&fixture::mutating(total, matching)),
    ));
    let body_file =
        std::env::temp_dir().join(format!("celgate-serve-{}-review.json", std::process::id()));
    std::fs::write(&body_file, fixture::pod_review().to_string()).unwrap();
    let bare = std::env::var("WEBHOOK_BENCH_SERVER").is_ok_and(|s| s == "hyper");
    let (addr, server) = if bare {
        (start_bare_server(store, material).await, None)
    } else {
        let (addr, server) = start_server(store, material).await;
        (addr, Some(server))
    };
    println!("body: {}", body_file.display());
    for path in [VALIDATE_PATH, MUTATE_PATH] {
        println!("url: https://{addr}{path}?timeout=10s");
    }
    // Until standard input closes.
    tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink()))
        .await
        .unwrap()
        .unwrap();
    if let Some(server) = server {
        server.shutdown(Duration::from_secs(1));
    }
    std::fs::remove_file(&body_file).unwrap();
}

/// The webhook's routes over `store` served by hyper's HTTP/2 connection alone, on a free
/// loopback port: TLS (HTTP/2 only) and the same stream windows, but none of the accept loop's
/// limits, deadlines, control-frame count or keep-alive; for comparison with [`start_server`].
async fn start_bare_server(store: Arc<SnapshotStore>, material: TlsMaterial) -> SocketAddr {
    use rustls::pki_types::pem::PemObject;
    use tower_service::Service;
    let chain = rustls::pki_types::CertificateDer::pem_slice_iter(material.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key =
        rustls::pki_types::PrivateKeyDer::from_pem_slice(material.key_pem.as_bytes()).unwrap();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let metrics = celgate_webhook::metrics::Metrics::register(
        &mut prometheus_client::registry::Registry::default(),
        10,
    );
    let state = celgate_webhook::AppState::new(store, Deps::default(), metrics);
    let router = celgate_webhook::server::router(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tcp.set_nodelay(true).unwrap();
            let (acceptor, router) = (acceptor.clone(), router.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        router.clone().call(req.map(axum::body::Body::new))
                    },
                );
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .initial_stream_window_size(256 * 1024)
                    .initial_connection_window_size(8 * 1024 * 1024)
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    addr
}

/// Issue 13, item 4: 5 of `total` validating policies matching against 5 loaded in all.
async fn scale(
    load: Load,
    total: usize,
    roots: &rustls::RootCertStore,
    material: TlsMaterial,
) -> serde_json::Value {
    let many = scale_throughput(load, (total, 5), roots, material.clone()).await;
    let few = scale_throughput(load, (5, 5), roots, material).await;
    let ratio = many["throughput_reviews_per_second"]
        .as_f64()
        .unwrap_or(0.0)
        / few["throughput_reviews_per_second"]
            .as_f64()
            .unwrap_or(1.0)
            .max(1.0);
    println!("scale: 5 of {total} matching / 5 in total = {ratio:.2} of the throughput");
    json!({"five_of_many": many, "five_only": few,
            "ratio": (ratio * 1000.0).round() / 1000.0})
}
