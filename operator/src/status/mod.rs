//! Status of celgate's four kinds, written only by the replica that holds the leader Lease:
//! `observedGeneration`, `typeChecking` (policies), `resolvedParams` (bindings) and the
//! `Ready` and `TypeChecked` conditions, with server-side apply on the status subresource
//! (field manager `celgate`, forced), plus events when compilation, type checking warnings or
//! readiness change.
//!
//! Every pass compares the status each stored object should have with the one it has and
//! writes only the difference, so a pass runs on any change: a watch event of the four kinds,
//! a new snapshot, an applied webhook registration, new schemas, and acquiring the Lease (which
//! writes everything the previous leader left stale). Losing the Lease cancels the pass at once,
//! with its write in flight. Failed writes are retried per object with growing delays.
//!
//! A pass works out first the objects whose spec changed since the last one and those an
//! earlier pass could not decide yet (with the bindings of such a policy and the policy of such
//! a binding), [`MAX_FIRST`] at most (`first.rs`). A pass that has run for [`INTERRUPT_AFTER`]
//! ends early for a new one when another spec changes, or when one of those objects is still
//! undecided and the snapshot or the registration has moved on since: a pass of thousands of
//! writes no longer keeps a newly applied policy's status, nor that of a policy whose params
//! were still syncing when it started, waiting for its end. The new pass goes on from where the interrupted one stopped,
//! and one whole pass follows once it ends.

mod apply;
mod conditions;
mod events;
pub mod exceptions;
mod first;
mod readiness;
mod typecheck;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::marker::PhantomData;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use celgate_crds::{BindingStatus, MutatingAdmissionPolicy, ValidatingAdmissionPolicy};
use celgate_snapshot::{Snapshot, SnapshotStore};
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{Client, Resource, ResourceExt};
use tokio::sync::watch;
use tokio::task::coop;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::controllers::policies::{Controlled, Stores, Watched};
use crate::controllers::policy_set::name_of;
use crate::controllers::spec_changes::SpecChanges;
use crate::controllers::stored_binding::StoredBinding;
use crate::metrics;
use crate::policy_kind::PolicyKind;
use crate::retry::{self, Backoff};
use crate::serving::leader::Leadership;
use crate::serving::registration::Applied;
use celgate_kinds::convert;
use conditions::{READY, Want};
use events::Observed;
use first::{First, MAX_FIRST};
use readiness::Readiness;
pub use typecheck::{Checker, ClusterChecker, Policy};

/// The field manager of every status field celgate writes.
pub const FIELD_MANAGER: &str = "celgate";

/// How long a pass waits for a change before it checks again anyway.
const IDLE: Duration = Duration::from_secs(300);
/// How many status writes (each followed by its events) are in flight at once. One at a time,
/// each write waited out its round trip: 1,000 policies x 5 bindings took 91 s until every
/// policy was Ready and 153 s until every binding had its status (debug build, `make
/// bench-scale-bindings`).
const WRITES_IN_FLIGHT: usize = 8;
/// How long a pass waits after a change for the changes that come with it (a `kubectl apply`
/// of a policy and its binding arrives as two events), so a policy applied with its binding
/// is not reported unbound for a moment.
const COALESCE: Duration = Duration::from_millis(50);
/// How long a pass runs before changed objects may end it early for a new pass that works
/// them out first. A new pass walks every object again (a comparison each, where nothing is
/// to write), so passes are not cut shorter than this however often specs change.
const INTERRUPT_AFTER: Duration = Duration::from_secs(1);

/// What the status is computed from.
pub struct Sources {
    /// The stored policies and bindings of both kinds.
    pub stores: Stores,
    /// The snapshot this process serves.
    pub snapshot: Arc<SnapshotStore>,
    /// What the webhook registration covers.
    pub applied: watch::Receiver<Applied>,
    /// Changes whenever a watch of the four kinds delivers an event.
    pub touched: watch::Receiver<()>,
    /// The objects whose spec changed, to work out first.
    pub spec_changes: Arc<SpecChanges<Watched>>,
}

/// Which of the four kinds an object is, in the order a pass works them out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Kind {
    ValidatingPolicy,
    ValidatingBinding,
    MutatingPolicy,
    MutatingBinding,
}

impl From<Watched> for Kind {
    fn from(watched: Watched) -> Self {
        match watched {
            Watched::Policies => Kind::ValidatingPolicy,
            Watched::Bindings => Kind::ValidatingBinding,
            Watched::MutatingPolicies => Kind::MutatingPolicy,
            Watched::MutatingBindings => Kind::MutatingBinding,
        }
    }
}

/// What an object's status needs.
enum Needs<W> {
    /// This write.
    Write(W),
    /// Nothing: it is current, or a failed write of it waits for its retry.
    Nothing,
    /// Nothing yet: this process has not caught up with the object ([`Readiness::Pending`]).
    Pending,
}

/// The objects a pass worked out first, by kind, which the rest of the pass leaves out.
#[derive(Default)]
struct WorkedOut(HashMap<Kind, BTreeSet<String>>);

impl WorkedOut {
    fn contains(&self, kind: Kind, name: &str) -> bool {
        self.0.get(&kind).is_some_and(|names| names.contains(name))
    }
}

/// How a pass ended.
enum Pass {
    /// Every object was worked out; a failed write is due again at this time.
    Done(Option<Instant>),
    /// It ended early so that a new one works out changed objects first, or it resumed one
    /// that did (so objects it did not work out again may be stale): the next starts at once.
    Unfinished,
}

/// A type checking report of one policy at one uid, generation and schema revision.
struct Checked {
    uid: String,
    generation: i64,
    schemas: u64,
    report: Arc<typecheck::Report>,
}

/// A policy compiled by the status writer because the snapshot does not hold it (unbound).
struct Compiled<C> {
    uid: String,
    generation: i64,
    policy: Arc<C>,
}

/// The status writer's view of one kind: its stored objects in one pass, and its policies
/// compiled while unbound.
struct KindState<P: Reported> {
    unbound: HashMap<String, Compiled<P::Compiled>>,
}

impl<P: Reported> Default for KindState<P> {
    fn default() -> Self {
        Self {
            unbound: HashMap::new(),
        }
    }
}

/// The stored objects of one kind, read once at a pass's start.
struct Objects<P: Reported> {
    /// Policies, sorted by name.
    policies: Vec<Arc<P>>,
    /// Bindings, by name as the store holds them (until the pass takes them to work them out).
    bindings: Vec<Arc<StoredBinding<P>>>,
    /// The policies some stored binding names.
    named_by_bindings: HashSet<String>,
}

impl<P: Reported> Objects<P> {
    fn read(stores: &Stores) -> Self {
        let stored = P::stores(stores);
        let (bindings, named_by_bindings) = stored.bindings.state_and_policies();
        Self {
            policies: sorted(stored.policies.state()),
            named_by_bindings,
            bindings,
        }
    }

    /// Whether an object of `kind` (one of this kind's two) named `name` is stored: found by
    /// name in the sorted lists, not in a set of every name made for the question.
    fn stores(&self, kind: Kind, name: &str) -> bool {
        if kind == P::KINDS.0 {
            named(&self.policies, name).is_some()
        } else {
            binding_named(&self.bindings, name).is_some()
        }
    }
}

/// What the status writer needs of a kind beyond its controller's view: its keys, and where
/// its objects and unbound policies are kept.
trait Reported: Controlled<Binding: apply::Object> + apply::Object {
    /// The keys of its policies and bindings.
    const KINDS: (Kind, Kind);
    /// Its objects in a pass.
    fn objects(world: &World) -> &Objects<Self>;
    /// Its state in the writer.
    fn state(writer: &mut StatusWriter) -> &mut KindState<Self>;
    /// Its policy's status.
    fn status(policy: &Self) -> Option<&celgate_crds::PolicyStatus>;
    /// The stored policy as the type checker takes it.
    fn for_type_checking(&self) -> Policy;
}

impl Reported for ValidatingAdmissionPolicy {
    const KINDS: (Kind, Kind) = (Kind::ValidatingPolicy, Kind::ValidatingBinding);
    fn objects(world: &World) -> &Objects<Self> {
        &world.validating
    }
    fn state(writer: &mut StatusWriter) -> &mut KindState<Self> {
        &mut writer.validating
    }
    fn status(policy: &Self) -> Option<&celgate_crds::PolicyStatus> {
        policy.status.as_ref()
    }
    fn for_type_checking(&self) -> Policy {
        Policy::Validating(convert::validating_policy(self))
    }
}

impl Reported for MutatingAdmissionPolicy {
    const KINDS: (Kind, Kind) = (Kind::MutatingPolicy, Kind::MutatingBinding);
    fn objects(world: &World) -> &Objects<Self> {
        &world.mutating
    }
    fn state(writer: &mut StatusWriter) -> &mut KindState<Self> {
        &mut writer.mutating
    }
    fn status(policy: &Self) -> Option<&celgate_crds::PolicyStatus> {
        policy.status.as_ref()
    }
    fn for_type_checking(&self) -> Policy {
        Policy::Mutating(convert::mutating_policy(self))
    }
}

/// A status write that failed, retried after a delay.
struct Retry {
    backoff: Backoff,
    at: Instant,
}

/// The status writer.
pub struct StatusWriter {
    client: Client,
    sources: Sources,
    checker: Arc<dyn Checker>,
    schemas: watch::Receiver<u64>,
    events: Arc<events::Publisher>,
    checked: HashMap<(Kind, String), Checked>,
    validating: KindState<ValidatingAdmissionPolicy>,
    mutating: KindState<MutatingAdmissionPolicy>,
    retries: HashMap<(Kind, String), Retry>,
    /// The snapshot parts the last pass read.
    seen: Option<Arc<Snapshot>>,
    /// Changes with every object whose spec changed.
    changed: watch::Receiver<()>,
    /// The objects whose spec changed or that a pass could not decide yet, to work out first.
    first: First,
    /// Where an interrupted pass stopped: the next pass goes on from there after the objects
    /// it works out first, rather than comparing again every object before it.
    resume: Option<(Kind, String)>,
}

/// The inputs of one pass, read once at its start.
struct World {
    snapshot: Arc<Snapshot>,
    applied: Applied,
    validating: Objects<ValidatingAdmissionPolicy>,
    mutating: Objects<MutatingAdmissionPolicy>,
    schemas: u64,
}

impl World {
    /// Whether the object `name` of `kind` is stored.
    fn stores(&self, kind: Kind, name: &str) -> bool {
        match kind {
            Kind::ValidatingPolicy | Kind::ValidatingBinding => self.validating.stores(kind, name),
            Kind::MutatingPolicy | Kind::MutatingBinding => self.mutating.stores(kind, name),
        }
    }
}

fn sorted<K: ResourceExt>(mut objects: Vec<Arc<K>>) -> Vec<Arc<K>> {
    objects.sort_unstable_by(|a, b| name_of(a.as_ref()).cmp(name_of(b.as_ref())));
    objects
}

/// The binding named `name` in `bindings`, in name order as the store gives them.
fn binding_named<'b, P: PolicyKind>(
    bindings: &'b [Arc<StoredBinding<P>>],
    name: &str,
) -> Option<&'b Arc<StoredBinding<P>>> {
    bindings
        .binary_search_by(|b| b.name().cmp(name))
        .ok()
        .and_then(|i| bindings.get(i))
}

/// The object named `name` in `objects`, sorted by name ([`sorted`]): a binary search, as every
/// binding of a pass looks its policy up.
fn named<'o, K: Resource>(objects: &'o [Arc<K>], name: &str) -> Option<&'o Arc<K>> {
    objects
        .binary_search_by(|o| name_of(o.as_ref()).cmp(name))
        .ok()
        .and_then(|i| objects.get(i))
}

fn uid_and_generation<K: Resource>(object: &K) -> (String, i64) {
    (
        object.meta().uid.clone().unwrap_or_default(),
        object.meta().generation.unwrap_or_default(),
    )
}

/// The named policy's stored uid and generation with its readiness, as the binding rules
/// take them; `None` when no such policy is stored.
fn policy_state(
    ids: Option<&(String, i64)>,
    readiness: Option<Readiness>,
) -> Option<(&str, i64, Readiness)> {
    ids.zip(readiness)
        .map(|((uid, generation), r)| (uid.as_str(), *generation, r))
}

/// `Ready` as a condition to write, or `None` while pending.
fn ready_want(readiness: &Readiness) -> Option<Want> {
    match readiness {
        Readiness::Pending => None,
        Readiness::Ready(message) => Some(Want {
            type_: READY,
            status: true,
            reason: readiness::ENFORCED,
            message: message.clone(),
        }),
        Readiness::NotReady { reason, message } => Some(Want {
            type_: READY,
            status: false,
            reason,
            message: message.clone(),
        }),
    }
}

impl StatusWriter {
    /// A writer over `sources`, type checking with `checker`, publishing events as `instance`
    /// of the `celgate` controller.
    pub fn new(
        client: Client,
        sources: Sources,
        checker: Arc<dyn Checker>,
        instance: String,
    ) -> Self {
        let events = Arc::new(events::Publisher::new(
            client.clone(),
            FIELD_MANAGER,
            instance,
        ));
        Self {
            schemas: checker.revisions(),
            changed: sources.spec_changes.subscribe(),
            first: First::default(),
            resume: None,
            client,
            sources,
            checker,
            events,
            checked: HashMap::new(),
            validating: KindState::default(),
            mutating: KindState::default(),
            retries: HashMap::new(),
            seen: None,
        }
    }

    /// Writes status while `leadership` says this replica leads, until the process stops.
    pub async fn run(mut self, mut leadership: Leadership) {
        loop {
            if leadership.wait_for(|leading| *leading).await.is_err() {
                return;
            }
            info!("leading: writing the status of every policy and binding that is stale");
            tokio::select! {
                biased;
                lost = leadership.wait_for(|leading| !*leading) => {
                    if lost.is_err() {
                        return;
                    }
                    info!("no longer leading: status writes stopped");
                    // Whatever was retried, held to work out first or left where a pass
                    // stopped belongs to the next term, whose first pass compares everything.
                    self.retries.clear();
                    self.first.clear();
                    self.resume = None;
                }
                () = self.lead() => return,
            }
        }
    }

    /// Passes, each after a change, for as long as the future is polled.
    async fn lead(&mut self) {
        self.seen = None;
        loop {
            match self.pass().await {
                Pass::Done(retry_at) => {
                    if self.wait_for_change(retry_at).await {
                        tokio::time::sleep(COALESCE).await;
                    }
                }
                Pass::Unfinished => tokio::time::sleep(COALESCE).await,
            }
        }
    }

    /// Waits until an input changes (true) or the earliest retry is due (false).
    async fn wait_for_change(&mut self, retry_at: Option<Instant>) -> bool {
        let seen = self.seen.clone();
        let store = self.sources.snapshot.clone();
        let snapshot_changed = async move {
            loop {
                let deadline = Instant::now() + IDLE;
                let now = store
                    .wait_until(deadline, |s| match &seen {
                        None => true,
                        Some(seen) => {
                            s.ready != seen.ready
                                || !Arc::ptr_eq(&s.policies, &seen.policies)
                                || !Arc::ptr_eq(&s.params, &seen.params)
                        }
                    })
                    .await;
                if seen
                    .as_ref()
                    .is_none_or(|seen| now.revision != seen.revision)
                {
                    return;
                }
            }
        };
        let retry = async {
            match retry_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        // A closed channel never changes again: its branch is left out.
        let touched = self.sources.touched.has_changed().is_ok();
        let applied = self.sources.applied.has_changed().is_ok();
        let schemas = self.schemas.has_changed().is_ok();
        tokio::select! {
            () = snapshot_changed => true,
            () = retry => false,
            changed = self.sources.touched.changed(), if touched => changed.is_ok(),
            changed = self.sources.applied.changed(), if applied => changed.is_ok(),
            changed = self.schemas.changed(), if schemas => changed.is_ok(),
            () = tokio::time::sleep(IDLE) => false,
        }
    }

    /// Reads the inputs once, and takes the objects whose spec changed since.
    fn world(&mut self) -> World {
        self.sources.touched.borrow_and_update();
        self.changed.borrow_and_update();
        for (watched, name) in self.sources.spec_changes.take() {
            self.first.note(watched.into(), name);
        }
        World {
            snapshot: self.sources.snapshot.load(),
            applied: self.sources.applied.borrow_and_update().clone(),
            validating: Objects::read(&self.sources.stores),
            mutating: Objects::read(&self.sources.stores),
            schemas: *self.schemas.borrow_and_update(),
        }
    }

    /// Brings every stored object's status up to date, the changed ones first, unless it is
    /// interrupted ([`StatusWriter::interrupted`]).
    async fn pass(&mut self) -> Pass {
        let started = Instant::now();
        let resume = self.resume.take();
        let mut world = self.world();
        self.seen = Some(world.snapshot.clone());
        if !world.snapshot.ready {
            debug!("no policy set is published yet; no status is written before it");
            return Pass::Done(None);
        }
        self.forget(&world);
        let mut first = WorkedOut::default();
        self.first::<ValidatingAdmissionPolicy>(&world, &mut first)
            .await;
        self.first::<MutatingAdmissionPolicy>(&world, &mut first)
            .await;
        let bindings = std::mem::take(&mut world.validating.bindings);
        let from = resume.as_ref().map(|(kind, name)| (*kind, name.as_str()));
        let validating = self
            .kind::<ValidatingAdmissionPolicy>(&world, bindings, &first, from, started)
            .await;
        let bindings = std::mem::take(&mut world.mutating.bindings);
        if validating.is_break()
            || (self.kind::<MutatingAdmissionPolicy>(&world, bindings, &first, from, started))
                .await
                .is_break()
        {
            debug!(
                first = self.first.len(),
                "a pass ends early: the next works out first the objects changed or pending"
            );
            return Pass::Unfinished;
        }
        if resume.is_some() {
            return Pass::Unfinished;
        }
        Pass::Done(self.retries.values().map(|r| r.at).min())
    }

    /// Whether the pass that started at `started` on `world` ends now for a new one: once it
    /// has run [`INTERRUPT_AFTER`], when a spec changed since it started, or when an object
    /// to work out first was pending and the snapshot or the webhook registration has moved on.
    fn interrupted(&self, world: &World, started: Instant) -> bool {
        started.elapsed() >= INTERRUPT_AFTER
            && (self.changed.has_changed().unwrap_or(false)
                || (!self.first.is_empty()
                    && (self.sources.applied.has_changed().unwrap_or(false)
                        || self.sources.snapshot.load().revision != world.snapshot.revision)))
    }

    /// Works out first the objects of kind `P` whose spec changed or that were pending, with the
    /// bindings of each such policy and the policy of each such binding (their statuses read
    /// each other), policies before bindings; records them in `worked_out`.
    async fn first<P: Reported>(&mut self, world: &World, worked_out: &mut WorkedOut) {
        let (policy_kind, binding_kind) = P::KINDS;
        let objects = P::objects(world);
        let stored = &P::stores(&self.sources.stores).bindings;
        let (mut policies, mut bindings) = (BTreeSet::new(), BTreeSet::new());
        for (kind, name) in self.first.keys() {
            if *kind == policy_kind {
                policies.insert(name.clone());
                bindings.extend(stored.naming(name, MAX_FIRST.saturating_sub(bindings.len())));
            } else if *kind == binding_kind {
                bindings.insert(name.clone());
                if let Some(binding) = binding_named(&objects.bindings, name) {
                    policies.insert(binding.policy_name().to_string());
                }
            }
        }
        if policies.is_empty() && bindings.is_empty() {
            return;
        }
        let mut in_flight = InFlight::new();
        for name in &policies {
            let needs = match named(&objects.policies, name) {
                Some(policy) => self.policy::<P>(policy, world).await,
                None => Needs::Nothing,
            };
            self.attempted(policy_kind, name, &needs);
            if let Needs::Write(write) = needs {
                self.send(&mut in_flight, write).await;
            }
        }
        self.settle::<P>(&mut in_flight).await;
        let mut readiness = HashMap::new();
        for name in &bindings {
            let needs = match binding_named(&objects.bindings, name) {
                Some(binding) => self.binding::<P>(binding, world, &mut readiness),
                None => Needs::Nothing,
            };
            self.attempted(binding_kind, name, &needs);
            if let Needs::Write(write) = needs {
                self.send(&mut in_flight, write).await;
            }
        }
        self.settle::<P::Binding>(&mut in_flight).await;
        worked_out.0.insert(policy_kind, policies);
        worked_out.0.insert(binding_kind, bindings);
    }

    /// Records an object a pass could not decide yet (a policy whose param kind is still
    /// syncing, say): it is worked out first once the snapshot or the registration moves on,
    /// not at the end of a long pass.
    fn pending(&mut self, kind: Kind, name: &str) {
        self.first.note(kind, name.to_string());
    }

    /// Counts a pass that worked out an object first: it stays first while pending.
    fn attempted<W>(&mut self, kind: Kind, name: &str, needs: &Needs<W>) {
        (self.first).attempted(kind, name, matches!(needs, Needs::Pending));
    }

    /// Brings the status of every stored object of one kind up to date. A pass over thousands
    /// of objects whose status is current writes nothing and so never waits: each object
    /// spends from the task's cooperative budget, so the pass yields its worker now and then
    /// to the reconcilers and the webhook instead of holding it to the end.
    /// Writes go out as they are worked out, [`WRITES_IN_FLIGHT`] at a time (so a pass over
    /// 100,000 holds only those statuses); the policies' before the bindings'. Each of
    /// `bindings` (the pass's, taken out of `world`) is let go once its write is worked out: a
    /// written binding comes back as a watch event that stores it again, and a pass holding
    /// every binding it read held the old one of each until it ended (`make bench-footprint`,
    /// 1,000 policies x 100 bindings: the status step's high-water mark 1,026 -> 902 bytes a
    /// binding).
    /// The objects `first` holds were worked out already and are left out, and so are those
    /// before `from` (where an interrupted pass stopped).
    async fn kind<P: Reported>(
        &mut self,
        world: &World,
        bindings: Vec<Arc<StoredBinding<P>>>,
        first: &WorkedOut,
        from: Option<(Kind, &str)>,
        started: Instant,
    ) -> ControlFlow<()> {
        let (policy_kind, binding_kind) = P::KINDS;
        let before = |kind: Kind, name: &str| from.is_some_and(|from| (kind, name) < from);
        let objects = P::objects(world);
        // The objects before `from` are found in the name-sorted lists, not passed one by one
        // (a pass resumed at 1,000 x 100 passed up to 100,000 of them, each one a comparison
        // and an interruption check).
        let policies = &objects.policies
            [(objects.policies).partition_point(|p| before(policy_kind, name_of(p.as_ref())))..];
        let resumed_at = bindings.partition_point(|b| before(binding_kind, b.name()));
        let mut in_flight = InFlight::new();
        for policy in policies {
            coop::consume_budget().await;
            let name = name_of(policy.as_ref());
            if self.interrupted(world, started) {
                self.resume = Some((policy_kind, name.to_string()));
                self.settle::<P>(&mut in_flight).await;
                return ControlFlow::Break(());
            }
            if first.contains(policy_kind, name) {
                continue;
            }
            match self.policy::<P>(policy, world).await {
                Needs::Write(write) => self.send(&mut in_flight, write).await,
                Needs::Pending => self.pending(policy_kind, name),
                Needs::Nothing => {}
            }
        }
        self.settle::<P>(&mut in_flight).await;
        let mut policies = HashMap::new();
        for binding in bindings.into_iter().skip(resumed_at) {
            coop::consume_budget().await;
            if self.interrupted(world, started) {
                self.resume = Some((binding_kind, binding.name().to_string()));
                self.settle::<P::Binding>(&mut in_flight).await;
                return ControlFlow::Break(());
            }
            if first.contains(binding_kind, binding.name()) {
                continue;
            }
            match self.binding::<P>(&binding, world, &mut policies) {
                Needs::Write(write) => self.send(&mut in_flight, write).await,
                Needs::Pending => self.pending(binding_kind, binding.name()),
                Needs::Nothing => {}
            }
        }
        self.settle::<P::Binding>(&mut in_flight).await;
        ControlFlow::Continue(())
    }

    /// Forgets what belongs to objects no longer stored.
    fn forget(&mut self, world: &World) {
        let stored = |(kind, name): &(Kind, String)| world.stores(*kind, name);
        self.checked.retain(|key, _| stored(key));
        self.retries.retain(|key, _| stored(key));
        self.validating
            .unbound
            .retain(|name, _| world.validating.stores(Kind::ValidatingPolicy, name));
        self.mutating
            .unbound
            .retain(|name, _| world.mutating.stores(Kind::MutatingPolicy, name));
    }

    /// Whether a failed write of this object waits for its retry.
    fn waiting(&self, key: &(Kind, String)) -> bool {
        self.retries.get(key).is_some_and(|r| r.at > Instant::now())
    }

    /// The type checking report of a policy at its uid and generation and the current schemas.
    async fn report(
        &mut self,
        key: &(Kind, String),
        uid: &str,
        generation: i64,
        schemas: u64,
        policy: impl FnOnce() -> Policy,
    ) -> Arc<typecheck::Report> {
        if let Some(c) = self.checked.get(key)
            && c.uid == uid
            && c.generation == generation
            && c.schemas == schemas
        {
            return c.report.clone();
        }
        let report = self.checker.check(policy()).await;
        self.checked.insert(
            key.clone(),
            Checked {
                uid: uid.to_string(),
                generation,
                schemas,
                report: report.clone(),
            },
        );
        report
    }

    /// The compiled form of a policy the snapshot does not hold.
    fn unbound<P: Reported>(&mut self, policy: &P) -> Arc<P::Compiled> {
        let (uid, generation) = uid_and_generation(policy);
        let name = policy.name_any();
        let unbound = &mut P::state(self).unbound;
        if let Some(c) = unbound.get(&name)
            && c.uid == uid
            && c.generation == generation
        {
            return c.policy.clone();
        }
        let compiled = Arc::new(policy.compile());
        unbound.insert(
            name,
            Compiled {
                uid,
                generation,
                policy: compiled.clone(),
            },
        );
        compiled
    }

    fn readiness<P: Reported>(&mut self, policy: &P, world: &World) -> Readiness {
        let (uid, generation) = uid_and_generation(policy);
        let name = policy.name_any();
        let has_bindings = P::objects(world).named_by_bindings.contains(&name);
        readiness::policy::<P>(
            &name,
            &uid,
            generation,
            &world.snapshot,
            &world.applied,
            || policy.rule_errors(),
            || P::compile_errors(&self.unbound(policy)),
            has_bindings,
        )
    }

    /// The write a policy's status needs, if any.
    async fn policy<P: Reported>(
        &mut self,
        policy: &Arc<P>,
        world: &World,
    ) -> Needs<Write<P, celgate_crds::PolicyStatus>> {
        let key = (P::KINDS.0, policy.name_any());
        if self.waiting(&key) {
            return Needs::Nothing;
        }
        let readiness = self.readiness(&**policy, world);
        let Some(ready) = ready_want(&readiness) else {
            return Needs::Pending;
        };
        let (uid, generation) = uid_and_generation(&**policy);
        let report = self
            .report(&key, &uid, generation, world.schemas, || {
                policy.for_type_checking()
            })
            .await;
        let previous = P::status(policy);
        let status = typecheck::policy_status(generation, &report, ready, previous);
        if previous == Some(&status) {
            return Needs::Nothing;
        }
        let events = events::changes(
            &Observed::policy(previous, true),
            &Observed::policy(Some(&status), true),
        );
        Needs::Write(Write {
            key,
            object: policy.object_ref(&()),
            status,
            events,
            kind: PhantomData,
        })
    }

    /// The write a binding's status needs, if any. `policies` holds the readiness of the
    /// policies this pass's bindings named so far, worked out once per policy and pass.
    fn binding<P: Reported>(
        &mut self,
        binding: &StoredBinding<P>,
        world: &World,
        policies: &mut HashMap<String, Readiness>,
    ) -> Needs<Write<P::Binding, BindingStatus>> {
        let key = (P::KINDS.1, binding.name().to_string());
        if self.waiting(&key) {
            return Needs::Nothing;
        }
        let spec = &*binding.spec;
        let policy_name = binding.policy_name();
        let policy = named(&P::objects(world).policies, policy_name).cloned();
        let policy_readiness = policy.as_ref().map(|p| match policies.get(policy_name) {
            Some(readiness) => readiness.clone(),
            None => {
                let readiness = self.readiness(&**p, world);
                policies.insert(policy_name.to_string(), readiness.clone());
                readiness
            }
        });
        let policy_ids = policy.as_ref().map(|p| uid_and_generation(&**p));
        let readiness = readiness::binding::<P>(
            spec,
            policy_state(policy_ids.as_ref(), policy_readiness),
            &world.snapshot,
            &world.applied,
        );
        let param_kind = policy.as_ref().and_then(|p| p.param_kind());
        let param_ref = P::param_ref(spec);
        binding_status(key, binding, readiness, world, param_kind, param_ref)
    }

    /// Starts `write` (its status applied, then its events published) once fewer than
    /// [`WRITES_IN_FLIGHT`] are in flight, recording the outcomes of those that end meanwhile.
    /// Where a pass waited for a batch of writes to end before it started the next, the last
    /// writes of each batch went out with fewer in flight.
    async fn send<K, S>(&mut self, in_flight: &mut InFlight, write: Write<K, S>)
    where
        K: apply::Object + Send + 'static,
        S: serde::Serialize + Send + Sync + 'static,
    {
        while in_flight.len() >= WRITES_IN_FLIGHT {
            if let Some((key, result)) = in_flight.next().await {
                self.written::<K>(key, result);
            }
        }
        let (client, publisher) = (self.client.clone(), self.events.clone());
        in_flight.push(Box::pin(async move {
            metrics::reconciled(metrics::STATUS);
            let result = apply::status::<K, S>(&client, &write.key.1, &write.status).await;
            if result.is_ok() {
                events::publish(&publisher, &write.object, &write.events).await;
            }
            (write.key, result)
        }));
    }

    /// Waits until the writes in flight (of objects of kind `K`) end, recording each outcome.
    async fn settle<K: apply::Object>(&mut self, in_flight: &mut InFlight) {
        while let Some((key, result)) = in_flight.next().await {
            self.written::<K>(key, result);
        }
    }

    /// Records the outcome of a status write.
    fn written<K: apply::Object>(&mut self, key: (Kind, String), result: Result<(), kube::Error>) {
        match result {
            Ok(()) => {
                debug!(kind = %K::kind(&()), name = %key.1, "status written");
                self.retries.remove(&key);
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                debug!(kind = %K::kind(&()), name = %key.1, "object deleted before its status was written");
                self.retries.remove(&key);
            }
            Err(error) => {
                metrics::reconcile_failed(metrics::STATUS);
                let retry = self.retries.entry(key.clone()).or_insert_with(|| Retry {
                    backoff: Backoff::new(retry::WRITE),
                    at: Instant::now(),
                });
                let delay = retry.backoff.next_delay();
                retry.at = Instant::now() + delay;
                warn!(%error, kind = %K::kind(&()), name = %key.1, retry_in_s = delay.as_secs_f64(), "cannot write status");
            }
        }
    }
}

/// The status writes in flight, each ending with its object's key and its outcome.
type InFlight = FuturesUnordered<BoxFuture<'static, ((Kind, String), Result<(), kube::Error>)>>;

/// A status to write to the object of kind `K` named by its key, with the events that describe
/// its change.
struct Write<K, S> {
    key: (Kind, String),
    /// The object the events are about.
    object: ObjectReference,
    status: S,
    events: Vec<events::Event>,
    kind: PhantomData<K>,
}

/// The write of a binding's status (its params counted from the snapshot), if it changed.
fn binding_status<P: PolicyKind>(
    key: (Kind, String),
    binding: &StoredBinding<P>,
    readiness: Readiness,
    world: &World,
    param_kind: Option<&celgate_crds::ParamKind>,
    param_ref: Option<&celgate_engine::model::ParamRef>,
) -> Needs<Write<P::Binding, BindingStatus>> {
    let Some(ready) = ready_want(&readiness) else {
        return Needs::Pending;
    };
    let param_kind = param_kind.map(convert::param_kind);
    let resolved_params =
        readiness::resolved_params(&world.snapshot, param_kind.as_ref(), param_ref);
    let generation = binding.generation;
    // `status.audit` is the audit's (its own field manager): left out of this write and
    // of the comparison (and of the stored binding).
    let previous = binding.status();
    let previous = previous.as_ref();
    let status = BindingStatus {
        observed_generation: Some(generation),
        resolved_params,
        conditions: Some(conditions::merge(
            &[ready],
            generation,
            previous.and_then(|s| s.conditions.as_deref()),
            &conditions::now(),
        )),
        audit: None,
    };
    if previous == Some(&status) {
        return Needs::Nothing;
    }
    let events = events::changes(
        &Observed::binding(previous),
        &Observed::binding(Some(&status)),
    );
    let object = ObjectReference {
        api_version: Some(P::Binding::api_version(&()).into_owned()),
        kind: Some(P::Binding::kind(&()).into_owned()),
        name: Some(key.1.clone()),
        uid: Some(binding.uid.clone()),
        ..ObjectReference::default()
    };
    Needs::Write(Write {
        key,
        object,
        status,
        events,
        kind: PhantomData,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use crate::controllers::policies::KindStores;
    use crate::controllers::policy_set;
    use crate::controllers::stored_binding::{self, BindingStore, BindingWriter};
    use crate::fixtures::{self, ApiServer, Call};
    use celgate_engine::schema::Gvk;
    use celgate_engine::typecheck::{ExpressionWarning, TypeCheckReport};
    use celgate_engine::{BoundPolicy, PolicySet};
    use http::Method;
    use kube::runtime::reflector::Store;
    use kube::runtime::reflector::{self, store::Writer};
    use kube::runtime::watcher::Event;
    use serde_json::{Value, json};
    use std::collections::VecDeque;

    const POLICY_STATUS: &str =
        "/apis/admission.celgate.io/v1/validatingadmissionpolicies/p/status";
    const BINDING_STATUS: &str =
        "/apis/admission.celgate.io/v1/validatingadmissionpolicybindings/b/status";
    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
    const WARNING: &str = "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas > 1\n | ......^\n";

    /// A checker that reports one upstream warning for every policy.
    struct Fixed(watch::Sender<u64>);

    impl Checker for Fixed {
        fn revisions(&self) -> watch::Receiver<u64> {
            self.0.subscribe()
        }

        fn check(&self, _: Policy) -> futures::future::BoxFuture<'_, Arc<TypeCheckReport>> {
            let gvk = Gvk::new("apps", "v1", "Deployment");
            Box::pin(std::future::ready(Arc::new(TypeCheckReport {
                expression_warnings: vec![ExpressionWarning {
                    field_ref: "spec.validations[0].expression".into(),
                    warning: WARNING.into(),
                }],
                additional_warnings: Vec::new(),
                checked: vec![gvk],
                skipped: Vec::new(),
            })))
        }
    }

    fn stored<K>(objects: &[K]) -> (Store<K>, Writer<K>)
    where
        K: Resource<DynamicType = ()> + Clone + 'static,
    {
        let (reader, mut writer) = reflector::store();
        writer.apply_watcher_event(&Event::Init);
        for object in objects {
            writer.apply_watcher_event(&Event::InitApply(object.clone()));
        }
        writer.apply_watcher_event(&Event::InitDone);
        (reader, writer)
    }

    fn stored_bindings<P: PolicyKind>(
        objects: &[P::Binding],
    ) -> (BindingStore<P>, BindingWriter<P>) {
        let (reader, mut writer) = stored_binding::store();
        writer.apply_watcher_event(&Event::Init);
        for object in objects {
            writer.apply_watcher_event(&Event::InitApply(object.clone()));
        }
        writer.apply_watcher_event(&Event::InitDone);
        (reader, writer)
    }

    #[test]
    fn a_stored_object_is_found_by_name_and_kind_in_the_sorted_lists() {
        let policies = [
            fixtures::policy("q", 1, "true", None),
            fixtures::policy("p", 1, "true", None),
        ];
        let bindings: Vec<_> = (["c", "b2", "b1"].iter())
            .map(|name| fixtures::binding(name, "p"))
            .collect();
        let (policies, _w1) = stored(&policies);
        let (bindings, _w2) = stored_bindings::<ValidatingAdmissionPolicy>(&bindings);
        let (mutating, _w3) = stored::<MutatingAdmissionPolicy>(&[]);
        let (mutating_bindings, _w4) = stored_bindings::<MutatingAdmissionPolicy>(&[]);
        let stores = Stores {
            validating: KindStores { policies, bindings },
            mutating: KindStores {
                policies: mutating,
                bindings: mutating_bindings,
            },
        };
        let objects = Objects::<ValidatingAdmissionPolicy>::read(&stores);
        let found = |kind, name| objects.stores(kind, name);
        assert!(found(Kind::ValidatingPolicy, "p") && found(Kind::ValidatingPolicy, "q"));
        assert!(
            ["b1", "b2", "c"]
                .iter()
                .all(|b| found(Kind::ValidatingBinding, b))
        );
        assert!(!found(Kind::ValidatingPolicy, "b1") && !found(Kind::ValidatingBinding, "p"));
        assert!(!found(Kind::ValidatingPolicy, "r") && !found(Kind::ValidatingBinding, "b3"));
        assert_eq!(objects.named_by_bindings, HashSet::from(["p".to_string()]));
    }

    /// A status writer over policy `p` bound by `b` (both published and registered), with
    /// the statuses given, led as `leading` says.
    struct Running {
        api: ApiServer,
        leading: watch::Sender<bool>,
        cluster: Cluster,
        _keep: Box<dyn std::any::Any + Send>,
    }

    /// What the writer reads, as the watches, the controllers and the registration feed it.
    struct Cluster {
        policies: Writer<ValidatingAdmissionPolicy>,
        bindings: BindingWriter<ValidatingAdmissionPolicy>,
        snapshot: Arc<SnapshotStore>,
        applied: watch::Sender<Applied>,
        changes: Arc<SpecChanges<Watched>>,
    }

    impl Cluster {
        /// Stores `policy` and `binding`, as their watch events do.
        fn store(
            &mut self,
            policy: &ValidatingAdmissionPolicy,
            binding: &celgate_crds::ValidatingAdmissionPolicyBinding,
        ) {
            (self.policies).apply_watcher_event(&Event::Apply(policy.clone()));
            (self.bindings).apply_watcher_event(&Event::Apply(binding.clone()));
        }

        /// Publishes and registers `policies`, each bound by its bindings.
        fn publish(
            &self,
            policies: &[(
                &ValidatingAdmissionPolicy,
                &[celgate_crds::ValidatingAdmissionPolicyBinding],
            )],
        ) {
            let set = Arc::new(PolicySet::new(
                (policies.iter())
                    .map(|(policy, bindings)| BoundPolicy {
                        policy: policy_set::compile(*policy),
                        bindings: (bindings.iter())
                            .map(|b| Arc::new(convert::validating_binding(b)))
                            .collect(),
                    })
                    .collect(),
                Vec::new(),
            ));
            (self.snapshot).publish_policies(set.clone(), Arc::default(), Arc::default());
            self.applied.send_replace(Applied {
                set: Some(set),
                error: None,
            });
        }
    }

    fn start(
        policy: ValidatingAdmissionPolicy,
        binding: celgate_crds::ValidatingAdmissionPolicyBinding,
        leading: bool,
    ) -> Running {
        start_bound(policy, vec![binding], leading)
    }

    /// [`start`] with the policy bound by each of `bindings`.
    fn start_bound(
        policy: ValidatingAdmissionPolicy,
        bindings: Vec<celgate_crds::ValidatingAdmissionPolicyBinding>,
        leading: bool,
    ) -> Running {
        let (client, api) = fixtures::pair();
        let snapshot = SnapshotStore::new();
        let (applied_sender, applied) = watch::channel(Applied::default());
        let (touched_sender, touched) = watch::channel(());
        let spec_changes = Arc::new(SpecChanges::<Watched>::default());
        let (validating, w1) = stored(std::slice::from_ref(&policy));
        let (validating_bindings, w2) = stored_bindings::<ValidatingAdmissionPolicy>(&bindings);
        let (mutating, w3) = stored::<MutatingAdmissionPolicy>(&[]);
        let (mutating_bindings, w4) = stored_bindings::<MutatingAdmissionPolicy>(&[]);
        let (schemas, _) = watch::channel(0);
        let writer = StatusWriter::new(
            client,
            Sources {
                stores: Stores {
                    validating: KindStores {
                        policies: validating,
                        bindings: validating_bindings,
                    },
                    mutating: KindStores {
                        policies: mutating,
                        bindings: mutating_bindings,
                    },
                },
                snapshot: snapshot.clone(),
                applied,
                touched,
                spec_changes: spec_changes.clone(),
            },
            Arc::new(Fixed(schemas)),
            "test".into(),
        );
        let cluster = Cluster {
            policies: w1,
            bindings: w2,
            snapshot,
            applied: applied_sender,
            changes: spec_changes,
        };
        cluster.publish(&[(&policy, &bindings)]);
        let (leading_sender, leadership) = watch::channel(leading);
        let task = tokio::spawn(writer.run(leadership));
        Running {
            api,
            leading: leading_sender,
            cluster,
            _keep: Box::new((w3, w4, touched_sender, AbortOnDrop(task))),
        }
    }

    struct AbortOnDrop(tokio::task::JoinHandle<()>);

    impl Drop for AbortOnDrop {
        fn drop(&mut self) {
            self.0.abort();
        }
    }

    /// Sets every `lastTransitionTime` in `body` to a fixed value after checking it is an
    /// RFC 3339 time of whole seconds.
    fn fixed_times(mut body: Value) -> Value {
        for c in body["status"]["conditions"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            let t = c["lastTransitionTime"].as_str().unwrap();
            assert!(t.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "{t}");
            assert!(t.ends_with('Z') && !t.contains('.'), "{t}");
            c["lastTransitionTime"] = "T".into();
        }
        body
    }

    /// The next call, which must be a status apply to `path`, answered with the object.
    async fn status_apply(api: &mut ApiServer, path: &str) -> Value {
        let call = api.next().await;
        assert_eq!((&call.method, call.path.as_str()), (&Method::PATCH, path));
        assert!(
            call.query.contains("fieldManager=celgate"),
            "{}",
            call.query
        );
        assert!(call.query.contains("force=true"), "{}", call.query);
        let body = call.body.clone();
        answer(call);
        body
    }

    /// Answers a status apply with the object it makes (an empty spec stands for the stored one).
    fn answer(call: Call) {
        let mut object = call.body.clone();
        object["spec"] = json!({});
        call.reply(200, object);
    }

    /// Answers the events that follow a write; returns their reasons.
    async fn events(api: &mut ApiServer, count: usize) -> Vec<String> {
        let mut reasons = Vec::new();
        for _ in 0..count {
            let call: Call = api.next().await;
            assert_eq!(
                (&call.method, call.path.as_str()),
                (&Method::POST, EVENTS),
                "{reasons:?}"
            );
            reasons.push(call.body["reason"].as_str().unwrap().to_string());
            let body = call.body.clone();
            call.reply(201, body);
        }
        reasons
    }

    fn with_status<K: serde::de::DeserializeOwned>(object: Value, body: &Value) -> K {
        let mut object = object;
        object["status"] = body["status"].clone();
        serde_json::from_value(object).unwrap()
    }

    async fn idle(api: &mut ApiServer) -> bool {
        tokio::time::timeout(Duration::from_secs(3600), api.next())
            .await
            .is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn the_leader_applies_each_status_once_with_the_exact_body_and_events() {
        let scenario = async {
            let policy = fixtures::policy_json("p", 1, "object.replicas > 1", None);
            let binding = fixtures::binding_json("b", "p");
            let mut running = start(
                serde_json::from_value(policy.clone()).unwrap(),
                serde_json::from_value(binding.clone()).unwrap(),
                true,
            );
            let api = &mut running.api;
            let written = status_apply(api, POLICY_STATUS).await;
            assert_eq!(
                fixed_times(written.clone()),
                json!({
                    "apiVersion": "admission.celgate.io/v1",
                    "kind": "ValidatingAdmissionPolicy",
                    "metadata": {"name": "p"},
                    "status": {
                        "observedGeneration": 1,
                        "typeChecking": {
                            "expressionWarnings": [{
                                "fieldRef": "spec.validations[0].expression",
                                "warning": WARNING,
                            }],
                            "warningCount": 1,
                        },
                        "conditions": [
                            {"type": "Ready", "status": "True", "reason": "Enforced",
                             "message": "generation 1 is compiled and enforced through 1 binding(s)",
                             "observedGeneration": 1, "lastTransitionTime": "T"},
                            {"type": "TypeChecked", "status": "True", "reason": "Checked",
                             "message": "checked 1 kind: apps/v1, Kind=Deployment",
                             "observedGeneration": 1, "lastTransitionTime": "T"},
                        ],
                    },
                })
            );
            assert_eq!(
                events(api, 3).await,
                ["Compiled", "TypeCheckWarnings", "Ready"]
            );
            let written_binding = status_apply(api, BINDING_STATUS).await;
            assert_eq!(
                fixed_times(written_binding.clone()),
                json!({
                    "apiVersion": "admission.celgate.io/v1",
                    "kind": "ValidatingAdmissionPolicyBinding",
                    "metadata": {"name": "b"},
                    "status": {
                        "observedGeneration": 1,
                        "conditions": [
                            {"type": "Ready", "status": "True", "reason": "Enforced",
                             "message": "enforced with policy 'p' generation 1",
                             "observedGeneration": 1, "lastTransitionTime": "T"},
                        ],
                    },
                })
            );
            assert_eq!(events(api, 1).await, ["Ready"]);
            drop(running);

            // A writer whose objects already carry those statuses writes nothing, and
            // publishes no event.
            let mut again = start(
                with_status(policy, &written),
                with_status(binding, &written_binding),
                true,
            );
            assert!(
                idle(&mut again.api).await,
                "an unchanged status was written again"
            );
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_that_does_not_lead_writes_nothing_until_it_leads_and_stops_when_it_loses() {
        let scenario = async {
            let mut running = start(
                fixtures::policy("p", 1, "true", None),
                fixtures::binding("b", "p"),
                false,
            );
            assert!(
                idle(&mut running.api).await,
                "a replica that does not lead wrote"
            );

            running.leading.send_replace(true);
            // The policy's write is in flight when the lease is lost: nothing follows it.
            let call = running.api.next().await;
            assert_eq!(call.path, POLICY_STATUS);
            running.leading.send_replace(false);
            tokio::task::yield_now().await;
            answer(call);
            assert!(idle(&mut running.api).await, "wrote after losing the lease");
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_write_is_retried_after_a_delay() {
        let scenario = async {
            let mut running = start(
                fixtures::policy("p", 1, "true", None),
                fixtures::binding("b", "p"),
                true,
            );
            let api = &mut running.api;
            let call = api.next().await;
            assert_eq!(call.path, POLICY_STATUS);
            call.reply(500, fixtures::status(500, "InternalError"));
            let failed = Instant::now();
            // The binding is written meanwhile; the policy again after the first delay.
            status_apply(api, BINDING_STATUS).await;
            events(api, 1).await;
            status_apply(api, POLICY_STATUS).await;
            assert_eq!(Instant::now() - failed, retry::WRITE.first);
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn bindings_statuses_are_written_several_at_a_time() {
        let scenario = async {
            let bindings = ["b1", "b2", "b3"].map(|b| fixtures::binding(b, "p"));
            let mut running = start_bound(
                fixtures::policy("p", 1, "true", None),
                bindings.to_vec(),
                true,
            );
            let api = &mut running.api;
            status_apply(api, POLICY_STATUS).await;
            events(api, 3).await;
            // The three writes arrive before any is answered.
            let mut held = Vec::new();
            for _ in 0..3 {
                let call = tokio::time::timeout(Duration::from_secs(60), api.next())
                    .await
                    .expect("a binding's write waited for the one before it");
                assert!(call.path.ends_with("/status"), "{}", call.path);
                held.push(call);
            }
            let mut paths: Vec<String> = held.iter().map(|c| c.path.clone()).collect();
            paths.sort();
            assert_eq!(
                paths,
                ["b1", "b2", "b3"].map(|b| format!(
                    "/apis/admission.celgate.io/v1/validatingadmissionpolicybindings/{b}/status"
                ))
            );
            for call in held {
                answer(call);
            }
            assert_eq!(events(api, 3).await, ["Ready", "Ready", "Ready"]);
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn a_binding_write_starts_as_soon_as_one_in_flight_ends() {
        let scenario = async {
            let count = WRITES_IN_FLIGHT * 5;
            let bindings: Vec<_> = (0..count)
                .map(|i| fixtures::binding(&format!("b{i:03}"), "p"))
                .collect();
            let mut running = start_bound(fixtures::policy("p", 1, "true", None), bindings, true);
            let api = &mut running.api;
            status_apply(api, POLICY_STATUS).await;
            events(api, 1).await;
            // Each write answered only once WRITES_IN_FLIGHT are held: every next one arrives
            // while the others are still in flight.
            let mut held = std::collections::VecDeque::new();
            let mut started = 0;
            while started < count {
                let call = tokio::time::timeout(Duration::from_secs(60), api.next())
                    .await
                    .expect("a write waited for more than one in flight to end");
                if call.path == EVENTS {
                    let body = call.body.clone();
                    call.reply(201, body);
                    continue;
                }
                assert!(call.path.ends_with("/status"), "{}", call.path);
                assert!(
                    started < WRITES_IN_FLIGHT || held.len() == WRITES_IN_FLIGHT - 1,
                    "write {started} started with {} in flight",
                    held.len()
                );
                started += 1;
                held.push_back(call);
                if held.len() == WRITES_IN_FLIGHT {
                    answer(held.pop_front().unwrap());
                }
            }
            for call in held {
                answer(call);
            }
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }

    /// Serves a long pass: each status write is answered 250 ms after it arrives (while the
    /// writer waits), events at once; once the pass has sent its first writes it runs 2 s
    /// before `meanwhile` is called, then after each write with the number written so far.
    /// Returns the paths of the status writes up to `until`, in order.
    async fn long_pass(
        running: &mut Running,
        until: &str,
        mut meanwhile: impl FnMut(usize, &mut Cluster),
    ) -> Vec<String> {
        let (mut held, mut written) = (VecDeque::new(), Vec::new());
        for _ in 0..1000 {
            let Ok(call) =
                tokio::time::timeout(Duration::from_millis(250), running.api.next()).await
            else {
                if let Some(call) = held.pop_front() {
                    answer(call);
                }
                continue;
            };
            if call.path == EVENTS {
                let body = call.body.clone();
                call.reply(201, body);
                continue;
            }
            written.push(call.path.clone());
            held.push_back(call);
            if written.last().is_some_and(|w| w == until) {
                break;
            }
            if written.len() == 1 + WRITES_IN_FLIGHT {
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            if written.len() > WRITES_IN_FLIGHT {
                meanwhile(written.len(), &mut running.cluster);
            }
        }
        written
    }

    const LAST_OF_40: &str =
        "/apis/admission.celgate.io/v1/validatingadmissionpolicybindings/b039/status";
    const Q_STATUS: &str = "/apis/admission.celgate.io/v1/validatingadmissionpolicies/q/status";
    const QB_STATUS: &str =
        "/apis/admission.celgate.io/v1/validatingadmissionpolicybindings/qb/status";

    /// Policy `p` with 40 bindings, none with a status yet; and policy `q` with its binding `qb`.
    fn forty_and_q() -> (
        ValidatingAdmissionPolicy,
        Vec<celgate_crds::ValidatingAdmissionPolicyBinding>,
        ValidatingAdmissionPolicy,
        celgate_crds::ValidatingAdmissionPolicyBinding,
    ) {
        assert_eq!(WRITES_IN_FLIGHT * 5, 40);
        let bindings = (0..40)
            .map(|i| fixtures::binding(&format!("b{i:03}"), "p"))
            .collect();
        (
            fixtures::policy("p", 1, "true", None),
            bindings,
            fixtures::policy("q", 1, "true", None),
            fixtures::binding("qb", "q"),
        )
    }

    /// q's and qb's statuses were written, q's first, before the pass wrote its last binding.
    fn written_first(written: &[String]) {
        let position = |path: &str| written.iter().position(|w| w == path);
        let (q_at, qb_at) = (position(Q_STATUS), position(QB_STATUS));
        assert!(q_at.is_some() && qb_at.is_some(), "{written:?}");
        assert!(q_at < qb_at, "the binding before its policy: {written:?}");
        assert!(
            position(LAST_OF_40).is_none(),
            "the pass wrote its last binding first: {written:?}"
        );
        // The interrupted pass is resumed, not begun again: nothing was written twice.
        let mut once = written.to_vec();
        once.sort();
        once.dedup();
        assert_eq!(once.len(), written.len(), "{written:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_policy_and_binding_applied_during_a_long_pass_are_written_before_it_ends() {
        let scenario = async {
            let (p, bindings, q, qb) = forty_and_q();
            let mut running = start_bound(p.clone(), bindings.clone(), true);
            // 2 s into the pass, q and qb are stored (as their watch events store them); the
            // controllers publish them 4 writes later.
            let written = long_pass(&mut running, QB_STATUS, |n, cluster| {
                if n == 1 + WRITES_IN_FLIGHT {
                    cluster.store(&q, &qb);
                    cluster.changes.record(Watched::Policies, "q");
                    cluster.changes.record(Watched::Bindings, "qb");
                }
                if n == 5 + WRITES_IN_FLIGHT {
                    cluster.publish(&[(&p, &bindings), (&q, std::slice::from_ref(&qb))]);
                }
            })
            .await;
            written_first(&written);
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn a_policy_a_long_pass_found_pending_is_written_once_published_before_it_ends() {
        let scenario = async {
            let (p, bindings, q, qb) = forty_and_q();
            let mut running = start_bound(p.clone(), bindings.clone(), true);
            // q and qb are stored from the start (no spec change), published only 2 s into
            // the pass, as a policy whose params were still syncing when it started.
            running.cluster.store(&q, &qb);
            let written = long_pass(&mut running, QB_STATUS, |n, cluster| {
                if n == 1 + WRITES_IN_FLIGHT {
                    cluster.publish(&[(&p, &bindings), (&q, std::slice::from_ref(&qb))]);
                }
            })
            .await;
            written_first(&written);
        };
        tokio::time::timeout(Duration::from_secs(7200), scenario)
            .await
            .expect("the scenario did not finish");
    }
}
