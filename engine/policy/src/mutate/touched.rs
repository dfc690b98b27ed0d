//! The object's top-level members that patches write, so that the work after a patch looks at
//! those members alone: an invocation keeps them as it found them (to tell whether it changed
//! the object, or to undo a patch that failed half-way), and the response's patch is the diff
//! of the members the run wrote.

use serde_json::Value;

/// Where a patch writes in the object: some of its top-level members, or anything (a patch
/// at the root, or an object that is not a JSON object).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Places {
    /// The whole object.
    All,
    /// These top-level members (unescaped names, each once).
    Members(Vec<String>),
}

impl Default for Places {
    fn default() -> Self {
        Places::Members(Vec::new())
    }
}

impl Places {
    /// The places of these members.
    pub(super) fn members<'k>(keys: impl IntoIterator<Item = &'k str>) -> Self {
        let mut places = Places::default();
        for key in keys {
            places.add(key);
        }
        places
    }

    /// The top-level members JSON Pointers write at, as the patch library reads them (the
    /// token after the first `/`, unescaped); the root, or a pointer not starting with `/`,
    /// is all of the object.
    pub(super) fn of_pointers<'p>(pointers: impl IntoIterator<Item = &'p str>) -> Self {
        let mut places = Places::default();
        for pointer in pointers {
            match pointer.strip_prefix('/') {
                Some(rest) => {
                    let token = rest.split('/').next().unwrap_or_default();
                    places.add(&super::json_patch::decode(token));
                }
                None => return Places::All,
            }
        }
        places
    }

    fn add(&mut self, key: &str) {
        if let Places::Members(keys) = self
            && !keys.iter().any(|k| k == key)
        {
            keys.push(key.to_string());
        }
    }

    /// Adds the places of `other`.
    pub(super) fn join(&mut self, other: &Places) {
        match other {
            Places::All => *self = Places::All,
            Places::Members(keys) => {
                for key in keys {
                    self.add(key);
                }
            }
        }
    }
}

/// What a run keeps of the places patches write, told before each write.
#[derive(Debug, Default)]
pub(super) struct Writes {
    /// Every place written in the run.
    pub(super) run: Places,
    /// The places the current invocation wrote, as it found them, when it is tracked.
    pub(super) invocation: Option<Saved>,
}

impl Writes {
    /// `places` of `object` are about to be written.
    pub(super) fn before(&mut self, object: &Value, places: &Places) {
        self.run.join(places);
        if let Some(saved) = &mut self.invocation {
            saved.keep(object, places);
        }
    }
}

/// Places of the object as they were at some point: the whole object, or some of its members
/// (`None`: the member was absent).
#[derive(Clone, Debug, Default)]
pub(super) struct Saved {
    whole: Option<Value>,
    members: Vec<(String, Option<Value>)>,
}

impl Saved {
    /// `places` of `object` as they are now.
    pub(super) fn new(object: &Value, places: &Places) -> Self {
        let mut saved = Saved::default();
        saved.keep(object, places);
        saved
    }

    /// Also keeps `places` of `object` as they are now, where not kept already: a place kept
    /// earlier stays as it was then. Call it before every write, with the write's places.
    pub(super) fn keep(&mut self, object: &Value, places: &Places) {
        if self.whole.is_some() {
            return;
        }
        match places {
            Places::Members(keys) if object.is_object() => {
                for key in keys {
                    if !self.members.iter().any(|(k, _)| k == key) {
                        self.members.push((key.clone(), object.get(key).cloned()));
                    }
                }
            }
            // The whole object as it was: now, with the members kept earlier as they were.
            _ => {
                let mut whole = object.clone();
                restore(&mut whole, std::mem::take(&mut self.members));
                self.whole = Some(whole);
            }
        }
    }

    /// Whether `object` differs from what was kept (outside the kept places it is taken to be
    /// as it was: only the kept places were written).
    pub(super) fn differs(&self, object: &Value) -> bool {
        match &self.whole {
            Some(whole) => whole != object,
            None => self
                .members
                .iter()
                .any(|(key, kept)| object.get(key) != kept.as_ref()),
        }
    }

    /// Puts the kept places back into `object`.
    pub(super) fn restore(self, object: &mut Value) {
        match self.whole {
            Some(whole) => *object = whole,
            None => restore(object, self.members),
        }
    }
}

fn restore(object: &mut Value, members: Vec<(String, Option<Value>)>) {
    let Value::Object(map) = object else {
        return;
    };
    for (key, kept) in members {
        match kept {
            Some(value) => {
                map.insert(key, value);
            }
            None => {
                map.remove(&key);
            }
        }
    }
}

/// The RFC 6902 operations from `from` to `to`, when they differ, where `to` is `from` with
/// `written` written: the same operations as a diff of the whole objects, computed over the
/// written members alone.
pub(super) fn patch(from: &Value, to: &Value, written: &Places) -> Option<Vec<Value>> {
    let (Places::Members(keys), Value::Object(f), Value::Object(t)) = (written, from, to) else {
        return (from != to).then(|| whole_diff(from, to));
    };
    let mut keys: Vec<&str> = keys
        .iter()
        .map(String::as_str)
        .filter(|k| f.get(*k) != t.get(*k))
        .collect();
    if keys.is_empty() {
        return None;
    }
    // A diff of the whole objects: each member of `to` in key order (added, or diffed with
    // the old one), then each member `to` no longer has, in key order.
    keys.sort_unstable();
    let mut ops = Vec::new();
    for &key in &keys {
        let Some(new) = t.get(key) else { continue };
        let at = format!("/{}", escape(key));
        match f.get(key) {
            None => ops.push(serde_json::json!({"op": "add", "path": at, "value": new})),
            Some(old) => {
                for mut op in whole_diff(old, new) {
                    if let Some(Value::String(path)) = op.get_mut("path") {
                        path.insert_str(0, &at);
                    }
                    ops.push(op);
                }
            }
        }
    }
    for &key in &keys {
        if !t.contains_key(key) {
            let at = format!("/{}", escape(key));
            ops.push(serde_json::json!({"op": "remove", "path": at}));
        }
    }
    Some(ops)
}

/// The json-patch crate's diff of two values, as JSON.
fn whole_diff(from: &Value, to: &Value) -> Vec<Value> {
    let patch = ::json_patch::diff(from, to);
    match serde_json::to_value(&patch) {
        Ok(Value::Array(ops)) => ops,
        _ => Vec::new(),
    }
}

/// A member name as a JSON Pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn pointers_give_their_first_token_unescaped_and_the_root_is_all() {
        assert_eq!(
            Places::of_pointers(["/metadata/labels/a", "/spec", "/a~1b~0c/x", "/metadata"]),
            Places::members(["metadata", "spec", "a/b~c"])
        );
        assert_eq!(Places::of_pointers(["/spec", ""]), Places::All);
        assert_eq!(Places::of_pointers(["spec"]), Places::All);
        // `/` is the member named "".
        assert_eq!(Places::of_pointers(["/"]), Places::members([""]));
    }

    #[test]
    fn kept_members_stay_as_first_kept_and_are_put_back() {
        let mut object = json!({"a": 1, "b": {"c": 2}, "d": 3});
        let before = object.clone();
        let mut saved = Saved::new(&object, &Places::members(["b", "x"]));
        object["b"]["c"] = json!(5);
        object["x"] = json!(true);
        // Kept again after the writes: the first copy stays.
        saved.keep(&object, &Places::members(["b"]));
        assert!(saved.differs(&object));
        saved.restore(&mut object);
        assert_eq!(object, before);
    }

    #[test]
    fn a_write_undone_leaves_no_difference() {
        let mut object = json!({"metadata": {"labels": {"a": "1"}}, "spec": {}});
        let saved = Saved::new(&object, &Places::members(["metadata"]));
        object["metadata"]["labels"]["b"] = json!("2");
        assert!(saved.differs(&object));
        object["metadata"]["labels"].as_object_mut().unwrap().remove("b");
        assert!(!saved.differs(&object));
    }

    #[test]
    fn keeping_all_after_members_gives_the_whole_object_as_it_was() {
        let mut object = json!({"a": 1, "b": 2});
        let before = object.clone();
        let mut saved = Saved::new(&object, &Places::members(["a", "n"]));
        object["a"] = json!(10);
        object["n"] = json!("new");
        saved.keep(&object, &Places::All);
        object = json!(["replaced"]);
        assert!(saved.differs(&object));
        saved.restore(&mut object);
        assert_eq!(object, before);
    }

    #[test]
    fn the_patch_of_the_written_members_is_the_whole_diff() {
        let from = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "1", "gone": "x"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "a/b": 1, "old~": {"k": true}});
        let cases = [
            (json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "labels": {"a": "2", "new": "y"}, "annotations": {"z": "1"}},
                "spec": {"containers": [{"name": "c", "image": "i"}, {"name": "d"}]},
                "a/b": 2, "status": {"phase": "Running"}}),
             Places::members(["metadata", "spec", "a/b", "old~", "status", "unwritten"])),
            (from.clone(), Places::members(["metadata"])),
            (json!({"x": 1}), Places::All),
            (json!([1]), Places::members(["metadata"])),
        ];
        for (to, written) in &cases {
            let whole = (from != *to).then(|| whole_diff(&from, to));
            assert_eq!(patch(&from, to, written), whole, "to {to}");
        }
        // Every kind of operation is there: add, replace, remove, nested and escaped.
        let (to, written) = &cases[0];
        let ops = patch(&from, to, written).unwrap();
        let text = serde_json::to_string(&ops).unwrap();
        for part in [
            r#"{"op":"add","path":"/metadata/annotations","value":{"z":"1"}}"#,
            r#"{"op":"replace","path":"/metadata/labels/a","value":"2"}"#,
            r#"{"op":"remove","path":"/metadata/labels/gone"}"#,
            r#"{"op":"add","path":"/spec/containers/1","value":{"name":"d"}}"#,
            r#"{"op":"replace","path":"/a~1b","value":2}"#,
            r#"{"op":"remove","path":"/old~0"}"#,
            r#"{"op":"add","path":"/status","value":{"phase":"Running"}}"#,
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
    }
}
