//! The server's own cost of one realistic review, validating and mutating, in figures a busy
//! machine cannot move much: instructions per review counted by valgrind's callgrind, the
//! misses of its simulated first-level instruction cache ([`I1_CACHE`], this machine's) per
//! review, and CPU time per review of the one thread that decides (not wall time). Cache
//! misses are where CPU time parts from instructions: code that runs once per policy and
//! does not stay in the cache between policies is fetched again for each. The review is the
//! realistic fixture's 6 KB Pod create (`e2e/src/fixture.rs`) against 20 matching of 1,000
//! validating policies, and of 1,000 mutating ones; one review is what the webhook's handler
//! does: the body decoded, decided against the snapshot, the decision recorded in the metrics
//! (its checks, by policy and binding), the answer encoded; no HTTP or TLS.
//!
//! Beside them, the floor of `make bench-bindings` in process: a ConfigMap create against one
//! validating policy with [`SCALE`] bindings that all match (`bindings`), and against one
//! policy whose one binding selects [`SCALE`] params (`params`), each admitted by every
//! binding and param; what one binding and one param cost, without kube-apiserver.
//!
//! Each run writes `target/bench/review-cost.json` and compares it with the committed baseline
//! `webhook/benches/review-cost-baseline.json`: every figure worse than the baseline by more
//! than its tolerance is named, and the run fails. Instructions are allowed
//! [`INSTRUCTIONS_TOLERANCE`] (they move by well under 1% from run to run), instruction-cache
//! misses [`I1_MISSES_TOLERANCE`], CPU time
//! [`CPU_TOLERANCE`] (six builds on two cores move it by that much).
//!
//! `make bench-check` runs it; `make bench-baseline` writes the run's figures as the new
//! baseline (`REVIEW_COST_WRITE_BASELINE=1`). Environment: `REVIEW_COST_SECONDS` (CPU time
//! measured per kind, default 4), `REVIEW_COST_REVIEWS` (reviews counted under callgrind per
//! kind, default 40). Without valgrind installed only CPU time is measured and compared.
//!
//! The counted reviews run inside [`counted_reviews`], which callgrind is told to count alone
//! (`--toggle-collect`): building the snapshot (compiling 2,000 policies) is not counted.

#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)] // A benchmark harness.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use celgate_engine::model::{
    FailurePolicy, LabelSelector, MatchResources, ParamKind, ParamRef, ParameterNotFoundAction,
    ResourceRule, ValidatingBindingSpec, ValidatingPolicySpec, Validation, ValidationAction,
};
use celgate_engine::{BoundPolicy, ParamObjects, PolicySet, compile_validating};
use celgate_snapshot::dispatch::{self, Call};
use celgate_snapshot::{Deps, KindSchemaView, NamespaceView, ParamKindEntry, SnapshotStore};
use celgate_webhook::metrics::Metrics;
use celgate_webhook::review;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};

mod common;

use common::{env_or, fixture, fixture_mutating, fixture_store, fixture_validating};

/// How much worse than the baseline instructions per review may be before the check fails.
const INSTRUCTIONS_TOLERANCE: f64 = 0.03;
/// The first-level instruction cache callgrind simulates (size, associativity, line bytes):
/// this machine's, named so that another machine's counts compare with the baseline.
const I1_CACHE: &str = "65536,16,64";
/// How much worse than the baseline instruction-cache misses per review may be before the
/// check fails: they move with where the linker puts code, which any change of the engine
/// shifts (each of the two changes that came with this figure moved them by 2.5 to 3.6%).
const I1_MISSES_TOLERANCE: f64 = 0.10;
/// How much worse than the baseline CPU time per review may be before the check fails.
const CPU_TOLERANCE: f64 = 0.30;
/// Set in the child that runs under callgrind: the kind to count and how many reviews.
const CHILD_ENV: &str = "REVIEW_COST_CHILD";

/// How many bindings, and params, the `bindings` and `params` reviews are decided by.
const SCALE: usize = 1024;

/// The kinds of review measured.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// The realistic Pod against 20 of 1,000 validating policies.
    Validating,
    /// The realistic Pod against 20 of 1,000 mutating policies.
    Mutating,
    /// A ConfigMap against one validating policy of [`SCALE`] bindings.
    Bindings,
    /// A ConfigMap against one validating policy whose binding selects [`SCALE`] params.
    Params,
}

impl Kind {
    const ALL: [Kind; 4] = [
        Kind::Validating,
        Kind::Mutating,
        Kind::Bindings,
        Kind::Params,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Validating => "validating",
            Kind::Mutating => "mutating",
            Kind::Bindings => "bindings",
            Kind::Params => "params",
        }
    }
}

/// A label selector of one label.
fn selecting(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: vec![(key.into(), value.into())],
        match_expressions: Vec::new(),
    }
}

/// `make bench-bindings`' scenario in process: one validating policy over ConfigMap creates
/// that admits every name but `deny-me` (or the param's `data.forbidden`), with `bindings`
/// bindings each selecting the request's namespace by a label, or (`params`) one binding
/// selecting that many params by a label.
fn one_policy_store(bindings: usize, params: usize) -> std::sync::Arc<SnapshotStore> {
    use std::sync::Arc;
    let has_params = params > 0;
    let expression = if has_params {
        "object.metadata.name != params.data.forbidden"
    } else {
        "object.metadata.name != 'deny-me'"
    };
    let spec = ValidatingPolicySpec {
        name: "bench.example.com".into(),
        param_kind: has_params.then(|| ParamKind {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
        }),
        match_constraints: Some(MatchResources {
            resource_rules: vec![ResourceRule {
                operations: vec!["CREATE".into()],
                api_groups: vec![String::new()],
                api_versions: vec!["v1".into()],
                resources: vec!["configmaps".into()],
                scope: "*".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        validations: vec![Validation {
            expression: expression.into(),
            ..Default::default()
        }],
        failure_policy: FailurePolicy::Fail,
        ..Default::default()
    };
    let policy = compile_validating(spec);
    assert!(policy.compile_errors().is_empty());
    let bindings = (0..bindings.max(1))
        .map(|k| {
            Arc::new(ValidatingBindingSpec {
                name: format!("bench-{k}.example.com").into(),
                policy_name: "bench.example.com".into(),
                match_resources: Some(MatchResources {
                    namespace_selector: selecting("bench", "bindings"),
                    ..Default::default()
                }),
                param_ref: has_params.then(|| {
                    Box::new(ParamRef {
                        name: None,
                        namespace: Some("params".into()),
                        selector: Some(selecting("bench-param", "true")),
                        parameter_not_found_action: ParameterNotFoundAction::Deny,
                    })
                }),
                validation_actions: vec![ValidationAction::Deny],
            })
        })
        .collect();
    let bound = BoundPolicy {
        policy: Arc::new(policy),
        bindings,
    };
    let store = SnapshotStore::new();
    store.publish_namespaces(NamespaceView::new([
        (
            "bench".to_string(),
            json!({"metadata": {"name": "bench",
                "labels": {"bench": "bindings", "kubernetes.io/metadata.name": "bench"}}}),
        ),
        (
            "params".to_string(),
            json!({"metadata": {"name": "params"}}),
        ),
    ]));
    let mut objects = ParamObjects::new(true);
    for k in 0..params {
        let name = format!("param-{k}");
        let param = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "params", "labels": {"bench-param": "true"}},
            "data": {"forbidden": "deny-me"}});
        objects.insert("params", &name, Arc::new(param));
    }
    store.publish_param_kind(
        &("v1".to_string(), "ConfigMap".to_string()),
        Some(ParamKindEntry::Ready(Arc::new(objects))),
    );
    store.publish_policies(
        Arc::new(PolicySet::new(vec![bound], Vec::new())),
        Arc::default(),
        Arc::new(KindSchemaView::new(std::iter::empty())),
    );
    store
}

/// A create of ConfigMap `name` in the namespace the bindings select, as kube-apiserver sends
/// it.
fn configmap_review(name: &str) -> Value {
    let resource = json!({"group": "", "version": "v1", "resource": "configmaps"});
    let kind = json!({"group": "", "version": "v1", "kind": "ConfigMap"});
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": "3f1d9c2e-7b4a-4e8f-9a6d-2c5b8e1f0a47",
            "kind": kind, "resource": resource, "requestKind": kind, "requestResource": resource,
            "name": name, "namespace": "bench", "operation": "CREATE",
            "userInfo": {"username": "bench", "groups": ["system:authenticated"]},
            "object": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "bench", "labels": {"app": "shop"}},
                "data": {"greeting": "hello"}},
            "oldObject": null, "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}})
}

/// What one review needs: the realistic snapshot, the metrics, the body, and a runtime to
/// await on; the snapshots of one policy with many bindings or params, and their body.
struct Bench {
    store: std::sync::Arc<SnapshotStore>,
    bindings: std::sync::Arc<SnapshotStore>,
    params: std::sync::Arc<SnapshotStore>,
    deps: Deps,
    metrics: Metrics,
    body: Vec<u8>,
    configmap_body: Vec<u8>,
    runtime: tokio::runtime::Runtime,
}

impl Bench {
    fn new() -> Self {
        let (total, matching) = (1000, 20);
        let store = fixture_store(PolicySet::new(
            fixture_validating(&fixture::validating(total, matching)),
            fixture_mutating(&fixture::mutating(total, matching)),
        ));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let bench = Bench {
            store,
            bindings: one_policy_store(SCALE, 0),
            params: one_policy_store(1, SCALE),
            deps: Deps::default(),
            metrics: Metrics::register(&mut Registry::with_prefix("celgate"), 10),
            body: fixture::pod_review().to_string().into_bytes(),
            configmap_body: configmap_review("cm-1").to_string().into_bytes(),
            runtime,
        };
        bench.every_binding_and_param_decides();
        bench
    }

    /// The name every binding and param forbids is denied by each of them: a denial check per
    /// binding, and per param, so the admitted reviews measured are decided by all of them.
    fn every_binding_and_param_decides(&self) {
        let body = configmap_review("deny-me").to_string().into_bytes();
        for store in [&self.bindings, &self.params] {
            let review = review::decode(&body, review::ObjectRead::Tape).unwrap();
            let decided = self.runtime.block_on(dispatch::validate(
                store,
                &self.deps,
                review,
                Call::now(),
                None,
            ));
            let outcome = decided.unwrap().outcome;
            let what = "the bindings and params do not all decide the measured reviews";
            assert!(!outcome.allowed(), "deny-me admitted: {what}");
            let denials = (outcome.checks.iter()).filter(|c| c.enforcement_action == "deny");
            assert_eq!(denials.count(), SCALE, "{what}");
        }
    }

    /// One review as the server's handler decides it: decoded, decided, recorded, the answer
    /// encoded; panics unless admitted (and, mutating, patched).
    fn review(&self, kind: Kind) {
        self.runtime.block_on(async {
            let (allowed, answer) = match kind {
                Kind::Validating | Kind::Bindings | Kind::Params => {
                    let (store, body) = match kind {
                        Kind::Bindings => (&self.bindings, &self.configmap_body),
                        Kind::Params => (&self.params, &self.configmap_body),
                        _ => (&self.store, &self.body),
                    };
                    let review = review::decode(body, review::ObjectRead::Tape).unwrap();
                    let call = Call::now();
                    let decided = dispatch::validate(store, &self.deps, review, call, None)
                        .await
                        .unwrap();
                    self.metrics.validated(&decided, call.at);
                    let answer = review::response(&decided.uid, &decided.outcome);
                    (decided.outcome.allowed(), answer)
                }
                Kind::Mutating => {
                    let review =
                        review::decode(&self.body, review::ObjectRead::TapeToMutate).unwrap();
                    let mutated =
                        dispatch::mutate(&self.store, &self.deps, review, Call::now(), None)
                            .await
                            .unwrap();
                    self.metrics.mutated(&mutated);
                    assert!(
                        !mutated.outcome.patch.is_empty(),
                        "the review is not mutated"
                    );
                    let answer = review::mutation_response(&mutated.uid, &mutated.outcome);
                    (mutated.outcome.allowed(), answer)
                }
            };
            assert!(allowed, "{}", String::from_utf8_lossy(&answer));
            black_box(answer);
        });
    }
}

/// `reviews` reviews of `kind`: the only code callgrind counts.
#[inline(never)]
fn counted_reviews(bench: &Bench, kind: Kind, reviews: u64) {
    for _ in 0..reviews {
        bench.review(kind);
    }
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// CPU µs per review of each kind: rounds of each kind alternately for about `secs` per kind
/// in all, the median round.
fn cpu_us_per_review(bench: &Bench, secs: u64) -> [f64; Kind::ALL.len()] {
    const ROUNDS: usize = 9;
    let per_round = Duration::from_secs(secs).as_secs_f64() / ROUNDS as f64;
    let mut samples = Kind::ALL.map(|_| Vec::new());
    for _ in 0..ROUNDS {
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            let start = thread_cpu();
            let mut reviews = 0u64;
            while (thread_cpu() - start).as_secs_f64() < per_round {
                for _ in 0..10 {
                    bench.review(kind);
                }
                reviews += 10;
            }
            samples[i].push((thread_cpu() - start).as_secs_f64() * 1e6 / reviews as f64);
        }
    }
    samples.map(|mut s| {
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    })
}

fn valgrind_installed() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What callgrind counts of one review: instructions, and misses of the first-level
/// instruction cache in its simulation of this machine's caches.
struct Counted {
    instructions: f64,
    i1_misses: f64,
}

/// Instructions and instruction-cache misses per review of `kind`: this program run again
/// under callgrind (simulating the caches), counting only [`counted_reviews`] of `reviews`
/// reviews (after a few uncounted ones).
fn counted_per_review(kind: Kind, reviews: u64) -> Counted {
    let out = std::env::temp_dir().join(format!(
        "celgate-review-cost-{}-{}.callgrind",
        std::process::id(),
        kind.name()
    ));
    let status = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--cache-sim=yes",
            "--collect-atstart=no",
        ])
        .arg(format!("--I1={I1_CACHE}"))
        .arg("--toggle-collect=*counted_reviews*")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(std::env::current_exe().unwrap())
        .env(CHILD_ENV, format!("{}:{reviews}", kind.name()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(
        status.success(),
        "callgrind run of {kind:?} failed: {status}"
    );
    let profile = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    // The profile's `events:` line names the counts its `totals:` (or older valgrinds'
    // `summary:`) line gives, in order.
    let line = |prefix: &str| profile.lines().find_map(|l| l.strip_prefix(prefix));
    let events: Vec<&str> = line("events:")
        .unwrap_or_else(|| panic!("no events in the callgrind profile of {kind:?}"))
        .split_whitespace()
        .collect();
    let totals: Vec<u64> = (line("totals:").or_else(|| line("summary:")))
        .unwrap_or_else(|| panic!("no totals in the callgrind profile of {kind:?}"))
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let total = |event: &str| {
        let i = events.iter().position(|e| *e == event);
        let n = i.and_then(|i| totals.get(i)).copied();
        n.unwrap_or_else(|| panic!("no {event} in the callgrind profile of {kind:?}"))
    };
    let instructions = total("Ir");
    assert!(instructions > 0, "callgrind counted nothing for {kind:?}");
    Counted {
        instructions: instructions as f64 / reviews as f64,
        i1_misses: total("I1mr") as f64 / reviews as f64,
    }
}

/// Under callgrind: a few reviews uncounted, then `reviews` counted.
fn child(spec: &str) {
    let (kind, reviews) = spec.split_once(':').unwrap();
    let kind = *Kind::ALL.iter().find(|k| k.name() == kind).unwrap();
    let bench = Bench::new();
    for _ in 0..3 {
        bench.review(kind);
    }
    counted_reviews(&bench, kind, reviews.parse().unwrap());
}

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn baseline_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/review-cost-baseline.json")
}

/// The figures of `report` worse than those of `baseline` beyond their tolerance, a line each.
fn worse(report: &Value, baseline: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    for kind in Kind::ALL {
        for (figure, tolerance) in [
            ("instructions_per_review", INSTRUCTIONS_TOLERANCE),
            ("i1_misses_per_review", I1_MISSES_TOLERANCE),
            ("cpu_us_per_review", CPU_TOLERANCE),
        ] {
            let (Some(now), Some(then)) = (
                report[kind.name()][figure].as_f64(),
                baseline[kind.name()][figure].as_f64(),
            ) else {
                continue;
            };
            if now > then * (1.0 + tolerance) {
                lines.push(format!(
                    "{} {figure}: {now:.1} against the baseline's {then:.1} (+{:.1}%, tolerance {:.0}%)",
                    kind.name(),
                    (now / then - 1.0) * 100.0,
                    tolerance * 100.0
                ));
            }
        }
    }
    lines
}

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        return;
    }
    // `cargo bench` passes `--bench`; a filter naming another bench means "not me".
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && a != "review_cost")
    {
        return;
    }
    let secs = env_or("REVIEW_COST_SECONDS", 4);
    let reviews = env_or("REVIEW_COST_REVIEWS", 40).max(1);
    let loadavg = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let loadavg_before = loadavg();
    let bench = Bench::new();
    for kind in Kind::ALL {
        for _ in 0..20 {
            bench.review(kind);
        }
    }
    let cpu = cpu_us_per_review(&bench, secs);
    drop(bench);
    let valgrind = valgrind_installed();
    if !valgrind {
        println!("review_cost: valgrind is not installed (make deps): CPU time alone");
    }
    let mut report = json!({"review_bytes": fixture::pod_review().to_string().len(),
        "policies_loaded": 1000, "policies_matching": 20, "scale": SCALE,
        "loadavg_before": loadavg_before, "loadavg_after": loadavg()});
    for (i, kind) in Kind::ALL.into_iter().enumerate() {
        let counted = valgrind.then(|| counted_per_review(kind, reviews));
        report[kind.name()] = json!({
            "cpu_us_per_review": (cpu[i] * 10.0).round() / 10.0,
            "instructions_per_review": counted.as_ref().map(|c| c.instructions.round()),
            "i1_misses_per_review": counted.as_ref().map(|c| c.i1_misses.round()),
        });
        println!(
            "review_cost {}: {:.1} µs CPU per review{}",
            kind.name(),
            cpu[i],
            counted.map_or(String::new(), |c| format!(
                ", {:.0} instructions and {:.0} instruction-cache misses per review",
                c.instructions, c.i1_misses
            ))
        );
    }
    let ratio = |figure: &str| {
        let at = |k: Kind| report[k.name()][figure].as_f64();
        at(Kind::Mutating)
            .zip(at(Kind::Validating))
            .map(|(m, v)| (m / v * 100.0).round() / 100.0)
    };
    report["mutating_over_validating"] = json!({"cpu": ratio("cpu_us_per_review"),
        "instructions": ratio("instructions_per_review"),
        "i1_misses": ratio("i1_misses_per_review")});
    println!(
        "review_cost: mutating / validating = {} (CPU), {} (instructions), {} (instruction-cache misses)",
        report["mutating_over_validating"]["cpu"],
        report["mutating_over_validating"]["instructions"],
        report["mutating_over_validating"]["i1_misses"]
    );
    let path = workspace().join("target/bench/review-cost.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text = serde_json::to_string_pretty(&report).unwrap();
    std::fs::write(&path, &text).unwrap();
    println!("report: {}", path.display());
    if env_or("REVIEW_COST_WRITE_BASELINE", 0) == 1 {
        std::fs::write(baseline_path(), text + "\n").unwrap();
        println!("baseline written: {}", baseline_path().display());
        return;
    }
    let Ok(baseline) = std::fs::read_to_string(baseline_path()) else {
        println!(
            "no baseline at {} (make bench-baseline)",
            baseline_path().display()
        );
        std::process::exit(1);
    };
    let baseline: Value = serde_json::from_str(&baseline).unwrap();
    let lines = worse(&report, &baseline);
    if lines.is_empty() {
        println!("review_cost: no figure worse than the baseline beyond its tolerance");
    } else {
        for line in &lines {
            println!("worse: {line}");
        }
        std::process::exit(1);
    }
}
