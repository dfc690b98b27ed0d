//! `MutatingAdmissionPolicy` and `MutatingAdmissionPolicyBinding`.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    BindingStatus, FailurePolicy, MatchCondition, MatchResources, ParamKind, ParamRef,
    PolicyStatus, Variable,
};

/// A set of CEL mutations applied to the requests its bindings select.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "admission.celgate.io",
    version = "v1",
    kind = "MutatingAdmissionPolicy",
    plural = "mutatingadmissionpolicies",
    shortname = "cmap",
    category = "celgate",
    status = "PolicyStatus",
    doc = "A MutatingAdmissionPolicy of admission.celgate.io: the in-tree admissionregistration.k8s.io/v1 kind. Its bindings decide where it applies; its status reports type checking and readiness.",
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
        name = "Reinvocation",
        type_ = "string",
        json_path = ".spec.reinvocationPolicy"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MutatingAdmissionPolicySpec {
    /// Kind of the param resources the policy reads; unset means the policy takes no params.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_kind: Option<ParamKind>,
    /// The requests the policy may apply to; bindings narrow it further.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_constraints: Option<MatchResources>,
    /// Named CEL expressions the other expressions read as `variables.<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub variables: Option<Vec<Variable>>,
    /// The mutations, applied in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub mutations: Option<Vec<Mutation>>,
    /// `Fail` (default) or `Ignore`, for errors while evaluating the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Fail"))]
    pub failure_policy: Option<FailurePolicy>,
    /// CEL preconditions; the policy is skipped for requests where one is false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub match_conditions: Option<Vec<MatchCondition>>,
    /// `Never` or `IfNeeded`: whether the policy runs again after later mutations. Required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reinvocation_policy: Option<ReinvocationPolicy>,
}

/// Whether a mutating policy is invoked again when later admission plugins change the object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ReinvocationPolicy {
    /// Invoked again if the object changed after its first invocation.
    IfNeeded,
    /// Invoked once per request.
    Never,
}

/// One mutation: a patch type and the expression producing the patch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Mutation {
    /// `ApplyConfiguration` or `JSONPatch`.
    pub patch_type: String,
    /// Set when `patchType` is `ApplyConfiguration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_configuration: Option<PatchExpression>,
    /// Set when `patchType` is `JSONPatch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_patch: Option<PatchExpression>,
}

/// The CEL expression of an `applyConfiguration` or `jsonPatch` mutation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PatchExpression {
    /// CEL expression producing the patch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
}

/// Binds a MutatingAdmissionPolicy to resources and params.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "admission.celgate.io",
    version = "v1",
    kind = "MutatingAdmissionPolicyBinding",
    plural = "mutatingadmissionpolicybindings",
    shortname = "cmapb",
    category = "celgate",
    status = "BindingStatus",
    doc = "A MutatingAdmissionPolicyBinding of admission.celgate.io: applies a MutatingAdmissionPolicy to the requests it selects, with its params.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Policy", type_ = "string", json_path = ".spec.policyName"),
    printcolumn(name = "Param", type_ = "string", json_path = ".spec.paramRef.name"),
    printcolumn(
        name = "Params",
        type_ = "integer",
        json_path = ".status.resolvedParams"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MutatingAdmissionPolicyBindingSpec {
    /// Name of the MutatingAdmissionPolicy this binding applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_name: Option<String>,
    /// Where the policy's params come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_ref: Option<ParamRef>,
    /// Narrows the policy's match constraints; unset matches everything the policy matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_resources: Option<MatchResources>,
}
