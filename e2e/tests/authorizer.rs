//! `authorizer` in expressions is answered for the requesting user (here an impersonated one)
//! with SubjectAccessReviews, with the same decisions and messages as the in-tree plugin, label
//! and field selectors (valid or not) included.

use std::time::Duration;

use celgate_e2e::{Celgate, Cluster, Identity, inner_message, wait_for};

const POLICY: &str = r#"
apiVersion: API
kind: ValidatingAdmissionPolicy
metadata:
  name: "needs-list.example.com"
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  validations:
  - expression: "authorizer.group('').resource('configmaps').namespace(request.namespace).check('list').allowed()"
    message: "creating configmaps needs list"
  - expression: "authorizer.requestResource.check('create').allowed()"
  # Selectors, valid or not, never make the check error; one that does not parse is ignored.
  - expression: "!authorizer.group('').resource('configmaps').namespace(request.namespace).labelSelector('app=web').check('list').errored()"
    message: "a valid label selector errored"
  - expression: "!authorizer.group('').resource('configmaps').namespace(request.namespace).fieldSelector('metadata.name=x').check('list').errored()"
    message: "a valid field selector errored"
  - expression: "!authorizer.group('').resource('configmaps').namespace(request.namespace).labelSelector('app in (').fieldSelector('metadata.name in x').check('list').errored()"
    message: "selectors that do not parse errored"
  - expression: "authorizer.group('').resource('configmaps').namespace(request.namespace).labelSelector('app in (').check('list').allowed() == authorizer.group('').resource('configmaps').namespace(request.namespace).check('list').allowed()"
    message: "a selector that does not parse changed the decision"
---
apiVersion: API
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: "needs-list-binding.example.com"
spec:
  policyName: "needs-list.example.com"
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        engine: ENGINE
"#;

fn rbac(ns: &str, verbs: &str) -> String {
    format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: bob\n  namespace: {ns}\nrules:\n- apiGroups: [\"\"]\n  resources: [\"configmaps\"]\n  verbs: {verbs}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: bob\n  namespace: {ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: bob\nsubjects:\n- kind: User\n  name: bob\n  apiGroup: rbac.authorization.k8s.io\n"
    )
}

/// Creates a ConfigMap as `user` (the admin when `None`; server-side dry run); the inner
/// denial message, if denied.
fn create_as(cluster: &Cluster, ns: &str, user: Option<&str>) -> Option<String> {
    let mut args = vec!["create", "configmap", "probe", "-n", ns, "--dry-run=server"];
    let as_user = user.map(|u| format!("--as={u}"));
    args.extend(as_user.as_deref());
    let out = cluster.kubectl(&args, "");
    if out.status.success() {
        return None;
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Some(
        inner_message(stderr.trim_start_matches("error: failed to create configmap: ")).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorizer_checks_the_requesting_user_like_in_tree() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let _celgate = Celgate::start_as(&cluster, Identity::ServiceAccount).await;
    for (ns, engine, api) in [
        ("ours", "celgate", "admission.celgate.io/v1"),
        ("theirs", "intree", "admissionregistration.k8s.io/v1"),
    ] {
        cluster.apply(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n  labels:\n    engine: {engine}\n"));
        cluster.apply(&rbac(ns, "[\"create\"]"));
        cluster.apply(&POLICY.replace("API", api).replace("ENGINE", engine));
    }
    let denied = "ValidatingAdmissionPolicy 'needs-list.example.com' with binding 'needs-list-binding.example.com' denied request: creating configmaps needs list";
    for ns in ["ours", "theirs"] {
        let got = wait_for(
            &format!("bob denied in {ns}"),
            Duration::from_secs(30),
            || async {
                create_as(&cluster, ns, Some("bob")).filter(|m| m.contains("denied request"))
            },
        )
        .await;
        assert_eq!(got, denied, "{ns}");
        // The admin (system:masters) is allowed everything.
        assert_eq!(create_as(&cluster, ns, None), None, "{ns}: admin denied");
    }
    // Granting list makes both engines admit bob.
    for ns in ["ours", "theirs"] {
        cluster.apply(&rbac(ns, "[\"create\", \"list\"]"));
        wait_for(
            &format!("bob admitted in {ns}"),
            Duration::from_secs(30),
            || async { create_as(&cluster, ns, Some("bob")).is_none().then_some(()) },
        )
        .await;
    }
}
