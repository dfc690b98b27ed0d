//! What `celgate check` prints: per object, its file and position, kind and name, and its
//! findings with their field paths: errors (what kube-apiserver rejects, unknown fields, a
//! binding's missing policy), upstream's type-checking warnings and celgate's additional ones
//! in separate lists, and the kinds checked and skipped.

use std::fmt::Write as _;

use celgate_engine::apivalidation::FieldError;
use celgate_engine::typecheck::{ExpressionWarning, TypeCheckReport};
use serde::Serialize;

use crate::documents::Document;

/// A finding at a field.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The field's path, e.g. `spec.validations[0].expression`.
    pub field_ref: String,
    /// What is wrong.
    pub message: String,
}

impl From<&ExpressionWarning> for Finding {
    fn from(w: &ExpressionWarning) -> Self {
        Finding {
            field_ref: w.field_ref.clone(),
            message: w.warning.clone(),
        }
    }
}

/// A kind or rule not checked against.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Skipped {
    /// The kind or rule.
    pub what: String,
    /// Why.
    pub reason: String,
}

/// The result for one policy or binding.
#[derive(Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectReport {
    /// The file it was read from.
    pub file: String,
    /// Its position in the file, from 1.
    pub document: usize,
    /// Its kind.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// What kube-apiserver would reject, fields the kind does not have, a missing policy.
    pub errors: Vec<Finding>,
    /// Upstream's type-checking warnings, as kube-controller-manager writes them to
    /// `status.typeChecking.expressionWarnings` (ValidatingAdmissionPolicy only).
    pub expression_warnings: Vec<Finding>,
    /// celgate's checks beyond upstream.
    pub additional_warnings: Vec<Finding>,
    /// The kinds checked against (policies only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checked: Vec<String>,
    /// The kinds and rules not checked against.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
}

impl ObjectReport {
    /// An empty report for a document.
    pub fn of(doc: &Document) -> Self {
        ObjectReport {
            file: doc.file.clone(),
            document: doc.position,
            kind: doc.kind().to_string(),
            name: doc.name().to_string(),
            errors: Vec::new(),
            expression_warnings: Vec::new(),
            additional_warnings: Vec::new(),
            checked: Vec::new(),
            skipped: Vec::new(),
        }
    }

    /// Adds fields the kind does not have.
    pub fn unknown_fields(&mut self, paths: &[String]) {
        self.errors.extend(paths.iter().map(|p| Finding {
            field_ref: p.clone(),
            message: format!("unknown field \"{p}\""),
        }));
    }

    /// Adds API validation errors.
    pub fn invalid(&mut self, errors: &[FieldError]) {
        self.errors.extend(errors.iter().map(|e| Finding {
            field_ref: e.field.clone(),
            message: e.to_string(),
        }));
    }

    /// Adds a type-checking result.
    pub fn type_check(&mut self, report: TypeCheckReport) {
        self.expression_warnings = report
            .expression_warnings
            .iter()
            .map(Finding::from)
            .collect();
        self.additional_warnings = report
            .additional_warnings
            .iter()
            .map(Finding::from)
            .collect();
        self.checked = report.checked.iter().map(ToString::to_string).collect();
        self.skipped = report
            .skipped
            .into_iter()
            .map(|s| Skipped {
                what: s.what,
                reason: s.reason,
            })
            .collect();
    }

    /// Adds an error when the bound policy is not among `defined`.
    pub fn policy_exists(&mut self, policy: &str, defined: &[&str], kind: &str) {
        if !defined.contains(&policy) {
            self.errors.push(Finding {
                field_ref: "spec.policyName".into(),
                message: format!(
                    "{kind} {policy:?} is not defined in the files checked; the binding does nothing until it exists"
                ),
            });
        }
    }

    /// How many findings the object has.
    pub fn findings(&self) -> usize {
        self.errors.len() + self.expression_warnings.len() + self.additional_warnings.len()
    }
}

/// An object that is neither a policy, a binding nor a CustomResourceDefinition.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Ignored {
    /// The file.
    pub file: String,
    /// Its position in the file.
    pub document: usize,
    /// Its `apiVersion` and `kind`.
    pub kind: String,
    /// Its name.
    pub name: String,
}

impl Ignored {
    /// The ignored document.
    pub fn of(doc: &Document) -> Self {
        Ignored {
            file: doc.file.clone(),
            document: doc.position,
            kind: doc.describe(),
            name: doc.name().to_string(),
        }
    }
}

/// The whole result of `celgate check`.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The Kubernetes version of the built-in kinds' schemas.
    pub kubernetes_version: String,
    /// Every policy and binding, in file order.
    pub objects: Vec<ObjectReport>,
    /// Other objects, not checked.
    pub ignored: Vec<Ignored>,
    /// The number of findings of all objects.
    pub findings: usize,
}

impl Report {
    /// The report as text for people.
    pub fn human(&self) -> String {
        let mut out = String::new();
        for o in &self.objects {
            let _ = writeln!(
                out,
                "{}, document {}: {} {}",
                o.file, o.document, o.kind, o.name
            );
            let lists = [
                ("error", &o.errors),
                ("warning (as status.typeChecking)", &o.expression_warnings),
                ("warning (celgate, beyond upstream)", &o.additional_warnings),
            ];
            for (label, findings) in lists {
                for f in findings {
                    match f.field_ref.as_str() {
                        "" => {
                            let _ = writeln!(out, "  {label}:");
                        }
                        field => {
                            let _ = writeln!(out, "  {label}: {field}");
                        }
                    }
                    for line in f.message.trim_end().lines() {
                        let _ = writeln!(out, "    {line}");
                    }
                }
            }
            if !o.checked.is_empty() {
                let _ = writeln!(out, "  checked against: {}", o.checked.join("; "));
            }
            for s in &o.skipped {
                let _ = writeln!(out, "  not checked: {}: {}", s.what, s.reason);
            }
            if o.findings() == 0 {
                out.push_str("  ok\n");
            }
        }
        for i in &self.ignored {
            let _ = writeln!(
                out,
                "{}, document {}: {} {}: not a policy or binding, not checked",
                i.file, i.document, i.kind, i.name
            );
        }
        let _ = writeln!(
            out,
            "{} object(s) checked against Kubernetes {} schemas: {} finding(s)",
            self.objects.len(),
            self.kubernetes_version,
            self.findings
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::parse;

    #[test]
    fn the_text_report_separates_upstream_and_celgate_warnings() {
        let docs = parse(
            "p.yaml",
            "apiVersion: admission.celgate.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: p}\n",
        )
        .expect("parses");
        let mut object = ObjectReport::of(&docs[0]);
        object.type_check(TypeCheckReport {
            expression_warnings: vec![ExpressionWarning {
                field_ref: "spec.validations[0].expression".into(),
                warning: "apps/v1, Kind=Deployment: ERROR: one\n | x\n | ^\n".into(),
            }],
            additional_warnings: vec![ExpressionWarning {
                field_ref: "spec.variables[0].expression".into(),
                warning: "apps/v1, Kind=Deployment: ERROR: two\n".into(),
            }],
            ..TypeCheckReport::default()
        });
        object.policy_exists("q", &["p"], "ValidatingAdmissionPolicy");
        assert_eq!(object.findings(), 3);
        let report = Report {
            kubernetes_version: "v1.36.3".into(),
            findings: object.findings(),
            objects: vec![object],
            ignored: Vec::new(),
        };
        assert_eq!(
            report.human(),
            "p.yaml, document 1: ValidatingAdmissionPolicy p\n\
             \x20 error: spec.policyName\n\
             \x20   ValidatingAdmissionPolicy \"q\" is not defined in the files checked; the binding does nothing until it exists\n\
             \x20 warning (as status.typeChecking): spec.validations[0].expression\n\
             \x20   apps/v1, Kind=Deployment: ERROR: one\n\
             \x20    | x\n\
             \x20    | ^\n\
             \x20 warning (celgate, beyond upstream): spec.variables[0].expression\n\
             \x20   apps/v1, Kind=Deployment: ERROR: two\n\
             1 object(s) checked against Kubernetes v1.36.3 schemas: 3 finding(s)\n"
        );
    }
}
