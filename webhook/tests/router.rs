//! In-process tests of the webhook router: AdmissionReview fixtures in, responses out, and hot
//! reload (publish, request, publish again, request: the decision changes with no restart).

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use celgate_engine::model::{
    FailurePolicy, MutatingBindingSpec, MutatingPolicySpec, Mutation, PatchType,
};
use celgate_engine::mutate::{ApplySemantics, KindSchema, compile_mutating};
use celgate_engine::schema::schemas_from_openapi;
use celgate_engine::{BoundMutatingPolicy, PolicySet, compile_validating};
use celgate_snapshot::{Deps, KindSchemaView, NamespaceView, SnapshotStore};
use celgate_webhook::AppState;
use celgate_webhook::metrics::Metrics;
use celgate_webhook::metrics_server;
use celgate_webhook::server::router;
use common::bound;
use http_body_util::BodyExt;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tower::ServiceExt;

fn policy(limit: i64, failure_policy: FailurePolicy) -> PolicySet {
    PolicySet::new(vec![bound(limit, failure_policy)], Vec::new())
}

fn review(resource: &str, replicas: i64) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": "CREATE",
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": resource},
        "name": "web", "namespace": "default",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas}}}})
}

/// Handler state whose snapshot knows the fixtures' namespace (and no policies yet).
fn new_state() -> Arc<AppState> {
    state_and_registry().0
}

/// Like [`new_state`], with the registry its metrics are in.
fn state_and_registry() -> (Arc<AppState>, Arc<Registry>) {
    let store = SnapshotStore::new();
    store.publish_namespaces(NamespaceView::new([(
        "default".to_string(),
        json!({"metadata": {"name": "default"}}),
    )]));
    let mut registry = Registry::with_prefix("celgate");
    let metrics = Metrics::register(&mut registry, 10);
    (
        AppState::new(store, Deps::default(), metrics),
        Arc::new(registry),
    )
}

/// What the metrics endpoint over `registry` answers.
async fn scrape(registry: &Arc<Registry>) -> String {
    let resp = metrics_server::router(registry.clone())
        .oneshot(
            Request::get("/metrics")
                .body(Body::empty())
                .expect("builds"),
        )
        .await
        .expect("answers");
    assert_eq!(resp.status(), StatusCode::OK);
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Publishes a policy set, as the operator does after compiling.
fn publish(state: &AppState, policies: PolicySet) {
    state
        .store
        .publish_policies(Arc::new(policies), Arc::default(), Arc::default());
}

async fn post(state: &Arc<AppState>, path: &str, body: String) -> (StatusCode, String) {
    let resp = router(state.clone())
        .oneshot(
            Request::post(path)
                .header("content-type", "application/json")
                .body(Body::from(body))
                .expect("request builds"),
        )
        .await
        .expect("router answers");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn get(state: &Arc<AppState>, path: &str) -> (StatusCode, String) {
    let resp = router(state.clone())
        .oneshot(Request::get(path).body(Body::empty()).expect("builds"))
        .await
        .expect("router answers");
    let status = resp.status();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn validate(state: &Arc<AppState>, review: &Value) -> Value {
    let (status, body) = post(state, "/validate", review.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).expect("the response is JSON")
}

#[tokio::test]
async fn not_ready_until_the_first_snapshot() {
    let state = new_state();
    let (status, _) = post(&state, "/validate", review("deployments", 1).to_string()).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let ready = router(state.clone())
        .oneshot(Request::get("/readyz").body(Body::empty()).expect("builds"))
        .await
        .expect("answers");
    assert_eq!(ready.status(), StatusCode::SERVICE_UNAVAILABLE);
    publish(&state, PolicySet::default());
    let ready = router(state.clone())
        .oneshot(Request::get("/readyz").body(Body::empty()).expect("builds"))
        .await
        .expect("answers");
    assert_eq!(ready.status(), StatusCode::OK);
}

#[tokio::test]
async fn denies_with_upstream_message_and_reloads_without_restart() {
    let (state, registry) = state_and_registry();
    publish(&state, policy(5, FailurePolicy::Fail));
    let resp = validate(&state, &review("deployments", 6)).await;
    assert_eq!(resp["kind"], "AdmissionReview");
    assert_eq!(
        resp["response"]["uid"],
        "705ab4f5-6393-11e8-b7cc-42010a800002"
    );
    assert_eq!(resp["response"]["allowed"], false);
    assert_eq!(
        resp["response"]["status"]["message"],
        "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5"
    );
    assert_eq!(resp["response"]["status"]["code"], 422);
    assert_eq!(resp["response"]["status"]["reason"], "Invalid");
    assert_eq!(
        validate(&state, &review("deployments", 5)).await["response"]["allowed"],
        true
    );

    publish(&state, policy(10, FailurePolicy::Fail));
    assert_eq!(
        validate(&state, &review("deployments", 6)).await["response"]["allowed"],
        true
    );
    assert_eq!(
        validate(&state, &review("deployments", 11)).await["response"]["allowed"],
        false
    );

    let text = scrape(&registry).await;
    assert!(text.contains("celgate_validating_admission_policy_check_total{policy=\"demo-policy.example.com\",policy_binding=\"demo-binding-test.example.com\",error_type=\"invalid_error\",enforcement_action=\"deny\"} 2"), "{text}");
    for line in [
        "celgate_webhook_requests_total{path=\"/validate\",code=\"200\"} 4",
        "celgate_webhook_request_duration_seconds_count{path=\"/validate\"} 4",
        "celgate_admission_decisions_total{kind=\"validating\",decision=\"denied\"} 2",
        "celgate_admission_decisions_total{kind=\"validating\",decision=\"allowed\"} 2",
        "celgate_decision_log_lines_total 2",
    ] {
        assert!(text.contains(line), "missing {line}:\n{text}");
    }
    // The admission port serves no metrics.
    let (status, _) = get(&state, "/metrics").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn unmatched_kinds_are_allowed() {
    let state = new_state();
    publish(&state, policy(5, FailurePolicy::Fail));
    let resp = validate(&state, &review("statefulsets", 100)).await;
    assert_eq!(resp["response"]["allowed"], true);
    assert!(resp["response"].get("status").is_none());
}

#[tokio::test]
async fn malformed_reviews_get_400_saying_what_is_wrong() {
    let (state, registry) = state_and_registry();
    publish(&state, PolicySet::default());
    for (body, says) in [
        ("{".to_string(), "not valid JSON"),
        (json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}).to_string(), "admission.k8s.io/v1"),
        (json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).to_string(), "no request"),
        (json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": 1}}).to_string(), "request.uid must be a string"),
    ] {
        for path in ["/validate", "/mutate"] {
            let (status, text) = post(&state, path, body.clone()).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path} {body}");
            assert!(text.contains(says), "{path} {body}: {text}");
        }
    }
    // Counted by route, whether the body or the dispatch rejected it.
    let metrics = scrape(&registry).await;
    for line in [
        "celgate_webhook_requests_total{path=\"/validate\",code=\"400\"} 4",
        "celgate_webhook_errors_total{path=\"/mutate\",reason=\"bad_request\"} 4",
    ] {
        assert!(metrics.contains(line), "missing {line}:\n{metrics}");
    }
}

/// A review whose object holds, at `spec.deep`, an array nested `depth` levels deep: the object
/// then nests `depth + 2` levels, the review `depth + 4`.
fn nested_review(depth: usize, replicas: i64) -> String {
    let nested = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    review("deployments", replicas).to_string().replacen(
        &format!("\"replicas\":{replicas}"),
        &format!("\"replicas\":{replicas},\"deep\":{nested}"),
        1,
    )
}

#[test]
fn objects_nested_as_deep_as_kube_apiserver_allows_are_evaluated() {
    // On the stack the celgate binary gives its runtime's threads.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let answers = tokio::spawn(async {
            let state = new_state();
            let mut deep = bound(5, FailurePolicy::Fail);
            let mut spec = deep.policy.spec.clone();
            spec.validations[0].expression =
                "object.spec.replicas <= 5 && object.spec.deep == object.spec.deep".into();
            deep.policy = Arc::new(compile_validating(spec));
            publish(&state, PolicySet::new(vec![deep], Vec::new()));
            let mut answers = Vec::new();
            for replicas in [5, 6] {
                let (status, body) =
                    post(&state, "/validate", nested_review(9_998, replicas)).await;
                answers.push((status, body));
            }
            let (status, text) = post(&state, "/validate", nested_review(9_999, 1)).await;
            answers.push((status, text));
            answers
        })
        .await
        .unwrap();
        assert_eq!(answers[0].0, StatusCode::OK, "{}", answers[0].1);
        assert!(
            answers[0].1.contains("\"allowed\":true"),
            "{}",
            answers[0].1
        );
        assert_eq!(answers[1].0, StatusCode::OK, "{}", answers[1].1);
        assert!(
            answers[1].1.contains("\"allowed\":false"),
            "{}",
            answers[1].1
        );
        // Deeper than any object kube-apiserver stores: a clear 400.
        assert_eq!(answers[2].0, StatusCode::BAD_REQUEST);
        assert!(
            answers[2]
                .1
                .contains("request.object cannot be decoded: nested deeper than 10000 levels"),
            "{}",
            answers[2].1
        );
    });
}

/// A mutating policy setting deployments' replicas to 5, bound, with the Deployment schema.
fn publish_mutating(state: &AppState) {
    let spec = MutatingPolicySpec {
        name: "replicas.example.com".into(),
        match_constraints: bound(0, FailurePolicy::Fail)
            .policy
            .spec
            .match_constraints
            .clone(),
        mutations: vec![Mutation {
            patch_type: PatchType::ApplyConfiguration,
            apply_configuration: Some("Object{spec: Object.spec{replicas: 5}}".into()),
            json_patch: None,
        }],
        failure_policy: FailurePolicy::Fail,
        ..Default::default()
    };
    let set = PolicySet::new(
        Vec::new(),
        vec![BoundMutatingPolicy {
            policy: Arc::new(compile_mutating(spec, ApplySemantics::Upstream)),
            bindings: vec![Arc::new(MutatingBindingSpec {
                name: "replicas-binding".into(),
                policy_name: "replicas.example.com".into(),
                ..Default::default()
            })]
            .into(),
        }],
    );
    let doc = json!({"components": {"schemas": {"Deployment": {"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"type": "object", "properties": {"name": {"type": "string"}}},
        "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}},
        "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "Deployment"}]}}}});
    let schemas = schemas_from_openapi(&doc).unwrap();
    let schemas = KindSchemaView::new(schemas.into_iter().map(|(gvk, schema)| {
        (
            gvk,
            KindSchema {
                schema,
                built_in: true,
            },
        )
    }));
    state
        .store
        .publish_policies(Arc::new(set), Arc::default(), Arc::new(schemas));
}

#[tokio::test]
async fn mutate_answers_a_json_patch_from_the_webhook_of_the_policys_group() {
    let (state, registry) = state_and_registry();
    let (status, _) = post(&state, "/mutate", review("deployments", 1).to_string()).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "not ready before the first set"
    );
    publish_mutating(&state);

    let (status, body) = post(
        &state,
        "/mutate/fail/never",
        review("deployments", 1).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    let response = &answer["response"];
    assert_eq!(response["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert_eq!(response["allowed"], true);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    assert_eq!(
        patch,
        json!([{"op": "replace", "path": "/spec/replicas", "value": 5}])
    );

    // The fail-open webhook serves no policy here: allowed, no patch.
    let (_, body) = post(
        &state,
        "/mutate/ignore/never",
        review("deployments", 1).to_string(),
    )
    .await;
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["response"]["allowed"], true);
    assert!(answer["response"].get("patch").is_none(), "{body}");

    // An object already mutated gets no patch (the same mutation twice is the same object).
    let (_, body) = post(&state, "/mutate", review("deployments", 5).to_string()).await;
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert!(answer["response"].get("patch").is_none(), "{body}");

    let (status, _) = post(
        &state,
        "/mutate/fail/sometimes",
        review("deployments", 1).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let metrics = scrape(&registry).await;
    assert!(
        metrics.contains(
            "celgate_mutating_admission_policy_check_total{policy=\"replicas.example.com\",policy_binding=\"replicas-binding\",error_type=\"no_error\"} 2"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("celgate_mutating_admission_policy_check_duration_seconds_bucket"),
        "{metrics}"
    );
}

#[tokio::test]
async fn compile_errors_follow_the_failure_policy() {
    let mut one = bound(5, FailurePolicy::Fail);
    let base = one.policy.spec.clone();
    let broken = |failure_policy| {
        let mut spec = base.clone();
        spec.validations[0].expression = "object.spec.replicas <".into();
        spec.failure_policy = failure_policy;
        Arc::new(compile_validating(spec))
    };
    one.policy = broken(FailurePolicy::Fail);
    let state = new_state();
    publish(&state, PolicySet::new(vec![one.clone()], Vec::new()));
    let resp = validate(&state, &review("deployments", 1)).await;
    assert_eq!(resp["response"]["allowed"], false);
    let message = resp["response"]["status"]["message"]
        .as_str()
        .expect("a message");
    assert!(
        message
            .contains("denied request: compilation error: compilation failed: ERROR: <input>:1:"),
        "{message}"
    );
    one.policy = broken(FailurePolicy::Ignore);
    publish(&state, PolicySet::new(vec![one], Vec::new()));
    assert_eq!(
        validate(&state, &review("deployments", 1)).await["response"]["allowed"],
        true
    );
}

#[tokio::test]
async fn each_webhook_path_evaluates_only_its_failure_policy() {
    let state = new_state();
    publish(&state, policy(5, FailurePolicy::Fail));
    let body = review("deployments", 6).to_string();
    let (status, fail) = post(&state, "/validate/fail", body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(fail.contains("\"allowed\":false"), "{fail}");
    let (status, ignore) = post(&state, "/validate/ignore", body.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(ignore.contains("\"allowed\":true"), "{ignore}");
    let (status, _) = post(&state, "/validate/other", body).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// A review of a write of one of celgate's own kinds.
fn own_kind_review(kind: &str, resource: &str, object: Value) -> String {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0c6c5c4e-7d0a-4a36-a1c5-8f2f0a9e6b11", "operation": "CREATE",
        "kind": {"group": "admission.celgate.io", "version": "v1", "kind": kind},
        "resource": {"group": "admission.celgate.io", "version": "v1", "resource": resource},
        "name": object["metadata"]["name"],
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object}})
    .to_string()
}

fn mutating_policy(expression: &str) -> Value {
    json!({"apiVersion": "admission.celgate.io/v1", "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": "add-label"},
        "spec": {"failurePolicy": "Fail", "reinvocationPolicy": "Never",
            "matchConstraints": {"matchPolicy": "Equivalent", "namespaceSelector": {},
                "objectSelector": {}, "resourceRules": [{"apiGroups": [""],
                    "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["configmaps"]}]},
            "mutations": [{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": expression}}]}})
}

#[tokio::test]
async fn mutating_policies_are_validated_like_in_tree() {
    let state = new_state();
    let ok = mutating_policy("Object{metadata: Object.metadata{labels: {'a': 'b'}}}");
    let (status, body) = post(
        &state,
        "/validate-policies",
        own_kind_review("MutatingAdmissionPolicy", "mutatingadmissionpolicies", ok),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("\"allowed\":true"), "{body}");

    let bad = mutating_policy("Object.metadata{}");
    let (_, body) = post(
        &state,
        "/validate-policies",
        own_kind_review("MutatingAdmissionPolicy", "mutatingadmissionpolicies", bad),
    )
    .await;
    let resp: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(resp["response"]["allowed"], false);
    assert_eq!(resp["response"]["status"]["code"], 422);
    assert_eq!(
        resp["response"]["status"]["message"],
        "MutatingAdmissionPolicy.admission.celgate.io \"add-label\" is invalid: spec.mutations[0].applyConfiguration.expression: Invalid value: \"Object.metadata{}\": must evaluate to Object but got Object.metadata"
    );
}

#[tokio::test]
async fn mutating_bindings_are_validated_like_in_tree() {
    let state = new_state();
    let binding = json!({"apiVersion": "admission.celgate.io/v1",
        "kind": "MutatingAdmissionPolicyBinding", "metadata": {"name": "b"},
        "spec": {"paramRef": {"parameterNotFoundAction": "Deny"}}});
    let (status, body) = post(
        &state,
        "/validate-policies",
        own_kind_review(
            "MutatingAdmissionPolicyBinding",
            "mutatingadmissionpolicybindings",
            binding,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let resp: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        resp["response"]["status"]["message"],
        "MutatingAdmissionPolicyBinding.admission.celgate.io \"b\" is invalid: [spec.policyName: Required value, spec.paramRef: Required value: one of name or selector must be specified]"
    );
    let causes = resp["response"]["status"]["details"]["causes"]
        .as_array()
        .unwrap();
    assert_eq!(causes[0]["field"], "spec.policyName");
    assert_eq!(causes[0]["reason"], "FieldValueRequired");
}
