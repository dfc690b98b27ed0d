//! Function libraries. Each function is declared once, in a [`Registry`]: its overloads'
//! signatures (for the checker), implementations (for the evaluator) and cost (for the cost
//! model) sit side by side so they cannot disagree.

pub mod authz;
pub(crate) mod format;
pub(crate) mod go_sort;
pub(crate) mod ip;
pub(crate) mod jsonpatch;
pub(crate) mod kube_lists;
pub(crate) mod lists;
pub(crate) mod mutation;
pub(crate) mod opaque;
pub(crate) mod optional;
pub(crate) mod quantity;
pub(crate) mod re2_syntax;
pub(crate) mod regex;
pub(crate) mod semver;
pub(crate) mod sets;
pub(crate) mod std_lib;
pub(crate) mod string_format;
pub(crate) mod strings;
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod time;
pub(crate) mod urls;
pub(crate) mod validators;

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

/// The libraries an environment can enable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Library {
    /// The CEL standard library.
    Standard,
    /// cel-go `ext.Strings` (version 2 functions, plus `format` and `quote`).
    Strings,
    /// cel-go's optional types.
    Optional,
    /// Kubernetes' lists library (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`).
    KubeLists,
    /// cel-go `ext.Lists` version 3.
    Lists,
    /// cel-go `ext.Sets`.
    Sets,
    /// Kubernetes' regex library (`find`, `findAll`).
    Regex,
    /// Kubernetes' quantity library.
    Quantity,
    /// Kubernetes' IP and CIDR libraries.
    Ip,
    /// Kubernetes' URL library.
    Urls,
    /// Kubernetes' semver library.
    Semver,
    /// Kubernetes' named formats library.
    Format,
    /// Kubernetes' authorization library, with field and label selectors.
    Authz,
    /// `<string>.format(list)` of cel-go's strings extension, version 2.
    StringFormat,
}

impl Library {
    /// The Kubernetes minor version whose NewExpressions environment first has the library
    /// (`IntroducedVersion` in kube-apiserver's base environment; 0 for the always-on ones).
    pub(crate) fn introduced(self) -> u32 {
        match self {
            Library::Standard | Library::KubeLists | Library::Regex | Library::Urls => 0,
            Library::Authz => 27,
            Library::Optional | Library::Quantity => 28,
            Library::Strings | Library::StringFormat | Library::Sets => 29,
            Library::Ip => 30,
            Library::Format => 31,
            Library::Semver => 33,
            Library::Lists => 34,
        }
    }
}

/// Builds the registry for `libs`.
pub(crate) fn build(libs: &[Library]) -> Registry {
    let mut r = Registry::default();
    for lib in libs {
        match lib {
            Library::Standard => std_lib::register(&mut r),
            Library::Strings => strings::register(&mut r),
            Library::Optional => optional::register(&mut r),
            Library::KubeLists => kube_lists::register(&mut r),
            Library::Lists => lists::register(&mut r),
            Library::Sets => sets::register(&mut r),
            Library::Regex => regex::register(&mut r),
            Library::Quantity => quantity::register(&mut r),
            Library::Ip => ip::register(&mut r),
            Library::Urls => urls::register(&mut r),
            Library::Semver => semver::register(&mut r),
            Library::Format => format::register(&mut r),
            Library::Authz => authz::register(&mut r),
            Library::StringFormat => string_format::register(&mut r),
        }
    }
    r
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

/// An argument that an overload's signature guarantees; `NoSuchOverload` otherwise.
pub(crate) fn arg<'v, 'a>(args: &'v [Value<'a>], i: usize) -> Result<&'v Value<'a>, EvalError> {
    args.get(i).ok_or(EvalError::NoSuchOverload)
}

/// The string argument at `i`.
pub(crate) fn str_arg<'v>(args: &'v [Value<'_>], i: usize) -> Result<&'v str, EvalError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(EvalError::NoSuchOverload),
    }
}

/// The int argument at `i`.
pub(crate) fn int_arg(args: &[Value<'_>], i: usize) -> Result<i64, EvalError> {
    match args.get(i) {
        Some(Value::Int(n)) => Ok(*n),
        _ => Err(EvalError::NoSuchOverload),
    }
}
