//! `make bench-scale` (issue 13, item 4; issue 46, part 2): celgate (the release build,
//! `CELGATE_BIN`) with 1,000 ValidatingAdmissionPolicies of the realistic mix
//! (`celgate_e2e::fixture`: ConfigMap params, variables, message expressions, match conditions, a
//! wildcard rule; 20 of them match the fixture's Pod), each with `BENCH_SCALE_BINDINGS_PER_POLICY`
//! bindings, on one local control plane. A policy's first binding is the fixture's; its others
//! are the same binding for one more tenant (`matchResources.namespaceSelector` on the label
//! `celgate-bench/tenant: t<j>`, which the review namespace does not carry), so the Pod is still
//! reviewed by 20 bindings while celgate holds them all. Measures:
//! - start-up: the policies and bindings are created first (`BENCH_SCALE_CLIENTS` concurrent
//!   clients, a 429 retried after a pause and counted), then celgate is started; process start
//!   → `/readyz`, → every policy's status `Ready` True for its generation, and → every binding's
//!   status describes its generation (the status writer's pace, with its status requests per
//!   second from kube-apiserver's `apiserver_request_total`; bounded by
//!   `BENCH_SCALE_STATUS_SECONDS`);
//! - resident memory (VmRSS, VmHWM from `/proc/<pid>/status`) idle after start-up, and after
//!   `BENCH_SCALE_REVIEWS` dry-run Pod creates through kube-apiserver (each reviewed by the 20);
//! - apply → enforced for one changed policy while all are loaded: a Pod policy's expression is
//!   changed to deny a name, and a dry-run Pod of that name is created every `POLL` until denied;
//!   split, by celgate's JSON log (`compiled policy` with the new generation), into change →
//!   compiled (watch delay and compile) and compiled → first denial (publish, and the request
//!   through kube-apiserver);
//! - apply → enforced for a new binding while all are loaded: a stored probe policy's binding is
//!   created, and a dry-run Pod it denies is sent every `POLL` until denied (then the binding is
//!   deleted and the Pod seen admitted again before the next sample);
//! - with `BENCH_SCALE_PARAMS` (10,000; 0 skips it) more param ConfigMaps loaded beside them:
//!   resident memory, and change → enforced for a param change (a probe policy denies the Pod
//!   its param names) and for a namespace change (a probe policy denies the Pod a label of its
//!   namespace names, read through `namespaceObject`).
//!
//! Targets (issues 13 and 46) are reported by `make bench`'s table, not asserted here. Writes
//! `target/bench/scale.json`, or with more than one binding per policy
//! `target/bench/scale-bindings.json`. Environment: `BENCH_SCALE_POLICIES` (default 1000),
//! `BENCH_SCALE_BINDINGS_PER_POLICY` (default 1), `BENCH_SCALE_CLIENTS` (concurrent creating
//! clients, default 8), `BENCH_SCALE_STATUS_SECONDS` (how long the status writer may take,
//! default 900), `BENCH_SCALE_SAMPLES` (apply → enforced samples, default 5),
//! `BENCH_SCALE_REVIEWS` (default 300), `BENCH_SCALE_SETTLE_SECONDS` (idle wait before the first
//! memory reading, default 10), `BENCH_SCALE_PARAMS` (default 10000), `BENCH_SCALE_RUST_LOG`
//! (celgate's log filter, default `info`), `BENCH_SCALE_CELGATE_ARGS` (more `celgate run` flags,
//! space-separated: `--audit=false` to see what the audit costs), `BENCH_SCALE_REPORT` (report
//! path), `CELGATE_BIN`.

use celgate_e2e::bench::{
    api_resource, apiserver_metrics, create_objects, env_count, env_usize, loadavg, metric_total,
};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use celgate_e2e::demo::CELGATE_API;
use celgate_e2e::log::{compiled_lines, epoch_seconds};
use celgate_e2e::{Celgate, Cluster, curl, fixture, free_port, policies_api, wait_for, workspace};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// How often a sample asks whether the changed policy is enforced yet.
const POLL: Duration = Duration::from_millis(5);
/// How long any one wait may take before the run is abandoned.
const GIVE_UP: Duration = Duration::from_secs(600);
/// Concurrent clients sending the load.
const CLIENTS: usize = 8;
/// How often the bindings' status is counted while the status writer catches up.
const STATUS_POLL: Duration = Duration::from_secs(5);

fn resource(kind: &str) -> ApiResource {
    api_resource(CELGATE_API, kind)
}

/// How many stored bindings have a status that describes their generation, and how many
/// there are (read in pages of 5,000).
async fn bindings_with_status(client: &kube::Client) -> (usize, usize) {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("ValidatingAdmissionPolicyBinding"),
    );
    let (mut current, mut total) = (0, 0);
    let mut params = ListParams::default().limit(5000);
    loop {
        let Ok(page) = api.list(&params).await else {
            return (current, total);
        };
        total += page.items.len();
        current += page
            .items
            .iter()
            .filter(|b| describes_generation(b))
            .count();
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return (current, total),
        }
    }
}

/// kube-apiserver's count of requests to the bindings' status subresource so far
/// (`apiserver_request_total`, every verb and code).
async fn binding_status_requests(client: &kube::Client) -> f64 {
    metric_total(
        &apiserver_metrics(client).await,
        "apiserver_request_total",
        &[
            "resource=\"validatingadmissionpolicybindings\"",
            "subresource=\"status\"",
            "group=\"admission.celgate.io\"",
        ],
    )
}

/// The fixture's namespaces, its service account and its param ConfigMaps.
async fn create_surroundings(client: &kube::Client) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in [
        fixture::review_namespace(),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": fixture::PARAMS_NAMESPACE}}),
    ] {
        let ns: Namespace = serde_json::from_value(ns).unwrap_or_else(|e| panic!("{e}"));
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("cannot create a namespace: {e}"));
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), fixture::REVIEW_NAMESPACE);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": fixture::SERVICE_ACCOUNT}}))
            .unwrap_or_else(|e| panic!("{e}"));
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap_or_else(|e| panic!("cannot create the service account: {e}"));
    celgate_e2e::bench::create_param_configmaps(client).await;
}

/// The fixture's Pod named `name`, as a client sends it.
fn pod(name: &str) -> Pod {
    serde_json::from_value(fixture::client_pod(name)).unwrap_or_else(|e| panic!("fixture pod: {e}"))
}

/// A dry-run create of the fixture's Pod named `name`: `Ok` when admitted.
async fn dry_run_pod(client: &kube::Client, name: &str) -> Result<(), String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), fixture::REVIEW_NAMESPACE);
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    pods.create(&params, &pod(name))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Whether `object`'s status describes its generation.
fn describes_generation(object: &DynamicObject) -> bool {
    object
        .data
        .get("status")
        .and_then(|s| s["observedGeneration"].as_i64())
        .is_some_and(|g| Some(g) == object.metadata.generation)
}

/// Whether `object`'s status describes its generation with `Ready` True.
fn ready(object: &DynamicObject) -> bool {
    let status = object.data.get("status");
    describes_generation(object)
        && status
            .and_then(|s| s["conditions"].as_array())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
}

/// VmRSS and VmHWM of `pid` in MB, and the RSS's anonymous (heap) and file-backed (the
/// binary's pages) parts.
fn memory(pid: u32) -> Value {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status: {e}"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<f64>().ok())
            .map(|kb| (kb / 1024.0 * 10.0).round() / 10.0)
    };
    json!({"rss_mb": field("VmRSS:"), "hwm_mb": field("VmHWM:"),
        "anon_mb": field("RssAnon:"), "file_mb": field("RssFile:")})
}

/// `reviews` dry-run Pod creates over `CLIENTS` clients, each of which must be admitted;
/// returns creates per second.
async fn load(client: &kube::Client, reviews: usize) -> f64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            for k in (c..reviews).step_by(CLIENTS) {
                let name = format!("load-{k}");
                if let Err(e) = dry_run_pod(&client, &name).await {
                    panic!("the fixture Pod was not admitted: {e}");
                }
            }
        }));
    }
    for t in tasks {
        t.await
            .unwrap_or_else(|e| panic!("a loading client failed: {e}"));
    }
    reviews as f64 / started.elapsed().as_secs_f64()
}

/// One apply → enforced sample.
struct Enforced {
    /// Change → first denial.
    total: Duration,
    /// Change → celgate logged the new generation compiled (`None`: no such line found).
    compiled: Option<f64>,
}

/// Changes `policy`'s validations to deny Pods named `probe-<round>` and polls with such a Pod
/// until one is denied; returns the time from the change to the first denial, and to the log
/// line of its compile.
async fn change_to_enforced(
    client: &kube::Client,
    celgate: &Celgate,
    policy: &str,
    round: usize,
) -> Enforced {
    let policies = policies_api(client, CELGATE_API);
    let name = format!("probe-{round}");
    let patch = json!({"spec": {"validations": [{
        "expression": format!("object.metadata.name != '{name}'"), "reason": "Invalid"}]}});
    let (started, wall) = (Instant::now(), SystemTime::now());
    let changed = policies
        .patch(policy, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("cannot change {policy}: {e}"));
    let generation = changed.metadata.generation.unwrap_or_default();
    let total = until_denied(client, &name, started, policy).await;
    let compiled = compiled_lines(&celgate.logs())
        .into_iter()
        .find(|(_, p, g)| p == policy && *g == generation)
        .map(|(t, _, _)| t - epoch_seconds(wall));
    Enforced { total, compiled }
}

/// Creates dry-run Pods named `name` every `POLL` until one is denied; the time from `started`.
/// Gives up (panics) after 30 s: `what` changed and was never enforced.
async fn until_denied(client: &kube::Client, name: &str, started: Instant, what: &str) -> Duration {
    loop {
        if dry_run_pod(client, name).await.is_err() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: the change was not enforced within 30 s; giving up"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// The probe policy of the binding samples: it denies Pods named `bind-probe`, once bound.
const BINDING_PROBE: &str = "bench-binding-probe";

/// `samples` times: the binding of [`BINDING_PROBE`] created → the first Pod it denies; then
/// the binding deleted and the Pod seen admitted again.
async fn binding_to_enforced(client: &kube::Client, samples: usize) -> Vec<Duration> {
    let policy = json!({"apiVersion": CELGATE_API, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": BINDING_PROBE}, "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["pods"], "operations": ["CREATE"]}]},
            "validations": [{"expression": "object.metadata.name != 'bind-probe'",
                "reason": "Forbidden"}]}});
    create_objects(client, vec![policy], 1).await;
    let bindings: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &resource("ValidatingAdmissionPolicyBinding"),
    );
    let name = format!("{BINDING_PROBE}-binding");
    let binding: DynamicObject = serde_json::from_value(json!({"apiVersion": CELGATE_API,
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
        "spec": {"policyName": BINDING_PROBE, "validationActions": ["Deny"]}}))
    .unwrap_or_else(|e| panic!("the probe binding: {e}"));
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let started = Instant::now();
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap_or_else(|e| panic!("cannot create the probe binding: {e}"));
        times.push(until_denied(client, "bind-probe", started, "a new binding").await);
        bindings
            .delete(&name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("cannot delete the probe binding: {e}"));
        let unbound = Instant::now();
        while dry_run_pod(client, "bind-probe").await.is_err() {
            assert!(
                unbound.elapsed() < Duration::from_secs(30),
                "the deleted probe binding was still enforced after 30 s"
            );
            tokio::time::sleep(POLL).await;
        }
    }
    times
}

/// `count` more ConfigMaps in the params namespace (the policies' param kind), created with
/// `CLIENTS` concurrent clients; returns how long that took.
async fn create_params(client: &kube::Client, count: usize) -> Duration {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), fixture::PARAMS_NAMESPACE);
        tasks.push(tokio::spawn(async move {
            for k in (c..count).step_by(CLIENTS) {
                let cm: ConfigMap = serde_json::from_value(json!({
                    "metadata": {"name": format!("extra-param-{k:05}")},
                    "data": {"registry": "registry.example.com/", "maxcontainers": "8", "team": "storefront"}}))
                .unwrap_or_else(|e| panic!("{e}"));
                maps.create(&PostParams::default(), &cm)
                    .await
                    .unwrap_or_else(|e| panic!("cannot create param ConfigMap {k}: {e}"));
            }
        }));
    }
    for t in tasks {
        t.await
            .unwrap_or_else(|e| panic!("a creating client failed: {e}"));
    }
    started.elapsed()
}

/// The probe policies of the params phase, with their bindings: `bench-param-probe` denies a
/// Pod named as its param `probe-param` says (`data.deny`); `bench-namespace-probe` denies a
/// Pod named as its namespace's label `celgate-bench/deny` says.
fn probe_policies() -> Vec<Value> {
    let pods = json!([{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
        "operations": ["CREATE"]}]);
    let policy = |name: &str, param: bool, expression: &str| {
        let mut spec = json!({"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": pods.clone()},
            "validations": [{"expression": expression, "reason": "Forbidden"}]});
        if param {
            spec["paramKind"] = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        }
        json!({"apiVersion": CELGATE_API, "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name}, "spec": spec})
    };
    let binding = |name: &str, param: bool| {
        let mut spec = json!({"policyName": name, "validationActions": ["Deny"]});
        if param {
            spec["paramRef"] = json!({"name": "probe-param", "namespace": fixture::PARAMS_NAMESPACE,
                "parameterNotFoundAction": "Deny"});
        }
        json!({"apiVersion": CELGATE_API, "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": format!("{name}-binding")}, "spec": spec})
    };
    vec![
        policy(
            "bench-param-probe",
            true,
            "object.metadata.name != params.data.deny",
        ),
        binding("bench-param-probe", true),
        policy(
            "bench-namespace-probe",
            false,
            "!('celgate-bench/deny' in namespaceObject.metadata.labels) || namespaceObject.metadata.labels['celgate-bench/deny'] != object.metadata.name",
        ),
        binding("bench-namespace-probe", false),
    ]
}

/// Sets the probe param's `data.deny` (creating the ConfigMap the first time).
async fn set_probe_param(client: &kube::Client, deny: &str) {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), fixture::PARAMS_NAMESPACE);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "probe-param"}, "data": {"deny": deny}});
    maps.patch(
        "probe-param",
        &PatchParams::apply("celgate-bench").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap_or_else(|e| panic!("cannot set the probe param: {e}"));
}

/// Labels the review namespace `celgate-bench/deny=<deny>`.
async fn set_namespace_label(client: &kube::Client, deny: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let patch = json!({"metadata": {"labels": {"celgate-bench/deny": deny}}});
    namespaces
        .patch(
            fixture::REVIEW_NAMESPACE,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot label the namespace: {e}"));
}

/// The params phase: `count` more params loaded, then `samples` param changes and `samples`
/// namespace changes, each timed from the change to the first denial it causes.
async fn params_phase(
    client: &kube::Client,
    celgate: &Celgate,
    count: usize,
    samples: usize,
) -> Value {
    let created = create_params(client, count).await;
    println!(
        "created {count} more param ConfigMaps in {:.0} ms",
        ms(created)
    );
    set_probe_param(client, "warm-up").await;
    create_objects(client, probe_policies(), 1).await;
    // Both probes enforced once before any sample (their compile is not what is measured).
    until_denied(client, "warm-up", Instant::now(), "the param probe policy").await;
    set_namespace_label(client, "warm-up-ns").await;
    until_denied(
        client,
        "warm-up-ns",
        Instant::now(),
        "the namespace probe policy",
    )
    .await;
    let memory_loaded = memory(celgate.pid());
    println!("with {count} more params loaded: {memory_loaded}");
    let (mut param_times, mut namespace_times) = (Vec::new(), Vec::new());
    for round in 0..samples {
        let name = format!("param-probe-{round}");
        let started = Instant::now();
        set_probe_param(client, &name).await;
        param_times.push(until_denied(client, &name, started, "a param change").await);
        let name = format!("namespace-probe-{round}");
        let started = Instant::now();
        set_namespace_label(client, &name).await;
        namespace_times.push(until_denied(client, &name, started, "a namespace change").await);
    }
    let param = summary(param_times);
    let namespace = summary(namespace_times);
    println!("param changed → first denial ({count} more params loaded): {param}");
    println!("namespace changed → first denial ({count} more params loaded): {namespace}");
    json!({"extra_params": count, "created_ms": ms(created), "memory": memory_loaded,
        "param_change_to_enforced": param, "namespace_change_to_enforced": namespace})
}

/// p50, p99 and max of timed samples, with every sample in the order taken.
fn summary(samples: Vec<Duration>) -> Value {
    let all_ms: Vec<f64> = samples.iter().copied().map(ms).collect();
    let mut times = samples;
    times.sort();
    let pick = |p: f64| {
        let i = ((times.len().saturating_sub(1)) as f64 * p).round() as usize;
        times.get(i).copied().map(ms)
    };
    json!({"samples": times.len(), "p50_ms": pick(0.5), "p99_ms": pick(0.99),
        "max_ms": times.last().copied().map(ms), "poll_ms": ms(POLL), "all_ms": all_ms})
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// `BENCH_SCALE_REPORT`, else `target/bench/scale.json` (one binding per policy) or
/// `target/bench/scale-bindings.json`.
fn report_path(per_policy: usize) -> PathBuf {
    let default = if per_policy > 1 {
        "target/bench/scale-bindings.json"
    } else {
        "target/bench/scale.json"
    };
    std::env::var_os("BENCH_SCALE_REPORT").map_or_else(|| workspace().join(default), PathBuf::from)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let total = env_usize("BENCH_SCALE_POLICIES", 1000);
    let per_policy = env_usize("BENCH_SCALE_BINDINGS_PER_POLICY", 1);
    let clients = env_usize("BENCH_SCALE_CLIENTS", 8);
    let status_limit = Duration::from_secs(env_usize("BENCH_SCALE_STATUS_SECONDS", 900) as u64);
    let samples = env_usize("BENCH_SCALE_SAMPLES", 5);
    let reviews = env_usize("BENCH_SCALE_REVIEWS", 300);
    let extra_params = env_count("BENCH_SCALE_PARAMS", 10_000);
    let settle = Duration::from_secs(env_usize("BENCH_SCALE_SETTLE_SECONDS", 10) as u64);
    let bindings = total * per_policy;
    let load_before = loadavg();
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    create_surroundings(&client).await;

    let policies = fixture::validating(total, 20.min(total));
    let changed = policies
        .iter()
        .find(|p| p.matches_review && p.rule.resources == ["pods"])
        .map(|p| p.name.clone())
        .unwrap_or_else(|| panic!("the fixture has no Pod policy"));
    let creating = Instant::now();
    let throttled = create_objects(
        &client,
        fixture::with_tenant_bindings(
            fixture::validating_manifests(CELGATE_API, &policies),
            per_policy,
        ),
        clients,
    )
    .await;
    let created_ms = ms(creating.elapsed());
    let create_rate = (total + bindings) as f64 / creating.elapsed().as_secs_f64();
    println!(
        "created {total} policies and {bindings} bindings in {created_ms:.0} ms \
         ({create_rate:.0}/s, {clients} clients, {throttled} answers 429)"
    );

    let status_requests_before = binding_status_requests(&client).await;
    let (started, started_wall) = (Instant::now(), SystemTime::now());
    let rust_log = std::env::var("BENCH_SCALE_RUST_LOG").unwrap_or_else(|_| "info".into());
    let extra = std::env::var("BENCH_SCALE_CELGATE_ARGS").unwrap_or_default();
    let args: Vec<&str> = std::iter::once("--log-json")
        .chain(extra.split_whitespace())
        .collect();
    let celgate = Celgate::spawn_with(&cluster, free_port(), "celgate", &args, &rust_log);
    let url = format!("https://127.0.0.1:{}/readyz", celgate.port);
    wait_for("celgate /readyz", GIVE_UP, || {
        let url = url.clone();
        async move { curl(&["-skf", &url]).status.success().then_some(()) }
    })
    .await;
    let ready_ms = ms(started.elapsed());
    // Every policy Ready, or as many as were after GIVE_UP (a result, not a failure).
    let api = policies_api(&client, CELGATE_API);
    let mut policies_ready = 0;
    while policies_ready < total && started.elapsed() < GIVE_UP {
        if let Ok(list) = api.list(&Default::default()).await {
            policies_ready = list.items.iter().filter(|p| ready(p)).count();
        }
        if policies_ready < total {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    let all_ready_ms = (policies_ready >= total).then(|| ms(started.elapsed()));
    if all_ready_ms.is_none() {
        println!(
            "only {policies_ready} of {total} policies Ready {GIVE_UP:?} after the start; going on"
        );
    }
    let startup_memory = memory(celgate.pid());
    // The status writer's pace: every binding's status written, counted every STATUS_POLL.
    let (mut written, mut stored) = bindings_with_status(&client).await;
    while written < bindings && started.elapsed() < status_limit {
        tokio::time::sleep(STATUS_POLL).await;
        (written, stored) = bindings_with_status(&client).await;
        println!(
            "{:.0} s after start: {written} of {stored} bindings' status written",
            started.elapsed().as_secs_f64()
        );
    }
    let status_elapsed = started.elapsed();
    let status_requests = binding_status_requests(&client).await - status_requests_before;
    let status = json!({
        "bindings_written": written,
        "bindings_stored": stored,
        "all_written_ms": (written >= bindings).then(|| ms(status_elapsed)),
        "gave_up_after_ms": (written < bindings).then(|| ms(status_elapsed)),
        "status_requests": status_requests,
        "status_requests_per_second": (status_requests / status_elapsed.as_secs_f64()).round(),
        "poll_ms": ms(STATUS_POLL),
    });
    println!("status writer: {status}");
    // The first and the last compile of the start-up, relative to the process start.
    let compiles = compiled_lines(&celgate.logs());
    let since_start = |t: f64| ((t - epoch_seconds(started_wall)) * 10_000.0).round() / 10.0;
    let first_compiled_ms = compiles
        .iter()
        .map(|c| c.0)
        .reduce(f64::min)
        .map(since_start);
    let last_compiled_ms = compiles
        .iter()
        .map(|c| c.0)
        .reduce(f64::max)
        .map(since_start);
    println!(
        "start-up ({total} policies, {bindings} bindings): /readyz after {ready_ms:.0} ms, every policy Ready after {all_ready_ms:?} ms; \
         compiles logged from {first_compiled_ms:?} to {last_compiled_ms:?} ms ({} lines)",
        compiles.len()
    );
    tokio::time::sleep(settle).await;
    let idle = memory(celgate.pid());
    println!("idle after start-up: {idle}");
    let rate = load(&client, reviews).await;
    let after_load = memory(celgate.pid());
    println!(
        "after {reviews} dry-run Pod creates ({rate:.0}/s through kube-apiserver, {CLIENTS} clients): {after_load}"
    );

    let mut times: Vec<Duration> = Vec::with_capacity(samples);
    let mut to_compiled = Vec::with_capacity(samples);
    for round in 0..samples {
        let sample = change_to_enforced(&client, &celgate, &changed, round).await;
        times.push(sample.total);
        to_compiled.push(sample.compiled.map(|s| (s * 10_000.0).round() / 10.0));
    }
    let mut enforced = summary(times);
    enforced["change_to_compiled_log_ms"] = json!(to_compiled);
    println!("one policy changed → first denial ({total} loaded): {enforced}");
    let bound = summary(binding_to_enforced(&client, samples).await);
    println!("binding created → first denial ({bindings} bindings loaded): {bound}");
    let after_changes = memory(celgate.pid());
    let params = if extra_params > 0 {
        params_phase(&client, &celgate, extra_params, samples).await
    } else {
        Value::Null
    };

    let report = json!({
        "policies": total,
        "bindings": bindings,
        "bindings_per_policy": per_policy,
        "celgate_args": extra,
        "policies_matching_the_pod": 20.min(total),
        "celgate_bin": Celgate::binary().display().to_string(),
        "created_ms": created_ms,
        "create": {"per_second": create_rate.round(), "clients": clients, "answers_429": throttled},
        "startup": {"ready_ms": ready_ms, "all_policies_ready_ms": all_ready_ms,
            "policies_ready": policies_ready,
            "first_compiled_log_ms": first_compiled_ms, "last_compiled_log_ms": last_compiled_ms,
            "compiled_log_lines": compiles.len()},
        "status_writer": status,
        "memory": {"all_policies_ready": startup_memory, "idle": idle, "after_load": after_load,
            "after_changes": after_changes, "settle_seconds": settle.as_secs()},
        "load": {"dry_run_pod_creates": reviews, "per_second_through_apiserver": rate.round(),
            "clients": CLIENTS},
        "apply_to_enforced": enforced,
        "binding_to_enforced": bound,
        "changed_policy": changed,
        "params": params,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "measures": {
            "startup.ready_ms": "celgate process started (policies already stored) → /readyz answers 200",
            "startup.all_policies_ready_ms": "celgate process started → every policy's status Ready True for its generation (null: not within 600 s; policies_ready says how many were)",
            "status_writer": "celgate process started → every binding's status describes its generation (counted every poll_ms); status_requests: kube-apiserver's apiserver_request_total for the bindings' status subresource over that time",
            "memory": "VmRSS and VmHWM of the celgate process, MB",
            "apply_to_enforced": "one policy's validations changed (merge patch) → first dry-run Pod denied by it",
            "apply_to_enforced.change_to_compiled_log_ms": "per sample, in the order taken: change → celgate's `compiled policy` log line for the new generation (watch delay + compile); the rest of all_ms is publish + kube-apiserver",
            "binding_to_enforced": "a stored probe policy's binding created → first dry-run Pod denied by it",
            "startup.*_compiled_log_ms": "process start → the first and the last `compiled policy` log line",
            "params": "extra_params more ConfigMaps of the param kind created; then a probe policy's param (merge-applied) or the review namespace's label changed → first dry-run Pod denied because of it; memory with them loaded (null: BENCH_SCALE_PARAMS=0)",
        },
    });
    let path = report_path(per_policy);
    celgate_e2e::bench::write_report(&path, &report);
}
