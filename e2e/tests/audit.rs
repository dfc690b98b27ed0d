//! The background audit, against the in-tree plugin: 500 objects of three kinds stored across
//! five namespaces, then a policy bound with `Audit`. celgate's PolicyReports must list exactly
//! the objects the in-tree plugin denies when each is created again in a server-side dry run
//! under the same policy with a Deny binding, with the same messages; the binding's
//! `status.audit` and `celgate_audit_violations` must count them. Then an object fixed and one
//! deleted leave the reports within seconds, a param change rescans (compared with in-tree
//! again), and the binding's opt-out annotation, made while celgate is down, removes its reports
//! and `status.audit`. `celgate scan --cluster` over the same cluster finds what the reports list.
//! Around the scan (issue 41), counted in kube-apiserver's audit log: writes to a ConfigMap no
//! binding reads start no list; a leader change with nothing changed deletes and rewrites no
//! report, and the new leader's status is complete; a policy over Namespaces reports none of the
//! namespaces the webhooks never see.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use celgate_e2e::scan_fixture::{self, Key};
use celgate_e2e::{Celgate, Cluster, wait_for, workspace};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const OBJECTS: usize = 500;
const NAMESPACES: usize = 5;
const PREFIX: &str = "audit";
const CELGATE_API: &str = "admission.celgate.io/v1";
const IN_TREE_API: &str = "admissionregistration.k8s.io/v1";
const BINDING: &str = "audit-owners-celgate";
const IN_TREE_BINDING: &str = "audit-owners-intree";
/// celgate's arguments: the fixture has Secrets, which are audited only when asked.
const ARGS: &[&str] = &["--audit-secrets=true"];
/// A policy over Namespaces: every one not named `audit-…` violates it.
const NAMESPACE_POLICY: &str = r#"apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: audit-namespace-names
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["namespaces"]
  validations:
  - expression: "object.metadata.name.startsWith('audit-')"
    messageExpression: "'namespace ' + object.metadata.name + ' is not an audit namespace'"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: audit-namespace-names
spec:
  policyName: audit-namespace-names
  validationActions: [Audit]
"#;

/// Requests kube-apiserver's audit log has completed so far with `verb` on one of `resources`.
fn requests(cluster: &Cluster, verb: &str, resources: &[&str]) -> usize {
    let log = std::fs::read_to_string(cluster.dir().join("audit.log")).unwrap_or_default();
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["verb"] == verb
                && resources.contains(&e["objectRef"]["resource"].as_str().unwrap_or_default())
        })
        .count()
}

/// The namespaces the ClusterPolicyReports celgate wrote are about.
async fn reported_namespaces(client: &kube::Client) -> BTreeSet<String> {
    let resource = kube::api::ApiResource {
        group: "wgpolicyk8s.io".into(),
        version: "v1alpha2".into(),
        api_version: "wgpolicyk8s.io/v1alpha2".into(),
        kind: "ClusterPolicyReport".into(),
        plural: "clusterpolicyreports".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let list = api
        .list(&kube::api::ListParams::default().labels("app.kubernetes.io/managed-by=celgate"))
        .await
        .unwrap_or_else(|e| panic!("cannot list ClusterPolicyReports: {e}"));
    list.items
        .iter()
        .filter(|r| r.data["scope"]["kind"] == "Namespace")
        .filter_map(|r| r.data["scope"]["name"].as_str().map(String::from))
        .collect()
}

/// The in-tree oracle: the policy bound with Deny, each stored object in the fixture's
/// namespaces created again (dry run), the binding turned off again.
async fn oracle(
    cluster: &Cluster,
    client: &kube::Client,
    max_keys: usize,
) -> BTreeSet<(Key, String)> {
    cluster.apply(&scan_fixture::policy(
        IN_TREE_API,
        IN_TREE_BINDING,
        "Deny",
        "yes",
    ));
    let objects = scan_fixture::stored(client, |ns| ns.starts_with(&format!("{PREFIX}-"))).await;
    // The in-tree plugin loads a new binding and param asynchronously: wait until it denies a
    // probe, a ConfigMap with its owner label and one key more than the param allows.
    let data: serde_json::Map<String, Value> = (0..=max_keys)
        .map(|k| (format!("k{k}"), json!("v")))
        .collect();
    let probe = [(
        (
            "ConfigMap".to_string(),
            format!("{PREFIX}-0"),
            "probe".to_string(),
        ),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "data": data,
            "metadata": {"name": "probe", "namespace": format!("{PREFIX}-0"), "labels": {"owner": "probe"}}}),
    )];
    wait_for(
        "the in-tree binding to deny",
        Duration::from_secs(30),
        || async {
            let denied = scan_fixture::in_tree_denials(client, &probe).await;
            (!denied.is_empty()).then_some(())
        },
    )
    .await;
    let denied = scan_fixture::in_tree_denials(client, &objects).await;
    // Off again by selecting no namespace: a binding deleted would leave the paramKind unbound,
    // and the in-tree plugin does not watch a param kind bound again (kubernetes#130887).
    cluster.apply(&scan_fixture::policy(
        IN_TREE_API,
        IN_TREE_BINDING,
        "Deny",
        "never",
    ));
    denied
}

/// Waits until celgate's reports are `want`; returns how long it took.
async fn reports_become(
    client: &kube::Client,
    want: &BTreeSet<(Key, String)>,
    limit: Duration,
) -> Duration {
    let started = Instant::now();
    let mut last = BTreeSet::new();
    let found = tokio::time::timeout(limit, async {
        loop {
            last = scan_fixture::reported(client).await;
            if &last == want {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if found.is_err() {
        let missing: Vec<_> = want.difference(&last).take(5).collect();
        let extra: Vec<_> = last.difference(want).take(5).collect();
        panic!(
            "celgate's reports ({} results) are not in-tree's denials ({}) after {limit:?}: missing {missing:?}, extra {extra:?}",
            last.len(),
            want.len()
        );
    }
    started.elapsed()
}

/// The celgate binding's `status.audit`.
async fn audit_status(client: &kube::Client) -> Value {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &kube::api::ApiResource {
            group: "admission.celgate.io".into(),
            version: "v1".into(),
            api_version: CELGATE_API.into(),
            kind: "ValidatingAdmissionPolicyBinding".into(),
            plural: "validatingadmissionpolicybindings".into(),
        },
    );
    let binding = api
        .get(BINDING)
        .await
        .unwrap_or_else(|e| panic!("cannot read binding {BINDING}: {e}"));
    binding.data["status"]["audit"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_reports_what_in_tree_would_deny_and_follows_changes() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let reports_crds = workspace().join("config/policy-reports");
    cluster.kubectl_ok(&["apply", "-k", &reports_crds.to_string_lossy()]);
    cluster.wait_established(&[
        "crd/policyreports.wgpolicyk8s.io",
        "crd/clusterpolicyreports.wgpolicyk8s.io",
    ]);
    let client = cluster.client().await;

    // The objects, before any policy.
    let mut items = scan_fixture::namespaces(PREFIX, NAMESPACES);
    items.push(json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": scan_fixture::PARAMS_NAMESPACE}}));
    items.extend((0..OBJECTS).map(|i| scan_fixture::object(PREFIX, NAMESPACES, i)));
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    let out = cluster.kubectl(&["create", "-f", "-"], &list);
    assert!(
        out.status.success(),
        "cannot create the fixture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    cluster.apply(&scan_fixture::param(4));
    cluster.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: celgate-system\n");

    let mut celgate = Celgate::start_with(&cluster, ARGS).await;
    let denied = oracle(&cluster, &client, 4).await;
    let audited: usize = scan_fixture::stored(&client, |ns| {
        ns.starts_with(&format!("{PREFIX}-"))
            && ns != format!("{PREFIX}-{}", NAMESPACES - 1)
            && ns != scan_fixture::PARAMS_NAMESPACE
    })
    .await
    .len();
    assert!(
        denied.len() > 50 && denied.len() < audited,
        "the fixture should have violations and compliant objects: {} of {audited} denied",
        denied.len()
    );

    let bound = Instant::now();
    cluster.apply(NAMESPACE_POLICY);
    cluster.apply(&scan_fixture::policy(CELGATE_API, BINDING, "Audit", "yes"));
    reports_become(&client, &denied, Duration::from_secs(60)).await;
    println!(
        "audit: {} objects stored in audited namespaces, {} denied by in-tree = reported by celgate, {:.1} s after the binding",
        audited,
        denied.len(),
        bound.elapsed().as_secs_f64()
    );
    let mut last = Value::Null;
    let status = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let status = audit_status(&client).await;
            last = status.clone();
            if status["violations"] == json!(denied.len()) && status["scanned"] == json!(audited) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "status.audit does not count {audited} scanned, {} violations: {last}",
            denied.len()
        )
    });
    assert!(status["lastScanTime"].is_string(), "{status}");
    let listed = status["violatingObjects"].as_array().map_or(0, Vec::len);
    assert_eq!(listed, 10, "status lists the first 10 violations: {status}");
    assert!(
        status["violatingObjects"]
            .as_array()
            .into_iter()
            .flatten()
            .all(|o| o.get("message").is_none()),
        "messages stay in the namespaced reports: {status}"
    );

    // The policy over Namespaces: the namespaces the webhooks never see are not reported.
    let namespaces = wait_for(
        "the policy over Namespaces to report `default`",
        Duration::from_secs(30),
        || async {
            let reported = reported_namespaces(&client).await;
            reported.contains("default").then_some(reported)
        },
    )
    .await;
    for skipped in ["kube-system", "celgate-system"] {
        assert!(
            !namespaces.contains(skipped),
            "{skipped} is excluded from the webhooks, so not audited: {namespaces:?}"
        );
    }
    let gauge = format!(
        "celgate_audit_violations{{policy=\"{}\",binding=\"{BINDING}\"}} {}",
        scan_fixture::POLICY,
        denied.len()
    );
    wait_for("the violations gauge", Duration::from_secs(10), || async {
        celgate.metrics().contains(&gauge).then_some(())
    })
    .await;

    // `celgate scan --cluster` finds the same, read-only, before any install would.
    let policy_file = cluster.dir().join("audit-policy.yaml");
    std::fs::write(
        &policy_file,
        scan_fixture::policy(CELGATE_API, BINDING, "Audit", "yes"),
    )
    .unwrap_or_else(|e| panic!("cannot write {}: {e}", policy_file.display()));
    let out = std::process::Command::new(Celgate::binary())
        // Secrets, which the audit reads here (`--audit-secrets=true`), are excluded by default.
        .args([
            "scan",
            "--cluster",
            "--include-excluded",
            "-o",
            "json",
            "--policies",
        ])
        .arg(&policy_file)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()
        .unwrap_or_else(|e| panic!("cannot run celgate scan: {e}"));
    assert_eq!(
        out.status.code(),
        Some(1),
        "violations exit 1: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let scan: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("celgate scan -o json: {e}"));
    let scanned: BTreeSet<(Key, String)> = scan["violations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let text = |f: &str| v["object"][f].as_str().unwrap_or_default().to_string();
            let message = v["message"].as_str().unwrap_or_default().to_string();
            ((text("kind"), text("namespace"), text("name")), message)
        })
        .collect();
    assert_eq!(
        scanned, denied,
        "celgate scan --cluster and the reports differ"
    );

    // Idle but for writes to a ConfigMap no binding reads (ConfigMap is a param kind), nothing
    // scans again and nothing is listed: neither those writes nor the audit's own status
    // writes (binding events, which publish a new policy set) are changes of its inputs.
    let scans = || {
        celgate
            .metrics()
            .lines()
            .find_map(|l| l.strip_prefix("celgate_audit_resource_scans_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no celgate_audit_resource_scans_total"))
    };
    let before = scans();
    let lists_before = requests(
        &cluster,
        "list",
        &["configmaps", "secrets", "serviceaccounts"],
    );
    let churn = format!("{PREFIX}-{}", NAMESPACES - 1);
    for i in 0..15 {
        cluster.apply(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: churn\n  namespace: {churn}\ndata:\n  n: \"{i}\"\n"
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Past the quiet time and the shortest gap between scans; then the audit log's last lines.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let lists = requests(
        &cluster,
        "list",
        &["configmaps", "secrets", "serviceaccounts"],
    ) - lists_before;
    println!(
        "audit: 15 writes to a ConfigMap no binding reads: {lists} lists of the audited resources"
    );
    assert_eq!(
        (scans(), lists),
        (before, 0),
        "the audit scanned again (resource scans, lists) with nothing it reads changed"
    );

    // One object fixed (its owner label added), one deleted: both leave the reports.
    let owner_only = denied
        .iter()
        .find(|((kind, _, _), message)| kind == "Secret" && message.ends_with("has no owner label"))
        .map(|(key, _)| key.clone())
        .unwrap_or_else(|| panic!("the fixture has a Secret lacking only its owner label"));
    let deleted = denied
        .iter()
        .find(|((kind, _, name), _)| kind == "ServiceAccount" && name.starts_with("obj-"))
        .map(|(key, _)| key.clone())
        .unwrap_or_else(|| panic!("the fixture has a violating ServiceAccount"));
    let secrets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &owner_only.1, &scan_fixture::kinds()[1]);
    secrets
        .patch(
            &owner_only.2,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"owner": "fixed"}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot label {owner_only:?}: {e}"));
    let accounts: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &deleted.1, &scan_fixture::kinds()[2]);
    accounts
        .delete(&deleted.2, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("cannot delete {deleted:?}: {e}"));
    let remaining: BTreeSet<(Key, String)> = denied
        .iter()
        .filter(|(key, _)| key != &owner_only && key != &deleted)
        .cloned()
        .collect();
    let took = reports_become(&client, &remaining, Duration::from_secs(15)).await;
    println!(
        "audit: one object fixed and one deleted: their reports gone {:.1} s later",
        took.as_secs_f64()
    );

    // A leader change with nothing changed: the new leader deletes and rewrites no report, and
    // writes the binding's status (its own scan's time, the same counts) and the gauges.
    let old = audit_status(&client).await;
    let report_kinds = ["policyreports", "clusterpolicyreports"];
    let writes =
        || requests(&cluster, "delete", &report_kinds) + requests(&cluster, "patch", &report_kinds);
    let writes_before = writes();
    celgate.terminate(Duration::from_secs(30));
    let restarted = Instant::now();
    celgate = Celgate::start_with(&cluster, ARGS).await;
    let gauge = format!(
        "celgate_audit_violations{{policy=\"{}\",binding=\"{BINDING}\"}} {}",
        scan_fixture::POLICY,
        remaining.len()
    );
    // (`scanned` is one less than before: the deleted object is no longer counted.)
    let mut last = Value::Null;
    let status_complete = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            last = audit_status(&client).await;
            if last["lastScanTime"] != old["lastScanTime"]
                && last["violations"] == json!(remaining.len())
                && last["scanned"] == json!(audited - 1)
                && celgate.metrics().contains(&gauge)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(
        status_complete.is_ok(),
        "the new leader's status.audit and gauge are not complete: {last} (before: {old}); log: {}",
        celgate
            .logs()
            .lines()
            .filter(|l| l.contains("audit"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let complete = restarted.elapsed();
    // Writes the new leader would make come within a second or two of its scan.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rewritten = writes() - writes_before;
    println!(
        "audit: leader change: the new leader's status complete {:.1} s after the restart; reports deleted or rewritten: {rewritten}",
        complete.as_secs_f64()
    );
    assert_eq!(
        rewritten, 0,
        "a leader change rewrote or deleted unchanged reports"
    );
    reports_become(&client, &remaining, Duration::from_secs(5)).await;

    // A param change rescans: fewer keys allowed, compared with in-tree again.
    let changed = Instant::now();
    cluster.apply(&scan_fixture::param(2));
    let denied = oracle(&cluster, &client, 2).await;
    assert!(denied.len() > remaining.len(), "a lower limit denies more");
    reports_become(&client, &denied, Duration::from_secs(60)).await;
    println!(
        "audit: param changed: {} denied by in-tree = reported by celgate, within {:.1} s of the change (the in-tree oracle ran meanwhile)",
        denied.len(),
        changed.elapsed().as_secs_f64()
    );

    // The binding opts out while celgate is down: its reports and status.audit go once it is
    // back.
    celgate.terminate(Duration::from_secs(30));
    cluster.kubectl_ok(&[
        "annotate",
        "validatingadmissionpolicybindings.admission.celgate.io",
        BINDING,
        "audit.celgate.io/scan=false",
    ]);
    let _celgate = Celgate::start_with(&cluster, ARGS).await;
    reports_become(&client, &BTreeSet::new(), Duration::from_secs(60)).await;
    wait_for("status.audit to go", Duration::from_secs(30), || async {
        audit_status(&client).await.is_null().then_some(())
    })
    .await;
}

/// A minimal openreports.io CRD (celgate ships none for that group): any content kept.
fn openreports_crd(kind: &str, plural: &str, scope: &str) -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.openreports.io
spec:
  group: openreports.io
  names: {{kind: {kind}, listKind: {kind}List, plural: {plural}, singular: {singular}}}
  scope: {scope}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#,
        singular = plural.trim_end_matches('s')
    )
}

/// `--audit-report-passes` and `--audit-report-api=openreports`: without the openreports CRDs
/// celgate says so and keeps running; with them, an allowed ConfigMap gets a Report with a
/// `pass` result and a violating one a Report with its `fail`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_are_reported_in_openreports_reports() {
    const ARGS: &[&str] = &[
        "--audit-report-passes=true",
        "--audit-report-api=openreports",
    ];
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    cluster.apply(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: celgate-system
---
apiVersion: v1
kind: Namespace
metadata:
  name: reports-e2e
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: allowed
  namespace: reports-e2e
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: denied
  namespace: reports-e2e
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: no-denied
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  validations:
  - expression: "object.metadata.name != 'denied'"
    message: "the name denied is taken"
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: no-denied
spec:
  policyName: no-denied
  validationActions: [Audit]
"#,
    );

    // No openreports CRDs: a warning naming the kinds, and celgate runs on.
    let mut celgate = Celgate::start_with(&cluster, ARGS).await;
    wait_for(
        "the warning that the openreports CRDs are missing",
        Duration::from_secs(30),
        || async {
            let logs = celgate.logs();
            (logs.contains("report CRDs are not installed")
                && logs.contains("Report/ClusterReport (openreports.io)"))
            .then_some(())
        },
    )
    .await;
    celgate.wait_ready().await;
    celgate.terminate(Duration::from_secs(30));

    cluster.apply(&openreports_crd("Report", "reports", "Namespaced"));
    cluster.apply(&openreports_crd(
        "ClusterReport",
        "clusterreports",
        "Cluster",
    ));
    cluster.wait_established(&[
        "crd/reports.openreports.io",
        "crd/clusterreports.openreports.io",
    ]);
    let _celgate = Celgate::start_with(&cluster, ARGS).await;

    let maps: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "reports-e2e",
        &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
    );
    let reports: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "reports-e2e",
        &kube::api::ApiResource {
            group: "openreports.io".into(),
            version: "v1alpha1".into(),
            api_version: "openreports.io/v1alpha1".into(),
            kind: "Report".into(),
            plural: "reports".into(),
        },
    );
    for (name, result, pass, fail) in [("allowed", "pass", 1, 0), ("denied", "fail", 0, 1)] {
        let uid = maps
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("cannot read ConfigMap {name}: {e}"))
            .metadata
            .uid
            .unwrap_or_default();
        let report = wait_for(
            &format!("the Report of ConfigMap {name}"),
            Duration::from_secs(60),
            || async { reports.get(&format!("celgate-{uid}")).await.ok() },
        )
        .await;
        assert_eq!(report.data["source"], "celgate", "{report:?}");
        assert_eq!(report.data["scope"]["name"], name, "{report:?}");
        assert_eq!(report.data["summary"]["pass"], pass, "{report:?}");
        assert_eq!(report.data["summary"]["fail"], fail, "{report:?}");
        let results = report.data["results"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(results.len(), 1, "{report:?}");
        assert_eq!(results[0]["result"], result, "{report:?}");
        assert_eq!(results[0]["policy"], "no-denied", "{report:?}");
        assert_eq!(results[0]["rule"], "no-denied", "{report:?}");
    }
}
