//! Runtime values. JSON bound into an activation is borrowed, never copied: a list or map taken
//! from the request stays a view on the `serde_json` tree, and scalars are read on access.

use std::any::Any;
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use chrono::{DateTime, FixedOffset, TimeDelta};

use crate::error::EvalError;
use crate::json_tape::{JsonTape, Read, TapeNode};
use crate::types::ObjectType;

/// A CEL runtime value. `'a` is the lifetime of JSON borrowed from the activation.
#[derive(Clone, Debug)]
pub enum Value<'a> {
    /// `null`.
    Null,
    /// `bool`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `uint`.
    Uint(u64),
    /// `double`.
    Double(f64),
    /// `string`.
    String(Str<'a>),
    /// `bytes`.
    Bytes(Arc<[u8]>),
    /// `list`.
    List(List<'a>),
    /// `map`.
    Map(Map<'a>),
    /// `google.protobuf.Timestamp`, with the zone offset it was written with (as Go's
    /// `time.Time` keeps it: `string()` shows it; equality and ordering compare instants).
    Timestamp(DateTime<FixedOffset>),
    /// `google.protobuf.Duration`.
    Duration(TimeDelta),
    /// A type value such as `int` or `type(x)`.
    Type(TypeName),
    /// `optional_type`: `None` is `optional.none()`.
    Optional(Option<Arc<Value<'a>>>),
    /// A value of a library's opaque type (URL, IP, CIDR, quantity, semver, …).
    Opaque(Arc<dyn Opaque>),
    /// A value built by a message literal (`Object{…}`, `JSONPatch{…}`).
    Struct(Arc<StructValue<'a>>),
}

/// A value of an opaque library type.
pub trait Opaque: fmt::Debug + Send + Sync + 'static {
    /// The CEL type name, e.g. `kubernetes.Quantity`.
    fn type_name(&self) -> &'static str;
    /// The Go type (`%T`) of Kubernetes' value for this type, as cel-go's error messages name
    /// it, e.g. `cel.Quantity`.
    fn go_type_name(&self) -> &'static str;
    /// Downcasting support.
    fn as_any(&self) -> &dyn Any;
    /// CEL equality with another opaque value (of any type).
    fn equals(&self, other: &dyn Opaque) -> bool;
}

/// The name of a runtime type, the value of `type(x)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TypeName(pub Cow<'static, str>);

impl TypeName {
    /// A type name known at compile time.
    pub const fn new(name: &'static str) -> Self {
        TypeName(Cow::Borrowed(name))
    }
}

impl fmt::Display for TypeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A string, borrowed from JSON or shared.
#[derive(Clone)]
pub enum Str<'a> {
    /// Borrowed from the activation's JSON.
    Borrowed(&'a str),
    /// Owned and shared (literals, results of string functions).
    Shared(Arc<str>),
}

impl<'a> Str<'a> {
    /// This string, shared rather than borrowed.
    pub(crate) fn into_static(self) -> Str<'static> {
        match self {
            Str::Borrowed(s) => Str::Shared(Arc::from(s)),
            Str::Shared(s) => Str::Shared(s),
        }
    }

    /// The bytes `range` of this string, borrowed as this string is, else copied (the whole
    /// string is shared, not copied); empty if `range` is not on character boundaries.
    pub(crate) fn slice(&self, range: std::ops::Range<usize>) -> Str<'a> {
        match self {
            Str::Borrowed(s) => Str::Borrowed(s.get(range).unwrap_or_default()),
            Str::Shared(s) if range == (0..s.len()) => Str::Shared(s.clone()),
            Str::Shared(s) => Str::from(s.get(range).unwrap_or_default()),
        }
    }
}

impl Deref for Str<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Str::Borrowed(s) => s,
            Str::Shared(s) => s,
        }
    }
}

impl fmt::Debug for Str<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl PartialEq for Str<'_> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}
impl Eq for Str<'_> {}

impl From<String> for Str<'_> {
    fn from(s: String) -> Self {
        Str::Shared(Arc::from(s))
    }
}

impl From<&str> for Str<'_> {
    fn from(s: &str) -> Self {
        Str::Shared(Arc::from(s))
    }
}

/// A list: a view on a JSON array, or owned elements.
#[derive(Clone, Debug)]
pub enum List<'a> {
    /// A JSON array borrowed from the activation.
    Json(&'a [serde_json::Value]),
    /// An array of JSON text, read in place ([`crate::JsonTape`]).
    Tape(TapeNode<'a>),
    /// Owned elements.
    Owned(Arc<Vec<Value<'a>>>),
}

impl<'a> List<'a> {
    /// The number of elements.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            List::Json(a) => a.len(),
            List::Tape(a) => a.len(),
            List::Owned(v) => v.len(),
        }
    }

    /// True if the list has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element at `i`.
    #[inline]
    pub fn get(&self, i: usize) -> Option<Value<'a>> {
        match self {
            List::Json(a) => a.get(i).map(Value::from_json),
            List::Tape(a) => a.item(i).map(TapeNode::value),
            List::Owned(v) => v.get(i).cloned(),
        }
    }

    /// The elements in order.
    pub fn iter(&self) -> ListIter<'_, 'a> {
        ListIter {
            list: self,
            next: 0,
        }
    }

    /// An owned list of `values`.
    pub fn from_vec(values: Vec<Value<'a>>) -> Self {
        List::Owned(Arc::new(values))
    }
}

/// Iterator over a [`List`].
pub struct ListIter<'l, 'a> {
    list: &'l List<'a>,
    next: usize,
}

impl<'a> Iterator for ListIter<'_, 'a> {
    type Item = Value<'a>;
    #[inline]
    fn next(&mut self) -> Option<Value<'a>> {
        let v = self.list.get(self.next)?;
        self.next += 1;
        Some(v)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.list.len().saturating_sub(self.next);
        (n, Some(n))
    }
}

impl ExactSizeIterator for ListIter<'_, '_> {}

/// A map key. As in cel-go, any value but bytes can key a map: two keys are the same when they
/// have the same type and equal values (`1` and `1u` are different keys; lists, maps and
/// optionals are the same key only when they are the same value, not equal copies). Lookups
/// are heterogeneous for numbers: see [`OwnedMap::find`].
#[derive(Clone, Debug)]
pub enum Key<'a> {
    /// A bool key.
    Bool(bool),
    /// An int key.
    Int(i64),
    /// A uint key.
    Uint(u64),
    /// A double key.
    Double(f64),
    /// A string key.
    String(Str<'a>),
    /// The `null` key.
    Null,
    /// A key of any other type: timestamp, duration, type, list, map, optional or opaque
    /// (boxed: rare, and keeps the common keys small).
    Other(Box<Value<'a>>),
}

impl<'a> Key<'a> {
    /// This key owning what it holds (see [`Value::into_static`]).
    pub(crate) fn into_static(self) -> Option<Key<'static>> {
        Some(match self {
            Key::Bool(b) => Key::Bool(b),
            Key::Int(i) => Key::Int(i),
            Key::Uint(u) => Key::Uint(u),
            Key::Double(d) => Key::Double(d),
            Key::String(s) => Key::String(s.into_static()),
            Key::Null => Key::Null,
            Key::Other(v) => Key::Other(Box::new(v.into_static()?)),
        })
    }

    /// The key for `v`. `Err` for bytes, which cel-go's runtime cannot hash (its evaluator
    /// reports the panic as an internal error).
    pub fn from_value(v: &Value<'a>) -> Result<Key<'a>, EvalError> {
        Ok(match v {
            Value::Bool(b) => Key::Bool(*b),
            Value::Int(i) => Key::Int(*i),
            Value::Uint(u) => Key::Uint(*u),
            Value::Double(d) => Key::Double(*d),
            Value::String(s) => Key::String(s.clone()),
            Value::Null => Key::Null,
            Value::Bytes(_) => return Err(EvalError::UnhashableKey),
            other => Key::Other(Box::new(other.clone())),
        })
    }

    /// The key as a value.
    pub fn to_value(&self) -> Value<'a> {
        match self {
            Key::Bool(b) => Value::Bool(*b),
            Key::Int(i) => Value::Int(*i),
            Key::Uint(u) => Value::Uint(*u),
            Key::Double(d) => Value::Double(*d),
            Key::String(s) => Value::String(s.clone()),
            Key::Null => Value::Null,
            Key::Other(v) => (**v).clone(),
        }
    }

    /// The hashable form of a scalar key; `None` for `Other` keys and NaN (which equals no
    /// key, not even itself).
    fn scalar(&self) -> Option<Scalar> {
        Some(match self {
            Key::Bool(b) => Scalar::Bool(*b),
            Key::Int(i) => Scalar::Int(*i),
            Key::Uint(u) => Scalar::Uint(*u),
            Key::Double(d) if d.is_nan() => return None,
            // 0.0 and -0.0 are the same key.
            Key::Double(d) => Scalar::Double(if *d == 0.0 { 0 } else { d.to_bits() }),
            Key::Null => Scalar::Null,
            Key::String(_) | Key::Other(_) => return None,
        })
    }
}

impl Key<'_> {
    /// True if `self` and `other` are the same key: same type, equal value.
    pub fn same(&self, other: &Key<'_>) -> bool {
        match (self, other) {
            (Key::Bool(a), Key::Bool(b)) => a == b,
            (Key::Int(a), Key::Int(b)) => a == b,
            (Key::Uint(a), Key::Uint(b)) => a == b,
            (Key::Double(a), Key::Double(b)) => a == b,
            (Key::String(a), Key::String(b)) => **a == **b,
            (Key::Null, Key::Null) => true,
            (Key::Other(a), Key::Other(b)) => same_other_key(a, b),
            _ => false,
        }
    }
}

/// Key identity for values other than scalars: timestamps, durations and types by value,
/// lists, maps and present optionals by identity (cel-go keys them by pointer), opaque values
/// by CEL equality.
fn same_other_key(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        (Value::Timestamp(x), Value::Timestamp(y)) => x == y,
        (Value::Duration(x), Value::Duration(y)) => x == y,
        (Value::Type(x), Value::Type(y)) => x == y,
        (Value::List(List::Json(x)), Value::List(List::Json(y))) => std::ptr::eq(*x, *y),
        (Value::List(List::Tape(x)), Value::List(List::Tape(y))) => x.same(*y),
        (Value::List(List::Owned(x)), Value::List(List::Owned(y))) => Arc::ptr_eq(x, y),
        (Value::Map(Map::Json(x)), Value::Map(Map::Json(y))) => std::ptr::eq(*x, *y),
        (Value::Map(Map::Tape(x)), Value::Map(Map::Tape(y))) => x.same(*y),
        (Value::Map(Map::Layered(x)), Value::Map(Map::Layered(y))) => Arc::ptr_eq(x, y),
        (Value::Map(Map::Owned(x)), Value::Map(Map::Owned(y))) => Arc::ptr_eq(x, y),
        (Value::Optional(None), Value::Optional(None)) => true,
        (Value::Optional(Some(x)), Value::Optional(Some(y))) => Arc::ptr_eq(x, y),
        (Value::Opaque(x), Value::Opaque(y)) => x.equals(y.as_ref()),
        _ => false,
    }
}

impl fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Bool(b) => write!(f, "{b}"),
            Key::Int(i) => write!(f, "{i}"),
            Key::Uint(u) => write!(f, "{u}"),
            Key::Double(d) => f.write_str(&format_double(*d)),
            Key::String(s) => f.write_str(s),
            Key::Null => f.write_str("null"),
            Key::Other(v) => f.write_str(v.type_name()),
        }
    }
}

/// A scalar key in hashable form.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Scalar {
    Bool(bool),
    Int(i64),
    Uint(u64),
    /// The bits of a non-NaN double, with -0.0 as 0.0.
    Double(u64),
    Null,
}

/// Owned map entries in insertion order, with a hash index once the map is large.
#[derive(Debug, Default)]
pub struct OwnedMap<'a> {
    entries: Vec<(Key<'a>, Value<'a>)>,
    index: Option<Index>,
}

/// Hash index of a large map: string keys and scalar keys (other keys are found by a scan).
#[derive(Debug, Default)]
struct Index {
    strings: HashMap<Box<str>, usize>,
    scalars: HashMap<Scalar, usize>,
}

impl Index {
    fn add(&mut self, k: &Key<'_>, i: usize) {
        match k {
            Key::String(s) => {
                self.strings.insert(Box::from(&**s), i);
            }
            other => {
                if let Some(s) = other.scalar() {
                    self.scalars.insert(s, i);
                }
            }
        }
    }

    /// `None` if the index cannot tell (keys that are not indexed).
    fn find(&self, k: &Key<'_>) -> Option<Option<usize>> {
        match k {
            Key::String(s) => Some(self.strings.get(&**s).copied()),
            Key::Double(d) if d.is_nan() => Some(None),
            Key::Other(_) => None,
            other => Some(other.scalar().and_then(|s| self.scalars.get(&s).copied())),
        }
    }

    fn of(entries: &[(Key<'_>, Value<'_>)]) -> Index {
        let mut index = Index::default();
        for (i, (k, _)) in entries.iter().enumerate() {
            index.add(k, i);
        }
        index
    }
}

const INDEX_THRESHOLD: usize = 12;

impl<'a> OwnedMap<'a> {
    /// An empty map with room for `n` entries.
    pub fn with_capacity(n: usize) -> Self {
        Self {
            entries: Vec::with_capacity(n),
            index: None,
        }
    }

    /// Inserts `k` unless [`OwnedMap::find`] finds it (cel-go's mutable maps, built by
    /// `transformMap` and friends); returns false, leaving the map unchanged, if it does.
    pub fn insert_new(&mut self, k: Key<'a>, v: Value<'a>) -> bool {
        self.try_insert_new(k, v).is_ok()
    }

    /// [`OwnedMap::insert_new`], giving `k` back if it is already there.
    pub(crate) fn try_insert_new(&mut self, k: Key<'a>, v: Value<'a>) -> Result<(), Key<'a>> {
        if self.find(&k).is_some() {
            return Err(k);
        }
        self.push(k, v);
        Ok(())
    }

    /// Inserts `k`, replacing the entry of the same key (as a map literal does: like a Go map
    /// assignment, the key is replaced too, so `{-0.0: 'a', 0.0: 'b'}` keeps `0.0`).
    pub fn insert(&mut self, k: Key<'a>, v: Value<'a>) {
        match self.position(&k) {
            Some(i) => {
                if let Some(e) = self.entries.get_mut(i) {
                    *e = (k, v);
                }
            }
            None => self.push(k, v),
        }
    }

    /// Removes the entry of the same key, if any (a map literal's absent optional entry).
    pub fn remove(&mut self, k: &Key<'_>) {
        if let Some(i) = self.position(k) {
            self.entries.remove(i);
            if self.index.is_some() {
                self.index = Some(Index::of(&self.entries));
            }
        }
    }

    fn push(&mut self, k: Key<'a>, v: Value<'a>) {
        let i = self.entries.len();
        if let Some(index) = &mut self.index {
            index.add(&k, i);
        }
        self.entries.push((k, v));
        if self.index.is_none() && self.entries.len() > INDEX_THRESHOLD {
            self.index = Some(Index::of(&self.entries));
        }
    }

    /// The position of the same key (see [`Key::same`]).
    fn position(&self, k: &Key<'_>) -> Option<usize> {
        match self.index.as_ref().and_then(|index| index.find(k)) {
            Some(found) => found,
            None => self.entries.iter().position(|(e, _)| e.same(k)),
        }
    }

    /// The position of `k` as cel-go looks keys up: the same key, else for an integral double
    /// the equal int, then the equal uint key; for an int the equal uint key; for a uint the
    /// equal int key.
    fn find(&self, k: &Key<'_>) -> Option<usize> {
        if let Some(i) = self.position(k) {
            return Some(i);
        }
        match k {
            Key::Double(d) => {
                if let Some(p) =
                    double_to_int_lossless(*d).and_then(|i| self.position(&Key::Int(i)))
                {
                    return Some(p);
                }
                double_to_uint_lossless(*d).and_then(|u| self.position(&Key::Uint(u)))
            }
            Key::Int(i) => u64::try_from(*i)
                .ok()
                .and_then(|u| self.position(&Key::Uint(u))),
            Key::Uint(u) => i64::try_from(*u)
                .ok()
                .and_then(|i| self.position(&Key::Int(i))),
            _ => None,
        }
    }

    /// The value for `k`, looked up as cel-go does (see [`OwnedMap::find`]).
    pub fn get(&self, k: &Key<'_>) -> Option<&Value<'a>> {
        self.find(k)
            .and_then(|i| self.entries.get(i))
            .map(|(_, v)| v)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entries in insertion order.
    pub fn entries(&self) -> &[(Key<'a>, Value<'a>)] {
        &self.entries
    }
}

/// `d` as an int when the conversion is exact (cel-go excludes -2^63 itself).
pub(crate) fn double_to_int_lossless(d: f64) -> Option<i64> {
    if !d.is_finite() || d <= -9_223_372_036_854_775_808.0 || d >= 9_223_372_036_854_775_808.0 {
        return None;
    }
    let i = d as i64;
    (i as f64 == d).then_some(i)
}

/// `d` as a uint when the conversion is exact.
fn double_to_uint_lossless(d: f64) -> Option<u64> {
    if !(0.0..18_446_744_073_709_551_616.0).contains(&d) {
        return None;
    }
    let u = d as u64;
    (u as f64 == d).then_some(u)
}

/// A map: a view on a JSON object, or owned entries.
#[derive(Clone, Debug)]
pub enum Map<'a> {
    /// A JSON object borrowed from the activation.
    Json(&'a serde_json::Map<String, serde_json::Value>),
    /// An object of JSON text, read in place ([`crate::JsonTape`]).
    Tape(TapeNode<'a>),
    /// A JSON object with some members decoded and the others read from another ([`Layered`]).
    Layered(Arc<Layered<'a>>),
    /// Owned entries.
    Owned(Arc<OwnedMap<'a>>),
}

/// A JSON object whose members are decoded values, except those still read from the JSON
/// object they stand for (`base`): an object changed in places (a mutated request object)
/// without decoding what did not change. CEL reads it as it reads any JSON object.
#[derive(Clone, Debug)]
pub struct Layered<'a> {
    base: Map<'a>,
    members: &'a serde_json::Map<String, serde_json::Value>,
    from_base: &'a [String],
}

impl<'a> Layered<'a> {
    /// An object of every member of `members`, those named in `from_base` (sorted) read from
    /// `base`, a JSON object (their values in `members` are not read).
    pub fn new(
        base: Map<'a>,
        members: &'a serde_json::Map<String, serde_json::Value>,
        from_base: &'a [String],
    ) -> Self {
        Layered {
            base,
            members,
            from_base,
        }
    }

    /// The members, by key (the values of those read from the base not read).
    pub(crate) fn members(&self) -> &'a serde_json::Map<String, serde_json::Value> {
        self.members
    }

    /// The value of member `k`, whose decoded value is `v`.
    pub(crate) fn member(&self, k: &str, v: &'a serde_json::Value) -> Value<'a> {
        if (self.from_base)
            .binary_search_by(|s| s.as_str().cmp(k))
            .is_ok()
        {
            return self.base.get_str(k).unwrap_or(Value::Null);
        }
        Value::from_json(v)
    }

    /// The value at key `k`.
    fn get(&self, k: &str) -> Option<Value<'a>> {
        json_get(self.members, k).map(|v| self.member(k, v))
    }

    /// The (key, value) pairs, by key.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'a str, Value<'a>)> + '_ {
        (self.members.iter()).map(|(k, v)| (k.as_str(), self.member(k, v)))
    }
}

/// Objects of at most this many keys are scanned rather than searched (see [`json_get`]).
const SCAN_LIMIT: usize = 16;

/// `m[k]`. A small object (as most of Kubernetes' are) is scanned, comparing keys for equality
/// (lengths first, then bytes): faster than the B-tree's search, which orders `k` against
/// every key it passes.
#[inline]
pub(crate) fn json_get<'a>(
    m: &'a serde_json::Map<String, serde_json::Value>,
    k: &str,
) -> Option<&'a serde_json::Value> {
    if m.len() > SCAN_LIMIT {
        return m.get(k);
    }
    m.iter().find(|(key, _)| key.as_str() == k).map(|(_, v)| v)
}

impl<'a> Map<'a> {
    /// The number of entries.
    pub fn len(&self) -> usize {
        match self {
            Map::Json(m) => m.len(),
            Map::Tape(m) => m.len(),
            Map::Layered(m) => m.members.len(),
            Map::Owned(m) => m.len(),
        }
    }

    /// True if the map has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value at string key `k`.
    #[inline]
    pub fn get_str(&self, k: &str) -> Option<Value<'a>> {
        match self {
            Map::Json(m) => json_get(m, k).map(Value::from_json),
            Map::Tape(m) => m.get(k).map(TapeNode::value),
            Map::Layered(m) => m.get(k),
            Map::Owned(m) => m.get(&Key::String(Str::Borrowed(k))).cloned(),
        }
    }

    /// True if the string key `k` is present.
    #[inline]
    pub fn contains_str(&self, k: &str) -> bool {
        match self {
            Map::Json(m) => json_get(m, k).is_some(),
            Map::Tape(m) => m.get(k).is_some(),
            Map::Layered(m) => json_get(m.members, k).is_some(),
            Map::Owned(m) => m.get(&Key::String(Str::Borrowed(k))).is_some(),
        }
    }

    /// The value at `key`, looked up as cel-go does (see [`OwnedMap::find`]); a JSON object
    /// has string keys only. `Err` for a bytes key into a non-empty owned map, which cel-go's
    /// runtime cannot hash.
    pub fn get(&self, key: &Value<'_>) -> Result<Option<Value<'a>>, EvalError> {
        if let Value::String(s) = key {
            return Ok(self.get_str(s));
        }
        match self {
            Map::Json(_) | Map::Tape(_) | Map::Layered(_) => Ok(None),
            Map::Owned(m) if m.is_empty() => Ok(None),
            Map::Owned(m) => Ok(m.get(&Key::from_value(key)?).cloned()),
        }
    }

    /// The keys in iteration order.
    pub fn keys(&self) -> Vec<Value<'a>> {
        match self {
            Map::Json(m) => m
                .keys()
                .map(|k| Value::String(Str::Borrowed(k.as_str())))
                .collect(),
            Map::Tape(m) => m
                .entries()
                .map(|(k, _)| Value::String(Str::Borrowed(k)))
                .collect(),
            Map::Layered(m) => m
                .members
                .keys()
                .map(|k| Value::String(Str::Borrowed(k.as_str())))
                .collect(),
            Map::Owned(m) => m.entries().iter().map(|(k, _)| k.to_value()).collect(),
        }
    }

    /// Calls `f` with each (key, value) pair until it returns `Some`.
    pub fn find_map<R>(&self, mut f: impl FnMut(Value<'a>, Value<'a>) -> Option<R>) -> Option<R> {
        match self {
            Map::Json(m) => m.iter().find_map(|(k, v)| {
                f(
                    Value::String(Str::Borrowed(k.as_str())),
                    Value::from_json(v),
                )
            }),
            Map::Tape(m) => m
                .entries()
                .find_map(|(k, v)| f(Value::String(Str::Borrowed(k)), v.value())),
            Map::Layered(m) => m
                .iter()
                .find_map(|(k, v)| f(Value::String(Str::Borrowed(k)), v)),
            Map::Owned(m) => m
                .entries()
                .iter()
                .find_map(|(k, v)| f(k.to_value(), v.clone())),
        }
    }

    /// The (key, value) pairs in iteration order.
    pub fn entries(&self) -> Vec<(Value<'a>, Value<'a>)> {
        let mut out = Vec::with_capacity(self.len());
        self.find_map(|k, v| {
            out.push((k, v));
            None::<()>
        });
        out
    }
}

impl JsonTape {
    /// The document's value.
    pub fn root(&self) -> Value<'_> {
        self.root_node().value()
    }
}

impl<'a> TapeNode<'a> {
    /// The CEL value of this node: arrays and objects are read in place.
    pub(crate) fn value(self) -> Value<'a> {
        match self.read() {
            Read::Null => Value::Null,
            Read::Bool(b) => Value::Bool(b),
            Read::Int(i) => Value::Int(i),
            Read::Double(d) => Value::Double(d),
            Read::Str(s) => Value::String(Str::Borrowed(s)),
            Read::Array => Value::List(List::Tape(self)),
            Read::Object => Value::Map(Map::Tape(self)),
        }
    }
}

/// Constants held by a program, and what folding them when planning gives.
impl Value<'static> {
    /// This value for one evaluation: a string is borrowed from the program rather than its
    /// reference count raised (threads evaluating the same program at once would contend on
    /// it); anything else is cloned.
    #[inline]
    pub(crate) fn lend(&self) -> Value<'_> {
        match self {
            Value::String(Str::Shared(s)) => Value::String(Str::Borrowed(s)),
            other => other.clone(),
        }
    }
}

impl<'a> Value<'a> {
    /// This value owning everything it holds, free of the program and activation it came
    /// from (as a program keeps a constant); `None` if it reads JSON of an activation.
    pub fn into_static(self) -> Option<Value<'static>> {
        Some(match self {
            Value::Null => Value::Null,
            Value::Bool(b) => Value::Bool(b),
            Value::Int(i) => Value::Int(i),
            Value::Uint(u) => Value::Uint(u),
            Value::Double(d) => Value::Double(d),
            Value::String(s) => Value::String(s.into_static()),
            Value::Bytes(b) => Value::Bytes(b),
            Value::List(List::Owned(items)) => Value::List(List::from_vec(
                items
                    .iter()
                    .map(|v| v.clone().into_static())
                    .collect::<Option<_>>()?,
            )),
            Value::List(List::Json(_) | List::Tape(_)) => return None,
            Value::Map(Map::Owned(m)) => {
                let mut out = OwnedMap::with_capacity(m.entries().len());
                for (k, v) in m.entries() {
                    out.push(k.clone().into_static()?, v.clone().into_static()?);
                }
                Value::Map(Map::Owned(Arc::new(out)))
            }
            Value::Map(Map::Json(_) | Map::Tape(_) | Map::Layered(_)) => return None,
            Value::Timestamp(t) => Value::Timestamp(t),
            Value::Duration(d) => Value::Duration(d),
            Value::Type(t) => Value::Type(t),
            Value::Optional(None) => Value::Optional(None),
            Value::Optional(Some(v)) => {
                Value::Optional(Some(Arc::new((*v).clone().into_static()?)))
            }
            Value::Opaque(o) => Value::Opaque(o),
            Value::Struct(st) => {
                let fields = st
                    .fields
                    .iter()
                    .map(|(n, v)| Some((n.clone(), v.clone().into_static()?)))
                    .collect::<Option<_>>()?;
                Value::Struct(Arc::new(StructValue {
                    ty: st.ty.clone(),
                    fields,
                }))
            }
        })
    }
    /// Views a JSON value as a CEL value: numbers are `int` when they are integers that fit
    /// an int64 and `double` otherwise (as Kubernetes decodes JSON); arrays and objects are
    /// borrowed.
    #[inline(always)]
    pub fn from_json(v: &'a serde_json::Value) -> Value<'a> {
        match v {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::String(Str::Borrowed(s)),
            serde_json::Value::Array(a) => Value::List(List::Json(a)),
            serde_json::Value::Object(m) => Value::Map(Map::Json(m)),
        }
    }

    /// A shared string value.
    pub fn string(s: impl Into<Arc<str>>) -> Value<'a> {
        Value::String(Str::Shared(s.into()))
    }

    /// The CEL name of this value's runtime type, as `type(x)` reports it.
    pub fn type_name(&self) -> &str {
        match self {
            Value::Struct(s) => s.type_name(),
            other => other.static_type_name().unwrap_or_default(),
        }
    }

    /// The Go type (`%T`) of the cel-go value standing for this one, as cel-go's messages name
    /// it (`None` for message values, which have no cel-go counterpart here).
    pub(crate) fn go_type_name(&self) -> Option<&'static str> {
        Some(match self {
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
            Value::Opaque(o) => o.go_type_name(),
            Value::Struct(_) => return None,
        })
    }

    /// The runtime type name of every value but a struct's (whose type names itself).
    pub(crate) fn static_type_name(&self) -> Option<&'static str> {
        Some(match self {
            Value::Null => "null_type",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Uint(_) => "uint",
            Value::Double(_) => "double",
            Value::String(_) => "string",
            Value::Bytes(_) => "bytes",
            Value::List(_) => "list",
            Value::Map(_) => "map",
            Value::Timestamp(_) => "google.protobuf.Timestamp",
            Value::Duration(_) => "google.protobuf.Duration",
            Value::Type(_) => "type",
            Value::Optional(_) => "optional_type",
            Value::Opaque(o) => o.type_name(),
            Value::Struct(_) => return None,
        })
    }

    /// The value as a bool, if it is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }

    /// The value as a string slice, if it is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// CEL equality (heterogeneous: numbers compare by value across int, uint and double;
    /// values of different types are unequal).
    pub fn equals(&self, other: &Value<'_>) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::String(a), Value::String(b)) => **a == **b,
            (Value::Bytes(a), Value::Bytes(b)) => a == b,
            (Value::Timestamp(a), Value::Timestamp(b)) => a == b,
            (Value::Duration(a), Value::Duration(b)) => a == b,
            (Value::Type(a), Value::Type(b)) => a == b,
            (Value::List(a), Value::List(b)) => {
                a.len() == b.len() && a.iter().zip(b.iter()).all(|(x, y)| x.equals(&y))
            }
            (Value::Map(a), Value::Map(b)) => {
                a.len() == b.len()
                    && a.find_map(|k, v| match b.get(&k) {
                        Ok(Some(w)) if v.equals(&w) => None,
                        _ => Some(()),
                    })
                    .is_none()
            }
            (Value::Optional(a), Value::Optional(b)) => match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => a.equals(b),
                _ => false,
            },
            (Value::Opaque(a), Value::Opaque(b)) => a.equals(b.as_ref()),
            (Value::Struct(a), Value::Struct(b)) => a.equals(b),
            _ => match numeric_cmp(self, other) {
                Some(o) => o == Some(Ordering::Equal),
                None => false,
            },
        }
    }

    /// CEL ordering for `<`, `<=`, `>`, `>=`. `Err` for values that cannot be ordered.
    pub fn compare(&self, other: &Value<'_>) -> Result<Ordering, EvalError> {
        let ord = match (self, other) {
            (Value::Bool(a), Value::Bool(b)) => Some(a.cmp(b)),
            (Value::String(a), Value::String(b)) => Some((**a).cmp(&**b)),
            (Value::Bytes(a), Value::Bytes(b)) => Some(a.cmp(b)),
            (Value::Timestamp(a), Value::Timestamp(b)) => Some(a.cmp(b)),
            (Value::Duration(a), Value::Duration(b)) => Some(a.cmp(b)),
            _ => match numeric_cmp(self, other) {
                Some(Some(o)) => Some(o),
                Some(None) => return Err(EvalError::NaNOrdering),
                None => None,
            },
        };
        ord.ok_or(EvalError::no_such_overload())
    }

    /// Converts to JSON (for results handed back to the host). `Err` for values without a
    /// JSON form (bytes, types, opaque values…).
    pub fn to_json(&self) -> Result<serde_json::Value, EvalError> {
        Ok(match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Uint(u) => serde_json::Value::from(*u),
            Value::Double(d) => serde_json::Number::from_f64(*d)
                .map(serde_json::Value::Number)
                .unwrap_or(serde_json::Value::Null),
            Value::String(s) => serde_json::Value::String(s.to_string()),
            Value::List(l) => {
                serde_json::Value::Array(l.iter().map(|v| v.to_json()).collect::<Result<_, _>>()?)
            }
            Value::Map(m) => {
                let mut out = serde_json::Map::new();
                for (k, v) in m.entries() {
                    let key = match k {
                        Value::String(s) => s.to_string(),
                        other => {
                            return Err(EvalError::UnsupportedKeyType(other.type_name().into()));
                        }
                    };
                    out.insert(key, v.to_json()?);
                }
                serde_json::Value::Object(out)
            }
            Value::Struct(s) => {
                let mut out = serde_json::Map::with_capacity(s.fields().len());
                for (k, v) in s.fields() {
                    out.insert(k.to_string(), v.to_json()?);
                }
                serde_json::Value::Object(out)
            }
            Value::Optional(Some(v)) => v.to_json()?,
            Value::Optional(None) => serde_json::Value::Null,
            other => {
                return Err(EvalError::Message(format!(
                    "unsupported conversion of {} to JSON",
                    other.type_name()
                )));
            }
        })
    }
}

/// Compares two numbers across int, uint and double. `None` if either is not a number;
/// `Some(None)` if a NaN is involved.
pub(crate) fn numeric_cmp(a: &Value<'_>, b: &Value<'_>) -> Option<Option<Ordering>> {
    Some(match (a, b) {
        (Value::Int(x), Value::Int(y)) => Some(x.cmp(y)),
        (Value::Uint(x), Value::Uint(y)) => Some(x.cmp(y)),
        (Value::Int(x), Value::Uint(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        (Value::Uint(x), Value::Int(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        (Value::Double(x), Value::Double(y)) => x.partial_cmp(y),
        (Value::Double(x), Value::Int(y)) => cmp_double_int(*x, i128::from(*y)),
        (Value::Double(x), Value::Uint(y)) => cmp_double_int(*x, i128::from(*y)),
        (Value::Int(x), Value::Double(y)) => {
            cmp_double_int(*y, i128::from(*x)).map(Ordering::reverse)
        }
        (Value::Uint(x), Value::Double(y)) => {
            cmp_double_int(*y, i128::from(*x)).map(Ordering::reverse)
        }
        _ => return None,
    })
}

/// cel-go's double/integer comparison: out-of-range doubles decide alone, otherwise the
/// integer is converted to a double (lossy, as in cel-go).
fn cmp_double_int(d: f64, i: i128) -> Option<Ordering> {
    if d.is_nan() {
        return None;
    }
    let (lo, hi) = if i < 0 || i <= i128::from(i64::MAX) {
        (
            -9_223_372_036_854_775_808.0,
            9_223_372_036_854_775_807.0_f64,
        )
    } else {
        (0.0, 18_446_744_073_709_551_615.0_f64)
    };
    if d < lo {
        return Some(Ordering::Less);
    }
    if d > hi {
        return Some(Ordering::Greater);
    }
    d.partial_cmp(&(i as f64))
}

impl PartialEq for Value<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.equals(other)
    }
}

/// A message type a [`TypeProvider`](crate::structs::TypeProvider) resolved: what the checker sees and how its values behave.
pub trait StructType: Send + Sync + fmt::Debug {
    /// The type's name, as `type(x)` and the checker report it.
    fn name(&self) -> &str;

    /// The name of the type value `type(x)` gives for a value of this type.
    fn type_value_name(&self) -> &str;

    /// The checker's view of the type: its fields and their types.
    fn checker_type(&self) -> Arc<ObjectType>;

    /// Accepts (or rejects, with the error evaluation reports) `value` for `field` when a
    /// literal is built.
    fn check_field(&self, field: &str, value: &Value<'_>) -> Result<(), EvalError>;

    /// Whether [`check_field`](Self::check_field) may reject a value (the apply
    /// configurations' `Object` types accept any).
    fn checks_fields(&self) -> bool {
        true
    }

    /// `value.field`.
    fn select<'a>(&self, value: &StructValue<'a>, field: &str) -> Result<Value<'a>, EvalError>;

    /// `has(value.field)`.
    fn is_set(&self, value: &StructValue<'_>, field: &str) -> Result<bool, EvalError>;

    /// `value.?field`: the field if the type reports it as present to optional selection.
    fn opt_select<'a>(
        &self,
        value: &StructValue<'a>,
        field: &str,
    ) -> Result<Option<Value<'a>>, EvalError>;

    /// Equality of two values of this type.
    fn equals(&self, a: &StructValue<'_>, b: &StructValue<'_>) -> bool;

    /// True if `value` is the type's zero value (for `optional.ofNonZeroValue`).
    fn is_zero(&self, value: &StructValue<'_>) -> bool;
}

/// A value built by a message literal: its type and the fields it was given, in order (a
/// field given twice keeps the last value).
#[derive(Clone)]
pub struct StructValue<'a> {
    ty: Arc<dyn StructType>,
    fields: Vec<(Arc<str>, Value<'a>)>,
}

impl<'a> StructValue<'a> {
    /// A value of `ty` with `fields`; a name given twice keeps its last value, in the place it
    /// first had.
    pub fn new(ty: Arc<dyn StructType>, mut fields: Vec<(Arc<str>, Value<'a>)>) -> Self {
        // Each field's value moves to the first place of its name, and its later places go.
        let mut kept = 0;
        for i in 0..fields.len() {
            match fields[..kept].iter().position(|(n, _)| *n == fields[i].0) {
                Some(first) => fields.swap(first, i),
                None => {
                    fields.swap(kept, i);
                    kept += 1;
                }
            }
        }
        fields.truncate(kept);
        Self { ty, fields }
    }

    /// The type's name (`Object.spec`, `JSONPatch`).
    pub fn type_name(&self) -> &str {
        self.ty.name()
    }

    /// The value's type.
    pub fn struct_type(&self) -> &Arc<dyn StructType> {
        &self.ty
    }

    /// The fields that were set, in the order the literal gave them.
    pub fn fields(&self) -> &[(Arc<str>, Value<'a>)] {
        &self.fields
    }

    /// The value of field `name`, if it was set.
    pub fn field(&self, name: &str) -> Option<&Value<'a>> {
        self.fields
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| v)
    }

    /// `self.name`, as the type defines selection.
    pub fn select(&self, name: &str) -> Result<Value<'a>, EvalError> {
        self.ty.select(self, name)
    }

    /// `has(self.name)`.
    pub fn is_set(&self, name: &str) -> Result<bool, EvalError> {
        self.ty.is_set(self, name)
    }

    /// `self.?name`.
    pub fn opt_select(&self, name: &str) -> Result<Option<Value<'a>>, EvalError> {
        self.ty.opt_select(self, name)
    }

    /// CEL equality: same type and equal as the type defines it.
    pub fn equals(&self, other: &StructValue<'_>) -> bool {
        self.type_name() == other.type_name() && self.ty.equals(self, other)
    }
}

impl fmt::Debug for StructValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct(self.type_name());
        for (n, v) in &self.fields {
            s.field(n, v);
        }
        s.finish()
    }
}

/// Formats a double as Go's `strconv.FormatFloat(d, 'g', -1, 64)`.
pub fn format_double(d: f64) -> String {
    if d.is_nan() {
        return "NaN".into();
    }
    if d.is_infinite() {
        return if d > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if d == 0.0 {
        return if d.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    // Shortest round-trip digits and exponent, from Rust's `{:e}`.
    let sci = format!("{d:e}");
    let (mantissa, exp) = match sci.split_once('e') {
        Some((m, e)) => (m, e.parse::<i32>().unwrap_or(0)),
        None => (sci.as_str(), 0),
    };
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if !(-4..6).contains(&exp) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let e = exp.unsigned_abs();
        if e < 10 {
            out.push('0');
        }
        out.push_str(&e.to_string());
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            for _ in digits.len()..int_len {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_numbers_are_int_first() {
        let j = serde_json::json!({"a": 3, "b": 1.5, "c": 18446744073709551615u64});
        let Value::Map(m) = Value::from_json(&j) else {
            panic!("map")
        };
        assert!(matches!(m.get_str("a"), Some(Value::Int(3))));
        assert!(matches!(m.get_str("b"), Some(Value::Double(_))));
        assert!(matches!(m.get_str("c"), Some(Value::Double(_))));
    }

    #[test]
    fn heterogeneous_equality() {
        assert!(Value::Int(1).equals(&Value::Uint(1)));
        assert!(Value::Int(1).equals(&Value::Double(1.0)));
        assert!(!Value::Int(1).equals(&Value::string("1")));
        assert!(!Value::Double(f64::NAN).equals(&Value::Double(f64::NAN)));
        let j = serde_json::json!([1, 2.0]);
        let owned = Value::List(List::from_vec(vec![Value::Double(1.0), Value::Uint(2)]));
        assert!(Value::from_json(&j).equals(&owned));
    }

    #[test]
    fn numeric_lookups_are_heterogeneous() {
        let mut m = OwnedMap::default();
        assert!(m.insert_new(Key::Int(1), Value::Bool(true)));
        assert!(!m.insert_new(Key::Uint(1), Value::Bool(false)));
        let map = Map::Owned(Arc::new(m));
        assert!(matches!(
            map.get(&Value::Double(1.0)),
            Ok(Some(Value::Bool(true)))
        ));
        assert!(matches!(map.get(&Value::Double(1.5)), Ok(None)));
    }

    #[test]
    fn literal_keys_are_typed() {
        let mut m = OwnedMap::default();
        m.insert(Key::Int(1), Value::Bool(true));
        m.insert(Key::Uint(1), Value::Bool(false));
        m.insert(Key::Double(1.0), Value::Null);
        m.insert(Key::Double(-0.0), Value::Int(1));
        m.insert(Key::Double(0.0), Value::Int(2));
        assert_eq!(m.len(), 4);
        // A double key is found by a double lookup only; an int lookup tries int, then uint.
        assert!(matches!(m.get(&Key::Double(0.0)), Some(Value::Int(2))));
        let mut d = OwnedMap::default();
        d.insert(Key::Double(2.0), Value::Null);
        assert!(d.get(&Key::Int(2)).is_none());
        assert!(d.get(&Key::Double(2.0)).is_some());
        d.remove(&Key::Double(2.0));
        assert!(d.is_empty());
    }

    #[test]
    fn large_maps_index_every_scalar_key() {
        let mut m = OwnedMap::default();
        for i in 0..20 {
            m.insert(Key::Double(f64::from(i)), Value::Int(i64::from(i)));
        }
        m.insert(Key::Null, Value::Int(-1));
        m.insert(Key::Double(f64::NAN), Value::Int(-2));
        m.insert(Key::Double(f64::NAN), Value::Int(-3));
        assert_eq!(m.len(), 23);
        assert!(m.get(&Key::Int(7)).is_none());
        assert!(matches!(m.get(&Key::Double(7.0)), Some(Value::Int(7))));
        assert!(matches!(m.get(&Key::Null), Some(Value::Int(-1))));
        assert!(m.get(&Key::Double(f64::NAN)).is_none());
        m.remove(&Key::Double(3.0));
        assert!(m.get(&Key::Double(3.0)).is_none());
        assert!(matches!(m.get(&Key::Double(4.0)), Some(Value::Int(4))));
    }

    #[test]
    fn bytes_cannot_key_a_map() {
        assert!(matches!(
            Key::from_value(&Value::Bytes(Arc::from(&b"a"[..]))),
            Err(EvalError::UnhashableKey)
        ));
    }

    #[test]
    fn ordering_across_numbers() {
        assert_eq!(
            Value::Int(-1).compare(&Value::Uint(0)).ok(),
            Some(Ordering::Less)
        );
        assert_eq!(
            Value::Double(2.5).compare(&Value::Int(2)).ok(),
            Some(Ordering::Greater)
        );
        assert!(Value::Double(f64::NAN).compare(&Value::Int(2)).is_err());
    }

    #[test]
    fn doubles_format_like_go() {
        assert_eq!(format_double(1.0), "1");
        assert_eq!(format_double(1.5), "1.5");
        assert_eq!(format_double(1e6), "1e+06");
        assert_eq!(format_double(123456.0), "123456");
        assert_eq!(format_double(0.0001), "0.0001");
        assert_eq!(format_double(0.00001), "1e-05");
        assert_eq!(format_double(-2.5e-10), "-2.5e-10");
        assert_eq!(format_double(1234567.0), "1.234567e+06");
    }
}
