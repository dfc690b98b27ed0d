//! What `celgate eval` prints: the decision and the trace of every expression, collected from
//! the engine's [`Trace`] hook into owned records, as text for people or as JSON.

use std::cell::RefCell;
use std::fmt::Write as _;

use celgate_cel::Value;
use celgate_engine::Outcome;
use celgate_engine::trace::{Effect, Phase, Skip, Step, StepKind, StepResult, Trace};
use celgate_engine::validate::Denial;
use serde::Serialize;
use serde_json::Value as Json;

/// Longest value shown in the text output, in characters (the JSON output has all of it).
const SHOWN_VALUE_CHARS: usize = 200;

/// One traced expression, owned.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// `matchConditions`, `validations`, `messages` or `auditAnnotations`.
    pub phase: &'static str,
    /// `matchCondition`, `variable`, `validation`, `messageExpression` or `auditAnnotation`.
    pub kind: &'static str,
    /// Position in its list.
    pub index: usize,
    /// Name or key, when the list has them.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The source.
    pub expression: String,
    /// The CEL type of the value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r#type: Option<String>,
    /// The value as JSON, when it has a JSON form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Json>,
    /// The value as CEL prints it, when it has no JSON form (timestamps, durations, bytes…).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value_text: Option<String>,
    /// The evaluation or compile error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// More about the error, when the engine has more than its message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_detail: Option<String>,
    /// The cost charged.
    pub cost: u64,
    /// `passed`, `notMatched`, `failed`, `used`, `ignored` or `error`.
    pub outcome: &'static str,
    /// Why an ignored value was ignored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
}

/// The param an evaluation ran with.
#[derive(Debug, Serialize, PartialEq)]
pub struct ParamRecord {
    /// Its namespace (empty for cluster-scoped kinds).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// One entry of the trace: a binding's evaluation with one param, or a policy or binding
/// that was passed over.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct TraceEntry {
    /// The policy.
    pub policy: String,
    /// The binding (none when the policy itself was passed over).
    pub binding: Option<String>,
    /// The param, when the evaluation had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param: Option<ParamRecord>,
    /// Why it was passed over.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<&'static str>,
    /// The expressions evaluated, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
}

/// Collects the engine's trace.
#[derive(Default)]
pub struct Recorder {
    entries: RefCell<Vec<TraceEntry>>,
}

impl Recorder {
    /// The entries recorded.
    pub fn into_entries(self) -> Vec<TraceEntry> {
        self.entries.into_inner()
    }
}

impl Trace for Recorder {
    fn evaluation(&self, policy: &str, binding: &str, param: Option<&Json>) {
        let param = param.map(|p| ParamRecord {
            namespace: crate::documents::metadata_str(p, "namespace").to_string(),
            name: crate::documents::metadata_str(p, "name").to_string(),
        });
        self.entries.borrow_mut().push(TraceEntry {
            policy: policy.into(),
            binding: Some(binding.into()),
            param,
            skipped: None,
            steps: Vec::new(),
        });
    }

    fn step(&self, step: &Step<'_, '_>) {
        let record = step_record(step);
        if let Some(entry) = self.entries.borrow_mut().last_mut() {
            entry.steps.push(record);
        }
    }

    fn skipped(&self, policy: &str, binding: Option<&str>, why: Skip) {
        self.entries.borrow_mut().push(TraceEntry {
            policy: policy.into(),
            binding: binding.map(Into::into),
            param: None,
            skipped: Some(match why {
                Skip::PolicyNotMatched => "the request is outside the policy's matchConstraints",
                Skip::BindingNotMatched => "the request is outside the binding's matchResources",
                Skip::NoParams => "no param found, and parameterNotFoundAction is Allow",
                Skip::Excepted => "a PolicyException excepts the request (see excepted)",
            }),
            steps: Vec::new(),
        });
    }
}

fn step_record(step: &Step<'_, '_>) -> StepRecord {
    let mut record = StepRecord {
        phase: match step.phase {
            Phase::MatchConditions => "matchConditions",
            Phase::Validations => "validations",
            Phase::Messages => "messages",
            Phase::AuditAnnotations => "auditAnnotations",
        },
        kind: match step.kind {
            StepKind::MatchCondition => "matchCondition",
            StepKind::Variable => "variable",
            StepKind::Validation => "validation",
            StepKind::MessageExpression => "messageExpression",
            StepKind::AuditAnnotation => "auditAnnotation",
        },
        index: step.index,
        name: step.name.to_string(),
        expression: step.expression.to_string(),
        r#type: None,
        value: None,
        value_text: None,
        error: None,
        error_detail: None,
        cost: step.cost,
        outcome: "",
        reason: None,
    };
    match step.result {
        StepResult::Value(v) => {
            record.r#type = Some(v.type_name().to_string());
            match v.to_json() {
                Ok(j) => record.value = Some(j),
                Err(_) => record.value_text = Some(cel_text(v)),
            }
        }
        StepResult::Error(e) => {
            record.error = Some(e.to_string());
            let detail = e.detail();
            if detail != e.to_string() {
                record.error_detail = Some(detail);
            }
        }
        StepResult::NotCompiled(e) => record.error = Some(e.to_string()),
    }
    (record.outcome, record.reason) = match step.effect {
        Effect::Passed => ("passed", None),
        Effect::NotMatched => ("notMatched", None),
        Effect::Failed => ("failed", None),
        Effect::Used => ("used", None),
        Effect::Ignored(why) => ("ignored", Some(why)),
        Effect::Error => ("error", None),
    };
    record
}

/// A value without a JSON form, as CEL would write it.
fn cel_text(v: &Value<'_>) -> String {
    match v {
        Value::Timestamp(t) => format!("timestamp(\"{}\")", t.to_rfc3339()),
        Value::Duration(d) => match d.subsec_nanos() {
            0 => format!("duration(\"{}s\")", d.num_seconds()),
            nanos => format!(
                "duration(\"{}.{:09}s\")",
                d.num_seconds(),
                nanos.unsigned_abs()
            ),
        },
        Value::Bytes(b) => format!("b\"{}\"", b.escape_ascii()),
        Value::Type(t) => format!("type({t})"),
        other => format!("<{}>", other.type_name()),
    }
}

/// The whole result of `celgate eval`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The message of the failed validation, whichever the binding's actions: the denial,
    /// else the warning, else the audited failure's (`celgate scan`).
    #[serde(skip)]
    pub violation: Option<String>,
    /// The denial, if any.
    pub denial: Option<DenialRecord>,
    /// Warnings for the client.
    pub warnings: Vec<String>,
    /// Audit annotations, in order.
    pub audit_annotations: Vec<AnnotationRecord>,
    /// The request decided: `OPERATION group/version Kind namespace/name`.
    pub request: String,
    /// What the input left to assumption, and what kube-apiserver would reject in it.
    pub notes: Vec<String>,
    /// Every binding's evaluation, and what was passed over.
    pub trace: Vec<TraceEntry>,
    /// The bindings a PolicyException excepted the request from.
    pub excepted: Vec<ExceptedRecord>,
}

/// A binding a PolicyException excepted the request from.
#[derive(Debug, Serialize, PartialEq)]
pub struct ExceptedRecord {
    /// The policy.
    pub policy: String,
    /// The binding.
    pub binding: String,
    /// The exception, as `namespace/name`.
    pub exception: String,
}

/// A denial.
#[derive(Debug, Serialize)]
pub struct DenialRecord {
    /// The message.
    pub message: String,
    /// The status reason.
    pub reason: String,
    /// The HTTP code.
    pub code: u16,
}

impl From<Denial> for DenialRecord {
    fn from(d: Denial) -> Self {
        DenialRecord {
            message: d.message,
            reason: d.reason,
            code: d.code,
        }
    }
}

/// An audit annotation.
#[derive(Debug, Serialize)]
pub struct AnnotationRecord {
    /// Its key.
    pub key: String,
    /// Its value.
    pub value: String,
}

impl Report {
    /// The report of an outcome.
    pub fn new(
        outcome: Outcome,
        request: String,
        notes: Vec<String>,
        trace: Vec<TraceEntry>,
    ) -> Self {
        Report {
            violation: celgate_snapshot::audit::violation(&outcome).map(|v| v.message),
            allowed: outcome.allowed(),
            denial: outcome.denial.map(DenialRecord::from),
            warnings: outcome.warnings,
            audit_annotations: outcome
                .audit_annotations
                .into_iter()
                .map(|(key, value)| AnnotationRecord { key, value })
                .collect(),
            excepted: (outcome.excepted.iter())
                .map(|e| ExceptedRecord {
                    policy: e.policy.to_string(),
                    binding: e.binding.to_string(),
                    exception: e.exception.to_string(),
                })
                .collect(),
            request,
            notes,
            trace,
        }
    }

    /// The report as text for people.
    pub fn human(&self) -> String {
        let mut out = verdict(&self.request, &self.notes, self.denial.as_ref());
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        for a in &self.audit_annotations {
            let _ = writeln!(out, "audit annotation: {} = {}", a.key, a.value);
        }
        for e in &self.excepted {
            let _ = writeln!(
                out,
                "excepted: policy {}, binding {} by PolicyException {}",
                e.policy, e.binding, e.exception
            );
        }
        out.push_str("\ntrace:\n");
        if self.trace.is_empty() {
            out.push_str("  no policy applies to the request\n");
        }
        for entry in &self.trace {
            human_entry(&mut out, entry);
        }
        out
    }
}

fn human_entry(out: &mut String, entry: &TraceEntry) {
    let _ = write!(out, "  policy {}", entry.policy);
    if let Some(b) = &entry.binding {
        let _ = write!(out, ", binding {b}");
    }
    if let Some(p) = &entry.param {
        match p.namespace.as_str() {
            "" => {
                let _ = write!(out, ", param {}", p.name);
            }
            ns => {
                let _ = write!(out, ", param {ns}/{}", p.name);
            }
        }
    }
    match entry.skipped {
        Some(why) => {
            let _ = writeln!(out, ": skipped, {why}");
        }
        None => out.push_str(":\n"),
    }
    // Within a phase, the variables it evaluated read best before the expressions using them.
    let mut steps: Vec<&StepRecord> = entry.steps.iter().collect();
    steps.sort_by_key(|s| (phase_rank(s.phase), s.kind != "variable"));
    for s in steps {
        let label = match (s.kind, s.name.as_str()) {
            ("matchCondition", name) => format!("matchConditions[{}] {name}", s.index),
            ("variable", name) => format!("variables.{name} (for {})", s.phase),
            ("validation", _) => format!("validations[{}]", s.index),
            ("messageExpression", _) => format!("validations[{}].messageExpression", s.index),
            (_, key) => format!("auditAnnotations[{}] {key}", s.index),
        };
        let _ = writeln!(out, "    {label}: {}", s.expression);
        let shown = match (&s.value, &s.value_text, &s.error) {
            (Some(v), _, _) => format!("= {}", shorten(&v.to_string())),
            (None, Some(t), _) => format!("= {}", shorten(t)),
            (None, None, Some(e)) => format!("error: {e}"),
            (None, None, None) => String::new(),
        };
        let _ = write!(out, "      {shown}  (cost {}) → {}", s.cost, s.outcome);
        if let Some(r) = s.reason {
            let _ = write!(out, ": {r}");
        }
        out.push('\n');
        if let Some(d) = &s.error_detail {
            let _ = writeln!(out, "      detail: {d}");
        }
    }
}

/// The position of a phase in an evaluation.
fn phase_rank(phase: &str) -> u8 {
    match phase {
        "matchConditions" => 0,
        "validations" => 1,
        "messages" => 2,
        _ => 3,
    }
}

/// `text`, cut to [`SHOWN_VALUE_CHARS`] characters with an ellipsis.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(SHOWN_VALUE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The head of a human report, for either kind: the request, its notes, and whether it was
/// allowed or denied (with the denial).
pub fn verdict(request: &str, notes: &[String], denial: Option<&DenialRecord>) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "request: {request}");
    for note in notes {
        let _ = writeln!(out, "note: {note}");
    }
    match denial {
        None => out.push_str("ALLOWED\n"),
        Some(d) => {
            let _ = writeln!(out, "DENIED ({} {})\n  {}", d.code, d.reason, d.message);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use celgate_cel::value::TypeName;

    use super::*;

    #[test]
    fn values_without_a_json_form_are_written_as_cel_writes_them() {
        let d = chrono::TimeDelta::milliseconds(1500);
        assert_eq!(cel_text(&Value::Duration(d)), "duration(\"1.500000000s\")");
        assert_eq!(
            cel_text(&Value::Duration(chrono::TimeDelta::seconds(90))),
            "duration(\"90s\")"
        );
        assert_eq!(cel_text(&Value::Bytes(Arc::from(&b"a\n"[..]))), "b\"a\\n\"");
        assert_eq!(cel_text(&Value::Type(TypeName::new("int"))), "type(int)");
        assert_eq!(shorten("abc"), "abc");
        let long = "x".repeat(SHOWN_VALUE_CHARS + 5);
        assert_eq!(shorten(&long).chars().count(), SHOWN_VALUE_CHARS + 1);
    }

    #[test]
    fn the_text_report_shows_the_decision_notes_and_passed_over_policies() {
        let recorder = Recorder::default();
        recorder.skipped("p", Some("b"), Skip::BindingNotMatched);
        let report = Report::new(
            Outcome::default(),
            "CREATE v1 ConfigMap default/c".into(),
            vec!["a note".into()],
            recorder.into_entries(),
        );
        assert_eq!(
            report.human(),
            "request: CREATE v1 ConfigMap default/c\nnote: a note\nALLOWED\n\ntrace:\n  \
             policy p, binding b: skipped, the request is outside the binding's matchResources\n"
        );
    }
}
