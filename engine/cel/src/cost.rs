//! Cost accounting: cel-go's runtime cost units, a per-call limit and a budget shared by the
//! expressions of one evaluation batch, plus an optional deadline and cancellation flag.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use crate::error::EvalError;
use crate::value::Value;

/// Kubernetes' per-expression runtime cost limit (`PerCallLimit`).
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// Kubernetes' budget for a validation batch (`RuntimeCELCostBudget`).
pub const RUNTIME_BUDGET: u64 = 10_000_000;
/// Kubernetes' budget for a match-condition batch (`RuntimeCELCostBudgetMatchConditions`).
pub const MATCH_CONDITIONS_BUDGET: u64 = 2_500_000;

/// celgate's bound, in bytes, on how much `replace` and `format` may make strings grow in one
/// batch of expressions (one [`Budget`]): four times the 3 MiB kube-apiserver accepts in a
/// request. Upstream charges them for their input only, so within its cost limits they can
/// build strings of gigabytes; strings built by costed operations (`+`, `join`) stay far below.
pub const STRING_GROWTH_LIMIT: u64 = 4 * 3 * 1024 * 1024;

/// The cost of selecting a field or reading a variable.
pub(crate) const SELECT_COST: u64 = 1;
/// The cost of building a list.
pub(crate) const LIST_CREATE_COST: u64 = 10;
/// The cost of building a map.
pub(crate) const MAP_CREATE_COST: u64 = 30;
/// cel-go's cost of building a message (`Object{…}`, `JSONPatch{…}`).
pub(crate) const STRUCT_CREATE_COST: u64 = 40;
/// How many loop iterations pass between deadline checks (Kubernetes' `CheckFrequency`).
pub(crate) const CHECK_FREQUENCY: u64 = 100;

/// A cost budget. Each [`Program::eval`](crate::Program::eval) may spend at most the per-call
/// limit, and all evaluations sharing the budget together at most `total`.
#[derive(Clone, Debug)]
pub struct Budget {
    per_call: u64,
    remaining: u64,
    /// Bytes `replace` and `format` added to strings so far.
    grown: u64,
    deadline: Option<Instant>,
    cancel: Option<Arc<AtomicBool>>,
}

impl Budget {
    /// A budget with a per-call limit and a total shared by every evaluation using it.
    pub fn new(per_call_limit: u64, total: u64) -> Self {
        Self {
            per_call: per_call_limit,
            remaining: total,
            grown: 0,
            deadline: None,
            cancel: None,
        }
    }

    /// The cost still available.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The per-call limit.
    pub fn per_call_limit(&self) -> u64 {
        self.per_call
    }

    /// Stops evaluation (with [`EvalError::Interrupted`]) once `at` has passed; checked in
    /// comprehension loops.
    pub fn with_deadline(mut self, at: Instant) -> Self {
        self.deadline = Some(at);
        self
    }

    /// Stops evaluation (with [`EvalError::Interrupted`]) once `flag` is set.
    pub fn with_cancel_flag(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    /// Takes `n` from the shared budget.
    pub(crate) fn spend(&mut self, n: u64) -> Result<(), EvalError> {
        if n > self.remaining {
            self.remaining = 0;
            return Err(EvalError::BudgetExhausted);
        }
        self.remaining -= n;
        Ok(())
    }

    /// Records that `function` made strings grow by `n` bytes: an error past
    /// [`STRING_GROWTH_LIMIT`] in all (a call that adds nothing never fails).
    pub(crate) fn grow(&mut self, n: u64, function: &str) -> Result<(), EvalError> {
        if n == 0 {
            return Ok(());
        }
        self.grown = self.grown.saturating_add(n);
        if self.grown > STRING_GROWTH_LIMIT {
            return Err(string_growth_exceeded(function));
        }
        Ok(())
    }

    /// `Err(Interrupted)` if the deadline passed or cancellation was requested.
    pub(crate) fn check_interrupt(&self) -> Result<(), EvalError> {
        if let Some(flag) = &self.cancel
            && flag.load(Ordering::Relaxed)
        {
            return Err(EvalError::Interrupted);
        }
        if let Some(d) = self.deadline
            && Instant::now() >= d
        {
            return Err(EvalError::Interrupted);
        }
        Ok(())
    }
}

impl Default for Budget {
    /// Kubernetes' limits for one validation batch.
    fn default() -> Self {
        Self::new(PER_CALL_LIMIT, RUNTIME_BUDGET)
    }
}

/// The error of `function` making strings grow past [`STRING_GROWTH_LIMIT`].
pub(crate) fn string_growth_exceeded(function: &str) -> EvalError {
    EvalError::StringGrowthExceeded {
        function: function.to_string(),
        limit: STRING_GROWTH_LIMIT,
    }
}

/// Size of a value for cost purposes (cel-go's `actualSize`).
pub(crate) fn actual_size(v: &Value<'_>) -> u64 {
    match v {
        Value::String(s) => s.chars().count() as u64,
        Value::Bytes(b) => b.len() as u64,
        Value::List(l) => l.len() as u64,
        Value::Map(m) => m.len() as u64,
        Value::Optional(Some(v)) => actual_size(v),
        _ => 1,
    }
}

/// `ceil(n * 0.1)`: cel-go's string traversal cost.
pub(crate) fn traversal_cost(n: u64) -> u64 {
    n.div_ceil(10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spending_past_the_total_is_an_error() {
        let mut b = Budget::new(10, 5);
        assert!(b.spend(3).is_ok());
        assert_eq!(b.remaining(), 2);
        assert_eq!(b.spend(3), Err(EvalError::BudgetExhausted));
        assert_eq!(b.remaining(), 0);
    }

    #[test]
    fn growth_is_bounded_in_all_but_adding_nothing_never_fails() {
        let mut b = Budget::default();
        assert!(b.grow(STRING_GROWTH_LIMIT, "replace").is_ok());
        assert!(b.grow(0, "replace").is_ok());
        assert_eq!(b.grow(1, "format"), Err(string_growth_exceeded("format")));
        assert!(b.grow(0, "replace").is_ok());
    }

    #[test]
    fn cancellation_interrupts() {
        let flag = Arc::new(AtomicBool::new(false));
        let b = Budget::new(10, 10).with_cancel_flag(flag.clone());
        assert!(b.check_interrupt().is_ok());
        flag.store(true, Ordering::Relaxed);
        assert_eq!(b.check_interrupt(), Err(EvalError::Interrupted));
    }
}
