//! The engine's own input model: policies and bindings as plain data, independent of any API
//! version. The operator converts its CRD types into these in one place.

use std::sync::Arc;

use crate::pod_controller::PodController;

/// What happens when a policy cannot be evaluated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Errors admit the request.
    Ignore,
    /// Errors deny the request (the default).
    #[default]
    Fail,
}

/// How rules match requests for equivalent resources in other versions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatchPolicy {
    /// Only the listed group/version/resource.
    Exact,
    /// Also equivalent resources (the default).
    #[default]
    Equivalent,
}

/// What a failed validation does under a binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValidationAction {
    /// Reject the request.
    Deny,
    /// Return a warning.
    Warn,
    /// Record an audit annotation.
    Audit,
}

impl ValidationAction {
    /// The action's name as written in a binding.
    pub fn as_str(self) -> &'static str {
        match self {
            ValidationAction::Deny => "Deny",
            ValidationAction::Warn => "Warn",
            ValidationAction::Audit => "Audit",
        }
    }
}

/// What `*` in the operations of a policy's `matchConstraints.resourceRules` stands for.
/// In-tree it includes CONNECT (`kubectl exec`, `attach`, `port-forward`, proxy); celgate by
/// default keeps it to CREATE, UPDATE and DELETE, so a policy written for writes never starts
/// deciding connections (nor failing them while celgate is down) unless it names CONNECT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WildcardOperations {
    /// `*` is CREATE, UPDATE and DELETE; only a rule naming CONNECT matches a connection.
    #[default]
    WithoutConnect,
    /// `*` is every operation, CONNECT included, as in-tree.
    InTree,
}

/// A label selector: `matchLabels` and `matchExpressions`, AND-ed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// Exact label values required, each key once, in key order (the API's map). A list, not a
    /// `BTreeMap`: the map's first node takes 544 bytes for a single label, and every binding
    /// with a namespaceSelector holds one (100,000 bindings: `make bench-footprint`).
    pub match_labels: Vec<(String, String)>,
    /// Set-based requirements.
    pub match_expressions: Vec<LabelRequirement>,
}

/// One set-based label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelRequirement {
    /// The label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`, as written.
    pub operator: String,
    /// Values for `In` and `NotIn`.
    pub values: Vec<String>,
}

/// A resource rule: operations × groups × versions × resources within a scope, maybe by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceRule {
    /// Resource names the rule is limited to; empty means all.
    pub resource_names: Vec<String>,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `*`.
    pub operations: Vec<String>,
    /// API groups or `*`.
    pub api_groups: Vec<String>,
    /// API versions or `*`.
    pub api_versions: Vec<String>,
    /// `resource`, `resource/subresource`, `*`, `*/sub`, `res/*` or `*/*`.
    pub resources: Vec<String>,
    /// `Cluster`, `Namespaced` or `*`.
    pub scope: String,
}

/// The requests a policy or binding applies to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MatchResources {
    /// Selects by the labels of the request's namespace.
    pub namespace_selector: LabelSelector,
    /// Selects by the labels of the object or old object.
    pub object_selector: LabelSelector,
    /// Matching rules; for a binding, empty means "everything the policy matches".
    pub resource_rules: Vec<ResourceRule>,
    /// Rules that never match.
    pub exclude_resource_rules: Vec<ResourceRule>,
    /// Exact or Equivalent.
    pub match_policy: MatchPolicy,
}

/// One validation of a policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Validation {
    /// CEL expression that must be true.
    pub expression: String,
    /// Static failure message.
    pub message: Option<String>,
    /// Failure reason (`Invalid` when unset).
    pub reason: Option<String>,
    /// CEL expression computing the failure message.
    pub message_expression: Option<String>,
}

/// A named CEL expression (`variables.<name>`) or match condition.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamedExpression {
    /// The name.
    pub name: String,
    /// The CEL expression.
    pub expression: String,
}

/// An audit annotation of a policy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditAnnotation {
    /// Key, recorded as `<policy>/<key>`.
    pub key: String,
    /// CEL expression giving a string or null.
    pub value_expression: String,
}

/// The kind of a policy's params.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamKind {
    /// `group/version` or `version`.
    pub api_version: String,
    /// The kind.
    pub kind: String,
}

/// A ValidatingAdmissionPolicy as the engine sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidatingPolicySpec {
    /// Object name.
    pub name: String,
    /// Object uid; with `generation`, the compile cache key.
    pub uid: String,
    /// Object generation.
    pub generation: i64,
    /// Kind of params, if any.
    pub param_kind: Option<ParamKind>,
    /// Match constraints; `None` is a configuration error at request time.
    pub match_constraints: Option<MatchResources>,
    /// Validations.
    pub validations: Vec<Validation>,
    /// Failure policy.
    pub failure_policy: FailurePolicy,
    /// Audit annotations.
    pub audit_annotations: Vec<AuditAnnotation>,
    /// Match conditions.
    pub match_conditions: Vec<NamedExpression>,
    /// Variables, in order.
    pub variables: Vec<NamedExpression>,
    /// The value of the annotation that opts the policy into covering Pod controllers
    /// ([`crate::autogen::ANNOTATION`]), as written.
    pub autogen: Option<String>,
    /// Set on a policy's variant for a Pod controller ([`crate::autogen`]): the controller
    /// whose Pod template it reads.
    pub pod_controller: Option<PodController>,
}

/// What a binding does when its paramRef finds no param.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ParameterNotFoundAction {
    /// Skip the binding.
    Allow,
    /// Deny under the policy's failurePolicy (the default).
    #[default]
    Deny,
}

/// How a binding finds its params.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ParamRef {
    /// A single param by name.
    pub name: Option<String>,
    /// The params' namespace; defaults to the request's for namespaced kinds.
    pub namespace: Option<String>,
    /// Params by label selector.
    pub selector: Option<LabelSelector>,
    /// What to do when none is found.
    pub parameter_not_found_action: ParameterNotFoundAction,
}

/// A ValidatingAdmissionPolicyBinding as the engine sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ValidatingBindingSpec {
    /// Object name (shared: the audit names its units with it).
    pub name: Arc<str>,
    /// The policy it binds.
    pub policy_name: String,
    /// Narrowing of the policy's match constraints.
    pub match_resources: Option<MatchResources>,
    /// Where the params come from. Boxed: most bindings have none, and room for one inline
    /// took 70 bytes of each converted binding (818 → 748, `make bench-footprint`).
    pub param_ref: Option<Box<ParamRef>>,
    /// Validation actions, in the order written.
    pub validation_actions: Vec<ValidationAction>,
}

/// How a mutation's expression patches the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PatchType {
    /// `ApplyConfiguration`: the expression builds an `Object{…}` merged like server-side
    /// apply.
    ApplyConfiguration,
    /// `JSONPatch`: the expression builds a list of `JSONPatch{…}` operations.
    JsonPatch,
    /// A value the API does not define, as written.
    Other(String),
}

impl PatchType {
    /// The patch type named `name` as written in a policy.
    pub fn from_name(name: &str) -> Self {
        match name {
            "ApplyConfiguration" => PatchType::ApplyConfiguration,
            "JSONPatch" => PatchType::JsonPatch,
            other => PatchType::Other(other.to_string()),
        }
    }
}

/// One mutation of a MutatingAdmissionPolicy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mutation {
    /// The patch type.
    pub patch_type: PatchType,
    /// `applyConfiguration.expression`, if set.
    pub apply_configuration: Option<String>,
    /// `jsonPatch.expression`, if set.
    pub json_patch: Option<String>,
}

/// Whether a mutating policy runs again when later mutations change the object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReinvocationPolicy {
    /// Once per request (the default).
    #[default]
    Never,
    /// Again if the object changed after its first invocation.
    IfNeeded,
}

/// A MutatingAdmissionPolicy as the engine sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MutatingPolicySpec {
    /// Object name.
    pub name: String,
    /// Object uid; with `generation`, the compile cache key.
    pub uid: String,
    /// Object generation.
    pub generation: i64,
    /// Kind of params, if any.
    pub param_kind: Option<ParamKind>,
    /// Match constraints; `None` is a configuration error at request time.
    pub match_constraints: Option<MatchResources>,
    /// Variables, in order.
    pub variables: Vec<NamedExpression>,
    /// Mutations, in order.
    pub mutations: Vec<Mutation>,
    /// Failure policy.
    pub failure_policy: FailurePolicy,
    /// Match conditions.
    pub match_conditions: Vec<NamedExpression>,
    /// Reinvocation policy.
    pub reinvocation_policy: ReinvocationPolicy,
    /// The value of the annotation that opts the policy into covering Pod controllers
    /// ([`crate::autogen::ANNOTATION`]), as written.
    pub autogen: Option<String>,
    /// Set on a policy's variant for a Pod controller ([`crate::autogen`]): the controller
    /// whose Pod template it reads.
    pub pod_controller: Option<PodController>,
}

/// A MutatingAdmissionPolicyBinding as the engine sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MutatingBindingSpec {
    /// Object name (shared: each mutation's check is labelled with it).
    pub name: Arc<str>,
    /// The policy it binds.
    pub policy_name: String,
    /// Narrowing of the policy's match constraints.
    pub match_resources: Option<MatchResources>,
    /// Where the params come from (boxed, as a validating binding's).
    pub param_ref: Option<Box<ParamRef>>,
}
