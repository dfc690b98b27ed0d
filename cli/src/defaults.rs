//! The defaults kube-apiserver applies to a policy object before validating it, read from the
//! `default`s of celgate's CRD schemas (the in-tree kinds have the same fields and defaults),
//! so an object read from a file is validated as the cluster would validate it.

use serde_json::Value;

use super::documents::PolicyKind;

/// The object with the defaults of its kind's schema applied where a field is absent.
pub fn with_defaults(kind: PolicyKind, object: &Value) -> Value {
    let name = match kind {
        PolicyKind::Validating => "ValidatingAdmissionPolicy",
        PolicyKind::ValidatingBinding => "ValidatingAdmissionPolicyBinding",
        PolicyKind::Mutating => "MutatingAdmissionPolicy",
        PolicyKind::MutatingBinding => "MutatingAdmissionPolicyBinding",
    };
    let mut out = object.clone();
    let schema = celgate_crds::crds()
        .into_iter()
        .find(|(_, crd)| crd.spec.names.kind == name)
        .and_then(|(_, crd)| crd.spec.versions.into_iter().next())
        .and_then(|v| v.schema)
        .and_then(|s| s.open_api_v3_schema)
        .and_then(|s| serde_json::to_value(s).ok());
    if let Some(schema) = schema {
        apply(&schema, &mut out);
    }
    out
}

/// Applies `schema`'s defaults to `value`, depth first, as structural defaulting does.
fn apply(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            let Some(Value::Object(properties)) = schema.get("properties") else {
                return;
            };
            for (name, property) in properties {
                if !map.contains_key(name)
                    && let Some(default) = property.get("default")
                {
                    map.insert(name.clone(), default.clone());
                }
                if let Some(member) = map.get_mut(name) {
                    apply(property, member);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn absent_fields_get_the_schema_defaults_and_given_ones_stay() {
        let policy = json!({"spec": {
            "failurePolicy": "Ignore",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "resources": ["deployments"]}]}
        }});
        let defaulted = with_defaults(PolicyKind::Validating, &policy);
        assert_eq!(defaulted["spec"]["failurePolicy"], "Ignore");
        let constraints = &defaulted["spec"]["matchConstraints"];
        assert_eq!(constraints["matchPolicy"], "Equivalent");
        assert_eq!(constraints["namespaceSelector"], json!({}));
        assert_eq!(constraints["objectSelector"], json!({}));
        assert_eq!(constraints["resourceRules"][0]["scope"], "*");
        let bare = with_defaults(PolicyKind::Validating, &json!({"spec": {}}));
        assert_eq!(bare["spec"]["failurePolicy"], "Fail");
    }
}
