//! The snapshot `celgate eval` decides against, built from files as the operator builds it
//! from the cluster: the policy compiled with its bindings, the params of each param kind and
//! the namespaces.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use celgate_crds::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use celgate_engine::apivalidation::{Environments, validate_binding, validate_policy};
use celgate_engine::model::ValidatingBindingSpec;
use celgate_engine::{BoundPolicy, ParamObjects, PolicySet, ValidatingPolicy, compile_validating};
use celgate_snapshot::{NamespaceView, ParamKindEntry, ParamViews, Snapshot};
use serde_json::{Value, json};

use crate::cli::CliError;
use crate::cli::defaults::with_defaults;
use crate::cli::documents::{Document, PolicyKind, metadata_str, read_file, read_files, typed};
use crate::cli::types::OfflineKinds;
use crate::convert;

/// What `celgate eval` tells a user who gives it a MutatingAdmissionPolicy.
const MUTATION_NOT_EVALUATED: &str = "`celgate eval` decides ValidatingAdmissionPolicies only: \
     MutatingAdmissionPolicies are enforced by `celgate run` but not evaluated offline yet";

/// The policy and bindings, compiled and checked.
pub struct Policy {
    /// The policy, compiled.
    pub compiled: Arc<ValidatingPolicy>,
    /// Its bindings, in the order given.
    pub bindings: Vec<Arc<ValidatingBindingSpec>>,
    /// What kube-apiserver would reject in them, and fields their types do not know.
    pub notes: Vec<String>,
}

/// Reads the policy file and the binding files.
pub fn load_policy(policy: &Path, bindings: &[PathBuf]) -> Result<Policy, CliError> {
    let docs = read_file(policy)?;
    let [doc] = docs.as_slice() else {
        return Err(CliError::Usage(format!(
            "{} must hold one ValidatingAdmissionPolicy, not {} objects",
            policy.display(),
            docs.len()
        )));
    };
    let mut notes = Vec::new();
    match PolicyKind::of(doc) {
        Some(PolicyKind::Validating) => {}
        Some(PolicyKind::Mutating) => return Err(CliError::Usage(MUTATION_NOT_EVALUATED.into())),
        _ => {
            return Err(doc
                .error(format!(
                    "{} {} is not a ValidatingAdmissionPolicy of admissionregistration.k8s.io/v1 or admission.celgate.io/v1",
                    doc.api_version(),
                    doc.kind()
                ))
                .into());
        }
    }
    let (typed_policy, unknown) = typed::<ValidatingAdmissionPolicy>(doc)?;
    reject_unknown(doc, &unknown)?;
    let envs = Environments::new(celgate_cel::Compatibility::DEFAULT, None);
    let defaulted = with_defaults(PolicyKind::Validating, &doc.object);
    notes.extend(
        validate_policy(&defaulted, &envs)
            .iter()
            .map(|e| format!("kube-apiserver would reject policy {}: {e}", doc.name())),
    );
    let compiled = Arc::new(compile_validating(convert::validating_policy(
        &typed_policy,
    )));

    let mut specs = Vec::new();
    for doc in read_files(bindings)? {
        match PolicyKind::of(&doc) {
            Some(PolicyKind::ValidatingBinding) => {}
            Some(PolicyKind::MutatingBinding) => {
                return Err(CliError::Usage(MUTATION_NOT_EVALUATED.into()));
            }
            _ => {
                return Err(doc
                    .error(format!(
                        "{} {} is not a ValidatingAdmissionPolicyBinding",
                        doc.api_version(),
                        doc.kind()
                    ))
                    .into());
            }
        }
        let (binding, unknown) = typed::<ValidatingAdmissionPolicyBinding>(&doc)?;
        reject_unknown(&doc, &unknown)?;
        let spec = convert::validating_binding(&binding);
        if spec.policy_name != *compiled.name {
            return Err(doc
                .error(format!(
                    "binding {} binds policy {:?}, not {:?}",
                    spec.name, spec.policy_name, compiled.name
                ))
                .into());
        }
        let defaulted = with_defaults(PolicyKind::ValidatingBinding, &doc.object);
        notes.extend(
            validate_binding(&defaulted)
                .iter()
                .map(|e| format!("kube-apiserver would reject binding {}: {e}", spec.name)),
        );
        specs.push(Arc::new(spec));
    }
    Ok(Policy {
        compiled,
        bindings: specs,
        notes,
    })
}

/// Fields the kind does not have are an input error: `kubectl apply` rejects them.
fn reject_unknown(doc: &Document, unknown: &[String]) -> Result<(), CliError> {
    if unknown.is_empty() {
        return Ok(());
    }
    Err(doc
        .error(format!(
            "unknown field{} {} (kube-apiserver rejects {} {:?})",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", "),
            doc.kind(),
            doc.name()
        ))
        .into())
}

/// The snapshot: the bound policy, the params (every object of the param files, by kind) and
/// the namespaces (the namespace file's, and an unlabelled one for the request's namespace
/// when the file does not describe it). A param object without a namespace, of a namespaced
/// kind, is placed where a binding looks for it: its paramRef's namespace, else the request's.
/// A param kind is namespaced as `kinds` serve it; one they do not serve is namespaced when
/// its objects have a namespace, or the paramKind when a binding's paramRef names one.
pub fn build(
    policy: &Policy,
    kinds: &OfflineKinds,
    params: &[Document],
    namespace_file: Option<&Value>,
    request_namespace: &str,
    notes: &mut Vec<String>,
) -> Snapshot {
    let mut namespaces = Vec::new();
    if let Some(ns) = namespace_file {
        namespaces.push((metadata_str(ns, "name").to_string(), ns.clone()));
    }
    if !request_namespace.is_empty() && !namespaces.iter().any(|(n, _)| n == request_namespace) {
        notes.push(format!(
            "namespace {request_namespace:?} is evaluated as a Namespace without labels (give one with --namespace)"
        ));
        namespaces.push((
            request_namespace.to_string(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": request_namespace}}),
        ));
    }
    let ref_namespace = policy
        .bindings
        .iter()
        .filter_map(|b| b.param_ref.as_ref()?.namespace.as_deref())
        .find(|n| !n.is_empty());
    let param_namespace = ref_namespace.unwrap_or(request_namespace);

    let mut by_kind: BTreeMap<(String, String), ParamObjects> = BTreeMap::new();
    for doc in params {
        let key = (doc.api_version().to_string(), doc.kind().to_string());
        let namespaced = kinds
            .resource_of(&key.0, &key.1)
            .map_or(!metadata_str(&doc.object, "namespace").is_empty(), |r| {
                r.namespaced
            });
        let objects = by_kind.entry(key).or_default();
        objects.namespaced |= namespaced;
        let mut object = doc.object.clone();
        let namespace = match metadata_str(&doc.object, "namespace") {
            "" if namespaced => {
                if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("namespace".into(), json!(param_namespace));
                }
                param_namespace
            }
            given => given,
        };
        objects.objects.insert(
            (namespace.to_string(), doc.name().to_string()),
            Arc::new(object),
        );
    }
    // The paramKind is served even when no param file holds one of its objects.
    if let Some(kind) = &policy.compiled.spec.param_kind {
        let key = (kind.api_version.clone(), kind.kind.clone());
        if let std::collections::btree_map::Entry::Vacant(entry) = by_kind.entry(key) {
            notes.push(format!(
                "no param of paramKind {} {} is given (--params): the bindings find none",
                kind.api_version, kind.kind
            ));
            let namespaced = kinds
                .resource_of(&kind.api_version, &kind.kind)
                .map_or(ref_namespace.is_some(), |r| r.namespaced);
            entry.insert(ParamObjects {
                namespaced,
                ..Default::default()
            });
        }
    }
    let mut views = ParamViews::default();
    for (key, objects) in by_kind {
        views.set(&key, Some(ParamKindEntry::Ready(Arc::new(objects))));
    }
    let bound = BoundPolicy {
        policy: policy.compiled.clone(),
        bindings: policy.bindings.clone(),
    };
    Snapshot {
        revision: 1,
        ready: true,
        policies: Arc::new(PolicySet {
            validating: vec![bound],
            mutating: Vec::new(),
        }),
        schemas: Arc::default(),
        policy_param_kinds: Arc::default(),
        namespaces: Arc::new(NamespaceView::new(namespaces)),
        params: Arc::new(views),
    }
}
