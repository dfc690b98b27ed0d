//! The conditions celgate writes (`Ready` on all four kinds, `TypeChecked` on policies), and
//! how a new condition keeps its `lastTransitionTime` while its status does not change.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// Condition type: whether the generation the status describes is compiled and enforced.
pub const READY: &str = "Ready";
/// Condition type: which kinds the policy was type checked against, and which were skipped.
pub const TYPE_CHECKED: &str = "TypeChecked";

/// The longest condition message the API accepts.
const MESSAGE_MAX_BYTES: usize = 32 * 1024;

/// A condition before its times are set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Want {
    /// Condition type.
    pub type_: &'static str,
    /// True or False.
    pub status: bool,
    /// A CamelCase reason.
    pub reason: &'static str,
    /// What a user reads.
    pub message: String,
}

/// `now`, to the second: the precision the API server keeps, so a condition written now
/// compares equal to the one read back.
pub fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// Cuts `message` to at most `max` bytes on a character boundary, marking the cut.
pub fn truncate(message: &str, max: usize) -> String {
    if message.len() <= max {
        return message.to_string();
    }
    const MARK: &str = " …";
    let mut end = max.saturating_sub(MARK.len());
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &message[..end])
}

/// The conditions for `want` at `generation`: each keeps the `lastTransitionTime` of the
/// `previous` condition of its type when the status is the same, else transitions at `now`.
pub fn merge(
    want: &[Want],
    generation: i64,
    previous: Option<&[Condition]>,
    now: &Time,
) -> Vec<Condition> {
    want.iter()
        .map(|w| {
            let status = if w.status { "True" } else { "False" };
            let last_transition_time = previous
                .into_iter()
                .flatten()
                .find(|c| c.type_ == w.type_ && c.status == status)
                .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
            Condition {
                type_: w.type_.to_string(),
                status: status.to_string(),
                reason: w.reason.to_string(),
                message: truncate(&w.message, MESSAGE_MAX_BYTES),
                observed_generation: Some(generation),
                last_transition_time,
            }
        })
        .collect()
}

/// The condition of `type_` in `conditions`, if any.
pub fn find<'a>(conditions: Option<&'a [Condition]>, type_: &str) -> Option<&'a Condition> {
    conditions.into_iter().flatten().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    fn ready(status: bool, reason: &'static str) -> Want {
        Want {
            type_: READY,
            status,
            reason,
            message: format!("{reason} message"),
        }
    }

    #[test]
    fn a_first_condition_transitions_now() {
        let conditions = merge(&[ready(true, "Enforced")], 3, None, &at(100));
        assert_eq!(conditions.len(), 1);
        let c = &conditions[0];
        assert_eq!(
            (c.type_.as_str(), c.status.as_str(), c.reason.as_str()),
            ("Ready", "True", "Enforced")
        );
        assert_eq!(c.observed_generation, Some(3));
        assert_eq!(c.last_transition_time, at(100));
    }

    #[test]
    fn the_transition_time_stays_while_the_status_stays_and_moves_when_it_changes() {
        let first = merge(&[ready(false, "CompileError")], 1, None, &at(100));
        // Same status, other reason and generation: the time of the transition to False stays.
        let same = merge(
            &[ready(false, "ParamKindNotServed")],
            2,
            Some(&first),
            &at(200),
        );
        assert_eq!(same[0].last_transition_time, at(100));
        assert_eq!(same[0].reason, "ParamKindNotServed");
        assert_eq!(same[0].observed_generation, Some(2));
        // The status changes: it transitions now.
        let flipped = merge(&[ready(true, "Enforced")], 2, Some(&same), &at(300));
        assert_eq!(flipped[0].last_transition_time, at(300));
        // Another type's time is its own.
        let typed = Want {
            type_: TYPE_CHECKED,
            status: true,
            reason: "Checked",
            message: String::new(),
        };
        let both = merge(
            &[ready(true, "Enforced"), typed],
            2,
            Some(&flipped),
            &at(400),
        );
        assert_eq!(both[0].last_transition_time, at(300));
        assert_eq!(both[1].last_transition_time, at(400));
    }

    #[test]
    fn now_has_whole_seconds() {
        assert_eq!(now().0.subsec_nanosecond(), 0);
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("short", 10), "short");
        let cut = truncate("ééééé", 7);
        assert!(cut.len() <= 7, "{cut}");
        assert!(cut.ends_with(" …"));
        assert!(cut.starts_with('é'));
    }
}
