//! `make bench-apply`: how long a binding takes from its creation to the first request it denies,
//! and how long a policy change takes until its status is written, for celgate and for the
//! in-tree plugin, against one local control plane; and, for celgate, whether `Ready` was ever
//! True before the binding was enforced.
//!
//! The demo policy is applied once per engine; then, per sample:
//! 1. its binding is created with the kube client (no kubectl start-up in the measurement) and a
//!    dry-run Deployment over the limit is sent every `POLL` until one is denied. celgate's time
//!    includes its snapshot rebuild and, when the binding changes the rules it registers,
//!    kube-apiserver picking up the new webhook configuration. For celgate each poll also reads
//!    the `Ready` condition of the binding and of the policy, beside the request (so polls are
//!    as frequent for both engines): a request sent after a read saw `Ready` True (for the
//!    generation it describes) and admitted is a violation. Polling goes on until the binding's
//!    status describes its generation (apply → binding status written).
//! 2. the policy's message is changed (a new generation) and its status is read every `POLL`
//!    until `observedGeneration` reaches it (apply → policy status written; kube-controller-manager
//!    writes the in-tree one).
//! 3. the binding is deleted and requests are seen admitted (and, for celgate, the policy seen
//!    not Ready) before the next sample.
//!
//! celgate runs with `--log-json`; each binding sample is split by its log lines after the
//! create: → `compiled policy` (if the policy was compiled again), → `published policy set`
//! (the watch delay, the compile and the set built: celgate's own work), → `webhook
//! configurations applied` (the registration's write of the rules the binding adds), and the
//! rest → first denial (kube-apiserver picking the configuration up, and the request); and by
//! kube-apiserver's audit log: → celgate's apply of the ValidatingWebhookConfiguration received,
//! → answered.
//!
//! Prints p50/p99/max per engine and measure, and the violations, and writes them to
//! `target/bench/apply.json`; exits non-zero when `Ready` was True before enforcement. With fewer
//! than 100 samples p99 is the slowest sample. Environment: `BENCH_APPLY_SAMPLES` (per engine,
//! default 20), `BENCH_APPLY_REPORT` (report path), `CELGATE_BIN` (the celgate binary; `make
//! bench-apply` passes the release build).

use celgate_e2e::bench::percentile;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime};

use celgate_e2e::demo::{BINDING_NAME, CELGATE_API, IN_TREE_API, POLICY_NAME, binding, policy};
use celgate_e2e::log::{epoch_seconds, message_times, parse_utc};
use celgate_e2e::{
    Celgate, Cluster, create_namespace, dry_run_deployment, free_port, policies_api, wait_admitted,
    wait_for, workspace,
};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// How often a sample asks whether the binding is enforced yet.
const POLL: Duration = Duration::from_millis(2);
/// How long one binding may take to be enforced before the run is abandoned.
const GIVE_UP: Duration = Duration::from_secs(30);

/// One engine under measurement.
struct Engine {
    name: &'static str,
    api: &'static str,
    /// The namespace its binding selects (labelled `engine=<name>`).
    namespace: &'static str,
}

const ENGINES: [Engine; 2] = [
    Engine {
        name: "celgate",
        api: CELGATE_API,
        namespace: "celgate-bench",
    },
    Engine {
        name: "in-tree",
        api: IN_TREE_API,
        namespace: "intree-bench",
    },
];

fn bindings(client: &kube::Client, api_version: &str) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: "ValidatingAdmissionPolicyBinding".into(),
        plural: "validatingadmissionpolicybindings".into(),
    };
    Api::all_with(client.clone(), &resource)
}

/// What one sample measured.
struct Sample {
    /// When the binding was created (Unix seconds).
    created_at: f64,
    /// Binding created → first request denied.
    enforced: Duration,
    /// Binding created → its status describes its generation (celgate only).
    binding_status: Option<Duration>,
    /// Policy changed → its status describes the new generation.
    policy_status: Duration,
    /// Each time a request sent after `Ready` was seen True was admitted: what was Ready, when.
    violations: Vec<String>,
}

/// Whether `object`'s status describes its generation, and whether its `Ready` is True then.
fn status_of(object: &DynamicObject) -> (bool, bool) {
    let status = object.data.get("status");
    let current = status
        .and_then(|s| s["observedGeneration"].as_i64())
        .is_some_and(|g| Some(g) == object.metadata.generation);
    let ready = current
        && status
            .and_then(|s| s["conditions"].as_array())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
    (current, ready)
}

/// What one poll read of celgate's binding and policy: whether the binding's status describes
/// its generation, and which of the two were Ready.
async fn read_ready(
    bindings: &Api<DynamicObject>,
    policies: &Api<DynamicObject>,
) -> (bool, Vec<&'static str>) {
    let (binding, policy) = tokio::join!(bindings.get(BINDING_NAME), policies.get(POLICY_NAME));
    let mut ready = Vec::new();
    let (current, binding_ready) = binding.map_or((false, false), |b| status_of(&b));
    if binding_ready {
        ready.push("binding");
    }
    if policy.is_ok_and(|p| status_of(&p).1) {
        ready.push("policy");
    }
    (current, ready)
}

/// Creates the binding and polls until a request is denied (and, for celgate, until the
/// binding's status is written), checking that `Ready` is never True before a denial. For
/// celgate each poll reads the statuses beside its request, so a poll takes one round trip
/// whichever the engine; a request is a violation when it was admitted although sent after a
/// read (the previous poll's) that saw `Ready` True.
async fn bind(client: &kube::Client, engine: &Engine, sample: &mut Sample) {
    let api = bindings(client, engine.api);
    let policies = policies_api(client, engine.api);
    let celgate = engine.api == CELGATE_API;
    let object: DynamicObject = serde_saphyr::from_str(&binding(engine.api, engine.name))
        .unwrap_or_else(|e| panic!("binding fixture: {e}"));
    let started = Instant::now();
    sample.created_at = epoch_seconds(SystemTime::now());
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("{}: cannot create the binding: {e}", engine.name));
    let mut enforced = None;
    // What the last completed read saw Ready, and when it was sent.
    let mut ready_before: (Vec<&str>, Duration) = (Vec::new(), Duration::ZERO);
    loop {
        let at = started.elapsed();
        let reads = async {
            if celgate {
                Some(read_ready(&api, &policies).await)
            } else {
                None
            }
        };
        // The request's answer is timed when it arrives, not when the reads beside it end.
        let (read, (denied, answered)) = tokio::join!(reads, async {
            let denied = dry_run_deployment(client, engine.namespace, 6)
                .await
                .is_err();
            (denied, started.elapsed())
        });
        if denied && enforced.is_none() {
            enforced = Some(answered);
        }
        if !denied && !ready_before.0.is_empty() {
            sample.violations.push(format!(
                "{} Ready at {:.1} ms, a request after it admitted",
                ready_before.0.join(" and "),
                ms(ready_before.1)
            ));
        }
        if let Some((current, ready)) = read {
            if current && sample.binding_status.is_none() {
                sample.binding_status = Some(at);
            }
            ready_before = (ready, at);
        }
        if enforced.is_some() && (!celgate || sample.binding_status.is_some()) {
            break;
        }
        assert!(
            started.elapsed() < GIVE_UP,
            "{}: the binding was not enforced (or its status not written) within {GIVE_UP:?}; giving up",
            engine.name
        );
        tokio::time::sleep(POLL).await;
    }
    sample.enforced = enforced.unwrap_or_default();
}

/// Changes the policy's message (a new generation) and polls until its status describes it.
async fn change_policy(client: &kube::Client, engine: &Engine, round: usize) -> Duration {
    let policies = policies_api(client, engine.api);
    let mut body: Value = serde_saphyr::from_str(&policy(engine.api, 5))
        .unwrap_or_else(|e| panic!("policy fixture: {e}"));
    body["spec"]["validations"][0]["message"] = json!(format!("too many replicas ({round})"));
    let started = Instant::now();
    let changed = policies
        .patch(
            POLICY_NAME,
            &PatchParams::apply("bench-apply").force(),
            &Patch::Apply(&body),
        )
        .await
        .unwrap_or_else(|e| panic!("{}: cannot change the policy: {e}", engine.name));
    let generation = changed.metadata.generation;
    loop {
        if let Ok(p) = policies.get(POLICY_NAME).await
            && p.metadata.generation == generation
            && status_of(&p).0
        {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < GIVE_UP,
            "{}: the policy's status was not written within {GIVE_UP:?}; giving up",
            engine.name
        );
        tokio::time::sleep(POLL).await;
    }
}

/// One sample: bind, change the policy, unbind.
async fn sample(client: &kube::Client, engine: &Engine, round: usize) -> Sample {
    let mut sample = Sample {
        created_at: 0.0,
        enforced: Duration::ZERO,
        binding_status: None,
        policy_status: Duration::ZERO,
        violations: Vec::new(),
    };
    bind(client, engine, &mut sample).await;
    sample.policy_status = change_policy(client, engine, round).await;
    bindings(client, engine.api)
        .delete(BINDING_NAME, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{}: cannot delete the binding: {e}", engine.name));
    wait_admitted(client, engine.namespace, 6).await;
    if engine.api == CELGATE_API {
        let policies = policies_api(client, engine.api);
        wait_for("the unbound policy to be not Ready", GIVE_UP, || async {
            let p = policies.get(POLICY_NAME).await.ok()?;
            let (current, ready) = status_of(&p);
            (current && !ready).then_some(())
        })
        .await;
    }
    sample
}

/// The binding samples split by celgate's log: per sample, ms from the create to the first
/// line of each message after it (and before the next sample's create; a compile, before the
/// first denial).
fn split(log: &str, runs: &[Sample]) -> Value {
    // A compile after the first denial is the sample's policy change's, not the binding's.
    let parts = [
        ("compiled", "compiled policy", true),
        ("published", "published policy set", false),
        ("registered", "webhook configurations applied", false),
    ];
    let mut out = serde_json::Map::new();
    for (key, message, before_denial) in parts {
        let times = message_times(log, message);
        let per_sample: Vec<Option<f64>> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let until = if before_denial {
                    r.created_at + r.enforced.as_secs_f64()
                } else {
                    runs.get(i + 1).map_or(f64::MAX, |n| n.created_at)
                };
                let first = times
                    .iter()
                    .copied()
                    .filter(|t| *t >= r.created_at && *t < until)
                    .reduce(f64::min)?;
                Some(((first - r.created_at) * 10_000.0).round() / 10.0)
            })
            .collect();
        let mut found: Vec<Duration> = per_sample
            .iter()
            .flatten()
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
            .collect();
        found.sort();
        out.insert(
            format!("created_to_{key}"),
            json!({"samples_with_the_line": found.len(), "p50_ms": ms(percentile(&found, 0.5)),
                "p99_ms": ms(percentile(&found, 0.99)), "all_ms": per_sample}),
        );
    }
    println!(
        "binding created → celgate's log lines (celgate): {}",
        Value::Object(out.clone())
    );
    Value::Object(out)
}

/// The binding samples split by kube-apiserver's audit log: per sample, ms from the create to
/// when kube-apiserver received celgate's first apply of the ValidatingWebhookConfiguration
/// after it, and to when it answered that apply (so received − published is celgate's
/// registration, answered − received kube-apiserver's write).
fn registration_split(audit_log: &str, runs: &[Sample]) -> Value {
    let applies: Vec<(f64, f64)> = audit_log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["resource"] == "validatingwebhookconfigurations"
                && e["stage"] == "ResponseComplete"
        })
        .filter_map(|e| {
            Some((
                parse_utc(e["requestReceivedTimestamp"].as_str()?)?,
                parse_utc(e["stageTimestamp"].as_str()?)?,
            ))
        })
        .collect();
    let mut received = Vec::new();
    let mut answered = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let until = runs.get(i + 1).map_or(f64::MAX, |n| n.created_at);
        let first = applies
            .iter()
            .filter(|(at, _)| *at >= r.created_at && *at < until)
            .min_by(|a, b| a.0.total_cmp(&b.0));
        let since = |t: f64| ((t - r.created_at) * 10_000.0).round() / 10.0;
        received.push(first.map(|(at, _)| since(*at)));
        answered.push(first.map(|(_, done)| since(*done)));
    }
    let summary = |all: &[Option<f64>]| {
        let mut found: Vec<Duration> = all
            .iter()
            .flatten()
            .map(|ms| Duration::from_secs_f64(ms.max(0.0) / 1000.0))
            .collect();
        found.sort();
        json!({"samples_with_the_request": found.len(), "p50_ms": ms(percentile(&found, 0.5)),
            "p99_ms": ms(percentile(&found, 0.99)), "all_ms": all})
    };
    let out = json!({"created_to_apply_received": summary(&received),
        "created_to_apply_answered": summary(&answered)});
    println!("binding created → kube-apiserver's audit log (celgate's configuration apply): {out}");
    out
}

/// p50/p99/max of `times`, printed as `what` and returned as JSON.
fn summary(engine: &str, what: &str, mut times: Vec<Duration>) -> Value {
    times.sort();
    let (p50, p99, max) = (
        percentile(&times, 0.50),
        percentile(&times, 0.99),
        times.last().copied().unwrap_or_default(),
    );
    println!(
        "{what} ({engine}): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} samples)",
        ms(p50),
        ms(p99),
        ms(max),
        times.len()
    );
    json!({"samples": times.len(), "p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(max)})
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

fn samples() -> usize {
    match std::env::var("BENCH_APPLY_SAMPLES") {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("BENCH_APPLY_SAMPLES={v:?}: expected a positive integer")),
        Err(_) => 20,
    }
}

fn report_path() -> PathBuf {
    std::env::var_os("BENCH_APPLY_REPORT").map_or_else(
        || workspace().join("target/bench/apply.json"),
        PathBuf::from,
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let samples = samples();
    let cluster = Cluster::start();
    cluster.install_crds();
    let celgate = Celgate::spawn_with(&cluster, free_port(), "celgate", &["--log-json"], "info");
    celgate.wait_ready().await;
    let client = cluster.client().await;
    let mut report = serde_json::Map::new();
    let mut violations = Vec::new();
    for engine in &ENGINES {
        create_namespace(&client, engine.namespace, engine.name).await;
        cluster.apply(&policy(engine.api, 5));
        // One poll before the first sample, so the client has opened the connections its
        // concurrent requests take (the first sample's poll took 40 ms more without it).
        let (binding_api, policy_api) = (
            bindings(&client, engine.api),
            policies_api(&client, engine.api),
        );
        let _ = tokio::join!(
            read_ready(&binding_api, &policy_api),
            dry_run_deployment(&client, engine.namespace, 6)
        );
        let mut runs = Vec::with_capacity(samples);
        for round in 0..samples {
            runs.push(sample(&client, engine, round).await);
        }
        let mut entry = serde_json::Map::new();
        entry.insert(
            "binding_created_to_enforced".into(),
            summary(
                engine.name,
                "binding created → enforced",
                runs.iter().map(|r| r.enforced).collect(),
            ),
        );
        entry.insert(
            "policy_changed_to_status_written".into(),
            summary(
                engine.name,
                "policy changed → status written",
                runs.iter().map(|r| r.policy_status).collect(),
            ),
        );
        if engine.api == CELGATE_API {
            entry.insert("log_split".into(), split(&celgate.logs(), &runs));
            let audit_log =
                std::fs::read_to_string(cluster.dir().join("audit.log")).unwrap_or_default();
            entry.insert(
                "registration_split".into(),
                registration_split(&audit_log, &runs),
            );
            entry.insert(
                "binding_created_to_status_written".into(),
                summary(
                    engine.name,
                    "binding created → status written",
                    runs.iter().filter_map(|r| r.binding_status).collect(),
                ),
            );
            let found: Vec<String> = runs
                .iter()
                .enumerate()
                .flat_map(|(i, r)| r.violations.iter().map(move |v| format!("sample {i}: {v}")))
                .collect();
            println!(
                "Ready True before enforced ({}): {} times in {samples} samples",
                engine.name,
                found.len()
            );
            for v in &found {
                println!("  {v}");
            }
            entry.insert("ready_before_enforced".into(), json!(found));
            violations.extend(found);
        }
        report.insert(engine.name.to_string(), Value::Object(entry));
    }
    let report = json!({
        "measures": {
            "binding_created_to_enforced": "binding created → first dry-run Deployment denied",
            "binding_created_to_status_written": "binding created → its status.observedGeneration is its generation",
            "policy_changed_to_status_written": "policy message changed → its status.observedGeneration is the new generation",
            "ready_before_enforced": "requests admitted after Ready was seen True on the binding or the policy (must be empty)",
            "registration_split": "celgate only: binding created → kube-apiserver received (and answered) celgate's first apply of the ValidatingWebhookConfiguration after it (its audit log)",
            "log_split": "celgate only: binding created → the first `compiled policy` (before the first denial), `published policy set` and `webhook configurations applied` (before the next sample) log line after it (null: none)",
        },
        "poll_ms": ms(POLL),
        "celgate_bin": Celgate::binary().display().to_string(),
        "engines": report,
    });
    let path = report_path();
    celgate_e2e::bench::write_report(&path, &report);
    if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "Ready was True before the binding was enforced {} times",
            violations.len()
        );
        ExitCode::FAILURE
    }
}
