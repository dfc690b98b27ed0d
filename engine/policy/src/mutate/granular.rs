//! The mutation most policies make: strings set in granular structs and maps, by an apply
//! configuration (`Object{metadata: Object.metadata{labels: {'team': 'a'}}}`) or a JSON patch
//! (`add` at `/metadata/annotations/…`). Such a configuration fits the schema and sets nothing
//! atomic, and its merge only adds or replaces those strings, so it is recognised in one walk
//! and merged in another, with the outcome the general checks (`typed`) and merge (`merge`)
//! give it; after such a patch the object's Go type has nothing to refuse (`go_object`).

use serde_json::map::Entry;
use serde_json::{Map, Value};

use super::touched::Writes;
use super::typed::Ty;
use crate::schema::{AdditionalProperties, ApplyKind, Schema};

/// Deepest configuration taken (deeper ones go the general way).
const MAX_DEPTH: usize = 32;

/// Whether `config`, at `ty` (the kind's root), is made only of non-empty granular structs and
/// maps whose members are declared, down to strings where the schema holds strings, and leaves
/// `apiVersion` and `kind` out (the general way sets them to the object's).
pub(super) fn sets_strings_only(ty: &Ty, config: &Value) -> bool {
    let Value::Object(members) = config else {
        return false;
    };
    !members.contains_key("apiVersion")
        && !members.contains_key("kind")
        && granular_at(ty, config, 0)
}

fn granular_at(ty: &Ty, v: &Value, depth: usize) -> bool {
    match v {
        Value::String(_) => {
            matches!(ty, Ty::Node { schema, .. } if schema.apply_kind() == ApplyKind::String)
        }
        Value::Object(members) if !members.is_empty() && depth < MAX_DEPTH => {
            let atom = ty.atom();
            let (Some(map), None, None) = (atom.map, atom.scalar, atom.list) else {
                return false;
            };
            !map.atomic
                && members.iter().all(|(key, item)| {
                    map.entry(key)
                        .is_some_and(|t| granular_at(&t, item, depth + 1))
                })
        }
        _ => false,
    }
}

/// Merges a configuration [`sets_strings_only`] accepted into `object`, which fits the schema:
/// `writes` keeps the places first (unlogged: strings where strings are declared leave
/// nothing for the looks at a built-in kind's object). Returns whether the object changed, or
/// gives the configuration back when a struct or map on its way is not a JSON object in
/// `object` (a null), which the general merge handles.
pub(super) fn merge(object: &mut Value, config: Value, writes: &mut Writes) -> Result<bool, Value> {
    let (Value::Object(target), Value::Object(members)) = (&*object, &config) else {
        return Err(config);
    };
    let mut places = Vec::new();
    if !plan(target, members, &mut Vec::new(), &mut places) {
        return Err(config);
    }
    if places.is_empty() {
        return Ok(false);
    }
    for place in &places {
        writes.before_strings(object, place);
    }
    drop(places);
    let (Value::Object(target), Value::Object(members)) = (object, config) else {
        return Ok(false);
    };
    Ok(perform(target, members))
}

/// The places the merge writes, in the configuration's key order: each member the object
/// lacks, and each string that differs. False when the object holds something other than a
/// JSON object where the configuration has a struct or map.
fn plan<'c>(
    target: &Map<String, Value>,
    members: &'c Map<String, Value>,
    path: &mut Vec<&'c str>,
    places: &mut Vec<Vec<&'c str>>,
) -> bool {
    for (key, item) in members {
        path.push(key);
        let fits = match (target.get(key), item) {
            (None, _) => {
                places.push(path.clone());
                true
            }
            (Some(old), Value::String(_)) => {
                if old != item {
                    places.push(path.clone());
                }
                true
            }
            (Some(Value::Object(below)), Value::Object(inner)) => plan(below, inner, path, places),
            (Some(_), _) => false,
        };
        path.pop();
        if !fits {
            return false;
        }
    }
    true
}

/// Adds or replaces what [`plan`] found; returns whether anything changed.
fn perform(target: &mut Map<String, Value>, members: Map<String, Value>) -> bool {
    let mut changed = false;
    for (key, item) in members {
        match (target.entry(key), item) {
            (Entry::Vacant(slot), item) => {
                slot.insert(item);
                changed = true;
            }
            (Entry::Occupied(mut old), Value::Object(inner)) => {
                if let Value::Object(below) = old.get_mut() {
                    changed |= perform(below, inner);
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
        let (mut node, mut value) = (kind.as_ref(), object);
        for key in path {
            let Value::Object(members) = value else {
                return false;
            };
            if node.apply_kind() != ApplyKind::Object {
                return false;
            }
            // A field, or a map's value: a node with both is left to the general checks.
            let next = match (node.has_properties(), node.additional_properties()) {
                (true, None | Some(AdditionalProperties::Allowed(false))) => node.property(key),
                (false, Some(AdditionalProperties::Schema(values))) => Some(values),
                _ => None,
            };
            match (next, members.get(key)) {
                (Some(n), Some(v)) => (node, value) = (n, v),
                _ => return false,
            }
        }
        !path.is_empty()
            && value.is_string()
            && node.apply_kind() == ApplyKind::String
            && node.type_name() == Some("string")
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::{merge, sets_strings_only, strings_at};
    use crate::mutate::apply::tests::{pod, pod_schema};
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
            assert!(sets_strings_only(&root, &config), "{config}");
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
            assert!(!sets_strings_only(&root, &config), "{config}");
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
            merge(&mut out, config.clone(), &mut writes).expect("merged granularly")
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
    fn a_null_on_the_way_gives_the_configuration_back_untouched() {
        let object = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": null}});
        let config = json!({"metadata": {"labels": {"team": "a"}}});
        let (mut out, mut writes) = (object.clone(), Writes::default());
        assert_eq!(merge(&mut out, config.clone(), &mut writes), Err(config));
        assert_eq!(out, object);
        assert!(writes.original.patch(&out).is_none());
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
}
