//! What `celgate scan` prints: each violation (an object, a policy and binding, the message),
//! the objects it could not scan, and the counts, as text for people or as JSON.

use std::fmt::Write as _;

use serde::Serialize;

use crate::documents::{Document, metadata_str};

/// The whole result of a scan.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScanReport {
    /// Objects scanned: those of the manifests of a kind served.
    pub scanned: usize,
    /// Bindings scanned with.
    pub bindings: usize,
    /// The violations, by binding then object, in the files' order.
    pub violations: Vec<Violation>,
    /// Objects not scanned, and why.
    pub skipped: Vec<Skipped>,
    /// Objects a PolicyException excepts from a binding: not validated by it, not violations.
    pub excepted: Vec<Excepted>,
    /// What kube-apiserver would reject in the policies and bindings.
    pub notes: Vec<String>,
}

/// An object a binding's validations fail for.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    /// The policy.
    pub policy: String,
    /// The binding.
    pub binding: String,
    /// The binding's validationActions: what admission would do (Deny, Warn, Audit).
    pub validation_actions: Vec<String>,
    /// The object.
    pub object: ObjectRef,
    /// Its file.
    pub file: String,
    /// Its position in the file, from 1.
    pub document: usize,
    /// The message admission would give.
    pub message: String,
}

/// An object a PolicyException excepts from a binding.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Excepted {
    /// The policy.
    pub policy: String,
    /// The binding.
    pub binding: String,
    /// The object.
    pub object: ObjectRef,
    /// The exception, as `namespace/name`.
    pub exception: String,
}

/// An object, by kind, namespace and name.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// Its apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its namespace (empty for cluster-scoped objects and those without one).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl ObjectRef {
    /// `namespace/name`, or the name alone without a namespace.
    fn qualified_name(&self) -> String {
        match self.namespace.as_str() {
            "" => self.name.clone(),
            ns => format!("{ns}/{}", self.name),
        }
    }

    /// The reference of a document's object.
    pub fn of(doc: &Document) -> Self {
        ObjectRef {
            api_version: doc.api_version().to_string(),
            kind: doc.kind().to_string(),
            namespace: metadata_str(&doc.object, "namespace").to_string(),
            name: doc.name().to_string(),
        }
    }
}

/// An object the scan could not make a request of.
#[derive(Debug, Serialize)]
pub struct Skipped {
    /// Its file.
    pub file: String,
    /// Its position in the file, from 1.
    pub document: usize,
    /// Why.
    pub reason: String,
}

impl ScanReport {
    /// The report as text for people: a line per violation, then what was not scanned.
    pub fn human(&self) -> String {
        let mut out = String::new();
        for note in &self.notes {
            let _ = writeln!(out, "note: {note}");
        }
        for v in &self.violations {
            let o = &v.object;
            let name = o.qualified_name();
            let _ = writeln!(
                out,
                "{} {} {name} ({}, document {}): policy {}, binding {} [{}]\n  {}",
                o.api_version,
                o.kind,
                v.file,
                v.document,
                v.policy,
                v.binding,
                v.validation_actions.join(", "),
                v.message
            );
        }
        for e in &self.excepted {
            let o = &e.object;
            let _ = writeln!(
                out,
                "excepted: {} {} {}: policy {}, binding {}, by PolicyException {}",
                o.api_version,
                o.kind,
                o.qualified_name(),
                e.policy,
                e.binding,
                e.exception
            );
        }
        for s in &self.skipped {
            let _ = writeln!(
                out,
                "not scanned: {}, document {}: {}",
                s.file, s.document, s.reason
            );
        }
        let _ = writeln!(
            out,
            "{} object(s) scanned with {} binding(s): {} violation(s), {} excepted",
            self.scanned,
            self.bindings,
            self.violations.len(),
            self.excepted.len()
        );
        out
    }
}
