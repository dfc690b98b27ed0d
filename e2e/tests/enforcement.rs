//! celgate enforces a ValidatingAdmissionPolicy end to end: kubectl apply → snapshot → webhook
//! → denial with upstream's message, hot reload on edit, no enforcement without a binding, and
//! the same inner message as the in-tree plugin for the same policy.

use celgate_e2e::demo::{BINDING_NAME, CELGATE_API, IN_TREE_API, binding, policy};
use std::time::Duration;

use celgate_e2e::{
    Celgate, Cluster, Identity, create_namespace, curl, dry_run_deployment, free_port,
    inner_message, wait_admitted, wait_denied, wait_for,
};

const DEMO_DENIAL: &str = "ValidatingAdmissionPolicy 'demo-policy.example.com' with binding 'demo-binding-test.example.com' denied request: failed expression: object.spec.replicas <= 5";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_policy_is_enforced_reloaded_and_matches_in_tree() {
    let cluster = Cluster::start();
    cluster.install_crds();
    // Exceptions are honoured from celgate-demo only.
    let args = ["--exception-namespaces=celgate-demo"];
    let port = free_port();
    let celgate = Celgate::spawn_as(
        &cluster,
        Identity::ServiceAccount,
        port,
        "celgate",
        &args,
        "info",
    )
    .await;
    celgate.wait_ready().await;
    let client = cluster.client().await;
    create_namespace(&client, "celgate-demo", "celgate").await;
    create_namespace(&client, "intree-demo", "intree").await;

    // Apply → enforced (how long that takes is measured by `make bench-apply`).
    cluster.apply(&policy(CELGATE_API, 5));
    cluster.apply(&binding(CELGATE_API, "celgate"));
    let (message, code) = wait_denied(&client, "celgate-demo", 6).await;
    assert!(
        message.starts_with("admission webhook \"validate.celgate.io\" denied the request: "),
        "unexpected prefix: {message}"
    );
    assert_eq!(inner_message(&message), DEMO_DENIAL);
    assert_eq!(
        code, 422,
        "a false validation without reason is 422 Invalid"
    );
    dry_run_deployment(&client, "celgate-demo", 3)
        .await
        .unwrap_or_else(|(m, _)| panic!("3 replicas denied: {m}"));
    // Namespaces the binding does not select are not affected.
    dry_run_deployment(&client, "intree-demo", 6)
        .await
        .unwrap_or_else(|(m, _)| panic!("unselected namespace denied: {m}"));

    // Edit the policy: the new limit is enforced without a restart.
    cluster.apply(&policy(CELGATE_API, 10));
    wait_admitted(&client, "celgate-demo", 6).await;
    let (message, _) = wait_denied(&client, "celgate-demo", 11).await;
    assert_eq!(
        inner_message(&message),
        DEMO_DENIAL.replace("<= 5", "<= 10")
    );

    // Deleting the binding stops enforcement.
    let out = cluster.kubectl(&["delete", "cvapb", BINDING_NAME], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_admitted(&client, "celgate-demo", 11).await;

    // Differential: the in-tree plugin with the same policy gives the same inner message.
    cluster.apply(&policy(IN_TREE_API, 5));
    cluster.apply(&binding(IN_TREE_API, "intree"));
    let (in_tree, _) = wait_denied(&client, "intree-demo", 6).await;
    assert_eq!(
        inner_message(&in_tree),
        DEMO_DENIAL,
        "in-tree said: {in_tree}"
    );
    cluster.apply(&policy(CELGATE_API, 5));
    cluster.apply(&binding(CELGATE_API, "celgate"));
    let (ours, _) = wait_denied(&client, "celgate-demo", 6).await;
    assert_eq!(inner_message(&ours), inner_message(&in_tree));

    // The metrics endpoint (its own plain-HTTP port) counts the denials with upstream's labels.
    let metrics = celgate.metrics();
    assert!(
        metrics.contains("celgate_validating_admission_policy_check_total{policy=\"demo-policy.example.com\",policy_binding=\"demo-binding-test.example.com\",error_type=\"invalid_error\",enforcement_action=\"deny\"}"),
        "metrics lack the deny count:\n{metrics}"
    );

    exceptions_apply_until_they_expire(&cluster, &client, &celgate).await;
    pod_policy_with_autogen_denies_the_deployment(&cluster, &client).await;
}

/// A Pod policy opted into autogen (issue 44 item 2), on this test's control plane.
const AUTOGEN_POLICY: &str = r#"
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: pod-registry
  annotations:
    admission.celgate.io/autogen: Deployment, CronJob
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE", "UPDATE"]
      resources: ["pods"]
  validations:
  - expression: "object.spec.containers.all(c, c.image.startsWith('registry.corp/'))"
    messageExpression: "'images must come from registry.corp/: ' + object.spec.containers.map(c, c.image).join(', ')"
    reason: Forbidden
  auditAnnotations:
  - key: phase
    valueExpression: "string(object.?status.?phase.orValue(''))"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: pod-registry
spec:
  policyName: pod-registry
  validationActions: [Deny]
"#;

/// A Deployment whose Pod template breaks the Pod policy is denied at the Deployment, with a
/// message naming the controller and the policy; its status reports what the controllers'
/// schemas make of the rewritten expressions (a Deployment's status has no `phase`).
async fn pod_policy_with_autogen_denies_the_deployment(cluster: &Cluster, client: &kube::Client) {
    cluster.apply(AUTOGEN_POLICY);
    let (message, code) = wait_for(
        "the Pod policy to deny a Deployment",
        std::time::Duration::from_secs(30),
        || async move { dry_run_deployment(client, "intree-demo", 1).await.err() },
    )
    .await;
    assert_eq!(
        inner_message(&message),
        "ValidatingAdmissionPolicy 'pod-registry' (Pod template of Deployment) with binding 'pod-registry' denied request: images must come from registry.corp/: registry.example/app:1"
    );
    assert_eq!(code, 403, "reason Forbidden");
    let warning = wait_for(
        "the autogen variants' type checking in status",
        std::time::Duration::from_secs(30),
        || async move {
            let out = cluster.kubectl(&["get", "cvap", "pod-registry", "-o", "json"], "");
            let policy: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
            let warnings = policy.pointer("/status/typeChecking/additionalExpressionWarnings")?;
            warnings.as_array()?.iter().find_map(|w| {
                let field = w["fieldRef"].as_str()?;
                (field.ends_with("(Pod template of Deployment)")).then(|| w.clone())
            })
        },
    )
    .await;
    assert_eq!(
        warning["fieldRef"],
        "spec.auditAnnotations[0].valueExpression (Pod template of Deployment)"
    );
    let text = warning["warning"].as_str().unwrap_or_default();
    assert!(
        text.starts_with("apps/v1, Kind=Deployment: ") && text.contains("undefined field 'phase'"),
        "{text}"
    );
}

/// A PolicyException for `web-6` in celgate-demo, expiring `expires` from now, and one in
/// intree-demo, a namespace celgate does not honour exceptions from.
fn exceptions(expires: Duration) -> String {
    let at = k8s_openapi::jiff::Timestamp::now()
        .checked_add(expires)
        .and_then(|t| k8s_openapi::jiff::Timestamp::from_second(t.as_second()))
        .unwrap_or_else(|e| panic!("{expires:?} from now: {e}"));
    let exception = |namespace: &str| {
        format!(
            r#"apiVersion: admission.celgate.io/v1alpha1
kind: PolicyException
metadata: {{name: web-6, namespace: {namespace}}}
spec:
  policies: [{{name: demo-policy.example.com}}]
  match:
    resourceRules:
    - {{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments], resourceNames: [web-6]}}
  expiresAt: "{at}"
  reason: OPS-123
  owner: team-demo
"#
        )
    };
    format!(
        "{}---\n{}",
        exception("celgate-demo"),
        exception("intree-demo")
    )
}

/// The exception lets web-6 in until its second, then the policy denies it again; its status
/// and an Event say it expired; the one of a namespace not allowed is ignored and says so.
async fn exceptions_apply_until_they_expire(
    cluster: &Cluster,
    client: &kube::Client,
    celgate: &Celgate,
) {
    cluster.apply(&exceptions(Duration::from_secs(8)));
    wait_admitted(client, "celgate-demo", 6).await;
    let (message, _) = wait_denied(client, "celgate-demo", 7).await;
    assert_eq!(
        inner_message(&message),
        DEMO_DENIAL,
        "web-7 is not excepted"
    );
    let metrics = celgate.metrics();
    assert!(
        metrics.contains(
            "celgate_policy_exception_excepted_requests_total{exception=\"celgate-demo/web-6\"}"
        ),
        "metrics lack the excepted count:\n{metrics}"
    );
    let condition = |namespace: &'static str| {
        let out = cluster.kubectl(
            &[
                "get",
                "cpolex",
                "-n",
                namespace,
                "web-6",
                "-o",
                "jsonpath={.status.conditions[0].reason} {.status.exceptedRequests}",
            ],
            "",
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    wait_for(
        "the disallowed exception's status",
        Duration::from_secs(30),
        || async {
            condition("intree-demo")
                .starts_with("NamespaceNotAllowed")
                .then_some(())
        },
    )
    .await;
    // At its second it stops applying; the status then says so, with the requests it let in.
    let (message, _) = wait_denied(client, "celgate-demo", 6).await;
    assert_eq!(inner_message(&message), DEMO_DENIAL);
    wait_for("the Expired condition", Duration::from_secs(30), || async {
        let got = condition("celgate-demo");
        let count = got
            .strip_prefix("Expired ")
            .and_then(|n| n.parse::<u64>().ok());
        count.filter(|n| *n >= 1).map(|_| ())
    })
    .await;
    wait_for("the Expired event", Duration::from_secs(30), || async {
        let out = cluster.kubectl(
            &[
                "get",
                "events.events.k8s.io",
                "-n",
                "celgate-demo",
                "-o",
                "jsonpath={.items[*].reason}",
            ],
            "",
        );
        String::from_utf8_lossy(&out.stdout)
            .contains("Expired")
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_defined_outcomes() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    // Policies whose CEL does not parse, written while celgate (and so its validating webhook,
    // which would reject them) is not running: they are stored, and their failurePolicy decides.
    create_namespace(&client, "broken-fail", "broken-fail").await;
    create_namespace(&client, "broken-ignore", "broken-ignore").await;
    for (failure, engine) in [("Fail", "broken-fail"), ("Ignore", "broken-ignore")] {
        cluster.apply(&format!(
            r#"
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: broken-{engine}
spec:
  failurePolicy: {failure}
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["deployments"]
  validations:
    - expression: "object.spec.replicas <"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: broken-{engine}
spec:
  policyName: broken-{engine}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels:
        engine: {engine}
"#
        ));
    }
    // A policy whose rules kube-apiserver refuses in a webhook configuration (`*` beside
    // another group), written the same way and bound everywhere: it is left out of celgate's
    // configuration, so the others above are still enforced, and says why.
    cluster.apply(
        r#"
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: refused-rules
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["*", "apps"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["deployments"]
  validations:
    - expression: "false"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: refused-rules
spec:
  policyName: refused-rules
  validationActions: [Deny]
"#,
    );
    let celgate = Celgate::start_as(&cluster, Identity::ServiceAccount).await;

    // Malformed AdmissionReviews posted straight to the webhook: HTTP 400 saying what is wrong.
    let url = format!("https://127.0.0.1:{}/validate", celgate.port);
    for (body, says) in [
        ("{not json", "not valid JSON"),
        (
            r#"{"apiVersion":"v1","kind":"Pod"}"#,
            "expected an AdmissionReview",
        ),
        (
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            "has no request",
        ),
        (
            r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"1","operation":"CREATE"}}"#,
            "request.kind is required",
        ),
    ] {
        let out = curl(&[
            "-sk",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            "-X",
            "POST",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            body,
            &url,
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(text.ends_with("\n400"), "{body:?} did not get 400: {text}");
        assert!(
            text.contains(says),
            "{body:?}: the 400 does not say {says:?}: {text}"
        );
    }

    let (message, _) = wait_denied(&client, "broken-fail", 1).await;
    let inner = inner_message(&message);
    assert!(
        inner.starts_with("ValidatingAdmissionPolicy 'broken-broken-fail' with binding 'broken-broken-fail' denied request: compilation error: compilation failed: ERROR: <input>:1:"),
        "unexpected denial: {message}"
    );
    // Ignore admits; wait until the Fail one is enforced first so both are in the snapshot.
    dry_run_deployment(&client, "broken-ignore", 1)
        .await
        .unwrap_or_else(|(m, _)| panic!("Ignore policy denied: {m}"));

    let ready = wait_for(
        "refused-rules to say why it is not enforced",
        std::time::Duration::from_secs(30),
        || async {
            let out = cluster.kubectl(
                &[
                    "get",
                    "cvap",
                    "refused-rules",
                    "-o",
                    "jsonpath={.status.conditions[?(@.type==\"Ready\")]}",
                ],
                "",
            );
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            (!text.is_empty()).then_some(text)
        },
    )
    .await;
    let ready: serde_json::Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&"False".into(), &"InvalidRules".into()),
        "{ready}"
    );
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("spec.matchConstraints.resourceRules[0].apiGroups: Invalid value: ")
            && message.contains("if '*' is present, must not specify other API groups"),
        "{message}"
    );

    // celgate is still healthy after all of it.
    let health = curl(&[
        "-skf",
        &format!("https://127.0.0.1:{}/healthz", celgate.port),
    ]);
    assert!(
        health.status.success(),
        "celgate is unhealthy; log:\n{}",
        celgate.logs()
    );
    assert!(
        !celgate.logs().contains("panicked"),
        "celgate panicked:\n{}",
        celgate.logs()
    );
}

/// With `--webhook-rules all` the policy webhooks cover every resource, so a policy over a
/// resource no other policy matches is enforced without celgate's webhook configuration
/// changing; requests no policy matches reach celgate and are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_resource_covered_a_new_policy_is_enforced_without_a_configuration_change() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use k8s_openapi::api::core::v1::{ConfigMap, Secret};
    use kube::api::{Api, PostParams};
    use std::time::Duration;

    let cluster = Cluster::start();
    cluster.install_crds();
    let celgate = Celgate::spawn_with(
        &cluster,
        celgate_e2e::free_port(),
        "celgate",
        &["--webhook-rules", "all"],
        "info",
    );
    celgate.wait_ready().await;
    let client = cluster.client().await;
    create_namespace(&client, "celgate-demo", "celgate").await;
    cluster.apply(&policy(CELGATE_API, 5));
    cluster.apply(&binding(CELGATE_API, "celgate"));
    wait_denied(&client, "celgate-demo", 6).await;

    let configurations: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let before = configurations
        .get("celgate")
        .await
        .unwrap_or_else(|e| panic!("celgate's ValidatingWebhookConfiguration: {e}"));
    let fail_closed = before
        .webhooks
        .iter()
        .flatten()
        .find(|w| w.name == "validate.celgate.io")
        .unwrap_or_else(|| panic!("no fail-closed webhook: {before:?}"));
    let rules = serde_json::to_value(&fail_closed.rules).unwrap();
    assert_eq!(
        rules,
        serde_json::json!([{"apiGroups": ["*"], "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE", "DELETE"], "resources": ["*/*"], "scope": "*"}])
    );

    // A ConfigMap no policy matches reaches celgate and is admitted.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "celgate-demo");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let configmap: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "plain"}})).unwrap();
    configmaps
        .create(&dry_run, &configmap)
        .await
        .unwrap_or_else(|e| panic!("a ConfigMap no policy matches was refused: {e}"));

    cluster.apply(
        r#"
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: no-probe-secrets.example.com
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["secrets"]
  validations:
    - expression: "object.metadata.name != 'probe'"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: no-probe-secrets.example.com
spec:
  policyName: no-probe-secrets.example.com
  validationActions: [Deny]
"#,
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "celgate-demo");
    let secret = |name: &str| -> Secret {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap()
    };
    let message = celgate_e2e::wait_for(
        "the secrets policy to be enforced",
        Duration::from_secs(30),
        || async {
            match secrets.create(&dry_run, &secret("probe")).await {
                Err(kube::Error::Api(status)) => Some(status.message),
                _ => None,
            }
        },
    )
    .await;
    assert!(
        message.contains("no-probe-secrets.example.com")
            && message.contains("failed expression: object.metadata.name != 'probe'"),
        "{message}"
    );
    secrets
        .create(&dry_run, &secret("other"))
        .await
        .unwrap_or_else(|e| panic!("a Secret the policy admits was refused: {e}"));
    let after = configurations
        .get("celgate")
        .await
        .unwrap_or_else(|e| panic!("celgate's ValidatingWebhookConfiguration: {e}"));
    assert_eq!(
        after.metadata.resource_version, before.metadata.resource_version,
        "the webhook configuration changed for the new policy"
    );
}
