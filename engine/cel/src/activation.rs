//! Activations: the variables one evaluation sees. JSON is bound by reference; composited
//! variables are evaluated lazily, at most once per activation.

use std::borrow::Cow;
use std::cell::OnceCell;

use crate::cost::Budget;
use crate::error::EvalError;
use crate::value::Value;

/// The variables of one evaluation.
pub struct Activation<'a> {
    /// Names are borrowed when they can be (Kubernetes' are `'static`): binding allocates
    /// nothing but the list, made once with room for Kubernetes' (at most 7) variables.
    vars: Vec<(Cow<'a, str>, Value<'a>)>,
    composited: Option<Memoized<'a>>,
}

/// A composited variable an activation has evaluated, with what it gave.
#[derive(Debug)]
pub struct EvaluatedVariable<'v, 'a> {
    /// Its position in the variable list.
    pub index: usize,
    /// Its name.
    pub name: &'v str,
    /// Its value, or why it has none.
    pub result: &'v Result<Value<'a>, EvalError>,
    /// The cost its own expression was charged (variables it read are charged separately).
    pub cost: u64,
}

/// Variables an activation evaluates on first use, by index: Kubernetes' composited
/// variables (`variables.<name>`).
pub(crate) trait LazyVariables: Send + Sync {
    /// How many there are.
    fn len(&self) -> usize;
    /// The name of variable `index`.
    fn name(&self, index: usize) -> &str;
    /// Evaluates variable `index` against `act`, charging `budget`; also returns the cost
    /// charged for its own expression.
    fn evaluate<'a>(
        &'a self,
        index: usize,
        act: &Activation<'a>,
        budget: &mut Budget,
    ) -> (Result<Value<'a>, EvalError>, u64);
}

/// A variable's result and the cost its own expression was charged.
type Evaluated<'a> = (Result<Value<'a>, EvalError>, u64);

/// Lazily evaluated variables and the results (with their costs) of those evaluated so far.
struct Memoized<'a> {
    defs: &'a dyn LazyVariables,
    memo: Box<[OnceCell<Evaluated<'a>>]>,
}

/// Room for Kubernetes' variables: `object`, `oldObject`, `request`, `params`,
/// `namespaceObject`, `authorizer` and `authorizer.requestResource`.
const KUBERNETES_VARIABLES: usize = 7;

impl Default for Activation<'_> {
    fn default() -> Self {
        Self {
            vars: Vec::with_capacity(KUBERNETES_VARIABLES),
            composited: None,
        }
    }
}

impl<'a> Activation<'a> {
    /// An empty activation.
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds `name` to a JSON value, borrowed (JSON `null` is CEL `null`).
    #[inline]
    pub fn bind_json(&mut self, name: impl Into<Cow<'a, str>>, v: &'a serde_json::Value) {
        self.bind(name, Value::from_json(v));
    }

    /// Binds `name` to a value (replacing an earlier binding).
    #[inline]
    pub fn bind(&mut self, name: impl Into<Cow<'a, str>>, v: Value<'a>) {
        let name = name.into();
        match self.vars.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = v,
            None => self.vars.push((name, v)),
        }
    }

    /// Binds variables evaluated on first use and memoised for the life of this activation;
    /// each one's cost is charged to the budget of the evaluation that first uses it.
    pub(crate) fn bind_lazy(&mut self, defs: &'a dyn LazyVariables) {
        let memo = (0..defs.len()).map(|_| OnceCell::new()).collect();
        self.composited = Some(Memoized { defs, memo });
    }

    /// The value bound to `name`.
    pub fn get(&self, name: &str) -> Option<&Value<'a>> {
        self.vars.iter().find(|(n, _)| &**n == name).map(|(_, v)| v)
    }

    /// The value of composited variable `index`, evaluating it if needed.
    pub(crate) fn composited(
        &self,
        index: usize,
        budget: &mut Budget,
    ) -> Result<Value<'a>, EvalError> {
        let Some(c) = &self.composited else {
            return Err(EvalError::NoSuchAttribute("variables".into()));
        };
        let Some(cell) = c.memo.get(index) else {
            return Err(EvalError::NoSuchAttribute("variables".into()));
        };
        if let Some((r, _)) = cell.get() {
            return r.clone();
        }
        let (r, cost) = c.defs.evaluate(index, self, budget);
        // The shared budget or cancellation is not a property of the variable: do not memoise
        // it. Any other error is, its per-call limit included: Kubernetes' lazy map keeps it.
        if let Err(e) = &r
            && e.is_fatal()
        {
            return r;
        }
        cell.get_or_init(|| (r, cost)).0.clone()
    }

    /// The composited variables evaluated so far, in declaration order (for tracing tools;
    /// one stopped by the shared budget or cancellation is not listed).
    pub fn evaluated_variables(&self) -> impl Iterator<Item = EvaluatedVariable<'_, 'a>> {
        self.composited.iter().flat_map(|c| {
            c.memo.iter().enumerate().filter_map(|(index, cell)| {
                cell.get().map(|(result, cost)| EvaluatedVariable {
                    index,
                    name: c.defs.name(index),
                    result,
                    cost: *cost,
                })
            })
        })
    }
}
