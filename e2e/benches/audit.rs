//! `make bench-audit` (issue 33): the background audit's scan of `BENCH_AUDIT_OBJECTS` (10,000)
//! stored objects on one local control plane: how long it takes, the API requests celgate
//! makes, and celgate's resident memory meanwhile.
//!
//! The objects (`celgate_e2e::scan_fixture`: ConfigMaps, Secrets and ServiceAccounts, some
//! breaking a rule) are created across `BENCH_AUDIT_NAMESPACES` namespaces (all but the last
//! audited) before celgate starts, with the fixture's param. Then, once per phase, celgate (the
//! release build, `CELGATE_BIN`) is started and left idle for a settle period (VmRSS/VmHWM read
//! from `/proc/<pid>/status`); the fixture's policy and its Audit binding are created with the
//! binding opted out of the audit (`audit.celgate.io/scan: "false"`), and after another settle
//! period memory is read again (the policy compiled and its param kind, every ConfigMap, cached:
//! not the audit's cost); then the binding is opted in. Measured from the opt-in:
//! - scan: → the binding's `status.audit` has `lastScanTime` and `scanned` equal to the objects
//!   the binding selects (counted from the cluster: the fixture's objects in audited namespaces
//!   and what kube-controller-manager puts in each, the `default` ServiceAccount and the
//!   `kube-root-ca.crt` ConfigMap); split by celgate's log into → scan started and → last
//!   resource listed (`audit: resource scanned`);
//! - reports: → as many PolicyReports as `status.audit.violations`;
//! - memory: VmRSS sampled every `SAMPLE` until the reports are written: peak, VmHWM, and their
//!   increase over idle and over the policy loaded;
//! - API requests: kube-apiserver's audit log in that window, celgate's (no user agent: its
//!   client sends none, while this benchmark, kubectl and kube's components do) by verb and
//!   resource (list pages, watches, report patches, status patches), the ones kube-apiserver
//!   answered 429 (too many requests: its fairness pushing back), and anything else seen.
//!   celgate runs as its ServiceAccount with the shipped RBAC (and a grant to read the audited
//!   kinds), not as the admin, whom API Priority and Fairness exempts;
//! - the webhook meanwhile, three probes every `PROBE_EVERY`, one after the other: a dry-run
//!   ConfigMap create in an audited namespace (reviewed by the policy) through kube-apiserver;
//!   the same create in `kube-public`, where no webhook looks (kube-apiserver's own create path,
//!   the floor of the first); and the review kube-apiserver sends for the first, posted to
//!   celgate's webhook itself (the webhook alone); for `PROBE_IDLE` (30 s) with the policy
//!   loaded and the audit opted out (idle), then from the opt-in until `status.audit` is
//!   complete (during the scan) and until the reports are written: p50/p99 of each, and the
//!   scan's p99 over idle's; and the cores kube-apiserver and etcd used in each of those
//!   windows.
//!
//! - leader change: celgate stopped (SIGTERM, the Lease released) and started again with nothing
//!   changed: the reports it deletes and rewrites (issue 41's goal: 0), and the time until the
//!   new leader's `status.audit` is complete (its own `lastScanTime`, the same counts).
//!
//! Phases: `default`, the product's pacing (10 list pages/s of 500, 50 report writes/s),
//! `unpaced` (1,000 pages/s and 1,000 writes/s: celgate's own cost), and `<size>x<pages/s>`
//! (e.g. `250x10`: list pages of that size at that rate, the default report writes), to weigh
//! the webhook's p99 against the scan's time; between them celgate is stopped and the policy,
//! binding and reports deleted. Each phase reports the time pacing alone
//! accounts for (pages ÷ pages/s, reports ÷ writes/s). A phase's name followed by `@own-core`
//! (e.g. `default@own-core`) runs celgate and the probes on the machine's last core and the
//! control plane on the others ([`OWN_CORE`]); every other phase shares all cores.
//!
//! Targets (issue 33: scan under 30 s, under 20 MB above idle; issue 46: at 100,000 objects
//! under 50 MB over the policy loaded, the webhook's p99 during the scan within 1.5× of idle)
//! are reported by `make bench`'s table, not asserted here. Writes `target/bench/audit.json`.
//! Environment: `BENCH_AUDIT_OBJECTS` (default 10000), `BENCH_AUDIT_NAMESPACES` (default 20),
//! `BENCH_AUDIT_SETTLE_SECONDS` (idle wait before the idle reading, default 10),
//! `BENCH_AUDIT_PHASES` (comma-separated, default `default,unpaced,default@own-core`),
//! `BENCH_AUDIT_REPORT` (report path), `BENCH_AUDIT_PASSES` (1: celgate runs with
//! `--audit-report-passes=true`, and the reports awaited are one per scanned object, not one per
//! violation), `CELGATE_BIN`.

use celgate_e2e::bench::percentile;
use celgate_e2e::bench::{env_usize, loadavg, process_cpu_seconds};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use celgate_e2e::log::{epoch_seconds, message_times, parse_utc};
use celgate_e2e::{
    Celgate, Cluster, SERVICE_ACCOUNT_USER, configmap_create_review, free_port, scan_fixture,
    workspace,
};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::discovery::ApiResource;
use rustix::thread::{CpuSet, Pid, sched_setaffinity};
use serde_json::{Value, json};

/// How long any one wait may take before the run is abandoned (100,000 objects: about 37,000
/// reports at the default 50 writes/s take over 12 minutes).
const GIVE_UP: Duration = Duration::from_secs(1800);
/// Concurrent clients creating the objects.
const CLIENTS: usize = 8;
/// How often celgate's resident memory is read during a scan.
const SAMPLE: Duration = Duration::from_millis(100);
/// How often the binding's status and the reports are read.
const POLL: Duration = Duration::from_millis(200);
/// How often the webhook probes run (each request waits for the previous one's answer).
const PROBE_EVERY: Duration = Duration::from_millis(20);
/// How long the webhook is probed idle (policy loaded, audit opted out): about 1,400 probes, so
/// that the idle p99 is not one slow answer's (with 10 s, about 470 probes, it ranged 6.4 to
/// 12.7 ms through kube-apiserver across runs).
const PROBE_IDLE: Duration = Duration::from_secs(30);
/// A phase's suffix that runs celgate and this benchmark's probes on a core of their own and the
/// control plane on the other cores (`default@own-core`), as a cluster runs its webhook on a node
/// apart from kube-apiserver: the webhook's p99 then shows what the audit costs it, not what
/// kube-apiserver's work for the audit costs every process on shared cores.
const OWN_CORE: &str = "@own-core";
/// This benchmark's user agent, so its own requests are told from celgate's in the audit log.
const AGENT: &str = "celgate-bench-audit";
/// The fixture's namespace prefix.
const PREFIX: &str = "bench-audit";
/// The binding's name.
const BINDING: &str = "audit-owners-bench";
/// The annotation that opts a binding out of the audit (`"false"`).
const OPT_OUT: &str = "audit.celgate.io/scan";
const CELGATE_API: &str = "admission.celgate.io/v1";
/// The product's default pacing (`celgate run --audit-*`).
const DEFAULT_PAGE_SIZE: u32 = 500;
const DEFAULT_PAGES_PER_SECOND: u32 = 10;
const DEFAULT_WRITES_PER_SECOND: u32 = 50;
/// The highest pacing the flags accept.
const UNPACED: u32 = 1000;

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

fn mb(kb: u64) -> f64 {
    (kb as f64 / 1024.0 * 10.0).round() / 10.0
}

/// An admin client whose requests carry [`AGENT`].
async fn bench_client(cluster: &Cluster) -> kube::Client {
    let kc = Kubeconfig::read_from(&cluster.kubeconfig)
        .unwrap_or_else(|e| panic!("cannot read kubeconfig: {e}"));
    let mut config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("invalid kubeconfig: {e}"));
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(AGENT),
    ));
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("cannot build client: {e}"))
}

fn celgate_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "admission.celgate.io".into(),
        version: "v1".into(),
        api_version: CELGATE_API.into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn reports_resource() -> ApiResource {
    ApiResource {
        group: "wgpolicyk8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "wgpolicyk8s.io/v1alpha2".into(),
        kind: "PolicyReport".into(),
        plural: "policyreports".into(),
    }
}

/// celgate's ServiceAccount with the shipped RBAC, and read access to the audited kinds granted
/// as an admin would (a ClusterRole aggregated into `celgate-audit`); returns its kubeconfig.
/// Not the admin: API Priority and Fairness exempts `system:masters`, and celgate's requests
/// are to meet its fairness as they do in a cluster.
async fn service_account(cluster: &Cluster) -> PathBuf {
    cluster.apply(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: bench-audit-reads\n  labels:\n    admission.celgate.io/aggregate-to-audit: \"true\"\nrules:\n- apiGroups: [\"\"]\n  resources: [\"configmaps\", \"secrets\", \"serviceaccounts\"]\n  verbs: [\"list\", \"watch\"]\n",
    );
    let kubeconfig = cluster.service_account_kubeconfig().await;
    let user = format!("--as={SERVICE_ACCOUNT_USER}");
    let started = Instant::now();
    while !cluster
        .kubectl(&["auth", "can-i", "watch", "secrets", "-A", &user], "")
        .status
        .success()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "celgate-audit did not aggregate the bench's reads within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kubeconfig
}

/// Creates `count` fixture objects with `CLIENTS` concurrent clients; returns how long it took.
async fn create_objects(client: &kube::Client, count: usize, namespaces: usize) -> Duration {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let kinds = scan_fixture::kinds();
            for i in (c..count).step_by(CLIENTS) {
                let object = scan_fixture::object(PREFIX, namespaces, i);
                let kind = object["kind"].as_str().unwrap_or_default();
                let resource = kinds
                    .iter()
                    .find(|k| k.kind == kind)
                    .unwrap_or_else(|| panic!("{kind} is not a fixture kind"));
                let namespace = object["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let object: DynamicObject = serde_json::from_value(object)
                    .unwrap_or_else(|e| panic!("fixture object {i}: {e}"));
                let api: Api<DynamicObject> =
                    Api::namespaced_with(client.clone(), &namespace, resource);
                api.create(&PostParams::default(), &object)
                    .await
                    .unwrap_or_else(|e| panic!("cannot create fixture object {i}: {e}"));
            }
        }));
    }
    for t in tasks {
        t.await
            .unwrap_or_else(|e| panic!("a creating client failed: {e}"));
    }
    started.elapsed()
}

/// The objects the binding selects: every stored object of the three kinds in the audited
/// namespaces, once kube-controller-manager has put its `default` ServiceAccount and
/// `kube-root-ca.crt` ConfigMap in each; by kind.
async fn expected_objects(client: &kube::Client, namespaces: usize) -> BTreeMap<String, usize> {
    let audited =
        |ns: &str| (0..namespaces.saturating_sub(1)).any(|i| ns == format!("{PREFIX}-{i}"));
    let started = Instant::now();
    loop {
        let stored = scan_fixture::stored(client, audited).await;
        let has = |kind: &str, name: &str| {
            stored
                .iter()
                .filter(|((k, _, n), _)| k == kind && n == name)
                .count()
        };
        let want = namespaces.saturating_sub(1);
        if has("ServiceAccount", "default") == want && has("ConfigMap", "kube-root-ca.crt") == want
        {
            let mut by_kind = BTreeMap::new();
            for ((kind, _, _), _) in &stored {
                *by_kind.entry(kind.clone()).or_default() += 1;
            }
            return by_kind;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "kube-controller-manager did not fill the namespaces within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// VmRSS, VmHWM, RssAnon of `pid` in kB (`None` once the process is gone).
fn memory_kb(pid: u32) -> Option<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?, field("RssAnon:")?))
}

fn memory_json(pid: u32) -> Value {
    let (rss, hwm, anon) =
        memory_kb(pid).unwrap_or_else(|| panic!("cannot read /proc/{pid}/status"));
    json!({"rss_mb": mb(rss), "hwm_mb": mb(hwm), "anon_mb": mb(anon)})
}

/// CPU seconds (user and system) of `pid`'s threads so far: the audit's (`celgate-audit`) and
/// the rest's (the webhook and the controllers).
fn cpu_seconds(pid: u32) -> (f64, f64) {
    let ticks = 100.0; // USER_HZ
    let mut audit = 0.0;
    let mut rest = 0.0;
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return (0.0, 0.0);
    };
    for task in tasks.filter_map(Result::ok) {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        let Some((head, tail)) = stat.rsplit_once(')') else {
            continue;
        };
        let name = head.split_once('(').map_or("", |(_, n)| n);
        let fields: Vec<&str> = tail.split_whitespace().collect();
        // utime and stime: fields 14 and 15, the 12th and 13th after the name.
        let used: f64 = [11, 12]
            .iter()
            .filter_map(|i| fields.get(*i).and_then(|v| v.parse::<f64>().ok()))
            .sum::<f64>()
            / ticks;
        if name.starts_with("celgate-audit") {
            audit += used;
        } else {
            rest += used;
        }
    }
    (audit, rest)
}

/// The CPU seconds `pid`'s threads used between two [`cpu_seconds`] readings.
/// The control plane's CPU seconds so far (kube-apiserver's, etcd's), and when they were read.
fn control_plane_cpu(cluster: &Cluster) -> ([f64; 2], Instant) {
    let seconds =
        ["kube-apiserver", "etcd"].map(|c| cluster.pid(c).map_or(0.0, process_cpu_seconds));
    (seconds, Instant::now())
}

/// The cores kube-apiserver and etcd used on average between two [`control_plane_cpu`] reads.
fn cores_json(from: ([f64; 2], Instant), to: ([f64; 2], Instant)) -> Value {
    let seconds = (to.1 - from.1).as_secs_f64().max(f64::EPSILON);
    let cores = |i: usize| ((to.0[i] - from.0[i]) / seconds * 100.0).round() / 100.0;
    json!({"kube_apiserver": cores(0), "etcd": cores(1)})
}

fn cpu_json(from: (f64, f64), to: (f64, f64)) -> Value {
    let round = |x: f64| (x * 100.0).round() / 100.0;
    json!({"audit_threads_s": round(to.0 - from.0), "other_threads_s": round(to.1 - from.1)})
}

/// Reads `pid`'s memory every `SAMPLE` on a thread until stopped (or `GIVE_UP` passes).
struct Sampler {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<(f64, u64, u64)>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32, started: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, samples) = (stop.clone(), samples.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) && started.elapsed() < GIVE_UP {
                    let Some((rss, hwm, _)) = memory_kb(pid) else {
                        break;
                    };
                    if let Ok(mut s) = samples.lock() {
                        s.push((ms(started.elapsed()), rss, hwm));
                    }
                    std::thread::sleep(SAMPLE);
                }
            })
        };
        Sampler {
            stop,
            samples,
            thread,
        }
    }

    /// Stops sampling; the samples: ms since the start, VmRSS and VmHWM in kB.
    fn finish(self) -> Vec<(f64, u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .unwrap_or_else(|_| panic!("the memory sampler panicked"));
        self.samples
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|e| panic!("memory samples: {e}"))
    }
}

/// Creates the fixture's policy, then its binding (both celgate objects), the binding opted
/// out of the audit.
async fn bind_opted_out(client: &kube::Client) {
    let yaml = scan_fixture::policy(CELGATE_API, BINDING, "Audit", "yes");
    for doc in yaml.split("\n---\n") {
        let mut object: DynamicObject =
            serde_saphyr::from_str(doc).unwrap_or_else(|e| panic!("policy fixture: {e}"));
        if object
            .types
            .as_ref()
            .is_some_and(|t| t.kind.ends_with("Binding"))
        {
            object
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(OPT_OUT.into(), "false".into());
        }
        let kind = object
            .types
            .as_ref()
            .map(|t| t.kind.clone())
            .unwrap_or_default();
        let plural = if kind == "ValidatingAdmissionPolicy" {
            "validatingadmissionpolicies"
        } else {
            "validatingadmissionpolicybindings"
        };
        Api::<DynamicObject>::all_with(client.clone(), &celgate_resource(&kind, plural))
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("cannot create the {kind}: {e}"));
    }
}

/// Opts the binding in to the audit (its opt-out annotation removed).
async fn opt_in(client: &kube::Client) {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &celgate_resource(
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
    );
    let patch = json!({"metadata": {"annotations": {OPT_OUT: null}}});
    api.patch(BINDING, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("cannot opt the binding in: {e}"));
}

/// The binding's `status.audit` (`Null` when absent or unreadable).
async fn audit_status(client: &kube::Client) -> Value {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &celgate_resource(
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
        ),
    );
    api.get(BINDING)
        .await
        .map(|b| b.data["status"]["audit"].clone())
        .unwrap_or(Value::Null)
}

/// How many PolicyReports the cluster holds (only celgate writes them here): one list of one
/// item and its `remainingItemCount`, else a count page by page.
async fn report_count(client: &kube::Client) -> usize {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &reports_resource());
    let Ok(first) = api.list_metadata(&ListParams::default().limit(1)).await else {
        return 0;
    };
    let more = first
        .metadata
        .continue_
        .as_deref()
        .is_some_and(|c| !c.is_empty());
    if !more {
        return first.items.len();
    }
    if let Some(remaining) = first.metadata.remaining_item_count {
        return first.items.len() + usize::try_from(remaining).unwrap_or(0);
    }
    let mut count = 0;
    let mut params = ListParams::default().limit(500);
    for _ in 0..10_000 {
        let Ok(page) = api.list_metadata(&params).await else {
            return count;
        };
        count += page.items.len();
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => break,
        }
    }
    count
}

/// Deletes the binding, the policy and every PolicyReport, and waits until the reports are
/// gone (celgate is stopped: nothing writes them meanwhile).
async fn clean_up(client: &kube::Client, namespaces: usize) {
    for (kind, plural, name) in [
        (
            "ValidatingAdmissionPolicyBinding",
            "validatingadmissionpolicybindings",
            BINDING,
        ),
        (
            "ValidatingAdmissionPolicy",
            "validatingadmissionpolicies",
            scan_fixture::POLICY,
        ),
    ] {
        Api::<DynamicObject>::all_with(client.clone(), &celgate_resource(kind, plural))
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("cannot delete the {kind}: {e}"));
    }
    for i in 0..namespaces {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &format!("{PREFIX}-{i}"),
            &reports_resource(),
        );
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("cannot delete the reports of {PREFIX}-{i}: {e}"));
    }
    let started = Instant::now();
    while report_count(client).await > 0 {
        assert!(
            started.elapsed() < GIVE_UP,
            "PolicyReports still there {GIVE_UP:?} after their deletion"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Every event of kube-apiserver's audit log (and of its rotated files) in `cluster`'s
/// directory, one per request (its first stage logged), received between `from` and `to`
/// (Unix seconds).
fn requests_between(dir: &Path, from: f64, to: f64) -> Vec<Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("audit") && n.ends_with(".log"))
        })
        .collect();
    files.sort();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let Some(at) = event["requestReceivedTimestamp"]
                .as_str()
                .and_then(parse_utc)
            else {
                continue;
            };
            if at < from || at > to {
                continue;
            }
            let id = event["auditID"].as_str().unwrap_or_default().to_string();
            if seen.insert(id) {
                out.push(event);
            }
        }
    }
    out
}

/// The requests of `events` by `<verb> <resource>[/<subresource>]` (a list that continues a
/// page: `list <resource> (next page)`), and who made them: celgate's and the others' counts.
fn tally(events: &[Value]) -> Value {
    let mut celgate: BTreeMap<String, u64> = BTreeMap::new();
    let mut others: BTreeMap<String, u64> = BTreeMap::new();
    let mut bench: u64 = 0;
    let mut throttled: u64 = 0;
    for event in events {
        let agent = event["userAgent"].as_str().unwrap_or_default();
        let user = event["user"]["username"].as_str().unwrap_or_default();
        if agent == AGENT {
            bench += 1;
            continue;
        }
        let object = &event["objectRef"];
        let mut what = format!(
            "{} {}",
            event["verb"].as_str().unwrap_or("?"),
            object["resource"].as_str().unwrap_or("(non-resource)")
        );
        if let Some(sub) = object["subresource"].as_str() {
            what = format!("{what}/{sub}");
        }
        let uri = event["requestURI"].as_str().unwrap_or_default();
        if event["verb"] == "list" && uri.contains("continue=") {
            what.push_str(" (next page)");
        }
        // celgate's client sends no user agent; kube's components and kubectl do.
        if agent.is_empty() && user == SERVICE_ACCOUNT_USER {
            if event["responseStatus"]["code"] == 429 {
                throttled += 1;
            }
            *celgate.entry(what).or_default() += 1;
        } else {
            let who = if agent.is_empty() { user } else { agent };
            let who = who.split('/').next().unwrap_or(who);
            *others.entry(format!("{who}: {what}")).or_default() += 1;
        }
    }
    let total: u64 = celgate.values().sum();
    let sum = |pred: &dyn Fn(&str) -> bool| -> u64 {
        celgate
            .iter()
            .filter(|(k, _)| pred(k))
            .map(|(_, v)| v)
            .sum()
    };
    let kinds = ["configmaps", "secrets", "serviceaccounts"];
    let is_kind = |k: &str, verb: &str| kinds.iter().any(|r| k.starts_with(&format!("{verb} {r}")));
    json!({
        "celgate_total": total,
        "celgate_answered_429": throttled,
        "celgate_by_kind": {
            "list_pages_of_audited_resources": sum(&|k| is_kind(k, "list")),
            "watches_of_audited_resources": sum(&|k| is_kind(k, "watch")),
            "report_patches": sum(&|k| k.starts_with("patch policyreports") || k.starts_with("patch clusterpolicyreports")),
            "report_deletes": sum(&|k| k.starts_with("delete policyreports") || k.starts_with("delete clusterpolicyreports")),
            "report_lists": sum(&|k| k.starts_with("list policyreports") || k.starts_with("list clusterpolicyreports")),
            "binding_status_patches": sum(&|k| k.starts_with("patch validatingadmissionpolicybindings/status")),
            "other": sum(&|k| !is_kind(k, "list") && !is_kind(k, "watch")
                && !k.contains("policyreports") && !k.starts_with("patch validatingadmissionpolicybindings/status")),
        },
        "celgate": celgate,
        "others": others,
        "benchmark_polls": bench,
    })
}

/// The seconds pacing alone takes: the pacer's ticks (one before each resource's list and one
/// after each full page; a resource is listed across every namespace) at `pages_per_second`,
/// and `reports` writes at `writes_per_second`.
fn pacing_floor(
    all_namespaces: &BTreeMap<String, usize>,
    page_size: u32,
    pages_per_second: u32,
    reports: usize,
    writes_per_second: u32,
) -> Value {
    let ticks: usize = all_namespaces
        .values()
        .map(|n| 1 + n / page_size.max(1) as usize)
        .sum();
    let list_s = ticks as f64 / f64::from(pages_per_second);
    let write_s = reports as f64 / f64::from(writes_per_second);
    json!({"pacer_ticks": ticks, "page_size": page_size, "pages_per_second": pages_per_second,
        "pages_s": (list_s * 100.0).round() / 100.0,
        "report_writes": reports, "writes_per_second": writes_per_second,
        "reports_s": (write_s * 100.0).round() / 100.0})
}

/// Stored objects of the three kinds in every namespace, by kind.
async fn all_objects(client: &kube::Client) -> BTreeMap<String, usize> {
    let mut by_kind = BTreeMap::new();
    for kind in scan_fixture::kinds() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind);
        let list = api
            .list_metadata(&ListParams::default())
            .await
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", kind.plural));
        by_kind.insert(kind.kind.clone(), list.items.len());
    }
    by_kind
}

/// The namespace of the floor probe: excluded from celgate's webhooks by default.
const FLOOR_NAMESPACE: &str = "kube-public";
/// The route kube-apiserver calls for the fixture's policy (`failurePolicy: Fail`).
const DIRECT_PATH: &str = "/validate/fail";

/// Three requests every `PROBE_EVERY`, one after the other, each timed alone, until stopped:
/// - `through_apiserver`: a dry-run ConfigMap create in the first (audited) namespace through
///   kube-apiserver, which calls celgate's webhook (what a user's request meets);
/// - `floor`: the same create in [`FLOOR_NAMESPACE`], where no webhook looks (kube-apiserver's
///   own create path at that moment);
/// - `direct`: the review kube-apiserver sends for the first, posted to celgate's webhook
///   itself over HTTPS (the webhook alone, on the same machine).
struct Probe {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<ProbeTimes>,
}

/// Each probe's request times.
#[derive(Default)]
struct ProbeTimes {
    through_apiserver: Vec<Duration>,
    floor: Vec<Duration>,
    direct: Vec<Duration>,
}

impl Probe {
    fn start(client: &kube::Client, celgate: &Celgate) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (client, flag) = (client.clone(), stop.clone());
        let direct = direct_client(celgate.port);
        let task = tokio::spawn(async move {
            let resource = &scan_fixture::kinds()[0];
            let namespace = format!("{PREFIX}-0");
            let reviewed: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, resource);
            let unreviewed: Api<DynamicObject> =
                Api::namespaced_with(client, FLOOR_NAMESPACE, resource);
            let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "webhook-probe", "labels": {"owner": "bench"}},
                "data": {"a": "b"}});
            let review = configmap_create_review(&namespace, &object, "kubernetes-admin", true)
                .to_string()
                .into_bytes();
            let object: DynamicObject = serde_json::from_value(object)
                .unwrap_or_else(|e| panic!("the probe ConfigMap: {e}"));
            let params = PostParams {
                dry_run: true,
                ..Default::default()
            };
            let mut times = ProbeTimes::default();
            while !flag.load(Ordering::Relaxed) {
                let tick = Instant::now();
                for (api, times, probe) in [
                    (&reviewed, &mut times.through_apiserver, "webhook"),
                    (&unreviewed, &mut times.floor, "floor"),
                ] {
                    let started = Instant::now();
                    api.create(&params, &object)
                        .await
                        .unwrap_or_else(|e| panic!("the {probe} probe was not admitted: {e}"));
                    times.push(started.elapsed());
                }
                let started = Instant::now();
                let answer = post_review(&direct, &review).await;
                times.direct.push(started.elapsed());
                assert_eq!(
                    answer["response"]["allowed"],
                    json!(true),
                    "celgate did not admit the direct probe: {answer}"
                );
                tokio::time::sleep(PROBE_EVERY.saturating_sub(tick.elapsed())).await;
            }
            times
        });
        Probe { stop, task }
    }

    /// Stops the probes; p50, p99 and max of each one's requests.
    async fn finish(self) -> Value {
        self.stop.store(true, Ordering::Relaxed);
        let times = self
            .task
            .await
            .unwrap_or_else(|e| panic!("the webhook probe failed: {e}"));
        json!({"through_apiserver": summary(times.through_apiserver), "floor": summary(times.floor),
            "direct": summary(times.direct)})
    }
}

/// p50, p99 and max of `times`.
fn summary(mut times: Vec<Duration>) -> Value {
    times.sort();
    json!({"requests": times.len(), "p50_ms": ms(percentile(&times, 0.5)),
        "p99_ms": ms(percentile(&times, 0.99)), "max_ms": times.last().copied().map(ms)})
}

/// A client of celgate's webhook at `port` (its certificate is its own, not checked here).
fn direct_client(port: u16) -> kube::Client {
    let url = format!("https://127.0.0.1:{port}")
        .parse()
        .unwrap_or_else(|e| panic!("celgate's webhook URL: {e}"));
    let mut config = kube::Config::new(url);
    config.accept_invalid_certs = true;
    kube::Client::try_from(config).unwrap_or_else(|e| panic!("a client of celgate's webhook: {e}"))
}

/// Posts `review` to celgate's [`DIRECT_PATH`]; its answer.
async fn post_review(client: &kube::Client, review: &[u8]) -> Value {
    let request = http::Request::post(DIRECT_PATH)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(review.to_vec())
        .unwrap_or_else(|e| panic!("the direct probe's request: {e}"));
    let text = client
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("the direct probe failed: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("celgate's answer {text}: {e}"))
}

/// One phase's settings.
struct Phase {
    name: String,
    page_size: u32,
    pages_per_second: u32,
    writes_per_second: u32,
    /// Whether celgate runs on a core of its own ([`OWN_CORE`]).
    own_core: bool,
}

/// Everything the phases share.
struct Setup<'a> {
    cluster: &'a Cluster,
    client: &'a kube::Client,
    expected: usize,
    all_namespaces: BTreeMap<String, usize>,
    settle: Duration,
    /// Whether reports carry passes (`BENCH_AUDIT_PASSES`).
    passes: bool,
    /// celgate's kubeconfig: its ServiceAccount with the shipped RBAC.
    kubeconfig: PathBuf,
    /// The machine's cores, counted before any phase pinned this process.
    cores: usize,
}

/// One phase: celgate started with `phase`'s pacing, idle memory, then the policy bound and
/// the scan measured.
async fn run_phase(setup: &Setup<'_>, phase: &Phase) -> Value {
    let client = setup.client;
    let pages = format!("--audit-pages-per-second={}", phase.pages_per_second);
    let writes = format!(
        "--audit-report-writes-per-second={}",
        phase.writes_per_second
    );
    let page_size = format!("--audit-page-size={}", phase.page_size);
    let log_name = format!("celgate-{}", phase.name);
    let mut args = vec![
        "--log-json",
        "--audit-secrets=true",
        &pages,
        &writes,
        &page_size,
    ];
    if setup.passes {
        args.push("--audit-report-passes=true");
    }
    // celgate as it starts here and again after the leader change below.
    let spawn = || {
        Celgate::spawn_kubeconfig(
            setup.cluster,
            &setup.kubeconfig,
            free_port(),
            &log_name,
            &args,
            "info,celgate_operator::audit=debug",
        )
    };
    place(setup, phase.own_core);
    let mut celgate = spawn();
    celgate.wait_ready().await;
    tokio::time::sleep(setup.settle).await;
    let pid = celgate.pid();
    let idle = memory_json(pid);
    println!("[{}] idle after {:?}: {idle}", phase.name, setup.settle);

    // The policy loaded (compiled, its param kind cached) but not audited yet: the scan's own
    // memory is what it adds to this.
    bind_opted_out(client).await;
    tokio::time::sleep(setup.settle).await;
    let loaded = memory_json(pid);
    println!("[{}] policy bound, audit opted out: {loaded}", phase.name);
    let probe = Probe::start(client, &celgate);
    let control_idle = control_plane_cpu(setup.cluster);
    tokio::time::sleep(PROBE_IDLE).await;
    let control_idle_end = control_plane_cpu(setup.cluster);
    let webhook_idle = probe.finish().await;

    let (started, wall) = (Instant::now(), SystemTime::now());
    let sampler = Sampler::start(pid, started);
    let cpu_opt_in = cpu_seconds(pid);
    let control_opt_in = control_plane_cpu(setup.cluster);
    let probe = Probe::start(client, &celgate);
    opt_in(client).await;

    // → status.audit complete.
    let (scan, status) = loop {
        let status = audit_status(client).await;
        if status["lastScanTime"].is_string()
            && status["scanned"].as_u64() == Some(setup.expected as u64)
        {
            break (started.elapsed(), status);
        }
        assert!(
            started.elapsed() < GIVE_UP,
            "[{}] status.audit did not reach {} scanned within {GIVE_UP:?}: {status}",
            phase.name,
            setup.expected
        );
        tokio::time::sleep(POLL).await;
    };
    let webhook_scan = probe.finish().await;
    let cpu_scanned = cpu_seconds(pid);
    let control_scanned = control_plane_cpu(setup.cluster);
    let probe = Probe::start(client, &celgate);
    let violations = status["violations"].as_u64().unwrap_or(0) as usize;
    println!(
        "[{}] binding opted in → status.audit scanned {} with {violations} violations: {:.1} s",
        phase.name,
        setup.expected,
        scan.as_secs_f64()
    );

    // → every report written: one per violating object, or with passes one per scanned object.
    let want = if setup.passes {
        setup.expected
    } else {
        violations
    };
    let (reports, written) = loop {
        let written = report_count(client).await;
        if written == want {
            break (started.elapsed(), written);
        }
        assert!(
            started.elapsed() < GIVE_UP,
            "[{}] {written} of {want} PolicyReports after {GIVE_UP:?}",
            phase.name
        );
        tokio::time::sleep(POLL).await;
    };
    let wall_end = SystemTime::now();
    let webhook_reports = probe.finish().await;
    let cpu_reported = cpu_seconds(pid);
    let control_reported = control_plane_cpu(setup.cluster);
    let cpu = json!({"scan": cpu_json(cpu_opt_in, cpu_scanned),
        "reports": cpu_json(cpu_scanned, cpu_reported)});
    println!("[{}] celgate's CPU: {cpu}", phase.name);
    let control_plane = json!({"idle": cores_json(control_idle, control_idle_end),
        "scan": cores_json(control_opt_in, control_scanned),
        "reports": cores_json(control_scanned, control_reported)});
    println!(
        "[{}] control plane's CPU (cores): {control_plane}",
        phase.name
    );
    let probed = |which: &str| {
        let (idle, scan) = (&webhook_idle[which], &webhook_scan[which]);
        let over_idle = (scan["p99_ms"].as_f64())
            .zip(idle["p99_ms"].as_f64())
            .filter(|(_, idle)| *idle > 0.0)
            .map(|(scan, idle)| (scan / idle * 100.0).round() / 100.0);
        json!({"idle": idle, "during_scan": scan, "during_reports": webhook_reports[which],
            "scan_p99_over_idle_p99": over_idle, "every_ms": ms(PROBE_EVERY)})
    };
    let webhook = json!({"through_apiserver": probed("through_apiserver"), "floor": probed("floor"),
        "direct": probed("direct")});
    println!("[{}] webhook probes: {webhook}", phase.name);
    let samples = sampler.finish();
    let after = memory_json(pid);
    println!(
        "[{}] binding opted in → {written} PolicyReports: {:.1} s",
        phase.name,
        reports.as_secs_f64()
    );

    // The parts of the scan, from celgate's log.
    let logs = celgate.logs();
    let since = |times: Vec<f64>| -> Vec<f64> {
        times
            .into_iter()
            .filter(|t| *t >= epoch_seconds(wall))
            .map(|t| ((t - epoch_seconds(wall)) * 10_000.0).round() / 10.0)
            .collect()
    };
    let scan_started = since(message_times(&logs, "audit scan starts"));
    let resources_scanned = since(message_times(&logs, "audit: resource scanned"));
    let last_scan_time_s = status["lastScanTime"]
        .as_str()
        .and_then(parse_utc)
        .map(|t| t - epoch_seconds(wall).floor());

    let peak_kb = samples.iter().map(|s| s.1).max().unwrap_or(0);
    let hwm_kb = samples.iter().map(|s| s.2).max().unwrap_or(0);
    let idle_rss = idle["rss_mb"].as_f64().unwrap_or(0.0);
    let loaded_rss = loaded["rss_mb"].as_f64().unwrap_or(0.0);
    let round = |x: f64| (x * 10.0).round() / 10.0;
    // One sample a second for the report.
    let series: Vec<Value> = samples
        .iter()
        .step_by((1000 / SAMPLE.as_millis().max(1)) as usize)
        .map(|(t, rss, _)| json!([(t / 100.0).round() / 10.0, mb(*rss)]))
        .collect();
    let memory = json!({
        "idle": idle,
        "policy_loaded": loaded,
        "peak_rss_mb": mb(peak_kb),
        "hwm_mb": mb(hwm_kb),
        "after_reports": after,
        "peak_rss_over_idle_mb": round(mb(peak_kb) - idle_rss),
        "hwm_over_idle_mb": round(mb(hwm_kb) - idle_rss),
        "peak_rss_over_policy_loaded_mb": round(mb(peak_kb) - loaded_rss),
        "after_reports_over_policy_loaded_mb": round(after["rss_mb"].as_f64().unwrap_or(0.0) - loaded_rss),
        "samples": samples.len(),
        "sample_ms": ms(SAMPLE),
        "rss_mb_each_second": series,
    });
    println!(
        "[{}] RSS idle {idle_rss:.1} MB, policy loaded {loaded_rss:.1} MB, peak {:.1} MB (+{:.1} over idle, +{:.1} over loaded), VmHWM {:.1} MB, after the reports {after}",
        phase.name,
        mb(peak_kb),
        round(mb(peak_kb) - idle_rss),
        round(mb(peak_kb) - loaded_rss),
        mb(hwm_kb)
    );

    // The audit log is written as requests complete: a moment for the last lines.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let events = requests_between(
        setup.cluster.dir(),
        epoch_seconds(wall),
        epoch_seconds(wall_end),
    );
    let requests = tally(&events);
    println!(
        "[{}] celgate's API requests while scanning: {}",
        phase.name, requests["celgate_by_kind"]
    );
    let scans = celgate
        .metrics()
        .lines()
        .find_map(|l| l.strip_prefix("celgate_audit_resource_scans_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());

    let floor = pacing_floor(
        &setup.all_namespaces,
        phase.page_size,
        phase.pages_per_second,
        want,
        phase.writes_per_second,
    );
    println!("[{}] pacing alone: {floor}", phase.name);

    // A leader change with nothing changed.
    celgate.terminate(Duration::from_secs(30));
    let (restarted, restart_wall) = (Instant::now(), SystemTime::now());
    let celgate = spawn();
    let new_leader_ms = loop {
        let now = audit_status(client).await;
        if now["lastScanTime"] != status["lastScanTime"]
            && now["scanned"] == status["scanned"]
            && now["violations"] == status["violations"]
        {
            break ms(restarted.elapsed());
        }
        assert!(
            restarted.elapsed() < GIVE_UP,
            "[{}] the new leader's status.audit is not complete after {GIVE_UP:?}: {now}",
            phase.name
        );
        tokio::time::sleep(POLL).await;
    };
    // Report writes come at the write pace after the scan: wait until none came for 5 s.
    let mut quiet_since = Instant::now();
    let mut last = None;
    let leader_requests = loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let events = requests_between(
            setup.cluster.dir(),
            epoch_seconds(restart_wall),
            epoch_seconds(SystemTime::now()),
        );
        let requests = tally(&events);
        let writes = (
            requests["celgate_by_kind"]["report_deletes"].clone(),
            requests["celgate_by_kind"]["report_patches"].clone(),
        );
        if last.as_ref() != Some(&writes) {
            last = Some(writes);
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= Duration::from_secs(5) {
            break requests;
        }
        assert!(
            restarted.elapsed() < GIVE_UP,
            "[{}] report writes after the leader change did not stop",
            phase.name
        );
    };
    let leader_change = json!({
        "status_complete_ms": new_leader_ms,
        "reports_deleted": leader_requests["celgate_by_kind"]["report_deletes"],
        "reports_rewritten": leader_requests["celgate_by_kind"]["report_patches"],
        "reports_after": report_count(client).await,
        "requests": leader_requests["celgate_by_kind"],
    });
    println!("[{}] leader change: {leader_change}", phase.name);
    drop(celgate);
    place(setup, false);
    json!({
        "own_core": phase.own_core,
        "pages_per_second": phase.pages_per_second,
        "page_size": phase.page_size,
        "report_writes_per_second": phase.writes_per_second,
        "scan_ms": ms(scan),
        "reports_ms": ms(reports),
        "scanned": setup.expected,
        "violations": violations,
        "report_passes": setup.passes,
        "reports": written,
        "log": {"scan_started_ms": scan_started, "resource_scanned_ms": resources_scanned},
        "last_scan_time_s": last_scan_time_s,
        "resource_scans_total": scans,
        "memory": memory,
        "cpu": cpu,
        "control_plane_cores": control_plane,
        "webhook": webhook,
        "requests": requests,
        "pacing_alone": floor,
        "leader_change": leader_change,
    })
}

/// The phase `BENCH_AUDIT_PHASES` names: `default`, `unpaced` or `<page size>x<pages/s>`, each
/// optionally followed by [`OWN_CORE`].
fn phase(name: &str) -> Phase {
    let (pacing, own_core) = match name.strip_suffix(OWN_CORE) {
        Some(pacing) => (pacing, true),
        None => (name, false),
    };
    let paced = |page_size, pages_per_second, writes_per_second| Phase {
        name: name.to_string(),
        page_size,
        pages_per_second,
        writes_per_second,
        own_core,
    };
    match pacing {
        "default" => paced(
            DEFAULT_PAGE_SIZE,
            DEFAULT_PAGES_PER_SECOND,
            DEFAULT_WRITES_PER_SECOND,
        ),
        "unpaced" => paced(DEFAULT_PAGE_SIZE, UNPACED, UNPACED),
        other => {
            let pacing = other.split_once('x').and_then(|(size, rate)| {
                Some((size.parse::<u32>().ok()?, rate.parse::<u32>().ok()?))
            });
            match pacing {
                Some((size, rate)) if size > 0 && (1..=UNPACED).contains(&rate) => {
                    paced(size, rate, DEFAULT_WRITES_PER_SECOND)
                }
                _ => panic!(
                    "BENCH_AUDIT_PHASES: unknown phase {name:?} (default, unpaced, or <page size>x<pages/s> such as 250x10, each optionally followed by {OWN_CORE})"
                ),
            }
        }
    }
}

/// Puts the phase's processes on their cores: with [`OWN_CORE`], this benchmark (its probes,
/// their client's side) on the last core, the control plane on the others; without, every
/// process on every core. Threads and processes started later inherit their starter's cores:
/// celgate, started after this, starts on the last core alone and sizes its runtime for one
/// core, as in a Pod limited to one CPU.
fn place(setup: &Setup<'_>, own_core: bool) {
    let cores: Vec<usize> = (0..setup.cores).collect();
    let (control_plane, own) = if own_core {
        assert!(
            setup.cores >= 2,
            "{OWN_CORE} needs two cores or more; this machine has {}",
            setup.cores
        );
        cores.split_at(setup.cores - 1)
    } else {
        (&cores[..], &cores[..])
    };
    for component in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        if let Some(pid) = setup.cluster.pid(component) {
            pin(pid, control_plane);
        }
    }
    pin(std::process::id(), own);
}

/// Pins every thread of process `pid` to `cores`.
fn pin(pid: u32, cores: &[usize]) {
    let mut set = CpuSet::new();
    for &core in cores {
        set.set(core);
    }
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap_or_else(|e| panic!("the threads of process {pid}: {e}"));
    for task in tasks.flatten() {
        let thread = (task.file_name().to_str())
            .and_then(|t| t.parse().ok())
            .and_then(Pid::from_raw);
        // A thread that ended meanwhile has nothing to pin.
        if let Some(thread) = thread {
            let _ = sched_setaffinity(Some(thread), &set);
        }
    }
}

fn report_path() -> PathBuf {
    std::env::var_os("BENCH_AUDIT_REPORT").map_or_else(
        || workspace().join("target/bench/audit.json"),
        PathBuf::from,
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let objects = env_usize("BENCH_AUDIT_OBJECTS", 10_000);
    let namespaces = env_usize("BENCH_AUDIT_NAMESPACES", 20).max(2);
    let settle = Duration::from_secs(env_usize("BENCH_AUDIT_SETTLE_SECONDS", 10) as u64);
    let phases: Vec<String> = std::env::var("BENCH_AUDIT_PHASES")
        .unwrap_or_else(|_| "default,unpaced,default@own-core".into())
        .split(',')
        .map(|p| p.trim().to_string())
        .collect();
    let load_before = loadavg();
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let cluster = Cluster::start();
    cluster.install_crds();
    let reports_crds = workspace().join("config/policy-reports");
    cluster.kubectl_ok(&["apply", "-k", &reports_crds.to_string_lossy()]);
    cluster.wait_established(&[
        "crd/policyreports.wgpolicyk8s.io",
        "crd/clusterpolicyreports.wgpolicyk8s.io",
    ]);
    let client = bench_client(&cluster).await;
    let kubeconfig = service_account(&cluster).await;

    let mut items = scan_fixture::namespaces(PREFIX, namespaces);
    items.push(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": scan_fixture::PARAMS_NAMESPACE}}));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    let out = cluster.kubectl(&["create", "-f", "-"], &list);
    assert!(
        out.status.success(),
        "cannot create the namespaces: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.apply(&scan_fixture::param(4));
    let created = create_objects(&client, objects, namespaces).await;
    println!(
        "created {objects} objects in {namespaces} namespaces in {:.1} s ({CLIENTS} clients)",
        created.as_secs_f64()
    );
    let by_kind = expected_objects(&client, namespaces).await;
    let expected: usize = by_kind.values().sum();
    let all_namespaces = all_objects(&client).await;
    println!(
        "the binding selects {expected} objects: {by_kind:?}; stored in all: {all_namespaces:?}"
    );

    let setup = Setup {
        cluster: &cluster,
        client: &client,
        expected,
        all_namespaces: all_namespaces.clone(),
        settle,
        passes: std::env::var("BENCH_AUDIT_PASSES").is_ok_and(|v| v == "1"),
        kubeconfig,
        cores,
    };
    let mut results = serde_json::Map::new();
    for (i, name) in phases.iter().enumerate() {
        let phase = phase(name);
        if i > 0 {
            clean_up(&client, namespaces).await;
        }
        results.insert(name.clone(), run_phase(&setup, &phase).await);
    }

    let report = json!({
        "objects": objects,
        "namespaces": namespaces,
        "audited_namespaces": namespaces - 1,
        "selected_objects": expected,
        "selected_by_kind": by_kind,
        "stored_by_kind": all_namespaces,
        "created_ms": ms(created),
        "celgate_bin": Celgate::binary().display().to_string(),
        "settle_seconds": settle.as_secs(),
        "phases": results,
        "loadavg_before": load_before,
        "loadavg_after": loadavg(),
        "measures": {
            "scan_ms": "binding opted in (its opt-out annotation removed) → the binding's status.audit has lastScanTime and scanned = selected_objects",
            "reports_ms": "binding opted in → as many PolicyReports as status.audit.violations",
            "log": "from celgate's log, ms after the opt-in: each `audit scan starts` and each `audit: resource scanned` (a resource's list done)",
            "last_scan_time_s": "status.audit.lastScanTime − the opt-in's whole second",
            "memory": "VmRSS/VmHWM of celgate, MB: idle (no policy) after settle_seconds, policy_loaded (policy and binding created, the binding opted out: compiled, its param kind cached) after settle_seconds more, then sampled every sample_ms from the opt-in until the reports were written",
            "requests": "kube-apiserver's audit log between the opt-in and the last report: celgate's (as its ServiceAccount, without a user agent) by verb and resource, and how many were answered 429; others by user agent",
            "webhook": "three probes one after the other every every_ms, each timed alone: through_apiserver, a dry-run ConfigMap create in an audited namespace through kube-apiserver (which calls celgate's webhook); floor, the same create in kube-public, where no webhook looks (kube-apiserver's own create path meanwhile); direct, the review kube-apiserver sends for the first posted to celgate's /validate/fail over HTTPS (the webhook alone); each idle (policy loaded, audit opted out) for 30 s, during_scan (opt-in → status.audit complete), during_reports (→ every report written); ms",
            "pacing_alone": "seconds the pacing flags take on their own: one pacer tick per list page and one before each resource's first page, one write tick per report",
            "cpu": "CPU seconds (user + system, /proc/<pid>/task/*/stat) of celgate's threads named celgate-audit and of the others, opt-in → status.audit complete (scan) and → every report written (reports)",
            "control_plane_cores": "cores kube-apiserver and etcd used on average (CPU seconds from /proc/<pid>/stat over wall seconds) while the webhook was probed idle, during the scan and while the reports were written",
            "leader_change": "celgate stopped (SIGTERM) and started again, nothing changed: ms until status.audit has a new lastScanTime and the same counts; celgate's report deletes and patches (audit log) from the restart until none came for 5 s",
        },
    });
    let path = report_path();
    celgate_e2e::bench::write_report(&path, &report);
}
