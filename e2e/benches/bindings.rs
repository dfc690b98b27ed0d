//! `make bench-bindings` (issue 46, item 1): creates through kube-apiserver when one validating
//! policy has many bindings, or one binding selects many params, celgate (the release build,
//! `CELGATE_BIN`) beside the in-tree plugin on one local control plane.
//!
//! Each engine judges its own resource (in-tree Secrets, celgate ConfigMaps) in its own namespaces,
//! selected by its bindings' namespace selector (`bench=<scenario>-<engine>`), so every create is
//! judged by one engine only and the in-tree plugin's policy does not even match celgate's creates
//! (a namespace selector alone would leave it matching its bindings on each of them). Every
//! policy admits creates with an expression that reads the object (the name is not `deny-me`, or
//! not the param's `data.forbidden`), so each create is evaluated by every binding (and every
//! param) and succeeds. Before each cell, a dry-run create named `deny-me` must be denied by
//! each engine, which shows both enforce, and celgate's status writer must have caught up with
//! the new bindings (its status writes would load kube-apiserver and celgate during the cell).
//!
//! - `bindings`: one policy per engine with 10, 64, 256 and 1,024 bindings that all match (the
//!   bindings are added between cells).
//! - `params`: one policy per engine (paramKind ConfigMap) with one binding whose paramRef
//!   selector selects 10, 64, 256 and 1,024 ConfigMaps of one namespace, shared by both engines.
//!
//! In each cell one client alternates three creates: a ConfigMap in a namespace that no policy
//! and no webhook sees (`none`: celgate runs with it in `--excluded-namespaces`, so this is
//! kube-apiserver's own create path at that moment), an in-tree one and a celgate one; each stops
//! once it has made `BENCH_BINDINGS_CREATES` creates (default 200) or spent
//! `BENCH_BINDINGS_SECONDS` (default 15) of its own create time, so a cell takes at most about
//! three times that and the collapse of the in-tree plugin (kubernetes#133383) cannot stretch the
//! run. Figures per cell and phase: p50, p99, creates and creates/s (creates over that phase's
//! create time). Beside them, where a celgate create's time goes: celgate's own mean time per
//! review from its `celgate_webhook_request_duration_seconds` histogram, kube-apiserver's mean
//! time calling celgate's webhooks (`apiserver_admission_webhook_admission_duration_seconds`:
//! the round trip), and the no-engine create; and the floor of the in-tree/celgate ratio, in-tree
//! p99 over the no-engine p99 (what an engine that cost nothing would show). Since that floor
//! keeps any p99 ratio far under 100x on a small machine, each engine's own share is also
//! read on kube-apiserver's clock: the time in its in-tree plugin per in-tree create against
//! its mean call to celgate's webhook per celgate create.
//!
//! celgate's process CPU time over the cell per review shows whether it spends more than its own
//! time per review. `BENCH_BINDINGS_PHASES` (comma-separated of `none`, `intree`, `celgate`;
//! default all) leaves phases out, to see what one does to the others' creates.
//!
//! Writes `target/bench/bindings.json` (`BENCH_BINDINGS_REPORT` overrides); the targets (celgate's
//! p99 at 1,024 within 3× of its own at 10, and at least 100× below in-tree's at 1,024) are
//! reported by `make bench`'s table, not asserted here. `BENCH_BINDINGS_SIZES` (comma-separated,
//! default `10,64,256,1024`) picks the cells.

use celgate_e2e::bench::{
    Histogram, apiserver_metrics, env_usize, loadavg, ms, percentile, process_cpu_seconds,
    wait_status_written,
};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use celgate_e2e::demo::{CELGATE_API, IN_TREE_API};
use celgate_e2e::{Celgate, Cluster, free_port, wait_for, workspace};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// The name every policy denies (the bindings scenario) or every param forbids (params).
const DENIED: &str = "deny-me";

/// The namespace of the params, shared by both engines.
const PARAMS_NAMESPACE: &str = "bench-params";

/// One engine: its label, the API group of its admission objects, the core resource it judges.
/// The `none` phase is no engine: kube-apiserver alone.
#[derive(Clone, Copy)]
struct Engine {
    name: &'static str,
    api: &'static str,
    kind: &'static str,
    plural: &'static str,
}

/// The engines that judge, each its own resource.
const ENGINES: [Engine; 2] = [
    Engine {
        name: "intree",
        api: IN_TREE_API,
        kind: "Secret",
        plural: "secrets",
    },
    Engine {
        name: "celgate",
        api: CELGATE_API,
        kind: "ConfigMap",
        plural: "configmaps",
    },
];

/// No engine: celgate's ConfigMap creates in a namespace excluded from celgate's webhooks
/// (`--excluded-namespaces`) and matched by no in-tree policy, so that kube-apiserver's own
/// create path is timed beside the engines' in the same alternation.
const NONE: Engine = Engine {
    name: "none",
    api: "",
    kind: "ConfigMap",
    plural: "configmaps",
};

/// The phases a cell alternates, create by create.
const PHASES: [Engine; 3] = [NONE, ENGINES[0], ENGINES[1]];

/// The namespace an engine judges in one scenario.
fn namespace(scenario: &str, engine: Engine) -> String {
    format!("bench-{scenario}-{}", engine.name)
}

fn api_of(
    client: &kube::Client,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let resource = ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    Api::all_with(client.clone(), &resource)
}

fn policies(client: &kube::Client, engine: Engine) -> Api<DynamicObject> {
    api_of(
        client,
        engine.api,
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
    )
}

fn bindings(client: &kube::Client, engine: Engine) -> Api<DynamicObject> {
    api_of(
        client,
        engine.api,
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
    )
}

fn object(v: Value) -> DynamicObject {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("fixture: {e}"))
}

/// The policy of `scenario` for `engine`: creates of its resource, admitted unless named [`DENIED`]
/// (bindings) or the param's `data.forbidden` (params).
fn policy(scenario: &str, engine: Engine) -> DynamicObject {
    let mut spec = json!({"failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": [engine.plural]}]}});
    if scenario == "params" {
        spec["paramKind"] = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        spec["validations"] =
            json!([{"expression": "object.metadata.name != params.data.forbidden"}]);
    } else {
        spec["validations"] =
            json!([{"expression": format!("object.metadata.name != '{DENIED}'")}]);
    }
    object(
        json!({"apiVersion": engine.api, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": format!("bench-{scenario}-{}.example.com", engine.name)},
        "spec": spec}),
    )
}

/// Binding `k` of `scenario` for `engine`, selecting the engine's namespace (and, for params,
/// every param labelled `bench-param`).
fn binding(scenario: &str, engine: Engine, k: usize) -> DynamicObject {
    let mut spec = json!({"policyName": format!("bench-{scenario}-{}.example.com", engine.name),
        "validationActions": ["Deny"],
        "matchResources": {"namespaceSelector": {"matchLabels":
            {"bench": format!("{scenario}-{}", engine.name)}}}});
    if scenario == "params" {
        spec["paramRef"] = json!({"namespace": PARAMS_NAMESPACE,
            "selector": {"matchLabels": {"bench-param": "true"}},
            "parameterNotFoundAction": "Deny"});
    }
    object(
        json!({"apiVersion": engine.api, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": format!("bench-{scenario}-{}-{k}.example.com", engine.name),
            "labels": {"bench": scenario}},
        "spec": spec}),
    )
}

fn param(k: usize) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": format!("param-{k}"),
        "labels": {"bench-param": "true"}}, "data": {"forbidden": DENIED}}))
    .unwrap_or_else(|e| panic!("param fixture: {e}"))
}

/// The object `engine` judges: a ConfigMap, or a Secret of the same data.
fn judged_object(engine: Engine, name: &str) -> DynamicObject {
    let data = if engine.kind == "Secret" {
        json!({"LOG_LEVEL": "aW5mbw==", "REGION": "ZXUtd2VzdC0x"})
    } else {
        json!({"LOG_LEVEL": "info", "REGION": "eu-west-1"})
    };
    object(json!({"apiVersion": "v1", "kind": engine.kind,
        "metadata": {"name": name, "labels": {"app": "shop"}}, "data": data}))
}

/// The resource `engine` judges, in `namespace`.
fn judged(client: &kube::Client, engine: Engine, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: engine.kind.into(),
        plural: engine.plural.into(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Creates `objects`, up to 8 at a time.
async fn create_all<K>(api: &Api<K>, objects: Vec<K>)
where
    K: kube::Resource
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let mut pending = objects.into_iter();
    loop {
        let chunk: Vec<K> = pending.by_ref().take(8).collect();
        if chunk.is_empty() {
            break;
        }
        let tasks: Vec<_> = chunk
            .into_iter()
            .map(|o| {
                let api = api.clone();
                tokio::spawn(async move {
                    if let Err(e) = api.create(&PostParams::default(), &o).await {
                        panic!("cannot create {:?}: {e}", o.meta().name);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap_or_else(|e| panic!("a create failed: {e}"));
        }
    }
}

/// Waits until a dry-run create named [`DENIED`] is denied by `engine` in `namespace`.
async fn wait_denied(client: &kube::Client, engine: Engine, namespace: &str) {
    let maps = judged(client, engine, namespace);
    wait_for(
        &format!("a denial in {namespace}"),
        Duration::from_secs(120),
        || {
            let maps = maps.clone();
            async move {
                let params = PostParams {
                    dry_run: true,
                    ..Default::default()
                };
                match maps.create(&params, &judged_object(engine, DENIED)).await {
                    Ok(_) => None,
                    Err(kube::Error::Api(_)) => Some(()),
                    Err(e) => panic!("probe create in {namespace} failed: {e}"),
                }
            }
        },
    )
    .await;
}

/// What the clocks around each engine's decision read: celgate's own time per review
/// (`celgate_webhook_request_duration_seconds`, every path); kube-apiserver's time calling
/// celgate's validating webhooks (`apiserver_admission_webhook_admission_duration_seconds`: the
/// round trip with TLS and encoding); and kube-apiserver's time in its in-tree
/// ValidatingAdmissionPolicy plugin on creates
/// (`apiserver_admission_controller_admission_duration_seconds`), which the in-tree creates
/// spend nearly all of: on the others no policy of the plugin matches.
struct Clocks {
    own: Histogram,
    round_trip: Histogram,
    intree: Histogram,
}

async fn review_clocks(client: &kube::Client, celgate: &Celgate) -> Clocks {
    let own = Histogram::read(
        &celgate.metrics(),
        "celgate_webhook_request_duration_seconds",
        &[],
    );
    let apiserver = apiserver_metrics(client).await;
    let round_trip = Histogram::read(
        &apiserver,
        "apiserver_admission_webhook_admission_duration_seconds",
        &["type=\"validating\"", ".celgate.io\""],
    );
    let intree = Histogram::read(
        &apiserver,
        "apiserver_admission_controller_admission_duration_seconds",
        &[
            "name=\"ValidatingAdmissionPolicy\"",
            "operation=\"CREATE\"",
            "type=\"validate\"",
        ],
    );
    Clocks {
        own,
        round_trip,
        intree,
    }
}

/// One engine's creates in a cell.
#[derive(Default)]
struct Times {
    all: Vec<Duration>,
    busy: Duration,
}

/// One cell: one client alternating no-engine, in-tree and celgate creates in each phase's
/// namespace of `scenario` ([`PHASES`]), each until `creates` or `budget` of its own create
/// time; `tag` names the objects.
async fn cell(
    client: &kube::Client,
    scenario: &str,
    tag: &str,
    creates: usize,
    budget: Duration,
) -> [Times; 3] {
    let apis = PHASES.map(|e| judged(client, e, &namespace(scenario, e)));
    let wanted = phases_wanted();
    let mut times: [Times; 3] = Default::default();
    for n in 0.. {
        let mut any = false;
        for (i, api) in apis.iter().enumerate() {
            if !wanted.contains(&PHASES[i].name)
                || times[i].all.len() >= creates
                || times[i].busy >= budget
            {
                continue;
            }
            any = true;
            let name = format!("{tag}-{n}");
            let started = Instant::now();
            let created = api
                .create(&PostParams::default(), &judged_object(PHASES[i], &name))
                .await;
            let took = started.elapsed();
            if let Err(e) = created {
                panic!("create {name} ({}) failed: {e}", PHASES[i].name);
            }
            times[i].all.push(took);
            times[i].busy += took;
        }
        if !any {
            break;
        }
    }
    times
}

/// The phases `BENCH_BINDINGS_PHASES` names (comma-separated of `none`, `intree`, `celgate`;
/// default all): leaving one out shows what it does to the others' creates.
fn phases_wanted() -> Vec<&'static str> {
    let names = PHASES.map(|p| p.name);
    match std::env::var("BENCH_BINDINGS_PHASES") {
        Ok(v) => v
            .split(',')
            .map(|s| {
                names
                    .into_iter()
                    .find(|n| *n == s.trim())
                    .unwrap_or_else(|| {
                        panic!("BENCH_BINDINGS_PHASES={v:?}: {s:?} is none of {names:?}")
                    })
            })
            .collect(),
        Err(_) => names.to_vec(),
    }
}

fn sizes() -> Vec<usize> {
    match std::env::var("BENCH_BINDINGS_SIZES") {
        Ok(v) => v
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .ok()
                    .filter(|&n: &usize| n > 0)
                    .unwrap_or_else(|| {
                        panic!("BENCH_BINDINGS_SIZES={v:?}: expected positive integers")
                    })
            })
            .collect(),
        Err(_) => vec![10, 64, 256, 1024],
    }
}

/// Creates the namespaces, the policy of each engine and (params) its one binding.
async fn set_up(client: &kube::Client, scenario: &str) {
    for e in PHASES {
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": namespace(scenario, e),
            "labels": {"bench": format!("{scenario}-{}", e.name)}}}))
            .unwrap_or_else(|err| panic!("namespace fixture: {err}"));
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|err| panic!("cannot create namespace {scenario}-{}: {err}", e.name));
        if e.name == NONE.name {
            continue;
        }
        policies(client, e)
            .create(&PostParams::default(), &policy(scenario, e))
            .await
            .unwrap_or_else(|err| panic!("cannot create the {} policy: {err}", e.name));
        if scenario == "params" {
            bindings(client, e)
                .create(&PostParams::default(), &binding(scenario, e, 0))
                .await
                .unwrap_or_else(|err| panic!("cannot create the {} binding: {err}", e.name));
        }
    }
}

/// Grows the scenario to `size` (bindings per engine, or params) from `from`.
async fn grow(client: &kube::Client, scenario: &str, from: usize, size: usize) {
    if scenario == "params" {
        let params: Api<ConfigMap> = Api::namespaced(client.clone(), PARAMS_NAMESPACE);
        create_all(&params, (from..size).map(param).collect()).await;
    } else {
        for e in ENGINES {
            create_all(
                &bindings(client, e),
                (from..size).map(|k| binding(scenario, e, k)).collect(),
            )
            .await;
        }
    }
}

/// Both scenarios' cells; returns the report's `bindings` and `params` objects.
async fn run(
    client: &kube::Client,
    celgate: &Celgate,
    scenario: &str,
    sizes: &[usize],
    creates: usize,
    budget: Duration,
) -> Value {
    set_up(client, scenario).await;
    let mut cells = serde_json::Map::new();
    let mut from = 0;
    for &size in sizes {
        grow(client, scenario, from, size).await;
        from = from.max(size);
        // Both informers see the new objects well within this; each engine's denial below
        // shows it enforces, the warm-up create is not counted. The cell starts once celgate
        // has written the new bindings' status, so their writes do not load it.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let writes = wait_status_written(client, Duration::from_secs(120)).await;
        println!("{scenario} {size}: celgate's status writer caught up ({writes} status requests)");
        for e in ENGINES {
            wait_denied(client, e, &namespace(scenario, e)).await;
        }
        cell(client, scenario, &format!("w{size}"), 1, budget).await;
        let before = review_clocks(client, celgate).await;
        let cpu_before = process_cpu_seconds(celgate.pid());
        let mut times = cell(client, scenario, &format!("s{size}"), creates, budget).await;
        let cpu = process_cpu_seconds(celgate.pid()) - cpu_before;
        let after = review_clocks(client, celgate).await;
        let (review_ms, reviews) = after.own.mean_ms_since(before.own);
        let (round_trip_ms, _) = after.round_trip.mean_ms_since(before.round_trip);
        // The plugin's whole time over the cell, per in-tree create ([`PHASES`]: none, in-tree,
        // celgate).
        let intree_creates = times[1].all.len().max(1) as f64;
        let intree_ms = ((after.intree.sum - before.intree.sum) * 1000.0 / intree_creates * 100.0)
            .round()
            / 100.0;
        let mut row = serde_json::Map::new();
        let mut p99s = [0.0; 3];
        for ((e, t), p99_of) in PHASES.iter().zip(times.iter_mut()).zip(p99s.iter_mut()) {
            t.all.sort();
            let (p50, p99) = (ms(percentile(&t.all, 0.5)), ms(percentile(&t.all, 0.99)));
            *p99_of = p99;
            let per_s = (t.all.len() as f64 / t.busy.as_secs_f64().max(1e-9) * 10.0).round() / 10.0;
            println!(
                "{scenario} {size} {}: p50 {p50:.2} ms, p99 {p99:.2} ms, {:.1} creates/s ({} creates)",
                e.name,
                per_s,
                t.all.len()
            );
            row.insert(format!("{}_p50_ms", e.name), json!(p50));
            row.insert(format!("{}_p99_ms", e.name), json!(p99));
            row.insert(format!("{}_creates", e.name), json!(t.all.len()));
            row.insert(format!("{}_creates_per_s", e.name), json!(per_s));
        }
        let [none_p99, intree_p99, celgate_p99] = p99s;
        // A phase left out (BENCH_BINDINGS_PHASES) timed nothing: its ratios are not taken.
        let ratio = |a: f64, b: f64| (a > 0.0 && b > 0.0).then(|| (a / b * 10.0).round() / 10.0);
        let shown =
            |r: Option<f64>| r.map_or_else(|| "not run".to_string(), |r| format!("{r:.1}x"));
        println!(
            "{scenario} {size} celgate: {review_ms:.2} ms its own per review ({reviews} reviews), {round_trip_ms:.2} ms kube-apiserver's call to it; in-tree p99 / celgate p99 {}, in-tree p99 / no engine's p99 {} (the most any engine could show)",
            shown(ratio(intree_p99, celgate_p99)),
            shown(ratio(intree_p99, none_p99)),
        );
        println!(
            "{scenario} {size} in-tree: {intree_ms:.2} ms in the plugin per create; its time / kube-apiserver's call to celgate {}",
            shown(ratio(intree_ms, round_trip_ms)),
        );
        // celgate's whole process, as it spent the cell: reviews, and whatever else it ran.
        let cpu_ms = (cpu * 1000.0 / reviews.max(1.0) * 100.0).round() / 100.0;
        println!(
            "{scenario} {size} celgate: {cpu_ms:.2} ms of CPU per review (the process, over the cell)"
        );
        row.insert("celgate_cpu_ms_per_review".into(), json!(cpu_ms));
        row.insert("celgate_webhook_review_ms".into(), json!(review_ms));
        row.insert("celgate_webhook_reviews".into(), json!(reviews));
        row.insert("celgate_webhook_round_trip_ms".into(), json!(round_trip_ms));
        row.insert(
            "intree_over_celgate_p99".into(),
            json!(ratio(intree_p99, celgate_p99)),
        );
        row.insert(
            "intree_over_none_p99".into(),
            json!(ratio(intree_p99, none_p99)),
        );
        row.insert("intree_admission_ms".into(), json!(intree_ms));
        row.insert(
            "intree_admission_over_celgate_round_trip".into(),
            json!(ratio(intree_ms, round_trip_ms)),
        );
        cells.insert(size.to_string(), Value::Object(row));
    }
    // The other scenario must not pay for these bindings.
    for e in ENGINES {
        bindings(client, e)
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&format!("bench={scenario}")),
            )
            .await
            .unwrap_or_else(|err| panic!("cannot delete the {} bindings: {err}", e.name));
    }
    Value::Object(cells)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let creates = env_usize("BENCH_BINDINGS_CREATES", 200);
    let budget = Duration::from_secs(env_usize("BENCH_BINDINGS_SECONDS", 15) as u64);
    let sizes = sizes();
    let load_before = loadavg();
    let started = Instant::now();
    let cluster = Cluster::start();
    cluster.install_crds();
    // The no-engine phase's namespaces never reach celgate's webhooks (with the default
    // exclusions kept).
    let excluded = format!(
        "kube-system,kube-node-lease,kube-public,{},{}",
        namespace("bindings", NONE),
        namespace("params", NONE)
    );
    let celgate = Celgate::spawn_with(
        &cluster,
        free_port(),
        "celgate",
        &["--excluded-namespaces", &excluded],
        "info",
    );
    celgate.wait_ready().await;
    let client = cluster.client().await;
    let params_ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": PARAMS_NAMESPACE}}))
            .unwrap_or_else(|e| panic!("namespace fixture: {e}"));
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &params_ns)
        .await
        .unwrap_or_else(|e| panic!("cannot create namespace {PARAMS_NAMESPACE}: {e}"));
    let bindings = run(&client, &celgate, "bindings", &sizes, creates, budget).await;
    let params = run(&client, &celgate, "params", &sizes, creates, budget).await;
    let report = json!({
        "bindings": bindings,
        "params": params,
        "creates_per_cell": creates,
        "seconds_per_engine_and_cell": budget.as_secs(),
        "celgate_bin": Celgate::binary().display().to_string(),
        "measures": "per cell (bindings per policy, or params its binding selects) and engine: ms per create through kube-apiserver (in-tree: a Secret, celgate: a ConfigMap, none: a ConfigMap in a namespace no policy and no webhook sees), one client alternating none, in-tree and celgate creates; creates_per_s = creates over that engine's create time; celgate_webhook_review_ms = celgate's own mean time per review (celgate_webhook_request_duration_seconds), celgate_webhook_reviews = how many it served in the cell (the celgate creates: none reached it); celgate_cpu_ms_per_review = the celgate process's CPU time over the cell per review; celgate_webhook_round_trip_ms = kube-apiserver's mean time calling celgate's validating webhooks (apiserver_admission_webhook_admission_duration_seconds); intree_over_none_p99 = the largest in-tree/engine ratio any engine could show, with no cost of its own; intree_admission_ms = kube-apiserver's time in its ValidatingAdmissionPolicy plugin on creates over the cell (apiserver_admission_controller_admission_duration_seconds) per in-tree create; intree_admission_over_celgate_round_trip = that over celgate_webhook_round_trip_ms: what each engine adds to a create, on kube-apiserver's own clock",
        "seconds": started.elapsed().as_secs(),
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
    });
    let path: PathBuf = std::env::var_os("BENCH_BINDINGS_REPORT").map_or_else(
        || workspace().join("target/bench/bindings.json"),
        PathBuf::from,
    );
    celgate_e2e::bench::write_report(&path, &report);
}
