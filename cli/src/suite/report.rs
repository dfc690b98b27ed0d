//! What `celgate test` prints: every suite's cases, passed or failed with the expectations
//! they did not meet, as text for people, JSON, or JUnit XML.

use std::fmt::Write as _;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde::Serialize;

use super::expect::Failure;

/// The result of every suite run.
#[derive(Debug, Serialize)]
pub struct RunReport {
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
    /// The suites, in the order run.
    pub suites: Vec<SuiteResult>,
}

/// One suite's result.
#[derive(Debug, Serialize)]
pub struct SuiteResult {
    /// Its name.
    pub name: String,
    /// Its file.
    pub file: String,
    /// The policy it tests.
    pub policy: String,
    /// What kube-apiserver would reject in the policy and bindings.
    pub notes: Vec<String>,
    /// Its cases, in order.
    pub cases: Vec<CaseResult>,
}

/// One case's result.
#[derive(Debug, Serialize)]
pub struct CaseResult {
    /// Its name.
    pub name: String,
    /// The request decided: `OPERATION group/version Kind namespace/name`.
    pub request: String,
    /// Whether the decision met every expectation.
    pub passed: bool,
    /// The expectations not met.
    pub failures: Vec<Failure>,
    /// What the case left to assumption (a namespace without labels, …).
    pub notes: Vec<String>,
}

impl RunReport {
    /// The report of these suites, with the cases counted.
    pub fn new(suites: Vec<SuiteResult>) -> Self {
        let cases = || suites.iter().flat_map(|s| &s.cases);
        let passed = cases().filter(|c| c.passed).count();
        let failed = cases().count() - passed;
        RunReport {
            passed,
            failed,
            suites,
        }
    }

    /// The report as text for people: each case on a line, a failed one with what was expected
    /// and what came, and the count.
    pub fn human(&self) -> String {
        let mut out = String::new();
        for suite in &self.suites {
            let _ = writeln!(
                out,
                "suite {} ({}), policy {}",
                suite.name, suite.file, suite.policy
            );
            for note in &suite.notes {
                let _ = writeln!(out, "  note: {note}");
            }
            for case in &suite.cases {
                if case.passed {
                    let _ = writeln!(out, "  ok    {}", case.name);
                    continue;
                }
                let _ = writeln!(out, "  FAIL  {}  ({})", case.name, case.request);
                out.push_str(&failure_text(&case.failures, "        "));
                for note in &case.notes {
                    let _ = writeln!(out, "        note: {note}");
                }
            }
        }
        let _ = writeln!(out, "{} passed, {} failed", self.passed, self.failed);
        out
    }

    /// The report as JUnit XML: a test suite per suite file, a test case per case.
    pub fn junit(&self) -> Result<String, quick_junit::SerializeError> {
        let mut report = Report::new("celgate test");
        for suite in &self.suites {
            let mut junit_suite = TestSuite::new(suite.name.as_str());
            for case in &suite.cases {
                let status = if case.passed {
                    TestCaseStatus::success()
                } else {
                    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
                    let unmet: Vec<&str> = case.failures.iter().map(|f| f.expectation).collect();
                    status
                        .set_message(format!("expectations not met: {}", unmet.join(", ")))
                        .set_description(failure_text(&case.failures, ""));
                    status
                };
                let mut test_case = TestCase::new(case.name.as_str(), status);
                test_case.set_classname(suite.file.as_str());
                junit_suite.add_test_case(test_case);
            }
            report.add_test_suite(junit_suite);
        }
        report.to_string()
    }
}

/// Each failure as `expectation` then `expected:` and `got:` lines, values as JSON.
fn failure_text(failures: &[Failure], indent: &str) -> String {
    let mut out = String::new();
    for f in failures {
        let _ = writeln!(out, "{indent}{}", f.expectation);
        let _ = writeln!(out, "{indent}  expected: {}", f.expected);
        let _ = writeln!(out, "{indent}  got:      {}", f.got);
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn report() -> RunReport {
        let case = |name: &str, failures: Vec<Failure>| CaseResult {
            name: name.into(),
            request: "CREATE v1 ConfigMap default/c".into(),
            passed: failures.is_empty(),
            failures,
            notes: vec!["a note".into()],
        };
        RunReport::new(vec![SuiteResult {
            name: "s".into(),
            file: "s.test.yaml".into(),
            policy: "p".into(),
            notes: Vec::new(),
            cases: vec![
                case("passes", Vec::new()),
                case(
                    "fails",
                    vec![Failure {
                        expectation: "warnings",
                        expected: json!(["w"]),
                        got: json!([]),
                    }],
                ),
            ],
        }])
    }

    #[test]
    fn people_see_each_case_and_what_a_failed_one_expected_and_got() {
        let report = report();
        assert_eq!((report.passed, report.failed), (1, 1));
        assert_eq!(
            report.human(),
            "suite s (s.test.yaml), policy p\n  ok    passes\n  FAIL  fails  (CREATE v1 ConfigMap default/c)\n        warnings\n          expected: [\"w\"]\n          got:      []\n        note: a note\n1 passed, 1 failed\n"
        );
    }

    #[test]
    fn junit_has_a_test_case_per_case_and_a_failure_naming_the_expectation() {
        let xml = report().junit().expect("serializes");
        assert!(
            xml.contains(r#"<testsuite name="s" tests="2" skipped="0" errors="0" failures="1">"#),
            "{xml}"
        );
        assert!(
            xml.contains(r#"<testcase name="passes" classname="s.test.yaml"/>"#),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<failure message=\"expectations not met: warnings\">warnings\n  expected: [&quot;w&quot;]\n  got:      []\n</failure>"
            ),
            "{xml}"
        );
    }
}
