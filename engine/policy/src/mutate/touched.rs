//! The places of the object that patches write, kept as they were before the first write, so
//! that the work after a patch looks at those places alone: an invocation keeps them as it
//! found them (to tell whether it changed the object, or to undo a patch that failed
//! half-way), the run as the request had them (for the response's patch) and as each policy
//! that may run again found them (to tell whether it must).
//!
//! A place is a path of member names from the root. Read against an object, it ends at the
//! first value on the way that is not a JSON object (a list is kept, compared and diffed
//! whole: an item added or removed moves the others) or at the first absent member.

use serde_json::Value;

use super::typed::Within;

/// A path of member names (unescaped) from the root; empty: the whole object.
type Path = Vec<String>;

/// Where patches write in the object (a place may be named twice: keeping it again is a
/// no-op).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Places(Vec<Path>);

impl Places {
    /// The places of these paths.
    pub(super) fn paths(paths: impl IntoIterator<Item = Path>) -> Self {
        Places(paths.into_iter().collect())
    }

    /// The paths of the places.
    pub(super) fn into_paths(self) -> Vec<Path> {
        self.0
    }

    /// The places JSON Pointers write at, as the patch library reads them (tokens after the
    /// first `/`, unescaped); a pointer not starting with `/` is read as the root.
    pub(super) fn of_pointers<'p>(pointers: impl IntoIterator<Item = &'p str>) -> Self {
        Places::paths(pointers.into_iter().map(|pointer| {
            match pointer.strip_prefix('/') {
                Some(rest) => rest
                    .split('/')
                    .map(|t| super::json_patch::decode(t).into_owned())
                    .collect(),
                None => Vec::new(),
            }
        }))
    }
}

/// What a run keeps of the places patches write, told before each write.
#[derive(Debug, Default)]
pub(super) struct Writes {
    /// Every place written in the run, as the request had it.
    pub(super) original: Saved,
    /// The places the current invocation wrote, as it found them, when it is tracked.
    pub(super) invocation: Option<Saved>,
    /// The places written since each `IfNeeded` policy was first given the object, as it
    /// found them (in the order the policies ran).
    pub(super) since: Vec<Saved>,
    /// Every place written in the run, in order, for the two looks at a built-in kind's object
    /// that need only what was written since the last one (the request's object, encoded from
    /// the kind's Go type, needs neither).
    log: Vec<Path>,
    /// Where in `log` the places written since the object was last looked at for a value its
    /// Go type cannot hold (`go_object::decode_error`) start.
    decoded: usize,
    /// Where in `log` the places written since the object's integers were last cut to their
    /// fields' widths (`go_object::narrow_ints`) start.
    narrowed: usize,
}

impl Writes {
    /// `places` of `object` are about to be written.
    pub(super) fn before(&mut self, object: &Value, places: Places) {
        self.original.keep(object, &places);
        for saved in self.invocation.iter_mut().chain(&mut self.since) {
            saved.keep(object, &places);
        }
        self.log.extend(places.0);
    }

    /// Place `path`, where the object holds `value` (none: absent, the path ending at the
    /// first absent member), is about to be written with what needs neither look at a
    /// built-in kind's object: strings where the kind declares strings (`granular`). It is
    /// kept, not logged.
    pub(super) fn before_strings<K: AsRef<str>>(&mut self, path: &[K], value: Option<&Value>) {
        keep_at(&mut self.original.0, path, value);
        for saved in self.invocation.iter_mut().chain(&mut self.since) {
            keep_at(&mut saved.0, path, value);
        }
    }

    /// The places written since the object was last looked at for a value its Go type cannot
    /// hold, which the caller looks at now.
    pub(super) fn since_decoded(&mut self) -> &[Path] {
        let from = std::mem::replace(&mut self.decoded, self.log.len());
        &self.log[from..]
    }

    /// The places written since the object's integers were last cut to their fields' widths,
    /// which the caller cuts now.
    pub(super) fn since_narrowed(&mut self) -> Within<'_> {
        let from = std::mem::replace(&mut self.narrowed, self.log.len());
        Within::of_paths(&self.log[from..])
    }
}

/// Places of the object as they were at some point, none of them inside another: a tree of
/// member names whose leaves are the kept places, so that a place is found (or found to lie
/// inside a kept one) one member name at a time.
#[derive(Clone, Debug)]
pub(super) struct Saved(Kept);

/// A node of the tree of kept places.
#[derive(Clone, Debug)]
enum Kept {
    /// A kept place: its value as it was (`None`: absent).
    Place(Option<Value>),
    /// Places kept below these members (none: nothing kept).
    Below(Members),
}

/// The members of a node, sorted by name: a node has a few (`metadata`, then `labels` and
/// `annotations`, then the keys written), so a sorted list finds one by binary search and
/// allocates once, where a B-tree allocates a node of eleven.
#[derive(Clone, Debug, Default)]
struct Members(Vec<(String, Kept)>);

impl Members {
    /// The members, in name order.
    fn iter(&self) -> impl Iterator<Item = &(String, Kept)> {
        self.0.iter()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Member `key`, or where it goes.
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(key))
    }

    /// One member, the only one.
    fn one(key: &str, kept: Kept) -> Self {
        Members(vec![(key.to_string(), kept)])
    }
}

impl IntoIterator for Members {
    type Item = (String, Kept);
    type IntoIter = std::vec::IntoIter<(String, Kept)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl Default for Saved {
    fn default() -> Self {
        Saved(Kept::Below(Members::default()))
    }
}

impl Saved {
    /// `places` of `object` as they are now.
    pub(super) fn new(object: &Value, places: &Places) -> Self {
        let mut saved = Saved::default();
        saved.keep(object, places);
        saved
    }

    /// Also keeps `places` of `object` as they are now, where not kept already: a place kept
    /// earlier stays as it was then, also inside a larger place kept now. Call it before
    /// every write, with the write's places.
    pub(super) fn keep(&mut self, object: &Value, places: &Places) {
        for path in &places.0 {
            let (place, value) = resolve(object, path);
            keep_at(&mut self.0, place, value);
        }
    }

    /// Whether `object` differs from what was kept (outside the kept places it is taken to be
    /// as it was: only they were written).
    pub(super) fn differs(&self, object: &Value) -> bool {
        differs_at(&self.0, Some(object))
    }

    /// Whether no place is kept.
    #[cfg(test)]
    pub(super) fn is_empty(&self) -> bool {
        matches!(&self.0, Kept::Below(members) if members.is_empty())
    }

    /// Puts the kept places back into `object`.
    pub(super) fn restore(self, object: &mut Value) {
        match self.0 {
            Kept::Place(kept) => *object = kept.unwrap_or(Value::Null),
            Kept::Below(members) => put_back(object, members),
        }
    }

    /// The RFC 6902 operations from the object as kept to `object`, when they differ: the
    /// operations a diff of the whole objects gives, where only the kept places were written.
    pub(super) fn patch(&self, object: &Value) -> Option<JsonPatchText> {
        let mut ops = JsonPatchText::default();
        diff_kept(Some(object), &self.0, &mut String::new(), &mut ops);
        (!ops.is_empty()).then(|| ops.finish())
    }
}

/// A JSON patch (RFC 6902) as JSON text: its list of operations as serde_json writes it
/// (members in key order, no space); empty when there is no operation. Written as the diff
/// finds the operations, without building them as values first.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct JsonPatchText(Vec<u8>);

impl JsonPatchText {
    /// The text of these operations (empty when there are none).
    pub fn from_ops(ops: &[Value]) -> Self {
        let mut text = JsonPatchText::default();
        for op in ops {
            text.op_value(op);
        }
        text.finish()
    }

    /// Whether there is no operation.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The JSON text (empty when there is no operation).
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The operations, read back as values.
    pub fn ops(&self) -> Vec<Value> {
        if self.0.is_empty() {
            return Vec::new();
        }
        serde_json::from_slice(&self.0).unwrap_or_default()
    }

    /// Starts the next operation's object.
    fn next(&mut self) {
        self.0.push(if self.0.is_empty() { b'[' } else { b',' });
    }

    /// Appends an operation `op` at `path` with `value`, if any (the members in key order).
    fn op(&mut self, op: &str, path: &str, value: Option<&Value>) {
        self.next();
        self.0.extend_from_slice(b"{\"op\":\"");
        self.0.extend_from_slice(op.as_bytes());
        self.0.extend_from_slice(b"\",\"path\":");
        self.string(path);
        if let Some(value) = value {
            self.0.extend_from_slice(b",\"value\":");
            match value {
                Value::String(s) => self.string(s),
                // Writing JSON into memory cannot fail.
                value => drop(serde_json::to_writer(&mut self.0, value)),
            }
        }
        self.0.push(b'}');
    }

    /// Appends `s` as a JSON string: copied whole when no byte of it needs an escape (a
    /// pointer, a label's or an annotation's value), else as serde_json escapes it. serde_json
    /// looks each byte up as it copies (1.8% of a realistic mutating review's CPU); the check
    /// has no early exit, so it is vectorised.
    fn string(&mut self, s: &str) {
        let escapes = (s.bytes()).fold(false, |e, b| e | (b < 0x20) | (b == b'"') | (b == b'\\'));
        if escapes {
            let _ = serde_json::to_writer(&mut self.0, s);
        } else {
            self.0.reserve(s.len() + 2);
            self.0.push(b'"');
            self.0.extend_from_slice(s.as_bytes());
            self.0.push(b'"');
        }
    }

    /// Appends an operation given as a value.
    fn op_value(&mut self, op: &Value) {
        self.next();
        let _ = serde_json::to_writer(&mut self.0, op);
    }

    /// Closes the list, when there is an operation.
    fn finish(mut self) -> Self {
        if !self.0.is_empty() {
            self.0.push(b']');
        }
        self
    }
}

impl std::fmt::Debug for JsonPatchText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

/// The place `path` names in `object`: the path up to the first value that is not an object
/// or the first absent member, and the value there.
fn resolve<'v, 'p, K: AsRef<str>>(
    object: &'v Value,
    path: &'p [K],
) -> (&'p [K], Option<&'v Value>) {
    let mut value = object;
    for (i, key) in path.iter().enumerate() {
        let Value::Object(map) = value else {
            return (&path[..i], Some(value));
        };
        match map.get(key.as_ref()) {
            Some(v) => value = v,
            None => return (&path[..=i], None),
        }
    }
    (path, Some(value))
}

/// Keeps `place` (relative to `node`) with `value`, unless it lies inside a kept place; the
/// places kept inside it go back into its value.
fn keep_at<K: AsRef<str>>(node: &mut Kept, place: &[K], value: Option<&Value>) {
    let Kept::Below(members) = node else {
        return;
    };
    match place.split_first() {
        Some((key, rest)) => match members.find(key.as_ref()) {
            Ok(i) => keep_at(&mut members.0[i].1, rest, value),
            Err(i) => {
                let mut fresh = Kept::Place(value.cloned());
                for key in rest.iter().rev() {
                    fresh = Kept::Below(Members::one(key.as_ref(), fresh));
                }
                members.0.insert(i, (key.as_ref().to_string(), fresh));
            }
        },
        None => {
            let inner = std::mem::take(members);
            // A place absent now that holds places kept earlier was an object then (a patch
            // emptied it and the Go encoding left it out): they are put back into one.
            let mut value = match value {
                None if !inner.is_empty() => Some(Value::Object(serde_json::Map::new())),
                v => v.cloned(),
            };
            if let Some(value) = &mut value {
                put_back(value, inner);
            }
            *node = Kept::Place(value);
        }
    }
}

/// Whether `now` differs from the places kept below `kept`, read through objects only.
fn differs_at(kept: &Kept, now: Option<&Value>) -> bool {
    match kept {
        Kept::Place(old) => now != old.as_ref(),
        Kept::Below(members) => {
            let map = now.and_then(Value::as_object);
            members
                .iter()
                .any(|(key, kept)| differs_at(kept, map.and_then(|m| m.get(key))))
        }
    }
}

/// Sets the kept places below `members` in `object` (through objects only; an absent one
/// removes the member).
fn put_back(object: &mut Value, members: Members) {
    let Value::Object(map) = object else {
        return;
    };
    for (key, kept) in members {
        match kept {
            Kept::Place(Some(v)) => {
                map.insert(key, v);
            }
            Kept::Place(None) => {
                map.remove(&key);
            }
            Kept::Below(inner) => {
                if let Some(member) = map.get_mut(&key) {
                    put_back(member, inner);
                }
            }
        }
    }
}

/// Appends the diff, at pointer `at`, from the value as kept (the places below `kept`) to
/// `now`, in the order a diff of the whole values gives: each member of `now` in key order
/// (added, or diffed with the old one), then each member it no longer has, in key order.
/// Outside the kept places the value is as it was, so above them both are the same objects.
fn diff_kept(now: Option<&Value>, kept: &Kept, at: &mut String, ops: &mut JsonPatchText) {
    let members = match kept {
        Kept::Place(old) => {
            match (old, now) {
                (Some(old), Some(now)) => whole_diff(old, now, at, ops),
                (None, Some(now)) => {
                    ops.op("add", at, Some(now));
                }
                (Some(_), None) => {
                    ops.op("remove", at, None);
                }
                (None, None) => {}
            }
            return;
        }
        Kept::Below(members) => members,
    };
    // A place holding kept places was an object when they were kept: gone or replaced since
    // (a built-in kind's map emptied by a patch is left out by the Go encoding).
    let map = match now {
        Some(Value::Object(map)) => map,
        Some(other) => {
            ops.op("replace", at, Some(other));
            return;
        }
        None => {
            ops.op("remove", at, None);
            return;
        }
    };
    // Each kept member looked up once, for the two passes.
    let found: Vec<(&str, &Kept, Option<&Value>)> = (members.iter())
        .map(|(key, kept)| (key.as_str(), kept, map.get(key)))
        .collect();
    for removed in [false, true] {
        for &(key, kept, member) in &found {
            if member.is_none() != removed {
                continue;
            }
            let len = at.len();
            push_token(at, key);
            diff_kept(member, kept, at, ops);
            at.truncate(len);
        }
    }
}

/// Appends the json-patch crate's diff of two values, at pointer `at`.
fn whole_diff(from: &Value, to: &Value, at: &str, ops: &mut JsonPatchText) {
    if from == to {
        return;
    }
    let patch = ::json_patch::diff(from, to);
    if let Ok(Value::Array(diff)) = serde_json::to_value(&patch) {
        for mut op in diff {
            if let Some(Value::String(path)) = op.get_mut("path") {
                path.insert_str(0, at);
            }
            ops.op_value(&op);
        }
    }
}

/// Appends a member name to a JSON Pointer.
fn push_token(at: &mut String, key: &str) {
    at.push('/');
    // The text between the escaped bytes (ASCII, so at char boundaries) is copied whole.
    let mut start = 0;
    for (i, b) in key.bytes().enumerate() {
        let escaped = match b {
            b'~' => "~0",
            b'/' => "~1",
            _ => continue,
        };
        at.push_str(&key[start..i]);
        at.push_str(escaped);
        start = i + 1;
    }
    at.push_str(&key[start..]);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    fn path(p: &[&str]) -> Path {
        p.iter().map(|s| s.to_string()).collect()
    }

    /// The json-patch crate's diff of the whole values, written as serde_json writes its
    /// operations as values: what `patch` must give.
    fn whole(from: &Value, to: &Value) -> Option<JsonPatchText> {
        let ops = serde_json::to_value(::json_patch::diff(from, to)).unwrap();
        let ops = ops.as_array().unwrap();
        let text = JsonPatchText::from_ops(ops);
        (!ops.is_empty()).then(|| {
            assert_eq!(text.as_bytes(), serde_json::to_vec(ops).unwrap());
            text
        })
    }

    #[test]
    fn pointers_give_their_tokens_unescaped_and_the_root_is_all() {
        assert_eq!(
            Places::of_pointers(["/metadata/labels/a", "/a~1b~0c/x", "", "x"]),
            Places::paths([
                path(&["metadata", "labels", "a"]),
                path(&["a/b~c", "x"]),
                path(&[]),
                path(&[]),
            ])
        );
        // `/` is the member named "".
        assert_eq!(Places::of_pointers(["/"]), Places::paths([path(&[""])]));
    }

    #[test]
    fn a_place_ends_at_a_list_or_an_absent_member() {
        let object = json!({"spec": {"containers": [{"name": "a"}]}, "metadata": {}});
        let p = path(&["spec", "containers", "0", "image"]);
        let (place, value) = resolve(&object, &p);
        assert_eq!(place, &p[..2]);
        assert_eq!(value, Some(&json!([{"name": "a"}])));
        let p = path(&["metadata", "labels", "x"]);
        assert_eq!(resolve(&object, &p), (&p[..2], None));
    }

    #[test]
    fn kept_places_stay_as_first_kept_and_are_put_back() {
        let mut object = json!({"a": 1, "b": {"c": 2, "d": {"e": 3}}, "l": [1, 2]});
        let before = object.clone();
        let mut saved = Saved::new(
            &object,
            &Places::paths([path(&["b", "d", "e"]), path(&["x", "y"]), path(&["l", "0"])]),
        );
        object["b"]["d"]["e"] = json!(5);
        object["x"] = json!({"y": true});
        object["l"] = json!([0, 1, 2]);
        // Kept again after the writes, and a larger place holding one kept before: what was
        // kept first stays.
        saved.keep(
            &object,
            &Places::paths([path(&["b", "d", "e"]), path(&["b"])]),
        );
        object["b"]["c"] = json!(20);
        assert!(saved.differs(&object));
        saved.restore(&mut object);
        assert_eq!(object, before);
    }

    #[test]
    fn a_write_undone_leaves_no_difference() {
        let mut object = json!({"metadata": {"labels": {"a": "1"}}, "spec": {}});
        let saved = Saved::new(
            &object,
            &Places::paths([path(&["metadata", "labels", "b"])]),
        );
        object["metadata"]["labels"]["b"] = json!("2");
        assert!(saved.differs(&object));
        object["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("b");
        assert!(!saved.differs(&object));
    }

    #[test]
    fn keeping_the_root_after_members_gives_the_whole_object_as_it_was() {
        let mut object = json!({"a": {"b": 1}, "c": 2});
        let before = object.clone();
        let mut saved = Saved::new(&object, &Places::paths([path(&["a", "b"]), path(&["n"])]));
        object["a"]["b"] = json!(10);
        object["n"] = json!("new");
        saved.keep(&object, &Places::paths([path(&[])]));
        object = json!(["replaced"]);
        assert!(saved.differs(&object));
        saved.restore(&mut object);
        assert_eq!(object, before);
    }

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let strings = [
            "plain",
            "",
            "a/b~c",
            "q\"uote",
            "back\\slash",
            "new\nline",
            "\u{1}\u{1f}",
            "\u{7f}",
            "é ü 😀",
        ];
        for s in strings {
            let mut text = JsonPatchText::default();
            text.op("add", s, Some(&Value::String(s.into())));
            let want = JsonPatchText::from_ops(&[json!({"op": "add", "path": s, "value": s})]);
            assert_eq!(text.finish(), want, "{s:?}");
        }
    }

    #[test]
    fn the_patch_of_the_kept_places_is_the_whole_diff() {
        let from = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1", "gone": "x"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "a/b": 1, "old~": {"k": true}});
        let written = Places::paths([
            path(&["metadata", "labels", "a"]),
            path(&["metadata", "labels", "new"]),
            path(&["metadata", "labels", "gone"]),
            path(&["metadata", "annotations", "z"]),
            path(&["spec", "containers", "0", "image"]),
            path(&["spec", "containers", "1"]),
            path(&["a/b"]),
            path(&["old~"]),
            path(&["status"]),
            path(&["unwritten", "x"]),
        ]);
        let kept = Saved::new(&from, &written);
        let to = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "2", "new": "y"}, "annotations": {"z": "1"}},
            "spec": {"containers": [{"name": "c", "image": "j"}, {"name": "d"}]},
            "a/b": 2, "status": {"phase": "Running"}});
        let ops = kept.patch(&to);
        assert_eq!(ops, whole(&from, &to));
        assert_eq!(kept.patch(&from), None);
        // The root written: any object.
        let root = Saved::new(&from, &Places::paths([path(&[])]));
        for to in [json!({"x": 1}), json!([1]), from.clone()] {
            assert_eq!(root.patch(&to), whole(&from, &to), "to {to}");
        }
        // Every kind of operation is there: add, replace, remove, nested and escaped.
        let text = String::from_utf8(ops.unwrap().as_bytes().to_vec()).unwrap();
        for part in [
            r#"{"op":"add","path":"/metadata/annotations","value":{"z":"1"}}"#,
            r#"{"op":"replace","path":"/metadata/labels/a","value":"2"}"#,
            r#"{"op":"remove","path":"/metadata/labels/gone"}"#,
            r#"{"op":"replace","path":"/spec/containers/0/image","value":"j"}"#,
            r#"{"op":"add","path":"/spec/containers/1","value":{"name":"d"}}"#,
            r#"{"op":"replace","path":"/a~1b","value":2}"#,
            r#"{"op":"remove","path":"/old~0"}"#,
            r#"{"op":"add","path":"/status","value":{"phase":"Running"}}"#,
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
    }
}
