//! In-tree policy objects as celgate's: a ValidatingAdmissionPolicy, MutatingAdmissionPolicy or
//! binding of `admissionregistration.k8s.io` v1, v1beta1 or v1alpha1 becomes the
//! `admission.celgate.io/v1` object kube-apiserver 1.36 would serve for it as v1 after a create.
//!
//! kube-apiserver decodes an object of a served version (explicit `null`s read as absent),
//! applies that version's defaults, converts it field for field (the three versions' fields
//! are the same since 1.32) and applies v1's defaults when it reads it back. The versions
//! default the same fields to the same values (failurePolicy `Fail`; in match resources
//! matchPolicy `Equivalent`, empty namespace and object selectors and rule scope `*`), with one
//! exception: v1alpha1 defaults a binding's `paramRef.parameterNotFoundAction` to `Deny`, which
//! v1beta1 and v1 require instead. v1's defaults are those of celgate's CRD schemas
//! ([`with_defaults`]). What the API server sets on a create (uid, resourceVersion, generation,
//! timestamps, managed fields, status) is not part of the object written, nor is a namespace
//! (the kinds are cluster-scoped) or kubectl's last-applied annotation of the in-tree object.
use serde_json::Value;

use crate::defaults::with_defaults;
use crate::documents::{CELGATE_API_VERSION, Document, InputError, PolicyKind};

/// The in-tree API group of the policy kinds.
pub const IN_TREE_GROUP: &str = "admissionregistration.k8s.io";
/// The in-tree versions read, newest first.
pub const IN_TREE_VERSIONS: [&str; 3] = ["v1", "v1beta1", "v1alpha1"];

/// The metadata fields the API server sets on a create, dropped from a converted object.
const SERVER_SET_METADATA: [&str; 9] = [
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// kubectl's copy of the object as last applied: the in-tree object's, not the celgate one's.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// What a document is for conversion.
#[derive(Debug, PartialEq, Eq)]
pub enum Source {
    /// An in-tree policy kind of a version kube-apiserver serves or served.
    InTree(PolicyKind, &'static str),
    /// Already a celgate policy kind.
    Celgate(PolicyKind),
    /// Neither: another kind, or another group.
    Other,
}

/// What `doc` is; a policy kind of the in-tree or celgate group in a version that does not
/// exist is an error that names the document and the versions there are.
pub fn source(doc: &Document) -> Result<Source, InputError> {
    let (group, version) = doc.api_version().split_once('/').unwrap_or(("", ""));
    let Some(kind) = PolicyKind::named(doc.kind()) else {
        return Ok(Source::Other);
    };
    match group {
        IN_TREE_GROUP => match IN_TREE_VERSIONS.iter().find(|v| **v == version) {
            Some(v) => Ok(Source::InTree(kind, v)),
            None => Err(doc.error(format!(
                "{} {} is not a version Kubernetes serves; celgate reads {IN_TREE_GROUP}/{} and {CELGATE_API_VERSION}",
                doc.api_version(),
                doc.kind(),
                IN_TREE_VERSIONS.join(", ")
            ))),
        },
        crds::GROUP if doc.api_version() == CELGATE_API_VERSION => Ok(Source::Celgate(kind)),
        crds::GROUP => Err(doc.error(format!(
            "{} {} does not exist: celgate's kinds are {CELGATE_API_VERSION} only (`celgate convert` writes them from any served version of {IN_TREE_GROUP})",
            doc.api_version(),
            doc.kind()
        ))),
        _ => Ok(Source::Other),
    }
}

use celgate_crds as crds;

/// `doc` as celgate's object when it is an in-tree policy kind; other documents as they are.
pub fn converted(doc: Document) -> Result<Document, InputError> {
    let Source::InTree(kind, version) = source(&doc)? else {
        return Ok(doc);
    };
    let mut object = doc.object.clone();
    drop_nulls(&mut object);
    if version == "v1alpha1" {
        default_parameter_not_found_action(&mut object);
    }
    if let Some(o) = object.as_object_mut() {
        o.insert("apiVersion".into(), CELGATE_API_VERSION.into());
        o.remove("status");
    }
    clean_metadata(&mut object);
    let object = with_defaults(kind, &object);
    Ok(Document {
        converted_from: Some(doc.api_version().to_string()),
        object,
        ..doc
    })
}

/// Every document of `docs`, in-tree policy kinds converted ([`converted`]).
pub fn all_converted(docs: Vec<Document>) -> Result<Vec<Document>, InputError> {
    docs.into_iter().map(converted).collect()
}

/// Removes every `null` member and item, as decoding into Go's types does (a `null` pointer,
/// list or map is absent; v1 never writes it back).
fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// v1alpha1's one default that v1 lacks: a binding's `paramRef.parameterNotFoundAction` is
/// `Deny` when absent.
fn default_parameter_not_found_action(object: &mut Value) {
    if let Some(Value::Object(param_ref)) = object.pointer_mut("/spec/paramRef") {
        param_ref
            .entry("parameterNotFoundAction")
            .or_insert_with(|| "Deny".into());
    }
}

/// Drops the metadata the API server sets and kubectl's last-applied annotation (and
/// `annotations` when that was the only one).
fn clean_metadata(object: &mut Value) {
    let Some(Value::Object(metadata)) = object.get_mut("metadata") else {
        return;
    };
    for field in SERVER_SET_METADATA {
        metadata.remove(field);
    }
    if let Some(Value::Object(annotations)) = metadata.get_mut("annotations") {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            metadata.remove("annotations");
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::documents::parse;

    fn empty() -> Value {
        json!({})
    }

    /// The one document of `yaml`, converted.
    fn convert(yaml: &str) -> Result<Value, String> {
        let mut docs = parse("in.yaml", yaml).map_err(|e| e.to_string())?;
        let doc = docs.remove(0);
        converted(doc).map(|d| d.object).map_err(|e| e.to_string())
    }

    fn ok(yaml: &str) -> Value {
        convert(yaml).unwrap_or_else(|e| panic!("converts: {e}"))
    }

    #[test]
    fn every_served_version_becomes_celgate_v1_and_remembers_what_it_was() {
        for version in IN_TREE_VERSIONS {
            let yaml = format!(
                "apiVersion: admissionregistration.k8s.io/{version}\nkind: MutatingAdmissionPolicy\nmetadata: {{name: m}}\nspec: {{reinvocationPolicy: Never}}\n"
            );
            let doc = parse("in.yaml", &yaml).expect("parses").remove(0);
            let out = converted(doc).expect("converts");
            assert_eq!(out.object["apiVersion"], CELGATE_API_VERSION);
            assert_eq!(
                out.converted_from.as_deref(),
                Some(format!("admissionregistration.k8s.io/{version}").as_str())
            );
            assert_eq!(
                out.describe(),
                format!("admissionregistration.k8s.io/{version} MutatingAdmissionPolicy")
            );
        }
    }

    #[test]
    fn failure_policy_defaults_to_fail_in_policies_only() {
        for kind in ["ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"] {
            let out = ok(&format!(
                "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: {kind}\nmetadata: {{name: p}}\nspec: {{}}\n"
            ));
            assert_eq!(out["spec"]["failurePolicy"], "Fail", "{kind}");
        }
        let out = ok(
            "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: ValidatingAdmissionPolicy\n\
                      metadata: {name: p}\nspec: {failurePolicy: Ignore}\n",
        );
        assert_eq!(out["spec"]["failurePolicy"], "Ignore");
        let out = ok(
            "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: ValidatingAdmissionPolicyBinding\n\
                      metadata: {name: b}\nspec: {policyName: p, validationActions: [Deny]}\n",
        );
        assert_eq!(out["spec"].get("failurePolicy"), None);
    }

    #[test]
    fn match_resources_get_match_policy_selectors_and_rule_scopes_where_present() {
        let rules = "resourceRules: [{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [pods]}]";
        let policy = ok(&format!(
            "apiVersion: admissionregistration.k8s.io/v1alpha1\nkind: MutatingAdmissionPolicy\nmetadata: {{name: m}}\n\
             spec: {{reinvocationPolicy: IfNeeded, matchConstraints: {{{rules}, excludeResourceRules: [{{resources: [secrets]}}]}}}}\n"
        ));
        let binding = ok(&format!(
            "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {{name: b}}\n\
             spec: {{policyName: p, validationActions: [Deny], matchResources: {{matchPolicy: Exact, {rules}}}}}\n"
        ));
        for (constraints, policy) in [
            (&policy["spec"]["matchConstraints"], "Equivalent"),
            (&binding["spec"]["matchResources"], "Exact"),
        ] {
            assert_eq!(constraints["matchPolicy"], policy);
            assert_eq!(constraints["namespaceSelector"], empty());
            assert_eq!(constraints["objectSelector"], empty());
            assert_eq!(constraints["resourceRules"][0]["scope"], "*");
        }
        assert_eq!(
            policy["spec"]["matchConstraints"]["excludeResourceRules"][0]["scope"],
            "*"
        );
        // Absent match resources stay absent.
        let bare = ok(
            "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: MutatingAdmissionPolicyBinding\n\
                       metadata: {name: b}\nspec: {policyName: p}\n",
        );
        assert_eq!(bare["spec"], json!({"policyName": "p"}));
    }

    #[test]
    fn only_v1alpha1_defaults_parameter_not_found_action_to_deny() {
        let binding = |version: &str, kind: &str, param_ref: &str| {
            ok(&format!(
                "apiVersion: admissionregistration.k8s.io/{version}\nkind: {kind}\nmetadata: {{name: b}}\n\
                 spec: {{policyName: p, paramRef: {param_ref}}}\n"
            ))["spec"]["paramRef"]
                .clone()
        };
        for kind in [
            "ValidatingAdmissionPolicyBinding",
            "MutatingAdmissionPolicyBinding",
        ] {
            assert_eq!(
                binding("v1alpha1", kind, "{name: cm}"),
                json!({"name": "cm", "parameterNotFoundAction": "Deny"})
            );
            assert_eq!(
                binding(
                    "v1alpha1",
                    kind,
                    "{selector: {}, parameterNotFoundAction: Allow}"
                ),
                json!({"selector": {}, "parameterNotFoundAction": "Allow"})
            );
            for version in ["v1beta1", "v1"] {
                assert_eq!(binding(version, kind, "{name: cm}"), json!({"name": "cm"}));
            }
        }
    }

    #[test]
    fn nulls_read_as_absent_and_are_then_defaulted() {
        let out = ok(
            "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: ValidatingAdmissionPolicy\n\
                      metadata: {name: p, labels: null}\n\
                      spec: {failurePolicy: null, paramKind: null, matchConstraints: {matchPolicy: null, resourceRules: [{resources: [pods], scope: null}]}}\n",
        );
        assert_eq!(out["metadata"], json!({"name": "p"}));
        assert_eq!(out["spec"]["failurePolicy"], "Fail");
        assert_eq!(out["spec"].get("paramKind"), None);
        let constraints = &out["spec"]["matchConstraints"];
        assert_eq!(constraints["matchPolicy"], "Equivalent");
        assert_eq!(constraints["resourceRules"][0]["scope"], "*");
    }

    #[test]
    fn what_the_api_server_sets_is_dropped_and_what_the_user_set_kept() {
        let out = ok(r#"
apiVersion: admissionregistration.k8s.io/v1beta1
kind: ValidatingAdmissionPolicy
metadata:
  name: p
  namespace: default
  uid: 0b7c
  resourceVersion: "42"
  generation: 3
  creationTimestamp: "2025-01-01T00:00:00Z"
  managedFields: [{manager: kubectl}]
  labels: {team: a}
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{}'
    owner: b
  finalizers: [x]
spec: {failurePolicy: Ignore}
status:
  observedGeneration: 3
"#);
        assert_eq!(
            out,
            json!({
                "apiVersion": CELGATE_API_VERSION,
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": "p", "labels": {"team": "a"}, "annotations": {"owner": "b"}, "finalizers": ["x"]},
                "spec": {"failurePolicy": "Ignore"}
            })
        );
        let only_last_applied = ok(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\n\
             metadata: {name: b, annotations: {kubectl.kubernetes.io/last-applied-configuration: '{}'}}\nspec: {policyName: p}\n",
        );
        assert_eq!(only_last_applied["metadata"], json!({"name": "b"}));
    }

    #[test]
    fn unknown_fields_are_kept_for_the_reader_to_report() {
        let out = ok(
            "apiVersion: admissionregistration.k8s.io/v1beta1\nkind: ValidatingAdmissionPolicy\n\
                      metadata: {name: p}\nspec: {validations: [{expression: 'true', mesage: typo}]}\n",
        );
        assert_eq!(out["spec"]["validations"][0]["mesage"], "typo");
    }

    #[test]
    fn other_documents_pass_as_they_are_and_versions_that_do_not_exist_are_errors() {
        for yaml in [
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, uid: x}\n",
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {name: w}\n",
            "apiVersion: admission.celgate.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p, uid: x}\n",
        ] {
            let doc = parse("in.yaml", yaml).expect("parses").remove(0);
            let before = doc.object.clone();
            let out = converted(doc).expect("passes");
            assert_eq!(out.object, before);
            assert_eq!(out.converted_from, None);
        }
        assert_eq!(
            convert("apiVersion: admissionregistration.k8s.io/v2\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}\n")
                .expect_err("no v2"),
            "in.yaml, document 1: admissionregistration.k8s.io/v2 ValidatingAdmissionPolicy is not a version Kubernetes serves; \
             celgate reads admissionregistration.k8s.io/v1, v1beta1, v1alpha1 and admission.celgate.io/v1"
        );
        assert_eq!(
            convert("apiVersion: admission.celgate.io/v1beta1\nkind: MutatingAdmissionPolicy\nmetadata: {name: m}\n")
                .expect_err("no celgate v1beta1"),
            "in.yaml, document 1: admission.celgate.io/v1beta1 MutatingAdmissionPolicy does not exist: celgate's kinds are \
             admission.celgate.io/v1 only (`celgate convert` writes them from any served version of admissionregistration.k8s.io)"
        );
    }
}
