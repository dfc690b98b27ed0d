//! The background audit: while this replica leads, every object already stored that a bound
//! ValidatingAdmissionPolicy's binding matches is asked "would it be admitted if it were
//! created now?" ([`celgate_snapshot::audit`]), with the webhook's own dispatch and messages.
//! Each resource is listed page by page (paced) and then watched, so an object fixed, created
//! or deleted changes its results within seconds; objects are evaluated as they stream by and
//! never kept. A change of policies, bindings, params, namespaces or served resources starts a
//! new scan of the resources whose objects are decided on what changed (`inputs`); the
//! interval, of every resource. Results go to PolicyReports, each binding's `status.audit` and
//! the `celgate_audit_*` gauges (`writer`).

mod findings;
mod inputs;
mod reports;
mod targets;
mod thread;
mod writer;

#[cfg(test)]
mod footprint;

pub use thread::apart;

pub use writer::clear_while_off;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use celgate_crds::ValidatingAdmissionPolicy;
use celgate_snapshot::audit::{StoredAs, Violation, create_request, decide_each_binding, finding};
use celgate_snapshot::{Deps, Snapshot, SnapshotStore};
use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::watcher::{self, Event};
use kube::{Client, ResourceExt};
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{debug, info, warn};

use self::findings::{Findings, Subject, UnitKey};
use self::inputs::Inputs;
use self::targets::{Targets, Unit};
use crate::cluster::discovery::Discovery;
use crate::controllers::policies::KindStores;
use crate::serving::leader::Leadership;
use crate::{metrics, retry};

/// How the audit runs (`celgate run --audit-*`).
#[derive(Clone, Debug)]
pub struct AuditConfig {
    /// A full scan at least this often, besides the scans changes start.
    pub interval: Duration,
    /// Objects per list page.
    pub page_size: u32,
    /// List pages requested per second, at most (all resources together).
    pub pages_per_second: u32,
    /// Report writes and deletes per second, at most.
    pub writes_per_second: u32,
    /// Namespaces the webhooks never see (their requests are admitted): neither their objects
    /// nor the Namespace objects themselves are audited.
    pub excluded_namespaces: Vec<String>,
    /// Whether Secrets are audited (`--audit-secrets`).
    pub secrets: bool,
    /// Whether reports carry a `pass` result for each binding that allowed the object
    /// (`--audit-report-passes`).
    pub passes: bool,
    /// The report API written (`--audit-report-api`).
    pub report_api: crate::args::ReportApi,
}

/// How long after the first change of the inputs the new scan starts (changes made meanwhile
/// join it).
const QUIET: Duration = Duration::from_secs(1);
/// The shortest time between two scans started by changes.
const MIN_GAP: Duration = Duration::from_secs(5);
/// How often the inputs are compared.
const POLL: Duration = Duration::from_millis(500);
/// How long a scan waits for the param kinds and the namespaces to catch up before it starts
/// anyway (a param kind that cannot be listed then shows in its bindings' reports).
const CATCH_UP: Duration = Duration::from_secs(30);

/// The audit's shared state.
type Shared = Arc<Mutex<Findings>>;

fn lock(findings: &Mutex<Findings>) -> MutexGuard<'_, Findings> {
    findings.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What the audit reads from the rest of the operator.
pub struct Sources {
    /// The snapshot the webhook decides with.
    pub store: Arc<SnapshotStore>,
    /// The stored validating policies and bindings (annotations: opt-outs, severity).
    pub stores: KindStores<ValidatingAdmissionPolicy>,
    /// The served resources.
    pub discovery: Discovery,
    /// Authorizers for policies that read `authorizer`.
    pub deps: Deps,
}

/// Runs the audit whenever this replica leads, until the process stops.
pub async fn run(
    client: Client,
    sources: Sources,
    mut leadership: Leadership,
    config: AuditConfig,
) {
    loop {
        if leadership.wait_for(|leads| *leads).await.is_err() {
            return;
        }
        info!("audit starts: this replica leads");
        tokio::select! {
            () = lead(&client, &sources, &config) => {}
            _ = leadership.wait_for(|leads| !*leads) => {
                info!("audit stops: this replica no longer leads");
            }
        }
        metrics::audit_cleared();
    }
}

/// The audit while leading: a scan, then another whenever the inputs change or the interval
/// passes; the writer runs beside it.
async fn lead(client: &Client, sources: &Sources, config: &AuditConfig) {
    let findings: Shared = Arc::default();
    let (plans, planned) = watch::channel(None);
    let mut tasks = JoinSet::new();
    tasks.spawn(writer::run(
        client.clone(),
        findings.clone(),
        planned,
        config.writes_per_second,
        config.report_api,
    ));
    let pacer = Arc::new(Pacer::new(config.pages_per_second));
    let mut followed = Followed::default();
    let mut kinds = JoinSet::new();
    // Whether the next scan covers every resource (the first, and each after the interval).
    let mut full = true;
    let mut catch_up = CatchUp::default();
    loop {
        let snapshot = settled(&sources.store, &mut catch_up).await;
        let served = match sources.discovery.ready().await {
            Ok(served) => served,
            Err(e) => {
                warn!(error = %e, "audit: cannot discover the served resources; retrying");
                tokio::time::sleep(MIN_GAP).await;
                continue;
            }
        };
        let inputs = Inputs::now(&snapshot, sources);
        let mut plan = targets::plan(
            &snapshot,
            &sources.stores.policies,
            &sources.stores.bindings,
            &served,
            config.secrets,
        );
        if std::mem::take(&mut full) {
            followed.stop_all();
        }
        let now = SystemTime::now();
        let reads = inputs::resource_inputs(&plan, &snapshot);
        let rescanned = followed.update(&mut plan, reads, now);
        let plan = Arc::new(plan);
        let keys: HashSet<UnitKey> = plan.units.iter().map(|u| key(u)).collect();
        lock(&findings).retain_units(&keys);
        info!(
            bindings = plan.units.len(),
            resources = plan.resources.len(),
            rescanned = rescanned.len(),
            "audit scan starts"
        );
        let started = Instant::now();
        plans.send_replace(Some((plan.clone(), now)));
        for (resource, reads) in rescanned {
            let audited = Audited::of(&plan.units, &resource);
            let task = kinds.spawn(follow(
                client.clone(),
                resource.clone(),
                audited,
                findings.clone(),
                pacer.clone(),
                sources.store.clone(),
                sources.deps.clone(),
                config.clone(),
            ));
            followed.started(resource, reads, now, task);
        }
        let rescan_at = started + config.interval;
        let mut changed_at: Option<Instant> = None;
        loop {
            tokio::select! {
                () = tokio::time::sleep(POLL) => {}
                () = tokio::time::sleep_until(rescan_at) => {
                    full = true;
                    break;
                }
            }
            let now = Inputs::now(&sources.store.load(), sources);
            if now != inputs {
                let at = *changed_at.get_or_insert_with(Instant::now);
                if at.elapsed() >= QUIET && started.elapsed() >= MIN_GAP {
                    debug!("audit inputs changed: a new scan starts");
                    break;
                }
            }
        }
        // Finished follows (aborted ones) are reaped; the others go on into the next plan.
        while kinds.try_join_next().is_some() {}
    }
}

/// The snapshot a scan is planned from (the only way the audit gets one): the first that is
/// ready and that `catch_up` lets through, looked at every [`POLL`].
async fn settled(store: &SnapshotStore, catch_up: &mut CatchUp) -> Arc<Snapshot> {
    loop {
        let snapshot = store.load();
        if snapshot.ready && !catch_up.waits(&snapshot) {
            return snapshot;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Holds a scan back while the snapshot has not caught up ([`Snapshot::caught_up`]), for at
/// most [`CATCH_UP`] from when it was first found behind. A scan planned while a param kind
/// is still listing decides the objects of its bindings as failing ("not yet synced"), and is
/// started again from the first page once the params have listed: a new leader's scan of
/// 100,000 objects, planned as its policies were published, read 5 s of list pages twice.
#[derive(Default)]
struct CatchUp(Option<Instant>);

impl CatchUp {
    /// Whether the scan waits longer for `snapshot`.
    fn waits(&mut self, snapshot: &Snapshot) -> bool {
        if snapshot.caught_up() {
            self.0 = None;
            return false;
        }
        let behind = *self.0.get_or_insert_with(Instant::now);
        if behind.elapsed() < CATCH_UP {
            return true;
        }
        warn!(
            waited_s = CATCH_UP.as_secs(),
            "audit: a param kind or the namespaces have not listed yet; scanning anyway"
        );
        self.0 = None;
        false
    }
}

/// What deciding the objects of one resource reads: the inputs of each binding selecting it.
type Reads = Box<[Arc<inputs::UnitInputs>]>;

/// The resources followed (listed, then watched), each with what deciding its objects read
/// when its follow started, and when that was.
#[derive(Default)]
struct Followed(HashMap<StoredAs, (Reads, SystemTime, tokio::task::AbortHandle)>);

impl Followed {
    /// Stops following every resource.
    fn stop_all(&mut self) {
        for (_, _, task) in self.0.values() {
            task.abort();
        }
        self.0.clear();
    }

    /// For a new `plan` whose resources read `reads`: stops following the resources that left
    /// it or whose reads changed, notes in the plan since when each of its resources is
    /// followed (`now` for those to follow anew), and returns those with their reads. Only they
    /// are scanned again: what the others found still holds.
    fn update(
        &mut self,
        plan: &mut Targets,
        mut reads: HashMap<StoredAs, Reads>,
        now: SystemTime,
    ) -> Vec<(StoredAs, Reads)> {
        self.0.retain(|resource, (read, _, task)| {
            let keep = reads.get(resource) == Some(read) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        plan.since = (plan.resources.iter())
            .map(|r| (r.clone(), self.0.get(r).map_or(now, |(_, since, _)| *since)))
            .collect();
        (plan.resources.iter())
            .filter(|r| !self.0.contains_key(*r))
            .map(|r| (r.clone(), reads.remove(r).unwrap_or_default()))
            .collect()
    }

    /// `resource` is followed by `task` since `since`, reading `reads`.
    fn started(
        &mut self,
        resource: StoredAs,
        reads: Reads,
        since: SystemTime,
        task: tokio::task::AbortHandle,
    ) {
        self.0.insert(resource, (reads, since, task));
    }
}

/// A binding's key.
fn key(unit: &Unit) -> UnitKey {
    (unit.policy.clone(), unit.binding.clone())
}

/// Paces list pages across every resource: one page per tick.
struct Pacer(tokio::sync::Mutex<tokio::time::Interval>);

impl Pacer {
    fn new(per_second: u32) -> Self {
        let mut interval = tokio::time::interval(Duration::from_secs(1) / per_second.max(1));
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        Self(tokio::sync::Mutex::new(interval))
    }

    async fn wait(&self) {
        self.0.lock().await.tick().await;
    }
}

/// Lists and then watches one resource, evaluating each object under every binding of the
/// plan that may select it (`audited`), until aborted. A resource celgate may not read is
/// recorded in the bindings' status and tried again with [`retry::UNREADABLE`]'s backoff. It holds those bindings'
/// names, not the plan: a follow goes on into the next plans while its resource's inputs stay,
/// and held every binding's unit of the plan it started with (at 1,000 policies x 100
/// bindings, 98 bytes a binding for each plan held so).
#[allow(clippy::too_many_arguments)]
async fn follow(
    client: Client,
    resource: StoredAs,
    audited: Audited,
    findings: Shared,
    pacer: Arc<Pacer>,
    store: Arc<SnapshotStore>,
    deps: Deps,
    config: AuditConfig,
) {
    let page_size = config.page_size;
    let report_passes = config.passes;
    let mut names = Names::new(&resource);
    let excluded =
        |object: &DynamicObject| excluded(&resource, object, &config.excluded_namespaces);
    let api_resource = ApiResource {
        group: resource.group.clone(),
        version: resource.version.clone(),
        api_version: resource.api_version(),
        kind: resource.kind.clone(),
        plural: resource.resource.clone(),
    };
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource);
    let config = watcher::Config::default().page_size(page_size);
    let mut events = std::pin::pin!(retry::watch(api, config));
    let mut pass = None;
    let mut listed: u32 = 0;
    let mut failing = false;
    let mut unreadable = retry::Backoff::new(retry::UNREADABLE);
    while let Some(event) = events.next().await {
        match event {
            Ok(Event::Init) => {
                pacer.wait().await;
                listed = 0;
                pass = Some(lock(&findings).start(&resource));
            }
            Ok(Event::InitApply(object)) if excluded(&object) => {
                listed += 1;
                if let Some(pass) = pass.as_mut() {
                    Findings::seen(pass, &object.uid().unwrap_or_default());
                }
            }
            Ok(Event::InitApply(object)) => {
                let (subject, violations, matched) =
                    evaluate(&audited, &mut names, object, &store, &deps);
                listed += 1;
                let passes = passes(report_passes, &matched, &violations);
                if let Some(pass) = pass.as_mut() {
                    Findings::seen(pass, &subject.uid);
                    for unit in matched {
                        *pass.matched.entry(unit).or_default() += 1;
                    }
                }
                lock(&findings).set(subject, &names.resource, violations, passes);
                if listed.is_multiple_of(page_size.max(1)) {
                    pacer.wait().await;
                }
            }
            Ok(Event::InitDone) => {
                if let Some(pass) = pass.take() {
                    lock(&findings).finish(&resource, pass, &audited.keys());
                    metrics::audit_resource_scanned();
                    debug!(resource = %resource.resource, objects = listed, "audit: resource scanned");
                }
                failing = false;
                unreadable.reset();
            }
            Ok(Event::Apply(object)) if excluded(&object) => {}
            Ok(Event::Apply(object)) => {
                let (subject, violations, matched) =
                    evaluate(&audited, &mut names, object, &store, &deps);
                let passes = passes(report_passes, &matched, &violations);
                lock(&findings).set(subject, &names.resource, violations, passes);
            }
            Ok(Event::Delete(object)) => {
                if let Some(uid) = object.uid() {
                    lock(&findings).remove(&uid);
                }
            }
            Err(error) => {
                let why = format!(
                    "cannot list and watch {} ({}): {error}",
                    resource.resource,
                    resource.api_version()
                );
                if !failing {
                    warn!(error = %why, "audit: a resource cannot be read; retrying with backoff");
                    failing = true;
                }
                lock(&findings).failed(&resource, &audited.keys(), &why);
                tokio::time::sleep(unreadable.next_delay()).await;
            }
        }
    }
}

/// Whether `object`, listed as `resource`, is one the webhooks never see: an object in an
/// excluded namespace, or an excluded Namespace itself (the webhooks' namespaceSelector matches
/// a Namespace by its own labels).
fn excluded(resource: &StoredAs, object: &DynamicObject, namespaces: &[String]) -> bool {
    let namespace = if resource.group.is_empty() && resource.resource == "namespaces" {
        object.metadata.name.as_ref()
    } else {
        object.metadata.namespace.as_ref()
    };
    namespace.is_some_and(|ns| namespaces.contains(ns))
}

/// The bindings that applied to an object and allowed it, when passes are reported (`report`).
fn passes(
    report: bool,
    matched: &[UnitKey],
    violations: &BTreeMap<UnitKey, Violation>,
) -> BTreeSet<UnitKey> {
    if !report {
        return BTreeSet::new();
    }
    matched
        .iter()
        .filter(|unit| !violations.contains_key(*unit))
        .cloned()
        .collect()
}

/// What the objects of one resource share: the resource, its apiVersion and kind, and each
/// namespace's name (one copy each, however many objects hold them).
struct Names {
    resource: Arc<StoredAs>,
    api_version: Arc<str>,
    kind: Arc<str>,
    namespaces: HashSet<Arc<str>>,
}

impl Names {
    fn new(resource: &StoredAs) -> Self {
        Self {
            resource: Arc::new(resource.clone()),
            api_version: Arc::from(resource.api_version()),
            kind: Arc::from(resource.kind.as_str()),
            namespaces: HashSet::new(),
        }
    }

    /// The shared copy of `namespace`.
    fn namespace(&mut self, namespace: &str) -> Arc<str> {
        if let Some(shared) = self.namespaces.get(namespace) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(namespace);
        self.namespaces.insert(shared.clone());
        shared
    }

    /// The report subject of `object`.
    fn subject(&mut self, object: &DynamicObject) -> Subject {
        Subject {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace(object.metadata.namespace.as_deref().unwrap_or_default()),
            name: object.name_any().into(),
            uid: object.uid().unwrap_or_default().into(),
        }
    }
}

/// The bindings audited on one resource, by policy then binding name (the plan's shared names,
/// 16 bytes a binding).
#[derive(Default)]
struct Audited(HashMap<Arc<str>, HashSet<Arc<str>>>);

impl Audited {
    /// The units of `units` that may select `resource`.
    fn of(units: &[Arc<Unit>], resource: &StoredAs) -> Self {
        let mut audited = Self::default();
        for unit in units.iter().filter(|u| u.resources.contains(resource)) {
            (audited.0.entry(unit.policy.clone()).or_default()).insert(unit.binding.clone());
        }
        audited
    }

    /// The key of binding `binding` of policy `policy`, when it is audited here.
    fn get(&self, policy: &str, binding: &str) -> Option<UnitKey> {
        let (policy, bindings) = self.0.get_key_value(policy)?;
        Some((policy.clone(), bindings.get(binding)?.clone()))
    }

    /// Whether binding `binding` of policy `policy` is audited here.
    fn contains(&self, policy: &str, binding: &str) -> bool {
        self.0.get(policy).is_some_and(|b| b.contains(binding))
    }

    /// Every key.
    fn keys(&self) -> Vec<UnitKey> {
        (self.0.iter())
            .flat_map(|(policy, bindings)| bindings.iter().map(|b| (policy.clone(), b.clone())))
            .collect()
    }
}

/// One object's violations and the bindings that applied to it, each binding decided alone
/// against the current snapshot (its policies, namespaces and params), each policy evaluated
/// once for all its bindings.
fn evaluate(
    audited: &Audited,
    names: &mut Names,
    object: DynamicObject,
    store: &SnapshotStore,
    deps: &Deps,
) -> (Subject, BTreeMap<UnitKey, Violation>, Vec<UnitKey>) {
    let subject = names.subject(&object);
    let mut violations = BTreeMap::new();
    let mut matched = Vec::new();
    // List items carry no apiVersion or kind: the resource gives them.
    let mut value = serde_json::to_value(&object).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            Value::String(subject.api_version.to_string()),
        );
        map.insert("kind".into(), Value::String(subject.kind.to_string()));
    }
    let received = create_request(&names.resource, value, &format!("audit-{}", subject.uid));
    let Ok(req) = received.request() else {
        return (subject, violations, matched);
    };
    let snapshot = store.load();
    // Exceptions expire by the time of the scan.
    let now = std::time::SystemTime::now();
    let authorizer = deps
        .authorizers
        .as_ref()
        .filter(|_| snapshot.policies.uses_authorizer())
        .map(|source| source.for_user(req.raw.get("userInfo").unwrap_or(&Value::Null)));
    let mut decide = || {
        decide_each_binding(
            &snapshot,
            &req,
            authorizer.as_ref(),
            now,
            |policy, binding| audited.contains(policy, binding),
            |policy, binding, outcome, applied| {
                let Some(key) = audited.get(policy, binding) else {
                    return;
                };
                if let Some(v) = finding(outcome) {
                    violations.insert(key.clone(), v);
                }
                if applied {
                    matched.push(key);
                }
            },
        );
    };
    match authorizer {
        // Authorization checks wait for the API server: not on a runtime worker's time.
        Some(_) => tokio::task::block_in_place(decide),
        None => decide(),
    }
    (subject, violations, matched)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(resource: &str, namespaced: bool) -> StoredAs {
        StoredAs {
            group: String::new(),
            version: "v1".into(),
            resource: resource.into(),
            kind: String::new(),
            namespaced,
        }
    }

    fn object(namespace: Option<&str>, name: &str) -> DynamicObject {
        let mut object = DynamicObject::new(
            name,
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        object.metadata.namespace = namespace.map(String::from);
        object
    }

    #[test]
    fn passes_are_the_bindings_that_applied_without_a_violation_and_only_when_asked() {
        let unit = |name: &str| -> UnitKey { (Arc::from("p"), Arc::from(name)) };
        let matched = [unit("allows"), unit("denies")];
        let violations = BTreeMap::from([(
            unit("denies"),
            Violation {
                verdict: celgate_snapshot::audit::Verdict::Fail,
                message: "denied".into(),
            },
        )]);
        assert_eq!(
            passes(true, &matched, &violations),
            BTreeSet::from([unit("allows")])
        );
        assert!(passes(false, &matched, &violations).is_empty());
    }

    /// A resource celgate may not list is asked for again ever more slowly: the watch's own
    /// retries alone list it four times a second for as long as it stays unreadable.
    #[tokio::test(start_paused = true)]
    async fn a_resource_that_cannot_be_read_is_listed_again_ever_more_slowly() {
        use crate::fixtures::{self, Reply};
        let (client, mut api) = fixtures::pair();
        let config = AuditConfig {
            interval: Duration::from_secs(3600),
            page_size: 500,
            pages_per_second: 1000,
            writes_per_second: 1000,
            excluded_namespaces: Vec::new(),
            secrets: false,
            passes: false,
            report_api: crate::args::ReportApi::default(),
        };
        let findings: Shared = Arc::default();
        let following = follow(
            client,
            fixtures::config_maps(),
            Audited::default(),
            findings.clone(),
            Arc::new(Pacer::new(config.pages_per_second)),
            SnapshotStore::new(),
            Deps::default(),
            config,
        );
        let mut lists = Vec::new();
        let started = Instant::now();
        let answer = |call: &fixtures::Call| {
            lists.push(started.elapsed());
            assert!(!call.is_watch(), "no list succeeded, so nothing is watched");
            Reply::Json(403, fixtures::status(403, "Forbidden"))
        };
        api.serve_until(
            answer,
            tokio::time::timeout(Duration::from_secs(60), following),
        )
        .await
        .expect_err("a follow ends only when aborted");
        // Waits of 1, 2, 4, 8, 16 and 32 s (each with the watch's own 0.1-0.25 s): 7 lists in
        // a minute, where the watch's retries alone make about 240.
        assert!((6..=8).contains(&lists.len()), "{lists:?}");
        let gaps: Vec<Duration> = lists.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(gaps.windows(2).all(|g| g[1] > g[0]), "{gaps:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_scan_waits_for_the_params_and_namespaces_to_list_but_not_for_ever() {
        let mut catch_up = CatchUp::default();
        let behind = Snapshot::default();
        let listed = Snapshot {
            namespaces_listed: true,
            ..Snapshot::default()
        };
        assert!(!catch_up.waits(&listed));
        assert!(catch_up.waits(&behind));
        tokio::time::advance(CATCH_UP - Duration::from_secs(1)).await;
        assert!(catch_up.waits(&behind));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(!catch_up.waits(&behind), "waited long enough: scans anyway");
        assert!(catch_up.waits(&behind), "the next scan waits again");
        assert!(!catch_up.waits(&listed));
    }

    #[tokio::test(start_paused = true)]
    async fn a_scan_is_planned_from_a_ready_snapshot_once_it_has_caught_up_or_waited_long_enough() {
        let store = SnapshotStore::new();
        let mut catch_up = CatchUp::default();
        let (snapshot, published, held) = {
            let settling = settled(&store, &mut catch_up);
            tokio::pin!(settling);
            // Not ready: no scan, however long.
            let waited = tokio::time::timeout(CATCH_UP * 2, &mut settling).await;
            assert!(waited.is_err(), "planned from a snapshot that is not ready");
            // Ready, the namespaces not listed: held back for CATCH_UP, then let through.
            let published = store.publish_policies(Arc::default(), Arc::default(), Arc::default());
            let behind = Instant::now();
            (settling.await, published, behind.elapsed())
        };
        assert_eq!(snapshot.revision, published);
        assert!(!snapshot.caught_up());
        assert!(held >= CATCH_UP && held <= CATCH_UP + POLL * 2, "{held:?}");
        // Caught up: at once.
        store.publish_namespaces(celgate_snapshot::NamespaceView::default());
        let at = Instant::now();
        assert!(settled(&store, &mut catch_up).await.caught_up());
        assert_eq!(at.elapsed(), Duration::ZERO);
    }

    #[test]
    fn objects_of_excluded_namespaces_and_the_excluded_namespaces_themselves_are_skipped() {
        let excluded_ns = ["kube-system".to_string(), "celgate-system".to_string()];
        let maps = stored("configmaps", true);
        assert!(excluded(
            &maps,
            &object(Some("kube-system"), "a"),
            &excluded_ns
        ));
        assert!(!excluded(&maps, &object(Some("team"), "a"), &excluded_ns));
        let namespaces = stored("namespaces", false);
        assert!(excluded(
            &namespaces,
            &object(None, "kube-system"),
            &excluded_ns
        ));
        assert!(excluded(
            &namespaces,
            &object(None, "celgate-system"),
            &excluded_ns
        ));
        assert!(!excluded(&namespaces, &object(None, "team"), &excluded_ns));
        let nodes = stored("nodes", false);
        assert!(!excluded(
            &nodes,
            &object(None, "kube-system"),
            &excluded_ns
        ));
    }
}
