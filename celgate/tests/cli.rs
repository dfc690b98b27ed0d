//! The offline commands, run as the real `celgate` binary on the fixture files.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(path)
        .display()
        .to_string()
}

fn celgate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_celgate"))
        .args(args)
        .output()
        .expect("the celgate binary runs")
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn eval(object: &str, extra: &[&str]) -> Output {
    let (policy, binding, object) = (
        fixture("eval/policy.yaml"),
        fixture("eval/binding.yaml"),
        fixture(object),
    );
    let mut args = vec![
        "eval",
        "--policy",
        &policy,
        "--binding",
        &binding,
        "--object",
        &object,
    ];
    args.extend_from_slice(extra);
    celgate(&args)
}

/// The steps of the first evaluation, as (kind, outcome, value or error).
fn steps(report: &Value) -> Vec<(String, String, String)> {
    report["trace"][0]["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            let shown = s
                .get("value")
                .map(Value::to_string)
                .or_else(|| s["error"].as_str().map(str::to_string))
                .unwrap_or_default();
            (
                s["kind"].as_str().unwrap_or_default().to_string(),
                s["outcome"].as_str().unwrap_or_default().to_string(),
                shown,
            )
        })
        .collect()
}

#[test]
fn eval_denies_with_the_upstream_message_and_traces_every_expression() {
    let out = eval("eval/deployment-10.yaml", &["-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "denied exits 1");
    let report = json(&out);
    assert_eq!(report["allowed"], false);
    assert_eq!(
        report["denial"]["message"],
        "ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: failed expression: variables.replicas <= 5"
    );
    assert_eq!(report["denial"]["code"], 422);
    assert_eq!(report["request"], "CREATE apps/v1 Deployment default/web");
    let s = |k: &str, o: &str, v: &str| (k.to_string(), o.to_string(), v.to_string());
    assert_eq!(
        steps(&report),
        vec![
            s("matchCondition", "passed", "true"),
            s("validation", "failed", "false"),
            s("variable", "used", "10"),
            s("auditAnnotation", "used", "\"replicas: 10\""),
            s("variable", "used", "10"),
        ]
    );
    let first = &report["trace"][0]["steps"][0];
    assert!(first["cost"].as_u64().expect("cost") > 0, "{first}");
    assert_eq!(
        report["auditAnnotations"][0]["key"],
        "replica-limit/replicas"
    );
}

#[test]
fn eval_prints_the_decision_and_trace_for_people() {
    let out = eval("eval/deployment-10.yaml", &[]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    for line in [
        "request: CREATE apps/v1 Deployment default/web",
        "DENIED (422 Invalid)",
        "  ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: failed expression: variables.replicas <= 5",
        "  policy replica-limit, binding replica-limit-binding:",
        "    validations[0]: variables.replicas <= 5",
        "    variables.replicas (for validations): object.spec.replicas",
        "    variables.replicas (for auditAnnotations): object.spec.replicas",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "no line {line:?} in:\n{text}"
        );
    }
    assert!(text.contains("= false  (cost "), "{text}");
}

#[test]
fn eval_allows_a_request_that_passes() {
    let out = eval("eval/deployment-2.yaml", &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "allowed exits 0");
    let report = json(&out);
    assert_eq!(report["allowed"], true);
    assert_eq!(report["denial"], Value::Null);
    assert_eq!(
        steps(&report)[1],
        ("validation".into(), "passed".into(), "true".into())
    );
}

#[test]
fn eval_with_params_uses_the_message_expression() {
    let (policy, binding, object, params) = (
        fixture("eval/params-policy.yaml"),
        fixture("eval/params-binding.yaml"),
        fixture("eval/deployment-10.yaml"),
        fixture("eval/params.yaml"),
    );
    let out = celgate(&[
        "eval",
        "--policy",
        &policy,
        "--binding",
        &binding,
        "--object",
        &object,
        "--params",
        &params,
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    assert_eq!(
        report["denial"]["message"],
        "ValidatingAdmissionPolicy 'replica-limit-params' with binding 'replica-limit-params-binding' denied request: at most 3 replicas, got 10"
    );
    assert_eq!(
        report["trace"][0]["param"],
        serde_json::json!({"namespace": "default", "name": "replica-limits"})
    );
    assert_eq!(
        steps(&report),
        vec![
            ("validation".into(), "failed".into(), "false".into()),
            (
                "messageExpression".into(),
                "used".into(),
                "\"at most 3 replicas, got 10\"".into()
            ),
        ]
    );
    // Without the param, the binding's parameterNotFoundAction (Deny) decides.
    let out = celgate(&[
        "eval",
        "--policy",
        &policy,
        "--binding",
        &binding,
        "--object",
        &object,
        "-o",
        "json",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let message = json(&out)["denial"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"), "{message}");
}

#[test]
fn eval_decides_a_custom_kind_served_by_its_crd() {
    let (policy, binding, object, crd) = (
        fixture("eval/widget-policy.yaml"),
        fixture("eval/widget-binding.yaml"),
        fixture("eval/widget-12.yaml"),
        fixture("check/widget-crd.yaml"),
    );
    let args = [
        "eval",
        "--policy",
        &policy,
        "--binding",
        &binding,
        "--object",
        &object,
        "-o",
        "json",
    ];
    let with_crd = [&args[..], &["--crd", &crd]].concat();
    let out = celgate(&with_crd);
    assert_eq!(out.status.code(), Some(1), "denied exits 1");
    let report = json(&out);
    // The policy matches `widgets` only: the CRD gave the kind's resource, and its scope put
    // the object in the default namespace.
    assert_eq!(
        report["request"],
        "CREATE example.com/v1 Widget default/big"
    );
    assert_eq!(
        report["denial"]["message"],
        "ValidatingAdmissionPolicy 'widget-size' with binding 'widget-size-binding' denied request: a widget is at most 10 big"
    );

    // Without the CRD the kind is unknown, and the error says how to make it known.
    let out = celgate(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("Widget (example.com/v1) is neither a built-in kind of Kubernetes v1.")
            && err.contains("pass its CustomResourceDefinition with --crd FILE (crds in a test suite), or its resource with --resource <plural> (resource in a test case)"),
        "{err}"
    );
    // --resource stands in for the CRD; with no namespace on the object, it is cluster-scoped.
    let out = celgate(&[&args[..], &["--resource", "widgets"]].concat());
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json(&out)["request"], "CREATE example.com/v1 Widget big");
    // --crd takes CRDs only.
    let out = celgate(&[&args[..], &["--crd", &object]].concat());
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--crd takes CustomResourceDefinitions (apiextensions.k8s.io/v1), not example.com/v1 Widget"),
        "{err}"
    );
}

#[test]
fn eval_input_errors_exit_2_and_say_what_to_change() {
    let out = eval("eval/missing.yaml", &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("celgate: cannot read "), "{err}");

    // A mutating policy takes mutating bindings.
    let (policy, binding, object) = (
        fixture("eval/mutating-policy.yaml"),
        fixture("eval/binding.yaml"),
        fixture("eval/deployment-2.yaml"),
    );
    let out = celgate(&[
        "eval",
        "--policy",
        &policy,
        "--binding",
        &binding,
        "--object",
        &object,
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding is not a MutatingAdmissionPolicyBinding"
        ),
        "{err}"
    );

    let out = celgate(&["eval", "--policy", &policy]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

/// `celgate eval` of a mutating policy on an object.
fn eval_mutating(policy: &str, binding: &str, object: &str, extra: &[&str]) -> Output {
    let (policy, binding, object) = (fixture(policy), fixture(binding), fixture(object));
    let mut args = vec![
        "eval",
        "--policy",
        &policy,
        "--binding",
        &binding,
        "--object",
        &object,
    ];
    args.extend_from_slice(extra);
    celgate(&args)
}

#[test]
fn eval_of_a_mutating_policy_shows_the_patch_and_the_mutated_object() {
    let (policy, binding) = ("eval/mutating-policy.yaml", "eval/mutating-binding.yaml");
    let out = eval_mutating(policy, binding, "eval/configmap.yaml", &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "allowed");
    let report = json(&out);
    assert_eq!(report["allowed"], true);
    assert_eq!(report["request"], "CREATE v1 ConfigMap team-a/settings");
    assert_eq!(
        report["patch"],
        serde_json::json!([{"op": "add", "path": "/metadata/labels", "value": {"seen": "yes"}}])
    );
    assert_eq!(report["object"]["metadata"]["labels"]["seen"], "yes");
    assert_eq!(
        report["object"]["data"]["color"], "blue",
        "the rest is kept"
    );
    assert_eq!(
        report["invocations"],
        serde_json::json!([{"policy": "add-label", "binding": "add-label-binding",
            "mutations": ["no_error"], "changed": true}])
    );

    let out = eval_mutating(policy, binding, "eval/configmap.yaml", &[]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    for part in [
        "ALLOWED\n",
        "patch:\n  {\"op\":\"add\",\"path\":\"/metadata/labels\",\"value\":{\"seen\":\"yes\"}}\n",
        "  metadata:\n    labels:\n      seen: \"yes\"\n    name: settings\n",
        "policy add-label, binding add-label-binding: changed the object\n    mutations[0] → no_error\n",
    ] {
        assert!(text.contains(part), "{part:?} not in:\n{text}");
    }

    // A request the policy does not match is allowed unchanged.
    let out = eval_mutating(policy, binding, "eval/pod.yaml", &["-o", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let report = json(&out);
    assert_eq!(report["patch"], serde_json::json!([]));
    assert_eq!(report["invocations"], serde_json::json!([]));
    assert_eq!(report["object"]["metadata"]["name"], "web");
}

#[test]
fn eval_denies_an_apply_configuration_on_an_atomic_list_unless_opted_in() {
    let binding = "eval/args-binding.yaml";
    let out = eval_mutating(
        "eval/args-policy.yaml",
        binding,
        "eval/pod.yaml",
        &["-o", "json"],
    );
    assert_eq!(out.status.code(), Some(1), "denied");
    let report = json(&out);
    assert_eq!(report["allowed"], false);
    assert_eq!(report["denial"]["code"], 403);
    assert_eq!(report["denial"]["reason"], "Invalid");
    assert_eq!(
        report["denial"]["message"],
        "policy 'verbose-args' with binding 'verbose-args-binding' denied request: error applying patch: \
         invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.containers[0].args"
    );
    assert_eq!(report["patch"], serde_json::json!([]));
    assert_eq!(
        report["invocations"][0]["mutations"],
        serde_json::json!(["invalid_error"])
    );

    let out = eval_mutating(
        "eval/args-policy-server-side.yaml",
        binding,
        "eval/pod.yaml",
        &["-o", "json"],
    );
    assert_eq!(out.status.code(), Some(0), "allowed with server-side apply");
    let report = json(&out);
    assert_eq!(
        report["patch"],
        serde_json::json!([{"op": "add", "path": "/spec/containers/0/args", "value": ["--verbose"]}])
    );
    assert_eq!(
        report["object"]["spec"]["containers"],
        serde_json::json!([{"name": "web", "image": "nginx:1.27", "args": ["--verbose"]}])
    );
}

fn check(args: &[&str]) -> (Option<i32>, Value) {
    let mut all = vec!["check"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    let out = celgate(&all);
    (out.status.code(), json(&out))
}

#[test]
fn check_reports_a_misspelt_deployment_field_as_upstream_and_a_missing_policy() {
    let (code, report) = check(&[&fixture("check/deployment-typo.yaml")]);
    assert_eq!(code, Some(1), "findings exit 1");
    let policy = &report["objects"][0];
    assert_eq!(policy["kind"], "ValidatingAdmissionPolicy");
    assert_eq!(
        policy["expressionWarnings"],
        serde_json::json!([{
            "fieldRef": "spec.validations[0].expression",
            "message": "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas <= 5\n | ......^\n"
        }])
    );
    // The variable is checked beyond upstream, in its own list.
    assert_eq!(
        policy["additionalWarnings"][0]["fieldRef"],
        "spec.variables[0].expression"
    );
    assert_eq!(
        policy["checked"],
        serde_json::json!(["apps/v1, Kind=Deployment"])
    );
    let binding = &report["objects"][1];
    assert_eq!(binding["errors"][0]["fieldRef"], "spec.policyName");
    assert_eq!(report["findings"], 3);
}

#[test]
fn check_passes_a_clean_policy_and_binding() {
    let (code, report) = check(&[&fixture("check/clean.yaml")]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["findings"], 0);
    assert_eq!(report["objects"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        report["objects"][0]["checked"],
        serde_json::json!(["apps/v1, Kind=Deployment"])
    );

    let out = celgate(&["check", &fixture("check/clean.yaml")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.ends_with("2 object(s) checked against Kubernetes v1.36.3 schemas: 0 finding(s)\n"),
        "{text}"
    );
}

#[test]
fn check_types_a_policy_on_a_custom_kind_from_its_crd() {
    let (policy, crd) = (
        fixture("check/widget-policy.yaml"),
        fixture("check/widget-crd.yaml"),
    );
    let (code, report) = check(&[&policy, "--crd", &crd]);
    assert_eq!(code, Some(1));
    let warnings = &report["objects"][0]["expressionWarnings"];
    assert_eq!(warnings.as_array().map(Vec::len), Some(1), "{warnings}");
    assert_eq!(warnings[0]["fieldRef"], "spec.validations[1].expression");
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with(
                "example.com/v1, Kind=Widget: ERROR: <input>:1:12: undefined field 'colour'"
            ),
        "{warnings}"
    );
    // Without the CRD the kind is unknown: nothing is checked, and the report says so.
    let (code, report) = check(&[&policy]);
    assert_eq!(code, Some(0));
    assert_eq!(report["objects"][0]["checked"], Value::Null);
    assert!(
        report["objects"][0]["skipped"]
            .as_array()
            .is_some_and(|s| !s.is_empty()),
        "{report}"
    );
}

#[test]
fn check_rejects_what_kube_apiserver_rejects() {
    let dir = std::env::temp_dir().join(format!("celgate-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("invalid.yaml");
    std::fs::write(
        &file,
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n\
         metadata: {name: p}\nspec:\n  failurePolicy: Fail\n  validations:\n  - expression: '1 +'\n    mesage: typo\n",
    )
    .expect("written");
    let enum_file = dir.join("enum.yaml");
    std::fs::write(
        &enum_file,
        "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\n\
         metadata: {name: q}\nspec:\n  failurePolicy: Sometimes\n",
    )
    .expect("written");
    let (code, report) = check(&[&file.display().to_string()]);
    let (enum_code, enum_report) = check(&[&enum_file.display().to_string()]);
    std::fs::remove_dir_all(&dir).expect("removed");
    assert_eq!(enum_code, Some(1));
    let message = enum_report["objects"][0]["errors"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("Sometimes"), "{enum_report}");
    assert_eq!(code, Some(1));
    let fields: Vec<&str> = report["objects"][0]["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["fieldRef"].as_str())
        .collect();
    assert!(fields.contains(&"spec.validations[0].mesage"), "{fields:?}");
    assert!(
        fields.contains(&"spec.validations[0].expression"),
        "{fields:?}"
    );
}

#[test]
fn check_types_a_mutating_policys_apply_configuration_beyond_upstream() {
    let (code, report) = check(&[&fixture("check/mutating-typo.yaml")]);
    assert_eq!(code, Some(1));
    let object = &report["objects"][0];
    assert_eq!(object["kind"], "MutatingAdmissionPolicy");
    assert_eq!(
        object["expressionWarnings"],
        serde_json::json!([]),
        "upstream checks no MAP"
    );
    assert_eq!(
        object["additionalWarnings"][0]["fieldRef"],
        "spec.mutations[0].applyConfiguration.expression"
    );
    assert!(
        object["additionalWarnings"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("undefined field 'labelz'"),
        "{object}"
    );
}

/// A path of the repository's `config/samples/tests/`.
fn sample_tests(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../config/samples/tests")
        .join(path)
        .display()
        .to_string()
}

/// The (case name, passed, unmet expectations) of every case of a `celgate test -o json` report.
fn test_cases(report: &Value) -> Vec<(String, bool, Vec<String>)> {
    report["suites"]
        .as_array()
        .expect("suites")
        .iter()
        .flat_map(|s| s["cases"].as_array().expect("cases"))
        .map(|c| {
            let unmet = c["failures"]
                .as_array()
                .expect("failures")
                .iter()
                .map(|f| f["expectation"].as_str().expect("expectation").to_string())
                .collect();
            (
                c["name"].as_str().expect("name").to_string(),
                c["passed"].as_bool().expect("passed"),
                unmet,
            )
        })
        .collect()
}

#[test]
fn test_passes_on_the_shipped_example_suites() {
    let out = celgate(&["test", &sample_tests(""), "-o", "json"]);
    let report = json(&out);
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    let suites: Vec<&str> = report["suites"]
        .as_array()
        .expect("suites")
        .iter()
        .map(|s| s["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        suites,
        vec![
            "default-labels",
            "no-exec-in-prod",
            "pod-non-root",
            "replica-exception",
            "replica-limit"
        ]
    );
    let cases = test_cases(&report);
    assert_eq!(cases.len(), 23, "{cases:?}");
    assert!(cases.iter().all(|(_, passed, _)| *passed), "{cases:?}");
    assert_eq!(
        (report["passed"].as_u64(), report["failed"].as_u64()),
        (Some(23), Some(0))
    );

    let out = celgate(&["test", &sample_tests("replica-limit/celgate-test.yaml")]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        text.lines()
            .any(|l| l == "  ok    ten replicas are denied in prod"),
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("6 passed, 0 failed"), "{text}");
}

#[test]
fn test_fails_on_a_failing_suite_and_names_the_expectation_not_met() {
    let suite = fixture("test/failing");
    let out = celgate(&["test", &suite, "-o", "json"]);
    assert_eq!(out.status.code(), Some(1), "a failed case exits 1");
    let report = json(&out);
    let s = |name: &str, passed, unmet: &[&str]| {
        (
            name.to_string(),
            passed,
            unmet.iter().map(|u| u.to_string()).collect::<Vec<_>>(),
        )
    };
    assert_eq!(
        test_cases(&report),
        vec![
            s("two replicas are allowed", true, &[]),
            s(
                "ten replicas are expected to be allowed",
                false,
                &["allowed"]
            ),
            s(
                "ten replicas are denied with another message",
                false,
                &["message"]
            ),
        ]
    );
    let denial = "ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: failed expression: variables.replicas <= 5";
    let failure = &report["suites"][0]["cases"][2]["failures"][0];
    assert_eq!(failure["expected"], "at most 5 replicas");
    assert_eq!(failure["got"], denial);

    let out = celgate(&["test", &suite]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let expected = format!(
        "  ok    two replicas are allowed\n\
         \x20 FAIL  ten replicas are expected to be allowed  (CREATE apps/v1 Deployment default/web)\n\
         \x20       allowed\n\
         \x20         expected: \"allowed\"\n\
         \x20         got:      \"denied: {denial}\"\n"
    );
    assert!(text.contains(&expected), "no\n{expected}\nin\n{text}");
    assert!(
        text.contains(&format!(
            "        message\n          expected: \"at most 5 replicas\"\n          got:      \"{denial}\"\n"
        )),
        "{text}"
    );
    assert_eq!(text.lines().last(), Some("1 passed, 2 failed"), "{text}");
}

#[test]
fn test_writes_junit_xml_with_a_failure_per_failed_case() {
    let out = celgate(&["test", &fixture("test/failing"), "--format", "junit"]);
    assert_eq!(out.status.code(), Some(1));
    let xml = String::from_utf8(out.stdout).expect("utf-8");
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(
        xml.contains(r#"<testsuite name="replica-limit-failing" tests="3" skipped="0" errors="0" failures="2">"#),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), 3, "{xml}");
    assert_eq!(xml.matches("<failure ").count(), 2, "{xml}");
    assert!(
        xml.contains(r#"message="expectations not met: allowed""#),
        "{xml}"
    );
    assert!(
        xml.contains(r#"message="expectations not met: message""#),
        "{xml}"
    );
}

#[test]
fn test_input_errors_exit_2_and_say_what_to_change() {
    let out = celgate(&["test", &fixture("test/invalid")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert!(stderr.contains("typo.test.yaml"), "{stderr}");
    assert!(stderr.contains("allowd"), "{stderr}");

    let suite = fixture("test/invalid-case");
    let out = celgate(&["test", &suite]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert_eq!(
        stderr,
        format!(
            "celgate: {suite}/celgate-test.yaml, case \"an update without its old object\": UPDATE needs the object as it was before the update: --old-object (oldObject in a test case)\n"
        )
    );

    let out = celgate(&["test", &fixture("eval")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).expect("utf-8");
    assert!(
        stderr.ends_with("holds no suite file: name one celgate-test.yaml or <name>.test.yaml\n"),
        "{stderr}"
    );
}

#[test]
fn scan_lists_the_objects_each_binding_would_deny_warn_or_audit() {
    let (manifests, policy, params) = (
        fixture("scan/manifests"),
        sample_tests("replica-limit/policy.yaml"),
        sample_tests("replica-limit/params.yaml"),
    );
    let args = [
        "scan",
        &manifests,
        "--policies",
        &policy,
        "--params",
        &params,
    ];
    let out = celgate(&[&args[..], &["-o", "json"]].concat());
    assert_eq!(out.status.code(), Some(1), "violations exit 1");
    let report = json(&out);
    let found: Vec<(String, String, String)> = report["violations"]
        .as_array()
        .expect("violations")
        .iter()
        .map(|v| {
            (
                v["binding"].as_str().expect("binding").to_string(),
                format!(
                    "{}/{}",
                    v["object"]["namespace"].as_str().expect("ns"),
                    v["object"]["name"].as_str().expect("name")
                ),
                v["message"].as_str().expect("message").to_string(),
            )
        })
        .collect();
    let v = |b: &str, o: &str, m: &str| (b.to_string(), o.to_string(), m.to_string());
    assert_eq!(
        found,
        vec![
            v(
                "replica-limit-prod",
                "prod/web",
                "at most 3 replicas, got 10"
            ),
            v(
                "replica-limit-staging",
                "staging/web",
                "at most 3 replicas, got 10"
            ),
            v("replica-limit-dev", "dev/web", "at most 3 replicas, got 10"),
        ]
    );
    assert_eq!(report["scanned"], 9);
    assert_eq!(report["bindings"], 3);
    assert_eq!(report["skipped"].as_array().expect("skipped").len(), 1);
    assert!(
        report["skipped"][0]["reason"]
            .as_str()
            .expect("reason")
            .starts_with("Widget (example.com/v1) is neither a built-in kind of Kubernetes v1.36"),
        "{report:#}"
    );

    let out = celgate(&args);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(
        text.contains("apps/v1 Deployment prod/web (") && text.contains("): policy replica-limit, binding replica-limit-prod [Deny]\n  at most 3 replicas, got 10\n"),
        "{text}"
    );
    assert_eq!(
        text.lines().last(),
        Some("9 object(s) scanned with 3 binding(s): 3 violation(s), 0 excepted"),
        "{text}"
    );

    // With only the manifests no binding selects, nothing is violated.
    let clean = fixture("eval/deployment-2.yaml");
    let out = celgate(&["scan", &clean, "--policies", &policy, "--params", &params]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn scan_and_eval_honour_policy_exceptions_scan_reporting_the_excepted_apart() {
    let (manifests, policy, params, exception) = (
        fixture("scan/manifests"),
        sample_tests("replica-limit/policy.yaml"),
        sample_tests("replica-limit/params.yaml"),
        fixture("scan/exception.yaml"),
    );
    let out = celgate(&[
        "scan",
        &manifests,
        "--policies",
        &policy,
        &exception,
        "--params",
        &params,
        "-o",
        "json",
    ]);
    let report = json(&out);
    let bindings: Vec<&str> = (report["violations"].as_array().expect("violations").iter())
        .map(|v| v["binding"].as_str().expect("binding"))
        .collect();
    assert_eq!(bindings, ["replica-limit-staging", "replica-limit-dev"]);
    let excepted = &report["excepted"];
    assert_eq!(excepted.as_array().map(Vec::len), Some(1), "{report:#}");
    assert_eq!(excepted[0]["binding"], "replica-limit-prod");
    assert_eq!(excepted[0]["object"]["namespace"], "prod");
    assert_eq!(excepted[0]["exception"], "team-web/web");

    // eval decides at --at: the exception applies up to its expiresAt second.
    let eval = |at: &str| {
        celgate(&[
            "eval",
            "--policy",
            &fixture("eval/policy.yaml"),
            "--binding",
            &fixture("eval/binding.yaml"),
            "--object",
            &fixture("eval/deployment-10.yaml"),
            "--exceptions",
            &fixture("eval/exception.yaml"),
            "--at",
            at,
            "-o",
            "json",
        ])
    };
    let before = eval("2027-01-30T23:59:59Z");
    let report = json(&before);
    assert_eq!(before.status.code(), Some(0), "{report:#}");
    assert_eq!(report["excepted"][0]["exception"], "team-web/web");
    let at = eval("2027-01-31T00:00:00Z");
    let report = json(&at);
    assert_eq!(at.status.code(), Some(1), "{report:#}");
    assert_eq!(report["excepted"], serde_json::json!([]));
}

/// `celgate --version` names the version and the git revision it was built from: build.rs's
/// CELGATE_REVISION override, else this checkout's HEAD, else `unknown`.
#[test]
fn version_prints_the_crate_version_and_the_git_revision() {
    let out = celgate(&["--version"]);
    assert!(out.status.success(), "{out:?}");
    let revision = std::env::var("CELGATE_REVISION")
        .ok()
        .filter(|r| !r.is_empty())
        .or_else(|| {
            let git = Command::new("git")
                .args(["rev-parse", "--short", "HEAD"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()
                .filter(|o| o.status.success())?;
            Some(String::from_utf8_lossy(&git.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".to_string());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("celgate {} (rev {revision})\n", env!("CARGO_PKG_VERSION"))
    );
}

/// A scratch folder removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("celgate-cli-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Scratch(dir)
    }

    /// Copies `source` here as `name`, with every policy's and binding's `apiVersion`
    /// (in-tree v1 or celgate's) made `admissionregistration.k8s.io/<version>`; its path.
    fn in_tree(&self, source: &str, name: &str, version: &str) -> String {
        let text = std::fs::read_to_string(source).expect("fixture");
        let to = format!("apiVersion: admissionregistration.k8s.io/{version}\n");
        let text = text
            .replace("apiVersion: admissionregistration.k8s.io/v1\n", &to)
            .replace("apiVersion: admission.celgate.io/v1\n", &to);
        assert!(text.contains(&to), "{source} has no policy to rewrite");
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("written");
        path.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The report without the names of the files it was read from.
fn without_files(mut report: Value) -> Value {
    if let Some(objects) = report["objects"].as_array_mut() {
        objects.iter_mut().for_each(|o| o["file"] = Value::Null);
    }
    report
}

#[test]
fn check_eval_test_and_scan_read_beta_and_alpha_objects_as_they_read_v1() {
    let scratch = Scratch::new("versions");
    for version in ["v1beta1", "v1alpha1"] {
        // check: the same findings.
        let typo = fixture("check/deployment-typo.yaml");
        let older = scratch.in_tree(&typo, &format!("typo-{version}.yaml"), version);
        let (code, report) = check(&[&older]);
        let (v1_code, v1_report) = check(&[&typo]);
        assert_eq!((code, v1_code), (Some(1), Some(1)));
        assert_eq!(without_files(report), without_files(v1_report), "{version}");

        // eval: the same decision and trace, validating and mutating.
        for (policy, binding, object) in [
            (
                "eval/policy.yaml",
                "eval/binding.yaml",
                "eval/deployment-10.yaml",
            ),
            (
                "eval/mutating-policy.yaml",
                "eval/mutating-binding.yaml",
                "eval/configmap.yaml",
            ),
        ] {
            let decide = |policy: &str, binding: &str| {
                let out = celgate(&[
                    "eval",
                    "--policy",
                    policy,
                    "--binding",
                    binding,
                    "--object",
                    &fixture(object),
                    "-o",
                    "json",
                ]);
                (out.status.code(), json(&out))
            };
            let older = decide(
                &scratch.in_tree(&fixture(policy), &format!("p-{version}.yaml"), version),
                &scratch.in_tree(&fixture(binding), &format!("b-{version}.yaml"), version),
            );
            assert_eq!(
                older,
                decide(&fixture(policy), &fixture(binding)),
                "{policy} as {version}"
            );
        }

        // test: a suite whose policy file is of the older version passes as it does.
        let suite = scratch.0.join(format!("suite-{version}"));
        std::fs::create_dir_all(&suite).expect("suite dir");
        let samples = sample_tests("default-labels/");
        std::fs::copy(
            format!("{samples}celgate-test.yaml"),
            suite.join("celgate-test.yaml"),
        )
        .expect("suite copied");
        scratch.in_tree(
            &format!("{samples}policy.yaml"),
            &format!("suite-{version}/policy.yaml"),
            version,
        );
        let out = celgate(&["test", &suite.display().to_string(), "-o", "json"]);
        let report = json(&out);
        assert_eq!(out.status.code(), Some(0), "{report:#}");
        assert_eq!(
            (report["passed"].as_u64(), report["failed"].as_u64()),
            (Some(3), Some(0))
        );

        // scan: the same violations.
        let scan = |policies: &str| {
            let out = celgate(&[
                "scan",
                &fixture("scan/manifests"),
                "--policies",
                policies,
                "--params",
                &sample_tests("replica-limit/params.yaml"),
                "-o",
                "json",
            ]);
            (out.status.code(), json(&out))
        };
        let policies = sample_tests("replica-limit/policy.yaml");
        let older = scan(&scratch.in_tree(&policies, &format!("scan-{version}.yaml"), version));
        assert_eq!(older.0, Some(1));
        assert_eq!(older, scan(&policies), "{version}");
    }
}

#[test]
fn a_celgate_version_that_does_not_exist_is_an_error_that_says_what_to_do() {
    let scratch = Scratch::new("sed");
    // What the README's former `sed` made of a v1beta1 MutatingAdmissionPolicy.
    let path = scratch.0.join("sed.yaml");
    std::fs::write(
        &path,
        "apiVersion: admission.celgate.io/v1beta1\nkind: MutatingAdmissionPolicy\nmetadata: {name: m}\n",
    )
    .expect("written");
    let path = path.display().to_string();
    for args in [vec!["check", &path], vec!["convert", &path]] {
        let out = celgate(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "celgate: {path}, document 1: admission.celgate.io/v1beta1 MutatingAdmissionPolicy does not exist: \
                 celgate's kinds are admission.celgate.io/v1 only (`celgate convert` writes them from any served \
                 version of admissionregistration.k8s.io)\n"
            ),
            "{args:?}"
        );
    }
}

#[test]
fn convert_reads_standard_input_and_writes_celgate_yaml() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_celgate"))
        .arg("convert")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the celgate binary runs");
    let input = std::fs::read_to_string(fixture("convert/v1alpha1.yaml")).expect("fixture");
    std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), input.as_bytes())
        .expect("written");
    let out = child.wait_with_output().expect("finishes");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // As docs/offline.md shows it.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        r#"---
apiVersion: admission.celgate.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: team-labels
spec:
  matchResources:
    matchPolicy: Equivalent
    namespaceSelector: {}
    objectSelector: {}
    resourceRules:
    - apiGroups:
      - ""
      apiVersions:
      - v1
      operations:
      - CREATE
      resources:
      - configmaps
      scope: "*"
  paramRef:
    name: teams
    namespace: platform
    parameterNotFoundAction: Deny
  policyName: team-labels
"#
    );
}
