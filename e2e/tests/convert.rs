//! `celgate convert` against kube-apiserver's own conversion, on the minor the suite runs
//! (`CELGATE_K8S_MINOR`, `make e2e-versions`): the policies and bindings of
//! `e2e/testdata/convert/in-tree.yaml` and `in-tree-older.yaml` whose version that minor serves
//! (every version it has turned on: [`version::in_tree_policy_flags`]) are created and read back
//! as the newest version the minor serves of their kind (v1; MutatingAdmissionPolicy's v1beta1
//! in 1.34–1.35, v1alpha1 in 1.32–1.33); `celgate convert`'s output for the same documents must
//! be those objects, in celgate's group, and celgate's CRDs must take it as it is. Where a
//! v1beta1 MutatingAdmissionPolicy is served (1.34 on), celgate enforces the converted one once
//! the in-tree objects are gone.

use std::process::Command;
use std::time::Duration;

use celgate_e2e::differential::{json_differences, parse_docs, strip_server_managed};
use celgate_e2e::{Celgate, Cluster, version, wait_for, workspace};
use serde_json::Value;

/// The in-tree API group and its versions, newest first.
const GROUP: &str = "admissionregistration.k8s.io";
const VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];

/// The (version, policy kind) pairs of the in-tree group the cluster serves, sorted.
fn served_policy_versions(cluster: &Cluster) -> Vec<(&'static str, String)> {
    let mut served = Vec::new();
    for version in VERSIONS {
        let out = cluster.kubectl(&["get", "--raw", &format!("/apis/{GROUP}/{version}")], "");
        if !out.status.success() {
            continue;
        }
        let list: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{GROUP}/{version}: discovery printed no JSON: {e}"));
        for resource in list["resources"].as_array().into_iter().flatten() {
            let kind = resource["kind"].as_str().unwrap_or_default();
            let subresource = resource["name"].as_str().unwrap_or_default().contains('/');
            if kind.ends_with("AdmissionPolicy") && !subresource {
                served.push((version, kind.to_string()));
            }
        }
    }
    served.sort_unstable();
    served
}

/// The policy kind a kind belongs to (a binding's policy).
fn policy_kind(kind: &str) -> &str {
    kind.strip_suffix("Binding").unwrap_or(kind)
}

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

/// The object kube-apiserver serves as `version`, as celgate's: without what the server sets
/// and the status, in celgate's group.
fn served_as(cluster: &Cluster, version: &str, kind: &str, name: &str) -> Value {
    let served = cluster.kubectl_ok(&[
        "get",
        &format!("{}.{version}.{GROUP}", resource(kind)),
        name,
        "-o",
        "json",
    ]);
    let mut object = strip_server_managed(
        serde_json::from_str(&served).unwrap_or_else(|e| panic!("kubectl printed no JSON: {e}")),
    );
    assert_eq!(object["apiVersion"], format!("{GROUP}/{version}"));
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
async fn convert_writes_what_kube_apiserver_serves_and_celgate_enforces_it() {
    let minor = version::minor();
    let cluster = Cluster::start_with(&version::in_tree_policy_flags(minor));
    let served = served_policy_versions(&cluster);
    let expected: Vec<_> = version::in_tree_policy_versions(minor)
        .into_iter()
        .map(|(v, kind)| (v, kind.to_string()))
        .collect();
    assert_eq!(
        served, expected,
        "the in-tree policy versions 1.{minor} serves"
    );

    // The documents of a version this minor serves, as one file.
    let mut documents = Vec::new();
    for file in ["in-tree.yaml", "in-tree-older.yaml"] {
        let path = workspace().join("e2e/testdata/convert").join(file);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        documents.extend(parse_docs(&text).into_iter().filter(|doc| {
            let version = doc["apiVersion"].as_str().unwrap_or_default();
            let kind = policy_kind(doc["kind"].as_str().unwrap_or_default());
            served
                .iter()
                .any(|(v, k)| version == format!("{GROUP}/{v}") && k == kind)
        }));
    }
    let input = cluster.dir().join("in-tree.yaml");
    // A YAML stream of JSON documents (the comment keeps kubectl from reading it as one JSON).
    let text = documents
        .iter()
        .map(|doc| format!("# {GROUP} as 1.{minor} serves it\n{doc}\n"))
        .collect::<Vec<_>>()
        .join("---\n");
    std::fs::write(&input, &text).unwrap_or_else(|e| panic!("{}: {e}", input.display()));
    let input = input.to_string_lossy();
    cluster.kubectl_ok(&["create", "-f", &input]);

    let converted: Value = serde_json::from_str(&convert(&[&input, "-o", "json"]))
        .unwrap_or_else(|e| panic!("celgate convert -o json printed no JSON: {e}"));
    let items = converted["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        items.len(),
        documents.len(),
        "one object per input document: {converted}"
    );
    assert!(
        items.len() >= 4,
        "1.{minor} serves too few versions to compare: {served:?}"
    );
    let mut differences = Vec::new();
    for item in &items {
        let kind = item["kind"].as_str().unwrap_or_default();
        let name = item["metadata"]["name"].as_str().unwrap_or_default();
        let newest = VERSIONS
            .into_iter()
            .find(|v| {
                served
                    .iter()
                    .any(|(sv, k)| sv == v && k == policy_kind(kind))
            })
            .unwrap_or("v1");
        let served = served_as(&cluster, newest, kind, name);
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
        "celgate convert differs from what kube-apiserver serves (served, then converted):\n{}",
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
    if !served.contains(&("v1beta1", "MutatingAdmissionPolicy".to_string())) {
        return;
    }
    cluster.apply(
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: converted, labels: {mutate: \"true\"}}\n",
    );
    cluster.kubectl_ok(&["delete", "-f", &input]);
    wait_stamped(&cluster, "in-tree-gone", "").await;
    let _celgate = Celgate::start(&cluster).await;
    wait_stamped(&cluster, "celgate", "true").await;
}
