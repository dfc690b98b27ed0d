//! Dispatch without HTTP: reviews in, decisions out, over a store the test publishes into, with
//! tokio's clock paused so waits are asserted exactly, not against the wall clock.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use celgate_cel::authz::Decision;
use celgate_cel::{Authorizer, AuthzDecision, AuthzRequest};
use celgate_engine::model::{
    FailurePolicy, MatchResources, MutatingBindingSpec, MutatingPolicySpec, Mutation, ParamKind,
    ParamRef, ParameterNotFoundAction, PatchType, ReinvocationPolicy, ResourceRule,
    ValidatingBindingSpec, ValidatingPolicySpec, Validation, ValidationAction,
};
use celgate_engine::mutate::{ApplySemantics, KindSchema, compile_mutating};
use celgate_engine::received::ReceivedRequest;
use celgate_engine::schema::schemas_from_openapi;
use celgate_engine::{
    BoundMutatingPolicy, BoundPolicy, MutatingWebhookGroup, ParamObjects, PolicySet,
    compile_validating,
};
use celgate_snapshot::dispatch::{self, Call};
use celgate_snapshot::{
    AuthorizerSource, Deps, DispatchError, KindSchemaView, NamespaceView, ParamKindEntry,
    SnapshotStore,
};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The docs' demo policy over deployments, bound with Deny, checking `expression`.
fn policy(expression: &str) -> PolicySet {
    PolicySet::new(vec![bound(expression)], Vec::new())
}

/// The demo policy of [`policy`] with its binding.
fn bound(expression: &str) -> BoundPolicy {
    let spec = ValidatingPolicySpec {
        name: "demo-policy.example.com".into(),
        match_constraints: Some(MatchResources {
            resource_rules: vec![ResourceRule {
                operations: vec!["CREATE".into()],
                api_groups: vec!["apps".into()],
                api_versions: vec!["v1".into()],
                resources: vec!["deployments".into()],
                scope: "*".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        validations: vec![Validation {
            expression: expression.into(),
            ..Default::default()
        }],
        failure_policy: FailurePolicy::Fail,
        ..Default::default()
    };
    BoundPolicy {
        policy: Arc::new(compile_validating(spec)),
        bindings: vec![Arc::new(ValidatingBindingSpec {
            name: "demo-binding".into(),
            policy_name: "demo-policy.example.com".into(),
            match_resources: None,
            param_ref: None,
            validation_actions: vec![ValidationAction::Deny],
        })]
        .into(),
    }
}

/// The demo policy reading its limit from the ConfigMap param `default/limits`.
fn param_policy() -> PolicySet {
    PolicySet::new(vec![param_bound()], Vec::new())
}

/// The policy of [`param_policy`] with its binding.
fn param_bound() -> BoundPolicy {
    let mut bound = bound("object.spec.replicas <= int(params.data.max)");
    let mut spec = bound.policy.spec.clone();
    spec.param_kind = Some(ParamKind {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
    });
    bound.policy = Arc::new(compile_validating(spec));
    let mut binding = ValidatingBindingSpec::clone(&bound.bindings[0]);
    binding.param_ref = Some(Box::new(ParamRef {
        name: Some("limits".into()),
        namespace: Some("default".into()),
        selector: None,
        parameter_not_found_action: ParameterNotFoundAction::Deny,
    }));
    Arc::make_mut(&mut bound.bindings)[0] = Arc::new(binding);
    bound
}

fn configmaps() -> (String, String) {
    ("v1".into(), "ConfigMap".into())
}

fn configmaps_ready(max: &str) -> Option<ParamKindEntry> {
    let limits = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "limits", "namespace": "default"}, "data": {"max": max}});
    let mut objects = ParamObjects::new(true);
    objects.insert("default", "limits", Arc::new(limits));
    Some(ParamKindEntry::Ready(Arc::new(objects)))
}

/// The request of a review as the webhook receives it: `object` kept as text until read.
fn received(review: Value) -> ReceivedRequest {
    serde_json::from_str(&review["request"].to_string()).unwrap()
}

fn review(namespace: &str, replicas: i64) -> ReceivedRequest {
    received(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "705ab4f5", "operation": "CREATE",
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "name": "web", "namespace": namespace,
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": {"metadata": {"name": "web"}, "spec": {"replicas": replicas}}}}),
    )
}

/// A store that knows the namespace `default` and holds `policies`.
fn store_with(policies: PolicySet) -> Arc<SnapshotStore> {
    let store = SnapshotStore::new();
    store.publish_namespaces(NamespaceView::new([(
        "default".to_string(),
        json!({"metadata": {"name": "default"}}),
    )]));
    store.publish_policies(Arc::new(policies), Arc::default(), Arc::default());
    store
}

fn message(outcome: &celgate_engine::Outcome) -> Option<&str> {
    outcome.denial.as_ref().map(|d| d.message.as_str())
}

#[tokio::test(start_paused = true)]
async fn a_request_waits_for_params_still_syncing_and_decides_with_them() {
    let store = store_with(param_policy());
    store.publish_param_kind(&configmaps(), Some(ParamKindEntry::Syncing));
    let started = Instant::now();
    let syncer = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            store.publish_param_kind(&configmaps(), configmaps_ready("2"));
        })
    };
    let deps = Deps::default();
    let decided = dispatch::validate(&store, &deps, review("default", 3), Call::now(), None)
        .await
        .unwrap();
    assert_eq!(Instant::now() - started, Duration::from_millis(300));
    syncer.await.unwrap();
    assert_eq!(decided.uid, "705ab4f5");
    assert_eq!(
        message(&decided.outcome),
        Some(
            "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding' \
             denied request: failed expression: object.spec.replicas <= int(params.data.max)"
        )
    );
    let decided = dispatch::validate(&store, &deps, review("default", 2), Call::now(), None)
        .await
        .unwrap();
    assert!(decided.outcome.allowed());
}

#[tokio::test(start_paused = true)]
async fn params_that_never_sync_give_the_configuration_error_before_the_call_times_out() {
    let store = store_with(param_policy());
    store.publish_param_kind(&configmaps(), Some(ParamKindEntry::Syncing));
    let call = Call {
        started: Instant::now(),
        timeout: Duration::from_secs(1),
        at: SystemTime::now(),
    };
    let decided = dispatch::validate(&store, &Deps::default(), review("default", 1), call, None)
        .await
        .unwrap();
    // It waited for the params until the call timeout less the 0.5 s headroom, no longer.
    assert_eq!(Instant::now() - call.started, Duration::from_millis(500));
    assert_eq!(
        message(&decided.outcome),
        Some(
            "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding' \
             denied request: failed to configure binding: paramKind kind \
             `&ParamKind{APIVersion:v1,Kind:ConfigMap,}` not yet synced to use for admission"
        )
    );
}

const FORBIDDEN: &str = "celgate may not list configmaps (RBAC: grant list, watch on \"configmaps\" in API group \"\" to ServiceAccount celgate-system/celgate, e.g. with a ClusterRole labelled admission.celgate.io/aggregate-to-params=true)";

#[tokio::test(start_paused = true)]
async fn a_param_kind_celgate_may_not_read_fails_the_binding_at_once_with_the_missing_permission() {
    let store = store_with(param_policy());
    store.publish_param_kind(
        &configmaps(),
        Some(ParamKindEntry::Forbidden(FORBIDDEN.into())),
    );
    let started = Instant::now();
    let decided = dispatch::validate(
        &store,
        &Deps::default(),
        review("default", 1),
        Call::now(),
        None,
    )
    .await
    .unwrap();
    // No wait: the kind is not syncing, it is denied to celgate until someone grants it.
    assert_eq!(Instant::now() - started, Duration::ZERO);
    assert_eq!(
        message(&decided.outcome),
        Some(
            format!(
                "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding' \
                 denied request: failed to configure binding: {FORBIDDEN}"
            )
            .as_str()
        )
    );

    // Under failurePolicy Ignore the binding is skipped: the request is admitted, at once.
    let mut ignored = param_bound();
    let mut spec = ignored.policy.spec.clone();
    spec.failure_policy = FailurePolicy::Ignore;
    ignored.policy = Arc::new(compile_validating(spec));
    let store = store_with(PolicySet::new(vec![ignored], Vec::new()));
    store.publish_param_kind(
        &configmaps(),
        Some(ParamKindEntry::Forbidden(FORBIDDEN.into())),
    );
    let decided = dispatch::validate(
        &store,
        &Deps::default(),
        review("default", 1),
        Call::now(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(Instant::now() - started, Duration::ZERO);
    assert!(decided.outcome.allowed(), "{:?}", decided.outcome);

    // Granted: the kind lists, and its params decide.
    store.publish_param_kind(&configmaps(), configmaps_ready("0"));
    let decided = dispatch::validate(
        &store,
        &Deps::default(),
        review("default", 1),
        Call::now(),
        None,
    )
    .await
    .unwrap();
    assert!(!decided.outcome.allowed());
}

#[tokio::test(start_paused = true)]
async fn a_namespace_the_watch_has_not_seen_is_waited_for_up_to_five_seconds() {
    let store = store_with(policy("namespaceObject.metadata.name == 'late'"));
    let started = Instant::now();
    let publisher = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            store.publish_namespace("late", Some(json!({"metadata": {"name": "late"}})));
        })
    };
    let deps = Deps::default();
    let decided = dispatch::validate(&store, &deps, review("late", 1), Call::now(), None)
        .await
        .unwrap();
    publisher.await.unwrap();
    assert_eq!(Instant::now() - started, Duration::from_secs(2));
    assert!(decided.outcome.allowed(), "{:?}", decided.outcome);

    // A namespace that never appears: after the 5 s cap, upstream's not-found error.
    let started = Instant::now();
    let decided = dispatch::validate(&store, &deps, review("never", 1), Call::now(), None)
        .await
        .unwrap();
    assert_eq!(Instant::now() - started, Duration::from_secs(5));
    assert_eq!(
        message(&decided.outcome),
        Some("namespaces \"never\" not found")
    );
}

#[tokio::test]
async fn a_decision_reads_one_snapshot_even_while_new_ones_are_published() {
    let store = store_with(policy("object.spec.replicas <= 5"));
    let loaded = store.load();
    store.publish_policies(
        Arc::new(policy("object.spec.replicas <= 10")),
        Arc::default(),
        Arc::default(),
    );
    let received = review("default", 6);
    let req = received.request().unwrap();
    // The snapshot loaded before the publish still decides with the policy it holds.
    let before = dispatch::decide(&loaded, &req, None, None, None, SystemTime::now());
    assert!(!before.allowed());
    let after = dispatch::decide(&store.load(), &req, None, None, None, SystemTime::now());
    assert!(after.allowed());
}

#[tokio::test]
async fn errors_that_are_not_decisions() {
    let store = SnapshotStore::new();
    let deps = Deps::default();
    let not_ready = dispatch::validate(&store, &deps, review("default", 1), Call::now(), None)
        .await
        .unwrap_err();
    assert!(matches!(not_ready, DispatchError::NotReady), "{not_ready}");
    let store = store_with(PolicySet::default());
    let bad = received(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": 7}}),
    );
    let err = dispatch::validate(&store, &deps, bad, Call::now(), None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid AdmissionReview: request.uid must be a string"
    );
    // A ready snapshot with no mutating policy leaves the object as it is.
    let mutated = dispatch::mutate(&store, &deps, review("default", 1), Call::now(), None)
        .await
        .unwrap();
    assert!(mutated.outcome.allowed());
    assert!(mutated.outcome.patch.is_empty());
}

/// A Deployment review whose object and old object are the JSON texts given.
fn update_review(namespace: &str, object: &str, old_object: &str) -> ReceivedRequest {
    let text = format!(
        r#"{{"uid": "u-lazy", "operation": "UPDATE",
        "kind": {{"group": "apps", "version": "v1", "kind": "Deployment"}},
        "resource": {{"group": "apps", "version": "v1", "resource": "deployments"}},
        "name": "web", "namespace": "{namespace}", "userInfo": {{"username": "alice"}},
        "object": {object}, "oldObject": {old_object}}}"#
    );
    serde_json::from_str(&text).unwrap()
}

#[tokio::test]
async fn objects_are_decoded_only_when_a_policy_reads_them() {
    // `1e400` is JSON a double cannot hold: decoding it fails, so whether it was decoded shows.
    let (good, bad) = (
        r#"{"spec": {"replicas": 3}}"#,
        r#"{"spec": {"replicas": 1e400}}"#,
    );
    let deps = Deps::default();
    // The demo policy, on updates too.
    let on_update = |expression: &str| {
        let mut bound = bound(expression);
        let mut spec = bound.policy.spec.clone();
        if let Some(m) = spec.match_constraints.as_mut() {
            m.resource_rules[0].operations.push("UPDATE".into());
        }
        bound.policy = Arc::new(compile_validating(spec));
        PolicySet::new(vec![bound], Vec::new())
    };
    let validate = |store: Arc<SnapshotStore>, review: ReceivedRequest| {
        let deps = deps.clone();
        async move { dispatch::validate(&store, &deps, review, Call::now(), None).await }
    };
    // A policy that reads only `object`: the old object is never decoded.
    let store = store_with(on_update("object.spec.replicas <= 2"));
    let decided = validate(store.clone(), update_review("default", good, bad))
        .await
        .unwrap();
    assert!(!decided.outcome.allowed(), "3 replicas: denied");
    // …but a bad object it reads makes the request malformed, not a decision.
    let err = validate(store.clone(), update_review("default", bad, good))
        .await
        .unwrap_err();
    assert!(matches!(err, DispatchError::Request(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "invalid AdmissionReview: request.object cannot be decoded: number out of range at line 1 column 27"
    );
    // A request for a resource no policy names is answered without decoding either object.
    let configmap: ReceivedRequest = serde_json::from_str(
        r#"{"uid": "u-cm", "operation": "UPDATE",
            "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "resource": {"group": "", "version": "v1", "resource": "configmaps"},
            "name": "cm", "namespace": "default", "userInfo": {"username": "alice"},
            "object": {"data": {"n": 1e400}}, "oldObject": {"data": {"n": 1e400}}}"#,
    )
    .unwrap();
    let decided = validate(store.clone(), configmap).await.unwrap();
    assert!(decided.outcome.allowed());
    assert!(decided.outcome.checks.is_empty());
    // A policy that reads `oldObject` decodes it.
    let store = store_with(on_update(
        "oldObject == null || object.spec.replicas >= oldObject.spec.replicas",
    ));
    let err = validate(store.clone(), update_review("default", good, bad))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid AdmissionReview: request.oldObject cannot be decoded: number out of range at line 1 column 27"
    );
    let decided = validate(
        store,
        update_review("default", good, r#"{"spec": {"replicas": 4}}"#),
    )
    .await
    .unwrap();
    assert!(!decided.outcome.allowed(), "3 replicas after 4: denied");
}

/// Answers every check with Allow, after blocking its thread on the runtime as the operator's
/// SubjectAccessReview client does: that panics on a runtime worker, so a check made anywhere
/// but on a blocking thread fails the policy.
#[derive(Debug)]
struct BlockingAuthorizers;

struct BlockingAuthorizer;

impl Authorizer for BlockingAuthorizer {
    fn check(&self, _: &AuthzRequest) -> AuthzDecision {
        tokio::runtime::Handle::current().block_on(tokio::time::sleep(Duration::from_millis(1)));
        AuthzDecision {
            decision: Decision::Allow,
            reason: String::new(),
            error: None,
        }
    }
}

impl AuthorizerSource for BlockingAuthorizers {
    fn for_user(&self, _: &Value) -> Arc<dyn Authorizer> {
        Arc::new(BlockingAuthorizer)
    }

    fn resource_for(&self, _: &ParamKind) -> Option<String> {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn authorizer_checks_block_a_blocking_thread_never_a_runtime_worker() {
    let store = store_with(policy("authorizer.path('/healthz').check('get').allowed()"));
    let deps = Deps {
        authorizers: Some(Arc::new(BlockingAuthorizers)),
        ..Deps::default()
    };
    let decided = dispatch::validate(&store, &deps, review("default", 1), Call::now(), None)
        .await
        .unwrap();
    assert!(decided.outcome.allowed(), "{:?}", decided.outcome);
}

// Mutating policies.

/// The schema of `v1 ConfigMap` (data, and metadata with labels), as OpenAPI v3 publishes it.
fn configmap_schemas() -> KindSchemaView {
    let doc = json!({"components": {"schemas": {
        "ConfigMap": {"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {
                "name": {"type": "string"}, "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "data": {"type": "object", "additionalProperties": {"type": "string"}}},
            "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "ConfigMap"}]}
    }}});
    let schemas = schemas_from_openapi(&doc).unwrap();
    KindSchemaView::new(schemas.into_iter().map(|(gvk, schema)| {
        (
            gvk,
            KindSchema {
                schema,
                built_in: true,
            },
        )
    }))
}

/// Mutating policy `name` over ConfigMap creates with one mutation, bound by `<name>-binding`.
fn mutating(name: &str, failure_policy: FailurePolicy, mutation: Mutation) -> BoundMutatingPolicy {
    let spec = MutatingPolicySpec {
        name: name.into(),
        match_constraints: Some(MatchResources {
            resource_rules: vec![ResourceRule {
                operations: vec!["CREATE".into()],
                api_groups: vec!["".into()],
                api_versions: vec!["v1".into()],
                resources: vec!["configmaps".into()],
                scope: "*".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        mutations: vec![mutation],
        failure_policy,
        ..Default::default()
    };
    BoundMutatingPolicy {
        policy: Arc::new(compile_mutating(spec, ApplySemantics::Upstream)),
        bindings: vec![Arc::new(MutatingBindingSpec {
            name: format!("{name}-binding").into(),
            policy_name: name.into(),
            ..Default::default()
        })]
        .into(),
    }
}

fn apply_configuration(expression: &str) -> Mutation {
    Mutation {
        patch_type: PatchType::ApplyConfiguration,
        apply_configuration: Some(expression.into()),
        json_patch: None,
    }
}

fn label(team: &str) -> Mutation {
    apply_configuration(&format!(
        "Object{{metadata: Object.metadata{{labels: {{'team': '{team}'}}}}}}"
    ))
}

fn configmap_review(data: Value) -> ReceivedRequest {
    received(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "cm-1", "operation": "CREATE", "dryRun": true,
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "name": "cm", "namespace": "default",
        "userInfo": {"username": "alice"},
        "object": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default"}, "data": data}}}),
    )
}

/// A store that knows `default`, holds these mutating policies and, if given, the schemas.
fn mutating_store(
    policies: Vec<BoundMutatingPolicy>,
    schemas: KindSchemaView,
) -> Arc<SnapshotStore> {
    let store = SnapshotStore::new();
    store.publish_namespaces(NamespaceView::new([(
        "default".to_string(),
        json!({"metadata": {"name": "default"}}),
    )]));
    let set = PolicySet::new(Vec::new(), policies);
    store.publish_policies(Arc::new(set), Arc::default(), Arc::new(schemas));
    store
}

async fn mutate(store: &SnapshotStore, review: ReceivedRequest) -> celgate_engine::MutationOutcome {
    dispatch::mutate(store, &Deps::default(), review, Call::now(), None)
        .await
        .unwrap()
        .outcome
}

#[tokio::test(start_paused = true)]
async fn mutating_policies_patch_in_name_order_each_seeing_the_previous_result() {
    // Published out of order on purpose: the set's order is what runs; the operator sorts.
    let store = mutating_store(
        vec![
            mutating("a-team", FailurePolicy::Fail, label("a")),
            mutating(
                "b-owner",
                FailurePolicy::Fail,
                apply_configuration("Object{data: {'owner': object.metadata.labels['team']}}"),
            ),
        ],
        configmap_schemas(),
    );
    // A dry run is mutated as any request (the webhooks have no side effects).
    let outcome = mutate(&store, configmap_review(json!({"k": "v"}))).await;
    assert!(outcome.allowed(), "{:?}", outcome.denial);
    assert_eq!(
        outcome.patch.ops(),
        [
            json!({"op": "add", "path": "/data/owner", "value": "a"}),
            json!({"op": "add", "path": "/metadata/labels", "value": {"team": "a"}}),
        ]
    );
    assert_eq!(
        outcome
            .object(&json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "cm", "namespace": "default"}, "data": {"k": "v"}}))
            .unwrap()["metadata"]["labels"],
        json!({"team": "a"})
    );
    let policies: Vec<&str> = outcome.checks.iter().map(|c| &*c.policy).collect();
    assert_eq!(policies, ["a-team", "b-owner"]);
    assert!(
        outcome
            .checks
            .iter()
            .all(|c| c.error_type == celgate_engine::validate::ErrorType::NoError)
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_mutation_denies_under_fail_and_is_dropped_under_ignore() {
    let atomic = || apply_configuration("Object{spec: Object.spec{x: 1}}");
    let store = mutating_store(
        vec![mutating("broken", FailurePolicy::Fail, atomic())],
        configmap_schemas(),
    );
    let outcome = mutate(&store, configmap_review(json!({}))).await;
    let denial = outcome.denial.unwrap();
    assert_eq!(denial.code, 403);
    assert_eq!(denial.reason, "Invalid");
    assert_eq!(
        denial.message,
        "policy 'broken' with binding 'broken-binding' denied request: error applying patch: \
         failed to convert patch object to typed object: .spec: field not declared in schema"
    );
    assert!(outcome.patch.is_empty());

    let store = mutating_store(
        vec![
            mutating("broken", FailurePolicy::Ignore, atomic()),
            mutating("c-label", FailurePolicy::Fail, label("c")),
        ],
        configmap_schemas(),
    );
    let outcome = mutate(&store, configmap_review(json!({}))).await;
    assert!(outcome.allowed(), "{:?}", outcome.denial);
    assert_eq!(
        outcome.patch.ops(),
        [json!({"op": "add", "path": "/metadata/labels", "value": {"team": "c"}})]
    );
    assert_eq!(
        outcome.checks[0].error_type,
        celgate_engine::validate::ErrorType::InvalidError
    );

    // Only one webhook group's policies: the fail-closed, run-once webhook skips the
    // fail-open policy.
    let group = MutatingWebhookGroup::new(FailurePolicy::Fail, ReinvocationPolicy::Never);
    let mutated = dispatch::mutate(
        &store,
        &Deps::default(),
        configmap_review(json!({})),
        Call::now(),
        Some(group),
    )
    .await
    .unwrap();
    let policies: Vec<&str> = mutated.outcome.checks.iter().map(|c| &*c.policy).collect();
    assert_eq!(policies, ["c-label"]);
}

#[tokio::test(start_paused = true)]
async fn a_kind_without_a_schema_gets_upstreams_503_whatever_the_failure_policy() {
    let store = mutating_store(
        vec![mutating("a-team", FailurePolicy::Ignore, label("a"))],
        KindSchemaView::default(),
    );
    let outcome = mutate(&store, configmap_review(json!({}))).await;
    let denial = outcome.denial.unwrap();
    assert_eq!(denial.code, 503);
    assert_eq!(
        denial.message,
        "Resource kind /v1, Kind=ConfigMap not found. There can be a delay between when \
         CustomResourceDefinitions are created and when they are available."
    );
}

#[tokio::test(start_paused = true)]
async fn mutation_waits_for_params_as_validation_does_and_is_not_ready_before_the_first_set() {
    let store = SnapshotStore::new();
    let err = dispatch::mutate(
        &store,
        &Deps::default(),
        configmap_review(json!({})),
        Call::now(),
        None,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, DispatchError::NotReady));

    let mut bound = mutating(
        "from-param",
        FailurePolicy::Fail,
        apply_configuration("Object{data: {'max': params.data.max}}"),
    );
    let mut spec = bound.policy.spec.clone();
    spec.param_kind = Some(ParamKind {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
    });
    bound.policy = Arc::new(compile_mutating(spec, ApplySemantics::Upstream));
    let mut binding = MutatingBindingSpec::clone(&bound.bindings[0]);
    binding.param_ref = Some(Box::new(ParamRef {
        name: Some("limits".into()),
        namespace: Some("default".into()),
        selector: None,
        parameter_not_found_action: ParameterNotFoundAction::Deny,
    }));
    Arc::make_mut(&mut bound.bindings)[0] = Arc::new(binding);
    let store = mutating_store(vec![bound], configmap_schemas());
    store.publish_param_kind(&configmaps(), Some(ParamKindEntry::Syncing));
    let started = Instant::now();
    let syncer = {
        let store = store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            store.publish_param_kind(&configmaps(), configmaps_ready("7"));
        })
    };
    let outcome = mutate(&store, configmap_review(json!({}))).await;
    syncer.await.unwrap();
    assert_eq!(Instant::now() - started, Duration::from_millis(300));
    assert_eq!(
        outcome.patch.ops(),
        [json!({"op": "add", "path": "/data/max", "value": "7"})]
    );

    // A param kind celgate may not read fails the binding at once, as in validation.
    store.publish_param_kind(
        &configmaps(),
        Some(ParamKindEntry::Forbidden(FORBIDDEN.into())),
    );
    let started = Instant::now();
    let outcome = mutate(&store, configmap_review(json!({}))).await;
    assert_eq!(Instant::now() - started, Duration::ZERO);
    let denial = outcome.denial.unwrap();
    assert_eq!(
        denial.message,
        format!(
            "policy 'from-param' with binding 'from-param-binding' denied request: \
             failed to configure binding: {FORBIDDEN}"
        )
    );
}

#[test]
fn caught_up_only_once_every_param_kind_of_the_bound_policies_has_listed() {
    // Two policies share ConfigMaps, a third reads Secrets: the shared kind is looked up once,
    // and a later kind that is still syncing is still found.
    let shared = param_bound();
    let mut secrets = shared.clone();
    let mut spec = secrets.policy.spec.clone();
    spec.param_kind = Some(ParamKind {
        api_version: "v1".into(),
        kind: "Secret".into(),
    });
    secrets.policy = Arc::new(compile_validating(spec));
    let set = PolicySet::new(vec![shared.clone(), shared, secrets], Vec::new());
    let store = store_with(set);
    store.publish_param_kind(&configmaps(), configmaps_ready("1"));
    assert!(
        !store.load().caught_up_for("default"),
        "Secrets have not listed"
    );
    assert!(!store.load().caught_up(), "Secrets have not listed");
    store.publish_param_kind(
        &("v1".into(), "Secret".into()),
        Some(ParamKindEntry::Syncing),
    );
    assert!(!store.load().caught_up_for("default"));
    assert!(!store.load().caught_up());
    store.publish_param_kind(&("v1".into(), "Secret".into()), configmaps_ready("1"));
    assert!(store.load().caught_up_for("default"));
    assert!(store.load().caught_up());
    assert!(
        !store.load().caught_up_for("unknown-namespace"),
        "the namespace is not known"
    );
}

#[test]
fn caught_up_for_every_object_only_once_the_namespaces_have_listed() {
    let store = SnapshotStore::new();
    store.publish_policies(
        Arc::new(PolicySet::new(vec![param_bound()], Vec::new())),
        Arc::default(),
        Arc::default(),
    );
    store.publish_param_kind(&configmaps(), configmaps_ready("1"));
    assert!(!store.load().caught_up(), "no namespace list yet");
    // One namespace's event is not a list: the others may still be unknown.
    store.publish_namespace("team", Some(json!({"metadata": {"name": "team"}})));
    assert!(!store.load().caught_up(), "no namespace list yet");
    store.publish_namespaces(NamespaceView::new(Vec::new()));
    assert!(store.load().caught_up(), "listed, even with no namespace");
    store.publish_param_kind(&configmaps(), Some(ParamKindEntry::Syncing));
    assert!(!store.load().caught_up(), "ConfigMaps are listed again");
}

#[test]
fn a_call_timeout_too_large_for_the_clock_leaves_no_time_and_does_not_panic() {
    let call = Call {
        timeout: Duration::MAX,
        ..Call::now()
    };
    assert_eq!(call.evaluation_deadline(), call.started.into_std());
    let usual = Call::now();
    assert_eq!(
        usual.evaluation_deadline() - usual.started.into_std(),
        dispatch::DEFAULT_CALL_TIMEOUT
    );
}

/// The demo policy with a match condition excluding Deployments named `skipped`.
fn policy_skipping(expression: &str) -> PolicySet {
    let mut bound = bound(expression);
    let mut spec = bound.policy.spec.clone();
    spec.match_conditions = vec![celgate_engine::model::NamedExpression {
        name: "not-skipped".into(),
        expression: "object.metadata.name != 'skipped'".into(),
    }];
    bound.policy = Arc::new(compile_validating(spec));
    PolicySet::new(vec![bound], Vec::new())
}

/// The audit's decision of the snapshot's one binding: its outcome and whether it applied.
fn audit_decision(
    snapshot: &celgate_snapshot::Snapshot,
    req: &celgate_engine::Request<'_>,
    now: SystemTime,
) -> (celgate_engine::Outcome, bool) {
    let mut decided = Vec::new();
    celgate_snapshot::audit::decide_each_binding(
        snapshot,
        req,
        None,
        now,
        |_, _| true,
        |_, binding, outcome, applied| {
            decided.push((binding.to_string(), outcome.clone(), applied))
        },
    );
    let mut decided = decided.into_iter();
    let (binding, outcome, applied) = decided.next().expect("the binding is decided");
    assert_eq!(binding, "demo-binding");
    assert!(decided.next().is_none(), "one outcome for the one binding");
    (outcome, applied)
}

#[test]
fn the_audit_asks_whether_a_create_of_the_stored_object_is_admitted_and_whether_the_binding_applied()
 {
    use celgate_snapshot::audit::{StoredAs, Verdict, create_request, violation};
    let deployments = StoredAs {
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        kind: "Deployment".into(),
        namespaced: true,
    };
    let store = store_with(policy_skipping("object.spec.replicas <= 3"));
    let snapshot = store.load();
    let stored = |name: &str, replicas: i64| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default", "resourceVersion": "12"},
            "spec": {"replicas": replicas}})
    };
    let ask = |object: Value| {
        let received = create_request(&deployments, object, "audit-1");
        let req = received.request().unwrap();
        audit_decision(&snapshot, &req, SystemTime::now())
    };
    let (outcome, applied) = ask(stored("big", 5));
    assert!(applied);
    let found = violation(&outcome).unwrap();
    assert_eq!(found.verdict, Verdict::Fail);
    assert_eq!(
        found.message, "failed expression: object.spec.replicas <= 3",
        "the failed validation's own message, as an Audit binding's"
    );
    let (outcome, applied) = ask(stored("small", 2));
    assert!(applied, "a passing object still counts as matched");
    assert_eq!(violation(&outcome), None);
    let (outcome, applied) = ask(stored("skipped", 5));
    assert!(!applied, "a match condition that is false: not matched");
    assert_eq!(violation(&outcome), None);
}

/// A store holding the demo policy (at most 3 replicas) and the exception `team-a/web` of its
/// binding for Deployments named `web`, expiring at `expires`.
fn excepted_store(expires: SystemTime) -> Arc<SnapshotStore> {
    use celgate_engine::exception::{ExceptedPolicy, Exception, ExceptionSpec};
    let store = store_with(policy("object.spec.replicas <= 3"));
    let spec = ExceptionSpec {
        namespace: "team-a".into(),
        name: "web".into(),
        policies: vec![ExceptedPolicy {
            name: "demo-policy.example.com".into(),
            bindings: None,
        }],
        match_resources: MatchResources {
            resource_rules: vec![ResourceRule {
                resource_names: vec!["web".into()],
                operations: vec!["*".into()],
                api_groups: vec!["apps".into()],
                api_versions: vec!["*".into()],
                resources: vec!["deployments".into()],
                scope: "*".into(),
            }],
            ..Default::default()
        },
        match_conditions: Vec::new(),
        expires_at: Some(expires),
    };
    let set = celgate_engine::ExceptionSet::new([Arc::new(Exception::compile(spec))]);
    store.publish_exceptions(Arc::new(set));
    store
}

#[tokio::test(start_paused = true)]
async fn an_exception_lets_a_request_through_until_the_second_it_expires_at() {
    let expires = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let store = excepted_store(expires);
    let at = |at: SystemTime| Call { at, ..Call::now() };
    let before = at(expires - Duration::from_millis(1));
    let decided = dispatch::validate(&store, &Deps::default(), review("default", 5), before, None)
        .await
        .unwrap();
    assert_eq!(message(&decided.outcome), None);
    let excepted = &decided.outcome.excepted;
    assert_eq!(excepted.len(), 1);
    assert_eq!(
        (&*excepted[0].binding, &*excepted[0].exception),
        ("demo-binding", "team-a/web")
    );
    let decided = dispatch::validate(
        &store,
        &Deps::default(),
        review("default", 5),
        at(expires),
        None,
    )
    .await
    .unwrap();
    assert_eq!(
        message(&decided.outcome),
        Some(
            "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding' denied request: failed expression: object.spec.replicas <= 3"
        )
    );
    assert!(decided.outcome.excepted.is_empty());
}

#[test]
fn the_audit_reports_an_excepted_object_as_not_applied_with_the_exception_until_it_expires() {
    use celgate_snapshot::audit::{StoredAs, create_request, violation};
    let expires = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let store = excepted_store(expires);
    let snapshot = store.load();
    let deployments = StoredAs {
        group: "apps".into(),
        version: "v1".into(),
        resource: "deployments".into(),
        kind: "Deployment".into(),
        namespaced: true,
    };
    let web = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"}, "spec": {"replicas": 5}});
    let received = create_request(&deployments, web, "audit-1");
    let req = received.request().unwrap();
    let (outcome, applied) = audit_decision(&snapshot, &req, expires - Duration::from_secs(1));
    assert!(!applied);
    assert_eq!(violation(&outcome), None);
    assert_eq!(&*outcome.excepted[0].exception, "team-a/web");
    let (outcome, applied) = audit_decision(&snapshot, &req, expires);
    assert!(applied);
    assert!(violation(&outcome).is_some(), "expired: a violation again");
}
