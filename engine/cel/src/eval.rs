//! The evaluator: walks a planned tree over an activation, charging cel-go's runtime cost as it
//! goes. Each node kind has its own small function so that stack frames stay small even in
//! unoptimised builds (deep expressions recurse once per nesting level).

use std::sync::Arc;

use crate::activation::Activation;
use crate::cost::{Budget, CHECK_FREQUENCY, LIST_CREATE_COST, MAP_CREATE_COST, SELECT_COST};
use crate::error::EvalError;
use crate::libs::{actual_size, traversal_cost};
use crate::plan::{Call, Loop, LoopKind, Node};
use crate::value::{Key, List, Map, OwnedMap, Value};

/// Evaluation state for one call of a program.
pub(crate) struct Ctx<'r, 'a> {
    act: &'r Activation<'a>,
    budget: &'r mut Budget,
    locals: Vec<Value<'a>>,
    cost: u64,
    iterations: u64,
}

impl<'r, 'a> Ctx<'r, 'a> {
    pub fn new(act: &'r Activation<'a>, budget: &'r mut Budget, slots: usize) -> Self {
        Self {
            act,
            budget,
            locals: vec![Value::Null; slots],
            cost: 0,
            iterations: 0,
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

    pub fn eval(&mut self, n: &Node) -> Result<Value<'a>, EvalError> {
        match n {
            Node::Const(v) => Ok(v.clone()),
            Node::Global(name) => self.global(name),
            Node::Local(slot) => {
                self.charge(SELECT_COST)?;
                Ok(self.locals.get(*slot).cloned().unwrap_or(Value::Null))
            }
            Node::Composited(i) => self.composited(*i),
            Node::Select(op, field) => self.select(op, field),
            Node::Has(op, field) => self.has(op, field),
            Node::OptSelect(op, field) => self.opt_select(op, field),
            Node::Index(args) => self.index(args, false),
            Node::OptIndex(args) => self.index(args, true),
            Node::And(args) => self.and(args),
            Node::Or(args) => self.or(args),
            Node::Cond(args) => self.cond(args),
            Node::OptOr(args, or_value) => self.opt_or(args, *or_value),
            Node::Eq(args, negate) => self.equals(args, *negate),
            Node::In(args) => self.in_op(args),
            Node::Call(call) => self.call(call),
            Node::Matches(m) => self.matches(m),
            Node::List(items, optional) => self.list(items, optional),
            Node::Map(entries) => self.map(entries),
            Node::Comprehension(l) => self.comprehension(l),
            Node::Fail(e) => Err(e.clone()),
        }
    }

    fn global(&mut self, name: &str) -> Result<Value<'a>, EvalError> {
        self.charge(SELECT_COST)?;
        self.act
            .get(name)
            .cloned()
            .ok_or_else(|| EvalError::NoSuchAttribute(name.to_string()))
    }

    fn composited(&mut self, i: usize) -> Result<Value<'a>, EvalError> {
        self.charge(2 * SELECT_COST)?;
        self.act.composited(i, self.budget)
    }

    fn select(&mut self, op: &Node, field: &str) -> Result<Value<'a>, EvalError> {
        let v = self.eval(op)?;
        self.charge(SELECT_COST)?;
        match v {
            Value::Map(m) => m
                .get_str(field)
                .ok_or_else(|| EvalError::NoSuchKey(field.to_string())),
            Value::Optional(o) => Ok(Value::Optional(match o {
                Some(inner) => match &*inner {
                    Value::Map(m) => m.get_str(field).map(Arc::new),
                    _ => return Err(EvalError::NoSuchKey(field.to_string())),
                },
                None => None,
            })),
            Value::List(_) => Err(string_index_in_list()),
            _ => Err(EvalError::NoSuchKey(field.to_string())),
        }
    }

    fn has(&mut self, op: &Node, field: &str) -> Result<Value<'a>, EvalError> {
        match self.eval(op)? {
            Value::Optional(Some(inner)) => has_field(&inner, field),
            Value::Optional(None) => Ok(Value::Bool(false)),
            v => has_field(&v, field),
        }
    }

    fn opt_select(&mut self, op: &Node, field: &str) -> Result<Value<'a>, EvalError> {
        let v = self.eval(op)?;
        self.charge(SELECT_COST)?;
        let m = match &v {
            Value::Map(m) => m,
            Value::Optional(None) => return Ok(Value::Optional(None)),
            // A presence test on a value without fields finds nothing (cel-go).
            Value::Optional(Some(inner)) => match &**inner {
                Value::Map(m) => return Ok(Value::Optional(m.get_str(field).map(Arc::new))),
                Value::List(_) => return Err(string_index_in_list()),
                _ => return Ok(Value::Optional(None)),
            },
            Value::List(_) => return Err(string_index_in_list()),
            _ => return Ok(Value::Optional(None)),
        };
        Ok(Value::Optional(m.get_str(field).map(Arc::new)))
    }

    fn index(&mut self, args: &[Node; 2], optional: bool) -> Result<Value<'a>, EvalError> {
        let [a, b] = args;
        let container = self.eval(a)?;
        let key = self.eval(b)?;
        self.charge(SELECT_COST)?;
        let (container, optional) = match container {
            Value::Optional(None) => return Ok(Value::Optional(None)),
            Value::Optional(Some(inner)) => ((*inner).clone(), true),
            other => (other, optional),
        };
        let found = lookup(&container, &key)?;
        if optional {
            return Ok(Value::Optional(found.map(Arc::new)));
        }
        found.ok_or_else(|| match container {
            Value::List(_) => EvalError::IndexOutOfBounds(display_key(&key)),
            _ => EvalError::NoSuchKey(display_key(&key)),
        })
    }

    fn and(&mut self, args: &[Node; 2]) -> Result<Value<'a>, EvalError> {
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
            _ => Err(EvalError::NoSuchOverload),
        }
    }

    fn or(&mut self, args: &[Node; 2]) -> Result<Value<'a>, EvalError> {
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
            _ => Err(EvalError::NoSuchOverload),
        }
    }

    fn cond(&mut self, args: &[Node; 3]) -> Result<Value<'a>, EvalError> {
        let [c, t, f] = args;
        match self.eval(c)? {
            Value::Bool(true) => self.eval(t),
            Value::Bool(false) => self.eval(f),
            _ => Err(EvalError::NoSuchOverload),
        }
    }

    fn opt_or(&mut self, args: &[Node; 2], or_value: bool) -> Result<Value<'a>, EvalError> {
        let [opt, alt] = args;
        let v = self.eval(opt)?;
        self.charge(1)?;
        match v {
            Value::Optional(Some(inner)) if or_value => Ok((*inner).clone()),
            Value::Optional(Some(_)) => Ok(v),
            Value::Optional(None) => {
                let alt = self.eval(alt)?;
                match alt {
                    Value::Optional(_) => Ok(alt),
                    _ if or_value => Ok(alt),
                    _ => Err(EvalError::NoSuchOverload),
                }
            }
            _ => Err(EvalError::NoSuchOverload),
        }
    }

    fn equals(&mut self, args: &[Node; 2], negate: bool) -> Result<Value<'a>, EvalError> {
        let [a, b] = args;
        let l = self.eval(a)?;
        let r = self.eval(b)?;
        self.charge(traversal_cost(actual_size(&l).min(actual_size(&r))))?;
        Ok(Value::Bool(l.equals(&r) != negate))
    }

    fn in_op(&mut self, args: &[Node; 2]) -> Result<Value<'a>, EvalError> {
        let [a, b] = args;
        let needle = self.eval(a)?;
        let hay = self.eval(b)?;
        match &hay {
            Value::List(l) => {
                self.charge(l.len() as u64)?;
                Ok(Value::Bool(l.iter().any(|v| v.equals(&needle))))
            }
            Value::Map(m) => {
                self.charge(1)?;
                Ok(Value::Bool(m.get(&needle)?.is_some()))
            }
            _ => Err(EvalError::NoSuchOverload),
        }
    }

    fn call(&mut self, call: &Call) -> Result<Value<'a>, EvalError> {
        let mut args: Vec<Value<'a>> = Vec::with_capacity(call.args.len());
        for a in call.args.iter() {
            args.push(self.eval(a)?);
        }
        let cand = call.candidates.iter().find(|c| {
            c.kinds.len() == args.len() && c.kinds.iter().zip(&args).all(|(k, v)| k.matches(v))
        });
        let Some(cand) = cand else {
            return Err(EvalError::NoMatchingOverload {
                function: call.function.to_string(),
                args: args
                    .iter()
                    .map(Value::type_name)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        // Charge before calling, so a call that would exceed the limit (say, a huge string
        // concatenation) never runs; a cost that depends on the result is topped up after.
        let before = (cand.cost)(&args, &Value::Null);
        self.charge(before)?;
        let out = (cand.imp)(&args)?;
        self.charge((cand.cost)(&args, &out).saturating_sub(before))?;
        Ok(out)
    }

    fn matches(&mut self, m: &(Node, regex::Regex, u64)) -> Result<Value<'a>, EvalError> {
        let (target, re, len) = m;
        let t = self.eval(target)?;
        let out = crate::libs::regex::matches_compiled(re, &t)?;
        let cost = traversal_cost(1 + actual_size(&t)).saturating_mul(len.div_ceil(4));
        self.charge(cost)?;
        Ok(out)
    }

    fn list(&mut self, items: &[Node], optional: &[bool]) -> Result<Value<'a>, EvalError> {
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
        self.charge(LIST_CREATE_COST)?;
        Ok(Value::List(List::from_vec(out)))
    }

    fn map(&mut self, entries: &[(Node, Node, bool)]) -> Result<Value<'a>, EvalError> {
        let mut out = OwnedMap::with_capacity(entries.len());
        for (k, v, optional) in entries {
            let key = self.eval(k)?;
            let val = self.eval(v)?;
            let val = if *optional {
                match val {
                    Value::Optional(Some(inner)) => (*inner).clone(),
                    Value::Optional(None) => {
                        out.remove(&Key::from_value(&key)?);
                        continue;
                    }
                    other => {
                        return Err(EvalError::msg(format!(
                            "cannot initialize optional entry '{}' from non-optional value {}",
                            display_key(&key),
                            other.type_name()
                        )));
                    }
                }
            } else {
                val
            };
            // Like cel-go's map literal, a repeated key keeps the last value.
            out.insert(Key::from_value(&key)?, val);
        }
        self.charge(MAP_CREATE_COST)?;
        Ok(Value::Map(Map::Owned(Arc::new(out))))
    }

    fn comprehension(&mut self, l: &Loop) -> Result<Value<'a>, EvalError> {
        let range = self.eval(&l.range)?;
        match &l.kind {
            LoopKind::OptMap(t) | LoopKind::OptFlatMap(t) => return self.opt_map(l, range, t),
            LoopKind::SortBy(k) => return self.sort_by(l, range, k),
            _ => {}
        }
        let items: Vec<(Value<'a>, Value<'a>)> = match &range {
            Value::List(list) => list
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    if l.slot2.is_some() {
                        (Value::Int(i as i64), v)
                    } else {
                        (v, Value::Null)
                    }
                })
                .collect(),
            Value::Map(m) => {
                if l.slot2.is_some() {
                    m.entries()
                } else {
                    m.keys().into_iter().map(|k| (k, Value::Null)).collect()
                }
            }
            other => {
                return Err(EvalError::msg(format!(
                    "got '{}', expected iterable type",
                    go_type_name(other)
                )));
            }
        };
        match &l.kind {
            LoopKind::All(p) => self.quantifier(l, &items, p, false),
            LoopKind::Exists(p) => self.quantifier(l, &items, p, true),
            LoopKind::ExistsOne(p) => self.exists_one(l, &items, p),
            LoopKind::MapList { filter, transform } => {
                self.map_list(l, &items, filter.as_ref(), transform)
            }
            LoopKind::TransformMap { filter, transform } => {
                self.transform_map(l, &items, filter.as_ref(), transform, false)
            }
            LoopKind::TransformMapEntry { filter, transform } => {
                self.transform_map(l, &items, filter.as_ref(), transform, true)
            }
            LoopKind::OptMap(_) | LoopKind::OptFlatMap(_) | LoopKind::SortBy(_) => {
                Err(EvalError::NoSuchOverload)
            }
        }
    }

    fn bind(&mut self, l: &Loop, item: &(Value<'a>, Value<'a>)) -> Result<(), EvalError> {
        self.tick()?;
        self.set(l.slot, item.0.clone());
        if let Some(s2) = l.slot2 {
            self.set(s2, item.1.clone());
        }
        Ok(())
    }

    /// `all` (`exists` when `any`): false (true) short-circuits; otherwise the first error wins.
    fn quantifier(
        &mut self,
        l: &Loop,
        items: &[(Value<'a>, Value<'a>)],
        pred: &Node,
        any: bool,
    ) -> Result<Value<'a>, EvalError> {
        // cel-go's loop condition `@not_strictly_false(@result)` (or `!@result`) and the
        // accumulator reads cost 3 (4) per iteration.
        let per_iter = if any { 4 } else { 3 };
        let mut err: Option<EvalError> = None;
        for item in items {
            self.bind(l, item)?;
            self.charge(per_iter)?;
            match self.eval(pred) {
                Ok(Value::Bool(b)) if b == any => {
                    self.charge(SELECT_COST)?;
                    return Ok(Value::Bool(any));
                }
                Ok(Value::Bool(_)) => {}
                Ok(_) => {
                    err.get_or_insert(EvalError::NoSuchOverload);
                }
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => {
                    err.get_or_insert(e);
                }
            }
        }
        self.charge(SELECT_COST)?;
        match err {
            Some(e) => Err(e),
            None => Ok(Value::Bool(!any)),
        }
    }

    fn exists_one(
        &mut self,
        l: &Loop,
        items: &[(Value<'a>, Value<'a>)],
        pred: &Node,
    ) -> Result<Value<'a>, EvalError> {
        let mut count = 0i64;
        for item in items {
            self.bind(l, item)?;
            match self.eval(pred)? {
                Value::Bool(true) => {
                    self.charge(2)?;
                    count += 1;
                }
                Value::Bool(false) => self.charge(SELECT_COST)?,
                _ => return Err(EvalError::NoSuchOverload),
            }
        }
        self.charge(2)?;
        Ok(Value::Bool(count == 1))
    }

    fn filter_passes(&mut self, filter: Option<&Node>) -> Result<bool, EvalError> {
        match filter {
            None => Ok(true),
            Some(f) => match self.eval(f)? {
                Value::Bool(b) => Ok(b),
                _ => Err(EvalError::NoSuchOverload),
            },
        }
    }

    fn map_list(
        &mut self,
        l: &Loop,
        items: &[(Value<'a>, Value<'a>)],
        filter: Option<&Node>,
        transform: &Node,
    ) -> Result<Value<'a>, EvalError> {
        self.charge(LIST_CREATE_COST)?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            self.bind(l, item)?;
            if !self.filter_passes(filter)? {
                self.charge(SELECT_COST)?;
                continue;
            }
            let v = self.eval(transform)?;
            // `@result + [t]`: accumulator read, list literal, concatenation.
            self.charge(SELECT_COST + LIST_CREATE_COST + 1)?;
            out.push(v);
        }
        self.charge(SELECT_COST)?;
        Ok(Value::List(List::from_vec(out)))
    }

    fn transform_map(
        &mut self,
        l: &Loop,
        items: &[(Value<'a>, Value<'a>)],
        filter: Option<&Node>,
        transform: &Node,
        entry: bool,
    ) -> Result<Value<'a>, EvalError> {
        self.charge(MAP_CREATE_COST)?;
        let mut out = OwnedMap::with_capacity(items.len());
        for item in items {
            self.bind(l, item)?;
            if !self.filter_passes(filter)? {
                self.charge(SELECT_COST)?;
                continue;
            }
            let v = self.eval(transform)?;
            if entry {
                self.charge(2)?;
                let Value::Map(m) = v else {
                    return Err(EvalError::NoSuchOverload);
                };
                for (k, val) in m.entries() {
                    let key = Key::from_value(&k)?;
                    let shown = key.to_string();
                    if !out.insert_new(key, val) {
                        return Err(EvalError::msg(format!(
                            "insert failed: key {shown} already exists"
                        )));
                    }
                }
            } else {
                self.charge(3)?;
                let key = Key::from_value(&item.0)?;
                let shown = key.to_string();
                if !out.insert_new(key, v) {
                    return Err(EvalError::msg(format!(
                        "insert failed: key {shown} already exists"
                    )));
                }
            }
        }
        self.charge(SELECT_COST)?;
        Ok(Value::Map(Map::Owned(Arc::new(out))))
    }

    fn opt_map(&mut self, l: &Loop, range: Value<'a>, t: &Node) -> Result<Value<'a>, EvalError> {
        self.charge(1)?;
        let inner = match range {
            Value::Optional(None) => {
                self.charge(1)?;
                return Ok(Value::Optional(None));
            }
            Value::Optional(Some(v)) => (*v).clone(),
            _ => return Err(EvalError::NoSuchOverload),
        };
        self.charge(2)?;
        self.set(l.slot, inner);
        let out = self.eval(t)?;
        match &l.kind {
            LoopKind::OptFlatMap(_) => match out {
                Value::Optional(_) => Ok(out),
                _ => Err(EvalError::NoSuchOverload),
            },
            _ => Ok(Value::Optional(Some(Arc::new(out)))),
        }
    }

    fn sort_by(&mut self, l: &Loop, range: Value<'a>, key: &Node) -> Result<Value<'a>, EvalError> {
        let Value::List(list) = range else {
            return Err(EvalError::NoSuchOverload);
        };
        let mut keyed = Vec::with_capacity(list.len());
        for v in list.iter() {
            self.tick()?;
            self.set(l.slot, v.clone());
            let k = self.eval(key)?;
            self.charge(SELECT_COST + LIST_CREATE_COST + 1)?;
            keyed.push((k, v));
        }
        crate::libs::lists::sort_keyed(&mut keyed)?;
        self.charge(list.len() as u64)?;
        Ok(Value::List(List::from_vec(
            keyed.into_iter().map(|(_, v)| v).collect(),
        )))
    }
}

/// `has(v.field)`: a map tells whether it has the key; a list cannot be indexed by a string;
/// any other value has no fields (cel-go's presence test is false, not an error).
fn has_field<'a>(v: &Value<'a>, field: &str) -> Result<Value<'a>, EvalError> {
    match v {
        Value::Map(m) => Ok(Value::Bool(m.contains_str(field))),
        Value::List(_) => Err(string_index_in_list()),
        _ => Ok(Value::Bool(false)),
    }
}

/// The Go type (`%T`) of the cel-go value standing for `v`, as cel-go's messages name it.
fn go_type_name(v: &Value<'_>) -> &'static str {
    match v {
        Value::Null => "types.Null",
        Value::Bool(_) => "types.Bool",
        Value::Int(_) => "types.Int",
        Value::Uint(_) => "types.Uint",
        Value::Double(_) => "types.Double",
        Value::String(_) => "types.String",
        Value::Bytes(_) => "types.Bytes",
        Value::List(_) => "*types.baseList",
        Value::Map(_) => "*types.baseMap",
        Value::Timestamp(_) => "types.Timestamp",
        Value::Duration(_) => "types.Duration",
        Value::Type(_) => "*types.Type",
        Value::Optional(_) => "*types.Optional",
        // Kubernetes' library types live in its `cel` package.
        Value::Opaque(o) => match o.type_name() {
            crate::libs::ip::IP => "cel.IP",
            crate::libs::ip::CIDR => "cel.CIDR",
            crate::libs::quantity::QUANTITY => "cel.Quantity",
            crate::libs::semver::SEMVER => "cel.Semver",
            crate::libs::urls::URL => "cel.URL",
            other => other,
        },
    }
}

/// A field selected from a list: cel-go indexes the list with the field name.
fn string_index_in_list() -> EvalError {
    EvalError::msg("unsupported index type 'string' in list".to_string())
}

/// `container[key]` for lists and maps; `Ok(None)` if absent.
fn lookup<'a>(container: &Value<'a>, key: &Value<'_>) -> Result<Option<Value<'a>>, EvalError> {
    // cel-go turns a computed index into a qualifier first, which only these types can be.
    if !matches!(
        key,
        Value::String(_) | Value::Int(_) | Value::Uint(_) | Value::Bool(_) | Value::Double(_)
    ) {
        return Err(EvalError::InvalidQualifier(key.type_name()));
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
                        crate::libs::std_lib::format_double(*d)
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
        Value::Double(d) => crate::libs::std_lib::format_double(*d),
        Value::Bool(b) => b.to_string(),
        other => other.type_name().to_string(),
    }
}
