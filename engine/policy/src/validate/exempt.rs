//! The resources no admission policy (validating or mutating) ever applies to.

use crate::request::Request;

/// Whether no policy ever sees the request's resource (kube-apiserver's excluded resources and
/// the policy kinds themselves).
pub fn exempt(req: &Request<'_>) -> bool {
    let (g, r) = (req.resource.group, req.resource.name);
    g == crate::GROUP
        || (g == "admissionregistration.k8s.io"
            && matches!(
                r,
                "validatingadmissionpolicies"
                    | "validatingadmissionpolicybindings"
                    | "mutatingadmissionpolicies"
                    | "mutatingadmissionpolicybindings"
            ))
        || (g == "authentication.k8s.io" && matches!(r, "selfsubjectreviews" | "tokenreviews"))
        || (g == "authorization.k8s.io"
            && matches!(
                r,
                "localsubjectaccessreviews"
                    | "selfsubjectaccessreviews"
                    | "selfsubjectrulesreviews"
                    | "subjectaccessreviews"
            ))
}
