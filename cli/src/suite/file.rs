//! The suite file of `celgate test`: a policy with its bindings, params, namespaces and CRDs,
//! and the cases, each a request and its expected result. Every object is given inline or as a
//! file path, relative to the suite file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::documents::{Document, InputError, read_file};
use crate::eval::Operation;

/// A suite file as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SuiteFile {
    /// The suite's name (the file's path when absent).
    pub name: Option<String>,
    /// The ValidatingAdmissionPolicy or MutatingAdmissionPolicy under test (a file may hold
    /// its bindings too).
    pub policy: Source,
    /// Its bindings.
    #[serde(default)]
    pub bindings: Vec<Source>,
    /// Param objects.
    #[serde(default)]
    pub params: Vec<Source>,
    /// Namespace objects: a case's request gets the one of its namespace.
    #[serde(default)]
    pub namespaces: Vec<Source>,
    /// CustomResourceDefinitions of custom kinds the cases' objects or params are of.
    #[serde(default)]
    pub crds: Vec<Source>,
    /// PolicyExceptions to honour, whatever their namespace (the policy's file may hold
    /// them too).
    #[serde(default)]
    pub exceptions: Vec<Source>,
    /// The cases, in order.
    pub cases: Vec<CaseFile>,
}

/// Objects given inline or as a file (YAML or JSON, relative to the suite file).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Source {
    /// A file's path; every document of the file.
    File(PathBuf),
    /// One object written in the suite.
    Inline(Map<String, Value>),
}

/// One case as written.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CaseFile {
    /// What the case shows.
    pub name: String,
    /// The request's object (for DELETE, the object being deleted).
    pub object: Source,
    /// The object before an UPDATE.
    pub old_object: Option<Source>,
    /// The operation: CREATE without `oldObject`, UPDATE with it, when absent.
    pub operation: Option<Operation>,
    /// The request's namespace, for an object whose metadata has none.
    pub namespace: Option<String>,
    /// The request's resource (`plural` or `plural/subresource`), in place of the one the
    /// object's kind is served with.
    pub resource: Option<String>,
    /// The requesting user.
    #[serde(default)]
    pub user_info: UserInfo,
    /// The time the request is decided at (RFC 3339; now when absent): exceptions expire by it.
    pub at: Option<String>,
    /// The result expected.
    pub expect: Expect,
}

/// The requesting user of a case.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UserInfo {
    /// Its name.
    #[serde(default = "default_username")]
    pub username: String,
    /// Its groups.
    #[serde(default = "default_groups")]
    pub groups: Vec<String>,
}

impl Default for UserInfo {
    fn default() -> Self {
        UserInfo {
            username: default_username(),
            groups: default_groups(),
        }
    }
}

fn default_username() -> String {
    "celgate-test".into()
}

fn default_groups() -> Vec<String> {
    vec!["system:authenticated".into()]
}

/// The result a case expects; what is absent is not checked, except `allowed`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The denial's message, exactly.
    pub message: Option<String>,
    /// The warnings, all of them in order (validating policies).
    pub warnings: Option<Vec<String>>,
    /// The audit annotations, all of them (validating policies).
    pub audit_annotations: Option<BTreeMap<String, String>>,
    /// The PolicyExceptions (`namespace/name`) that excepted the request from a binding, all
    /// of them in order (validating policies); `[]` expects none.
    pub excepted_by: Option<Vec<String>>,
    /// The object after the mutations (mutating policies).
    pub object: Option<Value>,
    /// The JSON patch from the request's object to the mutated one (mutating policies).
    pub patch: Option<Vec<Value>>,
}

/// Reads a suite file.
pub fn read(path: &Path) -> Result<SuiteFile, InputError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| InputError::Read {
        file: file.clone(),
        source,
    })?;
    serde_saphyr::from_str(&text).map_err(|e| InputError::Invalid {
        file,
        message: format!("not a valid suite file (docs/offline.md describes one): {e}"),
    })
}

/// Where a suite's objects are read from: its file's folder, and its own name for inline ones.
pub struct Sources<'a> {
    /// The suite file.
    pub suite: &'a Path,
}

impl Sources<'_> {
    /// The objects of a source; `field` names it in errors (`policy`, `cases[2].object`).
    pub fn documents(&self, source: &Source, field: &str) -> Result<Vec<Document>, InputError> {
        match source {
            Source::File(path) => {
                let dir = self.suite.parent().unwrap_or(Path::new(""));
                read_file(&dir.join(path))
            }
            Source::Inline(object) => Ok(vec![Document {
                file: format!("{} ({field})", self.suite.display()),
                position: 1,
                object: Value::Object(object.clone()),
                converted_from: None,
            }]),
        }
    }

    /// The objects of several sources, in order.
    pub fn all(&self, sources: &[Source], field: &str) -> Result<Vec<Document>, InputError> {
        let mut out = Vec::new();
        for (i, source) in sources.iter().enumerate() {
            out.extend(self.documents(source, &format!("{field}[{i}]"))?);
        }
        Ok(out)
    }

    /// The one object of a source.
    pub fn one(&self, source: &Source, field: &str) -> Result<Document, InputError> {
        let mut docs = self.documents(source, field)?;
        if docs.len() == 1 {
            return Ok(docs.remove(0));
        }
        Err(InputError::Invalid {
            file: self.suite.display().to_string(),
            message: format!("{field} must be one object, not {}", docs.len()),
        })
    }
}
