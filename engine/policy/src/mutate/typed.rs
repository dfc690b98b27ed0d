//! A kind's schema as server-side apply (structured-merge-diff) sees it: each position is a
//! scalar, list and/or map "atom" with element relationships (lists atomic unless
//! `x-kubernetes-list-type` or a merge patch strategy says otherwise; maps and structs
//! granular unless `x-kubernetes-map-type: atomic`), unknown fields accepted only below
//! `x-kubernetes-preserve-unknown-fields`. Also the two checks upstream makes of an apply
//! configuration before merging: that it fits the schema, and that it sets nothing atomic.

use std::fmt::Write as _;
use std::rc::Rc;

use serde_json::{Map, Value};

use super::go_value::{Foreign, GoValue};
use crate::schema::{AdditionalProperties, ApplyKind, ListType, MapType, Schema, SchemaRef};

/// How deep a value may nest before it is refused (a guard against stack exhaustion).
pub(super) const MAX_DEPTH: usize = 256;

/// A position in the schema (borrowing it, so that walks cost no reference counting).
#[derive(Clone, Copy, Debug)]
pub(super) enum Ty<'s> {
    /// A schema node; `preserve` is whether an enclosing node of the same named type preserves
    /// unknown fields.
    Node {
        schema: SchemaRef<'s>,
        preserve: bool,
    },
    /// Data of unknown shape, as below `x-kubernetes-preserve-unknown-fields`: maps granular,
    /// lists atomic.
    Deduced,
    /// Untyped data: maps and lists atomic.
    Untyped,
}

/// The scalar a position accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scalar {
    Numeric,
    String,
    Boolean,
    Untyped,
}

/// A list position.
#[derive(Clone, Copy, Debug)]
pub(super) struct ListAtom<'s> {
    /// Replaced as a whole.
    pub(super) atomic: bool,
    /// For associative lists: the key fields (none for a set).
    pub(super) keys: &'s [String],
    pub(super) elem: Ty<'s>,
}

/// A map or struct position.
#[derive(Clone, Copy, Debug)]
pub(super) struct MapAtom<'s> {
    /// Replaced as a whole.
    pub(super) atomic: bool,
    /// The node whose `properties` are the struct's fields, with its preserve flag.
    fields: Option<(SchemaRef<'s>, bool)>,
    /// The type of keys that are not fields; `None`: they are not allowed.
    elem: Option<Ty<'s>>,
}

impl<'s> MapAtom<'s> {
    /// The declared field `name`, if any.
    pub(super) fn field(&self, name: &str) -> Option<Ty<'s>> {
        let (node, preserve) = self.fields.as_ref()?;
        node.property(name).map(|schema| Ty::Node {
            schema,
            preserve: *preserve,
        })
    }

    /// The type of `key`: its field's, else the element type.
    pub(super) fn entry(&self, key: &str) -> Option<Ty<'s>> {
        self.field(key).or(self.elem)
    }

    /// The default of the declared field `name` (for list-map keys left out).
    fn field_default(&self, name: &str) -> Option<&'s Value> {
        let (node, _) = self.fields?;
        node.property(name)?.default_value()
    }
}

/// What a position may hold.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Atom<'s> {
    pub(super) scalar: Option<Scalar>,
    pub(super) list: Option<ListAtom<'s>>,
    pub(super) map: Option<MapAtom<'s>>,
}

impl<'s> Ty<'s> {
    /// The root of a kind's schema.
    pub(super) fn root(schema: &'s Schema) -> Ty<'s> {
        Ty::Node {
            schema: schema.as_ref(),
            preserve: false,
        }
    }

    /// What the position may hold, as kube-openapi converts the schema.
    pub(super) fn atom(&self) -> Atom<'s> {
        match *self {
            Ty::Deduced => Atom {
                scalar: Some(Scalar::Untyped),
                list: Some(ListAtom {
                    atomic: true,
                    keys: &[],
                    elem: Ty::Untyped,
                }),
                map: Some(MapAtom {
                    atomic: false,
                    fields: None,
                    elem: Some(Ty::Deduced),
                }),
            },
            Ty::Untyped => untyped(),
            Ty::Node { schema, preserve } => node_atom(schema, preserve),
        }
    }
}

impl Ty<'_> {
    /// Whether a value of the position may hold an associative list item that cannot be keyed
    /// (see `SchemaRef::may_hold_unkeyed_items`).
    fn may_hold_unkeyed_items(&self) -> bool {
        matches!(self, Ty::Node { schema, .. } if schema.may_hold_unkeyed_items())
    }

    /// Whether the position holds scalars only and `v` is one of its type (or null): a value
    /// with nothing below it to check. Most values of an object are such, and this answers
    /// without working out the position's atom.
    pub(super) fn holds_scalar(&self, v: &Value) -> bool {
        let Ty::Node { schema, .. } = self else {
            return false;
        };
        matches!(
            (schema.apply_kind(), v),
            (ApplyKind::String, Value::String(_) | Value::Null)
                | (ApplyKind::Numeric, Value::Number(_) | Value::Null)
                | (ApplyKind::Boolean, Value::Bool(_) | Value::Null)
                | (
                    ApplyKind::Scalar,
                    Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null
                )
        )
    }
}

fn untyped<'s>() -> Atom<'s> {
    Atom {
        scalar: Some(Scalar::Untyped),
        list: Some(ListAtom {
            atomic: true,
            keys: &[],
            elem: Ty::Untyped,
        }),
        map: Some(MapAtom {
            atomic: true,
            fields: None,
            elem: Some(Ty::Untyped),
        }),
    }
}

fn node_atom(s: SchemaRef<'_>, inherited: bool) -> Atom<'_> {
    let kind = s.apply_kind();
    if kind == ApplyKind::Untyped {
        return untyped();
    }
    // A named type is converted on its own: what encloses it does not carry over.
    let preserve = (inherited && s.component().is_none()) || s.preserves_unknown_fields();
    match kind {
        ApplyKind::Any => Atom {
            scalar: Some(Scalar::Untyped),
            list: Some(list_atom(s, preserve)),
            map: Some(map_atom(s, preserve)),
        },
        ApplyKind::Object => Atom {
            map: Some(map_atom(s, preserve)),
            ..Atom::default()
        },
        ApplyKind::Array => Atom {
            list: Some(list_atom(s, preserve)),
            ..Atom::default()
        },
        ApplyKind::Numeric => scalar(Scalar::Numeric),
        ApplyKind::Boolean => scalar(Scalar::Boolean),
        ApplyKind::String => scalar(Scalar::String),
        ApplyKind::Scalar | ApplyKind::Untyped => scalar(Scalar::Untyped),
    }
}

fn scalar<'s>(s: Scalar) -> Atom<'s> {
    Atom {
        scalar: Some(s),
        ..Atom::default()
    }
}

fn map_atom(s: SchemaRef<'_>, preserve: bool) -> MapAtom<'_> {
    let has_fields = s.has_properties();
    let elem = match s.additional_properties() {
        None if preserve || !has_fields => Some(Ty::Deduced),
        None | Some(AdditionalProperties::Allowed(false)) => None,
        Some(AdditionalProperties::Allowed(true)) => Some(Ty::Deduced),
        Some(AdditionalProperties::Schema(schema)) => Some(Ty::Node { schema, preserve }),
    };
    MapAtom {
        atomic: s.map_type() == Some(MapType::Atomic),
        fields: Some((s, preserve)),
        elem,
    }
}

fn list_atom(s: SchemaRef<'_>, preserve: bool) -> ListAtom<'_> {
    let (atomic, keys): (bool, &[String]) = match s.list_type() {
        Some(ListType::Atomic) => (true, &[]),
        Some(ListType::Set) => (false, &[]),
        Some(ListType::Map) => (false, s.list_map_keys()),
        None if s.merges_lists() => (false, s.patch_merge_key().map_or(&[], std::slice::from_ref)),
        None => (true, &[]),
    };
    let elem = match s.items() {
        Some(schema) => Ty::Node { schema, preserve },
        None => Ty::Untyped,
    };
    ListAtom { atomic, keys, elem }
}

/// What is known of whether an object fits its kind's schema.
#[derive(Clone, Debug)]
pub(super) enum Fit {
    /// Nothing: it must be checked whole.
    Unknown,
    /// It fits.
    Fits,
    /// It fitted before patches wrote (or removed) at these places.
    FitsBut(Written),
    /// It is the request's object, which kube-apiserver encoded from its (built-in) kind's Go
    /// type, so it fits but for items of associative lists that cannot be keyed; patches
    /// wrote (or removed) at these places since.
    Received(Written),
}

/// Places JSON patches wrote at, as the patch library reads their pointers: the tokens after
/// the first `/`, unescaped.
#[derive(Clone, Debug, Default)]
pub(super) struct Written(Vec<Vec<String>>);

impl Written {
    /// The places at these paths of member names (see `touched::Places`).
    pub(super) fn of_paths(paths: Vec<Vec<String>>) -> Self {
        Written(paths)
    }

    /// Adds the places `other` holds.
    pub(super) fn join(&mut self, other: Written) {
        self.0.extend(other.0);
    }

    /// The paths of the places.
    pub(super) fn paths(&self) -> &[Vec<String>] {
        &self.0
    }

    /// The part of an object a walk must look at to see what was written.
    pub(super) fn within(&self) -> Within<'_> {
        Within::of_paths(&self.0)
    }
}

/// The part of a value a walk looks at.
#[derive(Clone, Debug)]
pub(super) enum Within<'t> {
    /// All of it.
    All,
    /// The value at this token path (not empty; relative to the value), and the lists on the
    /// way to it whole: an item added or removed moves the others. Most mutations write one
    /// place: it is followed without building anything.
    One(&'t [String]),
    /// The values at these token paths (none, or at least two), as [`Within::One`].
    Paths(Paths<'t>),
}

/// Token paths, sorted, that share the tokens before `depth` (the walk is below them): those
/// of `sorted[from..to]`, each read from token `depth` on (none ends there). Sorted, the paths
/// below one member name are next to each other and met in key order, so a step is a narrower
/// range, built without allocating.
#[derive(Clone, Debug)]
pub(super) struct Paths<'t> {
    sorted: Rc<[&'t [String]]>,
    from: usize,
    to: usize,
    depth: usize,
}

impl<'t> Paths<'t> {
    fn each(&self) -> &[&'t [String]] {
        &self.sorted[self.from..self.to]
    }

    /// The member name path `i` (of [`Paths::each`]) steps into.
    fn token(&self, i: usize) -> &'t str {
        let path: &'t [String] = self.sorted[self.from + i];
        &path[self.depth]
    }

    /// What is below the paths `from..to` of [`Paths::each`], once their token at `depth` is
    /// passed.
    fn below(&self, from: usize, to: usize) -> Within<'t> {
        let depth = self.depth + 1;
        let paths = &self.sorted[self.from + from..self.from + to];
        match paths {
            // Sorted, a path ending here comes first.
            [first, ..] if first.len() == depth => Within::All,
            [one] => Within::One(&one[depth..]),
            _ => Within::Paths(Paths {
                sorted: self.sorted.clone(),
                from: self.from + from,
                to: self.from + to,
                depth,
            }),
        }
    }

    /// The member names the paths start with, in key order, with what to look at below each.
    fn named(&self) -> impl Iterator<Item = (&'t str, Within<'t>)> + '_ {
        let len = self.to - self.from;
        let mut i = 0;
        std::iter::from_fn(move || {
            if i >= len {
                return None;
            }
            let name = self.token(i);
            let start = i;
            while i < len && self.token(i) == name {
                i += 1;
            }
            Some((name, self.below(start, i)))
        })
    }

    /// What is below member `key`, if a path starts with it.
    fn step_key(&self, key: &str) -> Option<Within<'t>> {
        let depth = self.depth;
        let each = self.each();
        let from = each.partition_point(|p| p[depth].as_str() < key);
        let to = from + each[from..].partition_point(|p| p[depth].as_str() == key);
        (from < to).then(|| self.below(from, to))
    }
}

impl<'t> Within<'t> {
    /// The part of an object a walk must look at to see what was written at these places
    /// (paths of member names, as `Written` holds them).
    pub(super) fn of_paths(paths: &'t [Vec<String>]) -> Self {
        match paths {
            // Most mutations write one place: nothing to collect.
            [one] if !one.is_empty() => Within::One(one),
            _ => Within::below(paths.iter().map(Vec::as_slice).collect()),
        }
    }

    /// The paths left, or all of the value when one of them ends here.
    fn below(mut paths: Vec<&'t [String]>) -> Self {
        match paths.as_slice() {
            _ if paths.iter().any(|p| p.is_empty()) => Within::All,
            [one] => Within::One(one),
            _ => {
                paths.sort_unstable();
                let to = paths.len();
                Within::Paths(Paths {
                    sorted: paths.into(),
                    from: 0,
                    to,
                    depth: 0,
                })
            }
        }
    }

    /// What is below the first token of a path.
    fn rest(path: &'t [String]) -> Self {
        match path {
            [_] => Within::All,
            [_, rest @ ..] => Within::One(rest),
            [] => Within::All,
        }
    }

    /// What to look at below member `key` (`None`: any item of a list); `None` when nothing.
    /// Inlined: walks of a whole object (`All`) call it at every value they pass.
    #[inline]
    pub(super) fn step(&self, key: Option<&str>) -> Option<Within<'t>> {
        match self {
            Within::All => Some(Within::All),
            Within::One(path) => key
                .is_none_or(|k| path.first().is_some_and(|t| t == k))
                .then(|| Self::rest(path)),
            Within::Paths(paths) => match key {
                Some(key) => paths.step_key(key),
                // Below any item, the paths below every item: sorted again.
                None => {
                    let each = paths.each();
                    (!each.is_empty()).then(|| {
                        Within::below(each.iter().map(|p| &p[paths.depth + 1..]).collect())
                    })
                }
            },
        }
    }

    /// Calls `f` with each member of `map` to look at and what to look at below it, in the
    /// map's order, until `f` returns something. Within paths, the members they name are found
    /// by name, in key order: the order a `serde_json::Map` (ordered by key) iterates in, so a
    /// walk meets them in the same order either way, without passing every member.
    pub(super) fn find_member<'m, R>(
        &self,
        map: &'m Map<String, Value>,
        mut f: impl FnMut(&'m str, &'m Value, &Within<'t>) -> Option<R>,
    ) -> Option<R> {
        match self {
            Within::All => map.iter().find_map(|(k, v)| f(k, v, &Within::All)),
            Within::One(path) => {
                let (k, v) = map.get_key_value(path.first()?)?;
                f(k, v, &Self::rest(path))
            }
            Within::Paths(paths) => paths.named().find_map(|(name, below)| {
                let (k, v) = map.get_key_value(name)?;
                f(k, v, &below)
            }),
        }
    }

    /// Calls `f` with each member of `map` to look at and what to look at below it, as
    /// [`Within::find_member`] finds them.
    pub(super) fn each_member_mut(
        &self,
        map: &mut Map<String, Value>,
        mut f: impl FnMut(&str, &mut Value, &Within<'t>),
    ) {
        match self {
            Within::All => map.iter_mut().for_each(|(k, v)| f(k, v, &Within::All)),
            Within::One(path) => {
                if let Some((name, v)) = path.first().and_then(|k| Some((k, map.get_mut(k)?))) {
                    f(name, v, &Self::rest(path));
                }
            }
            Within::Paths(paths) => {
                for (name, below) in paths.named() {
                    if let Some(v) = map.get_mut(name) {
                        f(name, v, &below);
                    }
                }
            }
        }
    }
}

/// An error at a path, as structured-merge-diff reports it (`<path>: <message>`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PathError {
    pub(super) path: String,
    pub(super) message: String,
}

/// Several path errors as one text, as structured-merge-diff joins them.
pub(super) fn join_errors(errors: &[PathError]) -> String {
    let one = |e: &PathError| {
        if e.path.is_empty() {
            e.message.clone()
        } else {
            format!("{}: {}", e.path, e.message)
        }
    };
    match errors {
        [e] => one(e),
        many => {
            let mut out = String::from("errors:");
            for e in many {
                let _ = write!(out, "\n  {}", one(e));
            }
            out
        }
    }
}

/// Narrows an atom to the kind of `v` when it allows that kind (else keeps it whole).
pub(super) fn deduce<'s>(atom: &Atom<'s>, v: Option<&Value>) -> Atom<'s> {
    match v {
        Some(Value::Number(_) | Value::String(_) | Value::Bool(_)) if atom.scalar.is_some() => {
            Atom {
                scalar: atom.scalar,
                ..Atom::default()
            }
        }
        Some(Value::Array(_)) if atom.list.is_some() => Atom {
            list: atom.list,
            ..Atom::default()
        },
        Some(Value::Object(_)) if atom.map.is_some() => Atom {
            map: atom.map,
            ..Atom::default()
        },
        _ => *atom,
    }
}

/// Go's `%T` of an unstructured value.
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go's `%v` of an unstructured value, with the Go values `foreign` marks in it.
fn go_plain(v: &Value, foreign: Option<&Foreign>) -> String {
    if let Some(g) = foreign.and_then(Foreign::here) {
        return g.plain.clone();
    }
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) => {
            let items: Vec<String> = a
                .iter()
                .enumerate()
                .map(|(i, v)| go_plain(v, foreign.and_then(|f| f.item(i))))
                .collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_plain(v, foreign.and_then(|f| f.member(k)))))
                .collect();
            format!("map[{}]", items.join(" "))
        }
        other => other.to_string(),
    }
}

/// How structured-merge-diff prints a value in its errors (`%v` of its value wrapper), with the
/// Go values `foreign` marks in it.
fn shown_in(v: &Value, foreign: Option<&Foreign>) -> String {
    format!("&{{{}}}", go_plain(v, foreign))
}

/// Checks a scalar against the scalar type of its position; `prefix` names the operand.
pub(super) fn check_scalar(t: Scalar, v: &Value, prefix: &str) -> Option<String> {
    check_scalar_in(t, v, None, prefix)
}

/// [`check_scalar`] of a value holding the Go values `foreign` marks.
fn check_scalar_in(
    t: Scalar,
    v: &Value,
    foreign: Option<&Foreign>,
    prefix: &str,
) -> Option<String> {
    let ok = match (t, v) {
        (_, Value::Null) => true,
        (Scalar::Numeric, Value::Number(_))
        | (Scalar::String, Value::String(_))
        | (Scalar::Boolean, Value::Bool(_)) => true,
        (Scalar::Untyped, v) => !matches!(v, Value::Array(_) | Value::Object(_)),
        _ => false,
    };
    if ok {
        return None;
    }
    Some(scalar_mismatch(
        t,
        prefix,
        go_type(v),
        &go_plain(v, foreign),
        &go_sharp(v, foreign),
    ))
}

/// Why a value of Go type `type_name` (shown `plain` by `%v`, `sharp` by `%#v`) is not a scalar
/// of type `t`, as structured-merge-diff words it.
fn scalar_mismatch(t: Scalar, prefix: &str, type_name: &str, plain: &str, sharp: &str) -> String {
    match t {
        Scalar::Numeric => format!("{prefix}expected numeric (int or float), got {type_name}"),
        Scalar::String => {
            format!("{prefix}expected string, got &value.valueUnstructured{{Value:{sharp}}}")
        }
        Scalar::Boolean => format!("{prefix}expected boolean, got &{{{plain}}}"),
        Scalar::Untyped => format!("{prefix}expected any scalar, got &{{{plain}}}"),
    }
}

/// Why a Go value the typed conversion takes for none of its types does not fit a position
/// (one of its possible types, the first structured-merge-diff tries: map, scalar, list).
fn refuse_foreign(atom: &Atom<'_>, g: &GoValue) -> String {
    if atom.map.is_some() {
        format!("expected map, got &{{{}}}", g.plain)
    } else if let Some(t) = atom.scalar {
        scalar_mismatch(t, "", &g.type_name, &g.plain, &g.sharp)
    } else {
        format!("expected list, got &{{{}}}", g.plain)
    }
}

/// Go's `%#v` of an unstructured value, with the Go values `foreign` marks in it.
fn go_sharp(v: &Value, foreign: Option<&Foreign>) -> String {
    if let Some(g) = foreign.and_then(Foreign::here) {
        return g.sharp.clone();
    }
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Array(a) => {
            let items: Vec<String> = a
                .iter()
                .enumerate()
                .map(|(i, v)| go_sharp(v, foreign.and_then(|f| f.item(i))))
                .collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(m) => {
            let items: Vec<String> = m
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}:{}",
                        serde_json::to_string(k).unwrap_or_default(),
                        go_sharp(v, foreign.and_then(|f| f.member(k)))
                    )
                })
                .collect();
            format!("map[string]interface {{}}{{{}}}", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// Why a list item has no identity in its associative list, worded as structured-merge-diff
/// words it.
#[derive(Debug, thiserror::Error)]
pub(super) enum ItemError {
    /// A set (no keys) holds a map.
    #[error("associative list without keys has an element that's a map type")]
    MapInSet,
    /// A set holds a list.
    #[error("not supported: associative list with lists as elements")]
    ListInSet,
    /// A set holds a null.
    #[error("associative list without keys has an element that's an explicit null")]
    NullInSet,
    /// A list map holds a null.
    #[error("associative list with keys may not have a null element")]
    NullInMap,
    /// A list map holds something other than a map.
    #[error("associative list with keys may not have non-map elements")]
    NotMap,
    /// A list map's item has none of the keys, nor a default for one (the keys, quoted).
    #[error(
        "associative list with keys has an element that omits all key fields [{0}] (and doesn't have default values for any key fields)"
    )]
    NoKey(String),
}

/// The path element of a list item: `[i]` for atomic lists, `[k=v,…]` for list maps,
/// `[=v]` for sets; `Err` when an associative item cannot be keyed.
pub(super) fn item_element<'a>(
    list: &ListAtom<'a>,
    index: usize,
    item: &'a Value,
) -> Result<Element<'a>, ItemError> {
    if list.atomic {
        return Ok(Element::Index(index));
    }
    if list.keys.is_empty() {
        return match item {
            Value::Object(_) => Err(ItemError::MapInSet),
            Value::Array(_) => Err(ItemError::ListInSet),
            Value::Null => Err(ItemError::NullInSet),
            v => Ok(Element::Value(v)),
        };
    }
    let map = match item {
        Value::Null => return Err(ItemError::NullInMap),
        Value::Object(m) => m,
        _ => return Err(ItemError::NotMap),
    };
    let defaults = list.elem.atom().map;
    let mut key = Vec::new();
    for name in list.keys {
        if let Some(v) = map.get(name) {
            key.push((name.as_str(), v));
        } else if let Some(d) = defaults.as_ref().and_then(|m| m.field_default(name)) {
            key.push((name.as_str(), d));
        }
    }
    if key.is_empty() {
        let quoted: Vec<String> = list.keys.iter().map(|k| format!("{k:?}")).collect();
        return Err(ItemError::NoKey(quoted.join(" ")));
    }
    key.sort_by(|a, b| a.0.cmp(b.0));
    Ok(Element::Key(key))
}

/// The path element of a list item that is a Go value the typed conversion refuses: as a set
/// item, a value of no known type; a list map refuses it.
fn foreign_element<'a>(list: &ListAtom<'_>, index: usize) -> Result<Element<'a>, ItemError> {
    if list.atomic {
        Ok(Element::Index(index))
    } else if list.keys.is_empty() {
        Ok(Element::Undefined)
    } else {
        Err(ItemError::NotMap)
    }
}

/// The identity of a list item, and its step in a field path, borrowing the item (and the
/// schema, for key fields defaulted).
#[derive(Clone, Debug)]
pub(super) enum Element<'a> {
    Index(usize),
    Key(Vec<(&'a str, &'a Value)>),
    Value(&'a Value),
    /// A set item of no type structured-merge-diff knows (the same as any other such).
    Undefined,
}

impl Element<'_> {
    /// Whether two list items have the same identity (numbers compare by value).
    pub(super) fn same(&self, other: &Element<'_>) -> bool {
        match (self, other) {
            (Element::Index(a), Element::Index(b)) => a == b,
            (Element::Key(a), Element::Key(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .zip(b)
                        .all(|(x, y)| x.0 == y.0 && json_equal(x.1, y.1))
            }
            (Element::Value(a), Element::Value(b)) => json_equal(a, b),
            // structured-merge-diff orders values of no type it knows alike.
            (Element::Undefined, Element::Undefined) => true,
            _ => false,
        }
    }
}

impl std::fmt::Display for Element<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Element::Index(i) => write!(f, "[{i}]"),
            Element::Key(fields) => {
                f.write_str("[")?;
                for (i, (k, v)) in fields.iter().enumerate() {
                    let comma = if i == 0 { "" } else { "," };
                    write!(f, "{comma}{k}={}", smd_string(v))?;
                }
                f.write_str("]")
            }
            Element::Value(v) => write!(f, "[={}]", smd_string(v)),
            Element::Undefined => f.write_str("[={{undefined}}]"),
        }
    }
}

/// How structured-merge-diff prints a key's or a set item's value in a path: strings quoted,
/// numbers as Go's `%v`, lists `[a,b]`, a map's members `k=v` run together (an empty map prints
/// nothing), null `null`.
fn smd_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(d)) => celgate_cel::value::format_double(d),
            (None, None) => n.to_string(),
        },
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(smd_string).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(members) => members
            .iter()
            .map(|(k, v)| format!("{k}={}", smd_string(v)))
            .collect(),
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`), as structured-merge-diff.
pub(super) fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Checks that `v` fits `ty` (structured-merge-diff's conversion to a typed value), looking
/// `within` it; outside, with `unkeyed_elsewhere`, only at items of associative lists that
/// cannot be keyed (the rest of a value encoded from its Go type fits but for them), else
/// nowhere (the caller knows the rest fits). With `allow_duplicates`, list maps may repeat a
/// key (as live objects may).
pub(super) fn validate(
    ty: &Ty,
    v: &Value,
    allow_duplicates: bool,
    within: &Within<'_>,
    unkeyed_elsewhere: bool,
) -> Vec<PathError> {
    let mut out = Found {
        dups: allow_duplicates,
        unkeyed: unkeyed_elsewhere,
        errors: Vec::new(),
    };
    validate_at(ty, v, None, &Step::Root, 0, &mut out, within);
    out.errors
}

/// Checks that an apply configuration fits `ty` as upstream converts it: `foreign` marks the
/// Go values in it that the conversion refuses wherever they stand.
pub(super) fn validate_config(ty: &Ty, v: &Value, foreign: Option<&Foreign>) -> Vec<PathError> {
    let mut out = Found {
        dups: false,
        unkeyed: false,
        errors: Vec::new(),
    };
    validate_at(ty, v, foreign, &Step::Root, 0, &mut out, &Within::All);
    out.errors
}

/// What a check walk finds, whether list maps may repeat a key, and whether items that
/// cannot be keyed are looked for outside the part checked.
struct Found {
    dups: bool,
    unkeyed: bool,
    errors: Vec<PathError>,
}

impl Found {
    fn err(&mut self, at: &Step<'_>, message: String) {
        self.errors.push(PathError {
            path: at.to_string(),
            message,
        })
    }
}

/// Where a walk is, as the steps from the root: written out only when an error names it.
#[derive(Clone, Copy)]
enum Step<'a> {
    Root,
    Member(&'a Step<'a>, &'a str),
    Item(&'a Step<'a>, &'a Element<'a>),
}

impl std::fmt::Display for Step<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Root => Ok(()),
            Step::Member(parent, key) => write!(f, "{parent}.{key}"),
            Step::Item(parent, element) => write!(f, "{parent}{element}"),
        }
    }
}

fn validate_at(
    ty: &Ty,
    v: &Value,
    foreign: Option<&Foreign>,
    at: &Step<'_>,
    depth: usize,
    out: &mut Found,
    within: &Within<'_>,
) {
    if depth > MAX_DEPTH {
        out.err(at, "value nests too deeply".into());
        return;
    }
    if let Some(g) = foreign.and_then(Foreign::here) {
        // No type takes it: refused by the first one the position allows.
        return out.err(at, refuse_foreign(&ty.atom(), g));
    }
    if ty.holds_scalar(v) {
        return;
    }
    let atom = deduce(&ty.atom(), Some(v));
    if let Some(m) = &atom.map {
        let map = match v {
            Value::Null => return,
            Value::Object(map) => map,
            other => {
                let got = shown_in(other, foreign);
                return out.err(at, format!("expected map, got {got}"));
            }
        };
        // Each member within, and, where unkeyed items are looked for elsewhere and may be
        // below, every other member for them.
        let unkeyed_elsewhere = out.unkeyed && ty.may_hold_unkeyed_items();
        let all = Within::All;
        let members = if unkeyed_elsewhere { &all } else { within };
        members.find_member(map, |key, item, found| {
            let here = Step::Member(at, key);
            let stepped;
            let below = if unkeyed_elsewhere {
                stepped = within.step(Some(key));
                stepped.as_ref()
            } else {
                Some(found)
            };
            let Some(below) = below else {
                if let Some(t) = m.entry(key) {
                    unkeyed_at(&t, item, &here, depth + 1, out);
                }
                return None;
            };
            let foreign = foreign.and_then(|f| f.member(key));
            match m.entry(key) {
                Some(t) => {
                    validate_at(&t, item, foreign, &here, depth + 1, out, below);
                    None
                }
                // An undeclared field ends the walk of the map.
                None => {
                    out.err(&here, "field not declared in schema".into());
                    Some(())
                }
            }
        });
    } else if let Some(t) = atom.scalar {
        if let Some(message) = check_scalar_in(t, v, foreign, "") {
            out.err(at, message);
        }
    } else if let Some(list) = &atom.list {
        let items = match v {
            Value::Null => return,
            Value::Array(items) => items,
            other => {
                let got = shown_in(other, foreign);
                return out.err(at, format!("expected list, got {got}"));
            }
        };
        let below = within.step(None);
        let mut seen: Vec<Element<'_>> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let foreign = foreign.and_then(|f| f.item(i));
            let element = match foreign.and_then(Foreign::here) {
                Some(_) => foreign_element(list, i),
                None => item_element(list, i, item),
            };
            let element = match element {
                Ok(e) => e,
                Err(e) => return out.err(at, format!("element {i}: {e}")),
            };
            let keyed = !list.atomic && !out.dups;
            if keyed && seen.iter().any(|s| s.same(&element)) {
                out.err(at, format!("duplicate entries for key {element}"));
            }
            let here = Step::Item(at, &element);
            match &below {
                Some(below) => validate_at(&list.elem, item, foreign, &here, depth + 1, out, below),
                None if out.unkeyed => unkeyed_at(&list.elem, item, &here, depth + 1, out),
                None => {}
            }
            if keyed {
                seen.push(element);
            }
        }
    }
}

/// [`validate_at`] where only items of associative lists that cannot be keyed are looked for
/// (in a value encoded from its Go type, the only way it can fail to fit), below the nodes
/// that may hold them.
fn unkeyed_at(ty: &Ty, v: &Value, at: &Step<'_>, depth: usize, out: &mut Found) {
    let Ty::Node { schema, .. } = ty else {
        return;
    };
    if depth > MAX_DEPTH || !schema.may_hold_unkeyed_items() {
        return;
    }
    let atom = deduce(&ty.atom(), Some(v));
    match (v, &atom.map, &atom.list) {
        (Value::Object(map), Some(m), _) => {
            for (key, item) in map {
                if let Some(t) = m.entry(key) {
                    unkeyed_at(&t, item, &Step::Member(at, key), depth + 1, out);
                }
            }
        }
        (Value::Array(items), _, Some(list)) => {
            for (i, item) in items.iter().enumerate() {
                match item_element(list, i, item) {
                    Ok(element) => {
                        unkeyed_at(&list.elem, item, &Step::Item(at, &element), depth + 1, out);
                    }
                    Err(e) => return out.err(at, format!("element {i}: {e}")),
                }
            }
        }
        _ => {}
    }
}

/// Whether [`unkeyed_at`] may find anything in `v` at `ty`, read in place (a member of the
/// request's object not decoded): true where a list item it walks cannot be keyed, so the
/// caller decodes the value and has it checked. It walks as `unkeyed_at` does.
pub(super) fn may_find_unkeyed(ty: &Ty, v: &celgate_cel::Value<'_>, depth: usize) -> bool {
    use celgate_cel::Value as Cel;
    let Ty::Node { schema, .. } = ty else {
        return false;
    };
    if depth > MAX_DEPTH || !schema.may_hold_unkeyed_items() {
        return false;
    }
    let atom = ty.atom();
    match (v, &atom.map, &atom.list) {
        (Cel::Map(map), Some(m), _) => map
            .find_map(|key, item| {
                let t = match &key {
                    Cel::String(key) => m.entry(key),
                    _ => None,
                }?;
                may_find_unkeyed(&t, &item, depth + 1).then_some(())
            })
            .is_some(),
        (Cel::List(items), _, Some(list)) => items.iter().any(|item| {
            let keyed = match &item {
                _ if list.atomic => true,
                Cel::Map(_) | Cel::List(_) | Cel::Null if list.keys.is_empty() => false,
                _ if list.keys.is_empty() => true,
                Cel::Map(m) => {
                    let defaults = list.elem.atom().map;
                    list.keys.iter().any(|k| {
                        m.contains_str(k)
                            || (defaults.as_ref()).is_some_and(|d| d.field_default(k).is_some())
                    })
                }
                _ => false,
            };
            !keyed || may_find_unkeyed(&list.elem, &item, depth + 1)
        }),
        _ => false,
    }
}

/// The paths of atomic lists, maps and structs an apply configuration sets, as upstream
/// finds them: through declared fields and list items only (not through map values).
pub(super) fn atomic_paths(ty: &Ty, v: &Value) -> Vec<String> {
    let mut out = Vec::new();
    find_atomics(ty, v, &Step::Root, 0, &mut out);
    out
}

fn find_atomics(ty: &Ty, v: &Value, at: &Step<'_>, depth: usize, out: &mut Vec<String>) {
    // Only maps and lists can be atomic.
    if depth > MAX_DEPTH || !matches!(v, Value::Object(_) | Value::Array(_)) {
        return;
    }
    let atom = ty.atom();
    match (v, &atom.map, &atom.list) {
        (Value::Object(map), Some(m), _) => {
            if m.atomic {
                out.push(at.to_string());
            }
            for (key, item) in map {
                if let Some(t) = m.field(key) {
                    find_atomics(&t, item, &Step::Member(at, key), depth + 1, out);
                }
            }
        }
        (Value::Array(items), _, Some(list)) => {
            if list.atomic {
                out.push(at.to_string());
            }
            for (i, item) in items.iter().enumerate() {
                // Items are named by their index (`[i]`), whatever keys them.
                let index = Element::Index(i);
                find_atomics(&list.elem, item, &Step::Item(at, &index), depth + 1, out);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]

    use serde_json::json;

    use super::*;
    use crate::schema::schemas_from_openapi;

    /// A list map's key or a set item in a path prints as structured-merge-diff's `ToString`
    /// (found by the generated differential, seed 14, case 707: an empty map key printed
    /// `[name={}]`, in-tree `[name=]`).
    /// What a walk looks at, as a set of paths (`None`: all of it).
    type Seen = Option<std::collections::BTreeSet<Vec<String>>>;

    /// The paths a `Within` stands for.
    fn seen(w: &Within<'_>) -> Seen {
        match w {
            Within::All => None,
            Within::One(path) => Some([path.to_vec()].into()),
            Within::Paths(paths) => Some(
                (paths.each().iter())
                    .map(|p| p[paths.depth..].to_vec())
                    .collect(),
            ),
        }
    }

    /// Below `key` (any item: `None`) of a set of paths: the rest of those starting with it,
    /// all when one ends there, nothing (`Err`) when none starts with it.
    fn below(set: &std::collections::BTreeSet<Vec<String>>, key: Option<&str>) -> Result<Seen, ()> {
        let rest: std::collections::BTreeSet<Vec<String>> = (set.iter())
            .filter(|p| key.is_none_or(|k| p[0] == k))
            .map(|p| p[1..].to_vec())
            .collect();
        if rest.is_empty() {
            Err(())
        } else if rest.iter().any(Vec::is_empty) {
            Ok(None)
        } else {
            Ok(Some(rest))
        }
    }

    /// Checks every step below `w` against the set of paths it stands for, `depth` levels down.
    fn steps_as_sets(w: &Within<'_>, keys: &[&str], depth: usize) {
        let Some(set) = seen(w) else {
            assert!(matches!(w.step(Some("a")), Some(Within::All)));
            return;
        };
        let map: Map<String, Value> = keys.iter().map(|k| (k.to_string(), json!(1))).collect();
        let mut met = Vec::new();
        w.find_member(&map, |k, _, below| {
            met.push((k.to_string(), seen(below)));
            None::<()>
        });
        let want: Vec<(String, Seen)> = (keys.iter())
            .filter_map(|k| Some((k.to_string(), below(&set, Some(k)).ok()?)))
            .collect();
        assert_eq!(met, want, "members of {set:?}");
        for key in keys.iter().copied().map(Some).chain([None]) {
            let got = w.step(key);
            assert_eq!(
                got.as_ref().map(seen),
                below(&set, key).ok(),
                "{set:?} below {key:?}"
            );
            if let (Some(got), true) = (got, depth < 4) {
                steps_as_sets(&got, keys, depth + 1);
            }
        }
    }

    /// A walk within written places steps as the set of their paths does: members in key
    /// order, all below a path that ends, nothing below a name no path starts with.
    #[test]
    fn a_walk_within_places_steps_as_their_paths() {
        let keys = ["a", "b", "c"];
        let mut seed = 7u64;
        for _ in 0..400 {
            let mut paths = Vec::new();
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            for i in 0..(seed >> 60) {
                let mut path = Vec::new();
                let mut bits = seed.rotate_left(9 * i as u32);
                // Paths of one to four names (an empty one: the whole value).
                for _ in 0..(bits % 5) {
                    bits /= 5;
                    path.push(keys[(bits % 3) as usize].to_string());
                    bits /= 3;
                }
                paths.push(path);
            }
            steps_as_sets(&Within::of_paths(&paths), &keys, 0);
        }
    }

    #[test]
    fn keys_in_paths_print_as_structured_merge_diff_prints_them() {
        let (empty, map, list, s, f, i, null) = (
            json!({}),
            json!({"a": 1}),
            json!(["x", 2]),
            json!("n0"),
            json!(1e21),
            json!(-6),
            json!(null),
        );
        let key = |v: &Value| Element::Key(vec![("name", v)]).to_string();
        assert_eq!(key(&empty), "[name=]");
        assert_eq!(key(&map), "[name=a=1]");
        assert_eq!(key(&list), "[name=[\"x\",2]]");
        assert_eq!(key(&s), "[name=\"n0\"]");
        assert_eq!(key(&f), "[name=1e+21]");
        assert_eq!(Element::Value(&i).to_string(), "[=-6]");
        assert_eq!(Element::Value(&null).to_string(), "[=null]");
    }

    /// Where `holds_scalar` answers, it answers as the whole check does: for a node of every
    /// kind and a value of every JSON type, a value it passes has nothing below it and fits
    /// the node's scalar type. It passes at least the plain scalar of each scalar kind.
    #[test]
    fn a_scalar_passed_at_once_is_one_the_check_passes() {
        let doc = json!({"components": {"schemas": {
            "Kind": {"type": "object", "properties": {
                "s": {"type": "string"}, "b64": {"type": "string", "format": "byte"},
                "date": {"type": "string", "format": "date-time"},
                "ios": {"type": "string", "format": "int-or-string"},
                "i": {"type": "integer"}, "n": {"type": "number"}, "t": {"type": "boolean"},
                "q": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"},
                "raw": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.runtime.RawExtension"},
                "any": {}, "odd": {"type": "float"},
                "list": {"type": "array", "items": {"type": "string"}},
                "map": {"type": "object", "additionalProperties": {"type": "string"}}
            }, "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Kind"}]},
            "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
            "io.k8s.apimachinery.pkg.runtime.RawExtension": {"type": "object"}
        }}});
        let schemas = schemas_from_openapi(&doc).expect("schema");
        let root = Ty::root(&schemas[0].1);
        let map = root.atom().map.expect("a struct");
        let values = [
            json!(null),
            json!(true),
            json!(1),
            json!(1.5),
            json!("x"),
            json!(["x"]),
            json!({"k": "v"}),
        ];
        let mut passed = Vec::new();
        for field in [
            "s", "b64", "date", "ios", "i", "n", "t", "q", "raw", "any", "odd", "list", "map",
        ] {
            let ty = map.field(field).expect("declared");
            for v in &values {
                if !ty.holds_scalar(v) {
                    continue;
                }
                passed.push((field, v.clone()));
                let atom = ty.atom();
                assert!(
                    atom.map.is_none() && atom.list.is_none(),
                    "{field} holds more than scalars"
                );
                assert!(
                    validate(&ty, v, false, &Within::All, false).is_empty(),
                    "{field} does not accept {v}"
                );
            }
        }
        for (field, v) in [
            ("s", json!("x")),
            ("i", json!(1)),
            ("n", json!(1.5)),
            ("t", json!(true)),
            ("q", json!("1Gi")),
            ("ios", json!(80)),
            ("date", json!(null)),
        ] {
            let ty = map.field(field).expect("declared");
            assert!(ty.holds_scalar(&v), "{field} {v}");
        }
        // Lists, maps, untyped and schemaless positions are always walked.
        for field in ["list", "map", "raw", "any"] {
            assert!(!passed.iter().any(|(f, _)| *f == field), "{field}");
        }
    }
}
