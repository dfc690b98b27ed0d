//! The built-in kinds `celgate eval` knows without a cluster: for each, its API group, its
//! resource (plural) and whether it is namespaced, as kube-apiserver 1.36 serves them.

/// A built-in kind: (group, kind, resource, namespaced).
type Entry = (&'static str, &'static str, &'static str, bool);

const BUILT_IN: &[Entry] = &[
    ("", "Binding", "bindings", true),
    ("", "ConfigMap", "configmaps", true),
    ("", "Endpoints", "endpoints", true),
    ("", "Event", "events", true),
    ("", "LimitRange", "limitranges", true),
    ("", "Namespace", "namespaces", false),
    ("", "Node", "nodes", false),
    ("", "PersistentVolume", "persistentvolumes", false),
    ("", "PersistentVolumeClaim", "persistentvolumeclaims", true),
    ("", "Pod", "pods", true),
    ("", "PodTemplate", "podtemplates", true),
    ("", "ReplicationController", "replicationcontrollers", true),
    ("", "ResourceQuota", "resourcequotas", true),
    ("", "Secret", "secrets", true),
    ("", "Service", "services", true),
    ("", "ServiceAccount", "serviceaccounts", true),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        false,
    ),
    (
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    ),
    ("apiregistration.k8s.io", "APIService", "apiservices", false),
    ("apps", "ControllerRevision", "controllerrevisions", true),
    ("apps", "DaemonSet", "daemonsets", true),
    ("apps", "Deployment", "deployments", true),
    ("apps", "ReplicaSet", "replicasets", true),
    ("apps", "StatefulSet", "statefulsets", true),
    (
        "autoscaling",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        true,
    ),
    ("batch", "CronJob", "cronjobs", true),
    ("batch", "Job", "jobs", true),
    (
        "certificates.k8s.io",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        false,
    ),
    ("coordination.k8s.io", "Lease", "leases", true),
    ("discovery.k8s.io", "EndpointSlice", "endpointslices", true),
    ("events.k8s.io", "Event", "events", true),
    (
        "flowcontrol.apiserver.k8s.io",
        "FlowSchema",
        "flowschemas",
        false,
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
        false,
    ),
    ("networking.k8s.io", "IPAddress", "ipaddresses", false),
    ("networking.k8s.io", "Ingress", "ingresses", true),
    ("networking.k8s.io", "IngressClass", "ingressclasses", false),
    (
        "networking.k8s.io",
        "NetworkPolicy",
        "networkpolicies",
        true,
    ),
    ("networking.k8s.io", "ServiceCIDR", "servicecidrs", false),
    ("node.k8s.io", "RuntimeClass", "runtimeclasses", false),
    (
        "policy",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "clusterroles",
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
    ),
    ("rbac.authorization.k8s.io", "Role", "roles", true),
    (
        "rbac.authorization.k8s.io",
        "RoleBinding",
        "rolebindings",
        true,
    ),
    ("resource.k8s.io", "DeviceClass", "deviceclasses", false),
    ("resource.k8s.io", "ResourceClaim", "resourceclaims", true),
    (
        "resource.k8s.io",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        true,
    ),
    ("resource.k8s.io", "ResourceSlice", "resourceslices", false),
    (
        "scheduling.k8s.io",
        "PriorityClass",
        "priorityclasses",
        false,
    ),
    ("storage.k8s.io", "CSIDriver", "csidrivers", false),
    ("storage.k8s.io", "CSINode", "csinodes", false),
    (
        "storage.k8s.io",
        "CSIStorageCapacity",
        "csistoragecapacities",
        true,
    ),
    ("storage.k8s.io", "StorageClass", "storageclasses", false),
    (
        "storage.k8s.io",
        "VolumeAttachment",
        "volumeattachments",
        false,
    ),
    (
        "storage.k8s.io",
        "VolumeAttributesClass",
        "volumeattributesclasses",
        false,
    ),
];

/// A built-in kind's resource and scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltIn {
    /// The resource (plural), e.g. `deployments`.
    pub resource: &'static str,
    /// Whether its objects live in a namespace.
    pub namespaced: bool,
}

/// The built-in kind `kind` of API group `group` (empty for the core group).
pub fn built_in(group: &str, kind: &str) -> Option<BuiltIn> {
    BUILT_IN
        .iter()
        .find(|(g, k, _, _)| *g == group && *k == kind)
        .map(|&(_, _, resource, namespaced)| BuiltIn {
            resource,
            namespaced,
        })
}

/// Splits an `apiVersion` into group and version (`v1` → `("", "v1")`).
pub fn group_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_resolve_by_group_and_kind() {
        assert_eq!(
            built_in("apps", "Deployment"),
            Some(BuiltIn {
                resource: "deployments",
                namespaced: true
            })
        );
        assert_eq!(built_in("", "Namespace").map(|b| b.namespaced), Some(false));
        assert_eq!(built_in("", "Deployment"), None);
        assert_eq!(group_version("apps/v1"), ("apps", "v1"));
        assert_eq!(group_version("v1"), ("", "v1"));
    }
}
