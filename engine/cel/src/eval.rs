//! The evaluator: walks a planned tree over an activation, charging cel-go's runtime cost as it
//! goes, step by step as cel-go's cost observer sees its planned program: variables with their
//! field and index qualifiers are attributes (1 per qualifier, 1 to observe the whole), calls
//! are charged even when an argument failed (errors are values in cel-go), and macros cost what
//! their comprehension expansions cost. Each node kind has its own small function so that stack
//! frames stay small even in unoptimised builds (deep expressions recurse once per nesting
//! level); the larger ones (calls, literals, comprehensions) stay out of line in optimised
//! builds too, so that `eval`, which every node passes through, keeps a small frame.

use std::sync::Arc;

use smallvec::SmallVec;

use crate::activation::Activation;
use crate::cost::{
    Budget, CHECK_FREQUENCY, LIST_CREATE_COST, MAP_CREATE_COST, SELECT_COST, STRUCT_CREATE_COST,
    actual_size, traversal_cost,
};
use crate::error::EvalError;
use crate::json_tape::{TapeEntries, TapeNode};
use crate::literal::{self, Fit, Literal};
use crate::program::{Call, Loop, LoopKind, Node, StructNode};
use crate::registry::{TrackerAssert, type_names};
use crate::value::{
    Key, Layered, List, ListIter, Map, OwnedMap, Str, StructValue, Value, json_get,
};

/// One evaluation of a program: the activation and budget it runs against, the
/// comprehension variables' slots, and the cost and loop iterations counted so far.
pub(crate) struct Evaluation<'r, 'a> {
    act: &'r Activation<'a>,
    budget: &'r mut Budget,
    locals: SmallVec<[Value<'a>; 4]>,
    cost: u64,
    iterations: u64,
    /// Comprehension variables whose first read still owes a cost (`optMap`'s lazily bound
    /// value), by slot.
    pending: Vec<(usize, u64)>,
}

impl<'r, 'a> Evaluation<'r, 'a> {
    pub fn new(act: &'r Activation<'a>, budget: &'r mut Budget, slots: usize) -> Self {
        Self {
            act,
            budget,
            locals: smallvec::smallvec![Value::Null; slots],
            cost: 0,
            iterations: 0,
            pending: Vec::new(),
        }
    }

    /// The cost charged so far.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    fn charge(&mut self, n: u64) -> Result<(), EvalError> {
        if n == 0 {
            return Ok(());
        }
        self.cost = self.cost.saturating_add(n);
        if self.cost > self.budget.per_call_limit() {
            return Err(EvalError::CostLimitExceeded);
        }
        self.budget.spend(n)
    }

    fn tick(&mut self) -> Result<(), EvalError> {
        self.iterations += 1;
        if self.iterations.is_multiple_of(CHECK_FREQUENCY) {
            self.budget.check_interrupt()?;
        }
        Ok(())
    }

    fn set(&mut self, slot: usize, v: Value<'a>) {
        if let Some(s) = self.locals.get_mut(slot) {
            *s = v;
        }
    }

    pub fn eval(&mut self, n: &'a Node) -> Result<Value<'a>, EvalError> {
        match n {
            Node::Const(v) => Ok(v.lend()),
            Node::Folded(f) => {
                let (v, before, after) = &**f;
                self.charge(*before)?;
                self.charge(*after)?;
                Ok(v.lend())
            }
            Node::Global(_)
            | Node::Local(_)
            | Node::Composited(_)
            | Node::Select(..)
            | Node::OptSelect(..)
            | Node::Index(_)
            | Node::OptIndex(_)
            | Node::Cond(_) => {
                // An attribute: its qualifiers cost 1 each, and observing the whole costs 1
                // more unless it is a conditional.
                let r = self.resolve(n);
                self.charge(observe_cost(n))?;
                r
            }
            Node::Has(op, field, message) => self.has(op, field, *message),
            Node::And(args) => self.and(args),
            Node::Or(args) => self.or(args),
            Node::OptOr(args, or_value) => self.opt_or(args, *or_value),
            Node::Eq(args, negate) => self.equals(args, *negate),
            Node::In(args, list_cost) => self.in_op(args, *list_cost),
            Node::SetIn(s) => self.set_in(s),
            Node::Call(call) => self.call(call),
            Node::Matches(m) => self.matches(m),
            Node::List(items, optional) => self.list(items, optional),
            Node::Map(entries) => self.map(entries),
            Node::Struct(s) => self.message(s),
            Node::Comprehension(l) => self.comprehension(l),
            Node::Fail(e) => Err(e.clone()),
        }
    }

    /// Evaluates `n`, keeping a non-fatal error as a value (cel-go evaluates, and charges, the
    /// other arguments of a call even when one of them failed).
    fn eval_soft(&mut self, n: &'a Node) -> Result<Result<Value<'a>, EvalError>, EvalError> {
        match self.eval(n) {
            Err(e) if e.is_fatal() => Err(e),
            r => Ok(r),
        }
    }

    /// Resolves an attribute (a variable and its qualifiers) without the cost of observing it;
    /// any other node is evaluated.
    fn resolve(&mut self, n: &'a Node) -> Result<Value<'a>, EvalError> {
        match n {
            Node::Global(name) => self
                .act
                .get(name)
                .cloned()
                .ok_or_else(|| EvalError::NoSuchAttribute(name.to_string())),
            Node::Local(slot) => {
                if let Some(i) = self.pending.iter().position(|(s, _)| s == slot) {
                    let (_, c) = self.pending.swap_remove(i);
                    self.charge(c)?;
                }
                Ok(self.locals.get(*slot).cloned().unwrap_or(Value::Null))
            }
            Node::Composited(i) => {
                self.charge(SELECT_COST)?;
                self.act.composited(*i, self.budget)
            }
            Node::Select(..) => self.select_path(n),
            Node::OptSelect(op, field) => {
                let v = self.resolve(op)?;
                self.qualify_if_present(v, &Value::String(Str::Shared(field.clone())), true)
            }
            Node::Index(args) => self.index(args, false),
            Node::OptIndex(args) => self.index(args, true),
            Node::Cond(args) => {
                let [c, t, f] = &**args;
                match self.eval(c)? {
                    Value::Bool(true) => self.resolve(t),
                    Value::Bool(false) => self.resolve(f),
                    _ => Err(EvalError::no_such_overload()),
                }
            }
            other => self.eval(other),
        }
    }

    /// A chain of field selections `base.f1.f2…`, walked in a loop: while the value is a JSON
    /// object, each field is looked up in it directly, and a value is made only at the end
    /// (or where the chain leaves JSON objects). Charged as [`Self::select`] charges.
    fn select_path(&mut self, n: &'a Node) -> Result<Value<'a>, EvalError> {
        let mut fields: SmallVec<[(&Arc<str>, bool); 8]> = SmallVec::new();
        let mut base = n;
        while let Node::Select(op, field, message) = base {
            fields.push((field, *message));
            base = op;
        }
        let mut rest = fields.iter().rev();
        // A variable holding a JSON object is read in place, not copied out.
        let bound = match base {
            Node::Global(name) => self.act.get(name),
            Node::Local(slot) if self.pending.is_empty() => self.locals.get(*slot),
            _ => None,
        };
        let mut m = match bound {
            Some(Value::Map(Map::Json(m))) => *m,
            Some(Value::Map(Map::Tape(m))) => return self.select_tape(*m, rest),
            _ => match self.resolve(base)? {
                Value::Map(Map::Json(m)) => m,
                Value::Map(Map::Tape(m)) => return self.select_tape(m, rest),
                v => return self.select_each(v, rest),
            },
        };
        loop {
            let Some((field, _)) = rest.next() else {
                return Ok(Value::Map(Map::Json(m)));
            };
            self.charge(SELECT_COST)?;
            match json_get(m, field) {
                Some(serde_json::Value::Object(o)) => m = o,
                Some(other) if rest.len() == 0 => return Ok(Value::from_json(other)),
                Some(other) => return self.select_each(Value::from_json(other), rest),
                None => return Err(EvalError::NoSuchKey(field.to_string())),
            }
        }
    }

    /// [`Self::select_path`]'s walk through the objects of a [`crate::JsonTape`].
    fn select_tape<'f>(
        &mut self,
        mut m: TapeNode<'a>,
        mut rest: impl ExactSizeIterator<Item = &'f (&'f Arc<str>, bool)>,
    ) -> Result<Value<'a>, EvalError> {
        loop {
            let Some((field, _)) = rest.next() else {
                return Ok(Value::Map(Map::Tape(m)));
            };
            self.charge(SELECT_COST)?;
            match m.get(field) {
                Some(o) if o.is_object() => m = o,
                Some(other) if rest.len() == 0 => return Ok(other.value()),
                Some(other) => return self.select_each(other.value(), rest),
                None => return Err(EvalError::NoSuchKey(field.to_string())),
            }
        }
    }

    /// Selects each of `fields` in turn from `v`.
    fn select_each<'f>(
        &mut self,
        mut v: Value<'a>,
        fields: impl Iterator<Item = &'f (&'f Arc<str>, bool)>,
    ) -> Result<Value<'a>, EvalError> {
        for (field, message) in fields {
            v = self.select(v, field, *message)?;
        }
        Ok(v)
    }

    /// `v.field` (a qualifier costing 1, even when it fails).
    fn select(
        &mut self,
        v: Value<'a>,
        field: &Arc<str>,
        message: bool,
    ) -> Result<Value<'a>, EvalError> {
        if let Value::Optional(_) = v {
            return self.qualify_if_present(v, &Value::String(Str::Shared(field.clone())), false);
        }
        self.charge(SELECT_COST)?;
        match v {
            Value::Map(m) => m
                .get_str(field)
                .ok_or_else(|| EvalError::NoSuchKey(field.to_string())),
            Value::Struct(s) if message => s.select(field),
            // A field name is not a list index.
            Value::List(_) => {
                lookup(&v, &Value::String(Str::Shared(field.clone())))?;
                Err(EvalError::NoSuchKey(field.to_string()))
            }
            _ => Err(EvalError::NoSuchKey(field.to_string())),
        }
    }

    /// An optional qualification: charged only when the key is present. An `explicit` one
    /// (`.?f`, `[?k]`) finds nothing in a value without keys; one that only carries an
    /// optional along (`opt.f`) fails there as a plain selection does.
    fn qualify_if_present(
        &mut self,
        v: Value<'a>,
        key: &Value<'_>,
        explicit: bool,
    ) -> Result<Value<'a>, EvalError> {
        let container = match v {
            Value::Optional(None) => return Ok(Value::Optional(None)),
            Value::Optional(Some(inner)) => (*inner).clone(),
            other => other,
        };
        let found = match (&container, key) {
            (Value::Struct(s), Value::String(field)) => s.opt_select(field)?,
            (Value::Map(_) | Value::List(_), _) => lookup(&container, key)?,
            // Anything else has no keys (cel-go).
            _ if explicit => None,
            _ => lookup(&container, key)?,
        };
        if found.is_some() {
            self.charge(SELECT_COST)?;
        }
        Ok(Value::Optional(found.map(Arc::new)))
    }

    fn has(
        &mut self,
        op: &'a Node,
        field: &Arc<str>,
        message: bool,
    ) -> Result<Value<'a>, EvalError> {
        // The presence test is a qualifier (1); observing it is free in Kubernetes
        // (`PresenceTestHasCost(false)`). On an optional it is charged only when present.
        let (v, optional) = match self.resolve(op)? {
            Value::Optional(None) => return Ok(Value::Bool(false)),
            Value::Optional(Some(inner)) => ((*inner).clone(), true),
            v => (v, false),
        };
        let present = match &v {
            Value::Map(m) => m.contains_str(field),
            Value::Struct(s) if message => s.is_set(field)?,
            // A field name is not a list index.
            Value::List(_) => {
                let key = Value::String(Str::Shared(field.clone()));
                if !optional {
                    self.charge(SELECT_COST)?;
                }
                return lookup(&v, &key).map(|_| Value::Bool(false));
            }
            // Other values have no fields: cel-go answers false.
            _ => false,
        };
        if present || !optional {
            self.charge(SELECT_COST)?;
        }
        Ok(Value::Bool(present))
    }

    fn index(&mut self, args: &'a [Node; 2], optional: bool) -> Result<Value<'a>, EvalError> {
        let [a, b] = args;
        let container = self.resolve(a)?;
        if let Value::Optional(None) = container {
            return Ok(container);
        }
        // `[?k]` asks; indexing an optional value only carries the optional along.
        let explicit = optional;
        let optional = optional || matches!(container, Value::Optional(_));
        // A constant key is a qualifier; a computed one is resolved (an attribute) or
        // evaluated, then qualifies: 1 either way, not charged for an absent optional key.
        let key = match b {
            Node::Const(v) => Ok(v.lend()),
            _ => match self.resolve(b) {
                Err(e) if e.is_fatal() => return Err(e),
                // A null read from a variable's data is Go's nil to cel-go, which names its
                // type `<nil>` (a computed null is `types.Null`).
                Ok(Value::Null) if reads_bound_data(b) => {
                    Err(EvalError::InvalidQualifier("<nil>".into()))
                }
                r => r,
            },
        };
        if optional {
            return self.qualify_if_present(container, &key?, explicit);
        }
        self.charge(SELECT_COST)?;
        let key = key?;
        let found = lookup(&container, &key)?;
        found.ok_or_else(|| match container {
            Value::List(_) => EvalError::IndexOutOfBounds(display_key(&key)),
            _ => EvalError::NoSuchKey(display_key(&key)),
        })
    }

    fn and(&mut self, args: &'a [Node; 2]) -> Result<Value<'a>, EvalError> {
        let [a, b] = args;
        let l = self.eval(a);
        match &l {
            Ok(Value::Bool(false)) => return l,
            Err(e) if e.is_fatal() => return l,
            _ => {}
        }
        let r = self.eval(b);
        match (l, r) {
            (_, Ok(Value::Bool(false))) => Ok(Value::Bool(false)),
            (_, Err(e)) if e.is_fatal() => Err(e),
            (Ok(Value::Bool(true)), Ok(Value::Bool(true))) => Ok(Value::Bool(true)),
            (Err(e), _) | (Ok(Value::Bool(true)), Err(e)) => Err(e),
            _ => Err(EvalError::no_such_overload()),
        }
    }

    fn or(&mut self, args: &'a [Node; 2]) -> Result<Value<'a>, EvalError> {
        let [a, b] = args;
        let l = self.eval(a);
        match &l {
            Ok(Value::Bool(true)) => return l,
            Err(e) if e.is_fatal() => return l,
            _ => {}
        }
        let r = self.eval(b);
        match (l, r) {
            (_, Ok(Value::Bool(true))) => Ok(Value::Bool(true)),
            (_, Err(e)) if e.is_fatal() => Err(e),
            (Ok(Value::Bool(false)), Ok(Value::Bool(false))) => Ok(Value::Bool(false)),
            (Err(e), _) | (Ok(Value::Bool(false)), Err(e)) => Err(e),
            _ => Err(EvalError::no_such_overload()),
        }
    }

    /// `opt.or(other)` and `opt.orValue(v)`: cel-go plans them as free special forms that
    /// evaluate the alternative only when `opt` is empty, and pass a non-optional `opt` through.
    fn opt_or(&mut self, args: &'a [Node; 2], or_value: bool) -> Result<Value<'a>, EvalError> {
        let [opt, alt] = args;
        match self.eval(opt)? {
            Value::Optional(Some(inner)) if or_value => Ok((*inner).clone()),
            Value::Optional(None) => self.eval(alt),
            v => Ok(v),
        }
    }

    fn equals(&mut self, args: &'a [Node; 2], negate: bool) -> Result<Value<'a>, EvalError> {
        let [a, b] = args;
        let l = self.eval_soft(a)?;
        let r = self.eval_soft(b)?;
        self.charge(traversal_cost(soft_size(&l).min(soft_size(&r))))?;
        Ok(Value::Bool(l?.equals(&r?) != negate))
    }

    fn in_op(&mut self, args: &'a [Node; 2], list_cost: bool) -> Result<Value<'a>, EvalError> {
        let [a, b] = args;
        let needle = self.eval_soft(a)?;
        let hay = self.eval_soft(b)?;
        self.charge(if list_cost { soft_size(&hay) } else { 1 })?;
        let (needle, hay) = (needle?, hay?);
        match &hay {
            Value::List(l) => Ok(Value::Bool(l.iter().any(|v| v.equals(&needle)))),
            Value::Map(m) => Ok(Value::Bool(m.get(&needle)?.is_some())),
            _ => Err(EvalError::no_such_overload()),
        }
    }

    fn set_in(&mut self, s: &'a (Node, Box<[Value<'static>]>)) -> Result<Value<'a>, EvalError> {
        let (needle, set) = s;
        let v = self.eval(needle)?;
        Ok(Value::Bool(set.iter().any(|x| x.equals(&v))))
    }

    #[inline(never)]
    fn call(&mut self, call: &'a Call) -> Result<Value<'a>, EvalError> {
        let mut args: SmallVec<[Value<'a>; 3]> = SmallVec::with_capacity(call.args.len());
        let mut failed: Option<EvalError> = None;
        // Which arguments failed, a bit each (there are at most three here).
        let mut failed_at = 0_u8;
        // cel-go evaluates every argument of a unary or binary call and charges the call even
        // when one failed; a call with more arguments stops at the first failure, and is
        // charged only if that was the last argument (the cost tracker needs them all).
        let variadic = call.args.len() > 2;
        for (i, a) in call.args.iter().enumerate() {
            match self.eval_soft(a)? {
                Ok(v) => args.push(v),
                Err(e) if variadic && i + 1 < call.args.len() => return Err(e),
                Err(e) => {
                    failed.get_or_insert(e);
                    failed_at |= 1 << i.min(7);
                    // Stands for the error in the cost formula (cel-go sizes an error as 1).
                    args.push(Value::Null);
                }
            }
        }
        // The cost tracker runs whatever the call gives, a failed argument included.
        if let Some(panic) = call.tracker_panic(&args, |i| failed_at & (1 << i.min(7)) != 0) {
            return Err(panic);
        }
        if let Some(e) = failed {
            self.charge(call.cost(call.costed(), &args, &Value::Null))?;
            return Err(e);
        }
        let cand = call.candidates.iter().find(|c| {
            c.kinds.len() == args.len() && c.kinds.iter().zip(&args).all(|(k, v)| k.matches(v))
        });
        let Some(cand) = cand else {
            self.charge(call.cost(call.costed(), &args, &Value::Null))?;
            return Err(call.dispatch.no_overload(&call.function, &args));
        };
        // Charge before calling, so a call that would exceed the limit (say, a huge string
        // concatenation) never runs; a cost that depends on the result is topped up after.
        // The result is not known yet: charge as for an empty one (size 0).
        let before = call.cost(Some(cand), &args, &Value::String(Str::Borrowed("")));
        self.charge(before)?;
        let result = match &call.pattern {
            Some(planned) => planned.call(&args),
            None => (cand.imp)(&args),
        };
        let reads_result = call.cost_reads_result(cand);
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                if reads_result {
                    // cel-go sizes an error result as 1.
                    let after = call.cost(Some(cand), &args, &Value::Null);
                    self.charge(after.saturating_sub(before))?;
                }
                return Err(with_call(e, call, &args));
            }
        };
        if reads_result {
            self.charge(call.cost(Some(cand), &args, &out).saturating_sub(before))?;
        }
        if cand.grows {
            let bytes = |v: Option<&Value<'_>>| match v {
                Some(Value::String(s)) => s.len() as u64,
                _ => 0,
            };
            let added = bytes(Some(&out)).saturating_sub(bytes(args.first()));
            self.budget.grow(added, &call.function)?;
        }
        Ok(out)
    }

    #[inline(never)]
    fn matches(&mut self, m: &'a (Node, regex::Regex, u64)) -> Result<Value<'a>, EvalError> {
        let (target, re, len) = m;
        let t = self.eval_soft(target)?;
        let cost = traversal_cost(1 + soft_size(&t)).saturating_mul(len.div_ceil(4));
        self.charge(cost)?;
        crate::libs::regex::matches_compiled(re, &t?)
    }

    /// A list literal: elements are evaluated until one fails; building it costs 10 either way.
    #[inline(never)]
    fn list(&mut self, items: &'a [Node], optional: &[bool]) -> Result<Value<'a>, EvalError> {
        let r = self.list_items(items, optional);
        self.charge(LIST_CREATE_COST)?;
        Ok(Value::List(List::from_vec(r?)))
    }

    fn list_items(
        &mut self,
        items: &'a [Node],
        optional: &[bool],
    ) -> Result<Vec<Value<'a>>, EvalError> {
        let mut out = Vec::with_capacity(items.len());
        for (i, n) in items.iter().enumerate() {
            let v = self.eval(n)?;
            if optional.get(i).copied().unwrap_or(false) {
                match v {
                    Value::Optional(Some(inner)) => out.push((*inner).clone()),
                    Value::Optional(None) => {}
                    other => {
                        return Err(EvalError::msg(format!(
                            "cannot initialize optional list element from non-optional value {}",
                            other.type_name()
                        )));
                    }
                }
            } else {
                out.push(v);
            }
        }
        Ok(out)
    }

    /// A map literal: entries are evaluated until one fails; building it costs 30 either way.
    #[inline(never)]
    fn map(&mut self, entries: &'a [(Node, Node, bool)]) -> Result<Value<'a>, EvalError> {
        let r = self.map_entries(entries);
        self.charge(MAP_CREATE_COST)?;
        Ok(Value::Map(Map::Owned(Arc::new(r?))))
    }

    fn map_entries(
        &mut self,
        entries: &'a [(Node, Node, bool)],
    ) -> Result<OwnedMap<'a>, EvalError> {
        let mut out = OwnedMap::with_capacity(entries.len());
        for (k, v, optional) in entries {
            let key = self.eval(k)?;
            let val = self.eval(v)?;
            let val = if *optional {
                match optional_entry(val, || display_key(&key))? {
                    Some(v) => v,
                    None => {
                        out.remove(&Key::from_value(&key)?);
                        continue;
                    }
                }
            } else {
                val
            };
            // Like cel-go's map literal, a repeated key keeps the last value.
            out.insert(Key::from_value(&key)?, val);
        }
        Ok(out)
    }

    /// The leaves of `shape` over `n`, appended to `out` (`Program::eval_leaves`): each
    /// literal charged, and failing, as `list`, `map` and `message` charge and fail.
    pub fn leaves(
        &mut self,
        n: &'a Node,
        shape: &Literal,
        out: &mut Vec<Value<'a>>,
    ) -> Result<(), EvalError> {
        match literal::fit(n, shape) {
            Fit::List(items, shapes) => {
                let r = (items.iter().zip(shapes)).try_for_each(|(n, s)| self.leaves(n, s, out));
                self.charge(LIST_CREATE_COST)?;
                r
            }
            Fit::Map(entries, shapes) => {
                // The keys are constants: evaluating them costs nothing.
                let r = (entries.iter().zip(shapes.iter()))
                    .try_for_each(|((_, value, _), (_, s))| self.leaves(value, s, out));
                self.charge(MAP_CREATE_COST)?;
                r
            }
            Fit::Message(s, shapes) => {
                let first = out.len();
                for ((_, node, _), (_, shape)) in s.fields.iter().zip(shapes.iter()) {
                    self.leaves(node, shape, out)?;
                }
                self.charge(STRUCT_CREATE_COST)?;
                if s.ty.checks_fields() {
                    // Its fields are leaves, one value each.
                    for ((name, _, _), v) in s.fields.iter().zip(&out[first..]) {
                        s.ty.check_field(name, v)?;
                    }
                }
                Ok(())
            }
            Fit::Leaf => {
                out.push(self.eval(n)?);
                Ok(())
            }
        }
    }

    /// A message literal: optional fields given `optional.none()` are left out; the type
    /// accepts or rejects each value once all are evaluated.
    #[inline(never)]
    fn message(&mut self, s: &'a StructNode) -> Result<Value<'a>, EvalError> {
        let mut fields = Vec::with_capacity(s.fields.len());
        for (name, node, optional) in s.fields.iter() {
            let v = self.eval(node)?;
            let v = if *optional {
                match optional_entry(v, || name.to_string())? {
                    Some(v) => v,
                    None => continue,
                }
            } else {
                v
            };
            fields.push((name.clone(), v));
        }
        // Charged once the fields are evaluated, even if the type then rejects one.
        self.charge(STRUCT_CREATE_COST)?;
        for (name, v) in &fields {
            s.ty.check_field(name, v)?;
        }
        Ok(Value::Struct(Arc::new(StructValue::new(
            s.ty.clone(),
            fields,
        ))))
    }

    /// A macro, charged as cel-go charges the comprehension it expands to (the accumulator's
    /// initial value is a constant, free; every read of the accumulator costs 1).
    #[inline(never)]
    fn comprehension(&mut self, l: &'a Loop) -> Result<Value<'a>, EvalError> {
        let start = self.cost;
        let range = self.eval(&l.range);
        match &l.kind {
            LoopKind::OptMap(t) | LoopKind::OptFlatMap(t) => {
                let range_cost = self.cost - start;
                return self.opt_map(l, range, range_cost, t);
            }
            LoopKind::SortBy(k, tracked) => return self.sort_by(l, range, k, *tracked),
            _ => {}
        }
        let range = range?;
        let items = Items::of(&range, l.slot2.is_some())?;
        match &l.kind {
            LoopKind::All(p) => self.quantifier(l, items, p, false),
            LoopKind::Exists(p) => self.quantifier(l, items, p, true),
            LoopKind::ExistsOne(p) => self.exists_one(l, items, p),
            LoopKind::MapList { filter, transform } => {
                self.map_list(l, items, filter.as_ref(), transform)
            }
            LoopKind::TransformMap { filter, transform } => {
                self.transform_map(l, items, filter.as_ref(), transform, false)
            }
            LoopKind::TransformMapEntry { filter, transform } => {
                self.transform_map(l, items, filter.as_ref(), transform, true)
            }
            LoopKind::OptMap(_) | LoopKind::OptFlatMap(_) | LoopKind::SortBy(..) => {
                Err(EvalError::no_such_overload())
            }
        }
    }

    fn bind(&mut self, l: &'a Loop, item: (Value<'a>, Value<'a>)) -> Result<(), EvalError> {
        self.tick()?;
        let (first, second) = item;
        self.set(l.slot, first);
        if let Some(s2) = l.slot2 {
            self.set(s2, second);
        }
        Ok(())
    }

    /// `all` (`exists` when `any`): each iteration checks `@not_strictly_false(@result)`
    /// (`… (!@result)`: 2, resp. 3) and stops once the accumulator is false (true); the step
    /// `@result && p` (`||`) reads the accumulator (1) and evaluates `p`.
    fn quantifier(
        &mut self,
        l: &'a Loop,
        items: Items<'_, 'a>,
        pred: &'a Node,
        any: bool,
    ) -> Result<Value<'a>, EvalError> {
        let cond_cost = if any { 3 } else { 2 };
        let mut accu: Result<bool, EvalError> = Ok(!any);
        for item in items {
            for _ in 0..cond_cost {
                self.charge(1)?;
            }
            if matches!(accu, Ok(b) if b == any) {
                break;
            }
            self.bind(l, item)?;
            self.charge(SELECT_COST)?;
            accu = match (accu, self.eval(pred)) {
                (_, Err(e)) if e.is_fatal() => return Err(e),
                (_, Ok(Value::Bool(b))) if b == any => Ok(any),
                (Err(e), _) => Err(e),
                (Ok(_), Ok(Value::Bool(b))) => Ok(b),
                (Ok(_), Ok(_)) => Err(EvalError::no_such_overload()),
                (Ok(_), Err(e)) => Err(e),
            };
        }
        self.charge(SELECT_COST)?;
        accu.map(Value::Bool)
    }

    /// `exists_one`: the step `p ? @result + 1 : @result` costs 2 when `p` holds; the result
    /// `@result == 1` costs 2.
    fn exists_one(
        &mut self,
        l: &'a Loop,
        items: Items<'_, 'a>,
        pred: &'a Node,
    ) -> Result<Value<'a>, EvalError> {
        let mut accu: Result<i64, EvalError> = Ok(0);
        for item in items {
            self.bind(l, item)?;
            match self.eval(pred) {
                Ok(Value::Bool(true)) => {
                    self.charge(1)?;
                    self.charge(1)?;
                    accu = accu.map(|n| n.saturating_add(1));
                }
                Ok(Value::Bool(false)) => {}
                Ok(_) => accu = Err(EvalError::no_such_overload()),
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => accu = Err(e),
            }
        }
        self.charge(1)?;
        self.charge(1)?;
        accu.map(|n| Value::Bool(n == 1))
    }

    /// Binds the next element and runs the macro's filter: whether the element goes on to the
    /// transform. A filter that fails makes the accumulator its error (and the element is
    /// skipped).
    fn admit<T>(
        &mut self,
        l: &'a Loop,
        item: (Value<'a>, Value<'a>),
        filter: Option<&'a Node>,
        accu: &mut Result<T, EvalError>,
    ) -> Result<bool, EvalError> {
        self.bind(l, item)?;
        let Some(f) = filter else {
            return Ok(true);
        };
        match self.eval_soft(f)? {
            Ok(Value::Bool(pass)) => Ok(pass),
            Ok(_) => {
                *accu = Err(EvalError::no_such_overload());
                Ok(false)
            }
            Err(e) => {
                *accu = Err(e);
                Ok(false)
            }
        }
    }

    /// `map`, `filter` and `transformList`: the step `@result + [t]` costs the accumulator
    /// read, the list literal (free when `t` is a constant), `t` and the concatenation.
    fn map_list(
        &mut self,
        l: &'a Loop,
        items: Items<'_, 'a>,
        filter: Option<&'a Node>,
        transform: &'a Node,
    ) -> Result<Value<'a>, EvalError> {
        let mut accu: Result<Vec<Value<'a>>, EvalError> = Ok(Vec::with_capacity(items.len()));
        for item in items {
            if !self.admit(l, item, filter, &mut accu)? {
                continue;
            }
            self.charge(SELECT_COST)?;
            let t = match transform {
                Node::Const(v) => Ok(v.lend()),
                _ => {
                    let t = self.eval_soft(transform)?;
                    self.charge(LIST_CREATE_COST)?;
                    t
                }
            };
            self.charge(1)?;
            match (&mut accu, t) {
                (Ok(out), Ok(t)) => out.push(t),
                (Ok(_), Err(e)) => accu = Err(e),
                (Err(_), _) => {}
            }
        }
        self.charge(SELECT_COST)?;
        accu.map(|v| Value::List(List::from_vec(v)))
    }

    /// `transformMap` (step `cel.@mapInsert(@result, k, t)`: 3 + t) and `transformMapEntry`
    /// (`cel.@mapInsert(@result, t)`: 2 + t). A filter that fails, or a failed step, makes the
    /// accumulator an error.
    fn transform_map(
        &mut self,
        l: &'a Loop,
        items: Items<'_, 'a>,
        filter: Option<&'a Node>,
        transform: &'a Node,
        entry: bool,
    ) -> Result<Value<'a>, EvalError> {
        let mut accu: Result<OwnedMap<'a>, EvalError> = Ok(OwnedMap::with_capacity(items.len()));
        for item in items {
            if !self.admit(l, (item.0.clone(), item.1.clone()), filter, &mut accu)? {
                continue;
            }
            self.charge(SELECT_COST)?;
            if !entry {
                // The three-argument insert stops at a failed accumulator, uncharged.
                if accu.is_err() {
                    continue;
                }
                self.charge(SELECT_COST)?;
            }
            let v = self.eval_soft(transform)?;
            self.charge(1)?;
            let Ok(out) = &mut accu else {
                continue;
            };
            if let Err(e) = insert_transformed(out, &item, v, entry) {
                accu = Err(e);
            }
        }
        self.charge(SELECT_COST)?;
        accu.map(|m| Value::Map(Map::Owned(Arc::new(m))))
    }

    /// `opt.optMap(v, t)` expands to `opt.hasValue() ? optional.of(t) : optional.none()` with
    /// `v` bound lazily to `opt.value()`: the first read of `v` evaluates `opt` again.
    fn opt_map(
        &mut self,
        l: &'a Loop,
        range: Result<Value<'a>, EvalError>,
        range_cost: u64,
        t: &'a Node,
    ) -> Result<Value<'a>, EvalError> {
        self.charge(1)?;
        let inner = match range? {
            Value::Optional(None) => {
                self.charge(1)?;
                return Ok(Value::Optional(None));
            }
            Value::Optional(Some(v)) => (*v).clone(),
            _ => return Err(EvalError::no_such_overload()),
        };
        self.set(l.slot, inner);
        self.pending.push((l.slot, range_cost.saturating_add(1)));
        let out = self.eval(t);
        self.pending.retain(|(s, _)| *s != l.slot);
        match &l.kind {
            LoopKind::OptFlatMap(_) => match out? {
                v @ Value::Optional(_) => Ok(v),
                _ => Err(EvalError::no_such_overload()),
            },
            _ => {
                self.charge(1)?;
                Ok(Value::Optional(Some(Arc::new(out?))))
            }
        }
    }

    /// `list.sortBy(v, k)`: the list is bound once (read: 1), keys are computed as by `map`
    /// (range read 1, per element 12 + k, result 1), then `@sortByAssociatedKeys` is charged
    /// O(n²) when the checker resolved its overload (`tracked`), else 1.
    fn sort_by(
        &mut self,
        l: &'a Loop,
        range: Result<Value<'a>, EvalError>,
        key: &'a Node,
        tracked: bool,
    ) -> Result<Value<'a>, EvalError> {
        // The resolved `@sortByAssociatedKeys` has cel-go's cost tracker, which asserts that
        // the keys (mapped from the range) are a list: a failed range or key makes it panic.
        let tracker_panic = |e: EvalError| match e {
            e if tracked && !e.is_fatal() => {
                TrackerAssert::Lister(1).panic(&[], |_| true).unwrap_or(e)
            }
            e => e,
        };
        let range = range.map_err(tracker_panic)?;
        self.charge(1)?;
        self.charge(1)?;
        let Value::List(list) = range else {
            return Err(EvalError::no_such_overload());
        };
        let mut keyed = Vec::with_capacity(list.len());
        for v in list.iter() {
            self.tick()?;
            self.set(l.slot, v.clone());
            self.charge(SELECT_COST)?;
            let k = match key {
                Node::Const(c) => c.lend(),
                _ => {
                    let k = self.eval(key).map_err(tracker_panic)?;
                    self.charge(LIST_CREATE_COST)?;
                    k
                }
            };
            self.charge(1)?;
            keyed.push((k, v));
        }
        self.charge(SELECT_COST)?;
        let cost = if tracked {
            let keys = Value::List(List::from_vec(
                keyed.iter().map(|(k, _)| k.clone()).collect(),
            ));
            crate::libs::lists::cost_self_compare(std::slice::from_ref(&keys), &Value::Null)
        } else {
            1
        };
        self.charge(cost)?;
        crate::libs::lists::sort_keyed(&mut keyed)?;
        Ok(Value::List(List::from_vec(
            keyed.into_iter().map(|(_, v)| v).collect(),
        )))
    }
}

/// The (first variable, second variable) pairs a comprehension iterates, read as the loop
/// goes: a list's elements (or indexes and elements), a map's keys (or keys and values).
struct Items<'l, 'a> {
    source: Source<'l, 'a>,
    two_vars: bool,
}

enum Source<'l, 'a> {
    List(std::iter::Enumerate<ListIter<'l, 'a>>),
    Json(serde_json::map::Iter<'a>),
    Tape(TapeEntries<'a>),
    Layered(&'l Layered<'a>, serde_json::map::Iter<'a>),
    Owned(std::slice::Iter<'l, (Key<'a>, Value<'a>)>),
}

impl<'l, 'a> Items<'l, 'a> {
    /// The pairs of `range`; `Err` if it is neither a list nor a map.
    fn of(range: &'l Value<'a>, two_vars: bool) -> Result<Self, EvalError> {
        let source = match range {
            Value::List(list) => Source::List(list.iter().enumerate()),
            Value::Map(Map::Json(m)) => Source::Json(m.iter()),
            Value::Map(Map::Tape(m)) => Source::Tape(m.entries()),
            Value::Map(Map::Layered(m)) => Source::Layered(m, m.members().iter()),
            Value::Map(Map::Owned(m)) => Source::Owned(m.entries().iter()),
            other => return Err(not_iterable(other, two_vars)),
        };
        Ok(Self { source, two_vars })
    }
}

impl<'a> Iterator for Items<'_, 'a> {
    type Item = (Value<'a>, Value<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let (first, second) = match &mut self.source {
            Source::List(it) => {
                let (i, v) = it.next()?;
                if !self.two_vars {
                    return Some((v, Value::Null));
                }
                (Value::Int(i as i64), v)
            }
            Source::Json(it) => {
                let (k, v) = it.next()?;
                let key = Value::String(Str::Borrowed(k.as_str()));
                if !self.two_vars {
                    return Some((key, Value::Null));
                }
                (key, Value::from_json(v))
            }
            Source::Tape(it) => {
                let (k, v) = it.next()?;
                let key = Value::String(Str::Borrowed(k));
                if !self.two_vars {
                    return Some((key, Value::Null));
                }
                (key, v.value())
            }
            Source::Layered(m, it) => {
                let (k, v) = it.next()?;
                let key = Value::String(Str::Borrowed(k.as_str()));
                if !self.two_vars {
                    return Some((key, Value::Null));
                }
                (key, m.member(k, v))
            }
            Source::Owned(it) => {
                let (k, v) = it.next()?;
                if !self.two_vars {
                    return Some((k.to_value(), Value::Null));
                }
                (k.to_value(), v.clone())
            }
        };
        Some((first, second))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.source {
            Source::List(it) => it.size_hint(),
            Source::Json(it) => it.size_hint(),
            Source::Tape(it) => it.size_hint(),
            Source::Layered(_, it) => it.size_hint(),
            Source::Owned(it) => it.size_hint(),
        }
    }
}

impl ExactSizeIterator for Items<'_, '_> {}

/// `e` from an implementation of `call`: a rejection of the arguments records the call, for
/// [`EvalError::detail`].
#[cold]
fn with_call(e: EvalError, call: &Call, args: &[Value<'_>]) -> EvalError {
    match e {
        EvalError::NoSuchOverload(o) => {
            EvalError::NoSuchOverload(o.or_call(&call.function, || type_names(args)))
        }
        e => e,
    }
}

/// Inserts one transformed element into a `transformMap(Entry)` result.
fn insert_transformed<'a>(
    out: &mut OwnedMap<'a>,
    item: &(Value<'a>, Value<'a>),
    v: Result<Value<'a>, EvalError>,
    entry: bool,
) -> Result<(), EvalError> {
    let v = v?;
    let insert = |out: &mut OwnedMap<'a>, k: &Value<'a>, val: Value<'a>| {
        out.try_insert_new(Key::from_value(k)?, val)
            .map_err(|key| EvalError::msg(format!("insert failed: key {key} already exists")))
    };
    if !entry {
        return insert(out, &item.0, v);
    }
    let Value::Map(m) = v else {
        return Err(EvalError::no_such_overload());
    };
    for (k, val) in m.entries() {
        insert(out, &k, val)?;
    }
    Ok(())
}

/// The value an optional entry (`?key: v` of a map or message literal) sets: `None` for
/// `optional.none()`; anything but an optional is an error naming the entry.
fn optional_entry<'a>(
    v: Value<'a>,
    entry: impl FnOnce() -> String,
) -> Result<Option<Value<'a>>, EvalError> {
    match v {
        Value::Optional(inner) => Ok(inner.map(|v| (*v).clone())),
        other => Err(EvalError::msg(format!(
            "cannot initialize optional entry '{}' from non-optional value {}",
            entry(),
            other.type_name()
        ))),
    }
}

/// cel-go's error for a comprehension over a value that is neither a list nor a map.
fn not_iterable(v: &Value<'_>, two_vars: bool) -> EvalError {
    let Some(go_type) = v.go_type_name() else {
        return EvalError::no_such_overload();
    };
    EvalError::msg(if two_vars {
        format!("unsupported comprehension range type: {go_type}")
    } else {
        format!("got '{go_type}', expected iterable type")
    })
}

/// What observing an attribute costs: 1, except for a conditional's.
fn observe_cost(n: &Node) -> u64 {
    match n {
        Node::Cond(_) => 0,
        Node::Select(op, ..) | Node::OptSelect(op, _) if is_attribute(op) => observe_cost(op),
        Node::Index(args) | Node::OptIndex(args) if is_attribute(&args[0]) => {
            observe_cost(&args[0])
        }
        _ => SELECT_COST,
    }
}

/// Whether `n` reads a bound variable's data as it is (the variable, its fields, constant
/// indexes), where cel-go resolves native Go values that it has not turned into CEL values.
fn reads_bound_data(n: &Node) -> bool {
    match n {
        Node::Global(_) => true,
        Node::Select(inner, _, _) => reads_bound_data(inner),
        Node::Index(args) => matches!(args[1], Node::Const(_)) && reads_bound_data(&args[0]),
        _ => false,
    }
}

/// Whether cel-go plans `n` as an attribute (a variable or conditional with qualifiers).
fn is_attribute(n: &Node) -> bool {
    matches!(
        n,
        Node::Global(_)
            | Node::Local(_)
            | Node::Composited(_)
            | Node::Select(..)
            | Node::OptSelect(..)
            | Node::Index(_)
            | Node::OptIndex(_)
            | Node::Cond(_)
    )
}

/// The size of an argument for cost purposes; an error counts 1.
fn soft_size(v: &Result<Value<'_>, EvalError>) -> u64 {
    v.as_ref().map(actual_size).unwrap_or(1)
}

/// `container[key]` for lists and maps; `Ok(None)` if absent.
fn lookup<'a>(container: &Value<'a>, key: &Value<'_>) -> Result<Option<Value<'a>>, EvalError> {
    // cel-go turns a computed index into a qualifier first, which only these types can be.
    if !matches!(
        key,
        Value::String(_) | Value::Int(_) | Value::Uint(_) | Value::Bool(_) | Value::Double(_)
    ) {
        let go_type = key.go_type_name().unwrap_or_else(|| key.type_name());
        return Err(EvalError::InvalidQualifier(go_type.to_string()));
    }
    match container {
        Value::List(l) => {
            let i = match key {
                Value::Int(i) => *i,
                Value::Uint(u) => i64::try_from(*u)
                    .map_err(|_| EvalError::msg(format!("unsupported index value {u} in list")))?,
                Value::Double(d) => crate::value::double_to_int_lossless(*d).ok_or_else(|| {
                    EvalError::msg(format!(
                        "unsupported index value {} in list",
                        crate::value::format_double(*d)
                    ))
                })?,
                other => {
                    return Err(EvalError::msg(format!(
                        "unsupported index type '{}' in list",
                        other.type_name()
                    )));
                }
            };
            Ok(usize::try_from(i).ok().and_then(|i| l.get(i)))
        }
        Value::Map(m) => m.get(key),
        // cel-go qualifies any other value by reporting the key as missing.
        _ => Err(EvalError::NoSuchKey(display_key(key))),
    }
}

fn display_key(v: &Value<'_>) -> String {
    match v {
        Value::String(s) => s.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Double(d) => crate::value::format_double(*d),
        Value::Bool(b) => b.to_string(),
        other => other.type_name().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::{eval, eval_cost};
    use crate::value::{Str, Value};
    use crate::{Activation, Budget, Env, Type};

    /// A string constant is lent by the program (no reference count shared between threads
    /// evaluating it); folded constants own their strings.
    #[test]
    fn string_constants_are_lent_by_the_program() {
        let env = Env::standard().build();
        let run = |src: &str, check: &dyn Fn(&Value<'_>) -> bool| {
            let p = env.compile(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            let v = p.eval(&Activation::new(), &mut Budget::default());
            assert!(v.as_ref().is_ok_and(check), "{src}: {v:?}");
        };
        run("'registry.example.com/'", &|v| {
            matches!(v, Value::String(Str::Borrowed("registry.example.com/")))
        });
        run(
            "'a' + 'b'",
            &|v| matches!(v, Value::String(Str::Shared(s)) if &**s == "ab"),
        );
        // A folded map literal: its value is lent as a whole, its strings owned by it.
        run("{'k': 'v'}['k'] == 'v' && {'k': 'v'}.size() == 1", &|v| {
            matches!(v, Value::Bool(true))
        });
        assert_eq!(
            Value::String(Str::Borrowed("x")).into_static(),
            Some(Value::String(Str::Shared("x".into())))
        );
        let json = serde_json::json!([1]);
        assert_eq!(Value::from_json(&json).into_static(), None);
    }

    /// Costs cel-go v0.26.0 reports with Kubernetes' program options.
    #[test]
    fn costs_follow_cel_go_planned_programs() {
        let cases: &[(&str, u64)] = &[
            // Constant conversions and literals are folded when planning.
            ("dyn(1) + dyn(2)", 1),
            ("int('5') + dyn(1)", 1),
            ("duration('1h') + duration('1m') > duration('60m')", 2),
            ("2 in [1, 2, 3]", 0),
            // Qualifiers cost 1 each, observing a relative attribute 1 more.
            ("[1, 2][0]", 2),
            ("has([{'a': 1}][0].a)", 2),
            // Calls are charged even when an argument failed; list literals too.
            ("(1 / 0) + 1 == 2", 3),
            ("[1, 2, 1 / 0].filter(x, false)", 11),
            // Macros cost what their expansions cost.
            ("[1, 2, 3].all(x, x == 1)", 13),
            ("[1, 2].exists(x, true)", 8),
            ("[1].exists_one(x, true)", 4),
            ("[1].map(x, x)", 14),
            ("[].map(x, x)", 1),
            ("[1].filter(x, false)", 1),
            ("[1, 2].transformMap(i, v, v / 0)", 7),
            ("[3, 1, 2].sortBy(x, -x)", 74),
            // `or`/`orValue` are free special forms.
            ("optional.of(1).orValue(2)", 1),
            ("optional.none().optMap(o, o + 1)", 3),
        ];
        for (src, want) in cases {
            assert_eq!(eval_cost(src), *want, "{src}: {}", eval(src));
        }
    }

    /// The error texts cel-go v0.26.0 prints, which Kubernetes puts into its messages, and the
    /// call `detail` adds for logs.
    #[test]
    fn errors_read_as_cel_go_words_them() {
        let cases: &[(&str, &str, &str)] = &[
            // An operand with the operator's trait rejects the other one itself.
            (
                "dyn(0u) + dyn(1)",
                "no such overload",
                "no such overload: _+_(uint, int)",
            ),
            // An operand without it: the operator is named.
            (
                "dyn(null) < dyn(1)",
                "no such overload: _<_",
                "no such overload: _<_(null_type, int)",
            ),
            (
                "dyn(1.5) % dyn(1.5)",
                "no such overload: _%_",
                "no such overload: _%_(double, double)",
            ),
            // A string has methods: its method lookup answers.
            (
                "dyn('a') % dyn(1)",
                "no such overload",
                "no such overload: _%_(string, int)",
            ),
            (
                "size(dyn(1))",
                "no such overload: size",
                "no such overload: size(int)",
            ),
            // A string predicate runs without a type guard.
            (
                "dyn(1).contains('a')",
                "no such overload",
                "no such overload: contains(int, string)",
            ),
            // A runtime type guard checks a list's first element.
            (
                "dyn([null]).sum()",
                "no such overload: sum(list)",
                "no such overload: sum(list)",
            ),
            (
                "{'a': 1}[dyn([1])]",
                "invalid qualifier type: *types.baseList",
                "invalid qualifier type: *types.baseList",
            ),
        ];
        let env = Env::kubernetes().build();
        for (src, text, detail) in cases {
            let program = env.compile(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            let mut budget = crate::Budget::default();
            let err = program.eval(&crate::Activation::new(), &mut budget).err();
            let Some(err) = err else {
                panic!("{src}: no error");
            };
            assert_eq!(err.to_string(), *text, "{src}");
            assert_eq!(err.detail(), *detail, "{src}");
        }
    }

    #[test]
    fn a_null_read_from_bound_data_is_gos_nil_as_a_qualifier_and_a_computed_one_is_types_null() {
        let env = Env::kubernetes().variable("object", Type::Dyn).build();
        let data = serde_json::json!({"spec": {"note": null, "notes": [null]}});
        for (src, qualifier) in [
            ("{'a': 1}[object.spec.note]", "<nil>"),
            ("{'a': 1}[object.spec.notes[0]]", "<nil>"),
            ("{'a': 1}[?object.spec.note]", "<nil>"),
            (
                "{'a': 1}[object.spec.note == null ? dyn(null) : dyn('a')]",
                "types.Null",
            ),
            ("{'a': 1}[object.spec.notes.map(x, x)[0]]", "types.Null"),
        ] {
            let program = env.compile(src).unwrap_or_else(|e| panic!("{src}: {e}"));
            let mut act = crate::Activation::new();
            act.bind_json("object", &data);
            let err = program.eval(&act, &mut crate::Budget::default()).err();
            assert_eq!(
                err.map(|e| e.to_string()).as_deref(),
                Some(format!("invalid qualifier type: {qualifier}").as_str()),
                "{src}"
            );
        }
    }

    #[test]
    fn a_failing_constant_conversion_fails_the_program() {
        let env = Env::kubernetes().variable("x", Type::Dyn).build();
        let e = env.compile("uint('1.5')").err();
        assert!(e.as_ref().is_some_and(|e| e.is_program()), "{e:?}");
        assert_eq!(
            e.map(|e| e.to_string()).unwrap_or_default(),
            "type conversion error from 'string' to 'uint'"
        );
    }
}
