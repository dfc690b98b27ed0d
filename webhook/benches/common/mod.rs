//! The realistic fixture (issue 13, item 2; `e2e/src/fixture.rs`) as the webhook's benchmarks
//! serve it: its policies compiled and bound, in a snapshot with its namespaces and params.
//! Shared by `load.rs` and `hand_written.rs`.

use std::sync::Arc;

use celgate_engine::model::{
    FailurePolicy, LabelSelector, MatchResources, MutatingBindingSpec, MutatingPolicySpec,
    Mutation, NamedExpression, ParamKind, ParamRef, ParameterNotFoundAction, PatchType,
    ResourceRule, ValidatingBindingSpec, ValidatingPolicySpec, Validation, ValidationAction,
};
use celgate_engine::mutate::{ApplySemantics, KindSchema, compile_mutating};
use celgate_engine::schema::schemas_from_openapi;
use celgate_engine::{
    BoundMutatingPolicy, BoundPolicy, ParamObjects, PolicySet, compile_validating,
};
use celgate_snapshot::{KindSchemaView, NamespaceView, ParamKindEntry, SnapshotStore};
use serde_json::json;

/// The realistic fixture, shared with `make bench-scale` and `make bench-e2e`; its manifests are
/// for those benches only.
#[allow(dead_code)]
#[path = "../../../e2e/src/fixture.rs"]
pub mod fixture;

/// The celgate binary's allocator (celgate/src/main.rs), so this measures the product.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The number in environment variable `name`, or `default`.
pub fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The schemas of `core/v1` and `apps/v1` from the committed built-in snapshot, as the operator
/// publishes them for the kinds mutating policies match.
fn builtin_schemas() -> KindSchemaView {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../kinds/schemas/builtin-1.36.json"
    );
    let snapshot: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut all = Vec::new();
    for group_version in ["api/v1", "apis/apps/v1"] {
        let schemas = schemas_from_openapi(&snapshot["openapi"][group_version]).unwrap();
        assert!(!schemas.is_empty(), "no {group_version} schemas in {path}");
        all.extend(schemas);
    }
    KindSchemaView::new(all.into_iter().map(|(gvk, schema)| {
        (
            gvk,
            KindSchema {
                schema,
                built_in: true,
            },
        )
    }))
}

/// The engine's form of a fixture policy's match constraints.
fn fixture_match(p: &fixture::Policy) -> MatchResources {
    MatchResources {
        resource_rules: vec![ResourceRule {
            operations: p.rule.operations.clone(),
            api_groups: p.rule.api_groups.clone(),
            api_versions: p.rule.api_versions.clone(),
            resources: p.rule.resources.clone(),
            scope: "*".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn fixture_named(items: &[(String, String)]) -> Vec<NamedExpression> {
    items
        .iter()
        .map(|(name, expression)| NamedExpression {
            name: name.clone(),
            expression: expression.clone(),
        })
        .collect()
}

fn fixture_param_kind(p: &fixture::Policy) -> Option<ParamKind> {
    p.param.as_ref().map(|_| ParamKind {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
    })
}

fn fixture_param_ref(p: &fixture::Policy) -> Option<ParamRef> {
    p.param.as_ref().map(|name| ParamRef {
        name: Some(name.clone()),
        namespace: Some(fixture::PARAMS_NAMESPACE.into()),
        selector: None,
        parameter_not_found_action: ParameterNotFoundAction::Deny,
    })
}

/// The binding's narrowing: its namespace selector, if the fixture gives it one.
fn fixture_binding_match(p: &fixture::Policy) -> Option<MatchResources> {
    (!p.namespace_labels.is_empty()).then(|| MatchResources {
        namespace_selector: LabelSelector {
            match_labels: p.namespace_labels.to_vec(),
            match_expressions: Vec::new(),
        },
        ..Default::default()
    })
}

/// The fixture's validating policies, compiled and bound (each must compile).
pub fn fixture_validating(policies: &[fixture::Policy]) -> Vec<BoundPolicy> {
    policies
        .iter()
        .map(|p| {
            let spec = ValidatingPolicySpec {
                name: p.name.clone(),
                param_kind: fixture_param_kind(p),
                match_constraints: Some(fixture_match(p)),
                validations: p
                    .validations
                    .iter()
                    .map(|v| Validation {
                        expression: v.expression.clone(),
                        message_expression: v.message_expression.clone(),
                        ..Default::default()
                    })
                    .collect(),
                variables: fixture_named(&p.variables),
                match_conditions: fixture_named(&p.match_conditions),
                failure_policy: FailurePolicy::Fail,
                ..Default::default()
            };
            let policy = compile_validating(spec);
            assert!(
                policy.compile_errors().is_empty(),
                "{}: {:?}",
                p.name,
                policy.compile_errors()
            );
            BoundPolicy {
                policy: Arc::new(policy),
                bindings: vec![Arc::new(ValidatingBindingSpec {
                    name: format!("{}-binding", p.name).into(),
                    policy_name: p.name.clone(),
                    match_resources: fixture_binding_match(p),
                    param_ref: fixture_param_ref(p).map(Box::new),
                    validation_actions: vec![ValidationAction::Deny],
                })]
                .into(),
            }
        })
        .collect()
}

/// The fixture's mutating policies (failure policy Fail, reinvocation Never: served on
/// `/mutate/fail/never`), compiled and bound (each must compile).
pub fn fixture_mutating(policies: &[fixture::Policy]) -> Vec<BoundMutatingPolicy> {
    policies
        .iter()
        .map(|p| {
            let spec = MutatingPolicySpec {
                name: p.name.clone(),
                param_kind: fixture_param_kind(p),
                match_constraints: Some(fixture_match(p)),
                variables: fixture_named(&p.variables),
                match_conditions: fixture_named(&p.match_conditions),
                mutations: p
                    .mutations
                    .iter()
                    .map(|m| match m {
                        fixture::Mutation::Apply(e) => Mutation {
                            patch_type: PatchType::ApplyConfiguration,
                            apply_configuration: Some(e.clone()),
                            json_patch: None,
                        },
                        fixture::Mutation::JsonPatch(e) => Mutation {
                            patch_type: PatchType::JsonPatch,
                            apply_configuration: None,
                            json_patch: Some(e.clone()),
                        },
                    })
                    .collect(),
                failure_policy: FailurePolicy::Fail,
                ..Default::default()
            };
            let policy = compile_mutating(spec, ApplySemantics::Upstream);
            assert!(
                policy.compile_errors().is_empty(),
                "{}: {:?}",
                p.name,
                policy.compile_errors()
            );
            BoundMutatingPolicy {
                policy: Arc::new(policy),
                bindings: vec![Arc::new(MutatingBindingSpec {
                    name: format!("{}-binding", p.name).into(),
                    policy_name: p.name.clone(),
                    match_resources: fixture_binding_match(p),
                    param_ref: fixture_param_ref(p).map(Box::new),
                })]
                .into(),
            }
        })
        .collect()
}

/// A store holding `policies`, the fixture's namespaces and its param ConfigMaps (listed and
/// watched, as the operator publishes them).
pub fn fixture_store(policies: PolicySet) -> Arc<SnapshotStore> {
    let store = SnapshotStore::new();
    let namespace = fixture::review_namespace();
    store.publish_namespaces(NamespaceView::new([
        (fixture::REVIEW_NAMESPACE.to_string(), namespace),
        (
            fixture::PARAMS_NAMESPACE.to_string(),
            json!({"metadata": {"name": fixture::PARAMS_NAMESPACE}}),
        ),
    ]));
    let mut objects = ParamObjects::new(true);
    for cm in fixture::param_configmaps() {
        let name = cm["metadata"]["name"].as_str().unwrap().to_string();
        objects.insert(fixture::PARAMS_NAMESPACE, &name, Arc::new(cm));
    }
    store.publish_param_kind(
        &("v1".to_string(), "ConfigMap".to_string()),
        Some(ParamKindEntry::Ready(Arc::new(objects))),
    );
    store.publish_policies(
        Arc::new(policies),
        Arc::default(),
        Arc::new(builtin_schemas()),
    );
    store
}
