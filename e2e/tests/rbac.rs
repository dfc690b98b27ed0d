//! Least privilege, proven: celgate runs as its ServiceAccount with the shipped RBAC
//! (config/rbac, and config/rbac/out-of-cluster for the registration by URL) through everything
//! it does (policies with params, a param kind it may not read, a mutating policy, an
//! `authorizer` policy, status and events as the leader, the Lease, webhook registration, the
//! certificate Secret created and then re-issued), and the API server's audit log must show
//! every (apiGroup, resource, verb) each shipped rule grants used at least once, and no request
//! of celgate's forbidden but the deliberate one. A verb added to a rule and not used by the code
//! fails this test.

use std::collections::BTreeSet;
use std::time::Duration;

use celgate_e2e::{
    Celgate, Cluster, Identity, RBAC_DIRS, SERVICE_ACCOUNT_USER, create_namespace,
    dry_run_deployment, free_port, inner_message, wait_for, workspace,
};
use serde_json::Value;

const PARAM_POLICY: &str = r#"
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replica-limit
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["deployments"]
  validations:
  - expression: "object.spec.replicas <= int(params.data.max)"
    message: "MESSAGE"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replica-limit
spec:
  policyName: replica-limit
  validationActions: [Deny]
  paramRef: {name: limits, namespace: params, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector:
      matchLabels: {engine: celgate}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: limits
  namespace: params
data:
  max: "3"
"#;

const MUTATING_AND_AUTHORIZER: &str = r#"
apiVersion: admission.celgate.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: add-team
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: "Object{metadata: Object.metadata{labels: {'team': 'a'}}}"
---
apiVersion: admission.celgate.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: add-team
spec:
  policyName: add-team
  matchResources:
    namespaceSelector:
      matchLabels: {engine: celgate}
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: needs-list
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
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: needs-list
spec:
  policyName: needs-list
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {engine: celgate}
"#;

/// An Audit binding over namespaces: the audit reports the namespace `audit-probe` in a
/// ClusterPolicyReport.
const NAMESPACE_AUDIT: &str = r#"
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: no-probe-namespace
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["namespaces"]
  validations:
  - expression: "object.metadata.name != 'audit-probe'"
    message: "no probe namespaces"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: no-probe-namespace
spec:
  policyName: no-probe-namespace
  validationActions: [Audit]
"#;

const NOPES_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: nopes.example.invalid
spec:
  group: example.invalid
  names: {kind: Nope, plural: nopes, singular: nope}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
"#;

const FORBIDDEN_PARAM_POLICY: &str = r#"
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: nope-limit
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: example.invalid/v1, kind: Nope}
  matchConstraints:
    resourceRules:
    - apiGroups: ["apps"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["deployments"]
  validations:
  - expression: "true"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: nope-limit
spec:
  policyName: nope-limit
  validationActions: [Deny]
  paramRef: {name: limits, namespace: params, parameterNotFoundAction: Deny}
  matchResources:
    namespaceSelector:
      matchLabels: {engine: nope}
"#;

/// The `Ready` condition of a celgate object (`kubectl get <kind> <name>`): status, reason and
/// observedGeneration, if it has one.
fn ready(cluster: &Cluster, kind: &str, name: &str) -> Option<(String, String, i64)> {
    let out = cluster.kubectl(&["get", kind, name, "-o", "json"], "");
    let object: Value = serde_json::from_slice(&out.stdout).ok()?;
    let condition = object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?
        .clone();
    Some((
        condition["status"].as_str()?.to_string(),
        condition["reason"].as_str()?.to_string(),
        object["status"]["observedGeneration"].as_i64()?,
    ))
}

/// Waits (up to 60 s) until the object's Ready condition has `status` and `reason` for
/// `generation`.
async fn wait_ready(cluster: &Cluster, kind: &str, name: &str, want: (&str, &str, i64)) {
    let what = format!("{kind} {name} Ready {want:?}");
    wait_for(&what, Duration::from_secs(60), || async {
        let (status, reason, generation) = ready(cluster, kind, name)?;
        (status == want.0 && reason == want.1 && generation == want.2).then_some(())
    })
    .await;
}

/// Waits (up to 60 s) until `kubectl <get>` finds the report; fails with celgate's log.
async fn wait_written(cluster: &Cluster, celgate: &Celgate, get: &[&str]) {
    let written = tokio::time::timeout(Duration::from_secs(60), async {
        while !cluster.kubectl(get, "").status.success() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(
        written.is_ok(),
        "no {get:?} after 60 s:\n{}",
        celgate.logs()
    );
}

/// One request of celgate's in the audit log.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Request {
    group: String,
    /// `resource` or `resource/subresource`.
    resource: String,
    verb: String,
    namespace: String,
    name: String,
    code: i64,
}

/// Every resource request celgate's ServiceAccount made, from the audit log.
fn requests(cluster: &Cluster) -> BTreeSet<Request> {
    let log = std::fs::read_to_string(cluster.dir().join("audit.log")).unwrap_or_default();
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["user"]["username"] == SERVICE_ACCOUNT_USER)
        .filter(|event| event["stage"] == "ResponseComplete" || event["stage"] == "ResponseStarted")
        .filter_map(|event| {
            let object = event.get("objectRef")?;
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            let mut resource = text(&object["resource"]);
            if let Some(sub) = object["subresource"].as_str() {
                resource = format!("{resource}/{sub}");
            }
            Some(Request {
                group: text(&object["apiGroup"]),
                resource,
                verb: text(&event["verb"]),
                namespace: text(&object["namespace"]),
                name: text(&object["name"]),
                code: event["responseStatus"]["code"].as_i64().unwrap_or_default(),
            })
        })
        .collect()
}

/// One (apiGroup, resource, verb) a shipped rule grants, where: the Role's namespace (empty
/// for a ClusterRole) and the rule's resourceNames (empty: any).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Grant {
    role: String,
    group: String,
    resource: String,
    verb: String,
    namespace: String,
    names: Vec<String>,
}

impl Grant {
    /// Whether `request` used this grant. Server-side apply that creates its object (a patch
    /// answered 201) is authorized as both `patch` and `create`.
    fn used_by(&self, request: &Request) -> bool {
        let verb = request.verb == self.verb
            || (self.verb == "create" && request.verb == "patch" && request.code == 201);
        verb && request.group == self.group
            && request.resource == self.resource
            && (self.namespace.is_empty() || request.namespace == self.namespace)
            && (self.names.is_empty() || self.names.contains(&request.name))
            && authorized(request.code)
    }
}

/// Whether a request's answer says RBAC let it through: anything but 401 and 403 (a 404, a 409
/// or an API server timeout, 504, under load, still used the grant).
fn authorized(code: i64) -> bool {
    code > 0 && code != 401 && code != 403
}

/// Every grant of the Roles and ClusterRoles the shipped RBAC installed (as the API server
/// holds them: the aggregated `celgate-params` with the rules aggregated into it).
fn grants(cluster: &Cluster) -> BTreeSet<Grant> {
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = BTreeSet::new();
    for dir in RBAC_DIRS {
        let path = workspace().join(dir);
        let list: Value = serde_json::from_str(&cluster.kubectl_ok(&[
            "get",
            "-k",
            &path.to_string_lossy(),
            "-o",
            "json",
        ]))
        .unwrap_or_else(|e| panic!("kubectl get -k {dir}: {e}"));
        let items = list["items"].as_array().cloned().unwrap_or_default();
        for role in items
            .iter()
            .filter(|i| i["kind"] == "Role" || i["kind"] == "ClusterRole")
        {
            let name = role["metadata"]["name"].as_str().unwrap_or_default();
            let namespace = role["metadata"]["namespace"].as_str().unwrap_or_default();
            for rule in role["rules"].as_array().cloned().unwrap_or_default() {
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        for verb in strings(&rule["verbs"]) {
                            out.insert(Grant {
                                role: format!(
                                    "{}/{name}",
                                    role["kind"].as_str().unwrap_or_default()
                                ),
                                group: group.clone(),
                                resource: resource.clone(),
                                verb,
                                namespace: namespace.to_string(),
                                names: strings(&rule["resourceNames"]),
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Whether a request is one of the deliberate forbidden ones: listing or watching the param
/// kind the shipped RBAC does not grant, or Deployments, which the audit is not granted by
/// default (config/rbac/audit.yaml).
fn deliberately_forbidden(request: &Request) -> bool {
    let listed = request.verb == "list" || request.verb == "watch";
    listed
        && ((request.group == "example.invalid" && request.resource == "nopes")
            || (request.group == "apps" && request.resource == "deployments"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shipped_rule_is_used_and_nothing_else_is_forbidden() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let reports = workspace().join("config/policy-reports");
    cluster.kubectl_ok(&["apply", "-k", &reports.to_string_lossy()]);
    cluster.wait_established(&["crd/policyreports.wgpolicyk8s.io"]);
    let port = free_port();
    let celgate = Celgate::spawn_as(
        &cluster,
        Identity::ServiceAccount,
        port,
        "celgate",
        &["--exception-namespaces=ours"],
        "info",
    )
    .await;
    celgate.wait_ready().await;
    let client = cluster.client().await;
    create_namespace(&client, "params", "none").await;
    create_namespace(&client, "ours", "celgate").await;

    // A policy with params (ConfigMaps: list, watch; SubjectAccessReviews for the param access
    // check of the write), a mutating policy and an authorizer policy.
    cluster.apply(&PARAM_POLICY.replace("MESSAGE", "too many replicas"));
    cluster.apply(MUTATING_AND_AUTHORIZER);
    let denied = wait_for(
        "the param policy to deny",
        Duration::from_secs(30),
        || async { dry_run_deployment(&client, "ours", 4).await.err() },
    )
    .await;
    assert_eq!(
        inner_message(&denied.0),
        "ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit' denied request: too many replicas"
    );
    let labels = wait_for(
        "the mutating policy to label",
        Duration::from_secs(30),
        || async {
            let out = cluster.kubectl(
                &[
                    "create",
                    "configmap",
                    "probe",
                    "-n",
                    "ours",
                    "--dry-run=server",
                    "-o",
                    "json",
                ],
                "",
            );
            let object: Value = serde_json::from_slice(&out.stdout).ok()?;
            let labels = object["metadata"]["labels"].clone();
            (!labels.is_null()).then_some(labels)
        },
    )
    .await;
    assert_eq!(labels["team"], "a", "{labels}");

    // Status as the leader on all four kinds; then a second generation compiles, so the
    // `Compiled` event of the same object is patched into a series.
    for (kind, name) in [
        ("cvap", "replica-limit"),
        ("cvapb", "replica-limit"),
        ("cmap", "add-team"),
        ("cmapb", "add-team"),
    ] {
        wait_ready(&cluster, kind, name, ("True", "Enforced", 1)).await;
    }
    cluster.apply(&PARAM_POLICY.replace("MESSAGE", "at most 3 replicas"));
    wait_ready(&cluster, "cvap", "replica-limit", ("True", "Enforced", 2)).await;

    // A PolicyException (list, watch) that expires in seconds: its status (patch) says so,
    // with an Expired event in its namespace (create).
    let expires = k8s_openapi::jiff::Timestamp::now()
        .checked_add(Duration::from_secs(3))
        .and_then(|t| k8s_openapi::jiff::Timestamp::from_second(t.as_second()))
        .unwrap_or_else(|e| panic!("3 s from now: {e}"));
    cluster.apply(&format!(
        "apiVersion: admission.celgate.io/v1alpha1\nkind: PolicyException\nmetadata: {{name: soon, namespace: ours}}\nspec:\n  policies: [{{name: replica-limit}}]\n  match: {{}}\n  expiresAt: \"{expires}\"\n"
    ));
    wait_for(
        "the exception's Expired event",
        Duration::from_secs(60),
        || async {
            let out = cluster.kubectl(
                &[
                    "get",
                    "events.events.k8s.io",
                    "-n",
                    "ours",
                    "-o",
                    "jsonpath={.items[*].reason}",
                ],
                "",
            );
            String::from_utf8_lossy(&out.stdout)
                .contains("Expired")
                .then_some(())
        },
    )
    .await;

    // The audit as the leader: a ConfigMap the scanner's own permissions fail `needs-list`
    // for gets a PolicyReport, which goes when the ConfigMap does; Deployments, which the
    // audit may not read by default, are named in the binding's status.audit.errors.
    cluster.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: audit-probe\n  namespace: ours\n",
    );
    let uid = cluster.kubectl_ok(&[
        "get",
        "configmap",
        "audit-probe",
        "-n",
        "ours",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let report = format!("policyreport/celgate-{uid}");
    wait_written(&cluster, &celgate, &["get", &report, "-n", "ours"]).await;
    // A cluster-scoped object's report is a ClusterPolicyReport.
    cluster.apply(NAMESPACE_AUDIT);
    cluster.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: audit-probe\n");
    let ns_uid = cluster.kubectl_ok(&[
        "get",
        "namespace",
        "audit-probe",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let cluster_report = format!("clusterpolicyreport/celgate-{ns_uid}");
    wait_written(&cluster, &celgate, &["get", &cluster_report]).await;
    cluster.kubectl_ok(&["delete", "namespace", "audit-probe", "--wait=false"]);
    cluster.kubectl_ok(&["delete", "configmap", "audit-probe", "-n", "ours"]);
    wait_for(
        "the probe's PolicyReport to go",
        Duration::from_secs(30),
        || async {
            (!cluster
                .kubectl(&["get", &report, "-n", "ours"], "")
                .status
                .success())
            .then_some(())
        },
    )
    .await;
    wait_for(
        "the namespace's ClusterPolicyReport to go",
        Duration::from_secs(60),
        || async {
            (!cluster
                .kubectl(&["get", &cluster_report], "")
                .status
                .success())
            .then_some(())
        },
    )
    .await;
    let errors = wait_for(
        "status.audit.errors to name deployments",
        Duration::from_secs(60),
        || async {
            let errors = cluster.kubectl_ok(&[
                "get",
                "cvapb",
                "replica-limit",
                "-o",
                "jsonpath={.status.audit.errors}",
            ]);
            errors.contains("deployments").then_some(errors)
        },
    )
    .await;
    assert!(errors.contains("forbidden"), "{errors}");

    // The deliberate forbidden case: a param kind the shipped RBAC does not grant.
    cluster.apply(NOPES_CRD);
    cluster.wait_established(&["crd/nopes.example.invalid"]);
    cluster.apply(FORBIDDEN_PARAM_POLICY);
    wait_ready(
        &cluster,
        "cvap",
        "nope-limit",
        ("False", "ParamKindForbidden", 1),
    )
    .await;

    // The serving certificate must be re-issued (its hosts changed): the restarted process
    // replaces the Secret.
    cluster.kubectl_ok(&[
        "annotate",
        "secret",
        "celgate-webhook-tls",
        "-n",
        "celgate-system",
        "--overwrite",
        "celgate.io/serving-hosts=stale.example",
    ]);
    drop(celgate);
    let celgate = Celgate::spawn_as(
        &cluster,
        Identity::ServiceAccount,
        port,
        "celgate",
        &[],
        "info",
    )
    .await;
    celgate.wait_ready().await;
    let hosts = cluster.kubectl_ok(&[
        "get",
        "secret",
        "celgate-webhook-tls",
        "-n",
        "celgate-system",
        "-o",
        "jsonpath={.metadata.annotations.celgate\\.io/serving-hosts}",
    ]);
    assert_eq!(hosts, "127.0.0.1", "the Secret was not re-issued");

    // Every grant used at least once (the audit log is written as requests complete; a
    // bounded wait covers the last ones).
    let grants = grants(&cluster);
    assert!(
        grants.iter().any(|g| g.resource == "configmaps"),
        "the aggregated param role holds no ConfigMap grant: {grants:#?}"
    );
    let unused = |seen: &BTreeSet<Request>| -> Vec<Grant> {
        grants
            .iter()
            .filter(|g| !seen.iter().any(|r| g.used_by(r)))
            .cloned()
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !unused(&requests(&cluster)).is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let seen = requests(&cluster);
    assert_eq!(
        unused(&seen),
        Vec::<Grant>::new(),
        "shipped grants celgate never used (remove them, or exercise the code that needs \
         them); celgate's requests:\n{seen:#?}"
    );

    // Nothing forbidden but the deliberate case, which did happen.
    let forbidden: Vec<&Request> = seen.iter().filter(|r| r.code == 403).collect();
    assert!(
        forbidden.iter().any(|r| deliberately_forbidden(r)),
        "the forbidden kinds were never listed: {seen:#?}"
    );
    let unexpected: Vec<&&Request> = forbidden
        .iter()
        .filter(|r| !deliberately_forbidden(r))
        .collect();
    assert!(
        unexpected.is_empty(),
        "celgate was forbidden requests the shipped RBAC should allow: {unexpected:#?}\n{}",
        celgate.logs()
    );
}
