//! Whatever kube-apiserver rejects when an in-tree policy or binding is written, celgate rejects
//! at `kubectl apply` with the same field errors (compared after the `… is invalid: ` prefix):
//! a table with a case for every text of the API validation of the four kinds (celgate's webhook
//! and its CRD schemas alike), enum orders and kube-apiserver's own renderings included.

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
    let validating = vec![
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
        ("object-literal", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"Object{} == Object{}\"")),
        // namespaceObject's times are timestamps to the type checker.
        ("namespace-time-as-string", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"namespaceObject.metadata.creationTimestamp.startsWith('20') || namespaceObject.status.conditions.exists(c, c.lastTransitionTime.contains('x'))\"")),
        // One case for each further text of the API validation of the four kinds.
        ("blank-message", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"true\"\n    message: \"   \"")),
        ("blank-message-expression", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"true\"\n    messageExpression: \"  \"")),
        ("blank-expression", "ValidatingAdmissionPolicy", policy("  validations:\n  - expression: \"  \"")),
        ("long-audit-value", "ValidatingAdmissionPolicy", policy(&format!("  auditAnnotations:\n  - key: k\n    valueExpression: \"'{}'\"", "m".repeat(5119)))),
        ("audit-annotations-21", "ValidatingAdmissionPolicy", policy(&format!("  auditAnnotations:\n{}", (0..21).map(|i| format!("  - key: k{i}\n    valueExpression: \"'v'\"\n")).collect::<String>()))),
        ("audit-key-invalid", "ValidatingAdmissionPolicy", policy("  auditAnnotations:\n  - key: \"a b\"\n    valueExpression: \"'v'\"")),
        ("audit-key-duplicate", "ValidatingAdmissionPolicy", policy("  auditAnnotations:\n  - key: k\n    valueExpression: \"'v'\"\n  - key: k\n    valueExpression: \"'w'\"")),
        ("no-validations", "ValidatingAdmissionPolicy", policy("  validations: []")),
        ("no-failure-policy-value", "ValidatingAdmissionPolicy", policy("  failurePolicy: Sometimes\n  validations:\n  - expression: \"true\"")),
        ("no-match-constraints", "ValidatingAdmissionPolicy", "  validations:\n  - expression: \"true\"".into()),
        ("no-resource-rules", "ValidatingAdmissionPolicy", "  matchConstraints:\n    namespaceSelector: {}\n  validations:\n  - expression: \"true\"".into()),
        ("star-and-other-resources", "ValidatingAdmissionPolicy", format!("  matchConstraints:{}\n  validations:\n  - expression: \"true\"", RULES.replace("[\"deployments\"]", "[\"*\", \"deployments\"]"))),
        ("star-star-and-other", "ValidatingAdmissionPolicy", format!("  matchConstraints:{}\n  validations:\n  - expression: \"true\"", RULES.replace("[\"deployments\"]", "[\"*/*\", \"deployments\"]"))),
        ("all-subresources-and-one", "ValidatingAdmissionPolicy", format!("  matchConstraints:{}\n  validations:\n  - expression: \"true\"", RULES.replace("[\"deployments\"]", "[\"deployments/*\", \"deployments/status\"]"))),
        ("subresource-of-all-and-one", "ValidatingAdmissionPolicy", format!("  matchConstraints:{}\n  validations:\n  - expression: \"true\"", RULES.replace("[\"deployments\"]", "[\"*/status\", \"deployments/status\"]"))),
        ("star-group-and-other", "ValidatingAdmissionPolicy", format!("  matchConstraints:{}\n  validations:\n  - expression: \"true\"", RULES.replace("[\"apps\"]", "[\"*\", \"apps\"]"))),
        ("star-version-and-other", "ValidatingAdmissionPolicy", format!("  matchConstraints:{}\n  validations:\n  - expression: \"true\"", RULES.replace("[\"v1\"]", "[\"*\", \"v1\"]"))),
        ("empty-version", "ValidatingAdmissionPolicy", format!("  matchConstraints:{}\n  validations:\n  - expression: \"true\"", RULES.replace("[\"v1\"]", "[\"\"]"))),
        ("selector-in-without-values", "ValidatingAdmissionPolicy", format!("  matchConstraints:{RULES}\n    namespaceSelector:\n      matchExpressions:\n      - {{key: env, operator: In}}\n  validations:\n  - expression: \"true\"")),
        ("selector-exists-with-values", "ValidatingAdmissionPolicy", format!("  matchConstraints:{RULES}\n    objectSelector:\n      matchExpressions:\n      - {{key: env, operator: Exists, values: [a]}}\n  validations:\n  - expression: \"true\"")),
        ("selector-bad-key", "ValidatingAdmissionPolicy", format!("  matchConstraints:{RULES}\n    objectSelector:\n      matchLabels: {{\"-bad-\": x}}\n  validations:\n  - expression: \"true\"")),
        ("bad-match-policy", "ValidatingAdmissionPolicy", format!("  matchConstraints:{RULES}\n    matchPolicy: Loose\n  validations:\n  - expression: \"true\"")),
        ("bad-scope", "ValidatingAdmissionPolicy", format!("  matchConstraints:{}\n  validations:\n  - expression: \"true\"", RULES.replace("resources: [\"deployments\"]", "resources: [\"deployments\"]\n      scope: Everywhere"))),
        ("variable-bad-name", "ValidatingAdmissionPolicy", policy("  variables:\n  - name: \"1x\"\n    expression: \"1\"\n  validations:\n  - expression: \"true\"")),
        ("variable-no-expression", "ValidatingAdmissionPolicy", policy("  variables:\n  - name: x\n    expression: \"\"\n  validations:\n  - expression: \"true\"")),
        ("condition-bad-name", "ValidatingAdmissionPolicy", policy("  matchConditions:\n  - name: \"a b\"\n    expression: \"true\"\n  validations:\n  - expression: \"true\"")),
        ("conditions-65", "ValidatingAdmissionPolicy", policy(&format!("  matchConditions:\n{}  validations:\n  - expression: \"true\"", (0..65).map(|i| format!("  - name: c{i}\n    expression: \"true\"\n")).collect::<String>()))),
        ("param-kind-no-version", "ValidatingAdmissionPolicy", policy("  paramKind:\n    apiVersion: example.com\n    kind: Thing\n  validations:\n  - expression: \"true\"")),
        ("param-kind-no-kind", "ValidatingAdmissionPolicy", policy("  paramKind:\n    apiVersion: v1\n    kind: \"\"\n  validations:\n  - expression: \"true\"")),
        ("duplicate-action", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Audit, Audit]".into()),
        ("bad-action", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Block]".into()),
        ("bad-param-name", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Deny]\n  paramRef:\n    name: \"a%b\"\n    parameterNotFoundAction: Deny".into()),
        ("bad-not-found-action", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Deny]\n  paramRef:\n    name: x\n    parameterNotFoundAction: Ignore".into()),
        ("deny-and-warn", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Deny, Warn]".into()),
        ("no-actions", "ValidatingAdmissionPolicyBinding", "  policyName: p".into()),
        ("name-and-selector", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Deny]\n  paramRef:\n    name: x\n    selector: {}\n    parameterNotFoundAction: Deny".into()),
        // Required by the CRD schema, which holds even while celgate is down.
        ("no-not-found-action", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Deny]\n  paramRef:\n    name: x".into()),
        ("no-name-no-selector", "ValidatingAdmissionPolicyBinding", "  policyName: p\n  validationActions: [Audit]\n  paramRef:\n    parameterNotFoundAction: Allow".into()),
    ];
    let map = "MutatingAdmissionPolicy";
    let mapb = "MutatingAdmissionPolicyBinding";
    let apply = |expr: &str| {
        mutating(&format!(
            "  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: {expr:?}"
        ))
    };
    let patch = |expr: &str| {
        mutating(&format!(
            "  - patchType: JSONPatch\n    jsonPatch:\n      expression: {expr:?}"
        ))
    };
    let mut cases = validating;
    cases.extend([
        ("syntax-error", map, apply("Object{spec: Object.spec{replicas: }}")),
        ("apply-not-object", map, apply("Object.spec{replicas: 1}")),
        ("apply-dyn", map, apply("object")),
        ("patch-not-list", map, patch("JSONPatch{op: 'add', path: '/spec/replicas', value: 1}")),
        ("patch-list-of-objects", map, patch("[Object{}]")),
        ("patch-op-type", map, patch("[JSONPatch{op: 1, path: '/spec/replicas'}]")),
        ("patch-unknown-field", map, patch("[JSONPatch{op: 'add', pth: '/spec/replicas'}]")),
        ("unknown-type", map, apply("Deployment{spec: 1}")),
        ("object-in-variable", map, format!("  matchConstraints:{RULES}\n  reinvocationPolicy: Never\n  variables:\n  - name: o\n    expression: \"Object{{}}\"\n  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{{}}\"")),
        ("condition-not-bool", map, format!("  matchConstraints:{RULES}\n  reinvocationPolicy: Never\n  matchConditions:\n  - name: a\n    expression: \"Object{{}}\"\n  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{{}}\"")),
        ("escape-key-in-condition", map, format!("  matchConstraints:{RULES}\n  reinvocationPolicy: Never\n  matchConditions:\n  - name: a\n    expression: \"jsonpatch.escapeKey('a') == 'a'\"\n  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{{}}\"")),
        ("struct-field-type", map, apply("Object{spec: Object.spec{replicas: 1}} == JSONPatch{op: 'add'} ? Object{} : Object{}")),
        // Required by the CRD schema, which holds even while celgate is down.
        ("no-patch-type", map, mutating("  - applyConfiguration:\n      expression: \"Object{}\"")),
        ("bad-patch-type", map, mutating("  - patchType: Merge\n    applyConfiguration:\n      expression: \"Object{}\"")),
        ("no-expression", map, mutating("  - patchType: ApplyConfiguration\n    applyConfiguration: {}")),
        ("patch-and-apply", map, mutating("  - patchType: JSONPatch\n    applyConfiguration:\n      expression: \"Object{}\"")),
        ("no-mutations", map, format!("  matchConstraints:{RULES}\n  reinvocationPolicy: Never")),
        ("no-reinvocation", map, format!("  matchConstraints:{RULES}\n  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{{}}\"")),
        ("bad-reinvocation", map, format!("  matchConstraints:{RULES}\n  reinvocationPolicy: Always\n  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{{}}\"")),
        ("delete-operation", map, format!("  matchConstraints:{}\n  reinvocationPolicy: Never\n  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{{}}\"", RULES.replace("[\"CREATE\"]", "[\"CREATE\", \"DELETE\"]"))),
        ("no-policy-name", mapb, "  paramRef:\n    name: x\n    parameterNotFoundAction: Deny".into()),
        ("name-and-selector", mapb, "  policyName: p\n  paramRef:\n    name: x\n    selector: {}\n    parameterNotFoundAction: Deny".into()),
        ("no-name-no-selector", mapb, "  policyName: p\n  paramRef:\n    parameterNotFoundAction: Allow".into()),
        ("bad-policy-name", mapb, "  policyName: Not_A_Name".into()),
        ("delete-operation", mapb, format!("  policyName: p\n  matchResources:{}", RULES.replace("[\"CREATE\"]", "[\"DELETE\"]"))),
    ]);
    cases
}

/// A MutatingAdmissionPolicy spec with `mutations` (YAML list items).
fn mutating(mutations: &str) -> String {
    format!("  matchConstraints:{RULES}\n  reinvocationPolicy: Never\n  mutations:\n{mutations}")
}

/// (name, kind, spec) of objects the API server must accept.
fn valid() -> Vec<(&'static str, &'static str, String)> {
    let map = "MutatingAdmissionPolicy";
    vec![
        (
            "apply",
            map,
            mutating(
                "  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{spec: Object.spec{replicas: object.spec.replicas + 1, anything: Object.spec.anything{}}}\"",
            ),
        ),
        (
            "patch",
            map,
            mutating(
                "  - patchType: JSONPatch\n    jsonPatch:\n      expression: \"[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b'), value: 'x'}]\"",
            ),
        ),
        (
            "with-variables",
            map,
            format!(
                "  matchConstraints:{RULES}\n  reinvocationPolicy: IfNeeded\n  variables:\n  - name: next\n    expression: \"object.spec.replicas + 1\"\n  mutations:\n  - patchType: JSONPatch\n    jsonPatch:\n      expression: \"variables.next > 3 ? [JSONPatch{{op: 'replace', path: '/spec/replicas', value: variables.next}}] : []\""
            ),
        ),
        (
            "binding",
            "MutatingAdmissionPolicyBinding",
            "  policyName: apply\n  paramRef:\n    name: x\n    parameterNotFoundAction: Allow"
                .into(),
        ),
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
        println!("{kind} {name}: {theirs}");
        if ours != theirs {
            differences.push(format!(
                "{kind} {name}:\n  in-tree: {theirs}\n  celgate: {ours}"
            ));
        }
    }
    for (name, kind, spec) in valid() {
        for api in ["admissionregistration.k8s.io/v1", "admission.celgate.io/v1"] {
            let yaml = format!(
                "apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n{spec}\n"
            );
            let out = cluster.kubectl(&["create", "-f", "-"], &yaml);
            if !out.status.success() {
                differences.push(format!(
                    "{api} {kind} {name} was rejected: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} rejections and {} acceptances differ:\n{}",
        differences.len(),
        cases().len(),
        valid().len(),
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
  resources: ["validatingadmissionpolicies", "validatingadmissionpolicybindings",
    "mutatingadmissionpolicies", "mutatingadmissionpolicybindings"]
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
    // (policy kind, binding kind, the policy's body, the binding's extra fields)
    let kinds = [
        (
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "  validations:\n  - expression: \"true\"\n",
            "  validationActions: [Deny]\n",
        ),
        (
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "  reinvocationPolicy: Never\n  mutations:\n  - patchType: ApplyConfiguration\n    applyConfiguration:\n      expression: \"Object{}\"\n",
            "",
        ),
    ];
    let policy = |api: &str, kind: &str, body: &str, name: &str| {
        format!(
            "apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  paramKind:\n    apiVersion: v1\n    kind: ConfigMap\n  matchConstraints:{RULES}\n{body}"
        )
    };
    let binding = |api: &str, kind: &str, extra: &str, policy: &str, param_ref: &str| {
        format!(
            "apiVersion: {api}\nkind: {kind}\nmetadata:\n  name: by-bob\nspec:\n  policyName: {policy}\n{extra}  paramRef:\n{param_ref}    parameterNotFoundAction: Deny\n"
        )
    };
    // (policy name, paramRef fields): a named param, a missing policy, a selector (`list`).
    let refs = [
        ("by-admin", "    name: limits\n    namespace: default\n"),
        ("no-such-policy", "    name: limits\n"),
        ("by-admin", "    selector: {}\n"),
    ];
    let as_bob = |yaml: &str| {
        let out = cluster.kubectl(&["create", "--as=bob", "-f", "-"], yaml);
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        assert!(!out.status.success(), "bob could write:\n{yaml}");
        stderr
            .split_once(" is invalid: ")
            .map(|(_, e)| e.to_string())
            .unwrap_or(stderr)
    };
    for (policy_kind, binding_kind, body, extra) in kinds {
        let mut seen = Vec::new();
        for api in ["admissionregistration.k8s.io/v1", "admission.celgate.io/v1"] {
            cluster.apply(&policy(api, policy_kind, body, "by-admin"));
            let mut texts = vec![as_bob(&policy(api, policy_kind, body, "by-bob"))];
            for (policy_name, param_ref) in refs {
                texts.push(as_bob(&binding(
                    api,
                    binding_kind,
                    extra,
                    policy_name,
                    param_ref,
                )));
            }
            seen.push(texts);
        }
        assert_eq!(
            seen[0][0],
            "spec.paramKind: Forbidden: user &{bob  [system:authenticated] map[]} must have \"get\" permission on all objects of the referenced paramKind (kind=ConfigMap, apiVersion=v1)",
            "{policy_kind}"
        );
        if binding_kind == "ValidatingAdmissionPolicyBinding" {
            assert_eq!(
                seen[0][1],
                "spec.paramRef: Forbidden: user &{bob  [system:authenticated] map[]} does not have \"get\" permission on the object referenced by paramRef"
            );
        }
        assert_eq!(
            seen[1], seen[0],
            "celgate's rejections of {policy_kind} and {binding_kind} differ from the in-tree ones"
        );
    }
}
