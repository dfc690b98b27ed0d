//! `celgate scan`: the would-be violations of manifests, or of a cluster's objects. For every
//! ValidatingAdmissionPolicy binding and every object, decides by [`crate::eval::decide`] a
//! CREATE of the object by the audit's scanner identity ([`celgate_snapshot::audit`]), with no
//! oldObject, as the question "would this object be admitted if it were created now?", and
//! reports each binding whose validations fail: denied (Deny), warned (Warn) or audited (Audit).

mod cluster;
mod report;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use self::report::{Excepted, ObjectRef, ScanReport, Skipped, Violation};
use crate::documents::{Document, PolicyKind, metadata_str, read_files};
use crate::eval::{Catalog, Decision, RequestInput, decide, snapshot};
use crate::intree::all_converted;
use crate::types::{OfflineKinds, read_crds};
use crate::walk::{file_name, files_under};
use crate::{CliError, EXIT_FINDINGS, EXIT_OK, Format, write_report};
use celgate_snapshot::audit::{SCANNER_GROUPS, SCANNER_USER, audited};

/// Arguments of `celgate scan`.
#[derive(clap::Args, Debug)]
pub struct ScanArgs {
    /// Manifest files, or folders searched (with their subfolders) for `.yaml`, `.yml` and
    /// `.json` files: the objects scanned. Namespaces among them give the others' namespaces
    /// their labels.
    #[arg(value_name = "MANIFEST", required_unless_present = "cluster", num_args = 1..)]
    pub manifests: Vec<PathBuf>,
    /// Scan the objects of the cluster in KUBECONFIG instead, read-only: every resource a
    /// CREATE rule of the policies selects, the Namespaces, and (without --params) the
    /// policies' param kinds, listed as celgate's background audit lists them.
    #[arg(long, conflicts_with = "manifests")]
    pub cluster: bool,
    /// ValidatingAdmissionPolicies, their bindings and the PolicyExceptions to honour
    /// (several documents per file; other kinds in these files are passed over).
    #[arg(long, value_name = "FILE", required = true, num_args = 1..)]
    pub policies: Vec<PathBuf>,
    /// Param objects (any kinds; `List`s too).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub params: Vec<PathBuf>,
    /// CustomResourceDefinition files, for objects or params of custom kinds. With --cluster,
    /// the cluster's own are read too (when the kubeconfig's user may list them).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub crd: Vec<PathBuf>,
    /// With --cluster: namespaces whose objects (and the Namespaces themselves) are not
    /// scanned, as the background audit skips them (its defaults: celgate's namespace and
    /// `--excluded-namespaces`).
    #[arg(
        long,
        value_name = "NAMESPACE",
        value_delimiter = ',',
        default_value = "celgate-system,kube-system",
        requires = "cluster"
    )]
    pub excluded_namespaces: Vec<String>,
    /// With --cluster: scan what the background audit skips too: the excluded namespaces'
    /// objects, Secrets, Events, Leases and PolicyReports.
    #[arg(long, requires = "cluster")]
    pub include_excluded: bool,
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
    let policy_docs = all_converted(read_files(&args.policies)?)?;
    let mut notes = Vec::new();
    let mut crds = read_crds(&args.crd)?;
    if args.cluster {
        match cluster::crds() {
            Ok(read) => {
                let given: Vec<String> = crds.iter().map(|c| c.name().to_string()).collect();
                crds.extend(read.into_iter().filter(|c| !given.iter().any(|g| g == c.name())));
            }
            Err(e) => notes.push(format!(
                "the cluster's CustomResourceDefinitions cannot be read ({e}): objects of custom kinds are not scanned unless --crd gives their CRDs"
            )),
        }
    }
    let catalog = Catalog::Kinds(OfflineKinds::load(&crds)?);
    let bindings = bound_policies(&policy_docs)?;
    let compiled = bindings
        .iter()
        .map(|(policy, binding)| {
            let mut compiled = snapshot::compile(policy, std::slice::from_ref(*binding))?;
            snapshot::add_exceptions(&mut compiled, &policy_docs)?;
            Ok((compiled, *binding))
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    let at = std::time::SystemTime::now();
    let (documents, params) = if args.cluster {
        let mut wanted = cluster_reads(&compiled, catalog.kinds(), args.params.is_empty());
        if !args.include_excluded {
            notes.extend(skip_unaudited(&mut wanted));
        }
        let read = cluster::read(catalog.kinds(), &wanted)?;
        let params = if args.params.is_empty() {
            read.params
        } else {
            read_files(&args.params)?
        };
        let mut objects = read.objects;
        if !args.include_excluded {
            notes.extend(skip_excluded(&mut objects, &args.excluded_namespaces));
        }
        (objects, params)
    } else {
        let mut files = Vec::new();
        for path in &args.manifests {
            files.extend(files_under(path, is_manifest)?);
        }
        (read_files(&files)?, read_files(&args.params)?)
    };
    let mut report = ScanReport {
        notes,
        ..ScanReport::default()
    };
    let (objects, unknown): (Vec<Document>, Vec<Document>) = documents.into_iter().partition(|d| {
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
    for (policy, binding_doc) in &compiled {
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
                at,
            };
            let decision = decide(policy, &catalog, &params, &input)?;
            if let crate::eval::Decision::Validating(r) = &decision {
                report.excepted.extend(r.excepted.iter().map(|e| Excepted {
                    policy: e.policy.clone(),
                    binding: e.binding.clone(),
                    object: ObjectRef::of(doc),
                    exception: e.exception.clone(),
                }));
            }
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

/// What a scan of the cluster lists: every resource a CREATE rule of the compiled policies
/// selects and, with `params`, each policy's param kind.
fn cluster_reads<'k>(
    compiled: &[(snapshot::Policy, &Document)],
    kinds: &'k OfflineKinds,
    params: bool,
) -> Vec<cluster::Wanted<'k>> {
    let mut wanted = Vec::new();
    for (policy, _) in compiled {
        let snapshot::Bound::Validating(bound) = &policy.bound else {
            continue;
        };
        if let Some(constraints) = &bound.policy.spec.match_constraints {
            wanted.extend(
                kinds
                    .served()
                    .created_by(constraints)
                    .into_iter()
                    .map(|resource| cluster::Wanted {
                        resource,
                        params: false,
                    }),
            );
        }
        let param = bound.policy.spec.param_kind.as_ref().filter(|_| params);
        if let Some(resource) = param.and_then(|k| kinds.resource_of(&k.api_version, &k.kind)) {
            wanted.push(cluster::Wanted {
                resource,
                params: true,
            });
        }
    }
    wanted
}

/// Leaves out of `wanted` the objects the background audit never lists (its reports, Events,
/// Leases, Secrets); returns a note naming them, if any.
fn skip_unaudited(wanted: &mut Vec<cluster::Wanted<'_>>) -> Option<String> {
    let mut skipped: Vec<String> = Vec::new();
    wanted.retain(|w| {
        let keep = w.params || audited(&w.resource.group, &w.resource.resource, false);
        if !keep && !skipped.contains(&w.resource.resource) {
            skipped.push(w.resource.resource.clone());
        }
        keep
    });
    (!skipped.is_empty()).then(|| {
        format!(
            "not scanned, as the background audit does not list them: {} (--include-excluded scans them)",
            skipped.join(", ")
        )
    })
}

/// Leaves out of `objects` those in `excluded` namespaces and those Namespaces themselves, as
/// the background audit (and admission) skips them; returns a note saying how many, if any.
fn skip_excluded(objects: &mut Vec<Document>, excluded: &[String]) -> Option<String> {
    let before = objects.len();
    objects.retain(|d| {
        let namespace = if (d.api_version(), d.kind()) == ("v1", "Namespace") {
            d.name()
        } else {
            metadata_str(&d.object, "namespace")
        };
        !excluded.iter().any(|e| e == namespace)
    });
    let skipped = before - objects.len();
    (skipped > 0).then(|| {
        format!(
            "{skipped} object(s) in the namespaces the background audit excludes ({}) not scanned (--include-excluded scans them)",
            excluded.join(", ")
        )
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

/// The message of a decision of one binding whose validations fail, whichever its actions
/// ([`celgate_snapshot::audit::violation`]).
fn violation(decision: &Decision) -> Option<String> {
    match decision {
        Decision::Validating(report) => report.violation.clone(),
        Decision::Mutating(_) => None,
    }
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
    fn a_cluster_scan_skips_the_excluded_namespaces_and_those_namespaces() {
        let doc = |object: Value| Document {
            file: cluster::SOURCE.into(),
            position: 1,
            object,
            converted_from: None,
        };
        let mut objects = vec![
            doc(
                serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}),
            ),
            doc(
                serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}),
            ),
            doc(
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "kube-system"}}),
            ),
            doc(
                serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": "team"}}),
            ),
        ];
        let note = skip_excluded(&mut objects, &["kube-system".to_string()]);
        let left: Vec<&str> = objects.iter().map(|d| d.name()).collect();
        assert_eq!(left, ["team", "b"]);
        assert!(note.is_some_and(|n| n.starts_with("2 object(s)")));
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
                    celgate_engine::validate::VALIDATION_FAILURE_KEY.into(),
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
        let docs = all_converted(parse("p.yaml", text).expect("parses")).expect("converts");
        let bound = bound_policies(&docs).expect("bound");
        let names: Vec<(&str, &str)> = bound.iter().map(|(p, b)| (p.name(), b.name())).collect();
        assert_eq!(names, vec![("p", "b1")]);
        assert_eq!(validation_actions(bound[0].1), vec!["Deny", "Audit"]);

        let orphan = text.replace("policyName: p", "policyName: q");
        let docs = all_converted(parse("p.yaml", &orphan).expect("parses")).expect("converts");
        let err = bound_policies(&docs).expect_err("no policy q");
        assert_eq!(
            err.to_string(),
            "p.yaml, document 1: binding b1 binds ValidatingAdmissionPolicy \"q\", which --policies does not define"
        );
    }
}
