//! The typed CEL declarations of the policy variables whose shape Kubernetes fixes:
//! `request` (`kubernetes.AdmissionRequest`) and `namespaceObject` (`kubernetes.Namespace`).
//! A field outside them is a compile error (`undefined field 'x'`), as in kube-apiserver.

use celgate_cel::Type;

fn fields<const N: usize>(list: [(&str, Type); N]) -> Vec<(String, Type)> {
    list.into_iter().map(|(n, t)| (n.to_string(), t)).collect()
}

fn gvk() -> Type {
    Type::object(
        "kubernetes.GroupVersionKind",
        fields([
            ("group", Type::String),
            ("version", Type::String),
            ("kind", Type::String),
        ]),
    )
}

fn gvr() -> Type {
    Type::object(
        "kubernetes.GroupVersionResource",
        fields([
            ("group", Type::String),
            ("version", Type::String),
            ("resource", Type::String),
        ]),
    )
}

/// `kubernetes.AdmissionRequest`: the request fields policies may read (no uid, object or
/// oldObject: those are separate variables).
pub fn admission_request() -> Type {
    let user_info = Type::object(
        "kubernetes.UserInfo",
        fields([
            ("username", Type::String),
            ("uid", Type::String),
            ("groups", Type::list(Type::String)),
            ("extra", Type::map(Type::String, Type::list(Type::String))),
        ]),
    );
    Type::object(
        "kubernetes.AdmissionRequest",
        fields([
            ("kind", gvk()),
            ("resource", gvr()),
            ("subResource", Type::String),
            ("requestKind", gvk()),
            ("requestResource", gvr()),
            ("requestSubResource", Type::String),
            ("name", Type::String),
            ("namespace", Type::String),
            ("operation", Type::String),
            ("userInfo", user_info),
            ("dryRun", Type::Bool),
            ("options", Type::Dyn),
        ]),
    )
}

/// `kubernetes.Namespace`: the metadata fields upstream copies, spec and status. The times are
/// declared `timestamp`, as upstream's Namespace schema gives them (format date-time), while
/// their values stay the strings of the object, as upstream's conversion leaves them: so
/// `.startsWith()` on one does not compile, and `timestamp(...)` of one fails at run time with
/// `no such overload: timestamp(string)`, as in kube-apiserver.
pub fn namespace() -> Type {
    let strings = || Type::map(Type::String, Type::String);
    let metadata = Type::object(
        "kubernetes.Namespace.metadata",
        fields([
            ("name", Type::String),
            ("generateName", Type::String),
            ("namespace", Type::String),
            ("labels", strings()),
            ("annotations", strings()),
            // Upstream declares `UID` while the value's key is `uid` (so `.uid` does not
            // compile and `.UID` finds nothing at run time); celgate declares the same.
            ("UID", Type::String),
            ("creationTimestamp", Type::Timestamp),
            ("deletionGracePeriodSeconds", Type::Int),
            ("deletionTimestamp", Type::Timestamp),
            ("generation", Type::Int),
            ("resourceVersion", Type::String),
            ("finalizers", Type::list(Type::String)),
        ]),
    );
    let condition = Type::object(
        "kubernetes.Namespace.status.conditions",
        fields([
            ("status", Type::String),
            ("type", Type::String),
            ("lastTransitionTime", Type::Timestamp),
            ("message", Type::String),
            ("reason", Type::String),
        ]),
    );
    Type::object(
        "kubernetes.Namespace",
        fields([
            ("metadata", metadata),
            (
                "spec",
                Type::object(
                    "kubernetes.Namespace.spec",
                    fields([("finalizers", Type::list(Type::String))]),
                ),
            ),
            (
                "status",
                Type::object(
                    "kubernetes.Namespace.status",
                    fields([
                        ("conditions", Type::list(condition)),
                        ("phase", Type::String),
                    ]),
                ),
            ),
        ]),
    )
}
