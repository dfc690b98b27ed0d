//! The committed snapshot of the built-in kinds' schemas (`kinds/schemas/builtin-<minor>.json`,
//! which `celgate check` types policies with offline) must be what `make schemas` generates from
//! a control plane of the pinned version. The snapshot is regenerated here against this test's
//! own control plane — with celgate's CRDs and another CRD installed, which the snapshot must
//! leave out — and compared with the committed file. On drift the fresh snapshot is written to
//! `target/schemas-drift/` and the differing parts are named; `make schemas` fixes it.

use std::collections::BTreeSet;
use std::time::Duration;

use celgate_e2e::schemas::{builtin_schemas_path, builtin_snapshot};
use celgate_e2e::{Cluster, wait_for, workspace};
use serde_json::Value;

const EXTRA_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.drift.example.com
spec:
  group: drift.example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, properties: {spec: {type: object}}}
"#;

/// The names of the parts of two snapshots that differ: top-level keys, and per OpenAPI document
/// path (`openapi/<path>`) and per discovery list (`discovery[<i>]`).
fn differing_parts(committed: &Value, fresh: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    for key in keys(committed).union(&keys(fresh)) {
        let (a, b) = (&committed[key], &fresh[key]);
        if a == b {
            continue;
        }
        match key.as_str() {
            "openapi" => {
                for path in keys(a).union(&keys(b)) {
                    if a[path] != b[path] {
                        out.push(format!("openapi/{path}"));
                    }
                }
            }
            "discovery" => {
                let (la, lb) = (
                    a.as_array().cloned().unwrap_or_default(),
                    b.as_array().cloned().unwrap_or_default(),
                );
                for i in 0..la.len().max(lb.len()) {
                    if la.get(i) != lb.get(i) {
                        out.push(format!("discovery[{i}]"));
                    }
                }
            }
            _ => out.push(key.clone()),
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_committed_builtin_schemas_are_what_make_schemas_generates() {
    let path = builtin_schemas_path().unwrap_or_else(|e| panic!("{e}"));
    let committed_text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run `make schemas` and commit it",
            path.display()
        )
    });
    let committed: Value = serde_json::from_str(&committed_text)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    for part in ["api/v1", "apis/apps/v1"] {
        assert!(
            committed["openapi"].get(part).is_some(),
            "the committed snapshot lacks {part}"
        );
    }

    let cluster = Cluster::start();
    cluster.install_crds();
    cluster.apply(EXTRA_CRD);
    cluster.wait_established(&["crd/gadgets.drift.example.com"]);
    // The CRD is served and published before the snapshot, so leaving it out is the snapshot's doing.
    wait_for(
        "the CRD in /openapi/v3",
        Duration::from_secs(60),
        || async {
            let out = cluster.kubectl(&["get", "--raw", "/openapi/v3"], "");
            (out.status.success()
                && String::from_utf8_lossy(&out.stdout).contains("apis/drift.example.com/v1"))
            .then_some(())
        },
    )
    .await;
    let fresh_text = builtin_snapshot(&cluster.client().await)
        .await
        .unwrap_or_else(|e| panic!("cannot take the snapshot: {e}"));
    for foreign in ["drift.example.com", "admission.celgate.io"] {
        assert!(
            !fresh_text.contains(foreign),
            "the snapshot names the CRD group {foreign} (in discovery or OpenAPI)"
        );
    }
    if fresh_text == committed_text {
        return;
    }
    let fresh: Value = serde_json::from_str(&fresh_text)
        .unwrap_or_else(|e| panic!("the fresh snapshot is not JSON: {e}"));
    let dir = workspace().join("target/schemas-drift");
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    let written = dir.join(path.file_name().unwrap_or_default());
    std::fs::write(&written, &fresh_text)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", written.display()));
    let parts = differing_parts(&committed, &fresh);
    panic!(
        "{} is out of date ({} parts differ: {}); the fresh snapshot is {}; run `make schemas`",
        path.display(),
        parts.len(),
        if parts.is_empty() {
            "only the formatting".to_string()
        } else {
            parts.join(", ")
        },
        written.display()
    );
}

#[test]
fn differing_parts_are_named() {
    let a: Value = serde_json::json!({"kubernetesVersion": "v1", "discovery": [1, 2],
        "openapi": {"api/v1": 1, "apis/apps/v1": 2}});
    let b: Value = serde_json::json!({"kubernetesVersion": "v1", "discovery": [1, 3],
        "openapi": {"api/v1": 1, "apis/apps/v1": 3, "apis/batch/v1": 4}});
    assert_eq!(
        differing_parts(&a, &b),
        [
            "discovery[1]",
            "openapi/apis/apps/v1",
            "openapi/apis/batch/v1"
        ]
    );
    assert!(differing_parts(&a, &a).is_empty());
}
