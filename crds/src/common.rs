//! Types shared by the four kinds, field for field those of `admissionregistration.k8s.io/v1`
//! (Kubernetes 1.36), with the API server's defaults and list-type markers in the schema. Enum
//! variants are in the order kube-apiserver lists them as "supported values", which the CRD
//! schema's `enum` repeats in its errors.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What happens when a policy cannot be evaluated (compile, runtime or configuration error).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum FailurePolicy {
    /// The request is rejected (the default).
    #[default]
    Fail,
    /// The error is ignored and the request is admitted.
    Ignore,
}

/// How a rule matches a request for a resource in a version it does not list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MatchPolicy {
    /// An equivalent resource in another group or version also matches (the default).
    #[default]
    Equivalent,
    /// Only the listed group/version/resource matches.
    Exact,
}

/// What a binding does when its paramRef finds no param object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ParameterNotFoundAction {
    /// The request is rejected under the policy's failurePolicy (the default).
    #[default]
    Deny,
    /// The binding is skipped.
    Allow,
}

/// The kind of the resources a policy reads as `params`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct ParamKind {
    /// Group and version of the param kind, e.g. `v1` or `example.com/v1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the param resource, e.g. `ConfigMap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// How a binding finds the param objects of its policy. The in-tree API (1.36) has no default
/// for `parameterNotFoundAction`: it is required (`spec.paramRef.parameterNotFoundAction:
/// Required value`), so the schema requires it too.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct ParamRef {
    /// Name of the single param object; exclusive with `selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace of the params; defaults to the request's namespace for namespaced param kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Label selector over param objects; every match is evaluated. Exclusive with `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// What to do when no param is found: `Deny` or `Allow`.
    pub parameter_not_found_action: ParameterNotFoundAction,
}

/// Which requests a policy or binding applies to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct MatchResources {
    /// Selects requests by the labels of their namespace; `{}` matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub namespace_selector: Option<LabelSelector>,
    /// Selects requests by the labels of the object or old object; `{}` matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub object_selector: Option<LabelSelector>,
    /// Operations and resources that match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub resource_rules: Option<Vec<NamedRuleWithOperations>>,
    /// Operations and resources that never match, whatever `resourceRules` say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub exclude_resource_rules: Option<Vec<NamedRuleWithOperations>>,
    /// `Equivalent` (default) or `Exact`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Equivalent"))]
    pub match_policy: Option<MatchPolicy>,
}

/// A resource rule with operations and optional resource names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct NamedRuleWithOperations {
    /// Names the rule is limited to; empty means all names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub resource_names: Option<Vec<String>>,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub operations: Option<Vec<String>>,
    /// API groups; `""` is the core group, `*` all groups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub api_groups: Option<Vec<String>>,
    /// API versions; `*` all versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub api_versions: Option<Vec<String>>,
    /// Resources, optionally with a subresource (`pods/status`, `*/scale`, `*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub resources: Option<Vec<String>>,
    /// `Cluster`, `Namespaced` or `*` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "*"))]
    pub scope: Option<String>,
}

/// A CEL precondition that must hold for a policy to be evaluated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchCondition {
    /// Unique name of the condition.
    pub name: String,
    /// CEL expression evaluating to bool.
    pub expression: String,
}

/// A named CEL expression other expressions read as `variables.<name>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Variable {
    /// Name of the variable, a CEL identifier.
    pub name: String,
    /// CEL expression giving its value.
    pub expression: String,
}

/// The conditions of a policy or binding, keyed by `type` (`Ready`, `TypeChecked`).
pub type Conditions = Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>;

/// Status of a ValidatingAdmissionPolicy or MutatingAdmissionPolicy, written by the celgate
/// replica that holds the leader Lease.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Results of type checking the policy's expressions against the schemas of the kinds it matches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub type_checking: Option<TypeChecking>,
    /// `Ready`: whether this generation is compiled and enforced; `TypeChecked`: which kinds were
    /// checked and which were skipped and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Conditions>,
}

/// Type checking results. `expressionWarnings` holds exactly what kube-controller-manager reports
/// for an in-tree ValidatingAdmissionPolicy; what celgate checks beyond it is in
/// `additionalExpressionWarnings`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TypeChecking {
    /// Warnings for the expressions the in-tree type checker checks (validations' `expression` and
    /// `messageExpression`), in its order and with its text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub expression_warnings: Option<Vec<ExpressionWarning>>,
    /// Warnings from celgate's checks beyond the in-tree checker: matchConditions, variables,
    /// auditAnnotations, mutations, and kinds the in-tree checker skips (wildcard and subresource
    /// rules, kinds past its limit of 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub additional_expression_warnings: Option<Vec<ExpressionWarning>>,
    /// How many warnings both lists hold together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning_count: Option<i32>,
}

/// A type checking warning for one expression.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExpressionWarning {
    /// Path of the expression, e.g. `spec.validations[0].expression`.
    pub field_ref: String,
    /// The checker's messages, one block per kind the expression failed for.
    pub warning: String,
}

/// Status of a ValidatingAdmissionPolicyBinding or MutatingAdmissionPolicyBinding, written by the
/// celgate replica that holds the leader Lease.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// How many param objects the binding's `paramRef` selects now (for a namespaced param kind
    /// without `paramRef.namespace`, across all namespaces); unset without a `paramRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_params: Option<i32>,
    /// `Ready`: whether this generation is enforced, or why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Conditions>,
    /// The background audit of a ValidatingAdmissionPolicyBinding: the objects already stored
    /// that would be denied, warned or audited if they were created now. Written by the
    /// leader's audit (field manager `celgate-audit`); unset when the audit is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditStatus>,
}

/// What the background audit found for one binding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditStatus {
    /// Objects the binding matched at the last completed scan.
    pub scanned: i64,
    /// Objects whose validations fail now (kept in step with changes between scans).
    pub violations: i64,
    /// When the last scan of every resource the binding matches completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_scan_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// The first violating objects, by namespace and name (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub violating_objects: Vec<AuditViolation>,
    /// Resources the audit could not read (for example, celgate may not list them), with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub errors: Vec<String>,
}

/// One violating object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditViolation {
    /// The object's apiVersion.
    pub api_version: String,
    /// The object's kind.
    pub kind: String,
    /// The object's namespace; empty for a cluster-scoped object.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The object's name. (The messages are in the object's PolicyReport, which only those who
    /// may read the object's namespace can read; a binding's status is readable cluster-wide.)
    pub name: String,
}
