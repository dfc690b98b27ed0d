//! Events on celgate's objects when what their status says changes: compilation (`Compiled`,
//! `CompileFailed`), the number of type checking warnings (`TypeCheckWarnings`) and readiness
//! (`Ready`, `NotReady`, and `ParamKindForbidden` when the reason becomes that celgate may not
//! read the paramKind, even if the policy was not ready before). Published by the leader only,
//! after the status they describe, each as a new `events.k8s.io/v1` Event.
//!
//! kube-runtime's `Recorder` is not used. To patch a repeat into a series it keeps every event
//! it published for six minutes: about 7 MB after 1,000 policies and bindings first got their
//! status (`make bench-scale`). And a repeat is keyed on the reason, not the note, so a second
//! `Compiled` within those minutes only counted up the first one, whose note still named the
//! old generation. Each event here is an object of its own with its own note.

use celgate_crds::{BindingStatus, PolicyStatus};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as EventObject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tracing::warn;

use super::conditions::{self, READY, truncate};
use super::readiness::{COMPILE_ERROR, PARAM_KIND_FORBIDDEN};

/// The longest event note the API accepts.
const NOTE_MAX_BYTES: usize = 1024;

/// The namespace of events on cluster-scoped objects (as client-go's recorder puts them).
const CLUSTER_EVENTS_NAMESPACE: &str = "default";

/// Whether an event is routine or calls for attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    /// Routine: compiled, ready.
    Normal,
    /// Calls for attention: a compile failure, warnings, not ready.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One event about an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// The machine-readable reason (`Compiled`, `NotReady`, …).
    pub reason: String,
    /// What celgate did (`Compile`, `TypeCheck`, `Enforce`).
    pub action: String,
    /// The human-readable note, at most [`NOTE_MAX_BYTES`].
    pub note: String,
}

/// Writes events as celgate (the reporting controller) from one instance (its identity).
pub struct Publisher {
    client: Client,
    controller: String,
    instance: String,
}

impl Publisher {
    /// A publisher reporting as `controller` from `instance`.
    pub fn new(client: Client, controller: &str, instance: String) -> Self {
        Self {
            client,
            controller: controller.to_string(),
            instance,
        }
    }

    /// The namespace of events about `regarding`: its own, or [`CLUSTER_EVENTS_NAMESPACE`]
    /// for a cluster-scoped object.
    fn namespace(regarding: &ObjectReference) -> &str {
        regarding
            .namespace
            .as_deref()
            .unwrap_or(CLUSTER_EVENTS_NAMESPACE)
    }

    /// The Event object for `event` about `regarding`, observed `now`.
    fn object(&self, event: &Event, regarding: &ObjectReference, now: Timestamp) -> EventObject {
        let name = regarding.name.as_deref().unwrap_or(&self.controller);
        EventObject {
            metadata: ObjectMeta {
                // Unique per object and instant, as client-go names events.
                name: Some(format!("{name}.{:x}", now.as_nanosecond())),
                namespace: Some(Self::namespace(regarding).to_string()),
                ..ObjectMeta::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(event.type_.as_str().to_string()),
            reason: Some(event.reason.clone()),
            action: Some(event.action.clone()),
            note: Some(event.note.clone()),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            ..EventObject::default()
        }
    }
}

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
        note: truncate(&note, NOTE_MAX_BYTES),
        action: action.to_string(),
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
pub async fn publish(publisher: &Publisher, object: &ObjectReference, events: &[Event]) {
    for event in events {
        let body = publisher.object(event, object, Timestamp::now());
        let api: Api<EventObject> =
            Api::namespaced(publisher.client.clone(), Publisher::namespace(object));
        if let Err(error) = api.create(&PostParams::default(), &body).await {
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

    #[tokio::test]
    async fn an_event_is_about_the_object_reported_by_this_instance_and_named_uniquely() {
        let (client, _api) = crate::fixtures::pair();
        let publisher = Publisher::new(client, "celgate", "celgate-0".into());
        let regarding = ObjectReference {
            api_version: Some("admission.celgate.io/v1".into()),
            kind: Some("ValidatingAdmissionPolicy".into()),
            name: Some("p".into()),
            ..ObjectReference::default()
        };
        let event = changes(&Observed::default(), &observed(1, Some("boom"), 0, false))
            .into_iter()
            .next()
            .unwrap();
        let now = Timestamp::from_nanosecond(0x1234_5678_9abc_def0).unwrap();
        let object = serde_json::to_value(publisher.object(&event, &regarding, now)).unwrap();
        assert_eq!(
            object,
            serde_json::json!({
                "apiVersion": "events.k8s.io/v1",
                "kind": "Event",
                "metadata": {"name": "p.123456789abcdef0", "namespace": "default"},
                "eventTime": "2011-07-27T12:07:47.463790Z",
                "type": "Warning",
                "reason": "CompileFailed",
                "action": "Compile",
                "note": "generation 1 does not compile: boom",
                "regarding": {"apiVersion": "admission.celgate.io/v1", "kind": "ValidatingAdmissionPolicy", "name": "p"},
                "reportingController": "celgate",
                "reportingInstance": "celgate-0"
            })
        );
        let later = Timestamp::from_nanosecond(0x1234_5678_9abc_def1).unwrap();
        assert_ne!(
            publisher.object(&event, &regarding, later).metadata.name,
            Some("p.123456789abcdef0".into())
        );
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
            events[1].note,
            "2 type checking warning(s); see status.typeChecking"
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
            events[0].note,
            "celgate may not list nopes.example.invalid (RBAC: …)"
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
