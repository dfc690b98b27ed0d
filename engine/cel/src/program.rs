//! Planned programs: the evaluation tree the planner ([`plan`](crate::plan)) builds once per
//! expression and the evaluator ([`eval`](crate::eval)) walks. Variables are resolved to
//! activation names or comprehension slots, calls to the overloads they may dispatch to,
//! literal regular expressions are compiled, and macros are loops.

use std::sync::Arc;

use regex::Regex;

use crate::error::EvalError;
use crate::libs::regex as re;
use crate::registry::{CostFn, Dispatch, ImplFn, Kind};
use crate::value::{StructType, Value};

/// An evaluation tree node.
#[derive(Debug)]
pub(crate) enum Node {
    Const(Value<'static>),
    /// A call computed when planning ([`plan`](crate::plan)): its value and the cost charged
    /// before and after the call would run.
    Folded(Box<(Value<'static>, u64, u64)>),
    /// A variable bound in the activation.
    Global(Arc<str>),
    /// A comprehension variable.
    Local(usize),
    /// `variables.<name>`: a composited variable, by index.
    Composited(usize),
    /// `op.field`; the flag is set when the checker typed `op` as a message, the only case
    /// in which cel-go reads a message's field (through `dyn` a message has no keys).
    Select(Box<Node>, Arc<str>, bool),
    /// `has(op.field)`, flagged as [`Node::Select`].
    Has(Box<Node>, Arc<str>, bool),
    OptSelect(Box<Node>, Arc<str>),
    Index(Box<[Node; 2]>),
    OptIndex(Box<[Node; 2]>),
    And(Box<[Node; 2]>),
    Or(Box<[Node; 2]>),
    Cond(Box<[Node; 3]>),
    /// `opt.or(other)` (`false`) and `opt.orValue(v)` (`true`): the argument is evaluated only
    /// when `opt` is empty.
    OptOr(Box<[Node; 2]>, bool),
    Eq(Box<[Node; 2]>, bool),
    /// `x in c`; `true` when the checker resolved the list overload alone (cel-go then charges
    /// the list's size; a dynamically dispatched `in` costs 1).
    In(Box<[Node; 2]>, bool),
    /// `x in [constants]`: cel-go's set-membership optimisation, free of call cost.
    SetIn(Box<(Node, Box<[Value<'static>]>)>),
    Call(Box<Call>),
    /// A `matches` call with a literal pattern: target, compiled pattern, pattern length.
    Matches(Box<(Node, Regex, u64)>),
    List(Box<[Node]>, Box<[bool]>),
    Map(Box<[(Node, Node, bool)]>),
    /// A message literal: its type and the (name, value, optional) fields.
    Struct(Box<StructNode>),
    Comprehension(Box<Loop>),
    /// An error known at plan time (only without type checking, e.g. an unknown function).
    Fail(EvalError),
}

/// A function call and the overloads it may dispatch to.
#[derive(Debug)]
pub(crate) struct Call {
    pub function: Arc<str>,
    pub candidates: Box<[Candidate]>,
    /// How cel-go binds the function: what a call no candidate accepts fails with.
    pub dispatch: Dispatch,
    pub args: Box<[Node]>,
    /// The checker left more than one overload (or none was checked), so cel-go has no
    /// overload id, and the function is one it charges by overload id: every call costs 1.
    pub unit_cost: bool,
    /// `find`/`findAll` with a literal pattern: compiled here, so evaluation never looks it up.
    pub pattern: Option<Box<re::Planned>>,
}

/// One overload a call may dispatch to.
#[derive(Debug)]
pub(crate) struct Candidate {
    pub kinds: Box<[Kind]>,
    pub imp: ImplFn,
    pub cost: CostFn,
    /// Whether `cost` reads the call's result.
    pub cost_reads_result: bool,
    /// Whether the evaluator must bound the result's growth over the receiver.
    pub grows: bool,
    /// What cel-go's runtime cost tracker of the overload asserts of an argument.
    pub tracker_asserts: Option<crate::registry::TrackerAssert>,
}

/// A message literal `Name{field: value, ?field: optional}`.
#[derive(Debug)]
pub(crate) struct StructNode {
    pub ty: Arc<dyn StructType>,
    pub fields: Box<[(Arc<str>, Node, bool)]>,
}

/// A macro loop. `slot` (and `slot2`) are the comprehension variables' slots.
#[derive(Debug)]
pub(crate) struct Loop {
    pub range: Node,
    pub slot: usize,
    pub slot2: Option<usize>,
    pub kind: LoopKind,
}

#[derive(Debug)]
pub(crate) enum LoopKind {
    All(Node),
    Exists(Node),
    ExistsOne(Node),
    /// `map`, `filter` (the transform is the variable) and `transformList`.
    MapList {
        filter: Option<Node>,
        transform: Node,
    },
    TransformMap {
        filter: Option<Node>,
        transform: Node,
    },
    TransformMapEntry {
        filter: Option<Node>,
        transform: Node,
    },
    OptMap(Node),
    OptFlatMap(Node),
    /// The key, and whether the checker resolved `@sortByAssociatedKeys`' overload (the key
    /// is not `dyn`; a type parameter binds to the first overload), which cel-go then charges
    /// O(n²).
    SortBy(Node, bool),
}

impl Call {
    /// The overload whose cost a call no candidate ran is charged: the one the checker
    /// resolved, or for a dynamic call the first candidate, as cel-go and Kubernetes cost
    /// dynamic calls by function name, alike for every overload (calls they cost by overload
    /// id have [`Call::unit_cost`] set).
    pub fn costed(&self) -> Option<&Candidate> {
        self.candidates.first()
    }

    /// The panic of cel-go's runtime cost tracker of this call's overload for these arguments
    /// (`failed(i)`: argument `i` failed): only a call whose overload the checker resolved has
    /// a tracker.
    pub fn tracker_panic(
        &self,
        args: &[Value<'_>],
        failed: impl Fn(usize) -> bool,
    ) -> Option<EvalError> {
        if self.unit_cost || self.candidates.len() != 1 {
            return None;
        }
        self.costed()?.tracker_asserts?.panic(args, failed)
    }

    /// Whether the cost of this call dispatched to `cand` depends on its result, and so must be
    /// computed again once the result is known.
    pub fn cost_reads_result(&self, cand: &Candidate) -> bool {
        !self.unit_cost && cand.cost_reads_result
    }

    /// cel-go's cost of this call dispatched to `cand` (`None`: no overload applied).
    pub fn cost(&self, cand: Option<&Candidate>, args: &[Value<'_>], out: &Value<'_>) -> u64 {
        match cand {
            Some(c) if !self.unit_cost => (c.cost)(args, out),
            _ => 1,
        }
    }
}
