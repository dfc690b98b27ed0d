//! `celgate check`: type-checks policy files without a cluster, as celgate's status writer
//! checks them in one (upstream's `status.typeChecking` warnings and celgate's additional
//! ones), against the built-in kinds' schemas and CustomResourceDefinitions given as files;
//! with the errors kube-apiserver would reject the objects with, and bindings whose policy
//! none of the files defines.

mod report;

use std::path::PathBuf;

use celgate_crds as api;
use celgate_engine::apivalidation::{
    Environments, validate_binding, validate_mutating_binding, validate_mutating_policy,
    validate_policy,
};
use celgate_engine::typecheck::{check_mutating, check_validating};

use super::defaults::with_defaults;
use super::documents::{Document, InputError, PolicyKind, read_files, typed};
use super::intree::all_converted;
use super::types::{OfflineTypes, is_crd, read_crds};
use super::{CliError, EXIT_FINDINGS, EXIT_OK, Format};
use celgate_kinds::convert;
use report::{ObjectReport, Report};

/// Arguments of `celgate check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Policy files: ValidatingAdmissionPolicies, MutatingAdmissionPolicies and their
    /// bindings (admission.celgate.io/v1, or admissionregistration.k8s.io v1, v1beta1 or
    /// v1alpha1), any number of documents each; CustomResourceDefinitions among them count as --crd.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// CustomResourceDefinition files, for policies that match or take params of custom kinds.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub crd: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Format,
}

/// Runs `celgate check`; the exit code is 0 when no object has a finding, 1 otherwise.
pub fn run(args: &CheckArgs, out: &mut dyn std::io::Write) -> Result<u8, CliError> {
    let docs = all_converted(read_files(&args.files)?)?;
    let mut crds = read_crds(&args.crd)?;
    crds.extend(docs.iter().filter(|d| is_crd(d)).cloned());
    let types = OfflineTypes::load(&crds)?;

    let policies = |kind: PolicyKind| -> Vec<&str> {
        docs.iter()
            .filter(|d| PolicyKind::of(d) == Some(kind))
            .map(Document::name)
            .collect()
    };
    let validating = policies(PolicyKind::Validating);
    let mutating = policies(PolicyKind::Mutating);
    let mut report = Report {
        kubernetes_version: types.kinds.kubernetes_version.clone(),
        ..Report::default()
    };
    for doc in &docs {
        if is_crd(doc) {
            continue;
        }
        let Some(kind) = PolicyKind::of(doc) else {
            report.ignored.push(report::Ignored::of(doc));
            continue;
        };
        let mut object = ObjectReport::of(doc);
        if let Err(e) = check_object(doc, kind, &types, &validating, &mutating, &mut object) {
            object.errors.push(report::Finding {
                field_ref: String::new(),
                message: e,
            });
        }
        report.objects.push(object);
    }
    report.findings = report.objects.iter().map(ObjectReport::findings).sum();
    match args.output {
        Format::Human => out.write_all(report.human().as_bytes())?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, &report)
                .map_err(|e| CliError::Internal(e.to_string()))?;
            out.write_all(b"\n")?;
        }
    }
    Ok(if report.findings == 0 {
        EXIT_OK
    } else {
        EXIT_FINDINGS
    })
}

/// The document as `T`; `Err` is why it cannot be one (a finding of its own).
fn typed_or_message<T: serde::de::DeserializeOwned + serde::Serialize>(
    doc: &Document,
    object: &mut ObjectReport,
) -> Result<T, String> {
    match typed::<T>(doc) {
        Ok((value, unknown)) => {
            object.unknown_fields(&unknown);
            Ok(value)
        }
        Err(InputError::Object { message, .. }) => Err(message),
        Err(other) => Err(other.to_string()),
    }
}

/// Checks one policy or binding into `object`.
fn check_object(
    doc: &Document,
    kind: PolicyKind,
    types: &OfflineTypes,
    validating: &[&str],
    mutating: &[&str],
    object: &mut ObjectReport,
) -> Result<(), String> {
    let envs = Environments::new(celgate_cel::Compatibility::DEFAULT, None);
    let defaulted = with_defaults(kind, &doc.object);
    match kind {
        PolicyKind::Validating => {
            let policy: api::ValidatingAdmissionPolicy = typed_or_message(doc, object)?;
            object.invalid(&validate_policy(&defaulted, &envs));
            object.type_check(check_validating(
                &convert::validating_policy(&policy),
                types,
            ));
        }
        PolicyKind::Mutating => {
            let policy: api::MutatingAdmissionPolicy = typed_or_message(doc, object)?;
            object.invalid(&validate_mutating_policy(&defaulted, &envs));
            object.type_check(check_mutating(&convert::mutating_policy(&policy), types));
        }
        PolicyKind::ValidatingBinding => {
            let binding: api::ValidatingAdmissionPolicyBinding = typed_or_message(doc, object)?;
            object.invalid(&validate_binding(&defaulted));
            let spec = convert::validating_binding(&binding);
            object.policy_exists(&spec.policy_name, validating, "ValidatingAdmissionPolicy");
        }
        PolicyKind::MutatingBinding => {
            let binding: api::MutatingAdmissionPolicyBinding = typed_or_message(doc, object)?;
            object.invalid(&validate_mutating_binding(&defaulted));
            let spec = convert::mutating_binding(&binding);
            object.policy_exists(&spec.policy_name, mutating, "MutatingAdmissionPolicy");
        }
    }
    Ok(())
}
