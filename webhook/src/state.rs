//! What the request path reads: the current snapshot and namespace labels, both swapped whole.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, ArcSwapOption};
use celgate_engine::{Namespaces, PolicySet};
use serde_json::Value;

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

/// State shared by the operator (writer) and the webhook (reader).
#[derive(Debug, Default)]
pub struct State {
    snapshot: ArcSwapOption<Snapshot>,
    namespaces: ArcSwap<NamespaceCache>,
    /// The webhook's metrics.
    pub metrics: Metrics,
}

impl State {
    /// A state with no snapshot yet (the webhook is not ready).
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Publishes a new snapshot; requests that arrive afterwards are decided by it.
    pub fn publish(&self, snapshot: Snapshot) {
        self.snapshot.store(Some(Arc::new(snapshot)));
    }

    /// The current snapshot, or `None` before the first publish.
    pub fn snapshot(&self) -> Option<Arc<Snapshot>> {
        self.snapshot.load_full()
    }

    /// Replaces the namespace labels.
    pub fn publish_namespaces(&self, labels: NamespaceCache) {
        self.namespaces.store(Arc::new(labels));
    }

    /// The current namespace labels.
    pub fn namespaces(&self) -> Arc<NamespaceCache> {
        self.namespaces.load_full()
    }
}
