//! celgate's own syntax tree: the parser's tree with macros recognised as typed comprehensions
//! (so the checker and planner never pattern-match raw comprehension loops).

use std::sync::Arc;

/// An expression node. `id` keys positions (for compile errors) and checker results.
#[derive(Clone, Debug)]
pub(crate) struct Expr {
    pub id: u64,
    pub kind: ExprKind,
}

/// A literal constant.
#[derive(Clone, Debug)]
pub(crate) enum Literal {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Double(f64),
    String(Arc<str>),
    Bytes(Arc<[u8]>),
}

#[derive(Clone, Debug)]
pub(crate) enum ExprKind {
    Literal(Literal),
    Ident(String),
    /// `operand.field`; `test` is `has(operand.field)`; `optional` is `operand.?field`.
    Select {
        operand: Box<Expr>,
        field: String,
        test: bool,
        optional: bool,
    },
    Call {
        target: Option<Box<Expr>>,
        function: String,
        args: Vec<Expr>,
    },
    /// `[a, ?b]`: `optional[i]` marks `?` elements.
    List {
        elements: Vec<Expr>,
        optional: Vec<bool>,
    },
    Map {
        entries: Vec<MapEntry>,
    },
    /// A message literal `Name{field: value}`.
    Struct {
        type_name: String,
        fields: Vec<StructField>,
    },
    Comprehension(Box<Comprehension>),
}

#[derive(Clone, Debug)]
pub(crate) struct MapEntry {
    pub key: Expr,
    pub value: Expr,
    pub optional: bool,
}

/// One `field: value` (`?field: value` when `optional`) of a message literal; `id` is the
/// entry's own node id (the position of its colon).
#[derive(Clone, Debug)]
pub(crate) struct StructField {
    pub id: u64,
    pub name: String,
    pub value: Expr,
    pub optional: bool,
}

/// A macro over a list, map or optional. `var2` is set for the two-variable forms, where over a
/// list `var` is the index and `var2` the element, and over a map `var` is the key and `var2` the
/// value.
#[derive(Clone, Debug)]
pub(crate) struct Comprehension {
    pub range: Expr,
    pub var: String,
    pub var2: Option<String>,
    pub kind: MacroKind,
}

#[derive(Clone, Debug)]
pub(crate) enum MacroKind {
    All(Expr),
    Exists(Expr),
    ExistsOne(Expr),
    /// `map(x, [filter,] t)` and `transformList(i, v, [filter,] t)`.
    MapList {
        filter: Option<Expr>,
        transform: Expr,
    },
    /// `filter(x, p)`.
    Filter(Expr),
    /// `transformMap(k, v, [filter,] t)`.
    TransformMap {
        filter: Option<Expr>,
        transform: Expr,
    },
    /// `transformMapEntry(k, v, [filter,] t)`.
    TransformMapEntry {
        filter: Option<Expr>,
        transform: Expr,
    },
    /// `opt.optMap(v, t)`.
    OptMap(Expr),
    /// `opt.optFlatMap(v, t)`.
    OptFlatMap(Expr),
    /// `list.sortBy(v, key)`.
    SortBy(Expr),
}

impl Expr {
    /// The dotted name this expression spells (`a.b.c`), if it is an identifier or a chain of
    /// plain field selections on one.
    pub fn qualified_name(&self) -> Option<String> {
        match &self.kind {
            ExprKind::Ident(n) => Some(n.clone()),
            ExprKind::Select {
                operand,
                field,
                test: false,
                optional: false,
            } => operand.qualified_name().map(|p| format!("{p}.{field}")),
            _ => None,
        }
    }
}
