//! The object a run mutates: the request's object with only the root members that patches
//! reach decoded into a `serde_json::Value`. A member is decoded before a patch writes below it
//! or the work after a patch reads it; until then it stands in the value as a `null` and CEL
//! reads it where the request's object has it (its tape, read in place), through a
//! [`Layered`] object. Mutations that write `metadata` alone leave the rest of the object (a
//! Pod's `spec`, most of its text) undecoded: never built, copied or dropped.

use std::sync::Arc;

use celgate_cel::value::{Layered, Map};
use serde_json::Value;

use super::typed::{Ty, may_find_unkeyed};

/// The run's object (see the module documentation).
pub(super) struct RunObject<'r> {
    /// The root's members, those named in `unread` as `null`.
    value: Value,
    /// The request's object, where the members not decoded are read from.
    received: Map<'r>,
    /// The members not decoded, sorted.
    unread: Vec<String>,
}

impl<'r> RunObject<'r> {
    /// The object `received` (the request's, as CEL reads it), nothing decoded; `None` unless it
    /// is a JSON object.
    pub(super) fn of(received: celgate_cel::Value<'r>) -> Option<Self> {
        let celgate_cel::Value::Map(received @ (Map::Json(_) | Map::Tape(_))) = received else {
            return None;
        };
        let mut unread = Vec::with_capacity(received.len());
        received.find_map(|key, _| {
            if let celgate_cel::Value::String(key) = key {
                unread.push(key.to_string());
            }
            None::<()>
        });
        let value = Value::Object(unread.iter().map(|k| (k.clone(), Value::Null)).collect());
        Some(RunObject {
            value,
            received,
            unread,
        })
    }

    /// An object decoded whole.
    pub(super) fn decoded(value: Value) -> Self {
        RunObject {
            value,
            received: Map::Owned(Arc::default()),
            unread: Vec::new(),
        }
    }

    /// The object as CEL reads it.
    pub(super) fn cel(&self) -> celgate_cel::Value<'_> {
        match &self.value {
            Value::Object(members) if !self.unread.is_empty() => {
                celgate_cel::Value::Map(Map::Layered(Arc::new(Layered::new(
                    self.received.clone(),
                    members,
                    &self.unread,
                ))))
            }
            value => celgate_cel::Value::from_json(value),
        }
    }

    /// The object: exact in the members decoded (those the `decode` calls named).
    pub(super) fn value(&self) -> &Value {
        &self.value
    }

    /// The object, to change where decoded.
    pub(super) fn value_mut(&mut self) -> &mut Value {
        &mut self.value
    }

    /// Decodes the members named `keys`.
    pub(super) fn decode<'k>(&mut self, keys: impl IntoIterator<Item = &'k str>) {
        for key in keys {
            if let Ok(i) = self.unread.binary_search_by(|k| k.as_str().cmp(key)) {
                let key = self.unread.remove(i);
                self.load(key);
            }
        }
    }

    /// Decodes the members JSON Pointers lead into, as the patch library reads them (all of
    /// them for a pointer at the root, or one not starting with `/`).
    pub(super) fn decode_below<'p>(&mut self, pointers: impl IntoIterator<Item = &'p str>) {
        for pointer in pointers {
            let Some(rest) = pointer.strip_prefix('/') else {
                return self.decode_all();
            };
            let first = rest.split('/').next().unwrap_or_default();
            self.decode([&*super::json_patch::decode(first)]);
        }
    }

    /// Decodes every member if one not decoded may hold a list item server-side apply cannot
    /// key, at `root` (the kind's schema): an apply configuration's check of the object as
    /// received looks for those in the whole object.
    pub(super) fn decode_where_unkeyed(&mut self, root: &Ty<'_>) {
        let Some(map) = root.atom().map else {
            return self.decode_all();
        };
        let received = &self.received;
        let unkeyed = self.unread.iter().any(|key| {
            let member = received.get_str(key);
            (map.entry(key)).is_some_and(|t| member.is_some_and(|v| may_find_unkeyed(&t, &v, 1)))
        });
        if unkeyed {
            self.decode_all();
        }
    }

    /// Decodes every member.
    pub(super) fn decode_all(&mut self) {
        for key in std::mem::take(&mut self.unread) {
            self.load(key);
        }
    }

    /// Sets member `key` (taken out of `unread`) to the request's value.
    fn load(&mut self, key: String) {
        let decoded = match &self.received {
            Map::Json(m) => m.get(&key).cloned(),
            Map::Tape(node) => node.get(&key).map(|n| n.to_json()),
            _ => None,
        };
        if let (Value::Object(members), Some(decoded)) = (&mut self.value, decoded) {
            members.insert(key, decoded);
        }
    }
}
