//! Watches of param kinds: one per paramKind the bound policies use, started when first used and
//! stopped when no policy uses it (so a kind bound again later is watched afresh, never frozen).
//! A kind the API server does not serve is retried until it appears.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use celgate_engine::{ParamObjects, PolicySet};
use celgate_snapshot::{ParamKindEntry, SnapshotStore};
use futures::StreamExt;
use kube::api::{DynamicObject, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::task::JoinHandle;
use tracing::{info, warn};

/// How often an unserved param kind is looked up again.
const RETRY_UNSERVED: Duration = Duration::from_secs(2);

/// (apiVersion, kind) of a param kind.
pub type ParamKey = (String, String);

/// The running param watches.
pub struct ParamWatches {
    client: Client,
    state: Arc<SnapshotStore>,
    running: HashMap<ParamKey, JoinHandle<()>>,
}

impl ParamWatches {
    /// No watches yet.
    pub fn new(client: Client, state: Arc<SnapshotStore>) -> Self {
        Self {
            client,
            state,
            running: HashMap::new(),
        }
    }

    /// Starts watches for param kinds newly used by `set` and stops those no longer used.
    pub fn sync(&mut self, set: &PolicySet) {
        let wanted: HashSet<ParamKey> = set
            .validating
            .iter()
            .filter_map(|b| b.policy.spec.param_kind.as_ref())
            .map(|k| (k.api_version.clone(), k.kind.clone()))
            .collect();
        self.running.retain(|key, task| {
            let keep = wanted.contains(key);
            if !keep {
                info!(api_version = %key.0, kind = %key.1, "no policy uses this param kind any more; stopping its watch");
                task.abort();
                self.state.publish_param_kind(key, None);
            }
            keep
        });
        for key in wanted {
            if self.running.contains_key(&key) {
                continue;
            }
            self.state
                .publish_param_kind(&key, Some(ParamKindEntry::Syncing));
            let task = tokio::spawn(watch_kind(
                self.client.clone(),
                self.state.clone(),
                key.clone(),
            ));
            self.running.insert(key, task);
        }
    }
}

fn parse_gvk(key: &ParamKey) -> GroupVersionKind {
    let (group, version) = key.0.split_once('/').unwrap_or(("", key.0.as_str()));
    GroupVersionKind::gvk(group, version, &key.1)
}

fn objects(store: &Store<DynamicObject>, namespaced: bool, key: &ParamKey) -> ParamObjects {
    let mut objects = BTreeMap::new();
    for obj in store.state() {
        let ns = if namespaced {
            obj.namespace().unwrap_or_default()
        } else {
            String::new()
        };
        let name = obj.name_any();
        match serde_json::to_value(obj.as_ref()) {
            Ok(mut v) => {
                // Params carry apiVersion and kind from the paramKind, as upstream wraps them.
                v["apiVersion"] = key.0.clone().into();
                v["kind"] = key.1.clone().into();
                objects.insert((ns, name), Arc::new(v));
            }
            Err(e) => warn!(%name, error = %e, "cannot convert a param object"),
        }
    }
    ParamObjects {
        namespaced,
        objects,
    }
}

async fn watch_kind(client: Client, state: Arc<SnapshotStore>, key: ParamKey) {
    let gvk = parse_gvk(&key);
    let (resource, caps) = loop {
        match discovery::pinned_kind(&client, &gvk).await {
            Ok(found) => break found,
            Err(e) => {
                warn!(api_version = %key.0, kind = %key.1, error = %e, "param kind is not served; policies using it fail per their failurePolicy until it is");
                state.publish_param_kind(&key, Some(ParamKindEntry::NotServed));
                tokio::time::sleep(RETRY_UNSERVED).await;
            }
        }
    };
    let namespaced = caps.scope == Scope::Namespaced;
    state.publish_param_kind(&key, Some(ParamKindEntry::Syncing));
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
    let reader = writer.as_reader();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut synced = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) if !synced => {}
            Ok(_) => {
                synced = true;
                state.publish_param_kind(
                    &key,
                    Some(ParamKindEntry::Ready(Arc::new(objects(
                        &reader, namespaced, &key,
                    )))),
                );
            }
            Err(e) => {
                warn!(api_version = %key.0, kind = %key.1, error = %e, "param watch failed; retrying")
            }
        }
    }
}
