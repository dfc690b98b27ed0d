//! The AdmissionRequest `celgate eval` decides: built from the object files as kube-apiserver
//! would send it for the operation, with the kind from the object, the resource and scope the
//! kind is served with (by the built-in kinds or a CRD given; `--resource` overrides the
//! resource) and the namespace from the object, the namespace file or `default`.

use serde_json::{Value, json};

use crate::CliError;
use crate::documents::metadata_str;
use crate::types::{OfflineKinds, group_version};

/// The operation of the request.
#[derive(clap::ValueEnum, serde::Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "UPPERCASE")]
pub enum Operation {
    /// An object is created (the default without `--old-object`).
    #[value(name = "CREATE")]
    Create,
    /// An object is updated (the default with `--old-object`).
    #[value(name = "UPDATE")]
    Update,
    /// An object is deleted: `--object` is the object being deleted.
    #[value(name = "DELETE")]
    Delete,
    /// A connection to a subresource is opened (`pods/exec`, …).
    #[value(name = "CONNECT")]
    Connect,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// The kind of the options object kube-apiserver sends with the operation.
    fn options_kind(self) -> Option<&'static str> {
        match self {
            Operation::Create => Some("CreateOptions"),
            Operation::Update => Some("UpdateOptions"),
            Operation::Delete => Some("DeleteOptions"),
            Operation::Connect => None,
        }
    }
}

/// What the request is made of.
pub struct RequestInput<'i> {
    /// `--object`.
    pub object: &'i Value,
    /// `--old-object`.
    pub old_object: Option<&'i Value>,
    /// `--operation`, if given.
    pub operation: Option<Operation>,
    /// `--resource`, if given (`plural` or `plural/subresource`).
    pub resource: Option<&'i str>,
    /// The Namespace object of the request's namespace (`--namespace`), if given.
    pub namespace: Option<&'i Value>,
    /// `--user`.
    pub user: &'i str,
    /// `--group`.
    pub groups: &'i [String],
    /// The time of the decision: PolicyExceptions expire by it.
    pub at: std::time::SystemTime,
}

/// The request, and where it lives.
#[derive(Debug)]
pub struct Built {
    /// The AdmissionRequest (the `request` member of an AdmissionReview).
    pub request: Value,
    /// Its namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Whether the kind is namespaced (Namespace objects are not, but carry their own name).
    pub namespaced: bool,
}

/// Builds the AdmissionRequest; `kinds` serve the object's kind (the built-in ones and those of
/// the CRDs given).
pub fn build(input: &RequestInput<'_>, kinds: &OfflineKinds) -> Result<Built, CliError> {
    let namespace_file = input.namespace.map(|ns| metadata_str(ns, "name"));
    let operation = input.operation.unwrap_or(match input.old_object {
        Some(_) => Operation::Update,
        None => Operation::Create,
    });
    let (object, old_object) = match (operation, input.old_object) {
        (Operation::Update, None) => {
            return Err(CliError::Usage(
                "UPDATE needs the object as it was before the update: --old-object (oldObject in a test case)".into(),
            ));
        }
        (Operation::Create | Operation::Connect, Some(_)) => {
            return Err(CliError::Usage(format!(
                "{} has no old object: leave out --old-object (oldObject in a test case)",
                operation.as_str()
            )));
        }
        (Operation::Delete, Some(_)) => {
            return Err(CliError::Usage(
                "DELETE takes the object being deleted as --object (object in a test case): leave out --old-object (oldObject)".into(),
            ));
        }
        (Operation::Delete, None) => (&Value::Null, input.object),
        (_, old) => (input.object, old.unwrap_or(&Value::Null)),
    };
    let subject = if object.is_null() { old_object } else { object };
    let api_version = subject
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = subject.get("kind").and_then(Value::as_str).unwrap_or("");
    if api_version.is_empty() || kind.is_empty() {
        return Err(CliError::Usage(
            "the object has no apiVersion or kind".into(),
        ));
    }
    let (group, version) = group_version(api_version);
    let known = kinds.resource_of(api_version, kind);
    let (resource, sub_resource) = match (input.resource, known) {
        (Some(r), _) => r.split_once('/').unwrap_or((r, "")),
        (None, Some(served)) => (served.resource.as_str(), ""),
        (None, None) => {
            return Err(CliError::Usage(format!(
                "{kind} ({api_version}) is neither a built-in kind of Kubernetes {} nor the kind of a CustomResourceDefinition given: pass its CustomResourceDefinition with --crd FILE (crds in a test suite), or its resource with --resource <plural> (resource in a test case)",
                kinds.kubernetes_version
            )));
        }
    };
    let name = metadata_str(subject, "name");
    let is_namespace = group.is_empty() && kind == "Namespace";
    let namespaced = match known {
        Some(served) => served.namespaced,
        None => !metadata_str(subject, "namespace").is_empty() || namespace_file.is_some(),
    };
    let namespace = if is_namespace {
        name.to_string()
    } else if namespaced {
        [
            metadata_str(subject, "namespace"),
            namespace_file.unwrap_or(""),
        ]
        .into_iter()
        .find(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string()
    } else {
        String::new()
    };
    let kind_json = json!({"group": group, "version": version, "kind": kind});
    let resource_json = json!({"group": group, "version": version, "resource": resource});
    let mut request = json!({
        "uid": "00000000-0000-0000-0000-000000000000",
        "kind": kind_json,
        "resource": resource_json,
        "requestKind": kind_json,
        "requestResource": resource_json,
        "name": name,
        "namespace": namespace,
        "operation": operation.as_str(),
        "userInfo": {"username": input.user, "groups": input.groups},
        "object": object,
        "oldObject": old_object,
        "dryRun": false,
    });
    if let Some(map) = request.as_object_mut() {
        if !sub_resource.is_empty() {
            map.insert("subResource".into(), json!(sub_resource));
            map.insert("requestSubResource".into(), json!(sub_resource));
        }
        if let Some(options) = operation.options_kind() {
            map.insert(
                "options".into(),
                json!({"apiVersion": "meta.k8s.io/v1", "kind": options}),
            );
        }
    }
    Ok(Built {
        request,
        namespace,
        namespaced: namespaced && !is_namespace,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input<'i>(object: &'i Value, old: Option<&'i Value>) -> RequestInput<'i> {
        RequestInput {
            object,
            old_object: old,
            operation: None,
            resource: None,
            namespace: None,
            user: "alice",
            groups: &[],
            at: std::time::SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn a_deployment_create_in_the_default_namespace() {
        let kinds = OfflineKinds::load(&[]).expect("loads");
        let object =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}});
        let built = build(&input(&object, None), &kinds).expect("builds");
        assert_eq!(built.namespace, "default");
        let r = &built.request;
        assert_eq!(r["operation"], "CREATE");
        assert_eq!(
            r["resource"],
            json!({"group": "apps", "version": "v1", "resource": "deployments"})
        );
        assert_eq!(r["options"]["kind"], "CreateOptions");
        assert_eq!(r["oldObject"], Value::Null);
        assert_eq!(r["userInfo"]["username"], "alice");
        let req = celgate_engine::Request::from_json(r).expect("the engine reads it");
        assert_eq!((req.name, req.namespace), ("web", "default"));
    }

    #[test]
    fn updates_deletes_and_their_usage_errors() {
        let kinds = OfflineKinds::load(&[]).expect("loads");
        let new = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team"}});
        let old = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team"}, "data": {}});
        let built = build(&input(&new, Some(&old)), &kinds).expect("builds");
        assert_eq!(built.request["operation"], "UPDATE");
        assert_eq!(built.request["oldObject"], old);
        assert_eq!(built.namespace, "team");

        let mut delete = input(&new, None);
        delete.operation = Some(Operation::Delete);
        let built = build(&delete, &kinds).expect("builds");
        assert_eq!(built.request["object"], Value::Null);
        assert_eq!(built.request["oldObject"], new);

        let mut update = input(&new, None);
        update.operation = Some(Operation::Update);
        let err = build(&update, &kinds).expect_err("no old object");
        assert_eq!(
            err.to_string(),
            "UPDATE needs the object as it was before the update: --old-object (oldObject in a test case)"
        );
    }

    #[test]
    fn custom_kinds_need_their_resource_and_namespaces_name_themselves() {
        let kinds = OfflineKinds::load(&[]).expect("loads");
        let widget =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
        let err = build(&input(&widget, None), &kinds).expect_err("unknown kind");
        assert_eq!(
            err.to_string(),
            format!(
                "Widget (example.com/v1) is neither a built-in kind of Kubernetes {} nor the kind of a CustomResourceDefinition given: pass its CustomResourceDefinition with --crd FILE (crds in a test suite), or its resource with --resource <plural> (resource in a test case)",
                kinds.kubernetes_version
            )
        );
        let mut given = input(&widget, None);
        given.resource = Some("widgets/status");
        let built = build(&given, &kinds).expect("builds");
        assert_eq!(built.request["resource"]["resource"], "widgets");
        assert_eq!(built.request["subResource"], "status");
        assert_eq!(built.namespace, "");

        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}});
        let built = build(&input(&ns, None), &kinds).expect("builds");
        assert_eq!(
            (built.namespace.as_str(), built.namespaced),
            ("team", false)
        );
    }
}
