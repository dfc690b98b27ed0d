//! What the cluster benchmarks (`e2e/benches`) share: their settings from the environment,
//! percentiles and milliseconds as the reports give them, the machine's load, and the report.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// The value at fraction `p` of `sorted` (nearest rank), or zero when it is empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len().saturating_sub(1)) as f64 * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// `d` in milliseconds, to two decimals.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 100_000.0).round() / 100.0
}

/// The positive integer in the environment variable `name`, or `default` when it is unset.
pub fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("{name}={v:?}: expected a positive integer")),
        Err(_) => default,
    }
}

/// The integer (zero allowed: "none of it") in the environment variable `name`, or `default`
/// when it is unset.
pub fn env_count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: expected an integer, 0 or more")),
        Err(_) => default,
    }
}

/// The machine's load averages, as `/proc/loadavg` gives them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Writes `report` as pretty JSON to `path` (making its directory) and says where.
pub fn write_report(path: &Path, report: &Value) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    }
    let text = serde_json::to_string_pretty(report)
        .unwrap_or_else(|e| panic!("cannot serialise the report: {e}"));
    std::fs::write(path, text + "\n")
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    println!("report: {}", path.display());
}

/// kube-apiserver's `/metrics` text, read as `client`.
pub async fn apiserver_metrics(client: &kube::Client) -> String {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .unwrap_or_else(|e| panic!("a GET /metrics request: {e}"));
    client
        .request_text(request)
        .await
        .unwrap_or_else(|e| panic!("cannot read kube-apiserver's metrics: {e}"))
}

/// The sum of the samples of `name` (a metric's full name, `…_sum` or `…_count` for a
/// histogram) in Prometheus text `metrics`, over the series whose line contains every one of
/// `labels` (`type="validating"`).
pub fn metric_total(metrics: &str, name: &str, labels: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
                && labels.iter().all(|label| l.contains(label))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A histogram's sum and count so far, over the series carrying every one of `labels`.
#[derive(Clone, Copy, Default)]
pub struct Histogram {
    /// The sum of the observations.
    pub sum: f64,
    /// Their number.
    pub count: f64,
}

impl Histogram {
    /// `family`'s sum and count in Prometheus text `metrics`.
    pub fn read(metrics: &str, family: &str, labels: &[&str]) -> Self {
        Histogram {
            sum: metric_total(metrics, &format!("{family}_sum"), labels),
            count: metric_total(metrics, &format!("{family}_count"), labels),
        }
    }

    /// The mean in ms of the observations since `before`, and their number.
    pub fn mean_ms_since(self, before: Histogram) -> (f64, f64) {
        let count = self.count - before.count;
        let mean = if count > 0.0 {
            ((self.sum - before.sum) / count * 100_000.0).round() / 100.0
        } else {
            0.0
        };
        (mean, count)
    }
}

/// The cluster-scoped resource of `kind` (a policy or binding kind) in `api_version`.
pub fn api_resource(api_version: &str, kind: &str) -> kube::discovery::ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    kube::discovery::ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: api_version.into(),
        kind: kind.into(),
        plural: format!("{}s", kind.to_lowercase()).replace("policys", "policies"),
    }
}

/// How many times one create is retried after kube-apiserver answered 429.
const RETRIES: usize = 100;

/// Creates `objects` (cluster-scoped policies and bindings, each naming its apiVersion and kind)
/// with `clients` concurrent clients; a create kube-apiserver answers with 429 (too many
/// requests) is retried after a pause. Returns the number of 429 answers.
pub async fn create_objects(client: &kube::Client, objects: Vec<Value>, clients: usize) -> usize {
    use kube::api::{Api, DynamicObject, PostParams};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    let total = objects.len();
    let queue = Arc::new(Mutex::new(objects.into_iter()));
    let (created, throttled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..clients.max(1) {
        let (queue, client) = (queue.clone(), client.clone());
        let (created, throttled) = (created.clone(), throttled.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let next = queue.lock().ok().and_then(|mut q| q.next());
                let Some(object) = next else { break };
                let kind = object["kind"].as_str().unwrap_or_default().to_string();
                let api_version = object["apiVersion"].as_str().unwrap_or_default();
                let api: Api<DynamicObject> =
                    Api::all_with(client.clone(), &api_resource(api_version, &kind));
                let object: DynamicObject = serde_json::from_value(object)
                    .unwrap_or_else(|e| panic!("fixture {kind}: {e}"));
                let mut attempt = 0;
                loop {
                    match api.create(&PostParams::default(), &object).await {
                        Ok(_) => break,
                        Err(kube::Error::Api(e)) if e.code == 429 && attempt < RETRIES => {
                            throttled.fetch_add(1, Ordering::Relaxed);
                            attempt += 1;
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(e) => panic!("cannot create {kind}: {e}"),
                    }
                }
                let n = created.fetch_add(1, Ordering::Relaxed) + 1;
                if n % 10_000 == 0 {
                    println!("created {n} of {total} objects");
                }
            }
        }));
    }
    for t in tasks {
        t.await
            .unwrap_or_else(|e| panic!("a creating client failed: {e}"));
    }
    throttled.load(Ordering::Relaxed)
}

/// `per_phase` creates in each of `phases` phases from `clients` concurrent clients, which take
/// them from one sequence in which the phases alternate create by create (0, 1, 2, 0, 1, …), so
/// that drift (the controllers' catch-up, compaction, garbage collection, other load on the
/// machine) falls on every phase alike and favours none. `create(phase, n)` makes the `n`th
/// create of `phase`; an error stops the bench. Returns each phase's create times.
pub async fn interleaved<F, Fut>(
    phases: usize,
    per_phase: usize,
    clients: usize,
    create: F,
) -> Vec<Vec<Duration>>
where
    F: Fn(usize, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients.max(1) {
        let (next, create) = (next.clone(), create.clone());
        tasks.push(tokio::spawn(async move {
            let mut times = vec![Vec::new(); phases];
            loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= phases * per_phase {
                    break times;
                }
                let (phase, n) = (k % phases, k / phases);
                let started = std::time::Instant::now();
                let created = create(phase, n).await;
                times[phase].push(started.elapsed());
                if let Err(e) = created {
                    panic!("create {n} of phase {phase} failed: {e}");
                }
            }
        }));
    }
    let mut all = vec![Vec::new(); phases];
    for t in tasks {
        let times = t.await.unwrap_or_else(|e| panic!("a client failed: {e}"));
        for (all, times) in all.iter_mut().zip(times) {
            all.extend(times);
        }
    }
    all
}

/// Waits (at most `give_up`) until celgate's status writer has caught up: kube-apiserver's count
/// of requests to celgate objects' status subresource stays the same for two seconds. A bench
/// that stores many policies or bindings so times its creates in the steady state, not beside
/// the status writes their creation set off. Returns the status requests counted meanwhile.
pub async fn wait_status_written(client: &kube::Client, give_up: Duration) -> f64 {
    let count = || async {
        metric_total(
            &apiserver_metrics(client).await,
            "apiserver_request_total",
            &["group=\"admission.celgate.io\"", "subresource=\"status\""],
        )
    };
    let (started, first) = (std::time::Instant::now(), count().await);
    let mut last = first;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = count().await;
        if now == last || started.elapsed() > give_up {
            return now - first;
        }
        last = now;
    }
}

/// The CPU time (user and system) process `pid` has used so far, in seconds (0 when it cannot
/// be read).
pub fn process_cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces), from the third: utime is the
    // 14th field, stime the 15th, in clock ticks of 1/100 s.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Creates the realistic fixture's param ConfigMaps in `fixture::PARAMS_NAMESPACE` (which must
/// exist).
pub async fn create_param_configmaps(client: &kube::Client) {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), crate::fixture::PARAMS_NAMESPACE);
    for cm in crate::fixture::param_configmaps() {
        let cm: ConfigMap = serde_json::from_value(cm).unwrap_or_else(|e| panic!("{e}"));
        maps.create(&PostParams::default(), &cm)
            .await
            .unwrap_or_else(|e| panic!("cannot create a param ConfigMap: {e}"));
    }
}
