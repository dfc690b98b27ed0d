//! Whatever kube-apiserver rejects when an in-tree policy or binding is written, celgate rejects
//! at `kubectl apply` with the same field errors (compared after the `… is invalid: ` prefix).

use celgate_e2e::{Celgate, Cluster};

const RULES: &str = r#"
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["deployments"]"#;

/// (name, kind, spec) of objects the API server must reject.
fn cases() -> Vec<(&'static str, &'static str, String)> {
    let policy = |extra: &str| format!("  matchConstraints:{RULES}\n{extra}");
    vec![
        ("syntax-error", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"object.spec.replicas <\"")),
        ("not-bool", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"1 + 1\"")),
        ("undeclared", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"params.x == 1\"")),
        ("request-uid", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"request.uid != ''\"")),
        ("message-dyn", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"true\"\n    messageExpression: \"object.metadata.name + object.spec.replicas\"")),
        ("message-newline", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"true\"\n    message: \"a\\nb\"")),
        ("bad-reason", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"true\"\n    reason: Unauthorized")),
        ("nothing-to-do", "ValidatingAdmissionPolicy", policy("")),
        ("star-and-create", "ValidatingAdmissionPolicy", format!("  matchConstraints:{}\n  validations:\n  - expression: \"true\"", RULES.replace("[\"CREATE\"]", "[\"*\", \"CREATE\"]"))),
        ("bad-variable", "ValidatingAdmissionPolicy", policy("  variables:\n  - name: in\n    expression: \"1\"\n  validations:\n  - expression: \"true\"")),
        ("audit-null-ternary", "ValidatingAdmissionPolicy", policy("  auditAnnotations:\n  - key: k\n    valueExpression: \"true ? 'x' : null\"")),
        ("audit-dyn", "ValidatingAdmissionPolicy", policy("  auditAnnotations:\n  - key: k\n    valueExpression: \"true ? 'x' : dyn(null)\"")),
        ("duplicate-condition", "ValidatingAdmissionPolicy", policy("  matchConditions:\n  - name: a\n    expression: \"true\"\n  - name: b\n    expression: \"1\"\n  validations:\n  - expression: \"true\"")),
        ("deny-and-warn", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Deny, Warn]".into()),
        ("no-actions", "ValidatingAdmissionPolicyBinding", "  policyName: p".into()),
        ("name-and-selector", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Deny]\n  paramRef:\n    name: x\n    selector: {}\n    parameterNotFoundAction: Deny".into()),
        // Required by the CRD schema, which holds even while celgate is down.
        ("no-not-found-action", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Deny]\n  paramRef:\n    name: x".into()),
        ("no-name-no-selector", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Audit]\n  paramRef:\n    parameterNotFoundAction: Allow".into()),
    ]
}

fn rejection(cluster: &Cluster, api: &str, kind: &str, name: &str, spec: &str) -> String {
    let yaml =
        format!("apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}\n");
    let out = cluster.kubectl(&["create", "-f", "-"], &yaml);
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert!(
        !out.status.success(),
        "{api} {kind} {name} was accepted:\n{yaml}"
    );
    match stderr.split_once(" is invalid: ") {
        Some((_, errors)) => errors.to_string(),
        None => panic!("{api} {kind} {name}: not a validation error: {stderr}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_policies_and_bindings_are_rejected_like_in_tree() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let _celgate = Celgate::start(&cluster).await;
    let mut differences = Vec::new();
    for (name, kind, spec) in cases() {
        let theirs = rejection(
            &cluster,
            "admissionregistration.k8s.io/v1",
            kind,
            name,
            &spec,
        );
        let ours = rejection(&cluster, "admission.celgate.io/v1", kind, name, &spec);
        if ours != theirs {
            differences.push(format!(
                "{kind} {name}:\n  in-tree: {theirs}\n  celgate: {ours}"
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} rejections differ:\n{}",
        differences.len(),
        cases().len(),
        differences.join("\n")
    );
}

/// Writing a policy or binding that refers to params needs read access to them (kube-apiserver's
/// authorization check on paramKind and paramRef), with the same rejection in both engines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn param_references_need_read_access_like_in_tree() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let _celgate = Celgate::start(&cluster).await;
    cluster.apply(
        r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: policy-writer
rules:
- apiGroups: ["admissionregistration.k8s.io", "admission.celgate.io"]
  resources: ["validatingadmissionpolicies", "validatingadmissionpolicybindings"]
  verbs: ["create", "get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: policy-writer
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: policy-writer}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: bob}
"#,
    );
    let policy = |api: &str, name: &str| {
        format!(
            "apiVersion: {api}\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {name}\nspec:\n  paramKind:\n    apiVersion: v1\n    kind: ConfigMap\n  matchConstraints:{RULES}\n  validations:\n  - expression: \"true\"\n"
        )
    };
    let binding = |api: &str| {
        format!(
            "apiVersion: {api}\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: by-bob\nspec:\n  policyName: by-admin\n  validationActions: [Deny]\n  paramRef:\n    name: limits\n    namespace: default\n    parameterNotFoundAction: Deny\n"
        )
    };
    let as_bob = |yaml: &str| {
        let out = cluster.kubectl(&["create", "--as=bob", "-f", "-"], yaml);
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        assert!(!out.status.success(), "bob could write:\n{yaml}");
        stderr
            .split_once(" is invalid: ")
            .map(|(_, e)| e.to_string())
            .unwrap_or(stderr)
    };
    let mut seen = Vec::new();
    for api in ["admissionregistration.k8s.io/v1", "admission.celgate.io/v1"] {
        cluster.apply(&policy(api, "by-admin"));
        seen.push((as_bob(&policy(api, "by-bob")), as_bob(&binding(api))));
    }
    assert_eq!(
        seen[0].0,
        "spec.paramKind: Forbidden: user &{bob  [system:authenticated] map[]} must have \"get\" permission on all objects of the referenced paramKind (kind=ConfigMap, apiVersion=v1)"
    );
    assert_eq!(
        seen[0].1,
        "spec.paramRef: Forbidden: user &{bob  [system:authenticated] map[]} does not have \"get\" permission on the object referenced by paramRef"
    );
    assert_eq!(
        seen[1], seen[0],
        "celgate's rejections differ from the in-tree ones"
    );
}
