//! The committed CRD YAML under `config/crd/` must be what the Rust types generate.

use std::path::Path;

#[test]
fn committed_crds_match_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/crd");
    for (file, crd) in celgate_crds::crds() {
        let want = celgate_crds::to_yaml(&crd).expect("the CRD renders as YAML");
        let have = std::fs::read_to_string(dir.join(file))
            .unwrap_or_else(|e| panic!("config/crd/{file} is missing ({e}); run `make crds`"));
        assert!(
            have == want,
            "config/crd/{file} is out of date with crds/src; run `make crds` and commit the result"
        );
    }
}

#[test]
fn schemas_carry_upstream_defaults_and_list_types() {
    let crds = celgate_crds::crds();
    let vap = serde_json::to_value(&crds[0].1).expect("serialises");
    let spec = &vap["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(spec["failurePolicy"]["default"], "Fail");
    assert_eq!(spec["validations"]["x-kubernetes-list-type"], "atomic");
    assert_eq!(spec["matchConditions"]["x-kubernetes-list-type"], "map");
    let mc = &spec["matchConstraints"]["properties"];
    assert_eq!(mc["matchPolicy"]["default"], "Equivalent");
    assert_eq!(mc["namespaceSelector"]["default"], serde_json::json!({}));
    assert_eq!(
        mc["resourceRules"]["items"]["properties"]["scope"]["default"],
        "*"
    );
    let vapb = serde_json::to_value(&crds[1].1).expect("serialises");
    let bspec = &vapb["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    assert_eq!(bspec["validationActions"]["x-kubernetes-list-type"], "set");
    assert_eq!(
        bspec["paramRef"]["required"],
        serde_json::json!(["parameterNotFoundAction"])
    );
    for (_, crd) in &crds {
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["celgate".to_string()][..])
        );
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty())
        );
    }
}
