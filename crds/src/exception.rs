//! `PolicyException` (`admission.celgate.io/v1alpha1`): lets the requests it matches pass the
//! ValidatingAdmissionPolicies it names, until it expires. In-tree Kubernetes has no such kind,
//! so it has its own API version.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{Conditions, MatchCondition, MatchResources};

/// The API version of [`PolicyException`].
pub const EXCEPTION_API_VERSION: &str = "admission.celgate.io/v1alpha1";

/// An exception to validating policies: the requests it matches are not validated by the
/// policies (and bindings) it names until `expiresAt`.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "admission.celgate.io",
    version = "v1alpha1",
    kind = "PolicyException",
    plural = "policyexceptions",
    shortname = "cpolex",
    category = "celgate",
    namespaced,
    status = "PolicyExceptionStatus",
    doc = "A PolicyException of admission.celgate.io: the requests it matches skip the ValidatingAdmissionPolicies (and bindings) it names, in admission, the audit and the offline commands, until expiresAt. Honoured only in the namespaces celgate's --exception-namespaces names.",
    printcolumn(
        name = "Active",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Active\")].status"
    ),
    printcolumn(name = "Expires", type_ = "date", json_path = ".spec.expiresAt"),
    printcolumn(name = "Owner", type_ = "string", json_path = ".spec.owner"),
    printcolumn(
        name = "Excepted",
        type_ = "integer",
        json_path = ".status.exceptedRequests"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PolicyExceptionSpec {
    /// The validating policies excepted, each with the bindings excepted (all when unset).
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub policies: Vec<ExceptedPolicy>,
    /// The requests excepted: resource rules (with resource names), namespace and object
    /// selectors, exclusions, as a binding's matchResources.
    #[serde(rename = "match")]
    pub match_resources: MatchResources,
    /// CEL conditions over `object`, `oldObject`, `request` (no `params`, no
    /// `namespaceObject`): all must be true for the exception to apply. One that errors keeps
    /// the policies in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub match_conditions: Option<Vec<MatchCondition>>,
    /// When the exception stops applying (RFC 3339, to the second); unset never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<Time>,
    /// Why the exception exists, e.g. a ticket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Who answers for the exception.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// One excepted policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExceptedPolicy {
    /// Name of the ValidatingAdmissionPolicy.
    pub name: String,
    /// Names of its bindings excepted; unset excepts all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub bindings: Option<Vec<String>>,
}

/// Status of a PolicyException, written by the celgate replica that holds the leader Lease.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyExceptionStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Admission requests this exception let through since celgate's leader started counting
    /// (per leader; a new leader starts again from the value it finds here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excepted_requests: Option<i64>,
    /// When it last let a request through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_excepted_time: Option<Time>,
    /// `Active`: True while honoured; False with reason `Expired`, `NamespaceNotAllowed` or
    /// `Invalid` (a matchCondition that does not compile).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Option<Conditions>,
}
