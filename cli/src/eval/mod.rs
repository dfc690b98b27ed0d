//! `celgate eval`: decides one admission request offline, with the webhook's own dispatch over
//! a snapshot built from files, and prints the decision with a trace of every expression (for
//! a ValidatingAdmissionPolicy) or the patch and the mutated object (for a
//! MutatingAdmissionPolicy).

mod mutation;
mod report;
mod request;
mod snapshot;

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::documents::{Document, read_file, read_files};
use super::types::{OfflineKinds, OfflineTypes, read_crds};
use super::{CliError, EXIT_FINDINGS, EXIT_OK, Format};

pub use request::Operation;

/// Arguments of `celgate eval`.
#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// The ValidatingAdmissionPolicy or MutatingAdmissionPolicy (YAML or JSON;
    /// admissionregistration.k8s.io/v1 or admission.celgate.io/v1).
    #[arg(long, value_name = "FILE")]
    pub policy: PathBuf,
    /// Its bindings, of the matching kind (one or more files, each with one or more
    /// documents).
    #[arg(long, value_name = "FILE", required = true, num_args = 1..)]
    pub binding: Vec<PathBuf>,
    /// The object of the request (for DELETE: the object being deleted).
    #[arg(long, value_name = "FILE")]
    pub object: PathBuf,
    /// The object before an UPDATE.
    #[arg(long, value_name = "FILE")]
    pub old_object: Option<PathBuf>,
    /// Param objects (any kinds; `List`s too). One without a namespace, of a namespaced kind,
    /// is placed where the bindings look: their paramRef's namespace, else the request's.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub params: Vec<PathBuf>,
    /// The Namespace object of the request's namespace (its labels drive namespaceSelectors
    /// and `namespaceObject`); without it, the namespace has no labels.
    #[arg(long, value_name = "FILE")]
    pub namespace: Option<PathBuf>,
    /// The operation; CREATE without --old-object, UPDATE with it.
    #[arg(long, value_enum, ignore_case = true)]
    pub operation: Option<Operation>,
    /// CustomResourceDefinition files, for an object or params of custom kinds: the request's
    /// resource and scope are those the CRD serves the object's kind with.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub crd: Vec<PathBuf>,
    /// The request's resource (plural, optionally `/subresource`), in place of the one its
    /// kind is served with; needed for kinds neither built in nor given with --crd.
    #[arg(long, value_name = "RESOURCE")]
    pub resource: Option<String>,
    /// The requesting user's name.
    #[arg(long, default_value = "celgate-eval")]
    pub user: String,
    /// The requesting user's groups.
    #[arg(long = "group", value_name = "GROUP", default_values_t = ["system:authenticated".to_string()])]
    pub groups: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Format,
}

/// The one object of an object file.
fn single_object(path: &Path) -> Result<Document, CliError> {
    let mut docs = read_file(path)?;
    match docs.len() {
        1 => Ok(docs.remove(0)),
        n => Err(CliError::Usage(format!(
            "{} must hold one object, not {n}",
            path.display()
        ))),
    }
}

/// Writes a report in the output format.
fn write_report(
    format: Format,
    report: &impl serde::Serialize,
    human: impl FnOnce() -> String,
    out: &mut dyn std::io::Write,
) -> Result<(), CliError> {
    match format {
        Format::Human => out.write_all(human().as_bytes())?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut *out, report)
                .map_err(|e| CliError::Internal(e.to_string()))?;
            out.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// Runs `celgate eval`; the exit code is 0 when the request is allowed, 1 when denied.
pub fn run(args: &EvalArgs, out: &mut dyn std::io::Write) -> Result<u8, CliError> {
    let object = single_object(&args.object)?;
    let old_object = args.old_object.as_deref().map(single_object).transpose()?;
    let namespace = args.namespace.as_deref().map(single_object).transpose()?;
    if let Some(ns) = &namespace
        && (ns.api_version(), ns.kind()) != ("v1", "Namespace")
    {
        return Err(ns.error("--namespace must be a v1 Namespace").into());
    }
    let policy = snapshot::load_policy(&args.policy, &args.binding)?;
    let params = read_files(&args.params)?;
    let crds = read_crds(&args.crd)?;
    let mut notes = policy.notes.clone();
    // Only mutations need the kind's schema, and reading the schemas takes a while.
    let (kinds, schemas) = match &policy.bound {
        snapshot::Bound::Validating(_) => (OfflineKinds::load(&crds)?, Default::default()),
        snapshot::Bound::Mutating(_) => {
            let types = OfflineTypes::load(&crds)?;
            let schemas = snapshot::schemas(&types, &object.object, &mut notes);
            (types.kinds, schemas)
        }
    };

    let built = request::build(&request::RequestInput {
        object: &object.object,
        old_object: old_object.as_ref().map(|d| &d.object),
        operation: args.operation,
        resource: args.resource.as_deref(),
        namespace_file: namespace.as_ref().map(Document::name),
        user: &args.user,
        groups: &args.groups,
        kinds: &kinds,
    })?;
    let ns_object: Option<&Value> = namespace.as_ref().map(|d| &d.object);
    let request_namespace = if built.namespaced {
        built.namespace.as_str()
    } else {
        ""
    };
    let snapshot = snapshot::build(
        &policy,
        &kinds,
        schemas,
        &params,
        ns_object,
        request_namespace,
        &mut notes,
    );
    let req = celgate_engine::Request::from_json(&built.request)
        .map_err(|e| CliError::Internal(format!("the request built is not valid: {e}")))?;
    if celgate_engine::validate::exempt(&req) {
        notes.push(format!(
            "{} are exempt: no admission policy applies to them",
            req.resource.name
        ));
    }
    if policy.uses_authorizer() {
        notes.push("there is no authorizer offline: expressions that call it fail".into());
    }
    let described = describe(&req);
    let allowed = match &policy.bound {
        snapshot::Bound::Validating(_) => {
            let recorder = report::Recorder::default();
            let outcome =
                celgate_snapshot::dispatch::decide_traced(&snapshot, &req, None, &recorder);
            let report = report::Report::new(outcome, described, notes, recorder.into_entries());
            write_report(args.output, &report, || report.human(), out)?;
            report.allowed
        }
        snapshot::Bound::Mutating(bound) => {
            let outcome =
                celgate_snapshot::dispatch::decide_mutation(&snapshot, &req, None, None, None);
            let report = mutation::MutationReport::new(
                outcome,
                req.object(),
                bound.policy.mutations.len(),
                described,
                notes,
            );
            write_report(args.output, &report, || report.human(), out)?;
            report.allowed
        }
    };
    Ok(if allowed { EXIT_OK } else { EXIT_FINDINGS })
}

/// `OPERATION group/version Kind namespace/name`.
fn describe(req: &celgate_engine::Request<'_>) -> String {
    let gv = match req.kind.group {
        "" => req.kind.version.to_string(),
        g => format!("{g}/{}", req.kind.version),
    };
    let mut name = match req.namespace {
        "" => req.name.to_string(),
        ns => format!("{ns}/{}", req.name),
    };
    if !req.sub_resource.is_empty() {
        name = format!("{name} ({})", req.sub_resource);
    }
    format!("{} {gv} {} {name}", req.operation.as_str(), req.kind.name)
}
