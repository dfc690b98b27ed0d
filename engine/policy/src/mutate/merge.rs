//! Server-side apply's merge of an apply configuration into an object, as
//! structured-merge-diff merges two typed values keeping the right-hand side: scalars and
//! atomic values are replaced, granular maps and structs merged key by key, list maps merged
//! by their keys and sets by value (items of the object first, in their order, with the
//! configuration's new items placed after the shared item they follow).

use serde_json::map::Entry;
use serde_json::{Map, Value};

use super::touched::{Places, Writes};
use super::typed::{
    Atom, Element, ListAtom, MapAtom, PathError, Ty, check_scalar, deduce, item_element,
};

/// Merges `rhs` (the configuration) into `lhs` (the object) at `ty` into a new value; `None`
/// when the merge leaves nothing. The reference [`merge_into`] is tested against.
#[cfg(test)]
fn merge(
    ty: &Ty,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
) -> Result<Option<Value>, Vec<PathError>> {
    let mut path = String::new();
    merge_at(ty, lhs, rhs, &mut path, 0)
}

/// What merging a configuration into an object changes, worked out before anything is
/// changed, so that an error leaves the object as it was.
enum Edit<'c> {
    /// The object's value stays as it is.
    Keep,
    /// The value becomes this one, or (`None`) the member is dropped.
    Set(Option<Value>),
    /// A granular map merged member by member: the members that change, in key order.
    Members(Vec<(&'c str, Edit<'c>)>),
}

impl Edit<'_> {
    /// The paths this edit writes at (below `path`): each value it sets or drops.
    fn places<'e>(&'e self, path: &mut Vec<&'e str>, out: &mut Vec<Vec<String>>) {
        match self {
            Edit::Keep => {}
            Edit::Set(_) => out.push(path.iter().map(|k| k.to_string()).collect()),
            Edit::Members(members) => {
                for (key, edit) in members {
                    path.push(key);
                    edit.places(path, out);
                    path.pop();
                }
            }
        }
    }
}

/// Merges `config` into `object` in place, as [`merge`] would merge them into a new value
/// (an empty result is an empty object), changing only what the configuration reaches:
/// members of `object` the configuration does not name are the merge's own result for them
/// only because `object` fits `ty` (checked by `typed::validate` with duplicates allowed),
/// so a caller must have checked that. Returns whether the object changed; on error the
/// object is unchanged.
pub(super) fn merge_into(
    ty: &Ty,
    object: &mut Value,
    config: &Value,
    writes: &mut Writes,
) -> Result<bool, Vec<PathError>> {
    let mut path = String::with_capacity(64);
    let edit = plan(ty, object, config, &mut path, 0)?;
    let mut places = Vec::new();
    edit.places(&mut Vec::new(), &mut places);
    if !places.is_empty() {
        writes.before(object, Places::paths(places));
    }
    Ok(match edit {
        Edit::Set(None) => {
            let empty = Value::Object(Map::new());
            let changed = *object != empty;
            *object = empty;
            changed
        }
        edit => perform(object, edit),
    })
}

/// The edit that merges `rhs` into `lhs` at `ty`: granular maps on both sides are planned
/// member by member, anything else is merged whole by [`merge_at`].
fn plan<'c>(
    ty: &Ty,
    lhs: &Value,
    rhs: &'c Value,
    path: &mut String,
    depth: usize,
) -> Result<Edit<'c>, Vec<PathError>> {
    let whole = |path: &mut String| {
        merge_at(ty, Some(lhs), Some(rhs), path, depth).map(|merged| match merged {
            // The merge keeps the object's value (as for the `apiVersion` and `kind` every
            // configuration carries): nothing is written there.
            Some(v) if v == *lhs => Edit::Keep,
            v => Edit::Set(v),
        })
    };
    // A scalar the configuration sets to what the object has (as the `apiVersion` and `kind`
    // every configuration carries) is kept: nothing is written there.
    if lhs == rhs && ty.holds_scalar(lhs) {
        return Ok(Edit::Keep);
    }
    if depth > super::typed::MAX_DEPTH {
        return whole(path);
    }
    let atom = ty.atom();
    let (alhs, arhs) = (deduce(&atom, Some(lhs)), deduce(&atom, Some(rhs)));
    let (Some(m), Value::Object(l), Value::Object(r)) = (&arhs.map, lhs, rhs) else {
        return whole(path);
    };
    if shape(&alhs) != shape(&arhs) || m.atomic || (l.is_empty() && r.is_empty()) {
        return whole(path);
    }
    // The members that change, in the configuration's order (its keys' order).
    let mut members = Vec::new();
    let (mut errors, mut added_errors) = (Vec::new(), Vec::new());
    // How many members of the configuration the object has.
    let mut shared = 0;
    for (key, rv) in r {
        let member_ty = m.entry(key).unwrap_or(Ty::Deduced);
        let len = path.len();
        path.push('.');
        path.push_str(key);
        let lv = l.get(key);
        let planned = match lv {
            Some(lv) => plan(&member_ty, lv, rv, path, depth + 1),
            None => merge_at(&member_ty, None, Some(rv), path, depth + 1).map(Edit::Set),
        };
        path.truncate(len);
        let in_object = lv.is_some();
        shared += usize::from(in_object);
        match planned {
            Ok(Edit::Keep) => {}
            Ok(edit) => members.push((key.as_str(), edit)),
            Err(e) if in_object => errors.extend(e),
            Err(e) => added_errors.extend(e),
        }
    }
    // As `merge_maps`: the errors of the members the object has, then of the new ones.
    errors.extend(added_errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    // The merged map is empty (and so dropped) only when every member merged to nothing.
    let dropped = |e: &Edit| matches!(e, Edit::Set(None));
    let kept =
        l.len() > shared || r.len() > members.len() || !members.iter().all(|(_, e)| dropped(e));
    if !kept {
        return Ok(Edit::Set(None));
    }
    Ok(if members.is_empty() {
        Edit::Keep
    } else {
        Edit::Members(members)
    })
}

/// Makes an edit planned by [`plan`]; returns whether the value changed.
fn perform(value: &mut Value, edit: Edit) -> bool {
    match edit {
        Edit::Keep => false,
        Edit::Set(new) => {
            let new = new.unwrap_or(Value::Null);
            let changed = *value != new;
            *value = new;
            changed
        }
        Edit::Members(members) => {
            let Value::Object(map) = value else {
                return false;
            };
            let mut changed = false;
            for (key, edit) in members {
                match edit {
                    Edit::Set(None) => changed |= map.remove(key).is_some(),
                    Edit::Set(Some(new)) => match map.entry(key) {
                        Entry::Occupied(mut old) => {
                            changed |= perform(old.get_mut(), Edit::Set(Some(new)));
                        }
                        Entry::Vacant(slot) => {
                            slot.insert(new);
                            changed = true;
                        }
                    },
                    edit => {
                        if let Some(old) = map.get_mut(key) {
                            changed |= perform(old, edit);
                        }
                    }
                }
            }
            changed
        }
    }
}

/// Which parts of an atom a value narrowed it to.
fn shape(a: &Atom) -> (bool, bool, bool) {
    (a.scalar.is_some(), a.list.is_some(), a.map.is_some())
}

fn merge_at(
    ty: &Ty,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut String,
    depth: usize,
) -> Result<Option<Value>, Vec<PathError>> {
    if lhs.is_none() && rhs.is_none() {
        return Err(vec![PathError {
            path: path.clone(),
            message: "at least one of lhs and rhs must be provided".into(),
        }]);
    }
    if depth > super::typed::MAX_DEPTH {
        return Ok(leaf(lhs, rhs));
    }
    let atom = ty.atom();
    let alhs = deduce(&atom, lhs);
    let arhs = deduce(&atom, rhs);
    if rhs.is_none() {
        handle(&alhs, lhs, rhs, path, depth)
    } else if lhs.is_none() || shape(&alhs) == shape(&arhs) {
        handle(&arhs, lhs, rhs, path, depth)
    } else {
        // The left-hand side is checked as its own kind; the right-hand side decides.
        let left = handle(&alhs, lhs, rhs, path, depth);
        let right = handle(&arhs, lhs, rhs, path, depth);
        match (left, right) {
            (Err(mut l), Err(r)) => {
                l.extend(r);
                Err(l)
            }
            (Err(l), Ok(_)) => Err(l),
            (Ok(_), right) => right,
        }
    }
}

/// The kept value: the right-hand side if present.
fn leaf(lhs: Option<&Value>, rhs: Option<&Value>) -> Option<Value> {
    rhs.or(lhs).cloned()
}

fn handle(
    atom: &Atom,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut String,
    depth: usize,
) -> Result<Option<Value>, Vec<PathError>> {
    if let Some(m) = &atom.map {
        return merge_maps(m, lhs, rhs, path, depth);
    }
    if let Some(t) = atom.scalar {
        let l = lhs.and_then(|v| check_scalar(t, v, "lhs: "));
        let r = rhs.and_then(|v| check_scalar(t, v, "rhs: "));
        if let (Some(l), Some(r)) = (l, r) {
            return Err([l, r]
                .into_iter()
                .map(|message| PathError {
                    path: path.clone(),
                    message,
                })
                .collect());
        }
        return Ok(leaf(lhs, rhs));
    }
    if let Some(list) = &atom.list {
        return merge_lists(list, lhs, rhs, path, depth);
    }
    Ok(leaf(lhs, rhs))
}

fn merge_maps(
    m: &MapAtom,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut String,
    depth: usize,
) -> Result<Option<Value>, Vec<PathError>> {
    let l = lhs.and_then(Value::as_object);
    let r = rhs.and_then(Value::as_object);
    let empty = l.is_none_or(Map::is_empty) && r.is_none_or(Map::is_empty);
    if m.atomic || empty {
        return Ok(leaf(lhs, rhs));
    }
    let mut keys: Vec<&String> = l.into_iter().flat_map(Map::keys).collect();
    for k in r.into_iter().flat_map(Map::keys) {
        if l.is_none_or(|l| !l.contains_key(k)) {
            keys.push(k);
        }
    }
    let mut out = Map::new();
    let mut errors = Vec::new();
    for key in keys {
        let ty = m.entry(key).unwrap_or(Ty::Deduced);
        let len = path.len();
        path.push('.');
        path.push_str(key);
        let merged = merge_at(
            &ty,
            l.and_then(|l| l.get(key)),
            r.and_then(|r| r.get(key)),
            path,
            depth + 1,
        );
        path.truncate(len);
        match merged {
            Ok(Some(v)) => {
                out.insert(key.clone(), v);
            }
            Ok(None) => {}
            Err(e) => errors.extend(e),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok((!out.is_empty()).then_some(Value::Object(out)))
}

/// The identities of a list's items, with the item each names (a repeated identity names a
/// null, as upstream's index of a live object with duplicates does).
struct Indexed<'v> {
    elements: Vec<Element<'v>>,
    items: Vec<Option<&'v Value>>,
}

impl<'v> Indexed<'v> {
    fn position(&self, e: &Element<'_>) -> Option<usize> {
        self.elements.iter().position(|x| x.same(e))
    }

    fn get(&self, e: &Element<'_>) -> Option<Option<&'v Value>> {
        self.position(e).map(|i| self.items[i])
    }
}

static NULL: Value = Value::Null;

fn index<'v>(
    list: &ListAtom<'v>,
    items: &'v [Value],
    allow_duplicates: bool,
    path: &str,
    errors: &mut Vec<PathError>,
) -> Indexed<'v> {
    let mut out = Indexed {
        elements: Vec::with_capacity(items.len()),
        items: Vec::with_capacity(items.len()),
    };
    let mut first: Vec<Element<'v>> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let element = match item_element(list, i, item) {
            Ok(e) => e,
            Err(e) => {
                errors.push(PathError {
                    path: path.to_string(),
                    message: format!("element {i}: {e}"),
                });
                continue;
            }
        };
        let seen = first.iter().any(|f| f.same(&element));
        if seen && !allow_duplicates {
            errors.push(PathError {
                path: path.to_string(),
                message: format!("duplicate entries for key {element}"),
            });
            continue;
        }
        if seen {
            if let Some(p) = out.position(&element) {
                out.items[p] = Some(&NULL);
            }
        } else {
            first.push(element.clone());
        }
        out.items.push(Some(item));
        out.elements.push(element);
    }
    out
}

fn merge_lists(
    list: &ListAtom,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
    path: &mut String,
    depth: usize,
) -> Result<Option<Value>, Vec<PathError>> {
    let l = lhs.and_then(Value::as_array);
    let r = rhs.and_then(Value::as_array);
    let empty = l.is_none_or(Vec::is_empty) && r.is_none_or(Vec::is_empty);
    if list.atomic || empty {
        return Ok(leaf(lhs, rhs));
    }
    let mut errors = Vec::new();
    let rhs_index = index(list, r.map_or(&[], Vec::as_slice), false, path, &mut errors);
    let lhs_index = index(list, l.map_or(&[], Vec::as_slice), true, path, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    let (lpes, rpes) = (&lhs_index.elements, &rhs_index.elements);
    let mut shared: std::collections::VecDeque<&Element> = rpes
        .iter()
        .filter(|pe| lhs_index.position(pe).is_some())
        .collect();
    let mut next_shared = shared.pop_front();
    let mut merged_rhs: Vec<&Element> = Vec::new();
    let mut out = Vec::new();
    let item = |pe: &Element,
                lc: Option<&Value>,
                rc: Option<&Value>,
                path: &mut String,
                out: &mut Vec<Value>| {
        let len = path.len();
        path.push_str(&pe.to_string());
        // Upstream drops the errors of merging one item (its result still counts).
        if let Ok(Some(v)) = merge_at(&list.elem, lc, rc, path, depth + 1) {
            out.push(v);
        }
        path.truncate(len);
    };
    let (mut li, mut ri) = (0, 0);
    while li < lpes.len() || ri < rpes.len() {
        if li < lpes.len() && ri < rpes.len() {
            let pe = &lpes[li];
            if pe.same(&rpes[ri]) {
                merged_rhs.push(pe);
                let lc = lhs_index.get(pe).flatten();
                let rc = rhs_index.get(pe).flatten();
                item(pe, lc, rc, path, &mut out);
                li += 1;
                ri += 1;
                next_shared = shared.pop_front();
                continue;
            }
            if rhs_index.position(pe).is_some() && next_shared.is_some_and(|n| !n.same(pe)) {
                li += 1;
                continue;
            }
        }
        if li < lpes.len() {
            let pe = &lpes[li];
            if rhs_index.position(pe).is_none() {
                item(pe, l.and_then(|l| l.get(li)), None, path, &mut out);
                li += 1;
                continue;
            } else if merged_rhs.iter().any(|m| m.same(pe)) {
                li += 1;
            }
        }
        if ri < rpes.len() {
            let pe = &rpes[ri];
            merged_rhs.push(pe);
            let lc = lhs_index.get(pe).flatten();
            let rc = rhs_index.get(pe).flatten();
            item(pe, lc, rc, path, &mut out);
            ri += 1;
            if next_shared.is_some_and(|n| n.same(pe)) {
                next_shared = shared.pop_front();
            }
        }
    }
    Ok((!out.is_empty()).then_some(Value::Array(out)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::{merge, merge_into};
    use crate::mutate::apply::tests::{pod, pod_schema};
    use crate::mutate::touched::{JsonPatchText, Saved, Writes};
    use crate::mutate::typed::{Ty, Within, join_errors, validate};

    /// Merging in place gives what merging into a new value gives, for objects that fit the
    /// schema: maps, list maps, sets, atomic values, nulls, empty maps and errors. The places
    /// it says it writes hold every change: what was kept of them tells whether the object
    /// changed and puts it back, and the patch over them is the whole objects' diff.
    #[test]
    fn merging_in_place_gives_the_whole_value_merge() {
        let schema = pod_schema();
        let root = Ty::root(&schema);
        let objects = [
            pod(),
            json!({}),
            json!({"metadata": {"labels": {}}, "spec": {"containers": []}}),
            json!({"metadata": {"labels": {"a": "1"}, "finalizers": ["x", "y"]},
                "spec": {"config": {"mode": "m", "extra": {"k": [1, 2]}},
                    "containers": [{"name": "a", "ports": [{"containerPort": 1}]}, {"name": "a"}]}}),
        ];
        let configs = [
            json!({}),
            json!({"metadata": {"labels": {"env": "prod"}}}),
            json!({"metadata": {"labels": {"app": "web"}}}),
            json!({"metadata": {"labels": {}}}),
            json!({"metadata": {"labels": null}}),
            json!({"metadata": null}),
            json!({"metadata": {"name": null, "finalizers": ["b", "a"]}}),
            json!({"spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}}}}),
            json!({"spec": {"containers": [{"name": "main", "image": "nginx:2"}, {"name": "new"}]}}),
            json!({"spec": {"containers": [{"name": "a", "ports": [{"containerPort": 1, "protocol": "UDP"}]}]}}),
            json!({"spec": {"config": {"extra": {"k": [3]}, "more": {"x": {}}}}}),
            json!({"spec": {"volumes": [{"name": "data", "path": "/e"}, {"name": "new"}]}}),
            json!({"spec": {"memory": "1Gi", "surge": 2}}),
            json!({"spec": {"replicas": {"not": "a number"}}}),
            json!({"spec": {"containers": [{"name": "x"}, {"name": "x"}]}}),
        ];
        let (mut changed_some, mut failed) = (0, 0);
        for object in &objects {
            assert!(
                validate(&root, object, true, &Within::All, false).is_empty(),
                "{object} fits"
            );
            for config in &configs {
                let whole = merge(&root, Some(object), Some(config))
                    .map(|v| v.unwrap_or_else(|| json!({})))
                    .map_err(|e| join_errors(&e));
                let mut in_place = object.clone();
                let mut writes = Writes::default();
                writes.invocation = Some(Saved::default());
                let got = merge_into(&root, &mut in_place, config, &mut writes)
                    .map_err(|e| join_errors(&e));
                match (&whole, got) {
                    (Ok(want), Ok(changed)) => {
                        assert_eq!(&in_place, want, "{config} into {object}");
                        assert_eq!(changed, in_place != *object, "{config} into {object}");
                        let whole_diff = json_patch::diff(object, &in_place);
                        let whole_diff = (!whole_diff.0.is_empty()).then(|| {
                            let ops = serde_json::to_value(&whole_diff.0).unwrap();
                            JsonPatchText::from_ops(ops.as_array().unwrap())
                        });
                        let written = writes.original.patch(&in_place);
                        assert_eq!(written, whole_diff, "{config} into {object}");
                        let saved = writes.invocation.take().unwrap();
                        assert_eq!(saved.differs(&in_place), changed, "{config} into {object}");
                        saved.restore(&mut in_place);
                        assert_eq!(&in_place, object, "{config} into {object}, put back");
                        changed_some += usize::from(changed);
                    }
                    (Err(want), Err(got)) => {
                        assert_eq!(&got, want, "{config} into {object}");
                        assert_eq!(&in_place, object, "unchanged after an error");
                        failed += 1;
                    }
                    (want, got) => panic!("{config} into {object}: {want:?} but {got:?}"),
                }
            }
        }
        // The cases reach both outcomes: merges that change the object, and errors.
        assert!(
            changed_some > 20 && failed > 0,
            "{changed_some} changed, {failed} failed"
        );
    }

    /// A configuration that sets values as the object has them (as every configuration sets
    /// `apiVersion` and `kind`) writes nothing there: no place is kept for the response's
    /// patch. A value that differs is kept.
    #[test]
    fn values_set_as_they_are_are_not_written() {
        let schema = pod_schema();
        let root = Ty::root(&schema);
        let same = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"labels": {"app": "web"}}, "spec": {"replicas": 1}});
        let mut object = pod();
        let mut writes = Writes::default();
        assert_eq!(
            merge_into(&root, &mut object, &same, &mut writes),
            Ok(false)
        );
        assert!(writes.original.is_empty());
        let other = json!({"apiVersion": "v1", "kind": "Pod", "spec": {"replicas": 2}});
        assert_eq!(
            merge_into(&root, &mut object, &other, &mut writes),
            Ok(true)
        );
        assert!(!writes.original.is_empty());
    }
}
