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
        // Exceptions live in the namespaces of the teams that own them.
        let scope = if crd.spec.names.kind == "PolicyException" {
            "Namespaced"
        } else {
            "Cluster"
        };
        assert_eq!(crd.spec.scope, scope);
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

/// The paths below `path` of every field (a property of an object, at any depth, also inside
/// list items and map values) with no description or the derive's placeholder, so `kubectl
/// explain` shows a real one for each; `schema` itself is a field when `is_field`.
fn undescribed(schema: &serde_json::Value, path: &str, is_field: bool, out: &mut Vec<String>) {
    let description = schema["description"].as_str().unwrap_or_default();
    if is_field && (description.trim().is_empty() || description.contains("Auto-generated")) {
        out.push(path.to_string());
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (name, child) in properties {
            undescribed(child, &format!("{path}.{name}"), true, out);
        }
    }
    if schema["items"].is_object() {
        undescribed(&schema["items"], &format!("{path}[]"), false, out);
    }
    if schema["additionalProperties"].is_object() {
        undescribed(
            &schema["additionalProperties"],
            &format!("{path}{{}}"),
            false,
            out,
        );
    }
}

#[test]
fn every_kind_and_field_has_a_real_description() {
    for (file, crd) in celgate_crds::crds() {
        let crd = serde_json::to_value(&crd).expect("serialises");
        let mut missing = Vec::new();
        for version in crd["spec"]["versions"].as_array().expect("versions") {
            let root = &version["schema"]["openAPIV3Schema"];
            assert!(
                root["properties"]["status"].is_object(),
                "{file} has a status"
            );
            undescribed(root, "", true, &mut missing);
        }
        assert!(missing.is_empty(), "{file}: no description at {missing:?}");
    }
}

#[test]
fn printer_columns_show_readiness_warnings_and_params() {
    let ready = ".status.conditions[?(@.type==\"Ready\")].status";
    let expected: [(&str, &[(&str, &str)]); 4] = [
        (
            "validatingadmissionpolicies.yaml",
            &[
                ("Ready", ready),
                ("Warnings", ".status.typeChecking.warningCount"),
            ],
        ),
        (
            "validatingadmissionpolicybindings.yaml",
            &[("Ready", ready), ("Params", ".status.resolvedParams")],
        ),
        (
            "mutatingadmissionpolicies.yaml",
            &[
                ("Ready", ready),
                ("Warnings", ".status.typeChecking.warningCount"),
            ],
        ),
        (
            "mutatingadmissionpolicybindings.yaml",
            &[("Ready", ready), ("Params", ".status.resolvedParams")],
        ),
    ];
    let crds = celgate_crds::crds();
    for (file, columns) in expected {
        let (_, crd) = crds.iter().find(|(f, _)| *f == file).expect("generated");
        let printed = crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default();
        for (name, path) in columns {
            assert!(
                printed
                    .iter()
                    .any(|c| c.name == *name && c.json_path == *path),
                "{file} has no column {name} at {path}"
            );
        }
    }
}
