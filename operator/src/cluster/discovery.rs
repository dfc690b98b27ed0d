//! Which API resources the cluster serves, from aggregated discovery (`/api` and `/apis`), kept
//! in memory for the type checker: every resource and subresource with the kind discovery
//! reports for it, and `kinds_for` answering as client-go's discovery RESTMapper `KindsFor`
//! (which kube-controller-manager's type checking uses).
//!
//! A background task discovers at start, again whenever a CustomResourceDefinition changes
//! (a watch on their metadata), every few minutes, and on request; a failed discovery keeps the
//! last result and is retried with backoff.

use std::sync::Arc;
use std::time::Duration;

use celgate_kinds::served::ServedResources;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, PartialObjectMeta};
use kube::core::discovery::v2::{ACCEPT_AGGREGATED_DISCOVERY_V2, APIGroupDiscoveryList};
use kube::runtime::watcher;
use serde_json::Value;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::metrics::{self, resource};
use crate::retry::{self, Backoff};

/// How often the served resources are discovered again without a CRD change (aggregated APIs
/// come and go without one).
pub const REFRESH_PERIOD: Duration = Duration::from_secs(300);

/// Discovery endpoints: the core group and every other group.
const ENDPOINTS: [&str; 2] = ["/api", "/apis"];

/// Why the served resources could not be discovered.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum DiscoveryError {
    /// The API server answered with an error status.
    #[error("API discovery at {path} failed: the API server answered HTTP {status}: {message}")]
    Status {
        /// The discovery endpoint.
        path: &'static str,
        /// The HTTP status code.
        status: u16,
        /// The API server's message.
        message: String,
    },
    /// The API server could not be asked, or its answer could not be read.
    #[error("API discovery at {path} failed: {message}")]
    Request {
        /// The discovery endpoint.
        path: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The API server does not serve aggregated discovery.
    #[error(
        "API discovery at {path} answered {kind:?} instead of an APIGroupDiscoveryList: celgate needs aggregated discovery (Kubernetes 1.30 or later)"
    )]
    NotAggregated {
        /// The discovery endpoint.
        path: &'static str,
        /// The kind of the answer.
        kind: String,
    },
    /// The discovery task is gone (the process is shutting down).
    #[error("API discovery has stopped")]
    Stopped,
}

impl DiscoveryError {
    fn from_kube(path: &'static str, error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => Self::Status {
                path,
                status: status.code,
                message: status.message,
            },
            other => Self::Request {
                path,
                message: other.to_string(),
            },
        }
    }
}

/// A discovery request: answered once the next discovery after it has run.
type Waiter = oneshot::Sender<Result<Arc<ServedResources>, DiscoveryError>>;

/// The cluster's served resources, discovered and refreshed by a background task that ends
/// when the last handle is dropped.
#[derive(Clone)]
pub struct Discovery {
    current: watch::Receiver<Option<Arc<ServedResources>>>,
    requests: mpsc::UnboundedSender<Waiter>,
    revisions: watch::Receiver<u64>,
}

impl Discovery {
    /// Starts discovering the served resources of the cluster `client` talks to.
    pub fn spawn(client: Client) -> Self {
        let (publish, current) = watch::channel(None);
        let (requests, received) = mpsc::unbounded_channel();
        let (revision, revisions) = watch::channel(0);
        tokio::spawn(refresh_loop(client, publish, revision, received));
        Self {
            current,
            requests,
            revisions,
        }
    }

    /// The last discovered resources; empty before the first discovery succeeded.
    #[cfg(test)]
    pub fn current(&self) -> Arc<ServedResources> {
        self.current.borrow().clone().unwrap_or_default()
    }

    /// The discovered resources, once a discovery has succeeded.
    pub async fn ready(&self) -> Result<Arc<ServedResources>, DiscoveryError> {
        let mut current = self.current.clone();
        let ready = current
            .wait_for(Option::is_some)
            .await
            .map_err(|_| DiscoveryError::Stopped)?;
        Ok(ready.clone().unwrap_or_default())
    }

    /// Counts the discoveries that may have changed what is served or its schemas: those after
    /// a CRD change, the periodic ones, and any whose resources differ from the last. A
    /// discovery only [`Discovery::refresh`] asked for, finding the same resources, does not
    /// count, so checking a policy that names an unserved resource cannot re-trigger checks.
    pub fn revisions(&self) -> watch::Receiver<u64> {
        self.revisions.clone()
    }

    /// Discovers again now (as client-go's `Reset` of a deferred RESTMapper) and returns the
    /// result, or why it failed (the last result then stays current).
    pub async fn refresh(&self) -> Result<Arc<ServedResources>, DiscoveryError> {
        let (waiter, answer) = oneshot::channel();
        self.requests
            .send(waiter)
            .map_err(|_| DiscoveryError::Stopped)?;
        answer.await.map_err(|_| DiscoveryError::Stopped)?
    }
}

/// Reads one aggregated discovery endpoint.
async fn read_endpoint(
    client: &Client,
    path: &'static str,
) -> Result<APIGroupDiscoveryList, DiscoveryError> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, ACCEPT_AGGREGATED_DISCOVERY_V2)
        .body(Vec::new())
        .map_err(|e| DiscoveryError::Request {
            path,
            message: e.to_string(),
        })?;
    let answer: Value = client
        .request(request)
        .await
        .map_err(|e| DiscoveryError::from_kube(path, e))?;
    let kind = answer["kind"].as_str().unwrap_or_default();
    if kind != "APIGroupDiscoveryList" {
        return Err(DiscoveryError::NotAggregated {
            path,
            kind: kind.to_string(),
        });
    }
    serde_json::from_value(answer).map_err(|e| DiscoveryError::Request {
        path,
        message: format!("cannot read the answer: {e}"),
    })
}

/// Discovers the served resources once.
pub(crate) async fn discover(client: &Client) -> Result<Arc<ServedResources>, DiscoveryError> {
    let mut lists = Vec::with_capacity(ENDPOINTS.len());
    for path in ENDPOINTS {
        lists.push(read_endpoint(client, path).await?);
    }
    Ok(Arc::new(ServedResources::from_discovery(&lists)))
}

/// Discovers at start, after every CRD change, every [`REFRESH_PERIOD`] and on request;
/// retries failures with backoff. Returns when every [`Discovery`] handle is gone.
async fn refresh_loop(
    client: Client,
    publish: watch::Sender<Option<Arc<ServedResources>>>,
    revision: watch::Sender<u64>,
    mut requests: mpsc::UnboundedReceiver<Waiter>,
) {
    // Whether the next discovery follows a CRD change or the period (not only requests).
    let mut changed = true;
    let crds: Api<PartialObjectMeta<CustomResourceDefinition>> = Api::all(client.clone());
    let events = crate::retry::watch(crds, watcher::Config::default())
        .inspect(metrics::watch(resource::CRDS, false));
    let mut events = std::pin::pin!(events);
    let mut retry = Backoff::new(retry::CLUSTER);
    let mut due = Instant::now();
    let mut waiters: Vec<Waiter> = Vec::new();
    loop {
        // Requests and CRD events first: a burst of them leads to one discovery.
        tokio::select! {
            biased;
            request = requests.recv() => match request {
                Some(waiter) => {
                    waiters.push(waiter);
                    due = Instant::now();
                }
                None => return,
            },
            Some(event) = events.next() => match event {
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                    due = Instant::now();
                    changed = true;
                }
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Err(e) => warn!(error = %e, "watching CustomResourceDefinitions failed; served resources are refreshed every {} s until the watch recovers", REFRESH_PERIOD.as_secs()),
            },
            () = tokio::time::sleep_until(due) => {
                changed |= waiters.is_empty();
                let result = discover(&client).await;
                match &result {
                    Ok(served) => {
                        debug!(resources = served.resources().len(), "discovered the served resources");
                        let previous = publish.send_replace(Some(served.clone()));
                        if changed || previous.is_none_or(|p| p.resources() != served.resources()) {
                            revision.send_modify(|r| *r += 1);
                        }
                        changed = false;
                        retry.reset();
                        due = Instant::now() + REFRESH_PERIOD;
                    }
                    Err(e) => {
                        let delay = retry.next_delay();
                        warn!(error = %e, retry_in = ?delay, "cannot discover the served resources; keeping the last known ones");
                        due = Instant::now() + delay;
                    }
                }
                for waiter in waiters.drain(..) {
                    // A caller that stopped waiting needs no answer.
                    let _ = waiter.send(result.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use std::collections::VecDeque;

    use super::*;
    use crate::fixtures::{self, Call, Reply, status};
    use kube::api::GroupVersionKind;
    use serde_json::json;

    const CRDS: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

    fn kind(group: &str, version: &str, kind: &str) -> Value {
        json!({"group": group, "version": version, "kind": kind})
    }

    fn resource(name: &str, singular: &str, kind: Value, subresources: Value) -> Value {
        json!({"resource": name, "singularResource": singular, "responseKind": kind,
               "scope": "Namespaced", "verbs": ["get", "list"], "subresources": subresources})
    }

    /// The answer of `/api`: pods (with status and eviction), configmaps, events.
    fn core() -> Value {
        json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
        "items": [{"metadata": {}, "versions": [{"version": "v1", "freshness": "Current", "resources": [
            resource("pods", "pod", kind("", "", "Pod"), json!([
                {"subresource": "status", "responseKind": kind("", "", "Pod"), "verbs": ["get"]},
                {"subresource": "eviction", "responseKind": kind("policy", "v1", "Eviction"), "verbs": ["create"]},
            ])),
            resource("configmaps", "configmap", kind("", "", "ConfigMap"), json!([])),
            resource("events", "event", kind("", "", "Event"), json!([])),
        ]}]}]})
    }

    /// The answer of `/apis`: apps/v1 and v1beta2 deployments (with scale), events.k8s.io/v1,
    /// a stale aggregated group, and the groups of `extra`.
    fn groups(extra: &[Value]) -> Value {
        let mut items = vec![
            json!({"metadata": {"name": "apps"}, "versions": [
                {"version": "v1", "freshness": "Current", "resources": [
                    resource("deployments", "", kind("", "", "Deployment"), json!([
                        {"subresource": "scale", "responseKind": kind("autoscaling", "v1", "Scale"), "verbs": ["get"]},
                    ]))]},
                {"version": "v1beta2", "freshness": "Current", "resources": [
                    resource("deployments", "deployment", kind("", "", "Deployment"), json!([]))]},
            ]}),
            json!({"metadata": {"name": "events.k8s.io"}, "versions": [
                {"version": "v1", "freshness": "Current", "resources": [
                    resource("events", "event", kind("", "", "Event"), json!([]))]}]}),
            json!({"metadata": {"name": "metrics.k8s.io"}, "versions": [
                {"version": "v1beta1", "freshness": "Stale", "resources": [
                    resource("pods", "pod", kind("", "", "PodMetrics"), json!([]))]}]}),
        ];
        items.extend_from_slice(extra);
        json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": items})
    }

    fn widgets() -> Value {
        json!({"metadata": {"name": "example.com"}, "versions": [{"version": "v1", "freshness": "Current",
            "resources": [resource("widgets", "widget", kind("example.com", "v1", "Widget"), json!([]))]}]})
    }

    fn served(extra: &[Value]) -> ServedResources {
        let lists: Vec<APIGroupDiscoveryList> = [core(), groups(extra)]
            .into_iter()
            .map(|v| serde_json::from_value(v).unwrap())
            .collect();
        ServedResources::from_discovery(&lists)
    }

    fn gvk(group: &str, version: &str, kind: &str) -> GroupVersionKind {
        GroupVersionKind::gvk(group, version, kind)
    }

    #[test]
    fn kinds_for_answers_as_the_discovery_restmapper() {
        let served = served(&[]);
        let deployment = vec![gvk("apps", "v1", "Deployment")];
        assert_eq!(served.kinds_for("apps", "v1", "deployments"), deployment);
        // The singular name, given or guessed from the kind, and any letter case.
        assert_eq!(served.kinds_for("apps", "v1", "deployment"), deployment);
        assert_eq!(served.kinds_for("apps", "v1", "Deployments"), deployment);
        // Guessed list names, as client-go maps them.
        assert_eq!(
            served.kinds_for("apps", "v1", "deploymentlists"),
            [gvk("apps", "v1", "DeploymentList")]
        );
        assert_eq!(
            served.kinds_for("", "v1", "lists")[0],
            gvk("", "v1", "List")
        );
        // The core group is the empty group, which matches every group.
        assert_eq!(
            served.kinds_for("", "v1", "events"),
            [gvk("", "v1", "Event"), gvk("events.k8s.io", "v1", "Event")]
        );
        assert_eq!(
            served.kinds_for("", "v1", "configmaps"),
            [gvk("", "v1", "ConfigMap")]
        );
        // An empty version matches every version, in the order of preference.
        assert_eq!(
            served.kinds_for("apps", "", "deployments"),
            [
                gvk("apps", "v1", "Deployment"),
                gvk("apps", "v1beta2", "Deployment")
            ]
        );
        // Subresources, stale versions and unknown resources have no kinds.
        assert!(
            served
                .kinds_for("apps", "v1", "deployments/scale")
                .is_empty()
        );
        assert!(
            served
                .kinds_for("metrics.k8s.io", "v1beta1", "pods")
                .is_empty()
        );
        assert!(served.kinds_for("apps", "v1", "widgets").is_empty());
        assert!(served.kinds_for("apps", "v1", "").is_empty());
    }

    #[test]
    fn resource_for_kind_finds_the_resource_and_its_scope() {
        let gadgets = json!({"metadata": {"name": "example.com"}, "versions": [{"version": "v1",
            "freshness": "Current", "resources": [{"resource": "gadgets", "singularResource": "gadget",
            "responseKind": kind("example.com", "v1", "Gadget"), "scope": "Cluster", "verbs": ["get"],
            "subresources": [{"subresource": "report", "verbs": ["get"],
                "responseKind": kind("example.com", "v1", "GadgetReport")}]}]}]});
        let served = served(&[gadgets]);
        let found = |g, v, k| {
            served
                .resource_for_kind(g, v, k)
                .map(|r| (r.resource.as_str(), r.namespaced))
        };
        assert_eq!(
            found("apps", "v1", "Deployment"),
            Some(("deployments", true))
        );
        assert_eq!(found("", "v1", "Pod"), Some(("pods", true)));
        assert_eq!(
            found("example.com", "v1", "Gadget"),
            Some(("gadgets", false))
        );
        // Only a subresource has this kind; other groups, versions and stale versions do not
        // serve these.
        assert_eq!(found("example.com", "v1", "GadgetReport"), None);
        assert_eq!(found("", "v1", "Deployment"), None);
        assert_eq!(found("apps", "v1beta1", "Deployment"), None);
        assert_eq!(found("metrics.k8s.io", "v1beta1", "PodMetrics"), None);
    }

    #[test]
    fn resources_list_subresources_with_the_kind_reported_for_them() {
        let served = served(&[]);
        let listed: Vec<String> = served
            .resources()
            .iter()
            .map(|r| {
                format!(
                    "{}/{} {} -> {}/{} {}",
                    r.group, r.version, r.resource, r.kind.group, r.kind.version, r.kind.kind
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                "/v1 pods -> /v1 Pod",
                "/v1 pods/status -> /v1 Pod",
                "/v1 pods/eviction -> policy/v1 Eviction",
                "/v1 configmaps -> /v1 ConfigMap",
                "/v1 events -> /v1 Event",
                "apps/v1 deployments -> apps/v1 Deployment",
                "apps/v1 deployments/scale -> autoscaling/v1 Scale",
                "apps/v1beta2 deployments -> apps/v1beta2 Deployment",
                "events.k8s.io/v1 events -> events.k8s.io/v1 Event",
            ]
        );
    }

    /// Scripted answers: discovery endpoints answer from their queue, then with `core()` and
    /// `groups(extra)`; CRD lists are empty and CRD watches held open. Records when each
    /// discovery endpoint was called.
    struct Script {
        api: VecDeque<(u16, Value)>,
        apis: VecDeque<(u16, Value)>,
        extra: Vec<Value>,
        hold_crd_list: bool,
        calls: Vec<(String, Instant)>,
    }

    impl Script {
        fn new() -> Self {
            Self {
                api: VecDeque::new(),
                apis: VecDeque::new(),
                extra: Vec::new(),
                hold_crd_list: false,
                calls: Vec::new(),
            }
        }

        fn answer(&mut self, call: &Call) -> Reply {
            let scripted = |queue: &mut VecDeque<(u16, Value)>, default: Value| {
                let (code, body) = queue.pop_front().unwrap_or((200, default));
                Reply::Json(code, body)
            };
            match (call.path.as_str(), call.is_watch()) {
                (CRDS, true) => Reply::Hold,
                (CRDS, false) if self.hold_crd_list => Reply::Hold,
                (CRDS, false) => Reply::Json(200, fixtures::list(vec![])),
                (path @ ("/api" | "/apis"), false) => {
                    self.calls.push((path.to_string(), Instant::now()));
                    if path == "/api" {
                        scripted(&mut self.api, core())
                    } else {
                        scripted(&mut self.apis, groups(&self.extra))
                    }
                }
                (path, _) => panic!("unexpected call to {path}"),
            }
        }

        fn times(&self, path: &str) -> Vec<Instant> {
            self.calls
                .iter()
                .filter(|(p, _)| p == path)
                .map(|(_, t)| *t)
                .collect()
        }
    }

    /// Waits until the discovered resources satisfy `test`.
    async fn until(discovery: &Discovery, test: impl Fn(&ServedResources) -> bool) {
        let mut current = discovery.current.clone();
        current
            .wait_for(|c| c.as_deref().is_some_and(&test))
            .await
            .unwrap();
    }

    /// Bounds a scenario on the paused clock.
    async fn bounded(scenario: impl std::future::Future<Output = ()>) {
        tokio::time::timeout(Duration::from_secs(3600), scenario)
            .await
            .expect("the scenario did not finish");
    }

    #[tokio::test(start_paused = true)]
    async fn a_crd_change_leads_to_a_new_discovery() {
        bounded(async {
            let (client, mut api) = fixtures::pair();
            let start = Instant::now();
            let discovery = Discovery::spawn(client);
            let mut script = Script::new();
            api.serve_until(|c| script.answer(c), discovery.ready())
                .await
                .unwrap();
            api.serve_until_watching(|c| script.answer(c), CRDS).await;
            // Whatever the start-up caused has run: no widgets yet.
            api.serve_until(
                |c| script.answer(c),
                tokio::time::sleep(Duration::from_secs(10)),
            )
            .await;
            assert!(
                discovery
                    .current()
                    .kinds_for("example.com", "v1", "widgets")
                    .is_empty()
            );

            script.extra.push(widgets());
            api.end_watches(
                CRDS,
                &[json!({"type": "ADDED", "object": {
                    "apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata",
                    "metadata": {"name": "widgets.example.com", "resourceVersion": "2"}}})],
            );
            api.serve_until(
                |c| script.answer(c),
                until(&discovery, |s| {
                    !s.kinds_for("example.com", "v1", "widgets").is_empty()
                }),
            )
            .await;
            assert!(
                Instant::now() - start < REFRESH_PERIOD,
                "found by the CRD event, not by the periodic refresh"
            );
            assert_eq!(
                discovery.current().kinds_for("example.com", "v1", "widget"),
                [gvk("example.com", "v1", "Widget")]
            );
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn only_discoveries_that_may_change_schemas_are_new_revisions() {
        bounded(async {
            let (client, mut api) = fixtures::pair();
            let discovery = Discovery::spawn(client);
            let revisions = discovery.revisions();
            let mut script = Script::new();
            script.hold_crd_list = true;
            api.serve_until(|c| script.answer(c), discovery.ready())
                .await
                .unwrap();
            assert_eq!(*revisions.borrow(), 1, "the first discovery");

            // A requested discovery that finds the same resources: no new revision.
            api.serve_until(|c| script.answer(c), discovery.refresh())
                .await
                .unwrap();
            assert_eq!(*revisions.borrow(), 1, "a refresh finding nothing new");

            // One that finds a new resource is.
            script.extra.push(widgets());
            api.serve_until(|c| script.answer(c), discovery.refresh())
                .await
                .unwrap();
            assert_eq!(*revisions.borrow(), 2, "a refresh finding widgets");

            // So is the periodic one, which may follow a schema change nobody announced.
            api.serve_until(
                |c| script.answer(c),
                tokio::time::sleep(REFRESH_PERIOD + Duration::from_secs(1)),
            )
            .await;
            assert_eq!(*revisions.borrow(), 3, "the periodic discovery");
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn failures_are_retried_with_backoff_and_keep_the_last_result() {
        bounded(async {
            let (client, mut api) = fixtures::pair();
            let discovery = Discovery::spawn(client);
            let mut script = Script::new();
            // No CRD events: every discovery below comes from a failure, a request or the clock.
            script.hold_crd_list = true;
            script.api.push_back((500, status(500, "InternalError")));
            api.serve_until(|c| script.answer(c), discovery.ready())
                .await
                .unwrap();
            let api_calls = script.times("/api");
            assert_eq!(api_calls.len(), 2);
            assert_eq!(api_calls[1] - api_calls[0], retry::CLUSTER.first);

            // A requested discovery that fails reports why and keeps what was known.
            script
                .apis
                .push_back((503, status(503, "ServiceUnavailable")));
            let refreshed = api
                .serve_until(|c| script.answer(c), discovery.refresh())
                .await;
            let error = refreshed.unwrap_err();
            assert_eq!(
                error,
                DiscoveryError::Status {
                    path: "/apis",
                    status: 503,
                    message: "mocked ServiceUnavailable".into()
                }
            );
            assert!(error.to_string().contains("/apis"), "{error}");
            assert!(error.to_string().contains("HTTP 503"), "{error}");
            assert_eq!(
                discovery.current().kinds_for("", "v1", "pods"),
                [gvk("", "v1", "Pod")]
            );

            // Retried after the first delay again, then every refresh period.
            let failed = Instant::now();
            api.serve_until(
                |c| script.answer(c),
                tokio::time::sleep(retry::CLUSTER.first + REFRESH_PERIOD + Duration::from_secs(1)),
            )
            .await;
            let later: Vec<Duration> = script
                .times("/apis")
                .into_iter()
                .filter(|t| *t > failed)
                .map(|t| t - failed)
                .collect();
            assert_eq!(
                later,
                [retry::CLUSTER.first, retry::CLUSTER.first + REFRESH_PERIOD]
            );
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_without_aggregated_discovery_is_named() {
        bounded(async {
            let (client, mut api) = fixtures::pair();
            let discovery = Discovery::spawn(client);
            let mut script = Script::new();
            script.hold_crd_list = true;
            script.api.push_back((
                200,
                json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}),
            ));
            let refreshed = api
                .serve_until(|c| script.answer(c), discovery.refresh())
                .await;
            assert_eq!(
                refreshed.unwrap_err(),
                DiscoveryError::NotAggregated {
                    path: "/api",
                    kind: "APIVersions".into()
                }
            );
        })
        .await;
    }
}
