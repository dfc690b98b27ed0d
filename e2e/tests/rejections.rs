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
