//! The schemas of the kinds bound MutatingAdmissionPolicies match, published with every policy
//! set: a patched object is typed by its kind's schema. When a change binds a mutating policy
//! to kinds whose schemas were not fetched yet, the policy controller fetches them (from the
//! cluster's OpenAPI v3) before it publishes the set holding it, so a request never meets a
//! newly bound policy without its kind's schema. They are fetched again whenever discovery
//! may have changed (a CRD changed, periodically: every mutating policy is then reconciled),
//! and retried with the reconcile's backoff when a group version's document could not be read.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use celgate_crds::MutatingAdmissionPolicy;
use celgate_engine::autogen::{self, covered_constraints};
use celgate_engine::mutate::KindSchema;
use celgate_engine::schema::Gvk;
use celgate_engine::typecheck::matched_kinds;
use celgate_kinds::convert;
use celgate_snapshot::KindSchemaView;
use futures::Stream;
use kube::ResourceExt;
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::cluster::discovery::Discovery;
use crate::cluster::schemas::SchemaCache;
use crate::cluster::types::ClusterTypes;
use crate::controllers::policy_set::Stored;

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

/// The kinds whose schemas the stored mutating policies that a stored binding names need,
/// with the served resources of one discovery.
fn needed_kinds(stored: &Stored<MutatingAdmissionPolicy>, types: &ClusterTypes) -> BTreeSet<Gvk> {
    stored
        .policies
        .iter()
        .filter(|p| stored.bindings.binds(&p.name_any()))
        .flat_map(|p| {
            let constraints = p
                .spec
                .match_constraints
                .as_ref()
                .map(convert::match_resources);
            // With the Pod controllers its autogen variants patch.
            let autogen = p.annotations().get(autogen::ANNOTATION);
            let covered = covered_constraints(constraints.as_ref(), autogen.map(String::as_str));
            matched_kinds(covered.as_ref(), types)
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
    /// A stream that yields each time discovery may have changed what is served.
    pub fn rediscovered(&self) -> impl Stream<Item = ()> + Send + Sync + 'static {
        let revisions = self.discovery.revisions();
        futures::stream::unfold(revisions, |mut revisions| async move {
            revisions.changed().await.ok()?;
            Some(((), revisions))
        })
    }

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
/// policies and the served resources.
pub struct MutatedSchemas {
    source: SchemaSource,
    revisions: watch::Receiver<u64>,
    fetched: Fetched,
}

impl MutatedSchemas {
    /// Schemas from `source`, none fetched yet.
    pub fn new(source: SchemaSource) -> Self {
        Self {
            revisions: source.discovery.revisions(),
            source,
            fetched: Fetched::default(),
        }
    }

    /// The schemas the `stored`, bound mutating policies need, when they must be fetched
    /// (again): for kinds not fetched at the current discovery revision, or after a fetch
    /// that could not read everything. The flag is false when some could not be read now.
    pub async fn refresh(
        &mut self,
        stored: &Stored<MutatingAdmissionPolicy>,
    ) -> (Option<Arc<KindSchemaView>>, bool) {
        if stored.policies.is_empty() || stored.bindings.is_empty() {
            return (None, true);
        }
        let served = match self.source.discovery.ready().await {
            Ok(served) => served,
            Err(error) => {
                warn!(%error, "cannot discover the served resources; mutating policies keep the schemas fetched before");
                return (None, false);
            }
        };
        let revision = *self.revisions.borrow_and_update();
        let kinds = needed_kinds(stored, &ClusterTypes::served(served));
        if self.fetched.revision == Some(revision)
            && self.fetched.complete
            && kinds.is_subset(&self.fetched.kinds)
        {
            return (None, true);
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
        (Some(Arc::new(view)), complete)
    }
}
