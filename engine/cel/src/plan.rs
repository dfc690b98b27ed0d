//! The planner: turns a (checked) syntax tree into an evaluation tree once per expression.
//! Variables are resolved to activation names or comprehension slots, calls to the overloads
//! the checker allowed, literal regular expressions are compiled, and macros become loops.
//! As Kubernetes plans with cel-go's `OptOptimize`, constant list and map literals and type
//! conversions of constants are computed here, and `x in [constants]` becomes a set-membership
//! test; these then cost nothing at evaluation. A constant that fails to compute (a conversion
//! or a regex pattern) fails the program, as `Program()` fails in cel-go.

use std::collections::HashMap;
use std::sync::Arc;

use crate::activation::Activation;
use crate::ast::{Comprehension, Expr, ExprKind, Literal, MacroKind};
use crate::check::{Checked, Ref, candidate_names, resolve_message, type_ident};
use crate::cost::Budget;
use crate::error::EvalError;
use crate::eval::Evaluation;
use crate::libs::regex as re;
use crate::program::{Call, Candidate, Loop, LoopKind, Node, StructNode};
use crate::registry::Registry;
use crate::structs::TypeProvider;
use crate::types::Type;
use crate::value::{List, Str, TypeName, Value};

/// Why an expression cannot be planned.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlanError {
    /// The syntax tree has a shape the parser never produces.
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// A constant expression folded at plan time failed (cel-go's `Program()` error).
    #[error("{0}")]
    Program(String),
}

/// cel-go's standard type conversions: with a constant argument they are folded when planning.
const CONVERSIONS: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "duration",
    "dyn",
    "int",
    "string",
    "timestamp",
    "type",
    "uint",
];

/// Functions cel-go charges by overload id (its default cost switch and the extension
/// libraries' trackers): a dynamically dispatched call has no overload id and costs 1.
const COSTED_BY_OVERLOAD: &[&str] = &[
    "startsWith",
    "endsWith",
    "bytes",
    "string",
    "strings.quote",
    "format",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "_+_",
    "matches",
    "contains",
    "slice",
    "flatten",
    "lists.range",
    "reverse",
    "distinct",
    "sort",
    "sets.contains",
    "sets.intersects",
    "sets.equivalent",
];

/// Evaluates a node made of constants once: its value, or the failure it evaluates to (the
/// node itself in the unreachable case of a value that reads an activation's JSON).
fn fold(node: Node) -> Node {
    let folded = {
        let act = Activation::new();
        let mut budget = Budget::default();
        let mut evaluation = Evaluation::new(&act, &mut budget, 0);
        evaluation.eval(&node).map(Value::into_static)
    };
    match folded {
        Ok(Some(v)) => Node::Const(v),
        Ok(None) => node,
        Err(e) => Node::Fail(e),
    }
}

/// Kubernetes' library parsers: pure, so with constant arguments they are computed once, when
/// planning (cel-go computes them on every evaluation, so they keep their cost).
const PARSERS: &[&str] = &["quantity", "url", "ip", "cidr", "semver"];

/// A call of constant arguments computed once: its value and the cost each evaluation is
/// charged for it, in the two steps [`Evaluation`] charges a call (before and after it runs).
/// `None` if the call fails or needs a pattern, which evaluation then handles.
fn fold_parse(call: &Call) -> Option<Node> {
    if call.pattern.is_some() {
        return None;
    }
    let args = call
        .args
        .iter()
        .map(|a| match a {
            Node::Const(v) => Some(v.clone()),
            _ => None,
        })
        .collect::<Option<Vec<_>>>()?;
    let cand = call.candidates.iter().find(|c| {
        c.kinds.len() == args.len() && c.kinds.iter().zip(&args).all(|(k, v)| k.matches(v))
    })?;
    let before = call.cost(Some(cand), &args, &Value::String(Str::Borrowed("")));
    let out = (cand.imp)(&args).ok()?;
    let after = if call.cost_reads_result(cand) {
        call.cost(Some(cand), &args, &out).saturating_sub(before)
    } else {
        0
    };
    Some(Node::Folded(Box::new((out, before, after))))
}

/// What the planner needs from the environment.
pub(crate) struct PlanEnv<'e> {
    pub registry: &'e Registry,
    pub variables: &'e HashMap<String, Type>,
    pub composited: &'e HashMap<String, usize>,
    pub container: &'e str,
    pub types: Option<&'e dyn TypeProvider>,
}

/// A planned expression: its tree, the number of comprehension slots it uses, the
/// activation variables it reads (each once), and whether it reads composited variables.
pub(crate) struct Planned {
    pub root: Node,
    pub slots: usize,
    pub globals: Box<[Arc<str>]>,
    pub reads_composited: bool,
}

/// Plans `expr`.
pub(crate) fn plan(
    expr: &Expr,
    checked: Option<&Checked>,
    env: &PlanEnv<'_>,
) -> Result<Planned, PlanError> {
    let mut p = Planner {
        env,
        checked,
        scopes: Vec::new(),
        slots: 0,
        globals: Vec::new(),
        reads_composited: false,
    };
    let root = p.plan(expr)?;
    Ok(Planned {
        root,
        slots: p.slots,
        globals: p.globals.into_boxed_slice(),
        reads_composited: p.reads_composited,
    })
}

struct Planner<'p, 'e> {
    env: &'p PlanEnv<'e>,
    checked: Option<&'p Checked>,
    scopes: Vec<(String, usize)>,
    slots: usize,
    globals: Vec<Arc<str>>,
    reads_composited: bool,
}

fn literal(l: &Literal) -> Value<'static> {
    match l {
        Literal::Null => Value::Null,
        Literal::Bool(b) => Value::Bool(*b),
        Literal::Int(i) => Value::Int(*i),
        Literal::Uint(u) => Value::Uint(*u),
        Literal::Double(d) => Value::Double(*d),
        Literal::String(s) => Value::String(Str::Shared(s.clone())),
        Literal::Bytes(b) => Value::Bytes(b.clone()),
    }
}

impl<'p> Planner<'p, '_> {
    fn reference(&self, id: u64) -> Option<&'p Ref> {
        self.checked.and_then(|c| c.refs.get(&id))
    }

    fn local(&self, name: &str) -> Option<usize> {
        self.scopes
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, s)| *s)
    }

    fn global_name(&self, name: &str) -> Option<String> {
        candidate_names(self.env.container, name)
            .into_iter()
            .find(|c| self.env.variables.contains_key(c))
    }

    fn plan(&mut self, e: &Expr) -> Result<Node, PlanError> {
        Ok(match &e.kind {
            ExprKind::Literal(l) => Node::Const(literal(l)),
            ExprKind::Ident(name) => self.plan_ident(e.id, name),
            ExprKind::Select {
                operand,
                field,
                test,
                optional,
            } => {
                if !test
                    && !optional
                    && let Some(node) = self.plan_qualified(e)?
                {
                    return Ok(node);
                }
                let message = self
                    .checked
                    .and_then(|c| c.types.get(&operand.id))
                    .is_some_and(|t| matches!(t, Type::Object(_)));
                let op = Box::new(self.plan(operand)?);
                let f: Arc<str> = Arc::from(field.as_str());
                if *test {
                    Node::Has(op, f, message)
                } else if *optional {
                    Node::OptSelect(op, f)
                } else {
                    Node::Select(op, f, message)
                }
            }
            ExprKind::Call {
                target,
                function,
                args,
            } => self.plan_call(e.id, target.as_deref(), function, args)?,
            ExprKind::List { elements, optional } => {
                let nodes = elements
                    .iter()
                    .map(|x| self.plan(x))
                    .collect::<Result<Vec<_>, _>>()?;
                if optional.iter().all(|o| !o)
                    && let Some(v) = constant_list(&nodes)
                {
                    return Ok(Node::Const(v));
                }
                Node::List(
                    nodes.into_boxed_slice(),
                    optional.clone().into_boxed_slice(),
                )
            }
            ExprKind::Map { entries } => {
                let mut out = Vec::with_capacity(entries.len());
                for en in entries {
                    out.push((self.plan(&en.key)?, self.plan(&en.value)?, en.optional));
                }
                let constant = out
                    .iter()
                    .all(|(k, v, _)| matches!((k, v), (Node::Const(_), Node::Const(_))));
                let node = Node::Map(out.into_boxed_slice());
                if constant {
                    // cel-go builds a map literal of constants once, when planning.
                    return Ok(fold(node));
                }
                node
            }
            ExprKind::Struct { type_name, fields } => {
                let env = self.env;
                match resolve_message(type_name, env.container, env.variables, env.types) {
                    Some(Ok(ty)) => {
                        let mut out = Vec::with_capacity(fields.len());
                        for f in fields {
                            let name: Arc<str> = Arc::from(f.name.as_str());
                            out.push((name, self.plan(&f.value)?, f.optional));
                        }
                        Node::Struct(Box::new(StructNode {
                            ty,
                            fields: out.into_boxed_slice(),
                        }))
                    }
                    _ => Node::Fail(EvalError::msg(format!("unknown type '{type_name}'"))),
                }
            }
            ExprKind::Comprehension(c) => self.plan_loop(c)?,
        })
    }

    /// A read of activation variable `name`, noted in the plan's globals.
    fn global(&mut self, name: &str) -> Node {
        let name: Arc<str> = match self.globals.iter().find(|g| &***g == name) {
            Some(known) => known.clone(),
            None => {
                let new: Arc<str> = Arc::from(name);
                self.globals.push(new.clone());
                new
            }
        };
        Node::Global(name)
    }

    fn plan_ident(&mut self, id: u64, name: &str) -> Node {
        if let Some(slot) = self.local(name) {
            return Node::Local(slot);
        }
        match self.reference(id) {
            Some(Ref::Var(v)) => return self.global(v),
            Some(Ref::TypeValue(t)) => return type_value(t),
            _ => {}
        }
        if let Some(v) = self.global_name(name) {
            return self.global(&v);
        }
        if type_ident(name).is_some() {
            return type_value(name);
        }
        self.global(name)
    }

    /// `a.b.c` naming a declared variable, or `variables.<name>`.
    fn plan_qualified(&mut self, e: &Expr) -> Result<Option<Node>, PlanError> {
        let ExprKind::Select { operand, field, .. } = &e.kind else {
            return Ok(None);
        };
        if let ExprKind::Ident(root) = &operand.kind
            && root == "variables"
            && self.local(root).is_none()
            && let Some(i) = self.env.composited.get(field)
        {
            self.reads_composited = true;
            return Ok(Some(Node::Composited(*i)));
        }
        match self.reference(e.id) {
            Some(Ref::Var(v)) => return Ok(Some(self.global(v))),
            Some(Ref::TypeValue(t)) => return Ok(Some(type_value(t))),
            _ => {}
        }
        if self.checked.is_none()
            && let Some(q) = e.qualified_name()
        {
            let root = q.split('.').next().unwrap_or_default();
            if self.local(root).is_none() {
                if let Some(v) = self.global_name(&q) {
                    return Ok(Some(self.global(&v)));
                }
                if type_ident(&q).is_some() {
                    return Ok(Some(type_value(&q)));
                }
            }
        }
        Ok(None)
    }

    fn plan_call(
        &mut self,
        id: u64,
        target: Option<&Expr>,
        name: &str,
        args: &[Expr],
    ) -> Result<Node, PlanError> {
        // Resolve the function: the checker's answer, else the same rules at plan time.
        let (fname, overloads, qualified) = match self.reference(id) {
            Some(Ref::Function {
                name,
                overloads,
                qualified,
            }) => (name.clone(), Some(overloads.clone()), *qualified),
            _ => self.resolve_function(target, name),
        };
        let mut nodes = Vec::with_capacity(args.len() + 1);
        if let (Some(t), false) = (target, qualified) {
            nodes.push(self.plan(t)?);
        }
        for a in args {
            nodes.push(self.plan(a)?);
        }
        let member = target.is_some() && !qualified;
        match (fname.as_str(), nodes.len()) {
            ("_&&_", 2) => return Ok(Node::And(Box::new(two(nodes)?))),
            ("_||_", 2) => return Ok(Node::Or(Box::new(two(nodes)?))),
            ("_==_", 2) => return Ok(Node::Eq(Box::new(two(nodes)?), false)),
            ("_!=_", 2) => return Ok(Node::Eq(Box::new(two(nodes)?), true)),
            ("@in", 2) => return self.plan_in(&fname, overloads.as_deref(), nodes),
            ("_[_]", 2) => return Ok(Node::Index(Box::new(qualifier(nodes)?))),
            ("_[?_]", 2) => return Ok(Node::OptIndex(Box::new(qualifier(nodes)?))),
            ("or", 2) if member => return Ok(Node::OptOr(Box::new(two(nodes)?), false)),
            ("orValue", 2) if member => return Ok(Node::OptOr(Box::new(two(nodes)?), true)),
            ("_?_:_", 3) => {
                let mut it = nodes.into_iter();
                let (Some(c), Some(t), Some(f)) = (it.next(), it.next(), it.next()) else {
                    return Err(PlanError::Malformed("conditional"));
                };
                return Ok(Node::Cond(Box::new([c, t, f])));
            }
            ("matches", 2) if member => {
                // A literal pattern is compiled once.
                if let Some(Node::Const(Value::String(p))) = nodes.get(1)
                    && let Ok(regex) = re::compile(p)
                {
                    let len = p.chars().count() as u64;
                    let mut it = nodes.into_iter();
                    if let Some(t) = it.next() {
                        return Ok(Node::Matches(Box::new((t, regex, len))));
                    }
                    return Err(PlanError::Malformed("call"));
                }
            }
            _ => {}
        }
        // cel-go's (and Kubernetes') regex optimisations compile a constant pattern when
        // planning: an invalid one fails the program, a valid one is kept with the call.
        let mut pattern = None;
        if matches!(fname.as_str(), "matches" | "find" | "findAll")
            && let Some(Node::Const(Value::String(p))) = nodes.get(1)
        {
            let regex = re::compile(p).map_err(|e| PlanError::Program(e.to_string()))?;
            if member {
                pattern = re::Planned::new(&fname, regex).map(Box::new);
            }
        }
        let Some(function) = self.env.registry.get(&fname) else {
            return Ok(Node::Fail(EvalError::UnboundFunction(fname)));
        };
        let candidates: Vec<Candidate> = function
            .overloads
            .iter()
            .enumerate()
            .filter(|(i, o)| {
                o.member == member
                    && o.params.len() == nodes.len()
                    && overloads.as_ref().is_none_or(|ov| ov.contains(i))
            })
            .filter_map(|(_, o)| {
                o.imp.map(|imp| Candidate {
                    kinds: o.kinds.iter().map(|k| function.dispatch.kind(k)).collect(),
                    imp,
                    cost: o.cost,
                    cost_reads_result: o.cost_reads_result,
                    grows: o.grows,
                    tracker_asserts: o.tracker_asserts,
                })
            })
            .collect();
        if candidates.is_empty() {
            return Ok(Node::Fail(EvalError::UnboundFunction(fname)));
        }
        let dynamic = overloads.as_ref().is_none_or(|o| o.len() != 1);
        let call = Node::Call(Box::new(Call {
            function: Arc::from(fname.as_str()),
            candidates: candidates.into_boxed_slice(),
            dispatch: function.dispatch,
            unit_cost: dynamic && COSTED_BY_OVERLOAD.contains(&fname.as_str()),
            args: nodes.into_boxed_slice(),
            pattern,
        }));
        // cel-go's OptOptimize: a type conversion of a constant is computed once, when
        // planning; if it fails, so does the program.
        if CONVERSIONS.contains(&fname.as_str())
            && let Node::Call(c) = &call
            && let [Node::Const(_)] = &*c.args
        {
            return match fold(call) {
                Node::Fail(e) => Err(PlanError::Program(e.to_string())),
                folded => Ok(folded),
            };
        }
        if PARSERS.contains(&fname.as_str())
            && let Node::Call(c) = &call
            && let Some(folded) = fold_parse(c)
        {
            return Ok(folded);
        }
        Ok(call)
    }

    /// `x in c`. Against a constant list of primitive values (with the list overload resolved)
    /// cel-go plans a set-membership test, free of call cost; against an empty one, `false`.
    fn plan_in(
        &self,
        fname: &str,
        overloads: Option<&[usize]>,
        nodes: Vec<Node>,
    ) -> Result<Node, PlanError> {
        let in_list = match (self.env.registry.get(fname), overloads) {
            (Some(f), Some([i])) => f
                .overloads
                .get(*i)
                .is_some_and(|o| matches!(o.params.get(1), Some(Type::List(_)))),
            _ => false,
        };
        let [needle, hay] = two(nodes)?;
        if in_list && let Node::Const(Value::List(l)) = &hay {
            if l.is_empty() {
                return Ok(Node::Const(Value::Bool(false)));
            }
            let items: Vec<Value<'static>> = l.iter().collect();
            if items.iter().all(|v| {
                matches!(
                    v,
                    Value::Bool(_)
                        | Value::Int(_)
                        | Value::Uint(_)
                        | Value::Double(_)
                        | Value::String(_)
                )
            }) {
                return Ok(Node::SetIn(Box::new((needle, items.into_boxed_slice()))));
            }
        }
        Ok(Node::In(Box::new([needle, hay]), in_list))
    }

    fn resolve_function(
        &self,
        target: Option<&Expr>,
        name: &str,
    ) -> (String, Option<Vec<usize>>, bool) {
        if let Some(t) = target
            && let Some(prefix) = t.qualified_name()
        {
            let root = prefix.split('.').next().unwrap_or_default();
            if self.local(root).is_none() && self.global_name(&prefix).is_none() {
                let q = format!("{prefix}.{name}");
                for c in candidate_names(self.env.container, &q) {
                    if self.env.registry.get(&c).is_some() {
                        return (c, None, true);
                    }
                }
            }
        }
        for c in candidate_names(self.env.container, name) {
            if self.env.registry.get(&c).is_some() {
                return (c, None, false);
            }
        }
        (name.to_string(), None, false)
    }

    fn plan_loop(&mut self, c: &Comprehension) -> Result<Node, PlanError> {
        let range = self.plan(&c.range)?;
        let depth = self.scopes.len();
        let slot = self.slots;
        self.slots += 1;
        self.scopes.push((c.var.clone(), slot));
        let slot2 = match &c.var2 {
            Some(v) => {
                let s = self.slots;
                self.slots += 1;
                self.scopes.push((v.clone(), s));
                Some(s)
            }
            None => None,
        };
        let kind = match &c.kind {
            MacroKind::All(p) => LoopKind::All(self.plan(p)?),
            MacroKind::Exists(p) => LoopKind::Exists(self.plan(p)?),
            MacroKind::ExistsOne(p) => LoopKind::ExistsOne(self.plan(p)?),
            MacroKind::MapList { filter, transform } => LoopKind::MapList {
                filter: filter.as_ref().map(|f| self.plan(f)).transpose()?,
                transform: self.plan(transform)?,
            },
            MacroKind::Filter(p) => LoopKind::MapList {
                filter: Some(self.plan(p)?),
                transform: Node::Local(slot),
            },
            MacroKind::TransformMap { filter, transform } => LoopKind::TransformMap {
                filter: filter.as_ref().map(|f| self.plan(f)).transpose()?,
                transform: self.plan(transform)?,
            },
            MacroKind::TransformMapEntry { filter, transform } => LoopKind::TransformMapEntry {
                filter: filter.as_ref().map(|f| self.plan(f)).transpose()?,
                transform: self.plan(transform)?,
            },
            MacroKind::OptMap(t) => LoopKind::OptMap(self.plan(t)?),
            MacroKind::OptFlatMap(t) => LoopKind::OptFlatMap(self.plan(t)?),
            MacroKind::SortBy(k) => {
                let typed = self
                    .checked
                    .and_then(|c| c.types.get(&k.id))
                    .is_some_and(|t| !matches!(t, Type::Dyn | Type::Error));
                LoopKind::SortBy(self.plan(k)?, typed)
            }
        };
        self.scopes.truncate(depth);
        Ok(Node::Comprehension(Box::new(Loop {
            range,
            slot,
            slot2,
            kind,
        })))
    }
}

fn type_value(name: &str) -> Node {
    let n = match type_ident(name) {
        Some(t) => t.runtime_name().to_string(),
        None => name.to_string(),
    };
    Node::Const(Value::Type(TypeName(n.into())))
}

fn two(nodes: Vec<Node>) -> Result<[Node; 2], PlanError> {
    let mut it = nodes.into_iter();
    match (it.next(), it.next()) {
        (Some(a), Some(b)) => Ok([a, b]),
        _ => Err(PlanError::Malformed("call")),
    }
}

/// The operands of an index: cel-go turns a constant key into a qualifier when planning, and
/// fails the program for a constant that cannot be one.
fn qualifier(nodes: Vec<Node>) -> Result<[Node; 2], PlanError> {
    let invalid = match nodes.get(1) {
        Some(Node::Const(v @ (Value::Null | Value::Timestamp(_) | Value::Duration(_)))) => {
            v.go_type_name()
        }
        _ => None,
    };
    if let Some(t) = invalid {
        return Err(PlanError::Program(format!("invalid qualifier type: {t}")));
    }
    two(nodes)
}

/// A list literal of constants becomes one constant.
fn constant_list(nodes: &[Node]) -> Option<Value<'static>> {
    let mut out = Vec::with_capacity(nodes.len());
    for n in nodes {
        match n {
            Node::Const(v) => out.push(v.clone()),
            _ => return None,
        }
    }
    Some(Value::List(List::from_vec(out)))
}
