//! `celgate scan`: the would-be violations of manifests. For every ValidatingAdmissionPolicy
//! binding and every object of the manifests, decides by [`crate::eval::decide`] a CREATE of the
//! object by a fixed scanner identity, with no oldObject, as the question "would this object be
//! admitted if it were created now?", and reports each binding whose validations fail: denied
//! (Deny), warned (Warn) or audited (Audit).

mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use self::report::{ObjectRef, ScanReport, Skipped, Violation};
use crate::documents::{Document, PolicyKind, metadata_str, read_files};
use crate::eval::{Catalog, Decision, RequestInput, decide, snapshot};
use crate::types::{OfflineKinds, read_crds};
use crate::walk::{file_name, files_under};
use crate::{CliError, EXIT_FINDINGS, EXIT_OK, Format, write_report};

/// The user a scan's requests are made by.
pub const SCANNER_USER: &str = "celgate:scanner";
/// The groups of [`SCANNER_USER`].
pub const SCANNER_GROUPS: [&str; 1] = ["system:authenticated"];

/// The audit annotation kube-apiserver records an Audit binding's failed validations under.
const VALIDATION_FAILURE_KEY: &str = "validation.policy.admission.k8s.io/validation_failure";

/// Arguments of `celgate scan`.
#[derive(clap::Args, Debug)]
pub struct ScanArgs {
    /// Manifest files, or folders searched (with their subfolders) for `.yaml`, `.yml` and
    /// `.json` files: the objects scanned. Namespaces among them give the others' namespaces
    /// their labels.
    #[arg(value_name = "MANIFEST", required = true, num_args = 1..)]
    pub manifests: Vec<PathBuf>,
    /// ValidatingAdmissionPolicies and their bindings (several documents per file; other
    /// kinds in these files are passed over).
    #[arg(long, value_name = "FILE", required = true, num_args = 1..)]
    pub policies: Vec<PathBuf>,
    /// Param objects (any kinds; `List`s too).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub params: Vec<PathBuf>,
    /// CustomResourceDefinition files, for objects or params of custom kinds.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub crd: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Format,
}

/// Whether a file's name makes it a manifest file.
fn is_manifest(path: &Path) -> bool {
    let name = file_name(path);
    [".yaml", ".yml", ".json"].iter().any(|e| name.ends_with(e))
}

/// Runs `celgate scan`; the exit code is 0 with no violation, 1 with one or more.
pub fn run(args: &ScanArgs, out: &mut dyn std::io::Write) -> Result<u8, CliError> {
    let mut files = Vec::new();
    for path in &args.manifests {
        files.extend(files_under(path, is_manifest)?);
    }
    let policy_docs = read_files(&args.policies)?;
    let params = read_files(&args.params)?;
    let catalog = Catalog::Kinds(OfflineKinds::load(&read_crds(&args.crd)?)?);
    let bindings = bound_policies(&policy_docs)?;
    let mut report = ScanReport::default();
    let (objects, unknown): (Vec<Document>, Vec<Document>) =
        read_files(&files)?.into_iter().partition(|d| {
            catalog
                .kinds()
                .resource_of(d.api_version(), d.kind())
                .is_some()
        });
    report.skipped = unknown
        .iter()
        .map(|d| Skipped {
            file: d.file.clone(),
            document: d.position,
            reason: format!(
                "{} ({}) is neither a built-in kind of Kubernetes {} nor the kind of a CustomResourceDefinition given with --crd",
                d.kind(),
                d.api_version(),
                catalog.kinds().kubernetes_version
            ),
        })
        .collect();
    let namespaces: BTreeMap<&str, &Value> = objects
        .iter()
        .filter(|d| (d.api_version(), d.kind()) == ("v1", "Namespace"))
        .map(|d| (d.name(), &d.object))
        .collect();
    let mut unlabelled: Vec<&str> = objects
        .iter()
        .map(|d| metadata_str(&d.object, "namespace"))
        .filter(|ns| !ns.is_empty() && !namespaces.contains_key(ns))
        .collect();
    unlabelled.sort_unstable();
    unlabelled.dedup();
    report.notes.extend(unlabelled.iter().map(|ns| {
        format!("namespace {ns:?} has no Namespace among the manifests: its objects are scanned as in a namespace without labels")
    }));
    let groups: Vec<String> = SCANNER_GROUPS.iter().map(|g| g.to_string()).collect();

    for (policy_doc, binding_doc) in &bindings {
        let policy = snapshot::compile(policy_doc, std::slice::from_ref(*binding_doc))?;
        for note in &policy.notes {
            if !report.notes.contains(note) {
                report.notes.push(note.clone());
            }
        }
        let actions = validation_actions(binding_doc);
        for doc in &objects {
            let namespace = namespaces
                .get(metadata_str(&doc.object, "namespace"))
                .copied();
            let input = RequestInput {
                object: &doc.object,
                old_object: None,
                operation: Some(crate::eval::Operation::Create),
                resource: None,
                namespace,
                user: SCANNER_USER,
                groups: &groups,
            };
            let decision = decide(&policy, &catalog, &params, &input)?;
            if let Some(message) = violation(&decision) {
                report.violations.push(Violation {
                    policy: policy.name().to_string(),
                    binding: binding_doc.name().to_string(),
                    validation_actions: actions.clone(),
                    object: ObjectRef::of(doc),
                    file: doc.file.clone(),
                    document: doc.position,
                    message,
                });
            }
        }
    }
    report.scanned = objects.len();
    report.bindings = bindings.len();
    write_report(args.output, &report, || report.human(), out)?;
    Ok(if report.violations.is_empty() {
        EXIT_OK
    } else {
        EXIT_FINDINGS
    })
}

/// Each ValidatingAdmissionPolicyBinding with its policy, in the files' order; a binding whose
/// policy the files do not define is an error.
fn bound_policies(docs: &[Document]) -> Result<Vec<(&Document, &Document)>, CliError> {
    let policies: BTreeMap<&str, &Document> = docs
        .iter()
        .filter(|d| PolicyKind::of(d) == Some(PolicyKind::Validating))
        .map(|d| (d.name(), d))
        .collect();
    let mut out = Vec::new();
    for binding in docs
        .iter()
        .filter(|d| PolicyKind::of(d) == Some(PolicyKind::ValidatingBinding))
    {
        let name = binding
            .object
            .pointer("/spec/policyName")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(policy) = policies.get(name) else {
            return Err(binding
                .error(format!(
                    "binding {} binds ValidatingAdmissionPolicy {name:?}, which --policies does not define",
                    binding.name()
                ))
                .into());
        };
        out.push((*policy, binding));
    }
    Ok(out)
}

/// A binding's `spec.validationActions`.
fn validation_actions(binding: &Document) -> Vec<String> {
    binding
        .object
        .pointer("/spec/validationActions")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The message of a decision of one binding whose validations fail, whichever its actions:
/// the denial (Deny, or a policy error under failurePolicy Fail), else the warning (Warn),
/// else the audited failure's message (Audit).
fn violation(decision: &Decision) -> Option<String> {
    let Decision::Validating(report) = decision else {
        return None;
    };
    if let Some(denial) = &report.denial {
        return Some(denial.message.clone());
    }
    if let Some(warning) = report.warnings.first() {
        return Some(warning.clone());
    }
    let audited = report
        .audit_annotations
        .iter()
        .find(|a| a.key == VALIDATION_FAILURE_KEY)?;
    let message = serde_json::from_str::<Vec<Value>>(&audited.value)
        .ok()
        .and_then(|failures| {
            failures
                .first()
                .and_then(|f| f.get("message"))
                .and_then(Value::as_str)
                .map(String::from)
        });
    Some(message.unwrap_or_else(|| audited.value.clone()))
}

#[cfg(test)]
mod tests {
    use celgate_engine::Outcome;
    use celgate_engine::validate::Denial;

    use super::*;
    use crate::documents::parse;
    use crate::eval::report::Report;

    fn decision(outcome: Outcome) -> Decision {
        Decision::Validating(Report::new(outcome, String::new(), Vec::new(), Vec::new()))
    }

    #[test]
    fn a_violation_is_a_denial_a_warning_or_an_audited_failure() {
        assert_eq!(violation(&decision(Outcome::default())), None);
        let denied = Outcome {
            denial: Some(Denial {
                message: "denied".into(),
                reason: "Invalid".into(),
                code: 422,
            }),
            ..Outcome::default()
        };
        assert_eq!(violation(&decision(denied)), Some("denied".into()));
        let warned = Outcome {
            warnings: vec!["warned".into()],
            ..Outcome::default()
        };
        assert_eq!(violation(&decision(warned)), Some("warned".into()));
        let audited = Outcome {
            audit_annotations: vec![
                ("p/replicas".into(), "10".into()),
                (
                    VALIDATION_FAILURE_KEY.into(),
                    r#"[{"message":"too many","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Audit"]}]"#.into(),
                ),
            ],
            ..Outcome::default()
        };
        assert_eq!(violation(&decision(audited)), Some("too many".into()));
        let annotated_only = Outcome {
            audit_annotations: vec![("p/replicas".into(), "10".into())],
            ..Outcome::default()
        };
        assert_eq!(violation(&decision(annotated_only)), None);
    }

    #[test]
    fn bindings_pair_with_their_policy_and_one_without_is_an_error() {
        let text = "\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: b1}
spec: {policyName: p, validationActions: [Deny, Audit]}
---
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: p}
spec: {}
---
apiVersion: admission.celgate.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: m}
spec: {}
";
        let docs = parse("p.yaml", text).expect("parses");
        let bound = bound_policies(&docs).expect("bound");
        let names: Vec<(&str, &str)> = bound.iter().map(|(p, b)| (p.name(), b.name())).collect();
        assert_eq!(names, vec![("p", "b1")]);
        assert_eq!(validation_actions(bound[0].1), vec!["Deny", "Audit"]);

        let orphan = text.replace("policyName: p", "policyName: q");
        let docs = parse("p.yaml", &orphan).expect("parses");
        let err = bound_policies(&docs).expect_err("no policy q");
        assert_eq!(
            err.to_string(),
            "p.yaml, document 1: binding b1 binds ValidatingAdmissionPolicy \"q\", which --policies does not define"
        );
    }
}
