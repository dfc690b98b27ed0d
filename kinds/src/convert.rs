//! The one place where CRD types become the engine's input model, so API versions can change
//! without touching the engine.

use celgate_crds as api;
use celgate_engine::mutate::{APPLY_SEMANTICS_ANNOTATION, ApplySemantics};
use celgate_engine::{autogen, model};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;

/// The items of an optional list, by an iterator that knows how many there are, so a `collect`
/// allocates exactly (one that flattens the `Option` does not know, and a list of one got room
/// for four: 144 bytes more in each binding's label selector, `make bench-footprint`).
fn items<T>(list: &Option<Vec<T>>) -> std::slice::Iter<'_, T> {
    list.as_deref().unwrap_or_default().iter()
}

fn selector(s: Option<&LabelSelector>) -> model::LabelSelector {
    let Some(s) = s else {
        return model::LabelSelector::default();
    };
    model::LabelSelector {
        match_labels: (s.match_labels.as_ref()).map_or_else(Vec::new, |labels| {
            (labels.iter())
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        }),
        match_expressions: items(&s.match_expressions)
            .map(|e| model::LabelRequirement {
                key: e.key.clone(),
                operator: e.operator.clone(),
                values: e.values.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

fn rules(rules: &Option<Vec<api::NamedRuleWithOperations>>) -> Vec<model::ResourceRule> {
    items(rules)
        .map(|r| model::ResourceRule {
            resource_names: r.resource_names.clone().unwrap_or_default(),
            operations: r.operations.clone().unwrap_or_default(),
            api_groups: r.api_groups.clone().unwrap_or_default(),
            api_versions: r.api_versions.clone().unwrap_or_default(),
            resources: r.resources.clone().unwrap_or_default(),
            scope: r.scope.clone().unwrap_or_else(|| "*".into()),
        })
        .collect()
}

/// Converts match resources (policy constraints or binding narrowing).
pub fn match_resources(m: &api::MatchResources) -> model::MatchResources {
    model::MatchResources {
        namespace_selector: selector(m.namespace_selector.as_ref()),
        object_selector: selector(m.object_selector.as_ref()),
        resource_rules: rules(&m.resource_rules),
        exclude_resource_rules: rules(&m.exclude_resource_rules),
        match_policy: match m.match_policy {
            Some(api::MatchPolicy::Exact) => model::MatchPolicy::Exact,
            _ => model::MatchPolicy::Equivalent,
        },
    }
}

fn failure_policy(f: Option<api::FailurePolicy>) -> model::FailurePolicy {
    match f {
        Some(api::FailurePolicy::Ignore) => model::FailurePolicy::Ignore,
        _ => model::FailurePolicy::Fail,
    }
}

fn named<'a>(list: impl Iterator<Item = (&'a String, &'a String)>) -> Vec<model::NamedExpression> {
    list.map(|(name, expression)| model::NamedExpression {
        name: name.clone(),
        expression: expression.clone(),
    })
    .collect()
}

/// Converts a paramKind.
pub fn param_kind(k: &api::ParamKind) -> model::ParamKind {
    model::ParamKind {
        api_version: k.api_version.clone().unwrap_or_default(),
        kind: k.kind.clone().unwrap_or_default(),
    }
}

/// Converts a ValidatingAdmissionPolicy.
pub fn validating_policy(p: &api::ValidatingAdmissionPolicy) -> model::ValidatingPolicySpec {
    let s = &p.spec;
    model::ValidatingPolicySpec {
        name: p.name_any(),
        uid: p.uid().unwrap_or_default(),
        generation: p.metadata.generation.unwrap_or_default(),
        param_kind: s.param_kind.as_ref().map(param_kind),
        match_constraints: s.match_constraints.as_ref().map(match_resources),
        validations: items(&s.validations)
            .map(|v| model::Validation {
                expression: v.expression.clone(),
                message: v.message.clone(),
                reason: v.reason.clone(),
                message_expression: v.message_expression.clone(),
            })
            .collect(),
        failure_policy: failure_policy(s.failure_policy),
        audit_annotations: items(&s.audit_annotations)
            .map(|a| model::AuditAnnotation {
                key: a.key.clone(),
                value_expression: a.value_expression.clone(),
            })
            .collect(),
        match_conditions: named(items(&s.match_conditions).map(|c| (&c.name, &c.expression))),
        variables: named(items(&s.variables).map(|v| (&v.name, &v.expression))),
        autogen: p.annotations().get(autogen::ANNOTATION).cloned(),
        pod_controller: None,
    }
}

/// Converts a paramRef.
pub fn param_ref(r: &api::ParamRef) -> model::ParamRef {
    model::ParamRef {
        name: r.name.clone(),
        namespace: r.namespace.clone(),
        selector: r.selector.as_ref().map(|s| selector(Some(s))),
        parameter_not_found_action: match r.parameter_not_found_action {
            api::ParameterNotFoundAction::Allow => model::ParameterNotFoundAction::Allow,
            api::ParameterNotFoundAction::Deny => model::ParameterNotFoundAction::Deny,
        },
    }
}

/// Converts a ValidatingAdmissionPolicyBinding.
pub fn validating_binding(
    b: &api::ValidatingAdmissionPolicyBinding,
) -> model::ValidatingBindingSpec {
    let s = &b.spec;
    model::ValidatingBindingSpec {
        name: b.name_any().into(),
        policy_name: s.policy_name.clone().unwrap_or_default(),
        match_resources: s.match_resources.as_ref().map(match_resources),
        param_ref: s.param_ref.as_ref().map(|r| Box::new(param_ref(r))),
        validation_actions: items(&s.validation_actions)
            .map(|a| match a {
                api::ValidationAction::Deny => model::ValidationAction::Deny,
                api::ValidationAction::Warn => model::ValidationAction::Warn,
                api::ValidationAction::Audit => model::ValidationAction::Audit,
            })
            .collect(),
    }
}

/// Converts a MutatingAdmissionPolicy.
pub fn mutating_policy(p: &api::MutatingAdmissionPolicy) -> model::MutatingPolicySpec {
    let s = &p.spec;
    model::MutatingPolicySpec {
        name: p.name_any(),
        uid: p.uid().unwrap_or_default(),
        generation: p.metadata.generation.unwrap_or_default(),
        param_kind: s.param_kind.as_ref().map(param_kind),
        match_constraints: s.match_constraints.as_ref().map(match_resources),
        variables: named(items(&s.variables).map(|v| (&v.name, &v.expression))),
        mutations: items(&s.mutations)
            .map(|m| model::Mutation {
                patch_type: model::PatchType::from_name(&m.patch_type),
                apply_configuration: m
                    .apply_configuration
                    .as_ref()
                    .and_then(|a| a.expression.clone()),
                json_patch: m.json_patch.as_ref().and_then(|j| j.expression.clone()),
            })
            .collect(),
        failure_policy: failure_policy(s.failure_policy),
        match_conditions: named(items(&s.match_conditions).map(|c| (&c.name, &c.expression))),
        reinvocation_policy: match s.reinvocation_policy {
            Some(api::ReinvocationPolicy::IfNeeded) => model::ReinvocationPolicy::IfNeeded,
            _ => model::ReinvocationPolicy::Never,
        },
        autogen: p.annotations().get(autogen::ANNOTATION).cloned(),
        pod_controller: None,
    }
}

/// How a MutatingAdmissionPolicy's apply configurations treat atomic values, from its
/// `admission.celgate.io/apply-semantics` annotation (`server-side`: full server-side apply;
/// absent or anything else: upstream's).
pub fn apply_semantics(p: &api::MutatingAdmissionPolicy) -> ApplySemantics {
    let value = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPLY_SEMANTICS_ANNOTATION));
    ApplySemantics::from_annotation(value.map(String::as_str))
}

/// Converts a MutatingAdmissionPolicyBinding.
pub fn mutating_binding(b: &api::MutatingAdmissionPolicyBinding) -> model::MutatingBindingSpec {
    let s = &b.spec;
    model::MutatingBindingSpec {
        name: b.name_any().into(),
        policy_name: s.policy_name.clone().unwrap_or_default(),
        match_resources: s.match_resources.as_ref().map(match_resources),
        param_ref: s.param_ref.as_ref().map(|r| Box::new(param_ref(r))),
    }
}

/// Converts a PolicyException.
pub fn policy_exception(e: &api::PolicyException) -> celgate_engine::exception::ExceptionSpec {
    use celgate_engine::exception::{ExceptedPolicy, ExceptionSpec};
    let s = &e.spec;
    ExceptionSpec {
        namespace: e.namespace().unwrap_or_default(),
        name: e.name_any(),
        policies: (s.policies.iter())
            .map(|p| ExceptedPolicy {
                name: p.name.clone(),
                bindings: p.bindings.clone(),
            })
            .collect(),
        match_resources: match_resources(&s.match_resources),
        match_conditions: named(items(&s.match_conditions).map(|c| (&c.name, &c.expression))),
        expires_at: s
            .expires_at
            .as_ref()
            .map(|t| std::time::SystemTime::from(t.0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selectors_labels_convert_each_once_in_key_order() {
        let stored: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"team": "a", "env": "prod"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]
        }))
        .unwrap();
        let converted = selector(Some(&stored));
        assert_eq!(
            converted.match_labels,
            [
                ("env".to_string(), "prod".to_string()),
                ("team".to_string(), "a".to_string())
            ]
        );
        assert_eq!(converted.match_expressions.len(), 1);
        assert_eq!(selector(None), model::LabelSelector::default());
    }

    #[test]
    fn mutating_policies_and_bindings_convert_field_for_field() {
        let policy: api::MutatingAdmissionPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "admission.celgate.io/v1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": "m", "uid": "u", "generation": 3},
            "spec": {
                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["deployments"]}]},
                "variables": [{"name": "v", "expression": "1"}],
                "mutations": [
                    {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}},
                    {"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}
                ],
                "failurePolicy": "Ignore",
                "matchConditions": [{"name": "c", "expression": "true"}],
                "reinvocationPolicy": "IfNeeded"
            }
        }))
        .unwrap();
        let m = mutating_policy(&policy);
        assert_eq!(
            (m.name.as_str(), m.uid.as_str(), m.generation),
            ("m", "u", 3)
        );
        assert_eq!(
            m.param_kind.as_ref().map(|k| k.kind.as_str()),
            Some("ConfigMap")
        );
        assert_eq!(m.variables[0].name, "v");
        assert_eq!(
            m.mutations,
            [
                model::Mutation {
                    patch_type: model::PatchType::ApplyConfiguration,
                    apply_configuration: Some("Object{}".into()),
                    json_patch: None,
                },
                model::Mutation {
                    patch_type: model::PatchType::JsonPatch,
                    apply_configuration: None,
                    json_patch: Some("[]".into()),
                },
            ]
        );
        assert_eq!(m.failure_policy, model::FailurePolicy::Ignore);
        assert_eq!(m.match_conditions[0].expression, "true");
        assert_eq!(m.reinvocation_policy, model::ReinvocationPolicy::IfNeeded);
        assert_eq!(
            m.match_constraints
                .map(|c| c.resource_rules[0].resources.clone()),
            Some(vec!["deployments".to_string()])
        );

        let binding: api::MutatingAdmissionPolicyBinding =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "admission.celgate.io/v1",
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": "b"},
                "spec": {"policyName": "m", "paramRef": {"name": "p",
                    "parameterNotFoundAction": "Allow"}}
            }))
            .unwrap();
        let b = mutating_binding(&binding);
        assert_eq!((&*b.name, b.policy_name.as_str()), ("b", "m"));
        let r = b.param_ref.unwrap();
        assert_eq!(r.name.as_deref(), Some("p"));
        assert_eq!(
            r.parameter_not_found_action,
            model::ParameterNotFoundAction::Allow
        );
    }
}
