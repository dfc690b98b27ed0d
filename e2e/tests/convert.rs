//! `celgate convert` against kube-apiserver's own conversion: the policies and bindings of
//! `e2e/testdata/convert/in-tree.yaml` (MutatingAdmissionPolicies and bindings of v1beta1 and
//! v1alpha1, ValidatingAdmissionPolicy's of v1: 1.36 no longer serves its older versions) are
//! created on a control plane that serves those versions and read back as v1; `celgate convert`'s output for the same file
//! must be those objects, in celgate's group, and celgate's CRDs must take it as it is. With the
//! in-tree objects gone, celgate enforces the converted v1beta1 MutatingAdmissionPolicy.

use std::process::Command;
use std::time::Duration;

use celgate_e2e::differential::{json_differences, strip_server_managed};
use celgate_e2e::{Celgate, Cluster, wait_for, workspace};
use serde_json::Value;

/// The in-tree versions that 1.36 serves only when asked to (MutatingAdmissionPolicy's).
const RUNTIME_CONFIG: &str = "--runtime-config=admissionregistration.k8s.io/v1beta1=true,admissionregistration.k8s.io/v1alpha1=true";

fn resource(kind: &str) -> &'static str {
    match kind {
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
        "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
        other => panic!("celgate convert wrote a {other}"),
    }
}

/// `celgate convert` with `args`: its stdout, asserting success.
fn convert(args: &[&str]) -> String {
    let out = Command::new(Celgate::binary())
        .arg("convert")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run celgate (cargo build -p celgate first): {e}"));
    assert!(
        out.status.success(),
        "celgate convert failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The object kube-apiserver serves as v1, as celgate's: without what the server sets and
/// the status, in celgate's group.
fn served_as_v1(cluster: &Cluster, kind: &str, name: &str) -> Value {
    let served = cluster.kubectl_ok(&[
        "get",
        &format!("{}.v1.admissionregistration.k8s.io", resource(kind)),
        name,
        "-o",
        "json",
    ]);
    let mut object = strip_server_managed(
        serde_json::from_str(&served).unwrap_or_else(|e| panic!("kubectl printed no JSON: {e}")),
    );
    assert_eq!(object["apiVersion"], "admissionregistration.k8s.io/v1");
    if let Some(o) = object.as_object_mut() {
        o.remove("status");
        o.insert("apiVersion".into(), "admission.celgate.io/v1".into());
    }
    object
}

/// Creates ConfigMaps `<prefix>-<n>` in namespace `converted` until one's label `stamped` is
/// `want` (`""`: absent).
async fn wait_stamped(cluster: &Cluster, prefix: &str, want: &str) {
    let mut n = 0;
    wait_for(
        &format!("a ConfigMap created in namespace converted with stamped={want:?}"),
        Duration::from_secs(30),
        || {
            n += 1;
            let stamped = cluster.kubectl_ok(&[
                "create",
                "configmap",
                &format!("{prefix}-{n}"),
                "-n",
                "converted",
                "-o",
                "jsonpath={.metadata.labels.stamped}",
            ]);
            async move { (stamped == want).then_some(()) }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn convert_writes_what_kube_apiserver_serves_as_v1_and_celgate_enforces_it() {
    let cluster = Cluster::start_with(&[RUNTIME_CONFIG.to_string()]);
    let input = workspace().join("e2e/testdata/convert/in-tree.yaml");
    let input = input.to_string_lossy();
    cluster.kubectl_ok(&["create", "-f", &input]);

    let converted: Value = serde_json::from_str(&convert(&[&input, "-o", "json"]))
        .unwrap_or_else(|e| panic!("celgate convert -o json printed no JSON: {e}"));
    let items = converted["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 7, "one object per input document: {converted}");
    let mut differences = Vec::new();
    for item in &items {
        let kind = item["kind"].as_str().unwrap_or_default();
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let served = served_as_v1(&cluster, kind, name);
        if served != *item {
            // json_differences reads an absent member as null: the objects say the rest.
            let mut paths = Vec::new();
            json_differences(&format!("{kind} {name}"), &served, item, &mut paths);
            differences.push(format!(
                "{kind} {name}: {}\n  served:  {served}\n  convert: {item}",
                paths.join("; ")
            ));
        }
    }
    assert!(
        differences.is_empty(),
        "celgate convert differs from kube-apiserver's v1 (served, then converted):\n{}",
        differences.join("\n")
    );

    // The YAML output, read from standard input, is what celgate's CRDs store.
    cluster.install_crds();
    let yaml = {
        let mut child = Command::new(Celgate::binary())
            .args(["convert", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run celgate: {e}"));
        let text = std::fs::read_to_string(&*input).unwrap_or_else(|e| panic!("{input}: {e}"));
        if let Some(mut stdin) = child.stdin.take() {
            std::io::Write::write_all(&mut stdin, text.as_bytes())
                .unwrap_or_else(|e| panic!("cannot write celgate's stdin: {e}"));
        }
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("celgate did not finish: {e}"));
        assert!(out.status.success(), "celgate convert - failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let created = cluster.kubectl(&["create", "-f", "-", "-o", "json"], &yaml);
    assert!(
        created.status.success(),
        "celgate's CRDs refuse convert's output: {}\n{yaml}",
        String::from_utf8_lossy(&created.stderr)
    );
    for item in &items {
        let kind = item["kind"].as_str().unwrap_or_default();
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let stored = cluster.kubectl_ok(&[
            "get",
            &format!("{}.admission.celgate.io", resource(kind)),
            name,
            "-o",
            "jsonpath={.spec}",
        ]);
        let stored: Value =
            serde_json::from_str(&stored).unwrap_or_else(|e| panic!("{kind} {name}: no spec: {e}"));
        assert_eq!(
            stored, item["spec"],
            "{kind} {name} as celgate's CRD stores it"
        );
    }

    // celgate enforces the converted v1beta1 MutatingAdmissionPolicy map-beta: ConfigMaps of a
    // namespace labelled mutate=true are stamped, once the in-tree plugin no longer stamps them
    // (its objects deleted).
    cluster.apply(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: converted, labels: {mutate: \"true\"}}\n",
    );
    cluster.kubectl_ok(&["delete", "-f", &input]);
    wait_stamped(&cluster, "in-tree-gone", "").await;
    let _celgate = Celgate::start(&cluster).await;
    wait_stamped(&cluster, "celgate", "true").await;
}
