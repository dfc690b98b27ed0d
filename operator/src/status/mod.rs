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

mod apply;
mod conditions;
mod events;
mod readiness;
mod typecheck;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use celgate_crds::{
    BindingStatus, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, PolicyStatus,
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use celgate_engine::{ValidatingPolicy, compile_validating};
use celgate_snapshot::{Snapshot, SnapshotStore};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::backoff::Backoff;
use crate::convert;
use crate::leader::Leadership;
use crate::registration::Applied;
use conditions::{READY, Want};
use events::Observed;
use readiness::Readiness;
pub use typecheck::{Checker, ClusterChecker, Policy};

/// The field manager of every status field celgate writes.
pub const FIELD_MANAGER: &str = "celgate";

/// First delay before a failed status write is retried.
const RETRY_FIRST: Duration = Duration::from_millis(500);
/// Longest delay between two tries of one object's status.
const RETRY_MAX: Duration = Duration::from_secs(60);
/// How long a pass waits for a change before it checks again anyway.
const IDLE: Duration = Duration::from_secs(300);

/// What the status is computed from.
pub struct Sources {
    /// Stored ValidatingAdmissionPolicies.
    pub validating: Store<ValidatingAdmissionPolicy>,
    /// Stored ValidatingAdmissionPolicyBindings.
    pub validating_bindings: Store<ValidatingAdmissionPolicyBinding>,
    /// Stored MutatingAdmissionPolicies.
    pub mutating: Store<MutatingAdmissionPolicy>,
    /// Stored MutatingAdmissionPolicyBindings.
    pub mutating_bindings: Store<MutatingAdmissionPolicyBinding>,
    /// The snapshot this process serves.
    pub snapshot: Arc<SnapshotStore>,
    /// What the webhook registration covers.
    pub applied: watch::Receiver<Applied>,
    /// Changes whenever a watch of the four kinds delivers an event.
    pub touched: watch::Receiver<()>,
}

/// Which of the four kinds an object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    ValidatingPolicy,
    ValidatingBinding,
    MutatingPolicy,
    MutatingBinding,
}

/// A type checking report of one policy at one uid, generation and schema revision.
struct Checked {
    uid: String,
    generation: i64,
    schemas: u64,
    report: Arc<celgate_engine::typecheck::TypeCheckReport>,
}

/// A policy compiled by the status writer because the snapshot does not hold it (unbound).
struct Compiled {
    uid: String,
    generation: i64,
    policy: Arc<ValidatingPolicy>,
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
    recorder: Recorder,
    checked: HashMap<(Kind, String), Checked>,
    compiled: HashMap<String, Compiled>,
    retries: HashMap<(Kind, String), Retry>,
    /// The snapshot parts the last pass read.
    seen: Option<Arc<Snapshot>>,
}

/// The inputs of one pass, read once at its start.
struct World {
    snapshot: Arc<Snapshot>,
    applied: Applied,
    validating: Vec<Arc<ValidatingAdmissionPolicy>>,
    validating_bindings: Vec<Arc<ValidatingAdmissionPolicyBinding>>,
    mutating: Vec<Arc<MutatingAdmissionPolicy>>,
    mutating_bindings: Vec<Arc<MutatingAdmissionPolicyBinding>>,
    schemas: u64,
}

fn sorted<K: ResourceExt>(mut objects: Vec<Arc<K>>) -> Vec<Arc<K>> {
    objects.sort_by_key(|o| o.name_any());
    objects
}

fn uid_and_generation<K: Resource>(object: &K) -> (String, i64) {
    (
        object.meta().uid.clone().unwrap_or_default(),
        object.meta().generation.unwrap_or_default(),
    )
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
    pub fn new(client: Client, sources: Sources, checker: Arc<dyn Checker>, instance: String) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.to_string(),
                instance: Some(instance),
            },
        );
        Self {
            schemas: checker.revisions(),
            client,
            sources,
            checker,
            recorder,
            checked: HashMap::new(),
            compiled: HashMap::new(),
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
                    // Whatever was retried belongs to the next term, which compares afresh.
                    self.retries.clear();
                }
                () = self.lead() => return,
            }
        }
    }

    /// Passes, each after a change, for as long as the future is polled.
    async fn lead(&mut self) {
        self.seen = None;
        loop {
            let retry_at = self.pass().await;
            self.wait_for_change(retry_at).await;
        }
    }

    /// Waits until an input changes or the earliest retry is due.
    async fn wait_for_change(&mut self, retry_at: Option<Instant>) {
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
                if seen.as_ref().is_none_or(|seen| now.revision != seen.revision) {
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
        tokio::select! {
            () = snapshot_changed => {}
            () = retry => {}
            changed = self.sources.touched.changed() => if changed.is_err() { std::future::pending::<()>().await },
            changed = self.sources.applied.changed() => if changed.is_err() { std::future::pending::<()>().await },
            changed = self.schemas.changed() => if changed.is_err() { std::future::pending::<()>().await },
            () = tokio::time::sleep(IDLE) => {}
        }
    }

    /// Reads the inputs once.
    fn world(&mut self) -> World {
        self.sources.touched.borrow_and_update();
        World {
            snapshot: self.sources.snapshot.load(),
            applied: self.sources.applied.borrow_and_update().clone(),
            validating: sorted(self.sources.validating.state()),
            validating_bindings: sorted(self.sources.validating_bindings.state()),
            mutating: sorted(self.sources.mutating.state()),
            mutating_bindings: sorted(self.sources.mutating_bindings.state()),
            schemas: *self.schemas.borrow_and_update(),
        }
    }

    /// Brings every stored object's status up to date; returns when the earliest failed write
    /// is due again.
    async fn pass(&mut self) -> Option<Instant> {
        let world = self.world();
        self.seen = Some(world.snapshot.clone());
        if !world.snapshot.ready {
            debug!("no policy set is published yet; no status is written before it");
            return None;
        }
        self.forget(&world);
        for policy in &world.validating {
            self.validating_policy(policy, &world).await;
        }
        for binding in &world.validating_bindings {
            self.validating_binding(binding, &world).await;
        }
        for policy in &world.mutating {
            self.mutating_policy(policy, &world).await;
        }
        for binding in &world.mutating_bindings {
            self.mutating_binding(binding, &world).await;
        }
        self.retries.values().map(|r| r.at).min()
    }

    /// Forgets what belongs to objects no longer stored.
    fn forget(&mut self, world: &World) {
        let names = |kind: Kind| -> Vec<String> {
            match kind {
                Kind::ValidatingPolicy => world.validating.iter().map(|o| o.name_any()).collect(),
                Kind::ValidatingBinding => world.validating_bindings.iter().map(|o| o.name_any()).collect(),
                Kind::MutatingPolicy => world.mutating.iter().map(|o| o.name_any()).collect(),
                Kind::MutatingBinding => world.mutating_bindings.iter().map(|o| o.name_any()).collect(),
            }
        };
        let stored: std::collections::HashSet<(Kind, String)> = [
            Kind::ValidatingPolicy,
            Kind::ValidatingBinding,
            Kind::MutatingPolicy,
            Kind::MutatingBinding,
        ]
        .into_iter()
        .flat_map(|kind| names(kind).into_iter().map(move |n| (kind, n)))
        .collect();
        self.checked.retain(|key, _| stored.contains(key));
        self.retries.retain(|key, _| stored.contains(key));
        self.compiled
            .retain(|name, _| stored.contains(&(Kind::ValidatingPolicy, name.clone())));
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
    ) -> Arc<celgate_engine::typecheck::TypeCheckReport> {
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
    fn unbound(&mut self, policy: &ValidatingAdmissionPolicy) -> Arc<ValidatingPolicy> {
        let (uid, generation) = uid_and_generation(policy);
        let name = policy.name_any();
        if let Some(c) = self.compiled.get(&name)
            && c.uid == uid
            && c.generation == generation
        {
            return c.policy.clone();
        }
        let compiled = Arc::new(compile_validating(convert::validating_policy(policy)));
        self.compiled.insert(
            name,
            Compiled {
                uid,
                generation,
                policy: compiled.clone(),
            },
        );
        compiled
    }

    fn validating_readiness(&mut self, policy: &ValidatingAdmissionPolicy, world: &World) -> Readiness {
        let (uid, generation) = uid_and_generation(policy);
        let name = policy.name_any();
        let has_bindings = world
            .validating_bindings
            .iter()
            .any(|b| b.spec.policy_name.as_deref() == Some(name.as_str()));
        let mut unbound = None;
        if !has_bindings {
            unbound = Some(self.unbound(policy));
        }
        readiness::validating_policy(
            &name,
            &uid,
            generation,
            &world.snapshot,
            &world.applied,
            || unbound.unwrap_or_else(|| Arc::new(compile_validating(convert::validating_policy(policy)))),
            has_bindings,
        )
    }

    async fn validating_policy(&mut self, policy: &ValidatingAdmissionPolicy, world: &World) {
        let key = (Kind::ValidatingPolicy, policy.name_any());
        if self.waiting(&key) {
            return;
        }
        let readiness = self.validating_readiness(policy, world);
        let Some(ready) = ready_want(&readiness) else {
            return;
        };
        let (uid, generation) = uid_and_generation(policy);
        let report = self
            .report(&key, &uid, generation, world.schemas, || {
                Policy::Validating(convert::validating_policy(policy))
            })
            .await;
        let status = typecheck::policy_status(generation, &report, ready, policy.status.as_ref());
        if policy.status.as_ref() == Some(&status) {
            return;
        }
        let events = events::changes(
            &Observed::policy(policy.status.as_ref(), true),
            &Observed::policy(Some(&status), true),
        );
        self.write(key, policy, &status, &events).await;
    }

    async fn validating_binding(&mut self, binding: &ValidatingAdmissionPolicyBinding, world: &World) {
        let key = (Kind::ValidatingBinding, binding.name_any());
        if self.waiting(&key) {
            return;
        }
        let spec = convert::validating_binding(binding);
        let policy = world
            .validating
            .iter()
            .find(|p| p.name_any() == spec.policy_name)
            .cloned();
        let policy_readiness = match &policy {
            Some(p) => Some(self.validating_readiness(p, world)),
            None => None,
        };
        let policy_ids = policy.as_ref().map(|p| uid_and_generation(&**p));
        let readiness = readiness::validating_binding(
            &spec,
            policy_ids
                .as_ref()
                .zip(policy_readiness)
                .map(|((uid, generation), r)| (uid.as_str(), *generation, r)),
            &world.snapshot,
            &world.applied,
        );
        let param_kind = policy
            .as_ref()
            .and_then(|p| p.spec.param_kind.as_ref())
            .map(convert::param_kind);
        let resolved = readiness::resolved_params(&world.snapshot, param_kind.as_ref(), spec.param_ref.as_ref());
        self.binding_status(key, binding, readiness, resolved).await;
    }

    async fn mutating_policy(&mut self, policy: &MutatingAdmissionPolicy, world: &World) {
        let key = (Kind::MutatingPolicy, policy.name_any());
        if self.waiting(&key) {
            return;
        }
        let Some(ready) = ready_want(&readiness::mutating_policy()) else {
            return;
        };
        let (uid, generation) = uid_and_generation(policy);
        let report = self
            .report(&key, &uid, generation, world.schemas, || {
                Policy::Mutating(convert::mutating_policy(policy))
            })
            .await;
        let status = typecheck::policy_status(generation, &report, ready, policy.status.as_ref());
        if policy.status.as_ref() == Some(&status) {
            return;
        }
        let events = events::changes(
            &Observed::policy(policy.status.as_ref(), false),
            &Observed::policy(Some(&status), false),
        );
        self.write(key, policy, &status, &events).await;
    }

    async fn mutating_binding(&mut self, binding: &MutatingAdmissionPolicyBinding, world: &World) {
        let key = (Kind::MutatingBinding, binding.name_any());
        if self.waiting(&key) {
            return;
        }
        let policy_name = binding.spec.policy_name.clone().unwrap_or_default();
        let policy = world.mutating.iter().find(|p| p.name_any() == policy_name);
        let readiness = readiness::mutating_binding(&policy_name, policy.is_some());
        let param_kind = policy
            .and_then(|p| p.spec.param_kind.as_ref())
            .map(convert::param_kind);
        let param_ref = binding
            .spec
            .param_ref
            .as_ref()
            .map(convert::param_ref);
        let resolved = readiness::resolved_params(&world.snapshot, param_kind.as_ref(), param_ref.as_ref());
        self.binding_status(key, binding, readiness, resolved).await;
    }

    /// Writes a binding's status if it changed.
    async fn binding_status<K>(
        &mut self,
        key: (Kind, String),
        binding: &K,
        readiness: Readiness,
        resolved_params: Option<i32>,
    ) where
        K: Resource<DynamicType = ()> + BindingObject,
    {
        let Some(ready) = ready_want(&readiness) else {
            return;
        };
        let generation = binding.meta().generation.unwrap_or_default();
        let previous = binding.status();
        let status = BindingStatus {
            observed_generation: Some(generation),
            resolved_params,
            conditions: Some(conditions::merge(
                &[ready],
                generation,
                previous.and_then(|s| s.conditions.as_deref()),
                &conditions::now(),
            )),
        };
        if previous == Some(&status) {
            return;
        }
        let events = events::changes(&Observed::binding(previous), &Observed::binding(Some(&status)));
        self.write(key, binding, &status, &events).await;
    }

    /// Applies `status` to `object` and publishes `events` about it; a failure is retried
    /// after a growing delay.
    async fn write<K, S>(&mut self, key: (Kind, String), object: &K, status: &S, events: &[kube::runtime::events::Event])
    where
        K: Resource<DynamicType = ()>,
        S: serde::Serialize,
    {
        match apply::status(&self.client, object, status).await {
            Ok(()) => {
                debug!(kind = %K::kind(&()), name = %key.1, "status written");
                self.retries.remove(&key);
                events::publish(&self.recorder, &object.object_ref(&()), events).await;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                debug!(kind = %K::kind(&()), name = %key.1, "object deleted before its status was written");
                self.retries.remove(&key);
            }
            Err(error) => {
                let retry = self.retries.entry(key.clone()).or_insert_with(|| Retry {
                    backoff: Backoff::new(RETRY_FIRST, RETRY_MAX),
                    at: Instant::now(),
                });
                let delay = retry.backoff.next_delay();
                retry.at = Instant::now() + delay;
                warn!(%error, kind = %K::kind(&()), name = %key.1, retry_in_s = delay.as_secs_f64(), "cannot write status");
            }
        }
    }
}

/// A binding kind: its status.
trait BindingObject {
    fn status(&self) -> Option<&BindingStatus>;
}

impl BindingObject for ValidatingAdmissionPolicyBinding {
    fn status(&self) -> Option<&BindingStatus> {
        self.status.as_ref()
    }
}

impl BindingObject for MutatingAdmissionPolicyBinding {
    fn status(&self) -> Option<&BindingStatus> {
        self.status.as_ref()
    }
}
