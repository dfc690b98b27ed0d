//! Events on celgate's objects when what their status says changes: compilation (`Compiled`,
//! `CompileFailed`), the number of type checking warnings (`TypeCheckWarnings`) and readiness
//! (`Ready`, `NotReady`, and `ParamKindForbidden` when the reason becomes that celgate may not
//! read the paramKind, even if the policy was not ready before). Published by the leader only,
//! after the status they describe.

use celgate_crds::{BindingStatus, PolicyStatus};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::warn;

use super::conditions::{self, READY, truncate};
use super::readiness::{COMPILE_ERROR, PARAM_KIND_FORBIDDEN};

/// The longest event note the API accepts.
const NOTE_MAX_BYTES: usize = 1024;

/// What events are derived from: the parts of a status they report on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// The generation the status describes.
    pub generation: Option<i64>,
    /// For policies that compile: `Some(errors)` when compilation failed, `Some("")` when it
    /// succeeded; `None` for kinds celgate does not compile or before a first status.
    pub compile_error: Option<String>,
    /// Total type checking warnings (policies only).
    pub warnings: Option<i32>,
    /// The Ready condition's status, reason and message.
    pub ready: Option<(bool, String, String)>,
}

fn ready_of(
    conditions: Option<&[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]>,
) -> Option<(bool, String, String)> {
    conditions::find(conditions, READY)
        .map(|c| (c.status == "True", c.reason.clone(), c.message.clone()))
}

impl Observed {
    /// What a policy's status reports; `compiles` is false for kinds celgate does not compile.
    pub fn policy(status: Option<&PolicyStatus>, compiles: bool) -> Self {
        let Some(status) = status else {
            return Self::default();
        };
        let ready = ready_of(status.conditions.as_deref());
        let compile_error = (compiles && ready.is_some()).then(|| match &ready {
            Some((_, reason, message)) if reason == COMPILE_ERROR => message.clone(),
            _ => String::new(),
        });
        Self {
            generation: status.observed_generation,
            compile_error,
            warnings: status.type_checking.as_ref().and_then(|t| t.warning_count),
            ready,
        }
    }

    /// What a binding's status reports.
    pub fn binding(status: Option<&BindingStatus>) -> Self {
        let Some(status) = status else {
            return Self::default();
        };
        Self {
            generation: status.observed_generation,
            compile_error: None,
            warnings: None,
            ready: ready_of(status.conditions.as_deref()),
        }
    }
}

/// The events that going from `before` to `after` calls for, in the order they happened.
pub fn changes(before: &Observed, after: &Observed) -> Vec<Event> {
    let mut out = Vec::new();
    let event = |type_, reason: &str, action: &str, note: String| Event {
        type_,
        reason: reason.to_string(),
        note: Some(truncate(&note, NOTE_MAX_BYTES)),
        action: action.to_string(),
        secondary: None,
    };
    if let Some(error) = &after.compile_error
        && (before.compile_error.as_ref() != Some(error) || before.generation != after.generation)
    {
        let generation = after.generation.unwrap_or_default();
        out.push(if error.is_empty() {
            event(
                EventType::Normal,
                "Compiled",
                "Compile",
                format!("generation {generation} compiled"),
            )
        } else {
            event(
                EventType::Warning,
                "CompileFailed",
                "Compile",
                format!("generation {generation} does not compile: {error}"),
            )
        });
    }
    if let Some(count) = after.warnings
        && before.warnings.unwrap_or(0) != count
    {
        out.push(if count > 0 {
            event(
                EventType::Warning,
                "TypeCheckWarnings",
                "TypeCheck",
                format!("{count} type checking warning(s); see status.typeChecking"),
            )
        } else {
            event(
                EventType::Normal,
                "TypeCheckWarnings",
                "TypeCheck",
                "no type checking warnings".to_string(),
            )
        });
    }
    if let Some((ready, reason, message)) = &after.ready {
        let flipped = before.ready.as_ref().map(|r| r.0) != Some(*ready);
        // The one not-ready reason an admin must act on outside celgate's objects (RBAC): it is
        // reported whenever it starts, in place of NotReady.
        let newly_forbidden = reason == PARAM_KIND_FORBIDDEN
            && before.ready.as_ref().map(|r| r.1.as_str()) != Some(PARAM_KIND_FORBIDDEN);
        if newly_forbidden {
            out.push(event(
                EventType::Warning,
                PARAM_KIND_FORBIDDEN,
                "Enforce",
                message.clone(),
            ));
        } else if flipped {
            out.push(if *ready {
                event(EventType::Normal, "Ready", "Enforce", message.clone())
            } else {
                event(EventType::Warning, "NotReady", "Enforce", message.clone())
            });
        }
    }
    out
}

/// Publishes `events` about `object`; a failure is logged, never retried (the status holds
/// the same facts).
pub async fn publish(recorder: &Recorder, object: &ObjectReference, events: &[Event]) {
    for event in events {
        if let Err(error) = recorder.publish(event, object).await {
            warn!(%error, name = ?object.name, kind = ?object.kind, reason = %event.reason, "cannot publish an event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(
        generation: i64,
        compile_error: Option<&str>,
        warnings: i32,
        ready: bool,
    ) -> Observed {
        Observed {
            generation: Some(generation),
            compile_error: compile_error.map(str::to_string),
            warnings: Some(warnings),
            ready: Some((ready, "R".into(), "message".into())),
        }
    }

    fn reasons(events: &[Event]) -> Vec<(&str, EventType)> {
        events
            .iter()
            .map(|e| (e.reason.as_str(), e.type_))
            .collect()
    }

    #[test]
    fn a_first_status_reports_compilation_warnings_and_readiness() {
        let events = changes(&Observed::default(), &observed(1, Some(""), 2, true));
        assert_eq!(
            reasons(&events),
            [
                ("Compiled", EventType::Normal),
                ("TypeCheckWarnings", EventType::Warning),
                ("Ready", EventType::Normal)
            ]
        );
        assert_eq!(
            events[1].note.as_deref(),
            Some("2 type checking warning(s); see status.typeChecking")
        );
    }

    #[test]
    fn an_unchanged_status_reports_nothing_and_each_change_its_own_event() {
        let before = observed(1, Some(""), 2, true);
        assert!(changes(&before, &before).is_empty());
        assert_eq!(
            reasons(&changes(&before, &observed(2, Some("bad"), 2, false))),
            [
                ("CompileFailed", EventType::Warning),
                ("NotReady", EventType::Warning)
            ]
        );
        assert_eq!(
            reasons(&changes(&before, &observed(1, Some(""), 0, true))),
            [("TypeCheckWarnings", EventType::Normal)]
        );
        // A new generation that compiles again is reported.
        assert_eq!(
            reasons(&changes(&before, &observed(2, Some(""), 2, true))),
            [("Compiled", EventType::Normal)]
        );
    }

    #[test]
    fn a_param_kind_celgate_may_not_read_is_reported_when_it_starts_even_if_not_ready_before() {
        let not_served = Observed {
            generation: Some(1),
            compile_error: Some(String::new()),
            warnings: Some(0),
            ready: Some((false, "ParamKindNotServed".into(), "not served".into())),
        };
        let forbidden = Observed {
            ready: Some((
                false,
                PARAM_KIND_FORBIDDEN.into(),
                "celgate may not list nopes.example.invalid (RBAC: …)".into(),
            )),
            ..not_served.clone()
        };
        let events = changes(&not_served, &forbidden);
        assert_eq!(
            reasons(&events),
            [(PARAM_KIND_FORBIDDEN, EventType::Warning)]
        );
        assert_eq!(
            events[0].note.as_deref(),
            Some("celgate may not list nopes.example.invalid (RBAC: …)")
        );
        // From no status at all: the one event, not NotReady besides; then nothing while it lasts.
        let first = Observed {
            compile_error: None,
            warnings: None,
            ..forbidden.clone()
        };
        assert_eq!(
            reasons(&changes(&Observed::default(), &first)),
            [(PARAM_KIND_FORBIDDEN, EventType::Warning)]
        );
        assert!(changes(&forbidden, &forbidden).is_empty());
        // Granted: Ready as usual.
        let ready = Observed {
            ready: Some((true, "Enforced".into(), "enforced".into())),
            ..forbidden.clone()
        };
        assert_eq!(
            reasons(&changes(&forbidden, &ready)),
            [("Ready", EventType::Normal)]
        );
    }

    #[test]
    fn bindings_report_readiness_only() {
        let before = Observed {
            generation: Some(1),
            ready: Some((false, "PolicyNotFound".into(), "m".into())),
            ..Observed::default()
        };
        let after = Observed {
            ready: Some((true, "Enforced".into(), "m".into())),
            ..before.clone()
        };
        assert_eq!(
            reasons(&changes(&before, &after)),
            [("Ready", EventType::Normal)]
        );
    }
}
