//! Where the snapshot lives: the operator's watches publish one part at a time, each publish
//! swapping in a new [`Snapshot`] atomically; requests load the current one without locks and
//! may wait (bounded) for a part that has not caught up yet.

use std::sync::Arc;

use arc_swap::ArcSwap;
use celgate_engine::PolicySet;
use serde_json::Value;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::view::{
    KindSchemaView, NamespaceView, ParamKey, ParamKindEntry, PolicyParamKinds, Snapshot,
};

/// The current snapshot, shared by the operator (writer) and the webhook (reader).
#[derive(Debug, Default)]
pub struct SnapshotStore {
    current: ArcSwap<Snapshot>,
    changed: Notify,
}

impl SnapshotStore {
    /// A store whose snapshot is empty and not ready.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The current snapshot.
    pub fn load(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// Replaces one or more parts: `change` edits a copy of the current snapshot (its parts
    /// are `Arc`s, so the copy is cheap) and the result is swapped in whole. `change` may run
    /// more than once when writers race, so it must only edit the snapshot it is given.
    pub fn update(&self, change: impl Fn(&mut Snapshot)) -> u64 {
        let published = self.current.rcu(|current| {
            let mut next = Snapshot::clone(current);
            change(&mut next);
            next.revision = current.revision + 1;
            next
        });
        self.changed.notify_waiters();
        published.revision + 1
    }

    /// Publishes a new policy set with the paramKinds of every stored policy and the schemas
    /// of the kinds its mutating policies match, in one swap (so no request sees a mutating
    /// policy without the schemas it was published with); the webhook is ready from the first
    /// call on. Returns the new revision.
    pub fn publish_policies(
        &self,
        policies: Arc<PolicySet>,
        param_kinds: Arc<PolicyParamKinds>,
        schemas: Arc<KindSchemaView>,
    ) -> u64 {
        self.update(|s| {
            s.policies = policies.clone();
            s.policy_param_kinds = param_kinds.clone();
            s.schemas = schemas.clone();
            s.ready = true;
        })
    }

    /// Replaces every namespace (after a full list).
    pub fn publish_namespaces(&self, namespaces: NamespaceView) {
        let namespaces = Arc::new(namespaces);
        self.update(|s| {
            s.namespaces = namespaces.clone();
            s.namespaces_listed = true;
        });
    }

    /// Inserts, replaces (`Some`) or removes (`None`) one namespace; the others are shared
    /// with the previous snapshot, not converted again.
    pub fn publish_namespace(&self, name: &str, object: Option<Value>) {
        let object = object.map(Arc::new);
        self.update(|s| {
            let mut next = NamespaceView::clone(&s.namespaces);
            match &object {
                Some(o) => next.insert(name, o.clone()),
                None => next.remove(name),
            }
            s.namespaces = Arc::new(next);
        });
    }

    /// Replaces the PolicyExceptions honoured.
    pub fn publish_exceptions(&self, exceptions: Arc<celgate_engine::ExceptionSet>) {
        self.update(|s| s.exceptions = exceptions.clone());
    }

    /// Sets (`Some`) or removes (`None`) the entry of one param kind.
    pub fn publish_param_kind(&self, key: &ParamKey, entry: Option<ParamKindEntry>) {
        self.update(|s| {
            let mut next = crate::view::ParamViews::clone(&s.params);
            next.set(key, entry.clone());
            s.params = Arc::new(next);
        });
    }

    /// The first snapshot for which `ready` holds, or the current one once `deadline` passed.
    pub async fn wait_until(
        &self,
        deadline: Instant,
        ready: impl Fn(&Snapshot) -> bool,
    ) -> Arc<Snapshot> {
        // The common case costs one load: no waiter is registered (that takes Notify's lock).
        let current = self.load();
        if ready(&current) {
            return current;
        }
        loop {
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            // Registered before the check, so a publish between the check and the wait wakes it.
            changed.as_mut().enable();
            let current = self.load();
            if ready(&current) {
                return current;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.load();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use celgate_engine::Namespaces;
    use serde_json::json;
    use std::time::Duration;

    #[test]
    fn one_part_changes_and_the_others_are_shared() {
        let store = SnapshotStore::new();
        store.publish_namespace("a", Some(json!({"metadata": {"name": "a"}})));
        let before = store.load();
        store.publish_namespace("b", Some(json!({"metadata": {"name": "b"}})));
        let after = store.load();
        assert_eq!(after.revision, before.revision + 1);
        assert!(Arc::ptr_eq(&before.params, &after.params));
        assert!(Arc::ptr_eq(&before.policies, &after.policies));
        assert!(
            before.namespaces.get("b").is_none(),
            "the old view is untouched"
        );
        // The namespace that did not change is the same allocation, not a copy.
        let a = |s: &Snapshot| s.namespaces.get("a").map(|v| v as *const Value);
        assert_eq!(a(&before), a(&after));
        store.publish_namespace("a", None);
        assert!(store.load().namespaces.get("a").is_none());
        assert!(!store.load().ready);
        store.publish_policies(Arc::default(), Arc::default(), Arc::default());
        assert!(store.load().ready);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_wakes_on_the_publish_it_waits_for_and_not_before() {
        let store = SnapshotStore::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        let waiter = {
            let store = store.clone();
            tokio::spawn(async move {
                let s = store
                    .wait_until(deadline, |s| s.namespaces.get("late").is_some())
                    .await;
                (Instant::now(), s)
            })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        store.publish_namespace("other", Some(json!({})));
        tokio::time::sleep(Duration::from_secs(1)).await;
        store.publish_namespace("late", Some(json!({})));
        let (woke, seen) = waiter.await.unwrap();
        assert!(seen.namespaces.get("late").is_some());
        assert_eq!(woke, deadline - Duration::from_secs(3));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gives_up_at_its_deadline() {
        let store = SnapshotStore::new();
        let started = Instant::now();
        let deadline = started + Duration::from_millis(1500);
        let seen = store.wait_until(deadline, |_| false).await;
        assert_eq!(Instant::now(), deadline);
        assert_eq!(seen.revision, 0);
    }
}
