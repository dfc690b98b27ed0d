//! The function registry: every function of an environment with its overloads, each
//! overload's signature (for the checker), implementation (for the evaluator) and cost (for the
//! cost model) side by side so they cannot disagree. The libraries ([`libs`](crate::libs))
//! fill it; the checker, planner and evaluator read it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::{EvalError, NoSuchOverload, OverloadShown};
use crate::types::Type;
use crate::value::{List, Map, Value};

/// An overload implementation. Receiver-style calls get the receiver as `args[0]`.
pub(crate) type ImplFn = for<'a> fn(&[Value<'a>]) -> Result<Value<'a>, EvalError>;

/// The runtime cost of one call, from its arguments and result (cel-go's `costCall`).
pub(crate) type CostFn = fn(&[Value<'_>], &Value<'_>) -> u64;

/// The default call cost.
pub(crate) fn cost_one(_: &[Value<'_>], _: &Value<'_>) -> u64 {
    1
}

/// What a value must be to match a parameter at runtime: cel-go's runtime type guard, which
/// checks a list's first element and a map's first entry against the declared element types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Any,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    List(Box<Kind>),
    Map(Box<Kind>, Box<Kind>),
    Timestamp,
    Duration,
    Type,
    Optional,
    Opaque(Arc<str>),
}

impl Kind {
    pub fn of(t: &Type) -> Kind {
        match t {
            Type::Dyn | Type::Param(_) | Type::Error => Kind::Any,
            Type::Null => Kind::Null,
            Type::Bool => Kind::Bool,
            Type::Int => Kind::Int,
            Type::Uint => Kind::Uint,
            Type::Double => Kind::Double,
            Type::String => Kind::String,
            Type::Bytes => Kind::Bytes,
            Type::Timestamp => Kind::Timestamp,
            Type::Duration => Kind::Duration,
            Type::List(e) => Kind::List(Box::new(Kind::of(e))),
            Type::Map(k, v) => Kind::Map(Box::new(Kind::of(k)), Box::new(Kind::of(v))),
            Type::Object(_) => Kind::Map(Box::new(Kind::Any), Box::new(Kind::Any)),
            Type::Type(_) => Kind::Type,
            Type::Optional(_) => Kind::Optional,
            Type::Opaque(n, _) => Kind::Opaque(n.clone()),
        }
    }

    /// This kind without its element types: what a function bound without type guards
    /// dispatches on.
    pub fn unguarded(&self) -> Kind {
        match self {
            Kind::List(_) => Kind::List(Box::new(Kind::Any)),
            Kind::Map(..) => Kind::Map(Box::new(Kind::Any), Box::new(Kind::Any)),
            other => other.clone(),
        }
    }

    pub fn matches(&self, v: &Value<'_>) -> bool {
        match (self, v) {
            (Kind::Any, _) => true,
            (Kind::Null, Value::Null)
            | (Kind::Bool, Value::Bool(_))
            | (Kind::Int, Value::Int(_))
            | (Kind::Uint, Value::Uint(_))
            | (Kind::Double, Value::Double(_))
            | (Kind::String, Value::String(_))
            | (Kind::Bytes, Value::Bytes(_))
            | (Kind::Timestamp, Value::Timestamp(_))
            | (Kind::Duration, Value::Duration(_))
            | (Kind::Type, Value::Type(_))
            | (Kind::Optional, Value::Optional(_)) => true,
            (Kind::List(e), Value::List(l)) => matches!(**e, Kind::Any) || e.first_of(l),
            (Kind::Map(k, v), Value::Map(m)) => {
                matches!((&**k, &**v), (Kind::Any, Kind::Any)) || Kind::first_entry_of(k, v, m)
            }
            (Kind::Opaque(n), Value::Opaque(o)) => o.type_name() == &**n,
            _ => false,
        }
    }
}

impl Kind {
    /// Whether `l` is empty or its first element matches this kind.
    #[inline(never)]
    fn first_of(&self, l: &List<'_>) -> bool {
        l.get(0).is_none_or(|first| self.matches(&first))
    }

    /// Whether `m` is empty or its first entry matches `key` and `value`.
    #[inline(never)]
    fn first_entry_of(key: &Kind, value: &Kind, m: &Map<'_>) -> bool {
        m.find_map(|k, v| Some(key.matches(&k) && value.matches(&v)))
            .unwrap_or(true)
    }
}

/// The traits of cel-go's runtime types that its operators dispatch on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Trait {
    /// `+`: numbers, strings, bytes, lists, timestamps and durations.
    Adder,
    /// `-`: numbers, timestamps and durations.
    Subtractor,
    /// `*`: numbers.
    Multiplier,
    /// `/`: numbers.
    Divider,
    /// `%`: integers.
    Modder,
    /// `<`, `<=`, `>`, `>=`: bools, numbers, strings, bytes, timestamps and durations.
    Comparer,
    /// unary `-` (and `!`): bools, ints, doubles and durations.
    Negater,
    /// `size`: strings, bytes, lists and maps.
    Sizer,
    /// `matches`: strings.
    Matcher,
    /// list operations: lists.
    Lister,
}

impl Trait {
    /// Whether cel-go's value for `v` has this trait.
    fn of(self, v: &Value<'_>) -> bool {
        use Value as V;
        match self {
            Trait::Adder => matches!(
                v,
                V::Int(_)
                    | V::Uint(_)
                    | V::Double(_)
                    | V::String(_)
                    | V::Bytes(_)
                    | V::List(_)
                    | V::Timestamp(_)
                    | V::Duration(_)
            ),
            Trait::Subtractor => matches!(
                v,
                V::Int(_) | V::Uint(_) | V::Double(_) | V::Timestamp(_) | V::Duration(_)
            ),
            Trait::Multiplier | Trait::Divider => {
                matches!(v, V::Int(_) | V::Uint(_) | V::Double(_))
            }
            Trait::Modder => matches!(v, V::Int(_) | V::Uint(_)),
            Trait::Comparer => matches!(
                v,
                V::Bool(_)
                    | V::Int(_)
                    | V::Uint(_)
                    | V::Double(_)
                    | V::String(_)
                    | V::Bytes(_)
                    | V::Timestamp(_)
                    | V::Duration(_)
            ),
            Trait::Negater => matches!(v, V::Bool(_) | V::Int(_) | V::Double(_) | V::Duration(_)),
            Trait::Sizer => matches!(v, V::String(_) | V::Bytes(_) | V::List(_) | V::Map(_)),
            Trait::Matcher => matches!(v, V::String(_)),
            Trait::Lister => matches!(v, V::List(_)),
        }
    }
}

/// How cel-go binds a function's implementations, which decides what it reports for a call
/// no overload accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Dispatch {
    /// Each overload has its own implementation behind a runtime type guard (cel-go's
    /// default): a call no guard accepts fails with `no such overload: f(arg types)`.
    #[default]
    Guarded,
    /// Each overload's implementation runs on whatever arguments arrive (cel-go's
    /// `DisableTypeGuards`), and rejects them with `no such overload`.
    Unguarded,
    /// One implementation for every overload (cel-go's singleton binding), run when the first
    /// argument has the trait (always, without one) and then rejecting the arguments with
    /// `no such overload`; a first argument without it fails with `no such overload: f`,
    /// unless it is a value with methods (string, timestamp, duration), whose method lookup
    /// fails with `no such overload`.
    Singleton(Option<Trait>),
}

impl Dispatch {
    /// The error for a call of `function` no overload accepts.
    #[cold]
    pub fn no_overload(self, function: &str, args: &[Value<'_>]) -> EvalError {
        let shown = match self {
            Dispatch::Guarded => OverloadShown::Signature,
            Dispatch::Unguarded | Dispatch::Singleton(None) => OverloadShown::Nothing,
            Dispatch::Singleton(Some(t)) => match args.first() {
                Some(a) if t.of(a) || has_methods(a) => OverloadShown::Nothing,
                _ => OverloadShown::Function,
            },
        };
        EvalError::NoSuchOverload(NoSuchOverload::new(function, type_names(args), shown))
    }

    /// The runtime matcher a candidate of this function uses for a parameter of `kind`.
    pub fn kind(self, kind: &Kind) -> Kind {
        match self {
            Dispatch::Guarded => kind.clone(),
            Dispatch::Unguarded | Dispatch::Singleton(_) => kind.unguarded(),
        }
    }
}

/// The runtime type names of a call's arguments.
pub(crate) fn type_names(args: &[Value<'_>]) -> Vec<String> {
    args.iter().map(|a| a.type_name().to_string()).collect()
}

/// Whether cel-go's value for `v` receives method calls (its `Receiver` trait).
fn has_methods(v: &Value<'_>) -> bool {
    matches!(
        v,
        Value::String(_) | Value::Timestamp(_) | Value::Duration(_)
    )
}

/// One overload of a function.
#[derive(Clone)]
pub(crate) struct Overload {
    /// Receiver style (`x.f(y)`): `params[0]` is the receiver.
    pub member: bool,
    pub params: Vec<Type>,
    pub result: Type,
    /// Runtime matchers for `params`.
    pub kinds: Vec<Kind>,
    /// `None` for operators the evaluator implements as special forms (`&&`, `?:`, `==`, …).
    pub imp: Option<ImplFn>,
    pub cost: CostFn,
    /// Whether `cost` reads the call's result (most costs read only the arguments).
    pub cost_reads_result: bool,
    /// Whether the result may be a string much longer than the receiver, which the cost
    /// ignores: the evaluator bounds the growth (see [`crate::STRING_GROWTH_LIMIT`]).
    pub grows: bool,
    /// What cel-go's runtime cost tracker of this overload asserts of an argument.
    pub tracker_asserts: Option<TrackerAssert>,
}

/// What a cel-go runtime cost tracker asserts of an argument's Go type without checking it.
/// The tracker runs after the call, even when an argument failed (it is then a `*types.Err`)
/// or no overload took the arguments; an argument of another type makes it panic, which
/// cel-go reports as an internal error of the whole evaluation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TrackerAssert {
    /// Argument `i` is a list (`traits.Lister`).
    Lister(usize),
    /// Argument `i` is an int (`types.Int`).
    Int(usize),
}

impl TrackerAssert {
    /// The tracker's panic for these arguments (`failed(i)`: argument `i` failed), if any.
    pub fn panic(self, args: &[Value<'_>], failed: impl Fn(usize) -> bool) -> Option<EvalError> {
        let (i, fits): (usize, fn(&Value<'_>) -> bool) = match self {
            TrackerAssert::Lister(i) => (i, |v| matches!(v, Value::List(_))),
            TrackerAssert::Int(i) => (i, |v| matches!(v, Value::Int(_))),
        };
        let go_type = if failed(i) {
            "*types.Err"
        } else {
            let v = args.get(i)?;
            if fits(v) {
                return None;
            }
            match v {
                Value::Struct(_) => "*dynamic.ObjectVal",
                other => other.go_type_name().unwrap_or("*types.Err"),
            }
        };
        Some(EvalError::Internal(match self {
            TrackerAssert::Lister(_) => format!(
                "interface conversion: {go_type} is not traits.Lister: missing method {}",
                first_missing_lister_method(go_type)
            ),
            TrackerAssert::Int(_) => {
                format!("interface conversion: ref.Val is {go_type}, not types.Int")
            }
        }))
    }
}

/// The first method of `traits.Lister` (in Go's order, by name: `Add`, `Contains`, `Get`, …)
/// that cel-go's type `go_type` lacks: the numbers, strings, bytes, timestamps and durations
/// add, nothing else does.
fn first_missing_lister_method(go_type: &str) -> &'static str {
    match go_type {
        "types.Int" | "types.Uint" | "types.Double" | "types.String" | "types.Bytes"
        | "types.Timestamp" | "types.Duration" => "Contains",
        _ => "Add",
    }
}

impl Overload {
    /// The type parameters this overload's signature mentions.
    pub fn type_params(&self) -> Vec<Arc<str>> {
        fn collect(t: &Type, out: &mut Vec<Arc<str>>) {
            match t {
                Type::Param(p) if !out.contains(p) => {
                    out.push(p.clone());
                }
                Type::List(e) | Type::Type(e) | Type::Optional(e) => collect(e, out),
                Type::Opaque(_, params) => params.iter().for_each(|p| collect(p, out)),
                Type::Map(k, v) => {
                    collect(k, out);
                    collect(v, out);
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        for p in &self.params {
            collect(p, &mut out);
        }
        collect(&self.result, &mut out);
        out
    }
}

/// A function and its overloads.
#[derive(Clone)]
pub(crate) struct Function {
    pub name: String,
    pub overloads: Vec<Overload>,
    pub dispatch: Dispatch,
}

/// All functions of an environment, by name.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    functions: HashMap<String, Function>,
    macros: Macros,
}

/// The receiver macros beyond cel-go's standard ones that an environment's libraries bring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Macros {
    /// `all`, `exists`, `existsOne` with two variables and `transformList`, `transformMap`,
    /// `transformMapEntry` (cel-go `ext.TwoVarComprehensions`).
    pub two_var: bool,
    /// `sortBy` (cel-go `ext.Lists` version 2 and later).
    pub sort_by: bool,
}

#[cfg(test)]
impl Macros {
    /// Every macro: what the newest compatibility version expands (the parser's tests).
    pub const ALL: Macros = Macros {
        two_var: true,
        sort_by: true,
    };
}

impl Registry {
    /// The macros the parser expands for this registry.
    pub fn macros(&self) -> Macros {
        self.macros
    }

    /// Enables macros for the parser.
    pub fn enable_macros(&mut self, f: impl FnOnce(&mut Macros)) {
        f(&mut self.macros);
    }

    pub fn get(&self, name: &str) -> Option<&Function> {
        self.functions.get(name)
    }

    /// Starts declaring an overload of `name`.
    pub fn def<'r>(&'r mut self, name: &str) -> OverloadBuilder<'r> {
        OverloadBuilder {
            registry: self,
            name: name.to_string(),
            overload: Overload {
                member: false,
                params: Vec::new(),
                result: Type::Dyn,
                kinds: Vec::new(),
                imp: None,
                cost: cost_one,
                cost_reads_result: false,
                grows: false,
                tracker_asserts: None,
            },
        }
    }

    fn insert(&mut self, name: String, overload: Overload) {
        self.functions
            .entry(name.clone())
            .or_insert_with(|| Function {
                name,
                overloads: Vec::new(),
                dispatch: Dispatch::default(),
            })
            .overloads
            .push(overload);
    }

    /// Declares how cel-go binds the implementations of `name` (declared already).
    pub fn dispatch(&mut self, name: &str, dispatch: Dispatch) {
        if let Some(f) = self.functions.get_mut(name) {
            f.dispatch = dispatch;
        }
    }
}

/// Builds one overload; `done` adds it to the registry.
pub(crate) struct OverloadBuilder<'r> {
    registry: &'r mut Registry,
    name: String,
    overload: Overload,
}

impl OverloadBuilder<'_> {
    /// A global function `name(params…) -> result`.
    pub fn global(mut self, params: &[Type], result: Type) -> Self {
        self.overload.params = params.to_vec();
        self.overload.result = result;
        self
    }

    /// A receiver function `params[0].name(params[1..]…) -> result`.
    pub fn member(mut self, params: &[Type], result: Type) -> Self {
        self.overload.member = true;
        self.global(params, result)
    }

    /// The implementation.
    pub fn imp(mut self, f: ImplFn) -> Self {
        self.overload.imp = Some(f);
        self
    }

    /// The cost function (default: 1 per call), from the arguments alone.
    pub fn cost(mut self, f: CostFn) -> Self {
        self.overload.cost = f;
        self
    }

    /// A cost function that reads the call's result too.
    pub fn cost_of_result(mut self, f: CostFn) -> Self {
        self.overload.cost = f;
        self.overload.cost_reads_result = true;
        self
    }

    /// Marks a string result whose growth over the receiver the cost ignores.
    pub fn grows(mut self) -> Self {
        self.overload.grows = true;
        self
    }

    /// Declares what cel-go's runtime cost tracker of this overload asserts of an argument.
    pub fn tracker_asserts(mut self, a: TrackerAssert) -> Self {
        self.overload.tracker_asserts = Some(a);
        self
    }

    /// Adds the overload.
    pub fn done(mut self) {
        self.overload.kinds = self.overload.params.iter().map(Kind::of).collect();
        self.registry.insert(self.name, self.overload);
    }
}
