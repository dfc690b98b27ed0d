//! The policy controller, one for each kind: a kube-runtime `Controller` over the policies that
//! also watches their bindings (each mapped to the policy it names). Reconciling a policy
//! compiles it when its uid, generation or variant changed and republishes the policy set built
//! from the reflector stores of both kinds, which are the source of truth. A deletion (or a
//! policy missing when a binding names it) reaches the controller as an object it cannot find,
//! and republishes too. Each completed list (the first, and every re-list) republishes, so what
//! vanished while a watch was down leaves the set, and requeues every stored policy, so a
//! reconcile that ran before the lists completed runs again at once.
//!
//! Publishing keeps one order: the param kinds of a new policy are syncing (so requests wait
//! for them) before the policy is published, the schemas of the kinds bound mutating policies
//! match are fetched before a set holding them is published, and nothing is published before
//! the four watches listed and every stored policy is compiled, so the webhook never decides
//! with half the policies.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use celgate_crds::{MutatingAdmissionPolicy, ValidatingAdmissionPolicy};
use celgate_engine::PolicySet;
use celgate_engine::model::WildcardOperations;
use celgate_snapshot::{KindSchemaView, SnapshotStore};
use futures::channel::mpsc;
use futures::{Stream, StreamExt, TryStreamExt, stream};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use thiserror::Error;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::controllers::mutated_schemas::{MutatedSchemas, SchemaSource};
use crate::controllers::params::ParamWatches;
use crate::controllers::policy_set::{self, Cached, PolicyCache, Stored};
use crate::controllers::spec_changes::SpecChanges;
use crate::controllers::stored_binding::{BindingStore, BindingWriter, StoredBinding};
use crate::metrics;
use crate::policy_kind::PolicyKind;
use crate::retry::{self, Backoff};

/// Why a policy could not be reconciled.
#[derive(Debug, Error)]
pub enum ReconcileError {
    /// A watch has not completed its first list, so the set cannot be built yet. The policy is
    /// requeued when the list completes (and retried with backoff meanwhile).
    #[error("the first list of {0} has not completed yet")]
    NotListed(&'static str),
    /// Some schemas the bound mutating policies need could not be read; the set was published
    /// with those read, and the reconcile is retried with backoff.
    #[error("the schemas of some kinds mutating policies match could not be read")]
    SchemasIncomplete,
}

/// One of the four watches a policy set is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Watched {
    /// ValidatingAdmissionPolicies.
    Policies,
    /// ValidatingAdmissionPolicyBindings.
    Bindings,
    /// MutatingAdmissionPolicies.
    MutatingPolicies,
    /// MutatingAdmissionPolicyBindings.
    MutatingBindings,
}

/// The reflector stores of one kind's policies and bindings.
pub struct KindStores<P: PolicyKind> {
    /// The policies.
    pub policies: Store<P>,
    /// The bindings.
    pub bindings: BindingStore<P>,
}

impl<P: PolicyKind> Clone for KindStores<P> {
    fn clone(&self) -> Self {
        Self {
            policies: self.policies.clone(),
            bindings: self.bindings.clone(),
        }
    }
}

impl<P: PolicyKind> KindStores<P> {
    /// The policies the store holds now, with the bindings' store.
    pub fn state(&self) -> Stored<P> {
        Stored {
            policies: self.policies.state(),
            bindings: self.bindings.clone(),
        }
    }
}

/// The reflector stores of the four kinds.
#[derive(Clone)]
pub struct Stores {
    /// ValidatingAdmissionPolicies and their bindings.
    pub validating: KindStores<ValidatingAdmissionPolicy>,
    /// MutatingAdmissionPolicies and their bindings.
    pub mutating: KindStores<MutatingAdmissionPolicy>,
}

/// What the policy controller of a kind needs beyond [`PolicyKind`].
pub trait Controlled: Cached {
    /// The watches of its policies and bindings.
    const WATCHED: (Watched, Watched);
    /// Whether a set holding its bound policies needs the schemas of the kinds they match
    /// (mutating policies do: a patched object is typed by its schema).
    const NEEDS_SCHEMAS: bool;
    /// Its stores.
    fn stores(stores: &Stores) -> &KindStores<Self>;
}

impl Controlled for ValidatingAdmissionPolicy {
    const WATCHED: (Watched, Watched) = (Watched::Policies, Watched::Bindings);
    const NEEDS_SCHEMAS: bool = false;
    fn stores(stores: &Stores) -> &KindStores<Self> {
        &stores.validating
    }
}

impl Controlled for MutatingAdmissionPolicy {
    const WATCHED: (Watched, Watched) = (Watched::MutatingPolicies, Watched::MutatingBindings);
    const NEEDS_SCHEMAS: bool = true;
    fn stores(stores: &Stores) -> &KindStores<Self> {
        &stores.mutating
    }
}

/// What the policy controllers read and write.
pub struct Context {
    store: Arc<SnapshotStore>,
    stores: Stores,
    state: Mutex<State>,
    /// The schemas of the kinds bound mutating policies match; fetched one reconcile at a
    /// time. Without a source (tests of validating policies) none are fetched.
    schemas: Option<tokio::sync::Mutex<MutatedSchemas>>,
    /// Each published policy set, for the webhook registration.
    published: watch::Sender<Option<Arc<PolicySet>>>,
    /// Retry delays of policies whose reconcile failed, by kind and name.
    retries: Mutex<HashMap<(&'static str, String), Backoff>>,
    /// Changed by every watch event of the four kinds, for the status writer.
    touched: watch::Sender<()>,
    /// The objects whose spec changed, for the status writer to work out first.
    spec_changes: Arc<SpecChanges<Watched>>,
}

/// Publishing state, changed under one lock so publishes are ordered.
struct State {
    cache: PolicyCache,
    params: ParamWatches,
    /// Whether each watch completed its first list.
    policies_listed: bool,
    bindings_listed: bool,
    mutating_listed: bool,
    mutating_bindings_listed: bool,
    /// The schemas of the kinds the mutating policies match, published with every set.
    schemas: Arc<KindSchemaView>,
    /// Whether a policy set was published yet.
    published: bool,
}

impl State {
    /// The first watch whose first list has not completed, if any.
    fn not_listed(&self) -> Option<&'static str> {
        if !self.policies_listed {
            Some("ValidatingAdmissionPolicies")
        } else if !self.bindings_listed {
            Some("ValidatingAdmissionPolicyBindings")
        } else if !self.mutating_listed {
            Some("MutatingAdmissionPolicies")
        } else if !self.mutating_bindings_listed {
            Some("MutatingAdmissionPolicyBindings")
        } else {
            None
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Context {
    /// A context over the reflector stores of the four kinds; param watches use `client`,
    /// every published set is sent on `published`, and the schemas of mutated kinds come from
    /// `schemas`.
    pub fn new(
        client: Client,
        store: Arc<SnapshotStore>,
        stores: Stores,
        published: watch::Sender<Option<Arc<PolicySet>>>,
        schemas: Option<SchemaSource>,
        max_param_bytes: usize,
    ) -> Self {
        Self {
            state: Mutex::new(State {
                cache: PolicyCache::default(),
                params: ParamWatches::new(client, store.clone(), max_param_bytes),
                policies_listed: false,
                bindings_listed: false,
                mutating_listed: false,
                mutating_bindings_listed: false,
                schemas: Arc::default(),
                published: false,
            }),
            store,
            stores,
            schemas: schemas.map(|s| tokio::sync::Mutex::new(MutatedSchemas::new(s))),
            published,
            retries: Mutex::new(HashMap::new()),
            touched: watch::Sender::new(()),
            spec_changes: Arc::default(),
        }
    }

    /// This context, its policy sets built with `*` in validating policies' operations
    /// standing for `wildcard`.
    #[must_use]
    pub fn with_wildcard_operations(mut self, wildcard: WildcardOperations) -> Self {
        self.state
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .cache
            .wildcard = wildcard;
        self
    }

    /// Records that a watch of one of the four kinds delivered an event.
    pub fn touch(&self) {
        self.touched.send_replace(());
    }

    /// Changes with every watch event of the four kinds.
    pub fn touched(&self) -> watch::Receiver<()> {
        self.touched.subscribe()
    }

    /// The objects of the four kinds whose spec changed, as the watches deliver them.
    pub fn spec_changes(&self) -> Arc<SpecChanges<Watched>> {
        self.spec_changes.clone()
    }

    /// Records a completed list of one watch (its store holds the list now) and publishes:
    /// an empty cluster gets its empty set as soon as the four watches listed.
    pub fn listed(&self, watched: Watched) {
        let mut state = lock(&self.state);
        match watched {
            Watched::Policies => state.policies_listed = true,
            Watched::Bindings => state.bindings_listed = true,
            Watched::MutatingPolicies => state.mutating_listed = true,
            Watched::MutatingBindings => state.mutating_bindings_listed = true,
        }
        drop(state);
        self.publish(None);
    }

    /// Compiles `policy` unless it is compiled at its current uid, generation and variant.
    /// Compiled outside the lock: other policies publish meanwhile. The controller never
    /// reconciles one object twice at once, so nothing else compiles this one.
    fn compile<P: Controlled>(&self, policy: &P) -> Option<Arc<P::Compiled>> {
        if lock(&self.state).cache.is_current(policy) {
            return None;
        }
        let compiled = policy_set::compile(policy);
        info!(kind = P::KIND, policy = %policy.name_any(), generation = policy.meta().generation.unwrap_or_default(), "compiled policy");
        Some(compiled)
    }

    /// The schemas the stored, bound mutating policies need, when they must be fetched
    /// (again), with whether every one could be read (false: those read are returned, and the
    /// reconcile is retried).
    async fn mutated_schemas(&self) -> (Option<Arc<KindSchemaView>>, bool) {
        let Some(schemas) = &self.schemas else {
            return (None, true);
        };
        schemas
            .lock()
            .await
            .refresh(&self.stores.mutating.state())
            .await
    }

    /// Takes in `compiled` as `policy`'s compiled form and, when given, the schemas of the
    /// kinds the bound mutating policies match, then publishes: all under one lock, so no set
    /// holds a newly compiled policy without the schemas fetched for it.
    fn publish_compiled<P: Controlled>(
        &self,
        policy: &P,
        compiled: Option<Arc<P::Compiled>>,
        schemas: Option<Arc<KindSchemaView>>,
    ) {
        if let Some(compiled) = compiled {
            lock(&self.state).cache.insert(policy, compiled);
        }
        self.publish(schemas);
    }

    /// Publishes the policy set built from the stores (with `schemas`, when given, as the
    /// schemas of mutated kinds), once the four watches listed and (for the first publish)
    /// every stored policy is compiled.
    pub fn publish(&self, schemas: Option<Arc<KindSchemaView>>) {
        let mut state = lock(&self.state);
        if let Some(schemas) = schemas {
            state.schemas = schemas;
        }
        if let Some(watch) = state.not_listed() {
            debug!(watch, "no policy set is published before the first list");
            return;
        }
        let (validating, mutating) = (self.stores.validating.state(), self.stores.mutating.state());
        if !state.published {
            let pending = state.cache.pending(&validating, &mutating);
            if pending > 0 {
                debug!(
                    pending,
                    "the first policy set waits until every stored policy is compiled"
                );
                return;
            }
        }
        let set = state.cache.build(validating, mutating);
        // Param kinds first, so a new policy's params are syncing (requests wait for them)
        // before it is published.
        state.params.sync(&set);
        let set = Arc::new(set);
        let param_kinds = state.cache.param_kinds();
        let revision = self
            .store
            .publish_policies(set.clone(), param_kinds, state.schemas.clone());
        state.published = true;
        self.published_metrics(&state.cache, revision, &set);
        info!(
            revision,
            bound_policies = set.validating().len(),
            bound_mutating_policies = set.mutating().len(),
            "published policy set"
        );
        self.published.send_replace(Some(set));
    }

    /// Records a published set in the metrics: a policy change is carried once the policy is
    /// compiled at its stored generation (or gone); a binding change by any set built after it.
    fn published_metrics(&self, cache: &PolicyCache, revision: u64, set: &PolicySet) {
        let published = metrics::Published {
            revision,
            set,
            failing: cache.failing(),
        };
        let current = |stores: &Stores, watched: &str, name: &str| {
            if watched == ValidatingAdmissionPolicy::RESOURCES.0 {
                current_in(&stores.validating, cache, name)
            } else if watched == MutatingAdmissionPolicy::RESOURCES.0 {
                current_in(&stores.mutating, cache, name)
            } else {
                true
            }
        };
        metrics::published(&published, |watched, name| {
            current(&self.stores, watched, name)
        });
    }

    /// Every stored policy of a kind, to requeue after a list.
    fn to_requeue<P: Controlled>(&self) -> Vec<ObjectRef<P>> {
        P::stores(&self.stores)
            .policies
            .state()
            .iter()
            .map(|p| ObjectRef::from_obj(&**p))
            .collect()
    }

    /// Handles one result of a controller: a policy it could not find was deleted (or never
    /// existed, when a binding names it), so the set is published without it.
    fn reconciled<P: Controlled>(
        &self,
        result: Result<(ObjectRef<P>, Action), controller::Error<ReconcileError, watcher::Error>>,
    ) {
        match result {
            Ok((policy, _)) => debug!(%policy, "reconciled policy"),
            Err(controller::Error::ObjectNotFound(policy)) => {
                debug!(%policy, "policy is not stored; publishing the set without it");
                self.publish(None);
            }
            // Reported, and retried, by the error policy.
            Err(controller::Error::ReconcilerFailed(..)) => {}
            Err(controller::Error::QueueError(error)) => {
                warn!(kind = P::KIND, %error, "policy or binding watch failed; the published policies keep their last state until it recovers")
            }
            Err(error) => warn!(kind = P::KIND, %error, "policy controller failed"),
        }
    }
}

/// Whether the stored policy `name` is compiled at its generation (or gone).
fn current_in<P: Controlled>(stores: &KindStores<P>, cache: &PolicyCache, name: &str) -> bool {
    stores
        .policies
        .get(&ObjectRef::new(name))
        .is_none_or(|p| cache.is_current(&*p))
}

/// Reconciles one policy: compiles it if it changed, fetches the schemas a mutating policy
/// needs, then publishes the set from the stores.
pub async fn reconcile<P: Controlled>(
    policy: Arc<P>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    metrics::reconciled(P::CONTROLLER);
    if let Some(watch) = lock(&ctx.state).not_listed() {
        return Err(ReconcileError::NotListed(watch));
    }
    let compiled = ctx.compile(&*policy);
    let (schemas, complete) = if P::NEEDS_SCHEMAS {
        ctx.mutated_schemas().await
    } else {
        (None, true)
    };
    ctx.publish_compiled(&*policy, compiled, schemas);
    if !complete {
        return Err(ReconcileError::SchemasIncomplete);
    }
    lock(&ctx.retries).remove(&(P::KIND, policy.name_any()));
    Ok(Action::await_change())
}

/// Retries a failed reconcile after a delay that doubles with each failure of that policy.
pub fn error_policy<P: Controlled>(
    policy: Arc<P>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    metrics::reconcile_failed(P::CONTROLLER);
    let name = policy.name_any();
    let delay = lock(&ctx.retries)
        .entry((P::KIND, name.clone()))
        .or_insert_with(|| Backoff::new(retry::RECONCILE))
        .next_delay();
    match error {
        ReconcileError::NotListed(_) => {
            debug!(kind = P::KIND, policy = %name, %error, retry_in_s = delay.as_secs_f64(), "policy waits for the first lists")
        }
        ReconcileError::SchemasIncomplete => {
            warn!(kind = P::KIND, policy = %name, %error, retry_in_s = delay.as_secs_f64(), "schemas are fetched again")
        }
    }
    Action::requeue(delay)
}

/// Records each completed list of a watch (the first one, and every re-list) and asks for
/// every policy to be requeued.
fn on_list_done<K>(
    ctx: Arc<Context>,
    watched: Watched,
    requeue: mpsc::UnboundedSender<()>,
) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) {
    move |event| {
        if event.is_ok() {
            ctx.touch();
        }
        if matches!(event, Ok(watcher::Event::InitDone)) {
            ctx.listed(watched);
            // Only fails when the controller stopped, and then nothing waits for it.
            let _ = requeue.unbounded_send(());
        }
    }
}

/// kubectl's copy of what `kubectl apply` last applied, in an object's annotations.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what nothing celgate does reads from a watched policy before it is stored:
/// its `managedFields` (with 1,000 policies and 1,000 bindings they held ~8 MB, `make
/// bench-scale`: anonymous memory after load 52.3 → 43.6 MB), and the annotation in which
/// `kubectl apply` keeps a copy of the whole object it applied (a second copy of each spec).
pub fn without_unread_fields<K: kube::Resource>(object: &mut K) {
    let meta = object.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            // An emptied map keeps its first node (544 bytes).
            meta.annotations = None;
        }
    }
}

/// Whether a stored policy and an update of it have the same uid, generation, labels and
/// annotations.
fn same_metadata<K: kube::Resource>(stored: &K, object: &K) -> bool {
    let (stored, object) = (stored.meta(), object.meta());
    stored.uid == object.uid
        && stored.generation == object.generation
        && stored.annotations == object.annotations
        && stored.labels == object.labels
}

/// Whether the last watch event was an update that left its object's uid, generation, labels
/// and annotations as stored (a status written; of a binding, the annotations celgate reads). A policy set holds a policy and a binding by
/// uid and generation (and a policy's variant by its annotations, such as autogen's), so such an
/// update is stored but reconciles nothing: without
/// this, each status write of a binding rebuilt and published the whole set (1,000 policies x
/// 20 bindings: a rebuild of 20,000 bindings for each of the status writer's 20,000 writes).
#[derive(Clone, Default)]
struct SpecUnchanged(Arc<AtomicBool>);

impl SpecUnchanged {
    /// Notes, before the store takes the event in, whether it is such an update: the object
    /// `stored` returns under its name and it are the same to `unchanged`.
    fn note<K, S, G, F>(
        &self,
        stored: G,
        unchanged: F,
    ) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) + use<K, S, G, F>
    where
        K: kube::Resource,
        G: Fn(&str) -> Option<Arc<S>>,
        F: Fn(&S, &K) -> bool,
    {
        let flag = self.0.clone();
        move |event| {
            let unchanged = match event {
                Ok(watcher::Event::Apply(object)) => {
                    stored(object.meta().name.as_deref().unwrap_or_default())
                        .is_some_and(|stored| unchanged(&stored, object))
                }
                _ => false,
            };
            flag.store(unchanged, Ordering::Relaxed);
        }
    }

    /// `observe` (the watch's metrics) for every event but such an update, which is not a
    /// change waiting to be published: no set follows it, so it would stay pending forever.
    fn unless_unchanged<E, O: FnMut(&E)>(&self, mut observe: O) -> impl FnMut(&E) + use<E, O> {
        let flag = self.0.clone();
        move |event| {
            if !flag.load(Ordering::Relaxed) {
                observe(event);
            }
        }
    }

    /// Records in `changes` the object of every event but such an update (lists are not
    /// recorded: a status pass follows each and works out every object).
    fn record_in<K: kube::Resource>(
        &self,
        changes: Arc<SpecChanges<Watched>>,
        watched: Watched,
    ) -> impl FnMut(&Result<watcher::Event<K>, watcher::Error>) + use<K> {
        let flag = self.0.clone();
        move |event| {
            if let Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) = event
                && !flag.load(Ordering::Relaxed)
            {
                changes.record(watched, object.meta().name.as_deref().unwrap_or_default());
            }
        }
    }

    /// Whether a touched object (of the last event, as streams pass one at a time) may change
    /// the set: errors pass.
    fn may_change_the_set<K>(
        &self,
    ) -> impl FnMut(&Result<K, watcher::Error>) -> std::future::Ready<bool> + use<K> {
        let flag = self.0.clone();
        move |touched| std::future::ready(touched.is_err() || !flag.load(Ordering::Relaxed))
    }
}

/// A kind's controller as a result stream: watches its policies and bindings into the
/// context's stores (through `policy_writer` and `binding_writer`) and reconciles what they
/// touch; `reconcile_all` asks for every policy to be reconciled (new discovery, for the
/// schemas of mutated kinds).
pub fn controller<P: Controlled>(
    client: Client,
    ctx: Arc<Context>,
    policy_writer: Writer<P>,
    binding_writer: BindingWriter<P>,
    reconcile_all: impl Stream<Item = ()> + Send + Sync + 'static,
) -> impl Stream<Item = ()> {
    let (requeue, lists) = mpsc::unbounded();
    let (policies_watched, bindings_watched) = P::WATCHED;
    let (policies_resource, bindings_resource) = P::RESOURCES;
    let (policies_unchanged, bindings_unchanged) =
        (SpecUnchanged::default(), SpecUnchanged::default());
    let policies = retry::watch(Api::<P>::all(client.clone()), watcher::Config::default())
        .modify(without_unread_fields)
        .inspect(policies_unchanged.note(
            {
                let policies = policy_writer.as_reader();
                move |name: &str| policies.get(&ObjectRef::new(name))
            },
            same_metadata,
        ))
        .reflect(policy_writer)
        .inspect(policies_unchanged.record_in(ctx.spec_changes(), policies_watched))
        .inspect(policies_unchanged.unless_unchanged(metrics::watch(policies_resource, true)))
        .inspect(on_list_done(ctx.clone(), policies_watched, requeue.clone()))
        .touched_objects()
        .filter(policies_unchanged.may_change_the_set());
    let mut binding_writer = binding_writer;
    let bindings = retry::watch(Api::<P::Binding>::all(client), watcher::Config::default())
        .inspect(bindings_unchanged.note(
            {
                let bindings = binding_writer.as_reader();
                move |name: &str| bindings.get(name)
            },
            StoredBinding::same_as,
        ))
        .inspect_ok(move |event| binding_writer.apply_watcher_event(event))
        .inspect(bindings_unchanged.record_in(ctx.spec_changes(), bindings_watched))
        .inspect(bindings_unchanged.unless_unchanged(metrics::watch(bindings_resource, true)))
        .inspect(on_list_done(ctx.clone(), bindings_watched, requeue))
        .touched_objects()
        .filter(bindings_unchanged.may_change_the_set());
    let requeued = {
        let ctx = ctx.clone();
        lists.flat_map(move |()| stream::iter(ctx.to_requeue::<P>()))
    };
    Controller::for_stream(policies, P::stores(&ctx.stores).policies.clone())
        .watches_stream(bindings, |binding: P::Binding| {
            P::policy_name(&binding).map(ObjectRef::<P>::new)
        })
        .reconcile_on(requeued)
        .reconcile_all_on(reconcile_all)
        .trigger_backoff(retry::AlreadyDelayed)
        .run(reconcile::<P>, error_policy::<P>, ctx.clone())
        .map(move |result| ctx.reconciled(result))
}

/// Runs a kind's policy controller until the process stops.
pub async fn run<P: Controlled>(
    client: Client,
    ctx: Arc<Context>,
    policy_writer: Writer<P>,
    binding_writer: BindingWriter<P>,
    reconcile_all: impl Stream<Item = ()> + Send + Sync + 'static,
) {
    controller(client, ctx, policy_writer, binding_writer, reconcile_all)
        .for_each(|()| std::future::ready(()))
        .await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use crate::controllers::stored_binding;
    use crate::fixtures::{
        self, ApiServer, BINDINGS, POLICIES, Reply, binding, binding_json, policy, policy_json,
    };
    use celgate_crds::ValidatingAdmissionPolicyBinding;
    use celgate_snapshot::{ParamKindEntry, Snapshot};
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::Value;
    use serde_json::json;
    use std::time::Duration;
    use tokio::time::Instant;

    /// A context over stores the test feeds directly, with a mocked API server for the param
    /// watches it may start.
    struct Harness {
        ctx: Arc<Context>,
        store: Arc<SnapshotStore>,
        policies: Writer<ValidatingAdmissionPolicy>,
        bindings: BindingWriter<ValidatingAdmissionPolicy>,
        sets: watch::Receiver<Option<Arc<PolicySet>>>,
        api: ApiServer,
    }

    impl Harness {
        /// Stores that listed `policies` and `bindings`.
        fn listed(
            policies: &[ValidatingAdmissionPolicy],
            bindings: &[ValidatingAdmissionPolicyBinding],
        ) -> Self {
            let (client, api) = fixtures::pair();
            let store = SnapshotStore::new();
            let (policy_reader, mut policy_writer) = reflector::store();
            let (binding_reader, mut binding_writer) = stored_binding::store();
            list(|e| policy_writer.apply_watcher_event(e), policies);
            list(|e| binding_writer.apply_watcher_event(e), bindings);
            let (published, sets) = watch::channel(None);
            let ctx = Arc::new(Context::new(
                client,
                store.clone(),
                stores(policy_reader, binding_reader),
                published,
                None,
                usize::MAX,
            ));
            ctx.listed(Watched::MutatingPolicies);
            ctx.listed(Watched::MutatingBindings);
            ctx.listed(Watched::Policies);
            ctx.listed(Watched::Bindings);
            Self {
                ctx,
                store,
                policies: policy_writer,
                bindings: binding_writer,
                sets,
                api,
            }
        }

        /// Stores or replaces a policy and reconciles it, as its watch event would.
        async fn apply_policy(&mut self, policy: ValidatingAdmissionPolicy) {
            self.policies
                .apply_watcher_event(&Event::Apply(policy.clone()));
            reconcile(Arc::new(policy), self.ctx.clone()).await.unwrap();
        }

        /// Stores or replaces a binding and reconciles its policy, as the binding's watch
        /// event would (through the mapper, or as an object not found).
        async fn apply_binding(&mut self, binding: ValidatingAdmissionPolicyBinding) {
            let policy = binding.spec.policy_name.clone().unwrap_or_default();
            self.bindings.apply_watcher_event(&Event::Apply(binding));
            self.trigger(&policy).await;
        }

        /// Deletes a binding and reconciles its policy.
        async fn delete_binding(&mut self, binding: ValidatingAdmissionPolicyBinding) {
            let policy = binding.spec.policy_name.clone().unwrap_or_default();
            self.bindings.apply_watcher_event(&Event::Delete(binding));
            self.trigger(&policy).await;
        }

        /// Deletes a policy; the controller then cannot find it.
        async fn delete_policy(&mut self, policy: ValidatingAdmissionPolicy) {
            let name = policy.name_any();
            self.policies.apply_watcher_event(&Event::Delete(policy));
            self.trigger(&name).await;
        }

        /// What the controller does for a request to reconcile `name`: reconcile the stored
        /// policy, or report it not found.
        async fn trigger(&self, name: &str) {
            let policy_ref = ObjectRef::<ValidatingAdmissionPolicy>::new(name);
            let result = match self.ctx.stores.validating.policies.get(&policy_ref) {
                Some(policy) => reconcile(policy, self.ctx.clone())
                    .await
                    .map(|action| (policy_ref, action))
                    .map_err(|e| {
                        controller::Error::ReconcilerFailed(
                            e,
                            Box::new(ObjectRef::<ValidatingAdmissionPolicy>::new(name).erase()),
                        )
                    }),
                None => Err(controller::Error::ObjectNotFound(Box::new(
                    policy_ref.erase(),
                ))),
            };
            self.ctx.reconciled(result);
        }

        fn snapshot(&self) -> Arc<Snapshot> {
            self.store.load()
        }

        /// The compiled policy published under `name`.
        fn published(&self, name: &str) -> Option<Arc<celgate_engine::ValidatingPolicy>> {
            self.snapshot()
                .policies
                .validating()
                .iter()
                .find(|b| &*b.policy.name == name)
                .map(|b| b.policy.clone())
        }
    }

    /// The stores of these validating policies and bindings, with empty mutating ones.
    fn stores(
        policies: Store<ValidatingAdmissionPolicy>,
        bindings: BindingStore<ValidatingAdmissionPolicy>,
    ) -> Stores {
        Stores {
            validating: KindStores { policies, bindings },
            mutating: KindStores {
                policies: reflector::store().0,
                bindings: stored_binding::store().0,
            },
        }
    }

    /// `objects` listed, through `apply` (a writer's).
    fn list<K: Clone>(mut apply: impl FnMut(&Event<K>), objects: &[K]) {
        apply(&Event::Init);
        for object in objects {
            apply(&Event::InitApply(object.clone()));
        }
        apply(&Event::InitDone);
    }

    /// Bound policies by name, each with its bindings' names.
    fn bound(snapshot: &Snapshot) -> Vec<(String, Vec<String>)> {
        snapshot
            .policies
            .validating()
            .iter()
            .map(|b| {
                (
                    b.policy.name.to_string(),
                    b.bindings.iter().map(|b| b.name.to_string()).collect(),
                )
            })
            .collect()
    }

    fn pairs(expected: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        expected
            .iter()
            .map(|(p, bs)| (p.to_string(), bs.iter().map(|b| b.to_string()).collect()))
            .collect()
    }

    #[test]
    fn a_stored_policy_keeps_neither_managed_fields_nor_kubectls_last_applied_copy() {
        let mut object = policy_json("p", 1, "true", None);
        object["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Update",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:failurePolicy": {}}}}]);
        object["metadata"]["annotations"] = json!({
            LAST_APPLIED: serde_json::to_string(&object).unwrap(),
            "audit.celgate.io/severity": "high",
        });
        let mut policy: ValidatingAdmissionPolicy = serde_json::from_value(object).unwrap();
        without_unread_fields(&mut policy);
        assert_eq!(policy.metadata.managed_fields, None);
        assert_eq!(
            policy.annotations().keys().collect::<Vec<_>>(),
            ["audit.celgate.io/severity"]
        );
        // Applied by kubectl with no annotation of its own: none is kept.
        let mut object = policy_json("p", 1, "true", None);
        object["metadata"]["annotations"] = json!({LAST_APPLIED: "{}"});
        let mut policy: ValidatingAdmissionPolicy = serde_json::from_value(object).unwrap();
        without_unread_fields(&mut policy);
        assert_eq!(policy.metadata.annotations, None);
    }

    #[tokio::test]
    async fn a_policy_added_is_compiled_and_published() {
        let mut h = Harness::listed(&[], &[]);
        assert!(
            h.snapshot().ready,
            "an empty cluster publishes an empty set"
        );
        assert!(h.snapshot().policies.validating().is_empty());

        h.apply_binding(binding("b", "p")).await;
        h.apply_policy(policy("p", 1, "object.data.size() < 3", None))
            .await;

        assert_eq!(bound(&h.snapshot()), pairs(&[("p", &["b"])]));
        let compiled = h.published("p").unwrap();
        assert_eq!(compiled.validations.len(), 1);
        assert!(compiled.compile_errors().is_empty());
        assert_eq!(
            h.snapshot().policy_param_kinds.validating.get("p"),
            Some(&None)
        );
        // The registration sees the set the webhook reads.
        let sent = h.sets.borrow_and_update().clone().unwrap();
        assert!(Arc::ptr_eq(&sent, &h.snapshot().policies));
    }

    #[tokio::test]
    async fn a_changed_policy_is_recompiled_and_an_unchanged_one_is_not() {
        let mut h = Harness::listed(&[], &[binding("b", "p")]);
        h.apply_policy(policy("p", 1, "true", None)).await;
        let first = h.published("p").unwrap();

        // Reconciled again at the same generation (a binding changed): not compiled again.
        h.apply_binding(binding("b2", "p")).await;
        let again = h.published("p").unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        assert_eq!(bound(&h.snapshot()), pairs(&[("p", &["b", "b2"])]));

        // A new generation is compiled.
        h.apply_policy(policy("p", 2, "false", None)).await;
        let changed = h.published("p").unwrap();
        assert!(!Arc::ptr_eq(&first, &changed));
        assert_eq!(changed.spec.generation, 2);
        assert_eq!(changed.spec.validations[0].expression, "false");
    }

    #[tokio::test]
    async fn a_deleted_policy_or_binding_leaves_the_snapshot() {
        let mut h = Harness::listed(&[], &[binding("b1", "p"), binding("b2", "p")]);
        h.apply_policy(policy("p", 1, "true", None)).await;
        assert_eq!(bound(&h.snapshot()), pairs(&[("p", &["b1", "b2"])]));

        h.delete_binding(binding("b2", "p")).await;
        assert_eq!(bound(&h.snapshot()), pairs(&[("p", &["b1"])]));

        h.delete_policy(policy("p", 1, "true", None)).await;
        assert_eq!(bound(&h.snapshot()), pairs(&[]));
        assert!(!h.snapshot().policy_param_kinds.validating.contains_key("p"));
    }

    #[tokio::test]
    async fn a_binding_whose_policy_is_missing_publishes_no_policy() {
        let mut h = Harness::listed(&[], &[]);
        h.apply_policy(policy("other", 1, "true", None)).await;
        h.apply_binding(binding("b", "absent")).await;
        assert!(h.snapshot().ready);
        assert_eq!(bound(&h.snapshot()), pairs(&[]));

        // The policy appears: the binding binds it.
        h.apply_policy(policy("absent", 1, "true", None)).await;
        assert_eq!(bound(&h.snapshot()), pairs(&[("absent", &["b"])]));
    }

    #[tokio::test]
    async fn the_first_publish_waits_until_every_stored_policy_is_compiled() {
        let (p1, p2) = (policy("p1", 1, "true", None), policy("p2", 1, "true", None));
        let h = Harness::listed(
            &[p1.clone(), p2.clone()],
            &[binding("b1", "p1"), binding("b2", "p2")],
        );
        reconcile(Arc::new(p1), h.ctx.clone()).await.unwrap();
        assert!(!h.snapshot().ready, "published with p2 not compiled yet");
        reconcile(Arc::new(p2), h.ctx.clone()).await.unwrap();
        assert!(h.snapshot().ready);
        assert_eq!(
            bound(&h.snapshot()),
            pairs(&[("p1", &["b1"]), ("p2", &["b2"])])
        );
    }

    #[tokio::test]
    async fn a_bound_policy_starts_its_param_watch_and_unbinding_it_stops_the_watch() {
        let mut h = Harness::listed(&[], &[binding("b", "p")]);
        h.apply_policy(policy("p", 1, "true", Some(("example.com/v1", "Widget"))))
            .await;
        assert_eq!(bound(&h.snapshot()), pairs(&[("p", &["b"])]));
        assert!(matches!(
            h.snapshot().params.entry("example.com/v1", "Widget"),
            Some(ParamKindEntry::Syncing)
        ));
        let lookup = h.api.next().await;
        assert_eq!(lookup.path, "/apis/example.com/v1");

        h.delete_binding(binding("b", "p")).await;
        assert!(
            h.snapshot()
                .params
                .entry("example.com/v1", "Widget")
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_reconcile_before_the_lists_complete_is_retried_with_growing_delays() {
        let (client, _api) = fixtures::pair();
        let (policies, mut policy_writer) = reflector::store();
        let (bindings, mut binding_writer) = stored_binding::store();
        let p = policy("p", 1, "true", None);
        list(
            |e| policy_writer.apply_watcher_event(e),
            std::slice::from_ref(&p),
        );
        let (published, _sets) = watch::channel(None);
        let store = SnapshotStore::new();
        let ctx = Arc::new(Context::new(
            client,
            store.clone(),
            stores(policies, bindings),
            published,
            None,
            usize::MAX,
        ));
        ctx.listed(Watched::MutatingPolicies);
        ctx.listed(Watched::MutatingBindings);
        ctx.listed(Watched::Policies);

        // The bindings' first list has not completed.
        let p = Arc::new(p);
        let mut delays = Vec::new();
        for _ in 0..3 {
            let error = reconcile(p.clone(), ctx.clone()).await.unwrap_err();
            assert!(matches!(error, ReconcileError::NotListed(_)));
            delays.push(error_policy(p.clone(), &error, ctx.clone()));
        }
        let secs = |s| Action::requeue(Duration::from_secs(s));
        assert_eq!(delays, [secs(1), secs(2), secs(4)]);
        assert!(!store.load().ready);

        // It completes: the policy is requeued, reconciled and published, and its next
        // failure starts again from the first delay.
        list(
            |e| binding_writer.apply_watcher_event(e),
            &[binding("b", "p")],
        );
        ctx.listed(Watched::Bindings);
        assert_eq!(
            ctx.to_requeue::<ValidatingAdmissionPolicy>(),
            [ObjectRef::new("p")]
        );
        reconcile(p.clone(), ctx.clone()).await.unwrap();
        assert_eq!(bound(&store.load()), pairs(&[("p", &["b"])]));
        let error = ReconcileError::NotListed("again");
        assert_eq!(error_policy(p, &error, ctx), secs(1));
    }

    /// Answers the policy controller's calls: lists of `policies` and `bindings`, watches held.
    /// A policy controller's context over fresh stores, as `controllers::run` wires it.
    struct Wired {
        store: Arc<SnapshotStore>,
        ctx: Arc<Context>,
        policy_writer: Writer<ValidatingAdmissionPolicy>,
        binding_writer: BindingWriter<ValidatingAdmissionPolicy>,
    }

    fn wired(client: &Client) -> Wired {
        let store = SnapshotStore::new();
        let (policies, policy_writer) = reflector::store();
        let (bindings, binding_writer) = stored_binding::store();
        let (published, _) = watch::channel(None);
        let ctx = Arc::new(Context::new(
            client.clone(),
            store.clone(),
            stores(policies, bindings),
            published,
            None,
            usize::MAX,
        ));
        // No mutating policy is stored (their watch is not part of this controller).
        ctx.listed(Watched::MutatingPolicies);
        ctx.listed(Watched::MutatingBindings);
        Wired {
            store,
            ctx,
            policy_writer,
            binding_writer,
        }
    }

    fn serve(policies: Vec<Value>, bindings: Vec<Value>) -> impl FnMut(&fixtures::Call) -> Reply {
        move |call| match (call.path.as_str(), call.is_watch()) {
            (_, true) => Reply::Hold,
            (POLICIES, false) => Reply::Json(200, fixtures::list(policies.clone())),
            (BINDINGS, false) => Reply::Json(200, fixtures::list(bindings.clone())),
            (path, _) => panic!("unexpected call to {path}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_controller_publishes_the_policies_stored_when_it_starts() {
        let scenario = async {
            let (client, mut api) = fixtures::pair();
            let Wired {
                store,
                ctx,
                policy_writer,
                binding_writer,
            } = wired(&client);
            let _controller = tokio::spawn(run(
                client,
                ctx,
                policy_writer,
                binding_writer,
                futures::stream::pending(),
            ));
            let policies = vec![
                policy_json("p1", 1, "true", None),
                policy_json("p2", 3, "true", None),
            ];
            let bindings = vec![binding_json("b1", "p1"), binding_json("b2", "p2")];

            // The policies are listed, the bindings' list is slow: the policies are
            // reconciled, fail (nothing is published) and wait.
            let mut slow_bindings = serve(policies.clone(), vec![]);
            let mut answer = move |call: &fixtures::Call| {
                if call.path == BINDINGS {
                    Reply::Hold
                } else {
                    slow_bindings(call)
                }
            };
            api.serve_until_watching(&mut answer, POLICIES).await;
            api.serve_until(&mut answer, tokio::time::sleep(Duration::from_millis(100)))
                .await;
            assert!(!store.load().ready);

            // The bindings' list completes: every policy is requeued at once (not after its
            // retry delay), and the first set holds them all.
            api.end_watches(BINDINGS, &[fixtures::list(bindings.clone())]);
            let listed = Instant::now();
            let first = api
                .serve_until(
                    serve(policies, bindings),
                    store.wait_until(listed + Duration::from_secs(60), |s| s.ready),
                )
                .await;
            assert!(Instant::now() - listed < retry::RECONCILE.first);
            assert_eq!(
                bound(&first),
                pairs(&[("p1", &["b1"]), ("p2", &["b2"])]),
                "the first published set"
            );
        };
        tokio::time::timeout(Duration::from_secs(300), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn a_status_write_publishes_nothing_and_a_spec_change_publishes_and_is_recorded() {
        let scenario = async {
            let (client, mut api) = fixtures::pair();
            let Wired {
                store,
                ctx,
                policy_writer,
                binding_writer,
            } = wired(&client);
            // What the status writer is told to work out first.
            let changes = ctx.spec_changes();
            let taken = || {
                let mut taken: Vec<_> = changes.take().into_iter().collect();
                taken.sort_by(|a, b| a.1.cmp(&b.1));
                taken
            };
            let _controller = tokio::spawn(run(
                client,
                ctx,
                policy_writer,
                binding_writer,
                futures::stream::pending(),
            ));
            let policies = vec![policy_json("p1", 1, "true", None)];
            let bindings = vec![binding_json("b1", "p1")];
            let deadline = || Instant::now() + Duration::from_secs(60);
            let first = api
                .serve_until(
                    serve(policies.clone(), bindings.clone()),
                    store.wait_until(deadline(), |s| s.ready),
                )
                .await;
            assert_eq!(bound(&first), pairs(&[("p1", &["b1"])]));
            let served = || serve(policies.clone(), bindings.clone());

            // The status writer writes the binding's and the policy's status: stored, but no
            // set is built or published for it.
            let mut written = binding_json("b1", "p1");
            written["metadata"]["resourceVersion"] = json!("2");
            written["status"] = json!({"observedGeneration": 1});
            let mut policy_written = policy_json("p1", 1, "true", None);
            policy_written["metadata"]["resourceVersion"] = json!("3");
            policy_written["status"] = json!({"observedGeneration": 1});
            api.serve_until_watching(served(), BINDINGS).await;
            api.end_watches(BINDINGS, &[json!({"type": "MODIFIED", "object": written})]);
            api.serve_until_watching(served(), POLICIES).await;
            api.end_watches(
                POLICIES,
                &[json!({"type": "MODIFIED", "object": policy_written})],
            );
            api.serve_until(served(), tokio::time::sleep(Duration::from_secs(5)))
                .await;
            assert_eq!(
                store.load().revision,
                first.revision,
                "a status write published a set"
            );
            assert_eq!(
                taken(),
                [],
                "a list or a status write was recorded as a spec change"
            );

            // The binding's spec changes (a new generation): a set is published.
            let mut changed = binding_json("b1", "p1");
            changed["metadata"]["generation"] = json!(2);
            changed["metadata"]["resourceVersion"] = json!("4");
            changed["spec"]["validationActions"] = json!(["Warn"]);
            api.serve_until_watching(served(), BINDINGS).await;
            api.end_watches(BINDINGS, &[json!({"type": "MODIFIED", "object": changed})]);
            let next = api
                .serve_until(
                    served(),
                    store.wait_until(deadline(), |s| s.revision > first.revision),
                )
                .await;
            assert!(next.revision > first.revision);
            assert_eq!(taken(), [(Watched::Bindings, "b1".to_string())]);

            // The policy's autogen annotation changes at the same generation: its variants
            // change, so a set is published.
            let mut annotated = policy_json("p1", 1, "true", None);
            annotated["metadata"]["resourceVersion"] = json!("5");
            annotated["metadata"]["annotations"] = json!({"admission.celgate.io/autogen": "all"});
            api.serve_until_watching(served(), POLICIES).await;
            api.end_watches(
                POLICIES,
                &[json!({"type": "MODIFIED", "object": annotated})],
            );
            let last = api
                .serve_until(
                    served(),
                    store.wait_until(deadline(), |s| s.revision > next.revision),
                )
                .await;
            assert!(last.revision > next.revision);
            assert_eq!(taken(), [(Watched::Policies, "p1".to_string())]);
        };
        tokio::time::timeout(Duration::from_secs(300), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn the_controller_keeps_its_policies_through_a_watch_error_and_recovers() {
        let scenario = async {
            let (client, mut api) = fixtures::pair();
            let Wired {
                store,
                ctx,
                policy_writer,
                binding_writer,
            } = wired(&client);
            let controller = controller(
                client,
                ctx.clone(),
                policy_writer,
                binding_writer,
                futures::stream::pending(),
            )
            .for_each(|()| std::future::ready(()));
            let _controller = tokio::spawn(controller);
            let deadline = || Instant::now() + Duration::from_secs(60);
            let bound_now = |expected: Vec<(String, Vec<String>)>| {
                let store = store.clone();
                async move {
                    let s = store
                        .wait_until(deadline(), |s| s.ready && bound(s) == expected)
                        .await;
                    bound(&s)
                }
            };

            let bindings = vec![binding_json("b1", "p1"), binding_json("b2", "p2")];
            let seen = api
                .serve_until(
                    serve(vec![policy_json("p1", 1, "true", None)], bindings.clone()),
                    bound_now(pairs(&[("p1", &["b1"])])),
                )
                .await;
            assert_eq!(seen, pairs(&[("p1", &["b1"])]));
            api.serve_until_watching(serve(vec![], vec![]), POLICIES)
                .await;

            // The policy watch fails with "resource version too old": the watcher lists again.
            // Meanwhile p1 was deleted.
            api.end_watches(
                POLICIES,
                &[json!({"type": "ERROR", "object": fixtures::status(410, "Expired")})],
            );
            let relisted_store = store.clone();
            let mut relist = serve(vec![], bindings.clone());
            let seen = api
                .serve_until(
                    move |call| {
                        if call.path == POLICIES && !call.is_watch() {
                            // Until the new list arrives, the last state stays published.
                            assert_eq!(bound(&relisted_store.load()), pairs(&[("p1", &["b1"])]));
                        }
                        relist(call)
                    },
                    bound_now(pairs(&[])),
                )
                .await;
            assert_eq!(seen, pairs(&[]));

            // The watch goes on: a policy created now is published.
            api.serve_until_watching(serve(vec![], vec![]), POLICIES)
                .await;
            api.end_watches(
                POLICIES,
                &[json!({"type": "ADDED", "object": policy_json("p2", 1, "true", None)})],
            );
            let seen = api
                .serve_until(
                    serve(vec![], bindings),
                    bound_now(pairs(&[("p2", &["b2"])])),
                )
                .await;
            assert_eq!(seen, pairs(&[("p2", &["b2"])]));
        };
        tokio::time::timeout(Duration::from_secs(300), scenario)
            .await
            .expect("the scenario did not finish");
    }
}
