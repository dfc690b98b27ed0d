//! What the validation steps' tests share: a namespace cache, a policy matching Deployments, its
//! binding, a request and the context to validate it in.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use crate::compile::compile_validating;
use crate::matching::Namespaces;
use crate::model::{
    MatchResources, NamedExpression, ResourceRule, ValidatingBindingSpec, ValidatingPolicySpec,
    Validation, ValidationAction,
};
use crate::request::Request;

use super::{BoundPolicy, Context, Outcome, validate};

/// Namespaces held in a map.
pub(crate) struct Cache(HashMap<String, serde_json::Value>);

impl Namespaces for Cache {
    fn get(&self, name: &str) -> Option<&serde_json::Value> {
        self.0.get(name)
    }
}

/// The namespace `staging-ns`, labelled `environment: staging`.
pub(crate) fn cache() -> Cache {
    Cache(HashMap::from([(
        "staging-ns".to_string(),
        json!({"metadata": {"name": "staging-ns", "labels": {"environment": "staging"}}}),
    )]))
}

/// Policy `p` matching every operation on apps/v1 deployments, with these validations.
pub(crate) fn spec(validations: Vec<Validation>) -> ValidatingPolicySpec {
    ValidatingPolicySpec {
        name: "p".into(),
        match_constraints: Some(MatchResources {
            resource_rules: vec![ResourceRule {
                operations: vec!["*".into()],
                api_groups: vec!["apps".into()],
                api_versions: vec!["v1".into()],
                resources: vec!["deployments".into()],
                scope: "*".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        validations,
        ..Default::default()
    }
}

/// Policy `p` (as [`spec`]) with one validation and one match condition `c`.
pub(crate) fn conditioned(validation: &str, condition: &str) -> ValidatingPolicySpec {
    let mut s = spec(vec![Validation {
        expression: validation.into(),
        ..Default::default()
    }]);
    s.match_conditions = vec![NamedExpression {
        name: "c".into(),
        expression: condition.into(),
    }];
    s
}

/// The policy compiled, with one binding `b` of these actions.
pub(crate) fn bound(spec: ValidatingPolicySpec, actions: Vec<ValidationAction>) -> BoundPolicy {
    BoundPolicy {
        bindings: vec![Arc::new(ValidatingBindingSpec {
            name: "b".into(),
            policy_name: spec.name.clone(),
            match_resources: None,
            param_ref: None,
            validation_actions: actions,
        })]
        .into(),
        policy: Arc::new(compile_validating(spec)),
    }
}

/// An admission request creating this Deployment in `staging-ns`.
pub(crate) fn create_deployment(object: serde_json::Value) -> serde_json::Value {
    json!({"uid": "u", "operation": "CREATE", "namespace": "staging-ns",
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "object": object})
}

/// A context over these namespaces, with no params, no authorizer and no deadline.
pub(crate) fn context(namespaces: &Cache) -> Context<'_> {
    Context {
        namespaces,
        params: &crate::params::NoParams,
        authorizer: None,
        deadline: None,
        trace: None,
        exceptions: None,
    }
}

/// Validates the creation of Deployment `web` (3 replicas, one container of this image) against
/// the policy bound with these actions.
pub(crate) fn run(
    spec: ValidatingPolicySpec,
    actions: &[ValidationAction],
    image: &str,
) -> Outcome {
    let raw = create_deployment(json!({"metadata": {"name": "web"}, "spec": {"replicas": 3,
        "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}));
    let req = Request::from_json(&raw).expect("valid request");
    let namespaces = cache();
    validate(
        &[bound(spec, actions.to_vec())],
        &req,
        &context(&namespaces),
    )
}
