//! Param kinds: one watch per paramKind the bound policies use, started when first used and
//! stopped when no policy uses it (so a kind bound again later is watched afresh, never frozen).
//! Each watch event updates only the object it names.
//!
//! Whether a kind is served is asked of discovery, and only a definite answer that it is not
//! (the API server's 404, or a group version without the kind) marks it NotServed, which fails
//! requests under failurePolicy Fail. Any other failure (a timeout, a server error) keeps the
//! kind's last known state and is retried with backoff. A kind never listed that the API server
//! forbids celgate to read is marked Forbidden with a message naming the permission to grant:
//! requests do not wait for it, a binding with a paramRef fails at once under its failurePolicy
//! (a kind already listed keeps its objects, as after any other failure).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use celgate_engine::{ParamObjects, PolicySet};
use celgate_snapshot::{ParamKey, ParamKindEntry, SnapshotStore};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::discovery::{self, Scope};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::cluster::identity::Identity;
use crate::controllers::changes::{Change, Changes};
use crate::retry::{self, Backoff};

/// The label that aggregates a ClusterRole into `celgate-params`, the role bound to celgate's
/// ServiceAccount for reading param kinds (config/rbac).
pub const AGGREGATE_TO_PARAMS_LABEL: &str = "admission.celgate.io/aggregate-to-params";

/// The running param watches.
pub struct ParamWatches {
    client: Client,
    identity: Identity,
    store: Arc<SnapshotStore>,
    running: HashMap<ParamKey, JoinHandle<()>>,
}

impl ParamWatches {
    /// No watches yet.
    pub fn new(client: Client, store: Arc<SnapshotStore>) -> Self {
        Self {
            identity: Identity::new(client.clone()),
            client,
            store,
            running: HashMap::new(),
        }
    }

    /// Starts watches for param kinds newly used by `set` and stops those no longer used. A
    /// new kind is published as syncing before this returns, so a policy published after it
    /// finds its params syncing (requests wait for them) rather than unknown.
    pub fn sync(&mut self, set: &PolicySet) {
        let wanted: HashSet<ParamKey> = set
            .param_kinds()
            .iter()
            .map(|k| (k.api_version.clone(), k.kind.clone()))
            .collect();
        self.running.retain(|key, task| {
            let keep = wanted.contains(key);
            if !keep {
                info!(api_version = %key.0, kind = %key.1, "no policy uses this param kind any more; stopping its watch");
                task.abort();
                self.store.publish_param_kind(key, None);
            }
            keep
        });
        for key in wanted {
            if self.running.contains_key(&key) {
                continue;
            }
            self.store
                .publish_param_kind(&key, Some(ParamKindEntry::Syncing));
            let kind = Kind {
                store: self.store.clone(),
                identity: self.identity.clone(),
                key: key.clone(),
                shown: ParamKindEntry::Syncing,
                forbidden_logged: None,
            };
            let task = tokio::spawn(kind.run(self.client.clone()));
            self.running.insert(key, task);
        }
    }
}

impl Drop for ParamWatches {
    fn drop(&mut self) {
        for task in self.running.values() {
            task.abort();
        }
    }
}

/// One watched param kind and what was last published for it.
struct Kind {
    store: Arc<SnapshotStore>,
    identity: Identity,
    key: ParamKey,
    shown: ParamKindEntry,
    /// The last forbidden message logged, until the kind lists again (so a retry that is
    /// forbidden the same way is not logged again).
    forbidden_logged: Option<String>,
}

impl Kind {
    /// Looks the kind up and follows its objects, looking it up again whenever the API server
    /// says it is gone; runs until aborted.
    async fn run(mut self, client: Client) {
        let gvk = gvk(&self.key);
        let mut retry = Backoff::new(retry::LOOKUP);
        loop {
            match discovery::pinned_kind(&client, &gvk).await {
                Ok((resource, caps)) => {
                    if matches!(self.shown, ParamKindEntry::NotServed) {
                        info!(api_version = %self.key.0, kind = %self.key.1, "param kind is served now");
                        self.show(ParamKindEntry::Syncing);
                    }
                    self.follow(
                        &client,
                        &resource,
                        caps.scope == Scope::Namespaced,
                        &mut retry,
                    )
                    .await;
                }
                Err(e) if is_forbidden(&e) => {
                    let subject = self.identity.subject().await;
                    self.forbidden(discovery_forbidden(&self.key, &subject), &e);
                }
                Err(e) if is_not_found(&e) => {
                    if !matches!(self.shown, ParamKindEntry::NotServed) {
                        warn!(api_version = %self.key.0, kind = %self.key.1, error = %e, "param kind is not served; policies using it fail per their failurePolicy until it is");
                        self.show(ParamKindEntry::NotServed);
                    }
                }
                Err(e) => {
                    warn!(api_version = %self.key.0, kind = %self.key.1, error = %e, "cannot look up param kind; it keeps its last known state until a lookup succeeds");
                }
            }
            tokio::time::sleep(retry.next_delay()).await;
        }
    }

    /// Follows the kind's objects until the API server says the kind is gone.
    async fn follow(
        &mut self,
        client: &Client,
        resource: &ApiResource,
        namespaced: bool,
        retry: &mut Backoff,
    ) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
        let events =
            crate::retry::watch(api, watcher::Config::default()).modify(without_managed_fields);
        let mut events = std::pin::pin!(events);
        let mut changes = Changes::default();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    if let Some(change) = changes.next(event) {
                        let objects = self.objects_after(change, namespaced);
                        self.show(ParamKindEntry::Ready(objects));
                        retry.reset();
                    }
                }
                Err(e) if watch_not_found(&e) => {
                    info!(api_version = %self.key.0, kind = %self.key.1, error = %e, "param kind is gone; looking it up again");
                    return;
                }
                Err(watcher::Error::InitialListFailed(e)) if is_forbidden(&e) => {
                    let subject = self.identity.subject().await;
                    self.forbidden(forbidden(Verb::List, resource, &subject), &e);
                }
                Err(watcher::Error::WatchStartFailed(e) | watcher::Error::WatchFailed(e))
                    if is_forbidden(&e) =>
                {
                    let subject = self.identity.subject().await;
                    self.forbidden(forbidden(Verb::Watch, resource, &subject), &e);
                }
                Err(e) => {
                    warn!(api_version = %self.key.0, kind = %self.key.1, error = %e, "param watch failed; the kind keeps its last known objects until the watch recovers")
                }
            }
        }
    }

    /// The kind's objects after `change`; objects it does not name are shared, not copied.
    fn objects_after(&self, change: Change<DynamicObject>, namespaced: bool) -> Arc<ParamObjects> {
        let mut objects = match (&self.shown, &change) {
            (ParamKindEntry::Ready(objects), Change::Apply(_) | Change::Delete(_)) => {
                objects.clone()
            }
            _ => Arc::new(ParamObjects::new(namespaced)),
        };
        let edit = Arc::make_mut(&mut objects);
        match change {
            Change::Apply(object) => {
                if let Some(value) = self.param_value(&object) {
                    let (namespace, name) = object_key(&object, namespaced);
                    edit.insert(namespace, name, value);
                }
            }
            Change::Delete(object) => {
                let (namespace, name) = object_key(&object, namespaced);
                edit.remove(namespace, name);
            }
            Change::Replace(all) => {
                for object in all {
                    if let Some(value) = self.param_value(&object) {
                        let (namespace, name) = object_key(&object, namespaced);
                        edit.insert(namespace, name, value);
                    }
                }
            }
        }
        objects
    }

    /// A param object as policies read it, with apiVersion and kind from the paramKind (as
    /// upstream wraps them).
    fn param_value(&self, object: &DynamicObject) -> Option<Arc<Value>> {
        match serde_json::to_value(object) {
            Ok(mut value) => {
                value["apiVersion"] = self.key.0.clone().into();
                value["kind"] = self.key.1.clone().into();
                Some(Arc::new(value))
            }
            Err(e) => {
                warn!(name = %object.name_any(), error = %e, "cannot convert a param object; it is left out");
                None
            }
        }
    }

    /// Marks a kind that was never listed as forbidden with `message` (logged when it is new);
    /// a kind with objects keeps them (its last known state), as after any other failure.
    fn forbidden(&mut self, message: String, error: &kube::Error) {
        if self.forbidden_logged.as_deref() == Some(message.as_str()) {
            debug!(api_version = %self.key.0, kind = %self.key.1, %error, "param kind still forbidden");
            return;
        }
        warn!(api_version = %self.key.0, kind = %self.key.1, %error, "{message}");
        if matches!(
            self.shown,
            ParamKindEntry::Syncing | ParamKindEntry::Forbidden(_)
        ) {
            self.show(ParamKindEntry::Forbidden(message.as_str().into()));
        }
        self.forbidden_logged = Some(message);
    }

    /// Publishes the kind's new state.
    fn show(&mut self, entry: ParamKindEntry) {
        let state = match &entry {
            ParamKindEntry::Ready(objects) => {
                self.forbidden_logged = None;
                format!("ready with {} objects", objects.len())
            }
            ParamKindEntry::Syncing => "syncing".into(),
            ParamKindEntry::NotServed => "not served".into(),
            ParamKindEntry::Forbidden(_) => "forbidden".into(),
        };
        debug!(api_version = %self.key.0, kind = %self.key.1, %state, "publishing param kind");
        self.store
            .publish_param_kind(&self.key, Some(entry.clone()));
        self.shown = entry;
    }
}

/// What the API server forbade celgate to do with a param kind's objects.
#[derive(Clone, Copy, Debug)]
enum Verb {
    List,
    Watch,
}

/// The message of a param kind whose objects celgate may not `verb`: the permission to grant,
/// to whom, and how.
fn forbidden(verb: Verb, resource: &ApiResource, subject: &str) -> String {
    let verb = match verb {
        Verb::List => "list",
        Verb::Watch => "watch",
    };
    let (plural, group) = (&resource.plural, &resource.group);
    let qualified = if group.is_empty() {
        plural.clone()
    } else {
        format!("{plural}.{group}")
    };
    format!(
        "celgate may not {verb} {qualified} (RBAC: grant list, watch on {plural:?} in API \
         group {group:?} to {subject}, e.g. with a ClusterRole labelled \
         {AGGREGATE_TO_PARAMS_LABEL}=true)"
    )
}

/// The message of a param kind celgate may not look up in discovery (which the default
/// ClusterRole `system:discovery` allows every authenticated user).
fn discovery_forbidden(key: &ParamKey, subject: &str) -> String {
    let (api_version, kind) = key;
    let path = if api_version.contains('/') {
        format!("/apis/{api_version}")
    } else {
        format!("/api/{api_version}")
    };
    format!(
        "celgate may not look up param kind {kind} in discovery of {api_version} (RBAC: grant \
         get on the non-resource URL {path:?} to {subject}, as the default ClusterRole \
         system:discovery does for every authenticated user)"
    )
}

/// Drops a param object's `managedFields` before it is cached: often the larger part of a
/// small object, and no policy needs them (a documented difference: in-tree, CEL can read
/// `params.metadata.managedFields`).
fn without_managed_fields(object: &mut DynamicObject) {
    object.metadata.managed_fields = None;
}

/// `(namespace, name)` of a param object; the namespace is empty for cluster-scoped kinds.
fn object_key(object: &DynamicObject, namespaced: bool) -> (&str, &str) {
    let meta = &object.metadata;
    let namespace = meta.namespace.as_deref().filter(|_| namespaced);
    let name = meta.name.as_deref().or(meta.generate_name.as_deref());
    (namespace.unwrap_or_default(), name.unwrap_or_default())
}

fn gvk(key: &ParamKey) -> GroupVersionKind {
    let (group, version) = key.0.split_once('/').unwrap_or(("", key.0.as_str()));
    GroupVersionKind::gvk(group, version, &key.1)
}

/// Whether the API server forbade a lookup or list (celgate's RBAC does not allow it).
fn is_forbidden(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 403)
}

/// Whether a lookup failed because the API server definitely does not serve the kind.
fn is_not_found(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 404,
        kube::Error::Discovery(_) => true,
        _ => false,
    }
}

/// Whether a watch failed because the API server no longer serves the kind.
fn watch_not_found(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => matches!(e, kube::Error::Api(s) if s.code == 404),
        watcher::Error::WatchError(status) => status.code == 404,
        watcher::Error::NoResourceVersion => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use crate::controllers::policy_set;
    use crate::fixtures::{self, ApiServer, Reply, status};
    use celgate_engine::BoundPolicy;
    use celgate_snapshot::Snapshot;
    use serde_json::json;
    use std::time::Duration;
    use tokio::time::Instant;

    const KIND: (&str, &str) = ("example.com/v1", "Widget");

    #[test]
    fn params_are_cached_without_managed_fields() {
        let mut object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"max": 1},
        }))
        .unwrap();
        without_managed_fields(&mut object);
        let cached = serde_json::to_value(&object).unwrap();
        assert!(cached["metadata"].get("managedFields").is_none());
        assert_eq!(cached["spec"]["max"], 1);
    }
    const LOOKUP: &str = "/apis/example.com/v1";
    const WIDGETS: &str = "/apis/example.com/v1/widgets";

    /// A policy set whose policies use these param kinds.
    fn using(kinds: &[(&str, &str)]) -> PolicySet {
        PolicySet::new(
            kinds
                .iter()
                .enumerate()
                .map(|(i, kind)| BoundPolicy {
                    policy: policy_set::compile(&fixtures::policy(
                        &format!("p{i}"),
                        1,
                        "true",
                        Some(*kind),
                    )),
                    bindings: Vec::new(),
                })
                .collect(),
            Vec::new(),
        )
    }

    fn served() -> Value {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "example.com/v1",
               "resources": [{"name": "widgets", "singularName": "widget", "namespaced": true,
                              "kind": "Widget", "verbs": ["get", "list", "watch"]}]})
    }

    fn widget(name: &str, max: u32) -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": "params", "resourceVersion": format!("{max}")},
               "data": {"max": max}})
    }

    /// Answers the list of widgets with `items` and holds watches.
    fn serve(items: Vec<Value>) -> impl FnMut(&fixtures::Call) -> Reply {
        move |call| match (call.path.as_str(), call.is_watch()) {
            (WIDGETS, true) => Reply::Hold,
            (WIDGETS, false) => Reply::Json(200, fixtures::list(items.clone())),
            (path, _) => panic!("unexpected call to {path}"),
        }
    }

    /// How the store shows the kind: `absent`, `syncing`, `not served`, `forbidden`, or `ready` with its
    /// objects' `data.max` by name.
    fn shown(snapshot: &Snapshot) -> String {
        match snapshot.params.entry(KIND.0, KIND.1) {
            None => "absent".into(),
            Some(ParamKindEntry::Syncing) => "syncing".into(),
            Some(ParamKindEntry::NotServed) => "not served".into(),
            Some(ParamKindEntry::Forbidden(_)) => "forbidden".into(),
            Some(ParamKindEntry::Ready(objects)) => {
                let all: Vec<String> = objects
                    .iter()
                    .map(|(_, name, v)| format!("{name}={}", v["data"]["max"]))
                    .collect();
                format!("ready {}", all.join(","))
            }
        }
    }

    /// Waits (on the paused clock) until the store shows `expected`, and returns what it shows.
    async fn shows(store: &SnapshotStore, expected: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(600);
        shown(&*store.wait_until(deadline, |s| shown(s) == expected).await)
    }

    fn start() -> (Arc<SnapshotStore>, ParamWatches, ApiServer) {
        let (client, api) = fixtures::pair();
        let store = SnapshotStore::new();
        let mut watches = ParamWatches::new(client, store.clone());
        watches.sync(&using(&[KIND]));
        (store, watches, api)
    }

    /// Bounds a scenario on the paused clock.
    async fn bounded(scenario: impl std::future::Future<Output = ()>) {
        tokio::time::timeout(Duration::from_secs(3600), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn a_param_kind_appearing_late_goes_from_not_served_to_ready() {
        bounded(async {
            let (store, mut watches, mut api) = start();
            assert_eq!(shown(&store.load()), "syncing");

            let lookup = api.next().await;
            assert_eq!(lookup.path, LOOKUP);
            lookup.reply(404, status(404, "NotFound"));
            assert_eq!(shows(&store, "not served").await, "not served");

            // Looked up again after the first retry delay: served now.
            let answered = Instant::now();
            let lookup = api.next().await;
            assert_eq!(lookup.path, LOOKUP);
            assert_eq!(Instant::now() - answered, retry::LOOKUP.first);
            lookup.reply(200, served());
            let seen = api
                .serve_until(serve(vec![widget("w1", 3)]), shows(&store, "ready w1=3"))
                .await;
            assert_eq!(seen, "ready w1=3");

            // No policy uses the kind any more: its watch stops and its entry goes.
            watches.sync(&PolicySet::default());
            assert_eq!(shown(&store.load()), "absent");
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_lookup_error_keeps_the_last_known_state() {
        bounded(async {
            let (store, _watches, mut api) = start();
            // A server error says nothing about the kind: it stays syncing.
            let lookup = api.next().await;
            assert_eq!(lookup.path, LOOKUP);
            lookup.reply(503, status(503, "ServiceUnavailable"));
            let lookup = api.next().await;
            assert_eq!(shown(&store.load()), "syncing", "after a failed lookup");
            lookup.reply(200, served());
            api.serve_until(serve(vec![widget("w1", 3)]), shows(&store, "ready w1=3"))
                .await;
            api.serve_until_watching(serve(vec![]), WIDGETS).await;

            // The API server stops serving the kind: the watch fails with 404, and the kind
            // is looked up again. A failed lookup keeps the objects; a definite "not found"
            // marks it not served.
            api.end_watches(
                WIDGETS,
                &[json!({"type": "ERROR", "object": status(404, "NotFound")})],
            );
            let lookup = api.next().await;
            assert_eq!(lookup.path, LOOKUP);
            lookup.reply(500, status(500, "InternalError"));
            let lookup = api.next().await;
            assert_eq!(shown(&store.load()), "ready w1=3", "after a failed lookup");
            lookup.reply(404, status(404, "NotFound"));
            assert_eq!(shows(&store, "not served").await, "not served");
        })
        .await;
    }

    const SELF_SUBJECT_REVIEWS: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

    /// The forbidden message the store shows for the kind.
    fn forbidden_message(store: &SnapshotStore) -> String {
        match store.load().params.entry(KIND.0, KIND.1) {
            Some(ParamKindEntry::Forbidden(message)) => message.to_string(),
            other => panic!("not forbidden: {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_kind_celgate_may_not_read_is_forbidden_with_the_permission_to_grant_until_it_may() {
        bounded(async {
            let (store, _watches, mut api) = start();
            let lookup = api.next().await;
            lookup.reply(403, status(403, "Forbidden"));
            // celgate asks once who it is, to name the subject to grant to.
            let review = api.next().await;
            assert_eq!(
                (review.method.as_str(), review.path.as_str()),
                ("POST", SELF_SUBJECT_REVIEWS)
            );
            review.reply(
                201,
                json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
                       "metadata": {}, "status": {"userInfo": {
                           "username": "system:serviceaccount:celgate-system:celgate"}}}),
            );
            assert_eq!(shows(&store, "forbidden").await, "forbidden");
            assert_eq!(
                forbidden_message(&store),
                "celgate may not look up param kind Widget in discovery of example.com/v1 \
                 (RBAC: grant get on the non-resource URL \"/apis/example.com/v1\" to \
                 ServiceAccount celgate-system/celgate, as the default ClusterRole \
                 system:discovery does for every authenticated user)"
            );

            // Discovery answers, the list is forbidden: forbidden with what to grant (the
            // identity is not asked again).
            let lookup = api.next().await;
            lookup.reply(200, served());
            let list = api.next().await;
            assert_eq!((list.path.as_str(), list.is_watch()), (WIDGETS, false));
            list.reply(403, status(403, "Forbidden"));
            let message = "celgate may not list widgets.example.com (RBAC: grant list, \
                           watch on \"widgets\" in API group \"example.com\" to ServiceAccount \
                           celgate-system/celgate, e.g. with a ClusterRole labelled \
                           admission.celgate.io/aggregate-to-params=true)";
            let deadline = Instant::now() + Duration::from_secs(600);
            store
                .wait_until(deadline, |s| {
                    matches!(s.params.entry(KIND.0, KIND.1),
                        Some(ParamKindEntry::Forbidden(m)) if &**m == message)
                })
                .await;
            assert_eq!(forbidden_message(&store), message);
            // Requests do not wait for it: they see it forbidden, with the message.
            let kind = celgate_engine::model::ParamKind {
                api_version: KIND.0.into(),
                kind: KIND.1.into(),
            };
            let snapshot = store.load();
            assert!(matches!(
                celgate_engine::Params::kind(&*snapshot.params, &kind),
                celgate_engine::ParamKindState::Forbidden(m) if m == message
            ));

            // RBAC allows it now: the list succeeds and the kind is ready.
            let seen = api
                .serve_until(
                    |call| {
                        assert_ne!(call.path, SELF_SUBJECT_REVIEWS, "identity asked twice");
                        serve(vec![widget("w1", 3)])(call)
                    },
                    shows(&store, "ready w1=3"),
                )
                .await;
            assert_eq!(seen, "ready w1=3");
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_forbidden_core_kind_names_the_core_group_and_an_unknown_identity_says_so() {
        bounded(async {
            let (client, mut api) = fixtures::pair();
            let store = SnapshotStore::new();
            let mut watches = ParamWatches::new(client, store.clone());
            watches.sync(&using(&[("v1", "ConfigMap")]));
            let lookup = api.next().await;
            assert_eq!(lookup.path, "/api/v1");
            lookup.reply(
                200,
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "v1",
                       "resources": [{"name": "configmaps", "singularName": "configmap",
                                      "namespaced": true, "kind": "ConfigMap",
                                      "verbs": ["get", "list", "watch"]}]}),
            );
            let list = api.next().await;
            assert_eq!(list.path, "/api/v1/configmaps");
            list.reply(403, status(403, "Forbidden"));
            // The API server cannot say who celgate is: the message says so instead.
            let review = api.next().await;
            assert_eq!(review.path, SELF_SUBJECT_REVIEWS);
            review.reply(500, status(500, "InternalError"));
            let deadline = Instant::now() + Duration::from_secs(600);
            let snapshot = store
                .wait_until(deadline, |s| {
                    matches!(
                        s.params.entry("v1", "ConfigMap"),
                        Some(ParamKindEntry::Forbidden(_))
                    )
                })
                .await;
            let Some(ParamKindEntry::Forbidden(message)) = snapshot.params.entry("v1", "ConfigMap")
            else {
                panic!("not forbidden");
            };
            assert_eq!(
                &**message,
                "celgate may not list configmaps (RBAC: grant list, watch on \"configmaps\" \
                 in API group \"\" to the user celgate runs as, e.g. with a ClusterRole \
                 labelled admission.celgate.io/aggregate-to-params=true)"
            );
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_param_event_replaces_only_its_object_and_a_watch_error_keeps_them() {
        bounded(async {
            let (store, _watches, mut api) = start();
            api.next().await.reply(200, served());
            api.serve_until(
                serve(vec![widget("w1", 3), widget("w2", 4)]),
                shows(&store, "ready w1=3,w2=4"),
            )
            .await;
            api.serve_until_watching(serve(vec![]), WIDGETS).await;
            let object = |s: &Snapshot, name: &str| match s.params.entry(KIND.0, KIND.1) {
                Some(ParamKindEntry::Ready(objects)) => objects.get("params", name).cloned(),
                _ => None,
            };
            let before = store.load();

            api.end_watches(
                WIDGETS,
                &[json!({"type": "MODIFIED", "object": widget("w1", 5)})],
            );
            let seen = api
                .serve_until(serve(vec![]), shows(&store, "ready w1=5,w2=4"))
                .await;
            assert_eq!(seen, "ready w1=5,w2=4");
            let after = store.load();
            // w2 was not converted again: the same allocation is shared.
            assert!(Arc::ptr_eq(
                &object(&before, "w2").unwrap(),
                &object(&after, "w2").unwrap()
            ));
            assert_eq!(object(&after, "w1").unwrap()["apiVersion"], KIND.0);

            // A watch error other than "not found" keeps the objects while the watch retries.
            api.serve_until_watching(serve(vec![]), WIDGETS).await;
            api.end_watches(
                WIDGETS,
                &[json!({"type": "ERROR", "object": status(500, "InternalError")})],
            );
            api.serve_until_watching(serve(vec![]), WIDGETS).await;
            assert_eq!(shown(&store.load()), "ready w1=5,w2=4");
        })
        .await;
    }
}
