//! Status of PolicyExceptions (leader only): `Active` (True, or False because it expired, its
//! namespace is not one `--exception-namespaces` allows, or a matchCondition does not compile),
//! the requests it let through and when it last did; an `Expired` event when it expires. The
//! writer wakes at the next expiry, so the status says so at that second.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use celgate_crds::{EXCEPTION_API_VERSION, PolicyException, PolicyExceptionStatus};
use celgate_engine::Exception;
use celgate_kinds::convert;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;
use tracing::warn;

use super::FIELD_MANAGER;
use super::conditions::{self, Want};
use super::events::{self, Event, EventType, Publisher};
use crate::controllers::exceptions::{ExceptionNamespaces, ExceptionObjects};
use crate::serving::leader::Leadership;

/// Condition type: whether the exception is honoured now.
pub const ACTIVE: &str = "Active";
/// Reason: the exception's expiresAt has passed.
pub const EXPIRED: &str = "Expired";
/// Reason: celgate does not honour exceptions of its namespace.
pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
/// Reason: a matchCondition does not compile.
pub const INVALID: &str = "Invalid";

/// The longest the writer sleeps between writes of the counts.
const REFRESH: Duration = Duration::from_secs(30);

/// How many requests each exception (`namespace/name`) let through in this process, and when
/// it last did.
pub type Tally = Arc<dyn Fn() -> HashMap<Arc<str>, (u64, SystemTime)> + Send + Sync>;

/// What an exception's status should say at `now`; `base` is the count it had when this
/// process first saw it, `tally` what this process counted since.
pub fn desired(
    exception: &PolicyException,
    allowed: &ExceptionNamespaces,
    now: SystemTime,
    base: i64,
    tally: Option<(u64, SystemTime)>,
) -> PolicyExceptionStatus {
    let compiled = Exception::compile(convert::policy_exception(exception));
    let namespace = exception.namespace().unwrap_or_default();
    let errors = compiled.compile_errors();
    let want = if !allowed.allows(&namespace) {
        Want {
            type_: ACTIVE,
            status: false,
            reason: NAMESPACE_NOT_ALLOWED,
            message: format!(
                "ignored: celgate honours PolicyExceptions only in the namespaces of --exception-namespaces ({}), not in {namespace}",
                allowed.describe()
            ),
        }
    } else if !errors.is_empty() {
        let list: Vec<String> = errors.iter().map(|(f, e)| format!("{f}: {e}")).collect();
        Want {
            type_: ACTIVE,
            status: false,
            reason: INVALID,
            message: format!("never applies: {}", list.join("; ")),
        }
    } else if compiled.expired_at(now) {
        Want {
            type_: ACTIVE,
            status: false,
            reason: EXPIRED,
            message: format!(
                "expired at {}: the policies it names apply again",
                expiry(exception)
            ),
        }
    } else {
        Want {
            type_: ACTIVE,
            status: true,
            reason: "Active",
            message: match &exception.spec.expires_at {
                Some(at) => format!("honoured until {}", at.0),
                None => "honoured; it never expires".into(),
            },
        }
    };
    let previous = exception.status.as_ref();
    let generation = exception.metadata.generation.unwrap_or_default();
    let now_time = Time(
        Timestamp::try_from(now)
            .ok()
            .and_then(|t| Timestamp::from_second(t.as_second()).ok())
            .unwrap_or_else(|| conditions::now().0),
    );
    let last = tally
        .and_then(|(_, at)| Timestamp::try_from(at).ok())
        .map(|t| Time(Timestamp::from_second(t.as_second()).unwrap_or(t)));
    let counted = tally.map_or(0, |(n, _)| i64::try_from(n).unwrap_or(i64::MAX));
    PolicyExceptionStatus {
        observed_generation: Some(generation),
        excepted_requests: Some(base.saturating_add(counted)),
        last_excepted_time: last.or_else(|| previous.and_then(|p| p.last_excepted_time.clone())),
        conditions: Some(conditions::merge(
            &[want],
            generation,
            previous.and_then(|p| p.conditions.as_deref()),
            &now_time,
        )),
    }
}

/// The exception's expiresAt as written, for messages.
fn expiry(exception: &PolicyException) -> String {
    exception
        .spec
        .expires_at
        .as_ref()
        .map_or_else(String::new, |t| t.0.to_string())
}

/// Whether `status` says the exception expired.
fn says_expired(status: Option<&PolicyExceptionStatus>) -> bool {
    conditions::find(status.and_then(|s| s.conditions.as_deref()), ACTIVE)
        .is_some_and(|c| c.status == "False" && c.reason == EXPIRED)
}

/// How long until the first of `exceptions` that has not expired at `now` expires, at most
/// [`REFRESH`].
fn next_wake(exceptions: &[PolicyException], now: SystemTime) -> Duration {
    exceptions
        .iter()
        .filter_map(|e| e.spec.expires_at.as_ref())
        .filter_map(|t| SystemTime::from(t.0).duration_since(now).ok())
        .filter(|d| !d.is_zero())
        .min()
        .map_or(REFRESH, |d| d.min(REFRESH))
}

/// Writes the status of every PolicyException on `objects` while this replica leads, until the
/// process stops: on every change, at each expiry and every [`REFRESH`] for the counts.
pub async fn run(
    client: Client,
    mut objects: watch::Receiver<ExceptionObjects>,
    allowed: ExceptionNamespaces,
    tally: Tally,
    mut leadership: Leadership,
    instance: String,
) {
    let publisher = Publisher::new(client.clone(), FIELD_MANAGER, instance);
    let mut bases: HashMap<String, i64> = HashMap::new();
    loop {
        let now = SystemTime::now();
        let list = objects.borrow_and_update().clone();
        if *leadership.borrow_and_update() {
            let counts = tally();
            for e in list.iter() {
                let uid = e.uid().unwrap_or_default();
                let base = *bases.entry(uid).or_insert_with(|| {
                    e.status
                        .as_ref()
                        .and_then(|s| s.excepted_requests)
                        .unwrap_or(0)
                });
                let id = format!("{}/{}", e.namespace().unwrap_or_default(), e.name_any());
                let want = desired(e, &allowed, now, base, counts.get(id.as_str()).copied());
                if e.status.as_ref() == Some(&want) {
                    continue;
                }
                if let Err(error) = write(&client, e, &want).await {
                    warn!(%error, exception = %id, "cannot write a PolicyException's status");
                    continue;
                }
                if says_expired(Some(&want)) && !says_expired(e.status.as_ref()) {
                    let event = Event {
                        type_: EventType::Warning,
                        reason: EXPIRED.into(),
                        action: "Except".into(),
                        note: format!(
                            "PolicyException {id} expired at {}: the policies it names apply again",
                            expiry(e)
                        ),
                    };
                    events::publish(&publisher, &reference(e), &[event]).await;
                }
            }
        }
        let wait = next_wake(&list, SystemTime::now());
        tokio::select! {
            _ = objects.changed() => {}
            _ = leadership.changed() => {}
            () = tokio::time::sleep(wait) => {}
        }
    }
}

/// Applies `status` to the exception.
async fn write(
    client: &Client,
    exception: &PolicyException,
    status: &PolicyExceptionStatus,
) -> Result<(), kube::Error> {
    let namespace = exception.namespace().unwrap_or_default();
    let body = json!({
        "apiVersion": EXCEPTION_API_VERSION,
        "kind": "PolicyException",
        "metadata": {"name": exception.name_any(), "namespace": namespace},
        "status": serde_json::to_value(status).map_err(kube::Error::SerdeError)?,
    });
    Api::<PolicyException>::namespaced(client.clone(), &namespace)
        .patch_status(
            &exception.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    Ok(())
}

/// The reference of an exception, for its events.
fn reference(exception: &PolicyException) -> ObjectReference {
    ObjectReference {
        api_version: Some(EXCEPTION_API_VERSION.into()),
        kind: Some("PolicyException".into()),
        name: Some(exception.name_any()),
        namespace: exception.namespace(),
        uid: exception.uid(),
        ..ObjectReference::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;
    use celgate_crds::{ExceptedPolicy, MatchCondition, PolicyExceptionSpec};
    use kube::api::ObjectMeta;

    const EXPIRES: i64 = 1_800_000_000;

    fn exception(namespace: &str, condition: &str) -> PolicyException {
        PolicyException {
            metadata: ObjectMeta {
                namespace: Some(namespace.into()),
                name: Some("web".into()),
                generation: Some(2),
                ..Default::default()
            },
            spec: PolicyExceptionSpec {
                policies: vec![ExceptedPolicy {
                    name: "p".into(),
                    bindings: None,
                }],
                match_conditions: Some(vec![MatchCondition {
                    name: "c".into(),
                    expression: condition.into(),
                }]),
                expires_at: Some(Time(Timestamp::from_second(EXPIRES).unwrap())),
                ..Default::default()
            },
            status: None,
        }
    }

    fn active(status: &PolicyExceptionStatus) -> (String, String) {
        let c = conditions::find(status.conditions.as_deref(), ACTIVE).expect("Active");
        (c.status.clone(), c.reason.clone())
    }

    fn at(second: i64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(second).unwrap())
    }

    #[test]
    fn active_until_the_second_it_expires_then_expired() {
        let allowed = ExceptionNamespaces::new(&["team-a".into()]);
        let e = exception("team-a", "true");
        let before = desired(&e, &allowed, at(EXPIRES - 1), 0, None);
        assert_eq!(active(&before), ("True".into(), "Active".into()));
        let after = desired(&e, &allowed, at(EXPIRES), 0, None);
        assert_eq!(active(&after), ("False".into(), EXPIRED.into()));
        assert!(says_expired(Some(&after)) && !says_expired(Some(&before)));
    }

    #[test]
    fn an_exception_of_a_namespace_not_allowed_is_ignored_with_a_condition() {
        let e = exception("team-b", "true");
        let none = desired(&e, &ExceptionNamespaces::default(), at(0), 0, None);
        assert_eq!(
            active(&none),
            ("False".into(), NAMESPACE_NOT_ALLOWED.into())
        );
        let c = conditions::find(none.conditions.as_deref(), ACTIVE).unwrap();
        assert!(
            c.message.contains("--exception-namespaces (none)"),
            "{}",
            c.message
        );
    }

    #[test]
    fn a_condition_that_does_not_compile_is_invalid_and_counts_add_to_the_base() {
        let allowed = ExceptionNamespaces::new(&["*".into()]);
        let broken = desired(&exception("a", "1 +"), &allowed, at(0), 0, None);
        assert_eq!(active(&broken), ("False".into(), INVALID.into()));
        let counted = desired(
            &exception("a", "true"),
            &allowed,
            at(0),
            5,
            Some((3, at(100))),
        );
        assert_eq!(counted.excepted_requests, Some(8));
        assert_eq!(
            counted.last_excepted_time,
            Some(Time(Timestamp::from_second(100).unwrap()))
        );
    }

    #[test]
    fn the_writer_wakes_at_the_next_expiry() {
        let e = exception("a", "true");
        assert_eq!(
            next_wake(std::slice::from_ref(&e), at(EXPIRES - 2)),
            Duration::from_secs(2)
        );
        assert_eq!(next_wake(std::slice::from_ref(&e), at(EXPIRES)), REFRESH);
    }
}
