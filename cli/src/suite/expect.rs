//! A case's expected result against the decision: which expectations the decision does not
//! meet, each with what was expected and what came.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use super::file::Expect;
use crate::eval::Decision;

/// An expectation the decision does not meet.
#[derive(Debug, Serialize, PartialEq)]
pub struct Failure {
    /// `allowed`, `message`, `warnings`, `auditAnnotations`, `object` or `patch`.
    pub expectation: &'static str,
    /// What the case expects.
    pub expected: Value,
    /// What the decision has.
    pub got: Value,
}

/// Why the expectations do not fit the policy: a message for the suite's author.
pub fn misfit(expect: &Expect, mutating: bool) -> Option<&'static str> {
    if expect.allowed && expect.message.is_some() {
        return Some("expect.message is a denial's message: it goes with allowed: false");
    }
    if mutating && (expect.warnings.is_some() || expect.audit_annotations.is_some()) {
        return Some(
            "a MutatingAdmissionPolicy gives no warnings or audit annotations: expect object or patch",
        );
    }
    if !mutating && (expect.object.is_some() || expect.patch.is_some()) {
        return Some(
            "expect.object and expect.patch are a MutatingAdmissionPolicy's: a ValidatingAdmissionPolicy does not mutate",
        );
    }
    None
}

/// The expectations `decision` does not meet, in the order of [`Expect`]'s fields.
pub fn unmet(expect: &Expect, decision: &Decision) -> Vec<Failure> {
    let mut out = Vec::new();
    let denial = decision.denial().map(|d| d.message.as_str());
    if expect.allowed != decision.allowed() {
        out.push(Failure {
            expectation: "allowed",
            expected: json!(verdict(expect.allowed, expect.message.as_deref())),
            got: json!(verdict(decision.allowed(), denial)),
        });
    }
    let mut check = |expectation, expected: Option<Value>, got: Value| {
        if let Some(expected) = expected
            && expected != got
        {
            out.push(Failure {
                expectation,
                expected,
                got,
            });
        }
    };
    check(
        "message",
        expect.message.clone().map(Value::from),
        json!(denial),
    );
    match decision {
        Decision::Validating(report) => {
            check(
                "warnings",
                expect.warnings.as_ref().map(|w| json!(w)),
                json!(report.warnings),
            );
            let annotations: BTreeMap<&str, &str> = report
                .audit_annotations
                .iter()
                .map(|a| (a.key.as_str(), a.value.as_str()))
                .collect();
            check(
                "auditAnnotations",
                expect.audit_annotations.as_ref().map(|a| json!(a)),
                json!(annotations),
            );
        }
        Decision::Mutating(report) => {
            check("object", expect.object.clone(), report.object.clone());
            check(
                "patch",
                expect.patch.as_ref().map(|p| json!(p)),
                json!(report.patch),
            );
        }
    }
    out
}

/// `allowed`, or `denied` with the message when there is one.
fn verdict(allowed: bool, message: Option<&str>) -> String {
    match (allowed, message) {
        (true, _) => "allowed".into(),
        (false, Some(m)) => format!("denied: {m}"),
        (false, None) => "denied".into(),
    }
}
