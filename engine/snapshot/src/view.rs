//! One immutable view of everything a decision reads: the bound policies, the namespaces and the
//! param kinds, each an `Arc` part that a publish replaces alone, so one change never rebuilds
//! or copies the others.

use std::collections::HashMap;
use std::sync::Arc;

use celgate_engine::model::ParamKind;
use celgate_engine::mutate::KindSchema;
use celgate_engine::schema::Gvk;
use celgate_engine::{
    ExceptionSet, KindSchemas, Namespaces, ParamKindState, ParamObjects, Params, PolicySet,
};
use serde_json::Value;

/// Everything one admission decision reads, from one moment.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Increases with every publish of any part; for logs and tests.
    pub revision: u64,
    /// False until the operator published its first policy set (the webhook is not ready).
    pub ready: bool,
    /// The compiled, bound policies.
    pub policies: Arc<PolicySet>,
    /// The schemas of the kinds the bound mutating policies match, published with them.
    pub schemas: Arc<KindSchemaView>,
    /// Every policy (bound or not) by name with its paramKind, for checks on binding writes.
    pub policy_param_kinds: Arc<PolicyParamKinds>,
    /// Every namespace, as CEL's `namespaceObject` sees it.
    pub namespaces: Arc<NamespaceView>,
    /// Whether the namespaces have been listed (until then `namespaces` is empty).
    pub namespaces_listed: bool,
    /// Every watched param kind and its objects.
    pub params: Arc<ParamViews>,
    /// The PolicyExceptions honoured (from the namespaces `--exception-namespaces` allows).
    pub exceptions: Arc<ExceptionSet>,
}

impl Snapshot {
    /// Whether a request in `namespace` (empty for cluster-scoped requests) could be decided
    /// with caches that have caught up: no param kind the bound policies use is still syncing
    /// (each has listed, or is known not to be served or to be forbidden to celgate), and the
    /// namespace is known.
    pub fn caught_up_for(&self, namespace: &str) -> bool {
        self.policies.is_empty()
            || (self.params_synced()
                && (namespace.is_empty() || self.namespaces.get(namespace).is_some()))
    }

    /// Whether decisions on any object could be made with caches that have caught up: no param
    /// kind the bound policies use is still syncing, and the namespaces have been listed. The
    /// audit scans only then: a scan while a param kind syncs finds every object of its
    /// bindings failing ("not yet synced"), and is done again once it has.
    pub fn caught_up(&self) -> bool {
        self.params_synced() && self.namespaces_listed
    }

    /// Whether no param kind the bound policies use is still syncing (each has listed, or is
    /// known not to be served or to be forbidden to celgate).
    fn params_synced(&self) -> bool {
        (self.policies.param_kinds().iter())
            .all(|kind| !matches!(self.params.kind(kind), ParamKindState::Syncing))
    }
}

/// The schemas of kinds by group, version and kind: those the bound mutating policies can
/// match that the API server publishes an OpenAPI v3 schema for.
#[derive(Clone, Debug, Default)]
pub struct KindSchemaView(HashMap<Gvk, KindSchema>);

impl KindSchemaView {
    /// A view of these schemas.
    pub fn new(schemas: impl IntoIterator<Item = (Gvk, KindSchema)>) -> Self {
        Self(schemas.into_iter().collect())
    }

    /// How many kinds have a schema.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no kind has a schema.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl KindSchemas for KindSchemaView {
    fn schema(&self, gvk: &Gvk) -> Option<&KindSchema> {
        self.0.get(gvk)
    }
}

/// Every namespace by name, each converted once when its watch event arrived. A review looks
/// its namespace up once per matching policy: hashed with foldhash (seeded per process), not
/// SipHash, which cost most of the lookup.
#[derive(Clone, Debug, Default)]
pub struct NamespaceView(hashbrown::HashMap<Arc<str>, Arc<Value>>);

impl NamespaceView {
    /// A view of the given namespaces.
    pub fn new(namespaces: impl IntoIterator<Item = (String, Value)>) -> Self {
        Self(
            namespaces
                .into_iter()
                .map(|(name, object)| (Arc::from(name), Arc::new(object)))
                .collect(),
        )
    }

    /// Inserts or replaces one namespace.
    pub fn insert(&mut self, name: &str, object: Arc<Value>) {
        self.0.insert(Arc::from(name), object);
    }

    /// Removes one namespace.
    pub fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    /// How many namespaces the view holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when the view holds no namespace.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Namespaces for NamespaceView {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).map(|v| &**v)
    }
}

/// How the watch of one param kind stands.
#[derive(Debug, Clone)]
pub enum ParamKindEntry {
    /// Listed and watched.
    Ready(Arc<ParamObjects>),
    /// Being resolved or listed.
    Syncing,
    /// Not served by the API server (retried until it is).
    NotServed,
    /// Served, but the API server forbids celgate to look it up, list or watch it (retried
    /// until it allows it); the message says which permission is missing. Requests do not
    /// wait for it: a binding with a paramRef fails at once under its failurePolicy with it.
    Forbidden(Arc<str>),
    /// Its selected objects are more than celgate keeps (`--param-max-mib`); the message says
    /// how much and what to change. Requests do not wait for it: a binding with a paramRef
    /// fails at once under its failurePolicy with it.
    TooLarge(Arc<str>),
}

/// `(apiVersion, kind)` of a param kind.
pub type ParamKey = (String, String);

/// Every watched param kind, by apiVersion, then kind (so the request path looks one up by
/// `&str` without building a key; once per matching policy with params, hashed as
/// [`NamespaceView`]'s names are).
#[derive(Debug, Default, Clone)]
pub struct ParamViews(hashbrown::HashMap<String, hashbrown::HashMap<String, ParamKindEntry>>);

impl ParamViews {
    /// Sets the entry of one param kind; `None` removes it.
    pub fn set(&mut self, key: &ParamKey, entry: Option<ParamKindEntry>) {
        let (api_version, kind) = key;
        match entry {
            Some(e) => {
                self.0
                    .entry(api_version.clone())
                    .or_default()
                    .insert(kind.clone(), e);
            }
            None => {
                if let Some(kinds) = self.0.get_mut(api_version) {
                    kinds.remove(kind);
                    if kinds.is_empty() {
                        self.0.remove(api_version);
                    }
                }
            }
        }
    }

    /// The entry of one param kind, if it is watched.
    pub fn entry(&self, api_version: &str, kind: &str) -> Option<&ParamKindEntry> {
        self.0.get(api_version).and_then(|kinds| kinds.get(kind))
    }
}

impl Params for ParamViews {
    fn kind(&self, kind: &ParamKind) -> ParamKindState<'_> {
        match self.entry(&kind.api_version, &kind.kind) {
            Some(ParamKindEntry::Ready(objects)) => ParamKindState::Ready(objects),
            Some(ParamKindEntry::NotServed) => ParamKindState::NotServed,
            Some(ParamKindEntry::Forbidden(message)) => ParamKindState::Forbidden(message),
            Some(ParamKindEntry::TooLarge(message)) => ParamKindState::TooLarge(message),
            Some(ParamKindEntry::Syncing) | None => ParamKindState::Syncing,
        }
    }
}

/// Every policy (bound or not) by name, with its paramKind if it has one, for the param access
/// check on binding writes.
#[derive(Clone, Debug, Default)]
pub struct PolicyParamKinds {
    /// The ValidatingAdmissionPolicies.
    pub validating: HashMap<String, Option<ParamKind>>,
    /// The MutatingAdmissionPolicies.
    pub mutating: HashMap<String, Option<ParamKind>>,
}
