//! PolicyExceptions: every one is watched (so the status writer can say why one is ignored);
//! those of the namespaces `--exception-namespaces` allows are compiled and published into the
//! snapshot, where every decision honours them.

use std::collections::BTreeMap;
use std::sync::Arc;

use celgate_crds::PolicyException;
use celgate_engine::{Exception, ExceptionSet};
use celgate_kinds::convert;
use celgate_snapshot::SnapshotStore;
use futures::StreamExt;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tokio::sync::watch;
use tracing::warn;

use crate::controllers::changes::{Change, Changes};
use crate::metrics::{self, resource};

/// The namespaces PolicyExceptions are honoured from (`--exception-namespaces`): none by
/// default, `*` for every namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExceptionNamespaces(Vec<String>);

impl ExceptionNamespaces {
    /// The namespaces of the flag's list (blank entries dropped).
    pub fn new(names: &[String]) -> Self {
        Self(
            names
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect(),
        )
    }

    /// Whether exceptions in `namespace` are honoured.
    pub fn allows(&self, namespace: &str) -> bool {
        self.0.iter().any(|n| n == "*" || n == namespace)
    }

    /// The list as the flag takes it, for messages (`none` when empty).
    pub fn describe(&self) -> String {
        if self.0.is_empty() {
            "none".into()
        } else {
            self.0.join(",")
        }
    }
}

/// Every PolicyException, by namespace and name.
pub type ExceptionObjects = Arc<Vec<PolicyException>>;

/// Follows every PolicyException until the process stops: publishes those `allowed` honours
/// into `store` and sends all of them on `objects` (for their status). A failed watch keeps
/// the last set and is retried with backoff.
pub async fn run(
    client: Client,
    store: Arc<SnapshotStore>,
    allowed: ExceptionNamespaces,
    objects: watch::Sender<ExceptionObjects>,
) {
    let events = crate::retry::watch(
        Api::<PolicyException>::all(client),
        watcher::Config::default(),
    )
    .inspect(metrics::watch(resource::EXCEPTIONS, false));
    let mut events = std::pin::pin!(events);
    let mut changes = Changes::default();
    let mut all: BTreeMap<(String, String), PolicyException> = BTreeMap::new();
    while let Some(event) = events.next().await {
        let change = match event {
            Ok(event) => changes.next(event),
            Err(e) => {
                warn!(error = %e, "PolicyException watch failed; exceptions keep their last known state until it recovers");
                None
            }
        };
        let Some(change) = change else { continue };
        let key = |e: &PolicyException| (e.namespace().unwrap_or_default(), e.name_any());
        match change {
            Change::Apply(e) => {
                all.insert(key(&e), e);
            }
            Change::Delete(e) => {
                all.remove(&key(&e));
            }
            Change::Replace(list) => all = list.into_iter().map(|e| (key(&e), e)).collect(),
        }
        let list: Vec<PolicyException> = all.values().cloned().collect();
        store.publish_exceptions(Arc::new(honoured(&list, &allowed)));
        objects.send_replace(Arc::new(list));
    }
}

/// The exceptions of `all` that `allowed` honours, compiled.
pub fn honoured(all: &[PolicyException], allowed: &ExceptionNamespaces) -> ExceptionSet {
    ExceptionSet::new(
        all.iter()
            .filter(|e| allowed.allows(&e.namespace().unwrap_or_default()))
            .map(|e| Arc::new(Exception::compile(convert::policy_exception(e)))),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn exception(namespace: &str, name: &str) -> PolicyException {
        PolicyException {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Default::default(),
            status: None,
        }
    }

    #[test]
    fn only_the_allowed_namespaces_exceptions_are_honoured_and_none_by_default() {
        let all = [exception("team-a", "x"), exception("team-b", "y")];
        assert!(honoured(&all, &ExceptionNamespaces::default()).is_empty());
        let team_a = ExceptionNamespaces::new(&["team-a".into(), " ".into()]);
        let ids: Vec<String> = honoured(&all, &team_a)
            .all()
            .iter()
            .map(|e| e.id.to_string())
            .collect();
        assert_eq!(ids, ["team-a/x"]);
        assert_eq!(team_a.describe(), "team-a");
        let every = ExceptionNamespaces::new(&["*".into()]);
        assert_eq!(honoured(&all, &every).all().len(), 2);
        assert_eq!(ExceptionNamespaces::default().describe(), "none");
    }
}
