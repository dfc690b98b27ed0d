//! `make bench-apply`: how long a binding takes from its creation to the first request it denies,
//! for celgate and for the in-tree plugin, against one local control plane.
//!
//! The demo policy is applied once per engine; then, per sample, its binding is created with the
//! kube client (no kubectl start-up in the measurement), a dry-run Deployment over the limit is
//! sent every `POLL` until one is denied, and the binding is deleted and seen gone before the
//! next sample. celgate's time includes its snapshot rebuild and, when the binding changes the
//! rules it registers, kube-apiserver picking up the new webhook configuration.
//!
//! Prints p50/p99/max per engine and writes them to `target/bench/apply.json`. With fewer than
//! 100 samples p99 is the slowest sample. Environment: `BENCH_APPLY_SAMPLES` (per engine, default
//! 20), `BENCH_APPLY_REPORT` (report path), `CELGATE_BIN` (the celgate binary; `make bench-apply`
//! passes the release build).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use celgate_e2e::demo::{BINDING_NAME, CELGATE_API, IN_TREE_API, binding, policy};
use celgate_e2e::{
    Celgate, Cluster, create_namespace, dry_run_deployment, wait_admitted, workspace,
};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;

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

/// Creates the binding, waits for the first denial and returns the time between; then deletes
/// the binding and waits until requests are admitted again.
async fn sample(client: &kube::Client, engine: &Engine) -> Duration {
    let api = bindings(client, engine.api);
    let object: DynamicObject = serde_saphyr::from_str(&binding(engine.api, engine.name))
        .unwrap_or_else(|e| panic!("binding fixture: {e}"));
    let started = Instant::now();
    api.create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("{}: cannot create the binding: {e}", engine.name));
    while dry_run_deployment(client, engine.namespace, 6)
        .await
        .is_ok()
    {
        assert!(
            started.elapsed() < GIVE_UP,
            "{}: the binding was not enforced within {GIVE_UP:?}; giving up",
            engine.name
        );
        tokio::time::sleep(POLL).await;
    }
    let took = started.elapsed();
    api.delete(BINDING_NAME, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("{}: cannot delete the binding: {e}", engine.name));
    wait_admitted(client, engine.namespace, 6).await;
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len().saturating_sub(1)) as f64 * p).round() as usize;
    sorted
        .get(idx.min(sorted.len().saturating_sub(1)))
        .copied()
        .unwrap_or_default()
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
async fn main() {
    let samples = samples();
    let cluster = Cluster::start();
    cluster.install_crds();
    let _celgate = Celgate::start(&cluster).await;
    let client = cluster.client().await;
    let mut report = serde_json::Map::new();
    for engine in &ENGINES {
        create_namespace(&client, engine.namespace, engine.name).await;
        cluster.apply(&policy(engine.api, 5));
        let mut times = Vec::with_capacity(samples);
        for _ in 0..samples {
            times.push(sample(&client, engine).await);
        }
        times.sort();
        let (p50, p99, max) = (
            percentile(&times, 0.50),
            percentile(&times, 0.99),
            times.last().copied().unwrap_or_default(),
        );
        println!(
            "apply → enforced ({}): p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({samples} samples)",
            engine.name,
            ms(p50),
            ms(p99),
            ms(max)
        );
        report.insert(
            engine.name.to_string(),
            json!({"samples": samples, "p50_ms": ms(p50), "p99_ms": ms(p99), "max_ms": ms(max)}),
        );
    }
    let report = json!({
        "measure": "binding created → first dry-run Deployment denied",
        "poll_ms": ms(POLL),
        "celgate_bin": Celgate::binary().display().to_string(),
        "engines": report,
    });
    let path = report_path();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    }
    let text = serde_json::to_string_pretty(&report)
        .unwrap_or_else(|e| panic!("cannot serialise the report: {e}"));
    std::fs::write(&path, text + "\n")
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    println!("report: {}", path.display());
}
