//! The namespace view the webhook reads (`namespaceObject`, namespace selectors): each watch
//! event converts only the namespace it names; a completed list replaces the whole view.

use std::sync::Arc;

use celgate_snapshot::{NamespaceView, SnapshotStore};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::{Map, Value};
use tracing::warn;

use crate::controllers::changes::{Change, Changes};
use crate::metrics::{self, resource};

/// Follows every namespace into `store` until the process stops. A failed watch keeps the
/// last view and is retried with backoff.
pub async fn run(client: Client, store: Arc<SnapshotStore>) {
    let events = crate::retry::watch(Api::<Namespace>::all(client), watcher::Config::default())
        .inspect(metrics::watch(resource::NAMESPACES, false));
    let mut events = std::pin::pin!(events);
    let mut changes = Changes::default();
    while let Some(event) = events.next().await {
        match event {
            Ok(event) => {
                if let Some(change) = changes.next(event) {
                    publish(&store, change);
                }
            }
            Err(e) => {
                warn!(error = %e, "namespace watch failed; namespaces keep their last known state until it recovers")
            }
        }
    }
}

/// Publishes one change: a namespace converted alone, or a new view after a list.
pub fn publish(store: &SnapshotStore, change: Change<Namespace>) {
    match change {
        Change::Apply(ns) => store.publish_namespace(&ns.name_any(), Some(namespace_object(&ns))),
        Change::Delete(ns) => store.publish_namespace(&ns.name_any(), None),
        Change::Replace(all) => store.publish_namespaces(NamespaceView::new(
            all.iter().map(|ns| (ns.name_any(), namespace_object(ns))),
        )),
    }
}

/// The Namespace as CEL's `namespaceObject` sees it: the metadata fields upstream copies, spec
/// and status (managed fields and owner references are left out).
fn namespace_object(ns: &Namespace) -> Value {
    let m = &ns.metadata;
    let metadata = serde_json::json!({
        "name": m.name, "generateName": m.generate_name, "namespace": m.namespace,
        "labels": m.labels, "annotations": m.annotations, "uid": m.uid,
        "creationTimestamp": m.creation_timestamp, "deletionGracePeriodSeconds": m.deletion_grace_period_seconds,
        "deletionTimestamp": m.deletion_timestamp, "generation": m.generation,
        "resourceVersion": m.resource_version, "finalizers": m.finalizers,
    });
    // Absent fields stay absent (`has()` is false), as in the API server's JSON.
    let metadata: Map<String, Value> = match metadata {
        Value::Object(fields) => fields.into_iter().filter(|(_, v)| !v.is_null()).collect(),
        _ => Map::new(),
    };
    let mut obj = Map::new();
    obj.insert("metadata".into(), Value::Object(metadata));
    for (key, value) in [
        ("spec", serde_json::to_value(&ns.spec)),
        ("status", serde_json::to_value(&ns.status)),
    ] {
        if let Some(v) = value.ok().filter(|v| !v.is_null()) {
            obj.insert(key.into(), v);
        }
    }
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use celgate_engine::Namespaces;
    use kube::api::ObjectMeta;

    fn namespace(name: &str, team: &str) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([("team".to_string(), team.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn team(store: &SnapshotStore, name: &str) -> Option<String> {
        let snapshot = store.load();
        let ns = snapshot.namespaces.get(name)?;
        ns["metadata"]["labels"]["team"]
            .as_str()
            .map(str::to_string)
    }

    #[test]
    fn an_event_converts_only_its_namespace_and_a_list_replaces_the_view() {
        let store = SnapshotStore::new();
        publish(
            &store,
            Change::Replace(vec![namespace("a", "red"), namespace("b", "blue")]),
        );
        let before = store.load();
        publish(&store, Change::Apply(namespace("a", "green")));
        let after = store.load();
        assert_eq!(team(&store, "a").as_deref(), Some("green"));
        // "b" was not converted again: the new view shares its value with the old one.
        let b = |s: &celgate_snapshot::Snapshot| s.namespaces.get("b").map(|v| v as *const Value);
        assert!(b(&before).is_some());
        assert_eq!(b(&before), b(&after));

        publish(&store, Change::Delete(namespace("b", "blue")));
        assert_eq!(team(&store, "b"), None);

        publish(&store, Change::Replace(vec![namespace("c", "red")]));
        assert_eq!(store.load().namespaces.len(), 1);
        assert_eq!(team(&store, "c").as_deref(), Some("red"));
    }

    #[test]
    fn absent_metadata_fields_stay_absent() {
        let object = namespace_object(&namespace("a", "red"));
        let metadata = object["metadata"].as_object().cloned().unwrap_or_default();
        let mut keys: Vec<&str> = metadata.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["labels", "name"]);
    }
}
