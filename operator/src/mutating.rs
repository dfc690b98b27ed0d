//! MutatingAdmissionPolicies and their bindings: followed into their reflector stores, each
//! policy compiled once per uid, generation and apply semantics, and published through the
//! policy controller's context with the schemas of the kinds the bound policies match.
//!
//! Schemas come first: when a change binds a policy to kinds whose schemas were not fetched
//! yet, they are fetched (from the cluster's OpenAPI v3) before the set holding it is
//! published, so a request never meets a newly bound policy without its kind's schema. They
//! are fetched again whenever discovery may have changed (a CRD changed, periodically), and
//! retried with backoff when a group version's document could not be read.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use celgate_crds::{MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding};
use celgate_engine::mutate::KindSchema;
use celgate_engine::schema::Gvk;
use celgate_engine::typecheck::matched_kinds;
use celgate_snapshot::KindSchemaView;
use futures::{StreamExt, TryStreamExt};
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::backoff::Backoff;
use crate::changes::{Change, Changes};
use crate::cluster_types::ClusterTypes;
use crate::discovery::Discovery;
use crate::metrics::{self, resource};
use crate::policies::{Context, Watched};
use crate::schemas::SchemaCache;
use crate::{convert, policy_set};

/// First delay before schemas that could not be fetched are fetched again.
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest delay between two tries.
const RETRY_MAX: Duration = Duration::from_secs(300);

/// Where the schemas of mutated kinds come from.
#[derive(Clone)]
pub struct SchemaSource {
    /// The served resources (which kinds a rule matches).
    pub discovery: Discovery,
    /// The OpenAPI v3 documents.
    pub cache: Arc<SchemaCache>,
    /// The API groups Kubernetes itself serves: their objects are decoded strictly after a
    /// JSON patch, as kube-apiserver decodes built-in kinds.
    pub built_in_groups: Arc<HashSet<String>>,
}

/// An event of either watch.
enum Event {
    Policy(watcher::Event<MutatingAdmissionPolicy>),
    Binding(watcher::Event<MutatingAdmissionPolicyBinding>),
}

/// The kinds whose schemas the stored mutating policies that a stored binding names need,
/// with the served resources of one discovery.
fn needed_kinds(
    policies: &[Arc<MutatingAdmissionPolicy>],
    bindings: &[Arc<MutatingAdmissionPolicyBinding>],
    types: &ClusterTypes,
) -> BTreeSet<Gvk> {
    let bound: HashSet<&str> = bindings
        .iter()
        .filter_map(|b| b.spec.policy_name.as_deref())
        .collect();
    policies
        .iter()
        .filter(|p| bound.contains(p.name_any().as_str()))
        .flat_map(|p| {
            let constraints = p
                .spec
                .match_constraints
                .as_ref()
                .map(convert::match_resources);
            matched_kinds(constraints.as_ref(), types)
        })
        .collect()
}

/// What was fetched last: for which kinds, at which discovery revision, and whether every
/// group version could be read.
#[derive(Default)]
struct Fetched {
    kinds: BTreeSet<Gvk>,
    revision: Option<u64>,
    complete: bool,
}

impl SchemaSource {
    /// Fetches the schemas of `kinds` into a view; `complete` is false when a group version
    /// (or the index) could not be read, so some kinds lack a schema they may have.
    async fn fetch(&self, kinds: &BTreeSet<Gvk>) -> (KindSchemaView, bool) {
        // A subresource's kind is published with the resource serving it; without discovery
        // only the kinds' own group versions are read.
        let served = self.discovery.ready().await.unwrap_or_default();
        match self.cache.fetch(kinds, &served).await {
            Ok(fetched) => {
                for failure in &fetched.failures {
                    warn!(error = %failure, "cannot read the schemas of a kind a mutating policy matches; its requests get 503 until they can be read");
                }
                let view = KindSchemaView::new(fetched.schemas.into_iter().map(|(gvk, schema)| {
                    let built_in = self.built_in_groups.contains(&gvk.group);
                    (gvk, KindSchema { schema, built_in })
                }));
                (view, fetched.failures.is_empty())
            }
            Err(error) => {
                warn!(%error, "cannot read the cluster's OpenAPI index; mutating policies get 503 for kinds whose schemas are not known yet");
                (KindSchemaView::default(), false)
            }
        }
    }
}

/// Keeps the schemas published with the policy set in step with the bound mutating
/// policies and the served resources, then publishes.
struct Schemas {
    source: SchemaSource,
    revisions: watch::Receiver<u64>,
    fetched: Fetched,
    retry: Backoff,
    retry_at: Option<Instant>,
}

impl Schemas {
    /// Compiles `staged` (the policies whose events arrived, unless already compiled at their
    /// generation) and publishes the set built from the stores with them, fetching first the
    /// schemas it needs that were not fetched at the current discovery revision (all of them
    /// when `refetch`).
    async fn publish(
        &mut self,
        ctx: &Context,
        staged: Vec<Arc<MutatingAdmissionPolicy>>,
        refetch: bool,
    ) {
        metrics::reconciled(metrics::MUTATING_POLICIES);
        let compiled = staged
            .into_iter()
            .filter(|p| !ctx.is_current_mutating(p))
            .map(|p| {
                let compiled = policy_set::compile_mutating_policy(&p);
                (p, compiled)
            })
            .collect();
        let schemas = self.schemas(ctx, refetch).await;
        ctx.publish_mutating(compiled, schemas);
    }

    /// The schemas the stored, bound mutating policies need, when they must be fetched (again).
    async fn schemas(&mut self, ctx: &Context, refetch: bool) -> Option<Arc<KindSchemaView>> {
        let (policies, bindings) = ctx.mutating_stores();
        let (policies, bindings) = (policies.state(), bindings.state());
        if policies.is_empty() || bindings.is_empty() {
            return None;
        }
        let served = match self.source.discovery.ready().await {
            Ok(served) => served,
            Err(error) => {
                warn!(%error, "cannot discover the served resources; mutating policies keep the schemas fetched before");
                self.schedule_retry();
                return None;
            }
        };
        let revision = *self.revisions.borrow_and_update();
        let kinds = needed_kinds(&policies, &bindings, &ClusterTypes::served(served));
        let current = self.fetched.revision == Some(revision)
            && self.fetched.complete
            && kinds.is_subset(&self.fetched.kinds);
        if current && !refetch {
            return None;
        }
        let (view, complete) = self.source.fetch(&kinds).await;
        debug!(
            kinds = kinds.len(),
            schemas = view.len(),
            "fetched the schemas of the kinds mutating policies match"
        );
        self.fetched = Fetched {
            kinds,
            revision: Some(revision),
            complete,
        };
        if complete {
            self.retry.reset();
            self.retry_at = None;
        } else {
            self.schedule_retry();
        }
        Some(Arc::new(view))
    }

    fn schedule_retry(&mut self) {
        metrics::reconcile_failed(metrics::MUTATING_POLICIES);
        self.retry_at = Some(Instant::now() + self.retry.next_delay());
    }
}

/// Follows MutatingAdmissionPolicies and their bindings into the stores behind
/// `policy_writer` and `binding_writer`, compiles and publishes them through `ctx` with the
/// schemas `source` provides, until the process stops.
pub async fn run(
    client: Client,
    ctx: Arc<Context>,
    policy_writer: Writer<MutatingAdmissionPolicy>,
    binding_writer: Writer<MutatingAdmissionPolicyBinding>,
    source: SchemaSource,
) {
    let policies = watcher(Api::all(client.clone()), watcher::Config::default())
        .backoff(crate::backoff::watch())
        .modify(crate::policies::without_managed_fields)
        .reflect(policy_writer)
        .inspect(metrics::watch(resource::MUTATING_POLICIES, true))
        .map_ok(Event::Policy);
    let bindings = watcher(Api::all(client), watcher::Config::default())
        .backoff(crate::backoff::watch())
        .modify(crate::policies::without_managed_fields)
        .reflect(binding_writer)
        .inspect(metrics::watch(resource::MUTATING_BINDINGS, true))
        .map_ok(Event::Binding);
    let events = futures::stream::select(policies, bindings);
    let mut events = std::pin::pin!(events);
    let (mut policy_changes, mut binding_changes) = (Changes::default(), Changes::default());
    let mut schemas = Schemas {
        revisions: source.discovery.revisions(),
        source,
        fetched: Fetched::default(),
        retry: Backoff::new(RETRY_FIRST, RETRY_MAX),
        retry_at: None,
    };
    let mut revisions = schemas.revisions.clone();
    loop {
        let retry_at = schemas.retry_at;
        let mut staged = Vec::new();
        let refetch = tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return };
                if event.is_ok() {
                    ctx.touch();
                }
                match event {
                    Ok(Event::Policy(event)) => match policy_changes.next(event) {
                        Some(Change::Apply(p)) => staged.push(Arc::new(p)),
                        Some(Change::Delete(_)) => {}
                        Some(Change::Replace(all)) => {
                            staged.extend(all.into_iter().map(Arc::new));
                            ctx.record_listed(Watched::MutatingPolicies);
                        }
                        None => continue,
                    },
                    Ok(Event::Binding(event)) => match binding_changes.next(event) {
                        Some(Change::Replace(_)) => ctx.record_listed(Watched::MutatingBindings),
                        Some(_) => {}
                        None => continue,
                    },
                    Err(error) => {
                        warn!(%error, "MutatingAdmissionPolicy watch failed; retrying");
                        continue;
                    }
                }
                false
            }
            changed = revisions.changed() => {
                if changed.is_err() {
                    return;
                }
                true
            }
            () = sleep_until(retry_at) => true,
        };
        schemas.publish(&ctx, staged, refetch).await;
    }
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
