//! Reading Kubernetes objects from YAML or JSON files: every document of a file (`List`s
//! flattened), each remembered with its file and position, and typed as one of celgate's
//! kinds with the fields the type does not know reported, as kube-apiserver's strict field
//! validation reports them.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use thiserror::Error;

/// Why an input file cannot be used.
#[derive(Debug, Error)]
pub enum InputError {
    /// The file cannot be read.
    #[error("cannot read {file}: {source}")]
    Read {
        /// The file as given.
        file: String,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The file is neither YAML nor JSON.
    #[error("{file} is not valid YAML or JSON: {message}")]
    Syntax {
        /// The file as given.
        file: String,
        /// The parser's message.
        message: String,
    },
    /// A file's content is not what it must be.
    #[error("{file}: {message}")]
    Invalid {
        /// The file as given.
        file: String,
        /// What is wrong with it.
        message: String,
    },
    /// A document is not the object it must be.
    #[error("{file}, document {position}: {message}")]
    Object {
        /// The file as given.
        file: String,
        /// The document's position in the file, from 1.
        position: usize,
        /// What is wrong with it.
        message: String,
    },
}

/// One object read from a file.
#[derive(Debug, Clone)]
pub struct Document {
    /// The file as given on the command line.
    pub file: String,
    /// The object's position in the file, from 1 (items of a `List` count one by one).
    pub position: usize,
    /// The object.
    pub object: Value,
    /// The `apiVersion` it was written with, when it was converted to celgate's
    /// ([`crate::intree`]).
    pub converted_from: Option<String>,
}

impl Document {
    /// A string member of the object (`""` when absent).
    fn field(&self, name: &str) -> &str {
        self.object.get(name).and_then(Value::as_str).unwrap_or("")
    }

    /// The object's `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.field("apiVersion")
    }

    /// The object's `kind`.
    pub fn kind(&self) -> &str {
        self.field("kind")
    }

    /// Its `apiVersion` as written and its `kind`, as reports name it.
    pub fn describe(&self) -> String {
        let api_version = self.converted_from.as_deref().unwrap_or(self.api_version());
        format!("{api_version} {}", self.kind())
    }

    /// The object's `metadata.name` (`""` when absent).
    pub fn name(&self) -> &str {
        metadata_str(&self.object, "name")
    }

    /// An error about this document.
    pub fn error(&self, message: impl Into<String>) -> InputError {
        InputError::Object {
            file: self.file.clone(),
            position: self.position,
            message: message.into(),
        }
    }
}

/// A string member of an object's metadata (`""` when absent).
pub fn metadata_str<'v>(object: &'v Value, name: &str) -> &'v str {
    object
        .get("metadata")
        .and_then(|m| m.get(name))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// The path that names standard input.
pub const STDIN: &str = "-";

/// The `apiVersion` of celgate's policy kinds.
pub const CELGATE_API_VERSION: &str = "admission.celgate.io/v1";

/// Every object of a YAML (or JSON) file, or of standard input for `-`: its documents in
/// order, a `List`'s items in its place; empty documents are skipped.
pub fn read_file(path: &Path) -> Result<Vec<Document>, InputError> {
    let (file, text) = if path == Path::new(STDIN) {
        (
            "standard input".to_string(),
            std::io::read_to_string(std::io::stdin()),
        )
    } else {
        (path.display().to_string(), std::fs::read_to_string(path))
    };
    let text = text.map_err(|source| InputError::Read {
        file: file.clone(),
        source,
    })?;
    parse(&file, &text)
}

/// Every object of several files, in order.
pub fn read_files(paths: &[impl AsRef<Path>]) -> Result<Vec<Document>, InputError> {
    let mut out = Vec::new();
    for path in paths {
        out.extend(read_file(path.as_ref())?);
    }
    Ok(out)
}

/// Every object of one file's text.
pub fn parse(file: &str, text: &str) -> Result<Vec<Document>, InputError> {
    let values: Vec<Value> = serde_saphyr::from_multiple(text).map_err(|e| InputError::Syntax {
        file: file.to_string(),
        message: e.to_string(),
    })?;
    let mut out = Vec::new();
    for value in values {
        let items = match value {
            Value::Object(mut o)
                if o.get("kind").and_then(Value::as_str) == Some("List")
                    && o.get("items").is_some_and(Value::is_array) =>
            {
                match o.remove("items") {
                    Some(Value::Array(items)) => items,
                    _ => Vec::new(),
                }
            }
            other => vec![other],
        };
        for object in items {
            let position = out.len() + 1;
            if !object.is_object() {
                return Err(InputError::Object {
                    file: file.to_string(),
                    position,
                    message: "not an object (a mapping with apiVersion and kind)".into(),
                });
            }
            out.push(Document {
                file: file.to_string(),
                position,
                object,
                converted_from: None,
            });
        }
    }
    Ok(out)
}

/// One of the four policy kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// ValidatingAdmissionPolicy.
    Validating,
    /// ValidatingAdmissionPolicyBinding.
    ValidatingBinding,
    /// MutatingAdmissionPolicy.
    Mutating,
    /// MutatingAdmissionPolicyBinding.
    MutatingBinding,
}

impl PolicyKind {
    /// The kind of a document, when it is one of the four in `admission.celgate.io/v1` (in-tree
    /// objects are read converted, [`crate::intree`]).
    pub fn of(doc: &Document) -> Option<PolicyKind> {
        if doc.api_version() != CELGATE_API_VERSION {
            return None;
        }
        PolicyKind::named(doc.kind())
    }

    /// The kind of this name (the same in the in-tree group and celgate's).
    pub fn named(kind: &str) -> Option<PolicyKind> {
        Some(match kind {
            "ValidatingAdmissionPolicy" => PolicyKind::Validating,
            "ValidatingAdmissionPolicyBinding" => PolicyKind::ValidatingBinding,
            "MutatingAdmissionPolicy" => PolicyKind::Mutating,
            "MutatingAdmissionPolicyBinding" => PolicyKind::MutatingBinding,
            _ => return None,
        })
    }
}

/// The document as `T`, with the paths of the fields `T` does not know (which Kubernetes'
/// strict field validation rejects and a lenient decoder drops silently).
pub fn typed<T: DeserializeOwned + Serialize>(
    doc: &Document,
) -> Result<(T, Vec<String>), InputError> {
    let value: T =
        serde_json::from_value(doc.object.clone()).map_err(|e| doc.error(e.to_string()))?;
    let round_trip = serde_json::to_value(&value).map_err(|e| doc.error(e.to_string()))?;
    let mut unknown = Vec::new();
    unknown_fields(&doc.object, &round_trip, "", &mut unknown);
    Ok((value, unknown))
}

/// Collects the paths of members of `input` that `known` (its typed round trip) lacks.
fn unknown_fields(input: &Value, known: &Value, path: &str, out: &mut Vec<String>) {
    match (input, known) {
        (Value::Object(i), Value::Object(k)) => {
            for (key, value) in i {
                let here = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match k.get(key) {
                    Some(known) => unknown_fields(value, known, &here, out),
                    // Null members are dropped by the round trip, not unknown.
                    None if value.is_null() || matches!(key.as_str(), "apiVersion" | "kind") => {}
                    None => out.push(here),
                }
            }
        }
        (Value::Array(i), Value::Array(k)) => {
            for (n, (value, known)) in i.iter().zip(k).enumerate() {
                unknown_fields(value, known, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_lists_and_empty_documents() {
        let text = "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n\
                    apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: b}}\n\
                    - {apiVersion: v1, kind: Secret, metadata: {name: c}}\n";
        let docs = parse("f.yaml", text).expect("parses");
        let seen: Vec<(usize, &str, &str)> = docs
            .iter()
            .map(|d| (d.position, d.kind(), d.name()))
            .collect();
        assert_eq!(
            seen,
            vec![
                (1, "ConfigMap", "a"),
                (2, "Secret", "b"),
                (3, "Secret", "c")
            ]
        );
    }

    #[test]
    fn a_scalar_document_and_bad_syntax_are_errors_that_name_the_file() {
        let err = parse("f.yaml", "just text\n").expect_err("not an object");
        assert_eq!(
            err.to_string(),
            "f.yaml, document 1: not an object (a mapping with apiVersion and kind)"
        );
        let err = parse("g.yaml", "a: [1, 2\n").expect_err("bad YAML");
        assert!(
            err.to_string()
                .starts_with("g.yaml is not valid YAML or JSON: "),
            "{err}"
        );
    }

    #[test]
    fn typed_reports_fields_the_type_does_not_know() {
        let text = r"
apiVersion: admission.celgate.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: p, labelz: {}}
spec:
  failurePolicy: Fail
  paramKind: null
  validations:
  - expression: 'true'
    mesage: typo
";
        let docs = parse("p.yaml", text).expect("parses");
        assert_eq!(PolicyKind::of(&docs[0]), Some(PolicyKind::Validating));
        let (_, unknown) =
            typed::<celgate_crds::ValidatingAdmissionPolicy>(&docs[0]).expect("typed");
        assert_eq!(
            unknown,
            vec!["metadata.labelz", "spec.validations[0].mesage"]
        );
    }
}
