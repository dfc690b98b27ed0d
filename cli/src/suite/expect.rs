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
    /// `allowed`, `message`, `warnings`, `auditAnnotations`, `exceptedBy`, `object` or `patch`.
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
    if mutating
        && (expect.warnings.is_some()
            || expect.audit_annotations.is_some()
            || expect.excepted_by.is_some())
    {
        return Some(
            "a MutatingAdmissionPolicy gives no warnings or audit annotations and is never excepted: expect object or patch",
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
            let excepted: Vec<&str> = (report.excepted.iter())
                .map(|e| e.exception.as_str())
                .collect();
            check(
                "exceptedBy",
                expect.excepted_by.as_ref().map(|e| json!(e)),
                json!(excepted),
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

#[cfg(test)]
mod tests {
    use celgate_engine::Outcome;
    use celgate_engine::validate::Denial;

    use super::*;
    use crate::eval::mutation::MutationReport;
    use crate::eval::report::Report;

    fn expect(yaml: &str) -> Expect {
        serde_saphyr::from_str(yaml).expect("an expectation")
    }

    fn validating(
        denial: Option<&str>,
        warnings: &[&str],
        annotations: &[(&str, &str)],
    ) -> Decision {
        let outcome = Outcome {
            denial: denial.map(|m| Denial {
                message: m.into(),
                reason: "Invalid".into(),
                code: 422,
            }),
            warnings: warnings.iter().map(|w| w.to_string()).collect(),
            audit_annotations: annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            checks: Vec::new(),
            excepted: Vec::new(),
        };
        Decision::Validating(Report::new(outcome, String::new(), Vec::new(), Vec::new()))
    }

    fn names(failures: &[Failure]) -> Vec<&str> {
        failures.iter().map(|f| f.expectation).collect()
    }

    #[test]
    fn each_unmet_expectation_is_named_with_what_was_expected_and_what_came() {
        let denied = validating(Some("no"), &["careful"], &[("p/k", "v")]);
        assert_eq!(
            unmet(
                &expect(
                    "{allowed: false, message: 'no', warnings: [careful], auditAnnotations: {p/k: v}}"
                ),
                &denied
            ),
            Vec::new()
        );
        let failures = unmet(
            &expect("{allowed: true, warnings: [], auditAnnotations: {p/k: w}}"),
            &denied,
        );
        assert_eq!(
            names(&failures),
            vec!["allowed", "warnings", "auditAnnotations"]
        );
        assert_eq!(
            failures[0],
            Failure {
                expectation: "allowed",
                expected: json!("allowed"),
                got: json!("denied: no"),
            }
        );
        assert_eq!(failures[1].got, json!(["careful"]));
        assert_eq!(failures[2].got, json!({"p/k": "v"}));
        let failures = unmet(&expect("{allowed: false, message: 'yes'}"), &denied);
        assert_eq!(
            failures,
            vec![Failure {
                expectation: "message",
                expected: json!("yes"),
                got: json!("no"),
            }]
        );
        // What the case leaves out is not checked.
        assert_eq!(unmet(&expect("{allowed: false}"), &denied), Vec::new());
    }

    #[test]
    fn a_mutating_decision_is_checked_by_its_object_and_patch() {
        let mutated = Decision::Mutating(MutationReport {
            allowed: true,
            denial: None,
            request: String::new(),
            notes: Vec::new(),
            patch: vec![json!({"op": "add", "path": "/data", "value": {}})],
            object: json!({"data": {}}),
            invocations: Vec::new(),
        });
        assert_eq!(
            unmet(
                &expect(
                    "{allowed: true, object: {data: {}}, patch: [{op: add, path: /data, value: {}}]}"
                ),
                &mutated
            ),
            Vec::new()
        );
        let failures = unmet(
            &expect("{allowed: true, object: {data: {a: b}}, patch: []}"),
            &mutated,
        );
        assert_eq!(names(&failures), vec!["object", "patch"]);
        assert_eq!(failures[0].got, json!({"data": {}}));
    }

    #[test]
    fn expectations_that_do_not_fit_the_policy_are_refused() {
        assert_eq!(misfit(&expect("{allowed: false, message: m}"), false), None);
        assert!(misfit(&expect("{allowed: true, message: m}"), false).is_some());
        assert!(misfit(&expect("{allowed: true, patch: []}"), false).is_some());
        assert!(misfit(&expect("{allowed: true, warnings: []}"), true).is_some());
        assert_eq!(misfit(&expect("{allowed: true, object: {}}"), true), None);
    }
}
