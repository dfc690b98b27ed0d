//! The snapshot `celgate eval` decides against, built from files as the operator builds it
//! from the cluster: the policy compiled with its bindings, the params of each param kind and
//! the namespaces, and for a mutating policy the schema of the object's kind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use celgate_crds::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use celgate_engine::apivalidation::{
    Environments, FieldError, validate_binding, validate_mutating_binding,
    validate_mutating_policy, validate_policy,
};
use celgate_engine::model::ParamKind;
use celgate_engine::mutate::{KindSchema, compile_mutating};
use celgate_engine::schema::Gvk;
use celgate_engine::typecheck::TypeSource;
use celgate_engine::{
    BoundMutatingPolicy, BoundPolicy, ParamObjects, PolicySet, compile_validating,
};
use celgate_engine::{Exception, ExceptionSet};
use celgate_snapshot::{KindSchemaView, NamespaceView, ParamKindEntry, ParamViews, Snapshot};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::CliError;
use crate::defaults::with_defaults;
use crate::documents::{Document, PolicyKind, metadata_str, read_file, read_files, typed};
use crate::intree::all_converted;
use crate::types::{OfflineKinds, OfflineTypes, group_version};
use celgate_kinds::convert;

/// The policy compiled, with its bindings.
pub enum Bound {
    /// A ValidatingAdmissionPolicy.
    Validating(BoundPolicy),
    /// A MutatingAdmissionPolicy.
    Mutating(BoundMutatingPolicy),
}

/// The policy and bindings, compiled and checked.
pub struct Policy {
    /// The policy, compiled, with its bindings in the order given.
    pub bound: Bound,
    /// What kube-apiserver would reject in them, and fields their types do not know.
    pub notes: Vec<String>,
    /// The PolicyExceptions honoured.
    pub exceptions: Arc<ExceptionSet>,
}

impl Policy {
    /// The policy's paramKind.
    fn param_kind(&self) -> Option<&ParamKind> {
        match &self.bound {
            Bound::Validating(b) => b.policy.spec.param_kind.as_ref(),
            Bound::Mutating(b) => b.policy.spec.param_kind.as_ref(),
        }
    }

    /// The first namespace a binding's paramRef names.
    fn param_ref_namespace(&self) -> Option<&str> {
        let names: Vec<Option<&str>> = match &self.bound {
            Bound::Validating(b) => b
                .bindings
                .iter()
                .map(|b| b.param_ref.as_ref()?.namespace.as_deref())
                .collect(),
            Bound::Mutating(b) => b
                .bindings
                .iter()
                .map(|b| b.param_ref.as_ref()?.namespace.as_deref())
                .collect(),
        };
        names.into_iter().flatten().find(|n| !n.is_empty())
    }

    /// The policy's name.
    pub fn name(&self) -> &str {
        match &self.bound {
            Bound::Validating(b) => &b.policy.name,
            Bound::Mutating(b) => &b.policy.name,
        }
    }

    /// Whether the policy may call the authorizer.
    pub fn uses_authorizer(&self) -> bool {
        match &self.bound {
            Bound::Validating(b) => b.policy.uses_authorizer,
            Bound::Mutating(b) => b.policy.uses_authorizer,
        }
    }
}

/// The name of a policy kind.
fn kind_name(kind: PolicyKind) -> &'static str {
    match kind {
        PolicyKind::Validating => "ValidatingAdmissionPolicy",
        PolicyKind::ValidatingBinding => "ValidatingAdmissionPolicyBinding",
        PolicyKind::Mutating => "MutatingAdmissionPolicy",
        PolicyKind::MutatingBinding => "MutatingAdmissionPolicyBinding",
    }
}

/// Reads the policy file (a ValidatingAdmissionPolicy or a MutatingAdmissionPolicy) and the
/// binding files (bindings of the same kind).
pub fn load_policy(policy: &Path, bindings: &[PathBuf]) -> Result<Policy, CliError> {
    let docs = all_converted(read_file(policy)?)?;
    let [doc] = docs.as_slice() else {
        return Err(CliError::Usage(format!(
            "{} must hold one ValidatingAdmissionPolicy or MutatingAdmissionPolicy, not {} objects",
            policy.display(),
            docs.len()
        )));
    };
    compile(doc, &all_converted(read_files(bindings)?)?)
}

/// Compiles a policy document (a ValidatingAdmissionPolicy or a MutatingAdmissionPolicy) with
/// its binding documents (bindings of the same kind, each naming the policy).
pub fn compile(doc: &Document, bindings: &[Document]) -> Result<Policy, CliError> {
    let mut notes = Vec::new();
    let envs = Environments::new(celgate_cel::Compatibility::DEFAULT, None);
    let bound = match PolicyKind::of(doc) {
        Some(PolicyKind::Validating) => {
            let (typed_policy, unknown) = typed::<ValidatingAdmissionPolicy>(doc)?;
            reject_unknown(doc, &unknown)?;
            let defaulted = with_defaults(PolicyKind::Validating, &doc.object);
            notes.extend(
                validate_policy(&defaulted, &envs)
                    .iter()
                    .map(|e| format!("kube-apiserver would reject policy {}: {e}", doc.name())),
            );
            let compiled = Arc::new(compile_validating(convert::validating_policy(
                &typed_policy,
            )));
            let bindings = load_bindings(
                bindings,
                PolicyKind::ValidatingBinding,
                &compiled.name,
                |b: &ValidatingAdmissionPolicyBinding| {
                    let spec = convert::validating_binding(b);
                    let names = (spec.name.to_string(), spec.policy_name.clone());
                    (spec, names)
                },
                validate_binding,
                &mut notes,
            )?;
            Bound::Validating(BoundPolicy {
                policy: compiled,
                bindings: bindings.into(),
            })
        }
        Some(PolicyKind::Mutating) => {
            let (typed_policy, unknown) = typed::<MutatingAdmissionPolicy>(doc)?;
            reject_unknown(doc, &unknown)?;
            let defaulted = with_defaults(PolicyKind::Mutating, &doc.object);
            notes.extend(
                validate_mutating_policy(&defaulted, &envs)
                    .iter()
                    .map(|e| format!("kube-apiserver would reject policy {}: {e}", doc.name())),
            );
            let compiled = Arc::new(compile_mutating(
                convert::mutating_policy(&typed_policy),
                convert::apply_semantics(&typed_policy),
            ));
            notes.extend(
                compiled
                    .compile_errors()
                    .into_iter()
                    .map(|(field, error)| format!("{field} does not compile: {error}")),
            );
            let bindings = load_bindings(
                bindings,
                PolicyKind::MutatingBinding,
                &compiled.name,
                |b: &MutatingAdmissionPolicyBinding| {
                    let spec = convert::mutating_binding(b);
                    let names = (spec.name.to_string(), spec.policy_name.clone());
                    (spec, names)
                },
                validate_mutating_binding,
                &mut notes,
            )?;
            Bound::Mutating(BoundMutatingPolicy {
                policy: compiled,
                bindings: bindings.into(),
            })
        }
        _ => {
            return Err(doc
                .error(format!(
                    "{} is not a ValidatingAdmissionPolicy or MutatingAdmissionPolicy",
                    doc.describe()
                ))
                .into());
        }
    };
    Ok(Policy {
        bound,
        notes,
        exceptions: Arc::default(),
    })
}

/// Whether a document is a PolicyException of admission.celgate.io/v1alpha1.
pub fn is_exception(doc: &Document) -> bool {
    (doc.api_version(), doc.kind()) == (celgate_crds::EXCEPTION_API_VERSION, "PolicyException")
}

/// Adds the PolicyExceptions among `docs` (other documents are left alone) to the ones
/// `policy` is decided with; a match condition that does not compile is a note (that
/// exception never applies, as in the cluster).
pub fn add_exceptions(policy: &mut Policy, docs: &[Document]) -> Result<(), CliError> {
    let mut all: Vec<Arc<Exception>> = policy.exceptions.all().to_vec();
    for doc in docs.iter().filter(|d| is_exception(d)) {
        let (typed_exception, unknown) = typed::<celgate_crds::PolicyException>(doc)?;
        reject_unknown(doc, &unknown)?;
        let mut spec = convert::policy_exception(&typed_exception);
        if spec.namespace.is_empty() {
            spec.namespace = "default".into();
        }
        let compiled = Exception::compile(spec);
        policy
            .notes
            .extend(compiled.compile_errors().into_iter().map(|(field, error)| {
                format!(
                    "PolicyException {} never applies: {field} does not compile: {error}",
                    compiled.id
                )
            }));
        all.push(Arc::new(compiled));
    }
    policy.exceptions = Arc::new(ExceptionSet::new(all));
    Ok(())
}

/// The bindings: each document a binding of `kind` (typed as `B`, converted by `convert` into
/// its spec with its name and policy name) naming `policy`, in the order given.
fn load_bindings<B, S>(
    docs: &[Document],
    kind: PolicyKind,
    policy: &str,
    convert: impl Fn(&B) -> (S, (String, String)),
    validate: fn(&Value) -> Vec<FieldError>,
    notes: &mut Vec<String>,
) -> Result<Vec<Arc<S>>, CliError>
where
    B: DeserializeOwned + Serialize,
{
    let mut specs = Vec::new();
    for doc in docs {
        if PolicyKind::of(doc) != Some(kind) {
            return Err(doc
                .error(format!("{} is not a {}", doc.describe(), kind_name(kind)))
                .into());
        }
        let (binding, unknown) = typed::<B>(doc)?;
        reject_unknown(doc, &unknown)?;
        let (spec, (name, policy_name)) = convert(&binding);
        if policy_name != policy {
            return Err(doc
                .error(format!(
                    "binding {name} binds policy {policy_name:?}, not {policy:?}"
                ))
                .into());
        }
        let defaulted = with_defaults(kind, &doc.object);
        notes.extend(
            validate(&defaulted)
                .iter()
                .map(|e| format!("kube-apiserver would reject binding {name}: {e}")),
        );
        specs.push(Arc::new(spec));
    }
    Ok(specs)
}

/// The schema of the object's kind, as a mutation needs it: from the built-in kinds or a
/// CRD given; none (noted) when neither has it, and the mutation is then refused as
/// kube-apiserver refuses it.
pub fn schemas(types: &OfflineTypes, object: &Value, notes: &mut Vec<String>) -> KindSchemaView {
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = group_version(api_version);
    let gvk = Gvk::new(group, version, kind);
    match types.schema(&gvk) {
        Some(schema) => KindSchemaView::new([(
            gvk,
            KindSchema {
                schema,
                built_in: types.is_builtin_group(group),
            },
        )]),
        None => {
            notes.push(format!(
                "{gvk} has no schema among the built-in kinds or the --crd files: its objects cannot be mutated"
            ));
            KindSchemaView::default()
        }
    }
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
    schemas: KindSchemaView,
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
            "namespace {request_namespace:?} is evaluated as a Namespace without labels (no Namespace object of it is given)"
        ));
        namespaces.push((
            request_namespace.to_string(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": request_namespace}}),
        ));
    }
    let ref_namespace = policy.param_ref_namespace();
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
        objects.insert(namespace, doc.name(), Arc::new(object));
    }
    // The paramKind is served even when no param file holds one of its objects.
    if let Some(kind) = policy.param_kind() {
        let key = (kind.api_version.clone(), kind.kind.clone());
        if let std::collections::btree_map::Entry::Vacant(entry) = by_kind.entry(key) {
            notes.push(format!(
                "no param of paramKind {} {} is given (--params): the bindings find none",
                kind.api_version, kind.kind
            ));
            let namespaced = kinds
                .resource_of(&kind.api_version, &kind.kind)
                .map_or(ref_namespace.is_some(), |r| r.namespaced);
            entry.insert(ParamObjects::new(namespaced));
        }
    }
    let mut views = ParamViews::default();
    for (key, objects) in by_kind {
        views.set(&key, Some(ParamKindEntry::Ready(Arc::new(objects))));
    }
    let policies = match &policy.bound {
        Bound::Validating(b) => PolicySet::new(vec![b.clone()], Vec::new()),
        Bound::Mutating(b) => PolicySet::new(Vec::new(), vec![b.clone()]),
    };
    Snapshot {
        revision: 1,
        ready: true,
        policies: Arc::new(policies),
        schemas: Arc::new(schemas),
        policy_param_kinds: Arc::default(),
        namespaces: Arc::new(NamespaceView::new(namespaces)),
        namespaces_listed: true,
        params: Arc::new(views),
        exceptions: policy.exceptions.clone(),
    }
}
