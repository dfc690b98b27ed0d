//! JSON text laid out for reading in place: one pass over the text writes every value as a
//! node of a flat tape, with a string that has no escapes kept as a range of the text. No map
//! or string is allocated per value, which decoding into `serde_json::Value` does for every
//! key and every string; CEL reads a tape's arrays and objects in place (`List::Tape` and
//! `Map::Tape` of [`crate::value`]) exactly as it reads a `serde_json::Value`'s.
//!
//! An object's entries are ordered by key and hold one entry per key, the last written (as a
//! `serde_json::Map` holds them), so lookups, iteration order and sizes are the same as for the
//! decoded value. Numbers follow `Value::from_json`: an integer that fits an int64 is `int`,
//! any other number `double`; [`JsonTape::to_json`] gives back the decoded value exactly.
//!
//! The text may be a larger document that the tape holds one member of (an AdmissionReview
//! and its request's `object`, read in the same pass as the review): the tape then shares it.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

mod footprint;
mod scan;

pub use footprint::Footprint;
pub use scan::{Counter, Declined, Meter, Scan, Tally};

/// One value of a [`JsonTape`]. Containers come after their elements.
#[derive(Clone, Copy, Debug)]
enum Node {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer above `i64::MAX`: a `double` to CEL, as `Value::from_json` reads it, and
    /// kept whole for [`JsonTape::to_json`].
    Uint(u64),
    Double(f64),
    /// A string without escapes: `len` bytes of the text from `at`.
    Text {
        at: u32,
        len: u32,
    },
    /// A string with escapes, decoded: `escaped[i]`.
    Escaped(u32),
    /// An array: its elements are the nodes `slots[at..at + len]`.
    Array {
        at: u32,
        len: u32,
    },
    /// An object: `slots[at..at + 3 * len]` holds its entries by key, three slots each: the
    /// key (a [`Key`]) and the value's node.
    Object {
        at: u32,
        len: u32,
    },
}

/// An object's key: a range of the text (`at`, `len`), or, with [`ESCAPED`] set in `len`, the
/// decoded `escaped[at]` of that length. A lookup reads each key's length from the slots and
/// compares bytes only of keys as long as the one it seeks.
#[derive(Clone, Copy)]
struct Key {
    at: u32,
    len: u32,
}

/// An entry of an object being read, with the first 8 bytes of its key (zero-padded, as a
/// big-endian number) to order most keys by without reading them.
#[derive(Clone, Copy)]
struct Entry {
    prefix: u64,
    key: Key,
    value: u32,
}

/// The flag of [`Key::len`] for a key with escapes.
const ESCAPED: u32 = 1 << 31;

impl Key {
    fn len(self) -> usize {
        (self.len & !ESCAPED) as usize
    }
}

/// JSON text and the tape of its values (see the module documentation).
pub struct JsonTape {
    text: Arc<str>,
    nodes: Vec<Node>,
    slots: Vec<u32>,
    escaped: Vec<Box<str>>,
}

impl fmt::Debug for JsonTape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.root_node())
    }
}

impl JsonTape {
    /// Reads `text` through `de`, a deserializer over that same text (the caller checks that
    /// nothing follows the value, e.g. with serde_json's `Deserializer::end`). Errors are the
    /// deserializer's own, as decoding the text into a `serde_json::Value` would report them.
    pub fn read<'de, D: Deserializer<'de>>(text: &'de str, de: D) -> Result<Self, D::Error> {
        Self::build(text, de, || Arc::from(text))
    }

    /// Reads one value of `text` through `de`, a deserializer over `text` positioned at that
    /// value (a member of a larger document): the tape shares `text` rather than copying it.
    /// Errors are the deserializer's own.
    pub fn read_in<'de, D: Deserializer<'de>>(
        text: &'de Arc<str>,
        de: D,
    ) -> Result<Self, D::Error> {
        Self::build(text, de, || Arc::clone(text))
    }

    /// Writes the tape of the value `de` reads from `text`, keeping the text `keep` gives.
    fn build<'de, D: Deserializer<'de>>(
        text: &'de str,
        de: D,
        keep: impl FnOnce() -> Arc<str>,
    ) -> Result<Self, D::Error> {
        // Offsets, lengths and counts then fit 31 bits (see [`Key`]).
        if text.len() >= ESCAPED as usize {
            return Err(de::Error::custom("JSON text of 2 GiB or more"));
        }
        let mut b = Builder::new(text, text.len() / 8);
        NodeSeed(&mut b).deserialize(de)?;
        Ok(b.finish(keep()))
    }

    /// The document's node.
    pub(crate) fn root_node(&self) -> TapeNode<'_> {
        // The root is written last: every container follows its elements.
        let last = self.nodes.len().saturating_sub(1);
        self.node(u32::try_from(last).unwrap_or(0))
    }

    fn node(&self, index: u32) -> TapeNode<'_> {
        TapeNode { tape: self, index }
    }

    /// `len` bytes of the text from `at`.
    fn range(&self, at: u32, len: u32) -> &str {
        text_range(&self.text, at, len)
    }

    /// Decoded string `i`.
    fn escaped(&self, i: u32) -> &str {
        self.escaped.get(i as usize).map_or("", |s| &**s)
    }

    fn key(&self, key: Key) -> &str {
        key_in(&self.text, &self.escaped, key)
    }

    /// The value as `serde_json` decodes the same text: the same numbers (`u64`, `i64` or
    /// `f64`), strings and objects ([`TapeNode::to_json`] of the root).
    pub fn to_json(&self) -> serde_json::Value {
        self.root_node().to_json()
    }

    /// Whether the document is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self.root_node().kind(), Node::Null)
    }
}

/// The value of a number, boolean or null node (`null` for any other).
fn scalar_json(node: Node) -> serde_json::Value {
    use serde_json::Value as Json;
    match node {
        Node::Bool(b) => Json::Bool(b),
        Node::Int(n) => Json::from(n),
        Node::Uint(n) => Json::from(n),
        Node::Double(d) => serde_json::Number::from_f64(d).map_or(Json::Null, Json::Number),
        _ => Json::Null,
    }
}

/// The key `key` of a tape's `text` and `escaped` strings.
fn key_in<'a>(text: &'a str, escaped: &'a [Box<str>], key: Key) -> &'a str {
    if key.len & ESCAPED == 0 {
        text_range(text, key.at, key.len)
    } else {
        escaped.get(key.at as usize).map_or("", |s| &**s)
    }
}

#[inline]
fn text_range(text: &str, at: u32, len: u32) -> &str {
    text.get(at as usize..at as usize + len as usize)
        .unwrap_or_default()
}

/// An array or object of a [`JsonTape`], as CEL reads it in place.
#[derive(Clone, Copy)]
pub struct TapeNode<'a> {
    tape: &'a JsonTape,
    index: u32,
}

impl fmt::Debug for TapeNode<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.read() {
            Read::Object => f.debug_map().entries(self.entries()).finish(),
            Read::Array => f
                .debug_list()
                .entries((0..self.len()).filter_map(|i| self.item(i)))
                .finish(),
            scalar => write!(f, "{scalar:?}"),
        }
    }
}

/// What a node holds: a scalar, or whether it is an array or an object (read those through
/// the node).
#[derive(Debug)]
pub(crate) enum Read<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Double(f64),
    Str(&'a str),
    Array,
    Object,
}

impl<'a> TapeNode<'a> {
    fn kind(self) -> Node {
        self.tape
            .nodes
            .get(self.index as usize)
            .copied()
            .unwrap_or(Node::Null)
    }

    /// What this node holds.
    pub(crate) fn read(self) -> Read<'a> {
        let tape = self.tape;
        match self.kind() {
            Node::Null => Read::Null,
            Node::Bool(b) => Read::Bool(b),
            Node::Int(i) => Read::Int(i),
            Node::Uint(u) => Read::Double(u as f64),
            Node::Double(d) => Read::Double(d),
            Node::Text { at, len } => Read::Str(tape.range(at, len)),
            Node::Escaped(i) => Read::Str(tape.escaped(i)),
            Node::Array { .. } => Read::Array,
            Node::Object { .. } => Read::Object,
        }
    }

    /// The slots of an array (its elements) or of an object (its entries).
    fn slots(self) -> &'a [u32] {
        let (at, n) = match self.kind() {
            Node::Array { at, len } => (at as usize, len as usize),
            Node::Object { at, len } => (at as usize, 3 * len as usize),
            _ => (0, 0),
        };
        self.tape.slots.get(at..at + n).unwrap_or_default()
    }

    /// Whether two nodes are the same node of the same tape.
    pub(crate) fn same(self, other: TapeNode<'_>) -> bool {
        std::ptr::eq(self.tape, other.tape) && self.index == other.index
    }

    /// The number of elements or entries.
    pub(crate) fn len(self) -> usize {
        match self.kind() {
            Node::Array { len, .. } | Node::Object { len, .. } => len as usize,
            _ => 0,
        }
    }

    /// Element `i` of an array.
    pub(crate) fn item(self, i: usize) -> Option<TapeNode<'a>> {
        let index = *self.slots().get(i)?;
        Some(self.tape.node(index))
    }

    /// The value at key `k` of an object.
    pub fn get(self, k: &str) -> Option<TapeNode<'a>> {
        let tape = self.tape;
        let entries = self.slots();
        let key = |e: &[u32]| Key {
            at: e[0],
            len: e[1],
        };
        if entries.len() <= 3 * SCAN_LIMIT {
            return entries
                .chunks_exact(3)
                .find(|e| key(e).len() == k.len() && tape.key(key(e)) == k)
                .map(|e| tape.node(e[2]));
        }
        let (mut lo, mut hi) = (0, entries.len() / 3);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let e = entries.get(3 * mid..3 * mid + 3)?;
            match tape.key(key(e)).cmp(k) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Some(tape.node(e[2])),
            }
        }
        None
    }

    /// The (key, value) pairs of an object, by key.
    pub(crate) fn entries(self) -> TapeEntries<'a> {
        TapeEntries {
            tape: self.tape,
            entries: self.slots().chunks_exact(3),
        }
    }

    /// This node's value as `serde_json` decodes the same text: the same numbers (`u64`,
    /// `i64` or `f64`), strings and objects. Built without recursion, in the tape's order
    /// (every container after its elements, so a node's descendants are the nodes just before
    /// it), so a value of any depth converts.
    pub fn to_json(self) -> serde_json::Value {
        use serde_json::Value as Json;
        let tape = self.tape;
        let first = self.first();
        let nodes = (tape.nodes.get(first as usize..=self.index as usize)).unwrap_or_default();
        let mut built: Vec<Json> = Vec::with_capacity(nodes.len());
        let take = |built: &mut Vec<Json>, i: u32| {
            (i.checked_sub(first))
                .and_then(|i| built.get_mut(i as usize))
                .map_or(Json::Null, std::mem::take)
        };
        for node in nodes {
            let slots = |at: u32, n: usize| {
                tape.slots
                    .get(at as usize..at as usize + n)
                    .unwrap_or_default()
            };
            let value = match *node {
                Node::Null | Node::Bool(_) | Node::Int(_) | Node::Uint(_) | Node::Double(_) => {
                    scalar_json(*node)
                }
                Node::Text { at, len } => Json::String(tape.range(at, len).to_string()),
                Node::Escaped(e) => Json::String(tape.escaped(e).to_string()),
                Node::Array { at, len } => Json::Array(
                    slots(at, len as usize)
                        .iter()
                        .map(|&item| take(&mut built, item))
                        .collect(),
                ),
                Node::Object { at, len } => Json::Object(
                    slots(at, 3 * len as usize)
                        .chunks_exact(3)
                        .map(|e| {
                            let key = tape
                                .key(Key {
                                    at: e[0],
                                    len: e[1],
                                })
                                .to_string();
                            (key, take(&mut built, e[2]))
                        })
                        .collect(),
                ),
            };
            built.push(value);
        }
        built.pop().unwrap_or(Json::Null)
    }

    /// The first node of this node's value: down through the element written first (the
    /// lowest node) of each container on the way.
    fn first(self) -> u32 {
        let mut node = self;
        loop {
            let earliest = match node.kind() {
                Node::Array { .. } => node.slots().iter().copied().min(),
                Node::Object { .. } => node.slots().chunks_exact(3).map(|e| e[2]).min(),
                _ => None,
            };
            match earliest {
                Some(i) if i < node.index => node = node.tape.node(i),
                _ => return node.index,
            }
        }
    }

    /// Whether this node is an object.
    pub(crate) fn is_object(self) -> bool {
        matches!(self.kind(), Node::Object { .. })
    }
}

/// Objects of at most this many keys are scanned rather than searched.
const SCAN_LIMIT: usize = 16;

/// The entries of a tape object, by key.
pub(crate) struct TapeEntries<'a> {
    tape: &'a JsonTape,
    entries: std::slice::ChunksExact<'a, u32>,
}

impl<'a> Iterator for TapeEntries<'a> {
    type Item = (&'a str, TapeNode<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let e = self.entries.next()?;
        let key = self.tape.key(Key {
            at: e[0],
            len: e[1],
        });
        Some((key, self.tape.node(e[2])))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.entries.size_hint()
    }
}

impl ExactSizeIterator for TapeEntries<'_> {}

/// The most nodes (and slots) a tape reserves room for before it is written: 1.25 MiB. A
/// larger tape grows as it is written, so that what a tape holds beyond what it was written
/// with is bounded, whatever the length of the text (a member of a larger document reserves
/// by the length of the text after it).
pub const RESERVED_NODES: usize = 1 << 16;

/// The tape being written.
struct Builder<'t> {
    text: &'t str,
    nodes: Vec<Node>,
    slots: Vec<u32>,
    escaped: Vec<Box<str>>,
    /// Elements of the arrays being read (innermost last).
    items: Vec<u32>,
    /// Entries of the objects being read (innermost last).
    entries: Vec<Entry>,
}

impl<'t> Builder<'t> {
    /// A builder over `text`, with room for `capacity` nodes and slots, at most
    /// [`RESERVED_NODES`].
    fn new(text: &'t str, capacity: usize) -> Self {
        let capacity = capacity.min(RESERVED_NODES);
        Builder {
            text,
            nodes: Vec::with_capacity(capacity),
            slots: Vec::with_capacity(capacity),
            escaped: Vec::new(),
            items: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// The tape written, its root the last node, keeping `text` (the builder's own text).
    fn finish(self, text: Arc<str>) -> JsonTape {
        JsonTape {
            text,
            nodes: self.nodes,
            slots: self.slots,
            escaped: self.escaped,
        }
    }

    #[inline]
    fn push(&mut self, node: Node) -> u32 {
        self.nodes.push(node);
        // The text's length bounds the node count (checked in `JsonTape::read`).
        (self.nodes.len() - 1) as u32
    }

    /// Where `s` is in the text, if it is a part of it.
    fn range_of(&self, s: &str) -> Option<(u32, u32)> {
        let at = (s.as_ptr() as usize).wrapping_sub(self.text.as_ptr() as usize);
        (at <= self.text.len() && s.len() <= self.text.len() - at)
            .then_some((at as u32, s.len() as u32))
    }

    fn string(&mut self, s: &str) -> u32 {
        match self.range_of(s) {
            Some((at, len)) => self.push(Node::Text { at, len }),
            None => self.escaped(s.into()),
        }
    }

    fn escaped(&mut self, s: Box<str>) -> u32 {
        let i = self.keep(s);
        self.push(Node::Escaped(i))
    }

    fn keep(&mut self, s: Box<str>) -> u32 {
        self.escaped.push(s);
        (self.escaped.len() - 1) as u32
    }

    fn key_of(&mut self, s: &str) -> Key {
        match self.range_of(s) {
            Some((at, len)) => Key { at, len },
            None => self.escaped_key(s.into()),
        }
    }

    fn escaped_key(&mut self, s: Box<str>) -> Key {
        let len = s.len() as u32 | ESCAPED;
        Key {
            at: self.keep(s),
            len,
        }
    }

    fn key(&self, key: Key) -> &str {
        key_in(self.text, &self.escaped, key)
    }

    /// Writes the array of the elements in `items` from `start`.
    fn array(&mut self, start: usize) -> u32 {
        let at = self.slots.len() as u32;
        let len = (self.items.len() - start) as u32;
        self.slots.extend(self.items.drain(start..));
        self.push(Node::Array { at, len })
    }

    /// Adds an entry of the object being read: `key` and its value's node.
    fn entry(&mut self, key: Key, value: u32) {
        let bytes = self.key(key).as_bytes();
        // One load for a key of 8 bytes or more (a copy into a zeroed array would be stored
        // byte by byte and read back whole, which the CPU cannot forward).
        let prefix = match bytes.first_chunk::<8>() {
            Some(first) => u64::from_be_bytes(*first),
            None => (0..8).fold(0u64, |p, i| {
                p << 8 | u64::from(bytes.get(i).copied().unwrap_or(0))
            }),
        };
        self.entries.push(Entry { prefix, key, value });
    }

    /// Writes the object of the entries in `entries` from `start`, by key, the last written
    /// of a repeated key winning.
    fn object(&mut self, start: usize) -> u32 {
        // By key, keeping the order of equal keys so the last written wins below. Keys whose
        // first 8 bytes differ are ordered by them (zero-padded, as a big-endian number).
        let mut entries = std::mem::take(&mut self.entries);
        let (text, escaped) = (self.text, &self.escaped);
        let key = |k: Key| key_in(text, escaped, k);
        let order = |x: &Entry, y: &Entry| {
            x.prefix
                .cmp(&y.prefix)
                .then_with(|| key(x.key).cmp(key(y.key)))
        };
        entries[start..].sort_by(order);
        let at = self.slots.len() as u32;
        let mut len = 0u32;
        let mut last: Option<&Entry> = None;
        for e in &entries[start..] {
            if last.is_some_and(|l| order(l, e).is_eq()) {
                let n = self.slots.len();
                self.slots[n - 1] = e.value;
            } else {
                self.slots.extend([e.key.at, e.key.len, e.value]);
                last = Some(e);
                len += 1;
            }
        }
        entries.truncate(start);
        self.entries = entries;
        self.push(Node::Object { at, len })
    }
}

/// Reads an object's key.
struct KeySeed<'b, 't>(&'b mut Builder<'t>);

impl<'de> DeserializeSeed<'de> for KeySeed<'_, '_> {
    type Value = Key;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Key, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_, '_> {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key, E> {
        Ok(self.0.key_of(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Key, E> {
        Ok(self.0.escaped_key(v.into()))
    }

    fn visit_string<E>(self, v: String) -> Result<Key, E> {
        Ok(self.0.escaped_key(v.into_boxed_str()))
    }
}

/// Reads one value into the tape, giving its node.
struct NodeSeed<'b, 't>(&'b mut Builder<'t>);

impl<'de> DeserializeSeed<'de> for NodeSeed<'_, '_> {
    type Value = u32;

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<u32, D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NodeSeed<'_, '_> {
    type Value = u32;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E>(self) -> Result<u32, E> {
        Ok(self.0.push(Node::Null))
    }

    fn visit_none<E>(self) -> Result<u32, E> {
        Ok(self.0.push(Node::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<u32, D::Error> {
        de.deserialize_any(self)
    }

    fn visit_bool<E>(self, v: bool) -> Result<u32, E> {
        Ok(self.0.push(Node::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<u32, E> {
        Ok(self.0.push(Node::Int(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<u32, E> {
        Ok(self.0.push(match i64::try_from(v) {
            Ok(i) => Node::Int(i),
            Err(_) => Node::Uint(v),
        }))
    }

    fn visit_f64<E>(self, v: f64) -> Result<u32, E> {
        // serde_json's own value holds no NaN or infinity (it makes them null); JSON text
        // cannot spell them.
        Ok(self.0.push(if v.is_finite() {
            Node::Double(v)
        } else {
            Node::Null
        }))
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<u32, E> {
        Ok(self.0.string(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<u32, E> {
        Ok(self.0.escaped(v.into()))
    }

    fn visit_string<E>(self, v: String) -> Result<u32, E> {
        Ok(self.0.escaped(v.into_boxed_str()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<u32, A::Error> {
        let b = self.0;
        let start = b.items.len();
        while let Some(item) = seq.next_element_seed(NodeSeed(b))? {
            b.items.push(item);
        }
        Ok(b.array(start))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u32, A::Error> {
        let b = self.0;
        let start = b.entries.len();
        while let Some(key) = map.next_key_seed(KeySeed(b))? {
            let value = map.next_value_seed(NodeSeed(b))?;
            b.entry(key, value);
        }
        Ok(b.object(start))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::value::{List, Map, Str, Value};

    fn tape(text: &str) -> JsonTape {
        let mut de = serde_json::Deserializer::from_str(text);
        let tape = JsonTape::read(text, &mut de).unwrap();
        de.end().unwrap();
        tape
    }

    /// The tape's value and the decoded value read the same in every way CEL can tell.
    #[test]
    fn a_tape_reads_as_the_decoded_value() {
        let docs = [
            r#"{"b": 1, "a": [true, null, -3, 18446744073709551615, 1.5, 2.0, "x\"y", "é"],
                "c": {"z": {}, "y": []}, "\u0041": "escaped key", "a": "last wins"}"#,
            r#"[]"#,
            r#"{}"#,
            r#""plain""#,
            r#"9223372036854775807"#,
            r#"-9223372036854775808"#,
            r#"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,
                "k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,
                "k3":"again"}"#,
        ];
        for doc in docs {
            let decoded: serde_json::Value = serde_json::from_str(doc).unwrap();
            let t = tape(doc);
            assert_eq!(t.root(), Value::from_json(&decoded), "{doc}");
            compare(&t.root(), &Value::from_json(&decoded), doc);
        }
    }

    /// Structure, order, sizes and lookups, recursively.
    fn compare(tape: &Value<'_>, decoded: &Value<'_>, doc: &str) {
        match (tape, decoded) {
            (Value::Map(a), Value::Map(b)) => {
                assert!(
                    matches!(a, Map::Tape(_)),
                    "{doc}: a tape object is read in place"
                );
                assert_eq!(a.len(), b.len(), "{doc}");
                let (ea, eb) = (a.entries(), b.entries());
                for ((ka, va), (kb, vb)) in ea.iter().zip(eb.iter()) {
                    assert_eq!(ka, kb, "{doc}: keys in the same order");
                    compare(va, vb, doc);
                    let Value::String(k) = ka else {
                        panic!("string keys")
                    };
                    compare(&a.get_str(k).unwrap(), vb, doc);
                    assert!(a.contains_str(k));
                }
                assert!(a.get_str("absent").is_none() && !a.contains_str("absent"));
                assert_eq!(a.get(&Value::Int(1)).unwrap(), None);
            }
            (Value::List(a), Value::List(b)) => {
                assert!(
                    matches!(a, List::Tape(_)),
                    "{doc}: a tape array is read in place"
                );
                assert_eq!(a.len(), b.len(), "{doc}");
                for (x, y) in a.iter().zip(b.iter()) {
                    compare(&x, &y, doc);
                }
                assert!(a.get(a.len()).is_none());
            }
            (a, b) => assert_eq!(a, b, "{doc}"),
        }
    }

    /// A layered object reads as the decoded object it stands for: the base's members where
    /// it names them, its own elsewhere (changed, added, or removed by leaving them out).
    #[test]
    fn a_layered_object_reads_as_the_object_it_stands_for() {
        use crate::value::Layered;
        let doc = r#"{"apiVersion": "v1", "metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"containers": [{"name": "c"}], "n": 18446744073709551615}, "status": {}}"#;
        let read = tape(doc);
        let Value::Map(base) = read.root() else {
            panic!("an object")
        };
        // `metadata` changed, `extra` added, `status` removed; `apiVersion` and `spec` read
        // from the base (their own values are placeholders).
        let members = serde_json::json!({"apiVersion": null, "spec": null, "extra": [1],
            "metadata": {"name": "a", "labels": {"x": "2"}}});
        let serde_json::Value::Object(members) = &members else {
            unreachable!()
        };
        let from_base = ["apiVersion".to_string(), "spec".to_string()];
        let layered = Value::Map(Map::Layered(Arc::new(Layered::new(
            base, members, &from_base,
        ))));
        let want = serde_json::json!({"apiVersion": "v1", "extra": [1],
            "metadata": {"name": "a", "labels": {"x": "2"}},
            "spec": {"containers": [{"name": "c"}], "n": 18446744073709551615u64}});
        let decoded = Value::from_json(&want);
        assert_eq!(layered, decoded);
        assert_eq!(layered.to_json().unwrap(), decoded.to_json().unwrap());
        let (Value::Map(a), Value::Map(b)) = (&layered, &decoded) else {
            unreachable!()
        };
        assert_eq!(a.len(), b.len());
        assert_eq!(a.keys(), b.keys());
        assert_eq!(a.entries(), b.entries());
        for key in ["apiVersion", "extra", "metadata", "spec", "status"] {
            assert_eq!(a.get_str(key), b.get_str(key), "{key}");
            assert_eq!(a.contains_str(key), b.contains_str(key), "{key}");
        }
        assert_eq!(a.get(&Value::Int(1)).unwrap(), None);
    }

    /// `to_json` gives what serde_json decodes: numbers of each kind, escapes, repeated keys.
    #[test]
    fn to_json_gives_the_decoded_value() {
        let docs = [
            r#"{"b": 1, "a": [true, null, -3, 18446744073709551615, 1.5, 2.0, "x\"y", "é"],
                "c": {"z": {}, "y": []}, "\u0041": "escaped key", "a": "last wins"}"#,
            r#"[-0, 0, -0.0, 1e2, 1E-2, -9223372036854775808, -9223372036854775809,
                9223372036854775807, 9223372036854775808, 123456789012345678901234567890]"#,
            r#"[[[[{"deep": [[[]]]}]]]]"#,
            r#""plain""#,
            r#"null"#,
            r#"{}"#,
        ];
        for doc in docs {
            let decoded: serde_json::Value = serde_json::from_str(doc).unwrap();
            let converted = tape(doc).to_json();
            assert_eq!(converted, decoded, "{doc}");
            // The same number kinds, not only equal values.
            assert_eq!(converted.to_string(), decoded.to_string(), "{doc}");
        }
        assert!(tape("null").is_null() && !tape("{}").is_null());
    }

    /// A node's value alone converts as the same part of the decoded document does, also
    /// where a duplicate key left earlier nodes unused.
    #[test]
    fn a_members_to_json_gives_the_decoded_member() {
        let doc = r#"{"a": [1, {"x": 2}], "b": {"c": [[], {"d": null}], "e": 18446744073709551615},
            "f": "s", "a": {"again": [true]}, "g": {}}"#;
        let decoded: serde_json::Value = serde_json::from_str(doc).unwrap();
        let read = tape(doc);
        for key in ["a", "b", "f", "g"] {
            let member = read.root_node().get(key).unwrap().to_json();
            assert_eq!(member.to_string(), decoded[key].to_string(), "{key}");
        }
        let c = read.root_node().get("b").unwrap().get("c").unwrap();
        assert_eq!(c.to_json(), decoded["b"]["c"]);
    }

    /// A member of a larger document, read in the document's pass, shares its text.
    #[test]
    fn a_member_is_read_in_place_of_the_document() {
        use serde::de::IgnoredAny;
        let doc: Arc<str> =
            Arc::from(r#"{"skip": [1, 2], "member": {"k": "v", "n": 18446744073709551615}}"#);
        let mut de = serde_json::Deserializer::from_str(&doc);
        struct Member<'t>(&'t Arc<str>);
        impl<'de> Visitor<'de> for Member<'de> {
            type Value = Option<JsonTape>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "member" {
                        out = Some(map.next_value_seed(MemberSeed(self.0))?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(out)
            }
        }
        struct MemberSeed<'t>(&'t Arc<str>);
        impl<'de> DeserializeSeed<'de> for MemberSeed<'de> {
            type Value = JsonTape;
            fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<JsonTape, D::Error> {
                JsonTape::read_in(self.0, de)
            }
        }
        let t = de
            .deserialize_map(Member(&doc))
            .unwrap()
            .expect("the member");
        assert!(Arc::ptr_eq(&t.text, &doc), "shared, not copied");
        let member = serde_json::json!({"k": "v", "n": 18446744073709551615u64});
        assert_eq!(t.to_json(), member);
        assert_eq!(t.root(), Value::from_json(&member));
        let Value::Map(m) = t.root() else {
            panic!("an object")
        };
        assert_eq!(m.get_str("k"), Some(Value::String(Str::Borrowed("v"))));
    }

    #[test]
    fn strings_without_escapes_are_ranges_of_the_text() {
        let t = tape(r#"{"plain": "text", "esc\"aped": "a\nb"}"#);
        assert_eq!(
            t.escaped.len(),
            2,
            "only the escaped key and value are copied"
        );
        let Value::Map(m) = t.root() else {
            panic!("an object")
        };
        assert_eq!(
            m.get_str("plain"),
            Some(Value::String(Str::Borrowed("text")))
        );
        assert_eq!(
            m.get_str("esc\"aped"),
            Some(Value::String(Str::Borrowed("a\nb")))
        );
    }

    #[test]
    fn errors_are_those_of_decoding_the_text() {
        for text in ["1e400", "[1,", "\"\\ud800\"", "{\"a\" 1}", "[-]"] {
            let mut de = serde_json::Deserializer::from_str(text);
            let err = JsonTape::read(text, &mut de).expect_err(text);
            let decoding = serde_json::from_str::<serde_json::Value>(text).expect_err(text);
            assert_eq!(err.to_string(), decoding.to_string(), "{text}");
        }
    }

    /// Expressions give the same results and the same errors over a tape as over the decoded
    /// value.
    #[test]
    fn cel_reads_a_tape_as_it_reads_the_decoded_value() {
        use crate::{Activation, Budget, Env, Type};
        let doc = r#"{"kind": "Pod", "metadata": {"name": "web", "labels": {"b": "2", "a": "1", "a": "again"},
            "annotations": {}}, "spec": {"replicas": 3, "ratio": 0.5, "big": 18446744073709551615,
            "containers": [{"name": "app", "image": "registry.example/app:1", "ports": [{"containerPort": 80}]},
                           {"name": "side\u0063ar", "image": "docker.io/side", "env": null}]}}"#;
        let expressions = [
            "object.spec.containers.all(c, c.image.startsWith('registry.'))",
            "object.spec.containers.exists(c, c.name == 'sidecar')",
            "object.spec.containers.map(c, c.name)",
            "object.spec.containers[1].env",
            "object.spec.containers[2]",
            "object.metadata.labels",
            "object.metadata.labels.map(k, k + '=' + object.metadata.labels[k])",
            "object.metadata.labels.all(k, v, v != '')",
            "size(object.metadata.labels) + size(object.spec.containers)",
            "object.spec.nope.deeper",
            "object.spec.replicas.nope",
            "has(object.spec.replicas) && !has(object.spec.nope)",
            "object.spec.replicas * 2 + int(object.spec.ratio * 10.0)",
            "object.spec.big",
            "object.metadata.?labels.?a.orValue('none')",
            "object.metadata.annotations == {} && object.spec.containers[0].ports == [{'containerPort': 80}]",
            "object == object && [object.spec] == [object.spec]",
            "{object.kind: object.metadata.name}",
            "object.spec.containers.filter(c, 'ports' in c).size()",
            "object['spec']['containers'][0]['ports'][0].containerPort",
            "object.spec.containers[0][1]",
            "1 in object.metadata.labels",
            "string(object.spec.replicas) + object.kind",
        ];
        let env = Env::kubernetes().variable("object", Type::Dyn).build();
        let decoded: serde_json::Value = serde_json::from_str(doc).unwrap();
        let t = tape(doc);
        for e in expressions {
            let program = env.compile(e).unwrap_or_else(|err| panic!("{e}: {err:?}"));
            let run = |object: Value<'_>| {
                let mut act = Activation::new();
                act.bind("object", object);
                let mut budget = Budget::new(1_000_000, 10_000_000);
                let out = program
                    .eval(&act, &mut budget)
                    .map(|v| (v.type_name().to_string(), format!("{:?}", v.to_json())))
                    .map_err(|err| format!("{err:?}"));
                (out, budget)
            };
            let (on_tape, tape_budget) = run(t.root());
            let (on_value, value_budget) = run(Value::from_json(&decoded));
            assert_eq!(on_tape, on_value, "{e}");
            assert_eq!(
                format!("{tape_budget:?}"),
                format!("{value_budget:?}"),
                "{e}: cost"
            );
        }
    }
}
