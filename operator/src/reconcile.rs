//! Watches the four CRDs and namespaces, recompiles what changed (keyed by uid + generation),
//! publishes a new immutable snapshot to the webhook, and keeps the webhook configurations'
//! rules in step with the bound policies.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use celgate_crds::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use celgate_engine::{BoundPolicy, PolicySet, ValidatingPolicy, compile_validating};
use celgate_snapshot::{NamespaceView, PolicyParamKinds, SnapshotStore};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::convert;
use crate::params::ParamWatches;
use crate::registration::{self, Endpoint};

/// Everything the reconciler needs.
pub struct Reconciler {
    /// API client.
    pub client: Client,
    /// The snapshot store the webhook reads.
    pub store: Arc<SnapshotStore>,
    /// Where the API server reaches the webhook.
    pub endpoint: Endpoint,
    /// The CA the API server must trust.
    pub ca_pem: String,
    /// celgate's own namespace, excluded from the webhooks.
    pub namespace: String,
}

/// Starts a reflector for `K` that wakes `notify` on every change; returns its store.
fn watch<K>(api: Api<K>, notify: Arc<Notify>) -> Store<K>
where
    K: Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(_) => notify.notify_one(),
                Err(e) => {
                    warn!(kind = std::any::type_name::<K>(), error = %e, "watch failed; retrying")
                }
            }
        }
    });
    reader
}

/// Compiled policies by uid, with the generation they were compiled at.
type CompileCache = HashMap<String, (i64, Arc<ValidatingPolicy>)>;

/// Builds the policy set from the stores, compiling only policies whose generation changed.
fn build(
    policies: &Store<ValidatingAdmissionPolicy>,
    bindings: &Store<ValidatingAdmissionPolicyBinding>,
    cache: &mut CompileCache,
) -> PolicySet {
    let mut by_name: HashMap<String, Vec<Arc<celgate_engine::model::ValidatingBindingSpec>>> =
        HashMap::new();
    let mut all_bindings = bindings.state();
    all_bindings.sort_by_key(|b| b.name_any());
    for b in all_bindings {
        let spec = convert::validating_binding(&b);
        by_name
            .entry(spec.policy_name.clone())
            .or_default()
            .push(Arc::new(spec));
    }
    let mut fresh = CompileCache::new();
    let mut validating = Vec::new();
    let mut all_policies = policies.state();
    all_policies.sort_by_key(|p| p.name_any());
    for p in all_policies {
        let uid = p.uid().unwrap_or_default();
        let generation = p.metadata.generation.unwrap_or_default();
        let compiled = match cache.remove(&uid) {
            Some((g, c)) if g == generation => c,
            _ => {
                let compiled = Arc::new(compile_validating(convert::validating_policy(&p)));
                for (field, error) in compiled.compile_errors() {
                    warn!(policy = %compiled.name, %field, %error, "expression does not compile; the policy's failurePolicy decides matching requests");
                }
                compiled
            }
        };
        fresh.insert(uid, (generation, compiled.clone()));
        // Only policies with at least one binding are evaluated; bindings naming a missing
        // policy are ignored, as upstream.
        if let Some(bindings) = by_name.remove(&*compiled.name) {
            validating.push(BoundPolicy {
                policy: compiled,
                bindings,
            });
        }
    }
    *cache = fresh;
    PolicySet { validating }
}

/// The Namespace as CEL's `namespaceObject` sees it: the metadata fields upstream copies, spec
/// and status (managed fields and owner references are left out).
fn namespace_object(ns: &Namespace) -> serde_json::Value {
    let m = &ns.metadata;
    let metadata = serde_json::json!({
        "name": m.name, "generateName": m.generate_name, "namespace": m.namespace,
        "labels": m.labels, "annotations": m.annotations, "uid": m.uid,
        "creationTimestamp": m.creation_timestamp, "deletionGracePeriodSeconds": m.deletion_grace_period_seconds,
        "deletionTimestamp": m.deletion_timestamp, "generation": m.generation,
        "resourceVersion": m.resource_version, "finalizers": m.finalizers,
    });
    // Absent fields stay absent (`has()` is false), as in the API server's JSON.
    let metadata: serde_json::Map<String, serde_json::Value> = metadata
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut obj = serde_json::Map::new();
    obj.insert("metadata".into(), serde_json::Value::Object(metadata));
    for (key, value) in [
        ("spec", serde_json::to_value(&ns.spec)),
        ("status", serde_json::to_value(&ns.status)),
    ] {
        if let Some(v) = value.ok().filter(|v| !v.is_null()) {
            obj.insert(key.into(), v);
        }
    }
    serde_json::Value::Object(obj)
}

fn namespace_view(store: &Store<Namespace>) -> NamespaceView {
    NamespaceView::new(
        store
            .state()
            .iter()
            .map(|ns| (ns.name_any(), namespace_object(ns))),
    )
}

/// Every stored policy's paramKind, by policy name (for checks on binding writes).
fn param_kinds<K>(
    store: &Store<K>,
    param_kind: impl Fn(&K) -> Option<&celgate_crds::common::ParamKind>,
) -> HashMap<String, Option<celgate_engine::model::ParamKind>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    store
        .state()
        .iter()
        .map(|p| (p.name_any(), param_kind(p).map(convert::param_kind)))
        .collect()
}

impl Reconciler {
    /// Runs until the process stops: watch, compile, publish, register.
    pub async fn run(self) {
        let notify = Arc::new(Notify::new());
        let ns_notify = Arc::new(Notify::new());
        let policies = watch(
            Api::<ValidatingAdmissionPolicy>::all(self.client.clone()),
            notify.clone(),
        );
        let bindings = watch(
            Api::<ValidatingAdmissionPolicyBinding>::all(self.client.clone()),
            notify.clone(),
        );
        let mutating = watch(
            Api::<MutatingAdmissionPolicy>::all(self.client.clone()),
            notify.clone(),
        );
        let mutating_bindings = watch(
            Api::<MutatingAdmissionPolicyBinding>::all(self.client.clone()),
            notify.clone(),
        );
        let namespaces = watch(
            Api::<Namespace>::all(self.client.clone()),
            ns_notify.clone(),
        );

        let state = self.store.clone();
        let ns_store = namespaces.clone();
        tokio::spawn(async move {
            loop {
                ns_notify.notified().await;
                state.publish_namespaces(namespace_view(&ns_store));
            }
        });

        for (kind, ready) in [
            (
                "ValidatingAdmissionPolicy",
                policies.wait_until_ready().await,
            ),
            (
                "ValidatingAdmissionPolicyBinding",
                bindings.wait_until_ready().await,
            ),
            ("MutatingAdmissionPolicy", mutating.wait_until_ready().await),
            (
                "MutatingAdmissionPolicyBinding",
                mutating_bindings.wait_until_ready().await,
            ),
            ("Namespace", namespaces.wait_until_ready().await),
        ] {
            if let Err(e) = ready {
                warn!(kind, error = %e, "initial list did not complete");
            }
        }
        self.store.publish_namespaces(namespace_view(&namespaces));

        let mut param_watches = ParamWatches::new(self.client.clone(), self.store.clone());
        let mut cache = CompileCache::new();
        let mut generation = 0u64;
        let mut registered: Option<serde_json::Value> = None;
        let mut mutating_seen = 0;
        loop {
            let started = Instant::now();
            let set = build(&policies, &bindings, &mut cache);
            let validating = registration::validating_configuration(
                &set,
                &self.endpoint,
                &self.ca_pem,
                &self.namespace,
            );
            let mutating_cfg = registration::mutating_configuration();
            let bound = set.validating.len();
            generation += 1;
            // Param watches first, so a new policy's params are syncing (and requests wait for
            // them) before it is published; then the snapshot, so a policy is enforced as soon
            // as the API server routes matching requests here.
            param_watches.sync(&set);
            self.store.publish_policies(
                set,
                PolicyParamKinds {
                    validating: param_kinds(&policies, |p| p.spec.param_kind.as_ref()),
                    mutating: param_kinds(&mutating, |p| p.spec.param_kind.as_ref()),
                },
            );
            let desired = serde_json::to_value(&validating).ok();
            if desired != registered {
                match registration::apply(&self.client, &validating, &mutating_cfg).await {
                    Ok(()) => registered = desired,
                    Err(e) => {
                        warn!(error = %e, "cannot update the webhook configurations; retrying in 1s");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        notify.notify_one();
                    }
                }
            }
            let stored_mutating = mutating.state().len();
            if stored_mutating != mutating_seen {
                mutating_seen = stored_mutating;
                if stored_mutating > 0 {
                    warn!(
                        count = stored_mutating,
                        "MutatingAdmissionPolicies are stored but this version of celgate does not enforce them yet"
                    );
                }
            }
            info!(
                generation,
                bound_policies = bound,
                elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
                "published policy snapshot"
            );
            notify.notified().await;
        }
    }
}
