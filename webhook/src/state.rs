//! What the request path reads: the current snapshot and namespace labels, both swapped whole.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use celgate_cel::{Authorizer, Compatibility};
use celgate_engine::apivalidation::FieldError;
use celgate_engine::model::ParamKind;
use celgate_engine::paramaccess::{self, BindingKind, BoundPolicyParams, Writer};
use celgate_engine::{Namespaces, ParamKindState, ParamObjects, Params, PolicySet, Request};
use serde_json::Value;
use tokio::sync::Notify;

use crate::metrics::Metrics;

/// One immutable, compiled view of every policy and binding.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// The compiled, bound policies.
    pub policies: PolicySet,
    /// Increases with every publish; for logs and tests.
    pub generation: u64,
}

/// Every namespace, by name, as CEL's `namespaceObject` sees it.
#[derive(Debug, Default)]
pub struct NamespaceCache(pub HashMap<String, Value>);

impl Namespaces for NamespaceCache {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }
}

/// Makes authorizers that answer `authorizer` checks for a request's user (the operator's
/// SubjectAccessReview client). Each authorizer serves one request and may cache within it.
pub trait AuthorizerSource: Send + Sync + std::fmt::Debug {
    /// An authorizer for the user described by the request's `userInfo` JSON.
    fn for_user(&self, user_info: &Value) -> Arc<dyn Authorizer>;

    /// The resource (plural) of a param kind, if the API server serves it.
    fn resource_for(&self, kind: &ParamKind) -> Option<String>;
}

/// How the operator's watch of one param kind stands.
#[derive(Debug, Clone)]
pub enum ParamKindEntry {
    /// Listed and watched.
    Ready(Arc<ParamObjects>),
    /// Being resolved or listed.
    Syncing,
    /// Not served by the API server (retried until it is).
    NotServed,
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

/// Every watched param kind, by apiVersion, then kind (so the request path looks one up by
/// `&str` without building a key).
#[derive(Debug, Default, Clone)]
pub struct ParamCache(pub HashMap<String, HashMap<String, ParamKindEntry>>);

impl Params for ParamCache {
    fn kind(&self, kind: &ParamKind) -> ParamKindState<'_> {
        match self
            .0
            .get(kind.api_version.as_str())
            .and_then(|kinds| kinds.get(kind.kind.as_str()))
        {
            Some(ParamKindEntry::Ready(objects)) => ParamKindState::Ready(objects),
            Some(ParamKindEntry::NotServed) => ParamKindState::NotServed,
            Some(ParamKindEntry::Syncing) | None => ParamKindState::Syncing,
        }
    }
}

/// State shared by the operator (writer) and the webhook (reader).
#[derive(Debug, Default)]
pub struct State {
    snapshot: ArcSwapOption<Snapshot>,
    namespaces: ArcSwap<NamespaceCache>,
    params: ArcSwap<ParamCache>,
    params_changed: Notify,
    namespaces_changed: Notify,
    authorizers: ArcSwapOption<Arc<dyn AuthorizerSource>>,
    policy_param_kinds: ArcSwap<PolicyParamKinds>,
    /// Which CEL libraries new expressions in policy writes may use.
    pub compatibility: Compatibility,
    /// The webhook's metrics.
    pub metrics: Metrics,
}

impl State {
    /// A state with no snapshot yet (the webhook is not ready).
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A state with no snapshot yet, validating policy writes at `compatibility`.
    pub fn with_compatibility(compatibility: Compatibility) -> Arc<Self> {
        Arc::new(Self {
            compatibility,
            ..Self::default()
        })
    }

    /// Publishes a new snapshot; requests that arrive afterwards are decided by it.
    pub fn publish(&self, snapshot: Snapshot) {
        self.snapshot.store(Some(Arc::new(snapshot)));
    }

    /// The current snapshot, or `None` before the first publish.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.snapshot.load_full()
    }

    /// Replaces the namespaces and wakes requests waiting for one.
    pub fn publish_namespaces(&self, namespaces: NamespaceCache) {
        self.namespaces.store(Arc::new(namespaces));
        self.namespaces_changed.notify_waiters();
    }

    /// Waits until the namespace `name` is in the cache, or until `deadline`: a namespace
    /// created just before a request in it may not have reached celgate's watch yet, where
    /// kube-apiserver would fall back to a live read.
    pub async fn wait_for_namespace(&self, name: &str, deadline: tokio::time::Instant) {
        while self.namespaces().get(name).is_none() {
            let changed = self.namespaces_changed.notified();
            if self.namespaces().get(name).is_some()
                || tokio::time::timeout_at(deadline, changed).await.is_err()
            {
                return;
            }
        }
    }

    /// The current namespaces.
    pub fn namespaces(&self) -> Arc<NamespaceCache> {
        self.namespaces.load_full()
    }

    /// Sets the entry of one param kind (`None` removes it) and wakes requests waiting for it.
    pub fn publish_param_kind(&self, key: (String, String), entry: Option<ParamKindEntry>) {
        self.params.rcu(|cache| {
            let mut next = ParamCache::clone(cache);
            let (api_version, kind) = &key;
            match &entry {
                Some(e) => {
                    next.0
                        .entry(api_version.clone())
                        .or_default()
                        .insert(kind.clone(), e.clone());
                }
                None => {
                    if let Some(kinds) = next.0.get_mut(api_version) {
                        kinds.remove(kind);
                        if kinds.is_empty() {
                            next.0.remove(api_version);
                        }
                    }
                }
            }
            next
        });
        self.params_changed.notify_waiters();
    }

    /// The current param cache.
    pub fn params(&self) -> Arc<ParamCache> {
        self.params.load_full()
    }

    /// Waits until every param kind the snapshot's policies use has finished syncing, or until
    /// `deadline`; a request right after a restart then sees params instead of a spurious denial.
    pub async fn wait_for_params(&self, snapshot: &Snapshot, deadline: tokio::time::Instant) {
        let syncing = |cache: &ParamCache| {
            snapshot.policies.validating.iter().any(|b| {
                b.policy
                    .spec
                    .param_kind
                    .as_ref()
                    .is_some_and(|k| matches!(cache.kind(k), ParamKindState::Syncing))
            })
        };
        while syncing(&self.params()) {
            let changed = self.params_changed.notified();
            if syncing(&self.params()) && tokio::time::timeout_at(deadline, changed).await.is_err()
            {
                return;
            }
        }
    }

    /// Sets how requests' users are authorized (`authorizer` in expressions).
    pub fn set_authorizers(&self, source: Arc<dyn AuthorizerSource>) {
        self.authorizers.store(Some(Arc::new(source)));
    }

    /// Records the paramKind of every policy (bound or not), for checks on binding writes.
    pub fn publish_policy_param_kinds(&self, kinds: PolicyParamKinds) {
        self.policy_param_kinds.store(Arc::new(kinds));
    }

    /// The param access errors of a write of a policy or binding (empty when allowed, or
    /// when no authorizer source is set).
    pub fn param_access_errors(&self, req: &Request<'_>) -> Vec<FieldError> {
        let Some(source) = self.authorizers.load_full() else {
            return Vec::new();
        };
        let user_info = req.raw.get("userInfo").unwrap_or(&Value::Null);
        let writer = Writer::from_user_info(user_info);
        let authz = source.for_user(user_info);
        let resolve = |k: &ParamKind| source.resource_for(k);
        let old = Some(req.old_object).filter(|o| !o.is_null());
        let binding = |kind: BindingKind, policies: &HashMap<String, Option<ParamKind>>| {
            let policy = req
                .object
                .get("spec")
                .and_then(|s| s.get("policyName"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            let params = match policies.get(policy) {
                Some(pk) => BoundPolicyParams::Found(pk.as_ref()),
                None => BoundPolicyParams::Missing,
            };
            paramaccess::check_binding(
                req.object,
                old,
                &writer,
                kind,
                params,
                &resolve,
                authz.as_ref(),
            )
        };
        let kinds = self.policy_param_kinds.load();
        match req.kind.name {
            "ValidatingAdmissionPolicy" | "MutatingAdmissionPolicy" => {
                paramaccess::check_policy(req.object, old, &writer, &resolve, authz.as_ref())
            }
            "ValidatingAdmissionPolicyBinding" => {
                binding(BindingKind::Validating, &kinds.validating)
            }
            "MutatingAdmissionPolicyBinding" => binding(BindingKind::Mutating, &kinds.mutating),
            _ => Vec::new(),
        }
    }

    /// An authorizer for one request's user, if an authorizer source is set.
    pub fn authorizer_for(&self, user: &Value) -> Option<Arc<dyn Authorizer>> {
        self.authorizers.load().as_ref().map(|s| s.for_user(user))
    }
}
