//! The generated admission differential: cases made from a seed (ValidatingAdmissionPolicies
//! and MutatingAdmissionPolicies with bindings and params, over built-in kinds, subresources
//! and a generated CRD; creates, updates, deletes and subresource writes as several users, all
//! server-side dry runs; see `celgate_e2e::generated`) are played on ONE control plane, once
//! with in-tree objects and once with celgate's, and compared: whether each policy object is
//! accepted (and the API server's message when not), then per request the decision, code,
//! reason, message, warnings, audit annotations and the object as it would be stored.
//!
//! First the reproducers in `e2e/testdata/generated/` are played (each a difference found
//! once and fixed since); then cases of the run's seed, in batches (every binding is scoped to
//! its case's namespaces, so a batch's cases cannot see each other), until the count or the
//! time budget is spent. A case that differs is shrunk (a request, a policy, a validation … left
//! out while it still differs) and written to `target/generated-differential/<name>.yaml`;
//! once fixed, that file moves to `e2e/testdata/generated/`.
//!
//! `CELGATE_FUZZ_SEED` (default 1), `CELGATE_FUZZ_CASES` (default 48) and
//! `CELGATE_FUZZ_SECONDS` (default 240) bound a run, `CELGATE_FUZZ_FIRST` (default 0) is the
//! first case's number (to go on from where a run stopped), `CELGATE_FUZZ_SHRINK` (default 40)
//! bounds the replays that shrink a differing case; `make admission-fuzz` runs a long one.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use celgate_e2e::audit::{AuditLog, normalise_audit};
use celgate_e2e::differential::{
    Driver, Engine, difference, json_differences, strip_server_managed,
};
use celgate_e2e::generated::{Case, Generator};
use celgate_e2e::{Celgate, Cluster, inner_message, workspace};
use serde_json::{Value, json};

/// Cases played together between two sentinel bumps.
const BATCH: usize = 24;
/// How long a sentinel or a webhook rule may take to be in force.
const IN_FORCE: Duration = Duration::from_secs(30);
/// Replays of a differing case while shrinking it, at most (`CELGATE_FUZZ_SHRINK` changes it).
const SHRINK_STEPS: u64 = 40;

/// How often in-tree plays a differing case of several policies again before the difference
/// counts (it orders policies differently from run to run).
const IN_TREE_REPLAYS: usize = 9;

/// A case's comparison: its differences (none when in-tree, played again, gave celgate's
/// outcome), whether in-tree's outcome varied so, and what in-tree gave first.
struct Judged {
    differences: Vec<String>,
    varied: bool,
    in_tree: Played,
}

/// The case's policies (bindings not counted).
fn policy_count(case: &Case) -> usize {
    case.policies
        .iter()
        .filter(|p| p["spec"]["policyName"].is_null())
        .count()
}

/// What one request gave.
#[derive(Clone, Debug, PartialEq)]
struct Outcome {
    code: u16,
    reason: String,
    message: String,
    warnings: Vec<String>,
    audit: Vec<(String, String)>,
    /// The object as it would be stored (server-managed metadata left out); `Null` on failure.
    object: Value,
}

/// What a case gave with one engine: each policy object's acceptance, each request's outcome.
#[derive(Clone, Debug, PartialEq)]
struct Played {
    accepted: Vec<Result<(), String>>,
    outcomes: Vec<Outcome>,
}

/// The refusal of a policy object without what names the engine's group.
fn refusal(message: &str) -> String {
    message
        .split_once(" is invalid: ")
        .map_or(message, |(_, rest)| rest)
        .to_string()
}

/// `message` with the items of the lists kube-apiserver writes in an order that varies from
/// call to call (it walks Go maps) sorted: a custom resource's schema errors (`… is invalid:
/// [a, b]`), structured-merge-diff's errors (`errors:` then a line each) and the atomic places
/// an apply configuration may not mutate.
fn canonical(message: &str) -> String {
    const ATOMIC: &str = "may not mutate atomic arrays, maps or structs: ";
    if let Some((head, list)) = message.split_once(" is invalid: [")
        && list.ends_with(']')
    {
        let mut items: Vec<&str> = list[..list.len() - 1].split(", ").collect();
        items.sort_unstable();
        return format!("{head} is invalid: [{}]", items.join(", "));
    }
    if let Some((head, list)) = message.split_once("errors:\n") {
        let mut lines: Vec<&str> = list.split('\n').collect();
        lines.sort_unstable();
        return format!("{head}errors:\n{}", lines.join("\n"));
    }
    if let Some((head, list)) = message.split_once(ATOMIC) {
        let mut items: Vec<&str> = list.split(", ").collect();
        items.sort_unstable();
        return format!("{head}{ATOMIC}{}", items.join(", "));
    }
    message.to_string()
}

#[test]
fn lists_kube_apiserver_orders_at_random_compare_in_any_order() {
    let atomic = |list: &str| {
        format!(
            "policy 'p' denied request: error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {list}"
        )
    };
    assert_eq!(
        canonical(&atomic(".rules, .rules[0].verbs, .rules[0].apiGroups")),
        canonical(&atomic(".rules, .rules[0].apiGroups, .rules[0].verbs"))
    );
    assert_ne!(
        canonical(&atomic(".rules, .rules[0].verbs")),
        canonical(&atomic(".rules, .rules[0].apiGroups"))
    );
    let typed = "failed to convert patch object to typed object: errors:\n  .spec.a: expected map, got &{1}\n  .spec.b: expected map, got &{2}";
    let swapped = "failed to convert patch object to typed object: errors:\n  .spec.b: expected map, got &{2}\n  .spec.a: expected map, got &{1}";
    assert_eq!(canonical(typed), canonical(swapped));
    assert_ne!(canonical(typed), canonical(&swapped.replace("{2}", "{3}")));
    assert_eq!(
        canonical("X \"x\" is invalid: [b: bad, a: bad]"),
        "X \"x\" is invalid: [a: bad, b: bad]"
    );
}

/// The lines telling how two plays of `case` differ; empty when they agree.
fn differences(case: &Case, in_tree: &Played, celgate: &Played) -> Vec<String> {
    let mut out = Vec::new();
    for (i, (a, b)) in in_tree.accepted.iter().zip(&celgate.accepted).enumerate() {
        let (a, b) = (
            a.as_ref().map_err(|e| refusal(e)),
            b.as_ref().map_err(|e| refusal(e)),
        );
        if a != b {
            out.push(format!(
                "policy object {} ({}): in-tree {a:?} vs celgate {b:?}",
                case.policies[i]["metadata"]["name"], case.policies[i]["kind"]
            ));
        }
    }
    for (req, (a, b)) in case
        .requests
        .iter()
        .zip(in_tree.outcomes.iter().zip(&celgate.outcomes))
    {
        let mut d: Vec<String> = [
            difference("code", &a.code, &b.code, true),
            difference("reason", &a.reason, &b.reason, true),
            difference("message", &a.message, &b.message, false),
            difference("warnings", &a.warnings, &b.warnings, false),
            difference("audit annotations", &a.audit, &b.audit, false),
        ]
        .into_iter()
        .flatten()
        .collect();
        json_differences("", &a.object, &b.object, &mut d);
        for line in d {
            out.push(format!(
                "request {:?} ({} {}): {line}",
                req.label, req.method, req.path
            ));
        }
    }
    out
}

/// An object (or each item of a list, as deletecollection answers) as it would be stored,
/// without what differs from request to request: the server-managed metadata and the
/// deletion timestamp a dry-run delete of a Namespace sets.
fn stored(object: Value) -> Value {
    let mut object = strip_server_managed(object);
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("deletionTimestamp");
    }
    if let Some(items) = object.get_mut("items").and_then(Value::as_array_mut) {
        for item in items {
            *item = stored(std::mem::take(item));
        }
    }
    object
}

struct Harness<'c> {
    driver: Driver<'c>,
    audit: AuditLog,
    seq: u64,
    crds: HashSet<String>,
}

impl Harness<'_> {
    /// Creates what the cases need before their phases: CRDs, namespaces, setup objects.
    async fn prepare(&mut self, cases: &[Case]) {
        for case in cases {
            for crd in &case.crds {
                let name = crd["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                if self.crds.insert(name.clone()) {
                    self.driver.kubectl_apply(&crd.to_string());
                    self.driver
                        .cluster
                        .wait_established(&[&format!("crd/{name}")]);
                }
            }
            let labels = json!(case.namespace_labels);
            self.driver.namespace(&case.ns(), &labels).await;
            self.driver.namespace(&case.ns2(), &labels).await;
            let setup: Vec<String> = case
                .setup
                .iter()
                .map(|o| case.render(o, None).to_string())
                .collect();
            if !setup.is_empty() {
                self.driver.kubectl_apply(&setup.join("\n---\n"));
            }
        }
    }

    async fn request(&mut self, case: &Case, index: usize) -> Outcome {
        let req = &case.requests[index];
        self.seq += 1;
        let id = format!(
            "{:08x}-9e4e-4000-8000-{:012x}",
            std::process::id(),
            self.seq
        );
        let mut headers = vec![("Audit-ID".to_string(), id.clone())];
        if let Some(user) = &req.user {
            headers.push(("Impersonate-User".into(), user.name.clone()));
            for g in user
                .groups
                .iter()
                .map(String::as_str)
                .chain(["system:masters"])
            {
                headers.push(("Impersonate-Group".into(), g.to_string()));
            }
        }
        let path = case.render(&json!(req.path), None);
        let path = path.as_str().unwrap_or_default();
        let path = format!(
            "{path}{}dryRun=All",
            if path.contains('?') { '&' } else { '?' }
        );
        let body = req.body.as_ref().map(|b| case.render(b, None));
        let resp = self.driver.http_as(
            &req.method,
            &path,
            body.as_ref(),
            req.content_type.as_deref(),
            &headers,
        );
        let mut warnings = resp.warnings.clone();
        warnings.sort();
        let annotations = self.audit.annotations(&id).await;
        Outcome {
            code: resp.code,
            reason: resp.reason(),
            message: canonical(inner_message(&resp.message())),
            warnings,
            audit: normalise_audit(&annotations),
            object: if resp.allowed() {
                stored(resp.body)
            } else {
                Value::Null
            },
        }
    }

    /// Proves what was applied or deleted in force for the kinds the cases use.
    async fn settle(&mut self, cases: &[Case], engine: Engine) {
        if cases.iter().any(|c| c.has("MutatingAdmissionPolicy")) {
            self.driver
                .bump_mutating_sentinel(engine, IN_FORCE)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        if cases.iter().any(|c| c.has("ValidatingAdmissionPolicy")) {
            self.driver.bump_sentinel(engine).await;
        }
    }

    /// One engine's phase over a batch: apply, prove in force, play, delete, prove gone.
    async fn phase(&mut self, cases: &[Case], engine: Engine) -> Vec<Played> {
        let mut accepted = Vec::new();
        let mut applied = Vec::new();
        for case in cases {
            let mut results = Vec::new();
            for doc in &case.policies {
                let doc = case.render(doc, Some(engine));
                let result = self.driver.try_apply_policy(&doc).await;
                if result.is_ok() {
                    applied.push(doc.to_string());
                }
                results.push(result);
            }
            accepted.push(results);
        }
        let yaml = applied.join("\n---\n");
        if engine == Engine::Celgate {
            self.driver.wait_validating_rules(&yaml).await;
            self.driver
                .wait_mutating_rules(&yaml, IN_FORCE)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        self.settle(cases, engine).await;
        let mut played = Vec::new();
        for (case, accepted) in cases.iter().zip(accepted) {
            let mut outcomes = Vec::new();
            for i in 0..case.requests.len() {
                outcomes.push(self.request(case, i).await);
            }
            played.push(Played { accepted, outcomes });
        }
        self.driver.delete_policies(&yaml).await;
        self.settle(cases, engine).await;
        played
    }

    /// Plays a batch with both engines: per case its differences (see [`Judged`]) and what
    /// in-tree gave.
    async fn compare(&mut self, cases: &[Case]) -> Vec<Judged> {
        self.prepare(cases).await;
        let in_tree = self.phase(cases, Engine::InTree).await;
        let celgate = self.phase(cases, Engine::Celgate).await;
        let mut judged = Vec::new();
        for (case, (a, b)) in cases.iter().zip(in_tree.into_iter().zip(celgate)) {
            let mut found = differences(case, &a, &b);
            let mut varied = false;
            // In-tree runs several policies in an order that varies from run to run (which
            // one's denial or audited failure is reported): celgate differs only if it gave
            // none of the outcomes in-tree gives.
            if !found.is_empty() && policy_count(case) > 1 {
                for _ in 0..IN_TREE_REPLAYS {
                    let again = self.phase(std::slice::from_ref(case), Engine::InTree).await;
                    if again
                        .first()
                        .is_some_and(|a| differences(case, a, &b).is_empty())
                    {
                        (found, varied) = (Vec::new(), true);
                        break;
                    }
                }
            }
            judged.push(Judged {
                differences: found,
                varied,
                in_tree: a,
            });
        }
        judged
    }

    /// The smallest case found (within [`SHRINK_STEPS`] replays) that still differs, and how.
    async fn shrink(&mut self, mut case: Case, mut found: Vec<String>) -> (Case, Vec<String>) {
        let limit = env_number("CELGATE_FUZZ_SHRINK", SHRINK_STEPS);
        let mut steps = 0;
        'smaller: loop {
            for (n, mut smaller) in case.shrunk().into_iter().enumerate() {
                if steps >= limit {
                    break 'smaller;
                }
                steps += 1;
                smaller.name = format!(
                    "{}-m{steps}x{n}",
                    case.name.split("-m").next().unwrap_or_default()
                );
                let judged = self.compare(std::slice::from_ref(&smaller)).await.remove(0);
                if !judged.differences.is_empty() {
                    (case, found) = (smaller, judged.differences);
                    continue 'smaller;
                }
            }
            break;
        }
        (case, found)
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|e| panic!("{name}={v}: {e}")))
        .unwrap_or(default)
}

/// In-tree policies that keep the ConfigMap and ClusterRole paramKinds bound for the whole run
/// (kubernetes#130887 freezes the in-tree param cache otherwise), matching a resource nobody
/// requests.
fn keepers() -> Vec<Value> {
    let rules = json!({"resourceRules": [{"apiGroups": ["keep.example.com"], "apiVersions": ["v1"],
        "operations": ["CREATE"], "resources": ["nevers"]}]});
    let api = Engine::InTree.api();
    let mut out = Vec::new();
    for (suffix, param_kind, param_ref) in [
        (
            "",
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            json!({"name": "none", "namespace": "default", "parameterNotFoundAction": "Allow"}),
        ),
        (
            "-cluster",
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}),
            json!({"name": "none", "parameterNotFoundAction": "Allow"}),
        ),
    ] {
        let (v, m) = (
            format!("keep-generated{suffix}"),
            format!("keep-generated-m{suffix}"),
        );
        out.extend([
            json!({"apiVersion": api, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": v},
                "spec": {"paramKind": param_kind, "matchConstraints": rules,
                    "validations": [{"expression": "true"}]}}),
            json!({"apiVersion": api, "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": format!("{v}-binding")},
                "spec": {"policyName": v, "validationActions": ["Deny"], "paramRef": param_ref}}),
            json!({"apiVersion": api, "kind": "MutatingAdmissionPolicy", "metadata": {"name": m},
                "spec": {"paramKind": param_kind, "matchConstraints": rules,
                    "reinvocationPolicy": "Never", "mutations": [{"patchType": "ApplyConfiguration",
                        "applyConfiguration": {"expression": "Object{}"}}]}}),
            json!({"apiVersion": api, "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": format!("{m}-binding")},
                "spec": {"policyName": m, "paramRef": param_ref}}),
        ]);
    }
    out
}

/// The reproducers kept in `e2e/testdata/generated/`, named `r<n>-…` so they never share
/// namespaces with generated cases.
fn reproducers() -> Vec<(PathBuf, Case)> {
    let dir = workspace().join("e2e/testdata/generated");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    files
        .into_iter()
        .enumerate()
        .map(|(i, path)| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let mut case =
                Case::from_file(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            case.name = format!("r{i}-{}", case.name);
            (path, case)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_cases_decide_alike_in_tree_and_in_celgate() {
    let started = Instant::now();
    let seed = env_number("CELGATE_FUZZ_SEED", 1);
    let limit = env_number("CELGATE_FUZZ_CASES", 48);
    let budget = Duration::from_secs(env_number("CELGATE_FUZZ_SECONDS", 240));

    let cluster = Cluster::start();
    cluster.install_crds();
    let celgate = Celgate::start_with(&cluster, &["--never-sent=none"]).await;
    let mut h = Harness {
        driver: Driver::new(&cluster).await,
        audit: AuditLog::new(cluster.dir().join("audit.log")),
        seq: 0,
        crds: HashSet::new(),
    };
    h.driver.sentinel_namespaces().await;
    for doc in keepers() {
        h.driver
            .try_apply_policy(&doc)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    for e in [Engine::InTree, Engine::Celgate] {
        h.driver
            .bump_mutating_sentinel(e, IN_FORCE)
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        h.driver.bump_sentinel(e).await;
    }

    let mut report = String::new();
    let kept = reproducers();
    for batch in kept.chunks(BATCH) {
        let cases: Vec<Case> = batch.iter().map(|(_, c)| c.clone()).collect();
        for ((path, _), judged) in batch.iter().zip(h.compare(&cases).await) {
            let d = judged.differences;
            if !d.is_empty() {
                let _ = writeln!(
                    report,
                    "reproducer {} differs again:\n  {}",
                    path.display(),
                    d.join("\n  ")
                );
            }
        }
    }
    eprintln!(
        "generated differential: {} reproducers played again in {:?}",
        kept.len(),
        started.elapsed()
    );

    let generator = Generator::new(seed);
    let out_dir = workspace().join("target/generated-differential");
    let (mut played, mut requests, mut differing) = (0u64, 0usize, Vec::new());
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut decisions: BTreeMap<&str, usize> = BTreeMap::new();
    let mut varied = 0usize;
    let run = Instant::now();
    let first = env_number("CELGATE_FUZZ_FIRST", 0);
    let (mut next, end) = (first, first.saturating_add(limit));
    while next < end && run.elapsed() < budget {
        let cases: Vec<Case> = (next..(next + BATCH as u64).min(end))
            .map(|i| generator.case(i))
            .collect();
        next += cases.len() as u64;
        played += cases.len() as u64;
        let batch = Instant::now();
        let results = h.compare(&cases).await;
        eprintln!(
            "generated differential: cases {}..{next} in {:?}",
            next - cases.len() as u64,
            batch.elapsed()
        );
        for (case, judged) in cases.into_iter().zip(results) {
            let (d, in_tree) = (judged.differences, judged.in_tree);
            varied += usize::from(judged.varied);
            requests += case.requests.len();
            for p in &case.policies {
                *kinds
                    .entry(p["kind"].as_str().unwrap_or_default().to_string())
                    .or_default() += 1;
            }
            *decisions.entry("policy objects refused").or_default() +=
                in_tree.accepted.iter().filter(|a| a.is_err()).count();
            for o in &in_tree.outcomes {
                let what = match (o.code, o.warnings.is_empty()) {
                    (200..=299, true) => "requests allowed",
                    (200..=299, false) => "requests allowed with warnings",
                    _ => "requests failed",
                };
                *decisions.entry(what).or_default() += 1;
            }
            if d.is_empty() {
                continue;
            }
            eprintln!("case {} DIFFERS:\n  {}", case.name, d.join("\n  "));
            let (small, found) = h.shrink(case.clone(), d).await;
            std::fs::create_dir_all(&out_dir)
                .unwrap_or_else(|e| panic!("{}: {e}", out_dir.display()));
            let file = out_dir.join(format!("{}.yaml", case.name));
            std::fs::write(&file, small.to_file(&found.join("\n")))
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let _ = writeln!(
                report,
                "case {} differs; shrunk to {}:\n  {}",
                case.name,
                file.display(),
                found.join("\n  ")
            );
            differing.push(case.name);
        }
    }
    let minutes = run.elapsed().as_secs_f64() / 60.0;
    eprintln!(
        "generated differential: seed {seed}: {played} cases from case {first} ({requests} requests; policy objects {kinds:?}) in {:.1} min \
         ({:.0} cases/min); in-tree: {decisions:?}; {varied} where in-tree's order of policies varied and celgate gave one of its outcomes; {} differ",
        minutes,
        played as f64 / minutes.max(1e-9),
        differing.len()
    );
    assert!(
        !celgate.logs().contains("panicked"),
        "celgate panicked:\n{}",
        celgate.logs()
    );
    assert!(report.is_empty(), "{report}");
}
