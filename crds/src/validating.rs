//! `ValidatingAdmissionPolicy` and `ValidatingAdmissionPolicyBinding`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    BindingStatus, FailurePolicy, MatchCondition, MatchResources, ParamKind, ParamRef,
    PolicyStatus, Variable,
};

/// A set of CEL validations applied to the requests its bindings select.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "admission.celgate.io",
    version = "v1",
    kind = "ValidatingAdmissionPolicy",
    plural = "validatingadmissionpolicies",
    shortname = "cvap",
    category = "celgate",
    status = "PolicyStatus",
    doc = "A ValidatingAdmissionPolicy of admission.celgate.io: the in-tree admissionregistration.k8s.io/v1 kind, enforced by celgate's webhook. Its bindings decide where it applies; its status reports type checking and readiness.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Warnings",
        type_ = "integer",
        json_path = ".status.typeChecking.warningCount"
    ),
    printcolumn(
        name = "Failure Policy",
        type_ = "string",
        json_path = ".spec.failurePolicy"
    ),
    printcolumn(
        name = "Param Kind",
        type_ = "string",
        json_path = ".spec.paramKind.kind"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ValidatingAdmissionPolicySpec {
    /// Kind of the param resources the policy reads; unset means the policy takes no params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_kind: Option<ParamKind>,
    /// The requests the policy may apply to; bindings narrow it further.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_constraints: Option<MatchResources>,
    /// CEL validations; all must hold for a request to be admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub validations: Option<Vec<Validation>>,
    /// `Fail` (default) or `Ignore`, for errors while evaluating the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Fail"))]
    pub failure_policy: Option<FailurePolicy>,
    /// CEL expressions whose values become audit annotations of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub audit_annotations: Option<Vec<AuditAnnotation>>,
    /// CEL preconditions; the policy is skipped for requests where one is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub match_conditions: Option<Vec<MatchCondition>>,
    /// Named CEL expressions the other expressions read as `variables.<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub variables: Option<Vec<Variable>>,
}

/// One CEL validation of a policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Validation {
    /// CEL expression that must evaluate to true.
    pub expression: String,
    /// Message returned when the validation fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Reason returned when the validation fails: `Invalid` (default), `Forbidden` or `RequestEntityTooLarge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// CEL expression computing the failure message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_expression: Option<String>,
}

/// A CEL expression whose value is recorded as an audit annotation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditAnnotation {
    /// Key of the annotation, prefixed with the policy name when recorded.
    pub key: String,
    /// CEL expression evaluating to a string or null.
    pub value_expression: String,
}

/// Binds a ValidatingAdmissionPolicy to resources, params and validation actions.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "admission.celgate.io",
    version = "v1",
    kind = "ValidatingAdmissionPolicyBinding",
    plural = "validatingadmissionpolicybindings",
    shortname = "cvapb",
    category = "celgate",
    status = "BindingStatus",
    doc = "A ValidatingAdmissionPolicyBinding of admission.celgate.io: applies a ValidatingAdmissionPolicy to the requests it selects, with its params and validation actions.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Policy", type_ = "string", json_path = ".spec.policyName"),
    printcolumn(
        name = "Actions",
        type_ = "string",
        json_path = ".spec.validationActions"
    ),
    printcolumn(name = "Param", type_ = "string", json_path = ".spec.paramRef.name"),
    printcolumn(
        name = "Params",
        type_ = "integer",
        json_path = ".status.resolvedParams"
    ),
    printcolumn(
        name = "Violations",
        type_ = "integer",
        json_path = ".status.audit.violations"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ValidatingAdmissionPolicyBindingSpec {
    /// Name of the ValidatingAdmissionPolicy this binding applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_name: Option<String>,
    /// Where the policy's params come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_ref: Option<ParamRef>,
    /// Narrows the policy's match constraints; unset matches everything the policy matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_resources: Option<MatchResources>,
    /// `Deny`, `Warn` and/or `Audit`: what a failed validation does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub validation_actions: Option<Vec<ValidationAction>>,
}

/// What a failed validation does under a binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ValidationAction {
    /// The failure is recorded in the audit log.
    Audit,
    /// The request is rejected.
    Deny,
    /// The failure is returned to the client as a warning.
    Warn,
}
