//! Test fixtures: object builders, and a mocked API server behind a `kube::Client` for
//! reconcile tests (as kube-rs/controller-rs tests its reconcilers): the test sees each call
//! the code under test makes and answers it. Watches can be held open and ended later, with
//! events or an error.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::future::Future;
use std::sync::Arc;

use celgate_crds::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use http::{Method, Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{self, Handle, SendResponse};

use crate::controllers::stored_binding::{StoredBinding, Strings};
use crate::policy_kind::PolicyKind;

/// Path of the ValidatingAdmissionPolicy collection.
pub const POLICIES: &str = "/apis/admission.celgate.io/v1/validatingadmissionpolicies";
/// Path of the ValidatingAdmissionPolicyBinding collection.
pub const BINDINGS: &str = "/apis/admission.celgate.io/v1/validatingadmissionpolicybindings";

/// A ValidatingAdmissionPolicy as the API server returns it: one validation of ConfigMap
/// creates, with params of `param_kind` (apiVersion, kind) if given.
pub fn policy_json(
    name: &str,
    generation: i64,
    expression: &str,
    param_kind: Option<(&str, &str)>,
) -> Value {
    let mut spec = json!({
        "failurePolicy": "Fail",
        "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["configmaps"]}]},
        "validations": [{"expression": expression}],
    });
    if let Some((api_version, kind)) = param_kind {
        spec["paramKind"] = json!({"apiVersion": api_version, "kind": kind});
    }
    json!({
        "apiVersion": "admission.celgate.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": generation,
            "resourceVersion": format!("{generation}")},
        "spec": spec,
    })
}

/// [`policy_json`] as the CRD type.
pub fn policy(
    name: &str,
    generation: i64,
    expression: &str,
    param_kind: Option<(&str, &str)>,
) -> ValidatingAdmissionPolicy {
    serde_json::from_value(policy_json(name, generation, expression, param_kind)).unwrap()
}

/// A ValidatingAdmissionPolicyBinding of `policy` that denies, as the API server returns it.
pub fn binding_json(name: &str, policy: &str) -> Value {
    json!({
        "apiVersion": "admission.celgate.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1"},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    })
}

/// `binding` as its kind's store keeps it.
pub fn stored<P: PolicyKind>(binding: &P::Binding) -> Arc<StoredBinding<P>> {
    Arc::new(StoredBinding::of(binding, None, &mut Strings::default()))
}

/// [`binding_json`] as the CRD type.
pub fn binding(name: &str, policy: &str) -> ValidatingAdmissionPolicyBinding {
    serde_json::from_value(binding_json(name, policy)).unwrap()
}

/// A MutatingAdmissionPolicy of `failure` and `reinvocation` policy adding the label
/// `team: a` to created `resource` objects (core group), as the API server returns it.
pub fn mutating_policy(
    name: &str,
    failure: &str,
    reinvocation: &str,
    resource: &str,
) -> MutatingAdmissionPolicy {
    serde_json::from_value(json!({
        "apiVersion": "admission.celgate.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1,
            "resourceVersion": "1"},
        "spec": {
            "failurePolicy": failure,
            "reinvocationPolicy": reinvocation,
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": [resource]}]},
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": "Object{metadata: Object.metadata{labels: {'team': 'a'}}}"}}],
        },
    }))
    .unwrap()
}

/// A MutatingAdmissionPolicyBinding of `policy`, as the API server returns it.
pub fn mutating_binding(name: &str, policy: &str) -> MutatingAdmissionPolicyBinding {
    serde_json::from_value(json!({
        "apiVersion": "admission.celgate.io/v1", "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1, "resourceVersion": "1"},
        "spec": {"policyName": policy},
    }))
    .unwrap()
}

/// The test's side of the mocked API server.
pub struct ApiServer {
    handle: Handle<Request<Body>, Response<Body>>,
    held: Vec<(String, SendResponse<Response<Body>>)>,
}

/// A client whose every call reaches the returned [`ApiServer`].
pub fn pair() -> (Client, ApiServer) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (
        Client::new(service, "default"),
        ApiServer {
            handle,
            held: Vec::new(),
        },
    )
}

/// One call to the API server, not answered yet.
pub struct Call {
    /// The HTTP method.
    pub method: Method,
    /// The URL path.
    pub path: String,
    /// The query string, empty if none.
    pub query: String,
    /// The request body.
    pub body: Value,
    respond: SendResponse<Response<Body>>,
}

/// How [`ApiServer::serve_until`] answers a call.
pub enum Reply {
    /// This status and JSON body.
    Json(u16, Value),
    /// Nothing yet: the call (a watch) stays open until [`ApiServer::end_watches`].
    Hold,
}

fn response(status: u16, body: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(body).unwrap()))
        .unwrap()
}

impl Call {
    /// Whether the call is a watch.
    pub fn is_watch(&self) -> bool {
        self.query.split('&').any(|p| p == "watch=true")
    }

    /// Answers with `status` and a JSON body.
    pub fn reply(self, status: u16, body: Value) {
        self.respond.send_response(response(status, &body));
    }
}

/// A list of `items` as the API server returns it.
pub fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": items})
}

/// One group version of [`discovery`]: group, version, and its (resource, Kind) pairs.
pub type GroupVersion<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

/// An aggregated discovery answer (`APIGroupDiscoveryList`) listing `groups`.
pub fn discovery(groups: &[GroupVersion<'_>]) -> Value {
    let items: Vec<Value> = groups
        .iter()
        .map(|(group, version, resources)| {
            let resources: Vec<Value> = resources
                .iter()
                .map(|(resource, kind)| {
                    json!({"resource": resource, "responseKind": {"group": "", "version": "", "kind": kind},
                           "scope": "Namespaced", "verbs": ["get", "list"]})
                })
                .collect();
            json!({"metadata": {"name": group}, "versions": [
                {"version": version, "freshness": "Current", "resources": resources}]})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "items": items})
}

/// A failure Status with `code`.
pub fn status(code: u16, reason: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
           "message": format!("mocked {reason}"), "reason": reason, "code": code})
}

impl ApiServer {
    /// The next call the client makes.
    pub async fn next(&mut self) -> Call {
        let (request, respond) = self
            .handle
            .next_request()
            .await
            .expect("the client under test was dropped");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap();
        Call {
            method: parts.method,
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            respond,
        }
    }

    /// Answers every call with `answer` until `until` completes, and returns its output.
    pub async fn serve_until<T>(
        &mut self,
        mut answer: impl FnMut(&Call) -> Reply,
        until: impl Future<Output = T>,
    ) -> T {
        let mut until = std::pin::pin!(until);
        loop {
            tokio::select! {
                biased;
                out = &mut until => return out,
                call = self.next() => match answer(&call) {
                    Reply::Json(status, body) => call.reply(status, body),
                    Reply::Hold => self.held.push((call.path, call.respond)),
                },
            }
        }
    }

    /// Answers every call with `answer` until a watch of `path` is held open.
    pub async fn serve_until_watching(
        &mut self,
        mut answer: impl FnMut(&Call) -> Reply,
        path: &str,
    ) {
        while !self.held.iter().any(|(p, _)| p == path) {
            let call = self.next().await;
            match answer(&call) {
                Reply::Json(status, body) => call.reply(status, body),
                Reply::Hold => self.held.push((call.path, call.respond)),
            }
        }
    }

    /// Ends the held watches of `path`, each after sending `events` (JSON watch events).
    pub fn end_watches(&mut self, path: &str, events: &[Value]) {
        let lines: Vec<u8> = events
            .iter()
            .flat_map(|e| {
                let mut line = serde_json::to_vec(e).unwrap();
                line.push(b'\n');
                line
            })
            .collect();
        let (ended, held) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|(p, _)| p == path);
        self.held = held;
        let ended: Vec<(String, SendResponse<Response<Body>>)> = ended;
        assert!(!ended.is_empty(), "no watch of {path} is open");
        for (_, respond) in ended {
            respond.send_response(
                Response::builder()
                    .status(200)
                    .body(Body::from(lines.clone()))
                    .unwrap(),
            );
        }
    }
}

/// How ConfigMaps are stored (core `v1`, namespaced): the audit's tests' resource.
pub fn config_maps() -> celgate_snapshot::audit::StoredAs {
    celgate_snapshot::audit::StoredAs {
        group: String::new(),
        version: "v1".into(),
        resource: "configmaps".into(),
        kind: "ConfigMap".into(),
        namespaced: true,
    }
}
