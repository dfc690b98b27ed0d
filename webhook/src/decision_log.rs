//! The decision log: one structured `tracing` line per denial, warning and audited failure
//! of a request (target `celgate::decision`, fields kind, policy, binding, namespace, name,
//! resource, operation, user, `decision=denied|warned|audited`, and the message as the line's
//! message), at most a set number per second; the lines over that rate are counted, not
//! written. The rate limit is a one-second window in one atomic word, so the request path takes
//! no lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;
use serde_json::Value;

/// Which admission a decision is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdmissionKind {
    /// A ValidatingAdmissionPolicy decision.
    Validating,
    /// A MutatingAdmissionPolicy decision.
    Mutating,
}

impl AdmissionKind {
    /// The `kind` label value (metrics) and log field.
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionKind::Validating => "validating",
            AdmissionKind::Mutating => "mutating",
        }
    }
}

/// Decision lines logged per second, at most, and the lines dropped over that rate.
#[derive(Debug)]
pub struct DecisionLog {
    rate: u32,
    epoch: Instant,
    /// The current window: its second since `epoch` (high 32 bits) and the lines written in
    /// it (low 32 bits).
    window: AtomicU64,
    written: Counter,
    dropped: Counter,
}

/// What a decision line records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decided {
    /// The request was denied.
    Denied,
    /// A binding's `Warn` action gave the client a warning.
    Warned,
    /// A binding's `Audit` action recorded a failure in the audit log.
    Audited,
}

impl Decided {
    /// The `decision` field.
    fn as_str(self) -> &'static str {
        match self {
            Decided::Denied => "denied",
            Decided::Warned => "warned",
            Decided::Audited => "audited",
        }
    }
}

/// One decision, as the decision log names it.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    /// What happened.
    pub decided: Decided,
    /// The policy that decided, when one policy did ("" otherwise).
    pub policy: &'a str,
    /// Its binding.
    pub binding: &'a str,
    /// The message answered (or warned, or audited).
    pub message: &'a str,
}

impl<'a> Line<'a> {
    /// A denial answered with `message`, by the (policy, binding) `by` when one is known.
    pub fn denied(by: Option<(&'a str, &'a str)>, message: &'a str) -> Self {
        let (policy, binding) = by.unwrap_or(("", ""));
        Self {
            decided: Decided::Denied,
            policy,
            binding,
            message,
        }
    }
}

impl DecisionLog {
    /// A log of at most `rate` lines per second (0: none), registering its counters of lines
    /// written and dropped into `registry`.
    pub fn register(registry: &mut Registry, rate: u32) -> Self {
        let written = Counter::default();
        let dropped = Counter::default();
        registry.register(
            "decision_log_lines",
            "Decisions (denials, warnings, audited failures) written to the decision log",
            written.clone(),
        );
        registry.register(
            "decision_log_dropped",
            "Decisions not written to the decision log because more than --decision-log-rate came in one second",
            dropped.clone(),
        );
        Self {
            rate,
            epoch: Instant::now(),
            window: AtomicU64::new(0),
            written,
            dropped,
        }
    }

    /// Takes one line from this second's budget: false when the budget is spent.
    fn admit(&self, now: Instant) -> bool {
        let second = now.saturating_duration_since(self.epoch).as_secs() & 0xffff_ffff;
        let mut current = self.window.load(Ordering::Relaxed);
        loop {
            let (window, used) = (current >> 32, current & 0xffff_ffff);
            let next = if window == second {
                if used >= u64::from(self.rate) {
                    return false;
                }
                current + 1
            } else if self.rate == 0 {
                return false;
            } else {
                (second << 32) | 1
            };
            match self.window.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// Logs a `kind` decision of `request` (an AdmissionRequest's members, which name the
    /// object and the user), or counts it as dropped when this second's lines are spent.
    pub fn write(&self, kind: AdmissionKind, request: &Value, line: Line<'_>) {
        if !self.admit(Instant::now()) {
            self.dropped.inc();
            return;
        }
        self.written.inc();
        let resource = request.get("resource");
        let field = |name| text(resource.and_then(|r| r.get(name)));
        let (group, version, plural) = (field("group"), field("version"), field("resource"));
        let subresource = text(request.get("subResource"));
        let resource = match (group.is_empty(), subresource.is_empty()) {
            (true, true) => format!("{version}/{plural}"),
            (true, false) => format!("{version}/{plural}/{subresource}"),
            (false, true) => format!("{group}/{version}/{plural}"),
            (false, false) => format!("{group}/{version}/{plural}/{subresource}"),
        };
        tracing::info!(
            target: "celgate::decision",
            kind = kind.as_str(),
            policy = line.policy,
            binding = line.binding,
            namespace = text(request.get("namespace")),
            name = text(request.get("name")),
            resource = resource.as_str(),
            operation = text(request.get("operation")),
            user = text(request.get("userInfo").and_then(|u| u.get("username"))),
            decision = line.decided.as_str(),
            "{}",
            line.message
        );
    }
}

/// The string `v` holds, or "".
fn text(v: Option<&Value>) -> &str {
    v.and_then(Value::as_str).unwrap_or("")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    fn log(rate: u32) -> (DecisionLog, Registry) {
        let mut registry = Registry::default();
        (DecisionLog::register(&mut registry, rate), registry)
    }

    #[test]
    fn at_most_rate_lines_per_second_are_admitted_and_a_new_second_starts_over() {
        let (log, _) = log(3);
        let t0 = log.epoch + Duration::from_millis(10);
        let admitted: Vec<bool> = (0..5).map(|_| log.admit(t0)).collect();
        assert_eq!(admitted, [true, true, true, false, false]);
        let t1 = log.epoch + Duration::from_millis(1010);
        assert!(log.admit(t1));
        assert!(log.admit(t1));
        assert!(log.admit(t1));
        assert!(!log.admit(t1));
    }

    #[test]
    fn a_rate_of_zero_logs_nothing() {
        let (log, _) = log(0);
        assert!(!log.admit(log.epoch));
        assert!(!log.admit(log.epoch + Duration::from_secs(5)));
    }

    #[test]
    fn denials_over_the_rate_are_counted_as_dropped() {
        let (log, registry) = log(2);
        let request = serde_json::json!({"namespace": "ns", "name": "web",
            "operation": "CREATE", "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "userInfo": {"username": "alice"}});
        let denied = Line::denied(Some(("p", "b")), "no");
        for _ in 0..5 {
            log.write(AdmissionKind::Validating, &request, denied);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        // Five denials within one second (the test runs well inside one, or straddles two
        // windows and then writes up to four).
        let written: u64 = value(&text, "decision_log_lines_total");
        let dropped: u64 = value(&text, "decision_log_dropped_total");
        assert_eq!(written + dropped, 5, "{text}");
        assert!((2..=4).contains(&written), "{text}");
    }

    fn value(text: &str, name: &str) -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap()
            .parse()
            .unwrap()
    }
}
