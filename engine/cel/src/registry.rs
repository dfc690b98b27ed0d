//! The function registry: every function of an environment with its overloads, each
//! overload's signature (for the checker), implementation (for the evaluator) and cost (for the
//! cost model) side by side so they cannot disagree. The libraries ([`libs`](crate::libs))
//! fill it; the checker, planner and evaluator read it.

use std::collections::HashMap;
use std::sync::Arc;

use crate::error::EvalError;
use crate::types::Type;
use crate::value::Value;

/// An overload implementation. Receiver-style calls get the receiver as `args[0]`.
pub(crate) type ImplFn = for<'a> fn(&[Value<'a>]) -> Result<Value<'a>, EvalError>;

/// The runtime cost of one call, from its arguments and result (cel-go's `costCall`).
pub(crate) type CostFn = fn(&[Value<'_>], &Value<'_>) -> u64;

/// The default call cost.
pub(crate) fn cost_one(_: &[Value<'_>], _: &Value<'_>) -> u64 {
    1
}

/// What a value must be to match a parameter at runtime.
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
    List,
    Map,
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
            Type::List(_) => Kind::List,
            Type::Map(..) | Type::Object(_) => Kind::Map,
            Type::Type(_) => Kind::Type,
            Type::Optional(_) => Kind::Optional,
            Type::Opaque(n, _) => Kind::Opaque(n.clone()),
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
            | (Kind::List, Value::List(_))
            | (Kind::Map, Value::Map(_))
            | (Kind::Timestamp, Value::Timestamp(_))
            | (Kind::Duration, Value::Duration(_))
            | (Kind::Type, Value::Type(_))
            | (Kind::Optional, Value::Optional(_)) => true,
            (Kind::Opaque(n), Value::Opaque(o)) => o.type_name() == &**n,
            _ => false,
        }
    }
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
}

/// All functions of an environment, by name.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    functions: HashMap<String, Function>,
}

impl Registry {
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
            },
        }
    }

    fn insert(&mut self, name: String, overload: Overload) {
        self.functions
            .entry(name.clone())
            .or_insert_with(|| Function {
                name,
                overloads: Vec::new(),
            })
            .overloads
            .push(overload);
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

    /// The cost function (default: 1 per call).
    pub fn cost(mut self, f: CostFn) -> Self {
        self.overload.cost = f;
        self
    }

    /// Adds the overload.
    pub fn done(mut self) {
        self.overload.kinds = self.overload.params.iter().map(Kind::of).collect();
        self.registry.insert(self.name, self.overload);
    }
}
