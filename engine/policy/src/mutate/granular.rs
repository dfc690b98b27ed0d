//! The mutation most policies make: strings set in granular structs and maps, by an apply
//! configuration (`Object{metadata: Object.metadata{labels: {'team': 'a'}}}`) or a JSON patch
//! (`add` at `/metadata/annotations/…`). Such a configuration fits the schema and sets nothing
//! atomic, and its merge only adds or replaces those strings, so it is recognised in one walk
//! and merged in another, with the outcome the general checks (`typed`) and merge (`merge`)
//! give it; after such a patch the object's Go type has nothing to refuse (`go_object`).

use std::borrow::Cow;

use serde_json::map::Entry;
use serde_json::{Map, Value};
use smallvec::SmallVec;

use super::json_patch::{Operation, decode};
use super::typed::{MapAtom, Ty};
use crate::schema::{AdditionalProperties, ApplyKind, Schema, SchemaRef};

/// Deepest configuration taken (deeper ones go the general way).
const MAX_DEPTH: usize = 32;

/// A place a merge writes (its path of member names) and the object's value there (none: the
/// member is absent). Paths are short (`metadata`, `labels`, a key) and a configuration writes
/// few places: both are held inline, not allocated.
pub(super) type Place<'o, 'c> = (SmallVec<[&'c str; 4]>, Option<&'o Value>);

/// The places of one configuration.
pub(super) type Places<'o, 'c> = SmallVec<[Place<'o, 'c>; 2]>;

/// The places a merge of `config` into `object` (which fits the schema, at `ty`, the kind's
/// root) writes, in the configuration's key order (each member the object lacks, each string
/// that differs), when the configuration is made only of non-empty granular structs and maps
/// whose members are declared, down to strings where the schema holds strings, and leaves
/// `apiVersion` and `kind` out (the general way sets them to the object's). Such a
/// configuration fits the schema and sets nothing atomic. `None` for any other, or when the
/// object holds something other than a JSON object (a null) where the configuration has a
/// struct or map: the general way takes those.
pub(super) fn plan<'o, 'c>(
    ty: &Ty,
    object: &'o Value,
    config: &'c Value,
) -> Option<Places<'o, 'c>> {
    let (Value::Object(target), Value::Object(members)) = (object, config) else {
        return None;
    };
    if members.contains_key("apiVersion") || members.contains_key("kind") {
        return None;
    }
    let mut places = Places::new();
    plan_at(ty, target, members, &mut SmallVec::new(), &mut places, 0).then_some(places)
}

fn plan_at<'o, 'c>(
    ty: &Ty,
    target: &'o Map<String, Value>,
    members: &'c Map<String, Value>,
    path: &mut SmallVec<[&'c str; 4]>,
    places: &mut Places<'o, 'c>,
    depth: usize,
) -> bool {
    let Some(map) = granular_map(ty, members, depth) else {
        return false;
    };
    for (key, item) in members {
        let Some(t) = map.entry(key) else {
            return false;
        };
        path.push(key);
        let fits = match (item, target.get(key)) {
            (Value::String(_), old) => {
                if old != Some(item) {
                    places.push((path.clone(), old));
                }
                holds_strings(&t)
            }
            (Value::Object(inner), Some(Value::Object(below))) => {
                plan_at(&t, below, inner, path, places, depth + 1)
            }
            (Value::Object(_), None) => {
                places.push((path.clone(), None));
                granular_at(&t, item, depth + 1)
            }
            _ => false,
        };
        path.pop();
        if !fits {
            return false;
        }
    }
    true
}

/// The map atom at `ty` when it is granular and `members` are not empty.
fn granular_map<'s>(
    ty: &Ty<'s>,
    members: &Map<String, Value>,
    depth: usize,
) -> Option<MapAtom<'s>> {
    let atom = ty.atom();
    match (atom.map, atom.scalar, atom.list) {
        (Some(map), None, None) if !map.atomic && !members.is_empty() && depth < MAX_DEPTH => {
            Some(map)
        }
        _ => None,
    }
}

/// Whether `ty` holds strings.
fn holds_strings(ty: &Ty) -> bool {
    matches!(ty, Ty::Node { schema, .. } if schema.apply_kind() == ApplyKind::String)
}

/// Whether `v`, at `ty`, is made only of non-empty granular structs and maps with declared
/// members, down to strings where the schema holds strings.
fn granular_at(ty: &Ty, v: &Value, depth: usize) -> bool {
    match v {
        Value::String(_) => holds_strings(ty),
        Value::Object(members) => granular_map(ty, members, depth).is_some_and(|map| {
            members.iter().all(|(key, item)| {
                map.entry(key)
                    .is_some_and(|t| granular_at(&t, item, depth + 1))
            })
        }),
        _ => false,
    }
}

/// Merges a configuration [`plan`] took into `object` (its places kept first): adds or
/// replaces what the plan found. Returns whether the object changed.
pub(super) fn perform(object: &mut Value, config: Value) -> bool {
    match (object, config) {
        (Value::Object(target), Value::Object(members)) => perform_at(target, members),
        _ => false,
    }
}

fn perform_at(target: &mut Map<String, Value>, members: Map<String, Value>) -> bool {
    let mut changed = false;
    for (key, item) in members {
        match (target.entry(key), item) {
            (Entry::Vacant(slot), item) => {
                slot.insert(item);
                changed = true;
            }
            (Entry::Occupied(mut old), Value::Object(inner)) => {
                if let Value::Object(below) = old.get_mut() {
                    changed |= perform_at(below, inner);
                }
            }
            (Entry::Occupied(mut old), item) => {
                if *old.get() != item {
                    old.insert(item);
                    changed = true;
                }
            }
        }
    }
    changed
}

/// Whether each of `paths` of `object` holds a string where `kind` declares one, reached
/// through JSON objects that are declared struct fields or map values: there the kind's Go
/// type decodes it, it is no unknown field, nothing on its way encodes as nothing, and the
/// object still fits the schema. False for a path to the root, to anything else, or through
/// a list.
pub(super) fn strings_at(kind: &Schema, object: &Value, paths: &[Vec<String>]) -> bool {
    paths.iter().all(|path| {
        member(kind, object, path).is_some_and(|(node, value)| {
            declares_string(node) && value.is_some_and(Value::is_string)
        })
    })
}

/// The place of a JSON patch that adds or replaces one string, as the patch library reads its
/// pointer (the tokens after the first `/`, unescaped), and the string.
pub(super) fn one_string(ops: &[Operation]) -> Option<(SmallVec<[Cow<'_, str>; 4]>, &str)> {
    let [op] = ops else {
        return None;
    };
    let (Some(Value::String(string)), "add" | "replace") = (&op.value, op.op.as_str()) else {
        return None;
    };
    let rest = op.path.strip_prefix('/')?;
    Some((rest.split('/').map(decode).collect(), string))
}

/// Where `path` of `object` is a member `kind` declares a string at, reached through JSON
/// objects that are declared struct fields or map values (as [`strings_at`]): the object's
/// value there (none: absent). Adding a string there leaves nothing for the looks at a
/// built-in kind's object to find.
pub(super) fn string_member<'o, K: AsRef<str>>(
    kind: &Schema,
    object: &'o Value,
    path: &[K],
) -> Option<Option<&'o Value>> {
    member(kind, object, path)
        .filter(|(node, _)| declares_string(*node))
        .map(|(_, value)| value)
}

/// Sets member `path` of `object`, whose parents are JSON objects ([`string_member`] found
/// it), to `string`.
pub(super) fn put_string<K: AsRef<str>>(object: &mut Value, path: &[K], string: &str) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut at = object;
    for key in parents {
        match at {
            Value::Object(members) => match members.get_mut(key.as_ref()) {
                Some(next) => at = next,
                None => return,
            },
            _ => return,
        }
    }
    if let Value::Object(members) = at {
        members.insert(last.as_ref().to_string(), Value::String(string.to_string()));
    }
}

/// Where `path` leads in `object` through JSON objects that are declared struct fields or map
/// values of `kind` (a node with both is left to the general checks): the last member's
/// schema and the object's value there (none: absent).
fn member<'s, 'o, K: AsRef<str>>(
    kind: &'s Schema,
    object: &'o Value,
    path: &[K],
) -> Option<(SchemaRef<'s>, Option<&'o Value>)> {
    let (last, parents) = path.split_last()?;
    let (mut node, mut value) = (kind.as_ref(), object);
    for key in parents {
        let (next, below) = step(node, value, key.as_ref())?;
        (node, value) = (next, below?);
    }
    step(node, value, last.as_ref())
}

fn step<'s, 'o>(
    node: SchemaRef<'s>,
    value: &'o Value,
    key: &str,
) -> Option<(SchemaRef<'s>, Option<&'o Value>)> {
    let Value::Object(members) = value else {
        return None;
    };
    if node.apply_kind() != ApplyKind::Object {
        return None;
    }
    let next = match (node.has_properties(), node.additional_properties()) {
        (true, None | Some(AdditionalProperties::Allowed(false))) => node.property(key),
        (false, Some(AdditionalProperties::Schema(values))) => Some(values),
        _ => None,
    }?;
    Some((next, members.get(key)))
}

/// Whether a node declares a string (of no format but `byte`).
fn declares_string(node: SchemaRef<'_>) -> bool {
    node.apply_kind() == ApplyKind::String && node.type_name() == Some("string")
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{one_string, perform, plan, string_member, strings_at};
    use crate::mutate::apply::tests::{pod, pod_schema};
    use crate::mutate::json_patch::Operation;
    use crate::mutate::merge::merge_into;
    use crate::mutate::touched::Writes;
    use crate::mutate::typed::{Ty, atomic_paths, validate_config};

    #[test]
    fn a_configuration_of_strings_in_granular_members_fits_and_sets_nothing_atomic() {
        let schema = pod_schema();
        let root = Ty::root(&schema);
        for config in [
            json!({"metadata": {"labels": {"team": "a"}}}),
            json!({"metadata": {"name": "x", "labels": {"team": "a", "tier": ""}}}),
            json!({"spec": {"config": {"mode": "fast"}}}),
        ] {
            assert!(plan(&root, &pod(), &config).is_some(), "{config}");
            assert!(validate_config(&root, &config, None).is_empty(), "{config}");
            assert!(atomic_paths(&root, &config).is_empty(), "{config}");
        }
        // Each goes the general way: an atomic struct, an undeclared field, a number where
        // strings are held, an empty map, the kind's own fields, a list, an int-or-string, a
        // member preserving unknown fields, a null.
        for config in [
            json!({"spec": {"selector": {"matchLabels": {"app": "x"}}}}),
            json!({"metadata": {"owner": "x"}}),
            json!({"metadata": {"labels": {"team": 1}}}),
            json!({"metadata": {"labels": {}}}),
            json!({"apiVersion": "v1", "metadata": {"labels": {"team": "a"}}}),
            json!({"kind": "Pod", "metadata": {"labels": {"team": "a"}}}),
            json!({"metadata": {"finalizers": ["b"]}}),
            json!({"spec": {"surge": "10%"}}),
            json!({"spec": {"config": {"extra": "x"}}}),
            json!({"metadata": {"labels": null}}),
            json!({}),
        ] {
            assert!(plan(&root, &pod(), &config).is_none(), "{config}");
        }
    }

    /// The object after each merge, whether it changed, and the response's patch from the
    /// places `writes` kept.
    fn merged(object: &Value, config: &Value, general: bool) -> (Value, bool, String) {
        let schema = pod_schema();
        let (mut out, mut writes) = (object.clone(), Writes::default());
        let changed = if general {
            merge_into(&Ty::root(&schema), &mut out, config, &mut writes).expect("merges")
        } else {
            let places = plan(&Ty::root(&schema), object, config).expect("planned granularly");
            for (path, old) in &places {
                writes.before_strings(path, *old);
            }
            perform(&mut out, config.clone())
        };
        let patch = writes.original.patch(&out).unwrap_or_default();
        let patch = String::from_utf8_lossy(patch.as_bytes()).into_owned();
        (out, changed, patch)
    }

    #[test]
    fn its_merge_is_the_general_merge() {
        let bare = json!({"apiVersion": "v1", "kind": "Pod"});
        let no_labels = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}});
        for object in [pod(), bare, no_labels] {
            for config in [
                json!({"metadata": {"labels": {"team": "a"}}}),
                json!({"metadata": {"labels": {"app": "web"}}}),
                json!({"metadata": {"labels": {"app": "api", "team": "a"}}}),
                json!({"metadata": {"name": "web", "labels": {"z": "1", "a": "2"}}}),
                json!({"spec": {"config": {"mode": "fast"}}}),
            ] {
                let general = merged(&object, &config, true);
                assert_eq!(
                    merged(&object, &config, false),
                    general,
                    "{object} {config}"
                );
            }
        }
    }

    #[test]
    fn a_null_on_the_way_is_left_to_the_general_merge() {
        let schema = pod_schema();
        let object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": null}});
        let config = json!({"metadata": {"labels": {"team": "a"}}});
        assert!(plan(&Ty::root(&schema), &object, &config).is_none());
        assert!(plan(&Ty::root(&schema), &json!(null), &config).is_none());
    }

    #[test]
    fn a_string_is_found_where_the_kind_declares_one_through_declared_objects_only() {
        let schema = pod_schema();
        let mut object = pod();
        object["spec"]["config"] = json!({"mode": "fast", "extra": "x"});
        object["spec"]["surge"] = json!("10%");
        let path = |p: &str| -> Vec<String> { p.split('/').map(str::to_string).collect() };
        for (place, found) in [
            ("metadata/labels/app", true),
            ("metadata/name", true),
            ("spec/config/mode", true),
            // A map, a list item, an absent member, a number, an int-or-string, a member
            // the schema does not declare (though preserved).
            ("metadata/labels", false),
            ("metadata/finalizers/0", false),
            ("metadata/labels/absent", false),
            ("spec/replicas", false),
            ("spec/surge", false),
            ("spec/config/extra", false),
        ] {
            assert_eq!(
                strings_at(&schema, &object, &[path(place)]),
                found,
                "{place}"
            );
        }
        assert!(!strings_at(&schema, &object, &[Vec::new()]), "the root");
        let both = [path("metadata/name"), path("spec/replicas")];
        assert!(
            !strings_at(&schema, &object, &both),
            "every path must hold one"
        );
        assert!(
            strings_at(&schema, &object, &[]),
            "no path: nothing to find"
        );
    }

    #[test]
    fn one_added_string_is_taken_where_the_kind_declares_one() {
        let schema = pod_schema();
        let op = |op: &str, path: &str, value: Value| Operation {
            op: op.into(),
            path: path.into(),
            from: None,
            value: Some(value),
        };
        let ops = [op("add", "/metadata/labels/a~1b", json!("x"))];
        let (path, string) = one_string(&ops).expect("one string");
        assert_eq!(
            (path.concat(), string),
            ("metadatalabelsa/b".to_string(), "x")
        );
        assert_eq!(string_member(&schema, &pod(), &path), Some(None));
        let app = ["metadata", "labels", "app"];
        assert_eq!(
            string_member(&schema, &pod(), &app),
            Some(Some(&json!("web")))
        );
        // Not one string: a number, a removal, two operations, a pointer without `/`.
        assert!(one_string(&[op("add", "/metadata/name", json!(1))]).is_none());
        assert!(one_string(&[op("remove", "/metadata/name", json!("x"))]).is_none());
        assert!(one_string(&[ops[0].clone(), ops[0].clone()]).is_none());
        assert!(one_string(&[op("add", "metadata", json!("x"))]).is_none());
        // Not where a string is declared: a number field, a list item.
        assert_eq!(string_member(&schema, &pod(), &["spec", "replicas"]), None);
        assert_eq!(
            string_member(&schema, &pod(), &["metadata", "finalizers", "0"]),
            None
        );
    }
}
