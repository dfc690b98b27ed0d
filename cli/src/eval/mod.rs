//! `celgate eval`: decides one admission request offline, with the webhook's own dispatch over
//! a snapshot built from files, and prints the decision with a trace of every expression (for
//! a ValidatingAdmissionPolicy) or the patch and the mutated object (for a
//! MutatingAdmissionPolicy). [`decide`] is the one path from a request to a decision that
//! `celgate test` and `celgate scan` take too.

pub mod mutation;
pub mod report;
pub mod request;
pub mod snapshot;

use std::path::{Path, PathBuf};

use super::documents::{Document, read_file, read_files};
use super::types::{OfflineKinds, OfflineTypes, read_crds};
use super::{CliError, EXIT_FINDINGS, EXIT_OK, Format, write_report};

pub use request::{Operation, RequestInput};
pub use snapshot::{Bound, Policy};

/// Arguments of `celgate eval`.
#[derive(clap::Args, Debug)]
pub struct EvalArgs {
    /// The ValidatingAdmissionPolicy or MutatingAdmissionPolicy (YAML or JSON;
    /// admission.celgate.io/v1, or admissionregistration.k8s.io v1, v1beta1 or v1alpha1).
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
    /// PolicyExceptions (admission.celgate.io/v1alpha1) to honour, whatever their namespace.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub exceptions: Vec<PathBuf>,
    /// The time the request is decided at (RFC 3339; now by default): exceptions expire by it.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub at: Option<std::time::SystemTime>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: Format,
}

/// An RFC 3339 time (`2027-01-31T00:00:00Z`).
pub fn parse_time(text: &str) -> Result<std::time::SystemTime, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(std::time::SystemTime::from)
        .map_err(|e| format!("{text:?} is not an RFC 3339 time such as 2027-01-31T00:00:00Z: {e}"))
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
    let mut policy = snapshot::load_policy(&args.policy, &args.binding)?;
    snapshot::add_exceptions(&mut policy, &read_files(&args.exceptions)?)?;
    let params = read_files(&args.params)?;
    let catalog = Catalog::for_policy(&policy, &read_crds(&args.crd)?)?;
    let decision = decide(
        &policy,
        &catalog,
        &params,
        &RequestInput {
            object: &object.object,
            old_object: old_object.as_ref().map(|d| &d.object),
            operation: args.operation,
            resource: args.resource.as_deref(),
            namespace: namespace.as_ref().map(|d| &d.object),
            user: &args.user,
            groups: &args.groups,
            at: args.at.unwrap_or_else(std::time::SystemTime::now),
        },
    )?;
    write_report(args.output, &decision, || decision.human(), out)?;
    Ok(if decision.allowed() {
        EXIT_OK
    } else {
        EXIT_FINDINGS
    })
}

/// The kinds a decision needs: the served resources for a validating policy, and the kinds'
/// schemas as well for a mutating one (reading them takes a while).
pub enum Catalog {
    /// The served resources.
    Kinds(OfflineKinds),
    /// The served resources and their kinds' schemas.
    Types(OfflineTypes),
}

impl Catalog {
    /// What `policy` needs, from the built-in kinds and `crds`.
    pub fn for_policy(policy: &Policy, crds: &[Document]) -> Result<Self, CliError> {
        Ok(match policy.bound {
            Bound::Validating(_) => Catalog::Kinds(OfflineKinds::load(crds)?),
            Bound::Mutating(_) => Catalog::Types(OfflineTypes::load(crds)?),
        })
    }

    /// The served resources.
    pub fn kinds(&self) -> &OfflineKinds {
        match self {
            Catalog::Kinds(kinds) => kinds,
            Catalog::Types(types) => &types.kinds,
        }
    }
}

/// A decision with its report: a validating policy's (with the trace of every expression) or
/// a mutating policy's (with the patch and the mutated object).
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub enum Decision {
    /// The decision of a ValidatingAdmissionPolicy.
    Validating(report::Report),
    /// The decision of a MutatingAdmissionPolicy.
    Mutating(mutation::MutationReport),
}

impl Decision {
    /// Whether the request is admitted.
    pub fn allowed(&self) -> bool {
        match self {
            Decision::Validating(r) => r.allowed,
            Decision::Mutating(r) => r.allowed,
        }
    }

    /// The denial, if any.
    pub fn denial(&self) -> Option<&report::DenialRecord> {
        match self {
            Decision::Validating(r) => r.denial.as_ref(),
            Decision::Mutating(r) => r.denial.as_ref(),
        }
    }

    /// The request decided: `OPERATION group/version Kind namespace/name`.
    pub fn request(&self) -> &str {
        match self {
            Decision::Validating(r) => &r.request,
            Decision::Mutating(r) => &r.request,
        }
    }

    /// What the input left to assumption, and what kube-apiserver would reject in it.
    pub fn notes(&self) -> &[String] {
        match self {
            Decision::Validating(r) => &r.notes,
            Decision::Mutating(r) => &r.notes,
        }
    }

    /// The report as text for people.
    pub fn human(&self) -> String {
        match self {
            Decision::Validating(r) => r.human(),
            Decision::Mutating(r) => r.human(),
        }
    }
}

/// Decides one request against `policy` with the webhook's own dispatch, over a snapshot of
/// the policy, its `params` and the request's namespace: what `eval`, `test` and `scan` share.
pub fn decide(
    policy: &Policy,
    catalog: &Catalog,
    params: &[Document],
    input: &RequestInput<'_>,
) -> Result<Decision, CliError> {
    let mut notes = policy.notes.clone();
    let schemas = match (&policy.bound, catalog) {
        (Bound::Validating(_), _) => Default::default(),
        (Bound::Mutating(_), Catalog::Types(types)) => {
            snapshot::schemas(types, input.object, &mut notes)
        }
        (Bound::Mutating(_), Catalog::Kinds(_)) => {
            return Err(CliError::Internal(
                "a mutating policy is decided without its kinds' schemas".into(),
            ));
        }
    };
    let kinds = catalog.kinds();
    let built = request::build(input, kinds)?;
    let request_namespace = if built.namespaced {
        built.namespace.as_str()
    } else {
        ""
    };
    let snapshot = snapshot::build(
        policy,
        kinds,
        schemas,
        params,
        input.namespace,
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
    Ok(match &policy.bound {
        Bound::Validating(_) => {
            let recorder = report::Recorder::default();
            let outcome = celgate_snapshot::dispatch::decide_traced(
                &snapshot, &req, None, &recorder, input.at,
            );
            Decision::Validating(report::Report::new(
                outcome,
                described,
                notes,
                recorder.into_entries(),
            ))
        }
        Bound::Mutating(bound) => {
            let outcome =
                celgate_snapshot::dispatch::decide_mutation(&snapshot, &req, None, None, None);
            Decision::Mutating(mutation::MutationReport::new(
                outcome,
                req.object(),
                bound.policy.mutations.len(),
                described,
                notes,
            ))
        }
    })
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
