//! Every example policy of the Kubernetes docs applies as a celgate object with only its
//! `apiVersion` changed, and reads back exactly as the in-tree API server stores it (the same
//! spec with the same defaults).

use celgate_e2e::{Cluster, workspace};
use serde::Deserialize;

#[derive(Deserialize)]
struct Meta {
    name: String,
}

#[derive(Deserialize)]
struct Head {
    kind: String,
    metadata: Meta,
}

fn resource(kind: &str) -> &'static str {
    match kind {
        "ValidatingAdmissionPolicy" => "validatingadmissionpolicies",
        "ValidatingAdmissionPolicyBinding" => "validatingadmissionpolicybindings",
        "MutatingAdmissionPolicy" => "mutatingadmissionpolicies",
        "MutatingAdmissionPolicyBinding" => "mutatingadmissionpolicybindings",
        other => panic!("unexpected kind {other} in the docs examples"),
    }
}

fn get_spec(cluster: &Cluster, resource: &str, group: &str, name: &str) -> serde_json::Value {
    let out = cluster.kubectl(
        &["get", &format!("{resource}.{group}"), name, "-o", "json"],
        "",
    );
    assert!(
        out.status.success(),
        "get {resource}.{group}/{name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let obj: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("kubectl printed no JSON: {e}"));
    obj["spec"].clone()
}

#[test]
fn docs_examples_read_back_like_the_in_tree_api() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let dir = workspace().join("e2e/testdata/docs");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 7,
        "the docs examples are missing from {}",
        dir.display()
    );
    let mut compared = 0;
    for file in files {
        let in_tree =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let celgate = in_tree.replace(
            "apiVersion: admissionregistration.k8s.io/v1",
            "apiVersion: admission.celgate.io/v1",
        );
        cluster.apply(&in_tree);
        cluster.apply(&celgate);
        let heads: Vec<Head> = serde_saphyr::from_multiple(&in_tree)
            .unwrap_or_else(|e| panic!("{} is not YAML: {e}", file.display()));
        for head in heads {
            let res = resource(&head.kind);
            let want = get_spec(
                &cluster,
                res,
                "admissionregistration.k8s.io",
                &head.metadata.name,
            );
            let have = get_spec(&cluster, res, "admission.celgate.io", &head.metadata.name);
            assert_eq!(
                have,
                want,
                "{} {} in {}: celgate's stored spec differs from the in-tree one",
                head.kind,
                head.metadata.name,
                file.display()
            );
            compared += 1;
        }
    }
    assert!(compared >= 11, "only {compared} objects compared");
}

#[test]
fn short_names_and_category_resolve_to_celgate() {
    let cluster = Cluster::start();
    cluster.install_crds();
    for short in ["cvap", "cvapb", "cmap", "cmapb", "celgate"] {
        let out = cluster.kubectl(&["get", short], "");
        assert!(
            out.status.success(),
            "kubectl get {short}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
