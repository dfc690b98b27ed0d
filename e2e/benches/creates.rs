//! `make bench-e2e` (issue 13, item 1): what a policy engine adds to creates through
//! kube-apiserver, celgate (the release build, `CELGATE_BIN`) beside the in-tree plugin, on one
//! local control plane.
//!
//! The same two policies (Deployments: replica limit, required labels, trusted registry, memory
//! limits through a variable, no `:latest` with a message expression; ConfigMaps: required
//! label, a key count with a message expression) are stored in-tree and as celgate objects, each
//! bound to the namespaces labelled `engine=<its engine>`. Three phases create objects that
//! every policy admits: in a namespace no binding selects (`none`), in the in-tree one and in
//! the celgate one. In each round, every phase creates `BENCH_E2E_OBJECTS` ConfigMaps and as
//! many Deployments (replicas 0), from `BENCH_E2E_CLIENTS` concurrent clients that take creates
//! from one sequence in which the phases alternate create by create, so that drift (the
//! controllers' catch-up, compaction, garbage collection, other load on the machine) falls on
//! every phase alike and favours none; every create is timed.
//!
//! Then apply → enforced with its parts, `BENCH_E2E_APPLY_SAMPLES` (default 10) times: a celgate
//! policy and binding over Secrets (a resource no other policy matches, so celgate's webhook
//! configuration must gain a rule) are created, and a dry-run Secret is sent every `POLL` until
//! denied; each poll also reads celgate's ValidatingWebhookConfiguration. Parts, from the
//! policy's create: the binding's create answered; compiled (celgate's `compiled policy` log
//! line: watch delay and compile); configuration applied (celgate's `webhook configurations
//! applied` log line: publish and the server-side apply); webhook configuration changed (seen by
//! the poll); and the rest up to the first denial (kube-apiserver picking the configuration
//! up). The pair is deleted between samples; one sample before the series is not counted. Then
//! the same again from a celgate started with `--webhook-rules all`, beside a fail-closed policy
//! that stays bound (its webhook covers every resource already, so the new policy changes no
//! configuration), again after one sample not counted.
//!
//! Then the realistic part (issue 46, part 4; `mix`): the fixture's 6 KB Pod created through a
//! realistic mix of 1,000 validating and 1,000 mutating policies stored in-tree and as celgate
//! objects, from a celgate started afresh (its policies' rules, as the first).
//!
//! Prints `e2e: celgate/in-tree p50 R, p99 R` (and `realistic: …`) and the absolute figures per
//! phase, and writes `target/bench/e2e.json`. Targets (p50 ≤ 1.05×, p99 ≤ 1.15×; realistic:
//! within 1.0×) are reported by `make bench`'s table, not asserted here. Every celgate runs with
//! the realistic part's other namespaces in `--excluded-namespaces`, each under its own Lease.
//! Environment: `BENCH_E2E_PARTS` (comma-separated of `small`, `apply`, `realistic`; default
//! all), `BENCH_E2E_ROUNDS` (default 4, both kinds of rounds), `BENCH_E2E_OBJECTS` (per kind,
//! phase and round, default 100), `BENCH_E2E_CLIENTS` (default 4), `BENCH_E2E_MIX_POLICIES`
//! (of each kind, default 1,000), `BENCH_E2E_MIX_PODS` (per phase and round, default 50),
//! `BENCH_E2E_REPORT` (report path), `CELGATE_BIN`.

use celgate_e2e::bench::{env_usize, interleaved, loadavg, ms, percentile};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use celgate_e2e::demo::{CELGATE_API, IN_TREE_API};
use celgate_e2e::log::{compiled_lines, epoch_seconds, message_times};
use celgate_e2e::{
    Celgate, Cluster, create_namespace, free_port, policies_api, version, wait_for, workspace,
};

mod mix;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// The policies and their bindings, in `api`, bound to namespaces labelled `engine=<engine>`.
fn policies(api: &str, engine: &str) -> String {
    format!(
        r#"
apiVersion: {api}
kind: ValidatingAdmissionPolicy
metadata:
  name: e2e-deployments-{engine}.example.com
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["deployments"]
  variables:
  - name: containers
    expression: object.spec.template.spec.containers
  validations:
  - expression: object.spec.replicas <= 50
  - expression: "['app', 'team'].all(l, l in object.metadata.labels)"
  - expression: "variables.containers.all(c, c.image.startsWith('registry.example.com/'))"
  - expression: "variables.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)"
  - expression: "!variables.containers.exists(c, c.image.endsWith(':latest'))"
    messageExpression: "'an image of ' + object.metadata.name + ' uses :latest'"
---
apiVersion: {api}
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: e2e-deployments-{engine}-binding.example.com
spec:
  policyName: e2e-deployments-{engine}.example.com
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        engine: {engine}
---
apiVersion: {api}
kind: ValidatingAdmissionPolicy
metadata:
  name: e2e-configmaps-{engine}.example.com
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: "has(object.metadata.labels) && 'app' in object.metadata.labels"
  - expression: "!has(object.data) || object.data.size() <= 16"
    messageExpression: "'configmap ' + object.metadata.name + ' has too many keys'"
---
apiVersion: {api}
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: e2e-configmaps-{engine}-binding.example.com
spec:
  policyName: e2e-configmaps-{engine}.example.com
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        engine: {engine}
"#
    )
}

/// One phase: where its objects go.
struct Phase {
    name: &'static str,
    namespace: &'static str,
}

const PHASES: [Phase; 3] = [
    Phase {
        name: "none",
        namespace: "e2e-none",
    },
    Phase {
        name: "in-tree",
        namespace: "e2e-intree",
    },
    Phase {
        name: "celgate",
        namespace: "e2e-celgate",
    },
];

/// The engine label of a phase's namespace (bindings select `intree` and `celgate`).
fn engine_label(phase: &Phase) -> &'static str {
    match phase.name {
        "in-tree" => "intree",
        other => other,
    }
}

fn configmap(name: &str, labelled: bool) -> ConfigMap {
    let labels = if labelled {
        json!({"app": "shop", "team": "storefront"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
        "data": {"LOG_LEVEL": "info", "REGION": "eu-west-1", "FEATURES": "a,b,c",
                 "TIMEOUT": "30s", "ENDPOINT": "https://api.example.com"}}))
    .unwrap_or_else(|e| panic!("configmap fixture: {e}"))
}

fn deployment(name: &str) -> Deployment {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": {"app": name, "team": "storefront"}},
        "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "registry.example.com/web:1.4.2",
                    "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}}]}}}}),
    )
    .unwrap_or_else(|e| panic!("deployment fixture: {e}"))
}

/// One round: `objects` ConfigMaps and as many Deployments in each phase's namespace, from
/// `clients` clients that take creates from one shared sequence in which the phases alternate
/// create by create (none, in-tree, celgate, none, …; [`interleaved`]). Returns each phase's
/// create times.
async fn round(
    client: &kube::Client,
    round: usize,
    objects: usize,
    clients: usize,
) -> Vec<Vec<Duration>> {
    let apis = Arc::new(PHASES.map(|p| {
        (
            Api::<ConfigMap>::namespaced(client.clone(), p.namespace),
            Api::<Deployment>::namespaced(client.clone(), p.namespace),
        )
    }));
    interleaved(PHASES.len(), 2 * objects, clients, move |phase, n| {
        let apis = apis.clone();
        async move {
            let (maps, deployments) = &apis[phase];
            let name = format!("r{round}-{n}");
            let created = if n % 2 == 0 {
                maps.create(&PostParams::default(), &configmap(&name, true))
                    .await
                    .map(|_| ())
            } else {
                deployments
                    .create(&PostParams::default(), &deployment(&name))
                    .await
                    .map(|_| ())
            };
            created.map_err(|e| format!("{name} in {}: {e}", PHASES[phase].namespace))
        }
    })
    .await
}

/// Waits until an unlabelled ConfigMap is denied in `namespace` (the engine enforces there), or,
/// for the `none` phase, admitted.
async fn wait_enforced(client: &kube::Client, phase: &Phase) {
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), phase.namespace);
    let want_denied = phase.name != "none";
    wait_for(
        &format!("{} to enforce in {}", phase.name, phase.namespace),
        Duration::from_secs(60),
        || {
            let maps = maps.clone();
            async move {
                let params = PostParams {
                    dry_run: true,
                    ..Default::default()
                };
                let denied = match maps.create(&params, &configmap("probe", false)).await {
                    Ok(_) => false,
                    Err(kube::Error::Api(_)) => true,
                    Err(e) => panic!("probe create failed: {e}"),
                };
                (denied == want_denied).then_some(())
            }
        },
    )
    .await;
}

/// How often an apply → enforced sample polls.
const POLL: Duration = Duration::from_millis(2);

/// The probe policy and binding of sample `k`: Secrets named `probe` are denied in the celgate
/// namespace.
fn probe_objects(k: usize) -> (DynamicObject, DynamicObject) {
    fail_closed_pair(
        &format!("e2e-probe-{k}"),
        "secrets",
        "object.metadata.name != 'probe'",
    )
}

/// A fail-closed policy `<name>.example.com` over creates of core `resource` validating
/// `expression`, and its binding (Deny) to the celgate namespace.
fn fail_closed_pair(
    name: &str,
    resource: &str,
    expression: &str,
) -> (DynamicObject, DynamicObject) {
    let policy = json!({"apiVersion": CELGATE_API, "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": format!("{name}.example.com")},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": [resource]}]},
            "validations": [{"expression": expression}]}});
    let binding = json!({"apiVersion": CELGATE_API, "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": format!("{name}-binding.example.com")},
        "spec": {"policyName": format!("{name}.example.com"), "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"engine": "celgate"}}}}});
    let parse = |v: Value| {
        serde_json::from_value::<DynamicObject>(v).unwrap_or_else(|e| panic!("probe fixture: {e}"))
    };
    (parse(policy), parse(binding))
}

fn bindings_api(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "admission.celgate.io".into(),
        version: "v1".into(),
        api_version: CELGATE_API.into(),
        kind: "ValidatingAdmissionPolicyBinding".into(),
        plural: "validatingadmissionpolicybindings".into(),
    };
    Api::all_with(client.clone(), &resource)
}

/// Whether a dry-run Secret named `probe` is denied in the celgate namespace by a probe
/// policy; any other error ends the bench (it would read as enforcement).
async fn probe_denied(client: &kube::Client) -> bool {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "e2e-celgate");
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "probe"}}))
        .unwrap_or_else(|e| panic!("secret fixture: {e}"));
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match secrets.create(&params, &secret).await {
        Ok(_) => false,
        Err(kube::Error::Api(s)) if s.message.contains("e2e-probe-") => true,
        Err(e) => panic!("probe secret create failed: {e}"),
    }
}

/// celgate's ValidatingWebhookConfiguration's resourceVersion.
async fn configuration_version(client: &kube::Client) -> Option<String> {
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt("celgate")
        .await
        .ok()
        .flatten()
        .and_then(|c| c.metadata.resource_version)
}

/// Whether a webhook of celgate's ValidatingWebhookConfiguration has a rule naming the
/// probe's resource (`secrets`; a wildcard rule, `--webhook-rules all`, names none).
async fn probe_rule_registered(client: &kube::Client) -> bool {
    let configuration = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt("celgate")
        .await
        .unwrap_or_else(|e| panic!("cannot read celgate's webhook configuration: {e}"));
    let webhooks = configuration.and_then(|c| c.webhooks).unwrap_or_default();
    webhooks
        .iter()
        .flat_map(|w| w.rules.iter().flatten())
        .any(|r| r.resources.iter().flatten().any(|res| res == "secrets"))
}

/// One apply → enforced sample's parts, in ms from the policy's create.
struct Parts {
    enforced: f64,
    /// The binding's create answered (the bench's clock).
    binding_created: f64,
    compiled: Option<f64>,
    /// celgate's `webhook configurations applied` log line, the first after the compile.
    applied: Option<f64>,
    configuration: Option<f64>,
}

/// Creates a celgate policy and its binding, in that order.
async fn create_pair(client: &kube::Client, (policy, binding): &(DynamicObject, DynamicObject)) {
    policies_api(client, CELGATE_API)
        .create(&PostParams::default(), policy)
        .await
        .unwrap_or_else(|e| panic!("cannot create policy {:?}: {e}", policy.metadata.name));
    bindings_api(client)
        .create(&PostParams::default(), binding)
        .await
        .unwrap_or_else(|e| panic!("cannot create binding {:?}: {e}", binding.metadata.name));
}

/// Deletes a celgate policy's binding, then the policy.
async fn delete_pair(client: &kube::Client, (policy, binding): &(DynamicObject, DynamicObject)) {
    let name = |o: &DynamicObject| o.metadata.name.clone().unwrap_or_default();
    bindings_api(client)
        .delete(&name(binding), &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("cannot delete binding {}: {e}", name(binding)));
    policies_api(client, CELGATE_API)
        .delete(&name(policy), &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("cannot delete policy {}: {e}", name(policy)));
}

/// Creates the probe pair `k`, polls until a probe Secret is denied, then deletes the pair and
/// waits until probes are admitted again and the probe's rule is unregistered.
async fn apply_sample(client: &kube::Client, celgate: &Celgate, k: usize) -> Parts {
    let pair = probe_objects(k);
    let before = configuration_version(client).await;
    let (started, wall) = (Instant::now(), SystemTime::now());
    create_pair(client, &pair).await;
    let binding_created = ms(started.elapsed());
    let mut configuration = None;
    let enforced = loop {
        if configuration.is_none() && configuration_version(client).await != before {
            configuration = Some(ms(started.elapsed()));
        }
        if probe_denied(client).await {
            break ms(started.elapsed());
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the probe policy was not enforced within 30 s; giving up"
        );
        tokio::time::sleep(POLL).await;
    };
    let name = format!("e2e-probe-{k}.example.com");
    let logs = celgate.logs();
    let since_create = |t: f64| ((t - epoch_seconds(wall)) * 100_000.0).round() / 100.0;
    let compiled = compiled_lines(&logs)
        .into_iter()
        .find(|(_, p, _)| *p == name)
        .map(|(t, _, _)| since_create(t));
    let applied = compiled.and_then(|c| {
        message_times(&logs, "webhook configurations applied")
            .into_iter()
            .map(since_create)
            .find(|&t| t >= c)
    });
    delete_pair(client, &pair).await;
    wait_for(
        "the probe to be admitted again",
        Duration::from_secs(30),
        || async { (!probe_denied(client).await).then_some(()) },
    )
    .await;
    // The next sample measures a new rule: the probe's is unregistered first (a probe is
    // admitted again as soon as the policy is gone, its rule removed a moment later).
    wait_for(
        "the probe's rule to be unregistered",
        Duration::from_secs(30),
        || async { (!probe_rule_registered(client).await).then_some(()) },
    )
    .await;
    Parts {
        enforced,
        binding_created,
        compiled,
        applied,
        configuration,
    }
}

/// Apply → enforced samples `ks` (probe pairs of those numbers), summarised and printed.
async fn apply_series(
    client: &kube::Client,
    celgate: &Celgate,
    ks: std::ops::Range<usize>,
    rules: &str,
) -> Value {
    let mut parts = Vec::with_capacity(ks.len());
    for k in ks {
        parts.push(apply_sample(client, celgate, k).await);
    }
    let apply = json!({
        "enforced": spread(parts.iter().map(|p| p.enforced).collect()),
        "binding_created": spread(parts.iter().map(|p| p.binding_created).collect()),
        "compiled": spread(parts.iter().filter_map(|p| p.compiled).collect()),
        "configuration_applied": spread(parts.iter().filter_map(|p| p.applied).collect()),
        "webhook_configuration_changed": spread(parts.iter().filter_map(|p| p.configuration).collect()),
        "apiserver_pickup": spread(parts.iter().filter_map(|p| p.configuration.map(|c| p.enforced - c)).collect()),
        "samples": parts.iter().map(|p| json!({"enforced_ms": p.enforced,
            "binding_created_ms": p.binding_created, "compiled_ms": p.compiled,
            "configuration_applied_ms": p.applied,
            "webhook_configuration_changed_ms": p.configuration})).collect::<Vec<_>>(),
        "poll_ms": ms(POLL),
        "measures": "ms from the policy's create: binding_created = the binding's create answered; compiled = celgate's `compiled policy` log line (watch delay + compile); configuration_applied = celgate's `webhook configurations applied` log line (publish + its server-side apply answered); webhook_configuration_changed = celgate's ValidatingWebhookConfiguration seen with a new resourceVersion (publish + registration, at poll resolution; absent when it did not change); apiserver_pickup = enforced − webhook_configuration_changed",
    });
    println!(
        "apply → enforced (celgate, new rule, {rules}): {}; binding created {}; compiled {}; configuration applied {}; webhook configuration changed {}; kube-apiserver pickup {}",
        apply["enforced"],
        apply["binding_created"],
        apply["compiled"],
        apply["configuration_applied"],
        apply["webhook_configuration_changed"],
        apply["apiserver_pickup"]
    );
    apply
}

/// p50 and max of the figures present.
fn spread(values: Vec<f64>) -> Value {
    let mut values: Vec<f64> = values
        .into_iter()
        .map(|v| (v * 100.0).round() / 100.0)
        .collect();
    values.sort_by(f64::total_cmp);
    let p50 = values.get(values.len().saturating_sub(1) / 2).copied();
    json!({"samples": values.len(), "p50_ms": p50, "max_ms": values.last().copied()})
}

/// The small policies' rounds: stores them, waits until each engine enforces, one warm-up
/// round not counted, then `rounds` rounds; prints the figures and returns the report's
/// `phases`, `ratio` and `per_round`.
async fn small(
    cluster: &Cluster,
    client: &kube::Client,
    rounds: usize,
    objects: usize,
    clients: usize,
) -> serde_json::Map<String, Value> {
    cluster.apply(&policies(IN_TREE_API, "intree"));
    cluster.apply(&policies(CELGATE_API, "celgate"));
    for p in &PHASES {
        wait_enforced(client, p).await;
    }
    // A warm-up round, not counted: connections, caches and the first compiles.
    round(client, rounds, objects.min(20), clients).await;
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); PHASES.len()];
    let mut per_round = Vec::new();
    for r in 0..rounds {
        let mut this_round = serde_json::Map::new();
        for (i, mut t) in round(client, r, objects, clients)
            .await
            .into_iter()
            .enumerate()
        {
            t.sort();
            this_round.insert(
                PHASES[i].name.into(),
                json!({"p50_ms": ms(percentile(&t, 0.5)), "p99_ms": ms(percentile(&t, 0.99))}),
            );
            times[i].extend(t);
        }
        per_round.push(Value::Object(this_round));
    }
    let mut phases = serde_json::Map::new();
    let mut figures = Vec::new();
    for (p, t) in PHASES.iter().zip(times.iter_mut()) {
        t.sort();
        let (p50, p99) = (percentile(t, 0.5), percentile(t, 0.99));
        println!(
            "{}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} creates)",
            p.name,
            ms(p50),
            ms(p99),
            ms(t.last().copied().unwrap_or_default()),
            t.len()
        );
        phases.insert(
            p.name.into(),
            json!({"creates": t.len(), "p50_ms": ms(p50), "p99_ms": ms(p99),
                "max_ms": ms(t.last().copied().unwrap_or_default())}),
        );
        figures.push((p50, p99));
    }
    let ratio = |a: Duration, b: Duration| {
        (a.as_secs_f64() / b.as_secs_f64().max(1e-9) * 1000.0).round() / 1000.0
    };
    let (p50_ratio, p99_ratio) = (
        ratio(figures[2].0, figures[1].0),
        ratio(figures[2].1, figures[1].1),
    );
    println!("e2e: celgate/in-tree p50 {p50_ratio:.2}, p99 {p99_ratio:.2}");
    let mut out = serde_json::Map::new();
    out.insert("phases".into(), Value::Object(phases));
    out.insert("ratio".into(), json!({"p50": p50_ratio, "p99": p99_ratio}));
    out.insert("per_round".into(), Value::Array(per_round));
    out
}

/// The parts `BENCH_E2E_PARTS` names (comma-separated, default all): `small`, `apply`,
/// `realistic`.
fn parts() -> Vec<String> {
    const PARTS: [&str; 3] = ["small", "apply", "realistic"];
    let chosen = std::env::var("BENCH_E2E_PARTS").unwrap_or_else(|_| PARTS.join(","));
    let parts: Vec<String> = chosen.split(',').map(|p| p.trim().to_string()).collect();
    for p in &parts {
        assert!(
            PARTS.contains(&p.as_str()),
            "BENCH_E2E_PARTS={chosen:?}: {p:?} is none of {PARTS:?}"
        );
    }
    parts
}

/// Starts a celgate named `name` with `args` (and the realistic part's exclusions), under its
/// own Lease so that it leads at once after another was stopped, and waits until it is ready.
async fn start_celgate(cluster: &Cluster, name: &str, args: &[&str]) -> Celgate {
    let mut all = vec![
        "--log-json",
        "--lease-name",
        name,
        "--excluded-namespaces",
        mix::EXCLUDED_NAMESPACES,
    ];
    all.extend(args);
    let celgate = Celgate::spawn_with(cluster, free_port(), name, &all, "info");
    celgate.wait_ready().await;
    celgate
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let parts = parts();
    let wants = |part: &str| parts.iter().any(|p| p == part);
    let rounds = env_usize("BENCH_E2E_ROUNDS", 4);
    let objects = env_usize("BENCH_E2E_OBJECTS", 100);
    let clients = env_usize("BENCH_E2E_CLIENTS", 4);
    let apply_samples = env_usize("BENCH_E2E_APPLY_SAMPLES", 10);
    let mix_policies = env_usize("BENCH_E2E_MIX_POLICIES", 1000);
    let mix_pods = env_usize("BENCH_E2E_MIX_PODS", 50);
    let load_before = loadavg();
    let cluster = Cluster::start_with(&version::in_tree_map_flags(version::minor()));
    cluster.install_crds();
    let mut celgate = start_celgate(&cluster, "celgate", &[]).await;
    let client = cluster.client().await;
    // Every part creates in these namespaces (the apply part's probes in the celgate one).
    for p in &PHASES {
        create_namespace(&client, p.namespace, engine_label(p)).await;
    }
    let mut report = json!({
        "parts": parts,
        "rounds": rounds, "objects_per_kind_phase_round": objects, "clients": clients,
        "celgate_bin": Celgate::binary().display().to_string(),
        "loadavg_before": load_before,
    });
    if wants("small") {
        for (k, v) in small(&cluster, &client, rounds, objects, clients).await {
            report[k] = v;
        }
    }
    if wants("apply") {
        // One sample not counted before each series: the first writes of a kind after its
        // CRD is installed, and the first configuration a process writes, take longer.
        apply_series(&client, &celgate, 0..1, "warm-up").await;
        report["apply_to_enforced"] =
            apply_series(&client, &celgate, 1..apply_samples + 1, "policies' rules").await;
        // The same with the policy webhooks covering every resource: no configuration change,
        // as long as a fail-closed policy stays bound (a webhook is registered while it serves
        // a bound policy); this one admits every ConfigMap.
        drop(celgate);
        let all_rules =
            start_celgate(&cluster, "celgate-all-rules", &["--webhook-rules", "all"]).await;
        let standing = fail_closed_pair("e2e-standing", "configmaps", "true");
        create_pair(&client, &standing).await;
        let from = apply_samples + 1;
        apply_series(&client, &all_rules, from..from + 1, "warm-up").await;
        report["apply_to_enforced_all_rules"] = apply_series(
            &client,
            &all_rules,
            from + 1..from + 1 + apply_samples,
            "--webhook-rules all",
        )
        .await;
        delete_pair(&client, &standing).await;
        // The realistic part's celgate registers for its policies' rules alone, as the first.
        drop(all_rules);
        celgate = start_celgate(&cluster, "celgate-realistic", &[]).await;
    }
    if wants("realistic") {
        report["realistic"] =
            mix::run(&client, &celgate, mix_policies, rounds, mix_pods, clients).await;
    }
    report["loadavg_after"] = json!(loadavg());
    let path: PathBuf = std::env::var_os("BENCH_E2E_REPORT")
        .map_or_else(|| workspace().join("target/bench/e2e.json"), PathBuf::from);
    celgate_e2e::bench::write_report(&path, &report);
}
