//! `celgate test`: runs policy test suites offline. Each suite file names a policy, its
//! bindings, params, namespaces and CRDs, and cases: a request and its expected result. Every
//! case is decided by [`crate::eval::decide`], as `celgate eval` decides, and its expectations
//! are compared with the decision.

mod expect;
mod file;
mod report;

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use self::file::{CaseFile, Sources};
use self::report::{CaseResult, RunReport, SuiteResult};
use crate::documents::{Document, InputError, PolicyKind, metadata_str};
use crate::eval::{Bound, Catalog, Policy, RequestInput, decide, snapshot};
use crate::intree::all_converted;
use crate::types::is_crd;
use crate::walk::{file_name, files_under};
use crate::{CliError, EXIT_FINDINGS, EXIT_OK};

/// Arguments of `celgate test`.
#[derive(clap::Args, Debug)]
pub struct TestArgs {
    /// Suite files, or folders searched (with their subfolders) for suite files: files named
    /// `celgate-test.yaml` or ending in `.test.yaml` (or `.yml`).
    #[arg(value_name = "PATH", required = true, num_args = 1..)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(
        short = 'o',
        long,
        visible_alias = "format",
        value_enum,
        default_value_t
    )]
    pub output: TestFormat,
}

/// How `celgate test` prints its result.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TestFormat {
    /// Text for people.
    #[default]
    Human,
    /// One JSON document.
    Json,
    /// JUnit XML, as CI systems read test results.
    Junit,
}

/// Runs `celgate test`; the exit code is 0 when every case passes, 1 when one fails.
pub fn run(args: &TestArgs, out: &mut dyn std::io::Write) -> Result<u8, CliError> {
    let mut files = Vec::new();
    for path in &args.paths {
        files.extend(suite_files(path)?);
    }
    let suites = files
        .iter()
        .map(|f| run_suite(f))
        .collect::<Result<Vec<_>, _>>()?;
    let report = RunReport::new(suites);
    let text = match args.output {
        TestFormat::Human => report.human(),
        TestFormat::Json => serde_json::to_string_pretty(&report)
            .map(|j| j + "\n")
            .map_err(|e| CliError::Internal(e.to_string()))?,
        TestFormat::Junit => report
            .junit()
            .map_err(|e| CliError::Internal(format!("cannot write JUnit XML: {e}")))?,
    };
    out.write_all(text.as_bytes())?;
    Ok(if report.failed == 0 {
        EXIT_OK
    } else {
        EXIT_FINDINGS
    })
}

/// Whether a file's name makes it a suite file.
fn is_suite_file(path: &Path) -> bool {
    let name = file_name(path);
    ["celgate-test.yaml", "celgate-test.yml"].contains(&name)
        || name.ends_with(".test.yaml")
        || name.ends_with(".test.yml")
}

/// The suite files of a path: the file itself, or the suite files under a folder, sorted.
fn suite_files(path: &Path) -> Result<Vec<PathBuf>, CliError> {
    let found = files_under(path, is_suite_file)?;
    if found.is_empty() {
        return Err(CliError::Usage(format!(
            "{} holds no suite file: name one celgate-test.yaml or <name>.test.yaml",
            path.display()
        )));
    }
    Ok(found)
}

/// The objects of a suite that every case shares.
struct Fixture {
    policy: Policy,
    catalog: Catalog,
    params: Vec<Document>,
    namespaces: Vec<Document>,
}

/// Reads a suite file and runs its cases.
fn run_suite(path: &Path) -> Result<SuiteResult, CliError> {
    let suite = file::read(path)?;
    let sources = Sources { suite: path };
    // The policy's source may hold its bindings as well.
    let (policies, mut bindings): (Vec<Document>, Vec<Document>) =
        all_converted(sources.documents(&suite.policy, "policy")?)?
            .into_iter()
            .partition(|d| {
                matches!(
                    PolicyKind::of(d),
                    Some(PolicyKind::Validating | PolicyKind::Mutating)
                )
            });
    let [policy_doc] = policies.as_slice() else {
        return Err(InputError::Invalid {
            file: path.display().to_string(),
            message: format!(
                "policy must hold one ValidatingAdmissionPolicy or MutatingAdmissionPolicy (and its bindings), not {} policies",
                policies.len()
            ),
        }
        .into());
    };
    bindings.extend(all_converted(sources.all(&suite.bindings, "bindings")?)?);
    let mut policy = snapshot::compile(policy_doc, &bindings)?;
    let mut exceptions: Vec<Document> = bindings
        .iter()
        .filter(|d| snapshot::is_exception(d))
        .cloned()
        .collect();
    exceptions.extend(sources.all(&suite.exceptions, "exceptions")?);
    snapshot::add_exceptions(&mut policy, &exceptions)?;
    let namespaces = sources.all(&suite.namespaces, "namespaces")?;
    if let Some(ns) = namespaces
        .iter()
        .find(|d| (d.api_version(), d.kind()) != ("v1", "Namespace"))
    {
        return Err(ns.error("namespaces must be v1 Namespaces").into());
    }
    let crds = sources.all(&suite.crds, "crds")?;
    if let Some(not_crd) = crds.iter().find(|d| !is_crd(d)) {
        return Err(not_crd
            .error("crds must be CustomResourceDefinitions (apiextensions.k8s.io/v1)")
            .into());
    }
    if suite.cases.is_empty() {
        return Err(InputError::Invalid {
            file: path.display().to_string(),
            message: "the suite has no cases".into(),
        }
        .into());
    }
    let fixture = Fixture {
        catalog: Catalog::for_policy(&policy, &crds)?,
        params: sources.all(&suite.params, "params")?,
        policy,
        namespaces,
    };
    let name = suite.name.unwrap_or_else(|| path.display().to_string());
    let mut cases = Vec::new();
    for (index, case) in suite.cases.iter().enumerate() {
        let result =
            run_case(&fixture, &sources, case, index).map_err(|source| CliError::Case {
                suite: path.display().to_string(),
                case: case.name.clone(),
                source: Box::new(source),
            })?;
        cases.push(result);
    }
    Ok(SuiteResult {
        name,
        file: path.display().to_string(),
        policy: fixture.policy.name().to_string(),
        notes: fixture.policy.notes,
        cases,
    })
}

/// Decides one case's request and compares the decision with its expectations.
fn run_case(
    fixture: &Fixture,
    sources: &Sources<'_>,
    case: &CaseFile,
    index: usize,
) -> Result<CaseResult, CliError> {
    let mutating = matches!(fixture.policy.bound, Bound::Mutating(_));
    if let Some(why) = expect::misfit(&case.expect, mutating) {
        return Err(CliError::Usage(why.into()));
    }
    let field = |name: &str| format!("cases[{index}].{name}");
    let mut object = sources.one(&case.object, &field("object"))?.object;
    let mut old_object = case
        .old_object
        .as_ref()
        .map(|s| sources.one(s, &field("oldObject")))
        .transpose()?
        .map(|d| d.object);
    if let Some(namespace) = &case.namespace {
        place_in(&mut object, namespace)?;
        if let Some(old) = &mut old_object {
            place_in(old, namespace)?;
        }
    }
    let at = match &case.at {
        Some(text) => crate::eval::parse_time(text).map_err(|message| InputError::Invalid {
            file: sources.suite.display().to_string(),
            message: format!("case {:?}: at: {message}", case.name),
        })?,
        None => std::time::SystemTime::now(),
    };
    let namespace_name = metadata_str(&object, "namespace");
    let namespace = fixture
        .namespaces
        .iter()
        .find(|ns| !namespace_name.is_empty() && ns.name() == namespace_name)
        .map(|d| &d.object);
    let decision = decide(
        &fixture.policy,
        &fixture.catalog,
        &fixture.params,
        &RequestInput {
            object: &object,
            old_object: old_object.as_ref(),
            operation: case.operation,
            resource: case.resource.as_deref(),
            namespace,
            user: &case.user_info.username,
            groups: &case.user_info.groups,
            at,
        },
    )?;
    let failures = expect::unmet(&case.expect, &decision);
    Ok(CaseResult {
        name: case.name.clone(),
        request: decision.request().to_string(),
        passed: failures.is_empty(),
        failures,
        notes: decision
            .notes()
            .iter()
            .filter(|n| !fixture.policy.notes.contains(n))
            .cloned()
            .collect(),
    })
}

/// Puts an object without a namespace in `namespace`, as kube-apiserver does with the one of
/// the request's path; an object in another namespace is an error.
fn place_in(object: &mut Value, namespace: &str) -> Result<(), CliError> {
    match metadata_str(object, "namespace") {
        "" => {
            if let Some(map) = object.as_object_mut() {
                let metadata = map.entry("metadata").or_insert_with(|| json!({}));
                if let Some(metadata) = metadata.as_object_mut() {
                    metadata.insert("namespace".into(), json!(namespace));
                }
            }
            Ok(())
        }
        given if given == namespace => Ok(()),
        given => Err(CliError::Usage(format!(
            "namespace {namespace:?} differs from the object's metadata.namespace {given:?}: leave one out"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_files_are_named_celgate_test_or_dot_test() {
        for (name, suite) in [
            ("celgate-test.yaml", true),
            ("a/b/celgate-test.yml", true),
            ("replicas.test.yaml", true),
            ("replicas.test.yml", true),
            ("policy.yaml", false),
            ("test.yaml", false),
            ("celgate-test.json", false),
        ] {
            assert_eq!(is_suite_file(Path::new(name)), suite, "{name}");
        }
    }

    #[test]
    fn a_case_namespace_fills_the_object_and_must_agree_with_it() {
        let mut bare = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        place_in(&mut bare, "team-a").expect("placed");
        assert_eq!(bare["metadata"]["namespace"], "team-a");
        place_in(&mut bare, "team-a").expect("the same namespace");
        let err = place_in(&mut bare, "team-b").expect_err("another namespace");
        assert_eq!(
            err.to_string(),
            "namespace \"team-b\" differs from the object's metadata.namespace \"team-a\": leave one out"
        );
    }
}
