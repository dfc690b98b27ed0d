//! The type checker: resolves identifiers and functions, infers a type for every node (with
//! cel-go's type-parameter unification), and reports cel-go's error texts.

use std::collections::HashMap;
use std::sync::Arc;

use crate::ast::{Comprehension, Expr, ExprKind, Literal, MacroKind, StructField};
use crate::error::Issue;
use crate::parse::Positions;
use crate::registry::{Function, Registry};
use crate::structs::TypeProvider;
use crate::types::Type;
use crate::value::StructType;

/// What an identifier, a qualified name or a call resolved to.
#[derive(Clone, Debug)]
pub(crate) enum Ref {
    /// A declared variable (possibly with a dotted name).
    Var(String),
    /// A type name used as a value (`int`, `list`, …).
    TypeValue(String),
    /// A function; `overloads` are indices into the function's overload list that can match.
    /// `qualified` marks `a.b.f(x)` resolved as the global function `a.b.f(x)`.
    Function {
        name: String,
        overloads: Vec<usize>,
        qualified: bool,
    },
}

/// The checker's results.
#[derive(Default)]
pub(crate) struct Checked {
    pub types: HashMap<u64, Type>,
    pub refs: HashMap<u64, Ref>,
}

/// Declarations the checker needs.
pub(crate) struct Decls<'e> {
    pub variables: &'e HashMap<String, Type>,
    pub registry: &'e Registry,
    pub container: &'e str,
    pub types: Option<&'e dyn TypeProvider>,
}

/// Resolves the type name of a message literal as cel-go does: per container candidate, a
/// declared variable or type name first, then the type provider's message types. `None` when
/// nothing resolves; `Err((name, message))` when the name resolves to something that is not a
/// message type (the resolved name, and the checker's error).
pub(crate) fn resolve_message(
    name: &str,
    container: &str,
    variables: &HashMap<String, Type>,
    types: Option<&dyn TypeProvider>,
) -> Option<Result<Arc<dyn StructType>, (String, String)>> {
    for cand in candidate_names(container, name) {
        if let Some(t) = variables.get(&cand) {
            let msg = match t {
                Type::Type(inner) => format!("'{}' is not a message type", inner.runtime_name()),
                other => format!("'{}' is not a type", other.runtime_name()),
            };
            return Some(Err((cand, msg)));
        }
        if let Some(t) = type_ident(&cand) {
            let msg = format!("'{}' is not a message type", t.runtime_name());
            return Some(Err((cand, msg)));
        }
        if let Some(st) = types.and_then(|p| p.resolve(&cand)) {
            return Some(Ok(st));
        }
    }
    None
}

/// Names that denote types when used as identifiers.
pub(crate) fn type_ident(name: &str) -> Option<Type> {
    Some(match name {
        "int" => Type::Int,
        "uint" => Type::Uint,
        "double" => Type::Double,
        "bool" => Type::Bool,
        "string" => Type::String,
        "bytes" => Type::Bytes,
        "null_type" => Type::Null,
        "list" => Type::list(Type::Dyn),
        "map" => Type::map(Type::Dyn, Type::Dyn),
        // cel-go's `type` and `optional_type` identifiers denote the kinds without a
        // parameter (`type(type)` is a `type(type(type))`).
        "type" => Type::opaque("type"),
        "google.protobuf.Timestamp" => Type::Timestamp,
        "google.protobuf.Duration" => Type::Duration,
        "optional_type" => Type::opaque("optional_type"),
        _ => return None,
    })
}

/// Container-qualified candidates for `name`, most specific first.
pub(crate) fn candidate_names(container: &str, name: &str) -> Vec<String> {
    if let Some(abs) = name.strip_prefix('.') {
        return vec![abs.to_string()];
    }
    if container.is_empty() {
        return vec![name.to_string()];
    }
    let mut out = vec![format!("{container}.{name}")];
    let mut c = container;
    while let Some(i) = c.rfind('.') {
        c = &c[..i];
        out.push(format!("{c}.{name}"));
    }
    out.push(name.to_string());
    out
}

/// Type-checks `expr`. Issues are returned rather than stopping at the first.
pub(crate) fn check(expr: &Expr, decls: &Decls<'_>, pos: &Positions) -> (Checked, Vec<Issue>) {
    let mut c = Checker {
        decls,
        pos,
        out: Checked::default(),
        issues: Vec::new(),
        scopes: Vec::new(),
        subs: Subs::default(),
        next_var: 0,
    };
    c.check(expr);
    let Checker {
        mut out,
        issues,
        subs,
        ..
    } = c;
    for t in out.types.values_mut() {
        *t = subs.substitute(t, true);
    }
    (out, issues)
}

#[derive(Clone, Default)]
struct Subs(HashMap<Arc<str>, Type>);

impl Subs {
    fn find(&self, t: &Type) -> Option<&Type> {
        match t {
            Type::Param(p) => self.0.get(p),
            _ => None,
        }
    }

    fn substitute(&self, t: &Type, to_dyn: bool) -> Type {
        if let Some(s) = self.find(t) {
            return self.substitute(s, to_dyn);
        }
        match t {
            Type::Param(_) if to_dyn => Type::Dyn,
            Type::List(e) => Type::list(self.substitute(e, to_dyn)),
            Type::Map(k, v) => Type::map(self.substitute(k, to_dyn), self.substitute(v, to_dyn)),
            Type::Type(e) => Type::type_of(self.substitute(e, to_dyn)),
            Type::Optional(e) => Type::optional(self.substitute(e, to_dyn)),
            Type::Opaque(n, params) => Type::Opaque(
                n.clone(),
                params.iter().map(|p| self.substitute(p, to_dyn)).collect(),
            ),
            other => other.clone(),
        }
    }

    /// cel-go's `internalIsAssignable(t1, t2)`: can a value of `t2` be used where `t1` is expected.
    fn assignable(&mut self, t1: &Type, t2: &Type) -> bool {
        if let Type::Param(_) = t2 {
            let (valid, has_sub) = self.valid_substitution(t1, t2);
            if valid {
                return true;
            }
            if has_sub {
                return false;
            }
        }
        if let Type::Param(_) = t1 {
            return self.valid_substitution(t2, t1).0;
        }
        if t1.is_dyn() || t2.is_dyn() {
            return true;
        }
        if *t1 == Type::Null {
            return nullable(t2);
        }
        if *t2 == Type::Null {
            return nullable(t1);
        }
        match (t1, t2) {
            (Type::Type(_), Type::Type(_)) => true,
            (Type::List(a), Type::List(b)) | (Type::Optional(a), Type::Optional(b)) => {
                self.assignable(a, b)
            }
            (Type::Map(k1, v1), Type::Map(k2, v2)) => {
                self.assignable(k1, k2) && self.assignable(v1, v2)
            }
            (Type::Opaque(n1, p1), Type::Opaque(n2, p2)) => {
                n1 == n2
                    && p1.len() == p2.len()
                    && p1.iter().zip(p2).all(|(a, b)| self.assignable(a, b))
            }
            _ => t1 == t2,
        }
    }

    fn valid_substitution(&mut self, t1: &Type, t2: &Type) -> (bool, bool) {
        if t1 == t2 {
            return (true, true);
        }
        if let Some(sub) = self.find(t2).cloned() {
            if *t1 == sub {
                return (true, true);
            }
            if self.assignable(t1, &sub) {
                let general = most_general(t1, &sub);
                if self.not_referenced_in(t2, &general)
                    && let Type::Param(p) = t2
                {
                    self.0.insert(p.clone(), general);
                }
                return (true, true);
            }
            return (false, true);
        }
        if self.not_referenced_in(t2, t1) {
            if let Type::Param(p) = t2 {
                self.0.insert(p.clone(), t1.clone());
            }
            return (true, false);
        }
        (false, false)
    }

    fn not_referenced_in(&self, t: &Type, within: &Type) -> bool {
        if t == within {
            return false;
        }
        match within {
            Type::Param(_) => match self.find(within) {
                Some(s) => self.not_referenced_in(t, s),
                None => true,
            },
            Type::List(e) | Type::Type(e) | Type::Optional(e) => self.not_referenced_in(t, e),
            Type::Map(k, v) => self.not_referenced_in(t, k) && self.not_referenced_in(t, v),
            Type::Opaque(_, params) => params.iter().all(|p| self.not_referenced_in(t, p)),
            _ => true,
        }
    }
}

fn nullable(t: &Type) -> bool {
    matches!(
        t,
        Type::Null
            | Type::Opaque(..)
            | Type::Object(_)
            | Type::Duration
            | Type::Timestamp
            | Type::Optional(_)
    )
}

fn less_specific(t1: &Type, t2: &Type) -> bool {
    if t1.is_dyn() || matches!(t1, Type::Param(_)) {
        return true;
    }
    if t2.is_dyn() || matches!(t2, Type::Param(_)) {
        return false;
    }
    match (t1, t2) {
        (Type::List(a), Type::List(b)) | (Type::Optional(a), Type::Optional(b)) => {
            less_specific(a, b)
        }
        (Type::Map(k1, v1), Type::Map(k2, v2)) => less_specific(k1, k2) && less_specific(v1, v2),
        (Type::Opaque(n1, p1), Type::Opaque(n2, p2)) => {
            n1 == n2 && p1.len() == p2.len() && p1.iter().zip(p2).all(|(a, b)| less_specific(a, b))
        }
        (Type::Type(_), Type::Type(_)) => true,
        _ => t1 == t2,
    }
}

fn most_general(t1: &Type, t2: &Type) -> Type {
    if less_specific(t1, t2) {
        t1.clone()
    } else {
        t2.clone()
    }
}

struct Checker<'d, 'e> {
    decls: &'d Decls<'e>,
    pos: &'d Positions,
    out: Checked,
    issues: Vec<Issue>,
    scopes: Vec<(String, Type)>,
    subs: Subs,
    next_var: usize,
}

impl<'e> Checker<'_, 'e> {
    fn error(&mut self, id: u64, msg: String) {
        self.issues.push(self.pos.issue(id, msg));
    }

    fn set(&mut self, id: u64, t: Type) {
        self.out.types.insert(id, t);
    }

    fn get(&self, id: u64) -> Type {
        self.out.types.get(&id).cloned().unwrap_or(Type::Error)
    }

    fn fresh(&mut self) -> Type {
        let t = Type::Param(Arc::from(format!("_var{}", self.next_var)));
        self.next_var += 1;
        t
    }

    fn assignable(&mut self, t1: &Type, t2: &Type) -> bool {
        let mut copy = self.subs.clone();
        if copy.assignable(t1, t2) {
            self.subs = copy;
            true
        } else {
            false
        }
    }

    fn sub(&self, t: &Type) -> Type {
        self.subs.substitute(t, false)
    }

    fn local(&self, name: &str) -> Option<&Type> {
        self.scopes
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, t)| t)
    }

    fn global(&self, name: &str) -> Option<(String, Ref, Type)> {
        for cand in candidate_names(self.decls.container, name) {
            if let Some(t) = self.decls.variables.get(&cand) {
                return Some((cand.clone(), Ref::Var(cand), t.clone()));
            }
            if let Some(t) = type_ident(&cand) {
                return Some((cand.clone(), Ref::TypeValue(cand), Type::type_of(t)));
            }
        }
        None
    }

    fn function(&self, name: &str) -> Option<&'e Function> {
        let registry: &'e Registry = self.decls.registry;
        for cand in candidate_names(self.decls.container, name) {
            if let Some(f) = registry.get(&cand) {
                return Some(f);
            }
        }
        None
    }

    fn check(&mut self, e: &Expr) {
        let t = match &e.kind {
            ExprKind::Literal(l) => match l {
                Literal::Null => Type::Null,
                Literal::Bool(_) => Type::Bool,
                Literal::Int(_) => Type::Int,
                Literal::Uint(_) => Type::Uint,
                Literal::Double(_) => Type::Double,
                Literal::String(_) => Type::String,
                Literal::Bytes(_) => Type::Bytes,
            },
            ExprKind::Ident(name) => self.check_ident(e.id, name),
            ExprKind::Select {
                operand,
                field,
                test,
                optional,
            } => self.check_select(e, operand, field, *test, *optional),
            ExprKind::Call {
                target,
                function,
                args,
            } => self.check_call(e.id, target.as_deref(), function, args),
            ExprKind::List { elements, optional } => {
                let mut elem: Option<Type> = None;
                for (i, el) in elements.iter().enumerate() {
                    self.check(el);
                    let mut t = self.get(el.id);
                    if optional.get(i).copied().unwrap_or(false) {
                        t = self.unwrap_optional(el.id, t);
                    }
                    elem = Some(self.join(elem, t));
                }
                let elem = match elem {
                    Some(t) => t,
                    None => self.fresh(),
                };
                Type::list(elem)
            }
            ExprKind::Map { entries } => {
                let mut kt: Option<Type> = None;
                let mut vt: Option<Type> = None;
                for entry in entries {
                    self.check(&entry.key);
                    let k = self.get(entry.key.id);
                    kt = Some(self.join(kt, k));
                    self.check(&entry.value);
                    let mut v = self.get(entry.value.id);
                    if entry.optional {
                        v = self.unwrap_optional(entry.value.id, v);
                    }
                    vt = Some(self.join(vt, v));
                }
                match (kt, vt) {
                    (Some(k), Some(v)) => Type::map(k, v),
                    _ => {
                        let k = self.fresh();
                        let v = self.fresh();
                        Type::map(k, v)
                    }
                }
            }
            ExprKind::Struct { type_name, fields } => self.check_struct(e.id, type_name, fields),
            ExprKind::Comprehension(c) => self.check_comprehension(e.id, c),
        };
        let t = self.sub(&t);
        self.set(e.id, t);
    }

    /// `Name{field: value, …}`: every field must exist and accept its value. An undeclared
    /// name stops there (the field values are not checked, as in cel-go).
    fn check_struct(&mut self, id: u64, type_name: &str, fields: &[StructField]) -> Type {
        let d = self.decls;
        let object = match resolve_message(type_name, d.container, d.variables, d.types) {
            None => {
                self.error(
                    id,
                    format!(
                        "undeclared reference to '{type_name}' (in container '{}')",
                        d.container
                    ),
                );
                return Type::Error;
            }
            Some(Ok(st)) => Ok(st.checker_type()),
            Some(Err((resolved, msg))) => {
                self.error(id, msg);
                Err(resolved)
            }
        };
        for f in fields {
            self.check(&f.value);
            let field_t = match &object {
                Ok(o) => match o.field(&f.name) {
                    Some(t) => t.clone(),
                    None => {
                        self.error(f.id, format!("undefined field '{}'", f.name));
                        Type::Error
                    }
                },
                Err(resolved) => {
                    let msg = format!("unexpected failed resolution of '{resolved}'");
                    self.error(f.id, msg);
                    Type::Error
                }
            };
            let mut value_t = self.sub(&self.get(f.value.id));
            if f.optional {
                value_t = self.unwrap_optional(f.value.id, value_t);
            }
            let accepted = if field_t.is_untyped() {
                value_t.is_dyn() || matches!(value_t, Type::Param(_))
            } else {
                self.assignable(&field_t, &value_t)
            };
            if !accepted {
                let value_t = self.sub(&value_t);
                self.error(
                    f.id,
                    format!(
                        "expected type of field '{}' is '{}' but provided type is '{}'",
                        f.name,
                        checker_name(&field_t),
                        checker_name(&value_t)
                    ),
                );
            }
        }
        match object {
            Ok(o) => Type::Object(o),
            Err(_) => Type::Error,
        }
    }

    fn unwrap_optional(&mut self, id: u64, t: Type) -> Type {
        match t {
            Type::Optional(inner) => *inner,
            t if t.is_dyn() => t,
            t => {
                self.error(
                    id,
                    format!(
                        "expected type '{}' but found '{}'",
                        Type::optional(t.clone()),
                        t
                    ),
                );
                t
            }
        }
    }

    /// The element type of a literal so far joined with the next element's: the more general
    /// one when assignable, else `dyn` (mixed literals are the validators' concern).
    fn join(&mut self, prev: Option<Type>, cur: Type) -> Type {
        let Some(prev) = prev else {
            return cur;
        };
        if self.assignable(&prev, &cur) {
            return most_general(&prev, &cur);
        }
        Type::Dyn
    }

    fn check_ident(&mut self, id: u64, name: &str) -> Type {
        if let Some(t) = self.local(name) {
            return t.clone();
        }
        if let Some((_, r, t)) = self.global(name) {
            self.out.refs.insert(id, r);
            return t;
        }
        self.error(
            id,
            format!(
                "undeclared reference to '{name}' (in container '{}')",
                self.decls.container
            ),
        );
        Type::Error
    }

    fn check_select(
        &mut self,
        e: &Expr,
        operand: &Expr,
        field: &str,
        test: bool,
        optional: bool,
    ) -> Type {
        if !test
            && !optional
            && let Some(q) = e.qualified_name()
        {
            let root = q.split('.').next().unwrap_or_default();
            if self.local(root).is_none()
                && let Some((_, r, t)) = self.global(&q)
            {
                self.out.refs.insert(e.id, r);
                return t;
            }
        }
        self.check(operand);
        let operand_t = self.sub(&self.get(operand.id));
        let (target, was_opt) = match operand_t {
            Type::Optional(inner) => (*inner, true),
            t => (t, false),
        };
        let result = match &target {
            Type::Map(_, v) => (**v).clone(),
            Type::Object(o) => match o.field(field) {
                Some(t) => t.clone(),
                None => {
                    self.error(e.id, format!("undefined field '{field}'"));
                    Type::Error
                }
            },
            Type::Param(_) => {
                self.assignable(&Type::Dyn, &target);
                Type::Dyn
            }
            t if t.is_dyn() => Type::Dyn,
            // Kubernetes declares its library types (quantities, URLs, IPs, authorizer
            // checks, …) as cel-go object types without a provider entry, so selecting a
            // field of one fails the provider lookup.
            Type::Opaque(name, params) if params.is_empty() && name.contains('.') => {
                self.error(e.id, format!("unexpected failed resolution of '{name}'"));
                Type::Error
            }
            t => {
                let t = t.clone();
                self.error(
                    e.id,
                    format!(
                        "type '{}' does not support field selection",
                        checker_name(&t)
                    ),
                );
                Type::Dyn
            }
        };
        if test {
            return Type::Bool;
        }
        if optional || was_opt {
            Type::optional(result)
        } else {
            result
        }
    }

    fn check_call(&mut self, id: u64, target: Option<&Expr>, name: &str, args: &[Expr]) -> Type {
        for a in args {
            self.check(a);
        }
        let Some(target) = target else {
            let Some(f) = self.function(name) else {
                self.error(
                    id,
                    format!(
                        "undeclared reference to '{name}' (in container '{}')",
                        self.decls.container
                    ),
                );
                return Type::Error;
            };
            return self.resolve(id, f, None, args, false);
        };
        if let Some(prefix) = target.qualified_name() {
            let root = prefix.split('.').next().unwrap_or_default();
            let is_var = self.local(root).is_some() || self.global(&prefix).is_some();
            if !is_var && let Some(f) = self.function(&format!("{prefix}.{name}")) {
                return self.resolve(id, f, None, args, true);
            }
        }
        self.check(target);
        match self.function(name) {
            Some(f) => self.resolve(id, f, Some(target), args, false),
            None => {
                self.error(
                    id,
                    format!(
                        "undeclared reference to '{name}' (in container '{}')",
                        self.decls.container
                    ),
                );
                Type::Error
            }
        }
    }

    fn resolve(
        &mut self,
        id: u64,
        f: &Function,
        target: Option<&Expr>,
        args: &[Expr],
        qualified: bool,
    ) -> Type {
        let mut arg_ids: Vec<u64> = Vec::with_capacity(args.len() + 1);
        if let Some(t) = target {
            arg_ids.push(t.id);
        }
        arg_ids.extend(args.iter().map(|a| a.id));
        let arg_types: Vec<Type> = arg_ids.iter().map(|i| self.get(*i)).collect();
        let member = target.is_some();
        if f.name == "_&&_" || f.name == "_||_" {
            let mut ok = true;
            for (i, t) in arg_types.iter().enumerate() {
                if !self.assignable(&Type::Bool, t) {
                    let t = self.sub(t);
                    self.error(arg_ids[i], format!("expected type 'bool' but found '{t}'"));
                    ok = false;
                }
            }
            if !ok {
                return Type::Error;
            }
            self.out.refs.insert(
                id,
                Ref::Function {
                    name: f.name.clone(),
                    overloads: vec![0],
                    qualified,
                },
            );
            return Type::Bool;
        }
        let mut result: Option<Type> = None;
        let mut matched = Vec::new();
        for (i, o) in f.overloads.iter().enumerate() {
            if o.member != member || o.params.len() != arg_types.len() {
                continue;
            }
            let mut inst = Subs::default();
            for p in o.type_params() {
                let v = self.fresh();
                inst.0.insert(p, v);
            }
            let params: Vec<Type> = o.params.iter().map(|p| inst.substitute(p, false)).collect();
            let res = inst.substitute(&o.result, false);
            let mut trial = self.subs.clone();
            if params
                .iter()
                .zip(&arg_types)
                .all(|(p, a)| trial.assignable(p, a))
            {
                self.subs = trial;
                matched.push(i);
                let r = self.sub(&res);
                result = Some(match result {
                    None => r,
                    Some(prev) if !prev.is_dyn() && prev != r => Type::Dyn,
                    Some(prev) => prev,
                });
            }
        }
        let Some(result) = result else {
            let shown: Vec<String> = arg_types
                .iter()
                .map(|t| checker_name(&self.subs.substitute(t, true)))
                .collect();
            let sig = if member {
                format!(
                    "{}.({})",
                    shown.first().cloned().unwrap_or_default(),
                    shown.get(1..).unwrap_or_default().join(", ")
                )
            } else {
                format!("({})", shown.join(", "))
            };
            self.error(
                id,
                format!(
                    "found no matching overload for '{}' applied to '{sig}'",
                    f.name
                ),
            );
            return Type::Error;
        };
        self.out.refs.insert(
            id,
            Ref::Function {
                name: f.name.clone(),
                overloads: matched,
                qualified,
            },
        );
        result
    }

    fn check_comprehension(&mut self, id: u64, c: &Comprehension) -> Type {
        self.check(&c.range);
        let range = self.sub(&self.get(c.range.id));
        let is_opt_macro = matches!(c.kind, MacroKind::OptMap(_) | MacroKind::OptFlatMap(_));
        let (v1, v2) = if is_opt_macro {
            match &range {
                Type::Optional(inner) => ((**inner).clone(), Type::Error),
                t if t.is_dyn() || matches!(t, Type::Param(_)) => (Type::Dyn, Type::Error),
                t => {
                    let t = t.clone();
                    self.error(
                        id,
                        format!("found no matching overload for 'hasValue' applied to '{t}.()'"),
                    );
                    (Type::Error, Type::Error)
                }
            }
        } else {
            match &range {
                Type::List(e) => {
                    if c.var2.is_some() {
                        (Type::Int, (**e).clone())
                    } else {
                        ((**e).clone(), Type::Error)
                    }
                }
                Type::Map(k, v) => ((**k).clone(), (**v).clone()),
                t if t.is_dyn() || matches!(t, Type::Param(_)) => {
                    let t = t.clone();
                    self.assignable(&Type::Dyn, &t);
                    (Type::Dyn, Type::Dyn)
                }
                t => {
                    let t = t.clone();
                    self.error(
                        c.range.id,
                        format!(
                            "expression of type '{t}' cannot be range of a comprehension (must be list, map, or dynamic)"
                        ),
                    );
                    (Type::Error, Type::Error)
                }
            }
        };
        let depth = self.scopes.len();
        self.scopes.push((c.var.clone(), v1.clone()));
        if let Some(v2n) = &c.var2 {
            self.scopes.push((v2n.clone(), v2.clone()));
        }
        let result = match &c.kind {
            MacroKind::All(p) | MacroKind::Exists(p) => {
                self.expect_bool(p);
                Type::Bool
            }
            MacroKind::ExistsOne(p) => {
                self.check(p);
                self.expect_condition(id, p, &Type::Int);
                Type::Bool
            }
            MacroKind::MapList { filter, transform } => {
                // cel-go checks `_?_:_(filter, acc + [transform], acc)` in this order.
                if let Some(f) = filter {
                    self.check(f);
                }
                self.check(transform);
                let result = Type::list(self.get(transform.id));
                if let Some(f) = filter {
                    self.expect_condition(id, f, &result);
                }
                result
            }
            MacroKind::Filter(p) => {
                self.check(p);
                let result = match &range {
                    Type::List(_) | Type::Map(..) => Type::list(v1.clone()),
                    _ => Type::list(Type::Dyn),
                };
                self.expect_condition(id, p, &result);
                result
            }
            MacroKind::TransformMap { filter, transform } => {
                if let Some(f) = filter {
                    self.expect_bool(f);
                }
                self.check(transform);
                let key = match &range {
                    Type::List(_) => Type::Int,
                    _ => v1.clone(),
                };
                Type::map(key, self.get(transform.id))
            }
            MacroKind::TransformMapEntry { filter, transform } => {
                if let Some(f) = filter {
                    self.expect_bool(f);
                }
                self.check(transform);
                let t = self.sub(&self.get(transform.id));
                match t {
                    Type::Map(..) => t,
                    t if t.is_dyn() => Type::map(Type::Dyn, Type::Dyn),
                    t => {
                        self.error(
                            transform.id,
                            format!("found no matching overload for 'cel.@mapInsert' applied to '(map(dyn, dyn), {t})'"),
                        );
                        Type::Error
                    }
                }
            }
            MacroKind::OptMap(t) => {
                self.check(t);
                Type::optional(self.get(t.id))
            }
            MacroKind::OptFlatMap(t) => {
                self.check(t);
                match self.sub(&self.get(t.id)) {
                    Type::Optional(inner) => Type::optional(*inner),
                    t if t.is_dyn() => Type::optional(Type::Dyn),
                    t => {
                        self.error(
                            id,
                            format!(
                                "found no matching overload for '_?_:_' applied to '(bool, {t}, optional_type(dyn))'"
                            ),
                        );
                        Type::Error
                    }
                }
            }
            MacroKind::SortBy(k) => {
                self.check(k);
                self.sort_key(id, &range, k.id);
                match &range {
                    Type::List(_) => range.clone(),
                    _ => Type::list(Type::Dyn),
                }
            }
        };
        self.scopes.truncate(depth);
        result
    }

    /// `sortBy`'s keys must be comparable: cel-go expands the macro to
    /// `@sortByAssociatedKeys(list(T), list(U))`, declared for these `U` in this order, so a
    /// key of a free type variable becomes `int`.
    fn sort_key(&mut self, id: u64, range: &Type, key: u64) {
        let key_t = self.get(key);
        for u in [
            Type::Int,
            Type::Uint,
            Type::Double,
            Type::Bool,
            Type::Duration,
            Type::Timestamp,
            Type::String,
            Type::Bytes,
        ] {
            let mut trial = self.subs.clone();
            if trial.assignable(&u, &key_t) {
                self.subs = trial;
                return;
            }
        }
        let (range, key_t) = (self.sub(range), self.sub(&key_t));
        self.error(
            id,
            format!(
                "found no matching overload for '@sortByAssociatedKeys' applied to '{}.(list({}))'",
                checker_name(&range),
                checker_name(&key_t)
            ),
        );
    }

    /// The (checked) condition of a macro cel-go expands to `_?_:_(p, …, accumulator)`: a
    /// condition that is not a bool finds no overload of the conditional, reported at the macro.
    fn expect_condition(&mut self, id: u64, p: &Expr, accumulator: &Type) {
        let t = self.get(p.id);
        if !self.assignable(&Type::Bool, &t) {
            let shown = |c: &mut Self, t: &Type| checker_name(&c.subs.substitute(t, true));
            let (t, acc) = (shown(self, &t), shown(self, accumulator));
            self.error(
                id,
                format!("found no matching overload for '_?_:_' applied to '({t}, {acc}, {acc})'"),
            );
        }
    }

    fn expect_bool(&mut self, p: &Expr) {
        self.check(p);
        let t = self.get(p.id);
        if !self.assignable(&Type::Bool, &t) {
            let t = self.sub(&t);
            self.error(p.id, format!("expected type 'bool' but found '{t}'"));
        }
    }
}

/// A type as cel-go's checker prints it in messages (`null`, `timestamp`, `duration`), which
/// differs from the type names of result-type errors (`null_type`, `google.protobuf.Timestamp`).
pub(crate) fn checker_name(t: &Type) -> String {
    t.to_string()
        .replace("null_type", "null")
        .replace("google.protobuf.Timestamp", "timestamp")
        .replace("google.protobuf.Duration", "duration")
}
