//! `make bench-e2e`'s realistic part (issue 46, part 4): creates of the realistic 6 KB Pod
//! (`e2e/src/fixture.rs`, as the webhook's load bench and `make bench-scale` use it) through
//! kube-apiserver with the realistic mix of `BENCH_E2E_MIX_POLICIES` (default 1,000)
//! ValidatingAdmissionPolicies and as many MutatingAdmissionPolicies, 20 of each matching the
//! Pod, stored both in-tree and as celgate objects.
//!
//! Each engine's bindings select only the namespace labelled `mix: <engine>` (besides the labels
//! the fixture's bindings select on, which every namespace here carries, as the fixture's review
//! namespace does). A third namespace (`none`) carries the same labels but no engine's: no
//! binding selects it, and celgate runs with it and the in-tree namespace in
//! `--excluded-namespaces` ([`EXCLUDED_NAMESPACES`]), so its creates are kube-apiserver's own
//! create path and the in-tree creates do not pay a call to celgate.
//!
//! The Pods are real creates, stored and left Pending (the control plane has no scheduler or
//! kubelet), made as `make bench-e2e`'s other part makes its objects: from several clients taking
//! creates from one sequence in which none, in-tree and celgate alternate create by create
//! ([`interleaved`]). Every create's answer must carry each matching policy's mutation (and none
//! in the `none` namespace): each create is checked to have been mutated by the whole mix. The
//! rounds start once celgate's status writer has caught up with the stored policies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use celgate_e2e::bench::{
    Histogram, apiserver_metrics, create_objects, interleaved, ms, percentile, wait_status_written,
};
use celgate_e2e::demo::{CELGATE_API, IN_TREE_API};
use celgate_e2e::{Celgate, fixture, version, wait_for};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// How many policies of each kind match the Pod (the fixture's realistic share, as in the
/// webhook's load bench).
const MATCHING: usize = 20;

/// Clients creating the policies and bindings.
const SETUP_CLIENTS: usize = 8;

/// One phase: its name in the report, its namespace, and the engine whose bindings select it.
pub struct Phase {
    name: &'static str,
    namespace: &'static str,
    engine: Option<&'static str>,
}

const PHASES: [Phase; 3] = [
    Phase {
        name: "none",
        namespace: "e2e-mix-none",
        engine: None,
    },
    Phase {
        name: "in-tree",
        namespace: "e2e-mix-intree",
        engine: Some("intree"),
    },
    Phase {
        name: "celgate",
        namespace: "e2e-mix-celgate",
        engine: Some("celgate"),
    },
];

/// celgate's `--excluded-namespaces` for this part: the default ones, and the namespaces of the
/// phases it does not judge.
pub const EXCLUDED_NAMESPACES: &str =
    "kube-system,kube-node-lease,kube-public,e2e-mix-none,e2e-mix-intree";

/// The mutations a fixture Pod's create carries: its labels and annotations under
/// `policy.example.com/` (each matching mutation of the fixture writes one such key).
fn mutation_keys(pod: &Value) -> usize {
    ["labels", "annotations"]
        .iter()
        .filter_map(|m| pod["metadata"][m].as_object())
        .flat_map(|m| m.keys())
        .filter(|k| k.starts_with("policy.example.com/"))
        .count()
}

/// The fixture's Pod named `name` in `namespace`, as a client sends it; with `team`, that team
/// label (the fixture's 19th validating policy denies a team other than its namespace's).
fn pod(name: &str, namespace: &str, team: Option<&str>) -> Pod {
    let mut pod = fixture::client_pod(name);
    pod["metadata"]["namespace"] = json!(namespace);
    if let Some(team) = team {
        pod["metadata"]["labels"]["team"] = json!(team);
    }
    serde_json::from_value(pod).unwrap_or_else(|e| panic!("fixture pod: {e}"))
}

/// Creates the phases' namespaces (labelled as the fixture's review namespace, and
/// `mix: <engine>`), the params and both engines' policies and bindings; returns the number of
/// policies and bindings created and the seconds it took.
async fn set_up(client: &kube::Client, policies: usize) -> (usize, f64) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let review_labels = fixture::review_namespace()["metadata"]["labels"].clone();
    for p in &PHASES {
        let mut labels = review_labels.clone();
        labels["kubernetes.io/metadata.name"] = json!(p.namespace);
        if let Some(engine) = p.engine {
            labels["mix"] = json!(engine);
        }
        let ns: Namespace =
            serde_json::from_value(json!({"metadata": {"name": p.namespace, "labels": labels}}))
                .unwrap_or_else(|e| panic!("namespace fixture: {e}"));
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("cannot create namespace {}: {e}", p.namespace));
    }
    let params: Namespace =
        serde_json::from_value(json!({"metadata": {"name": fixture::PARAMS_NAMESPACE}}))
            .unwrap_or_else(|e| panic!("namespace fixture: {e}"));
    namespaces
        .create(&PostParams::default(), &params)
        .await
        .unwrap_or_else(|e| panic!("cannot create namespace {}: {e}", fixture::PARAMS_NAMESPACE));
    celgate_e2e::bench::create_param_configmaps(client).await;
    let minor = version::minor();
    let in_tree_map = version::in_tree_map_api(minor).unwrap_or_else(|| {
        panic!("Kubernetes 1.{minor} has no in-tree MutatingAdmissionPolicy (alpha from 1.32)")
    });
    let validating = fixture::validating(policies, MATCHING);
    let mutating = fixture::mutating(policies, MATCHING);
    let mut objects = Vec::new();
    for (engine, api, map_api) in [
        ("intree", IN_TREE_API, in_tree_map),
        ("celgate", CELGATE_API, CELGATE_API),
    ] {
        let mut manifests = fixture::validating_manifests(api, &validating);
        manifests.extend(fixture::mutating_manifests(map_api, &mutating));
        fixture::bind_to_namespaces_labelled(&mut manifests, "mix", engine);
        objects.extend(manifests);
    }
    let (count, started) = (objects.len(), Instant::now());
    create_objects(client, objects, SETUP_CLIENTS).await;
    (count, started.elapsed().as_secs_f64())
}

/// A dry-run create of the fixture's Pod in `phase`'s namespace: its mutation keys when
/// admitted, the error when denied.
async fn dry_run(
    client: &kube::Client,
    phase: &Phase,
    team: Option<&str>,
) -> Result<usize, String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), phase.namespace);
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match pods
        .create(&params, &pod("probe", phase.namespace, team))
        .await
    {
        Ok(created) => Ok(mutation_keys(&json!(created))),
        Err(kube::Error::Api(e)) => Err(e.message),
        Err(e) => panic!("probe create in {} failed: {e}", phase.namespace),
    }
}

/// Waits (at most `give_up`) until each engine enforces the whole mix in its namespace: the
/// fixture's Pod is admitted with all `mutations` keys, and one of another team denied; in the
/// `none` namespace, both are admitted unchanged.
async fn wait_enforced(client: &kube::Client, mutations: usize, give_up: Duration) {
    for p in &PHASES {
        let want = if p.engine.is_some() { mutations } else { 0 };
        wait_for(
            &format!("{} to enforce the mix in {}", p.name, p.namespace),
            give_up,
            || async move {
                let admitted = dry_run(client, p, None).await;
                let other_team = dry_run(client, p, Some("another-team")).await;
                (admitted == Ok(want) && other_team.is_err() == p.engine.is_some()).then_some(())
            },
        )
        .await;
    }
}

/// One round: `pods` creates in each phase's namespace from `clients` clients, the phases
/// alternating create by create; each answer must carry `mutations` keys (none in `none`).
async fn round(
    client: &kube::Client,
    round: usize,
    pods: usize,
    clients: usize,
    mutations: usize,
) -> Vec<Vec<Duration>> {
    let apis = Arc::new(PHASES.map(|p| Api::<Pod>::namespaced(client.clone(), p.namespace)));
    interleaved(PHASES.len(), pods, clients, move |phase, n| {
        let apis = apis.clone();
        async move {
            let (p, name) = (&PHASES[phase], format!("mix-r{round}-{n}"));
            let created = apis[phase]
                .create(&PostParams::default(), &pod(&name, p.namespace, None))
                .await
                .map_err(|e| format!("{name} in {}: {e}", p.namespace))?;
            let (got, want) = (
                mutation_keys(&json!(created)),
                if p.engine.is_some() { mutations } else { 0 },
            );
            if got == want {
                Ok(())
            } else {
                Err(format!(
                    "{name} in {} came back with {got} mutations, not {want}",
                    p.namespace
                ))
            }
        }
    })
    .await
}

/// celgate's own time per review by route, and kube-apiserver's time calling celgate's
/// validating and mutating webhooks (the round trips).
async fn clocks(client: &kube::Client, celgate: &Celgate) -> [Histogram; 4] {
    let own = celgate.metrics();
    let apiserver = apiserver_metrics(client).await;
    let family = "celgate_webhook_request_duration_seconds";
    let trips = "apiserver_admission_webhook_admission_duration_seconds";
    [
        Histogram::read(&own, family, &["path=\"/validate"]),
        Histogram::read(&own, family, &["path=\"/mutate"]),
        Histogram::read(&apiserver, trips, &["type=\"validating\"", ".celgate.io\""]),
        Histogram::read(&apiserver, trips, &["type=\"admit\"", ".celgate.io\""]),
    ]
}

/// The part: sets up, waits until both engines enforce the mix, one warm-up round not counted,
/// then `rounds` rounds of `pods` creates per phase from `clients` clients. Prints the figures
/// and returns the report's `realistic` object.
pub async fn run(
    client: &kube::Client,
    celgate: &Celgate,
    policies: usize,
    rounds: usize,
    pods: usize,
    clients: usize,
) -> Value {
    let (objects, setup_s) = set_up(client, policies).await;
    println!("realistic mix: {objects} policies and bindings created in {setup_s:.1} s");
    let mutations: usize = fixture::mutating(policies, MATCHING)
        .iter()
        .filter(|p| p.matches_review)
        .map(|p| p.mutations.len())
        .sum();
    let started = Instant::now();
    wait_enforced(client, mutations, Duration::from_secs(300)).await;
    let enforced_s = started.elapsed().as_secs_f64();
    // The rounds start once celgate has written its policies' and bindings' status.
    let writes = wait_status_written(client, Duration::from_secs(300)).await;
    println!("realistic mix: celgate's status writer caught up ({writes} more status requests)");
    round(client, rounds, pods.min(10), clients, mutations).await;
    let before = clocks(client, celgate).await;
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); PHASES.len()];
    for r in 0..rounds {
        for (all, t) in times
            .iter_mut()
            .zip(round(client, r, pods, clients, mutations).await)
        {
            all.extend(t);
        }
    }
    let after = clocks(client, celgate).await;
    let mut phases = serde_json::Map::new();
    let mut figures = Vec::new();
    for (p, t) in PHASES.iter().zip(times.iter_mut()) {
        t.sort();
        let (p50, p99, max) = (
            ms(percentile(t, 0.5)),
            ms(percentile(t, 0.99)),
            ms(t.last().copied().unwrap_or_default()),
        );
        println!(
            "realistic {}: p50 {p50:.2} ms, p99 {p99:.2} ms, max {max:.2} ms ({} creates)",
            p.name,
            t.len()
        );
        phases.insert(
            p.name.into(),
            json!({"creates": t.len(), "p50_ms": p50, "p99_ms": p99, "max_ms": max}),
        );
        figures.push((p50, p99));
    }
    let ratio = |a: f64, b: f64| (a / b.max(1e-9) * 1000.0).round() / 1000.0;
    let (p50_ratio, p99_ratio) = (
        ratio(figures[2].0, figures[1].0),
        ratio(figures[2].1, figures[1].1),
    );
    let per_review = |k: usize| after[k].mean_ms_since(before[k]);
    let ((validate_ms, validates), (mutate_ms, mutates)) = (per_review(0), per_review(1));
    let ((validate_trip_ms, _), (mutate_trip_ms, _)) = (per_review(2), per_review(3));
    println!(
        "realistic: celgate/in-tree p50 {p50_ratio:.2}, p99 {p99_ratio:.2}; celgate's own time per review {validate_ms:.2} ms validating ({validates} reviews), {mutate_ms:.2} ms mutating ({mutates}); kube-apiserver's call to it {validate_trip_ms:.2} ms validating, {mutate_trip_ms:.2} ms mutating"
    );
    json!({
        "validating_policies": policies, "mutating_policies": policies,
        "matching_each": MATCHING, "mutations_per_create": mutations,
        "pod_bytes": serde_json::to_vec(&fixture::client_pod("mix-r0-0")).map_or(0, |b| b.len()),
        "creates": "real Pod creates, stored and left Pending (no scheduler or kubelet)",
        "rounds": rounds, "pods_per_phase_round": pods, "clients": clients,
        "policies_and_bindings_created": objects, "setup_seconds": (setup_s * 10.0).round() / 10.0,
        "created_to_enforced_seconds": (enforced_s * 10.0).round() / 10.0,
        "phases": phases,
        "ratio": {"p50": p50_ratio, "p99": p99_ratio},
        "celgate": {
            "validating_review_ms": validate_ms, "validating_reviews": validates,
            "mutating_review_ms": mutate_ms, "mutating_reviews": mutates,
            "validating_round_trip_ms": validate_trip_ms, "mutating_round_trip_ms": mutate_trip_ms,
        },
        "measures": "ms per Pod create through kube-apiserver, phases alternated create by create; none = a namespace no binding selects and celgate's webhooks exclude (kube-apiserver alone); celgate.*_review_ms = celgate's own mean time per review (celgate_webhook_request_duration_seconds by route), *_round_trip_ms = kube-apiserver's mean time calling celgate's webhooks (apiserver_admission_webhook_admission_duration_seconds)",
    })
}
