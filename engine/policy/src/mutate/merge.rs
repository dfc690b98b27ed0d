//! Server-side apply's merge of an apply configuration into an object, as
//! structured-merge-diff merges two typed values keeping the right-hand side: scalars and
//! atomic values are replaced, granular maps and structs merged key by key, list maps merged
//! by their keys and sets by value (items of the object first, in their order, with the
//! configuration's new items placed after the shared item they follow).

use serde_json::{Map, Value};

use super::typed::{
    Atom, Element, ListAtom, MapAtom, PathError, Ty, check_scalar, deduce, item_element,
};

/// Merges `rhs` (the configuration) into `lhs` (the object) at `ty`; `None` when the merge
/// leaves nothing (both absent, or granular and empty on both sides).
pub(super) fn merge(
    ty: &Ty,
    lhs: Option<&Value>,
    rhs: Option<&Value>,
) -> Result<Option<Value>, Vec<PathError>> {
    let mut path = String::new();
    merge_at(ty, lhs, rhs, &mut path, 0)
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
    elements: Vec<Element>,
    items: Vec<Option<&'v Value>>,
}

impl<'v> Indexed<'v> {
    fn position(&self, e: &Element) -> Option<usize> {
        self.elements.iter().position(|x| x.same(e))
    }

    fn get(&self, e: &Element) -> Option<Option<&'v Value>> {
        self.position(e).map(|i| self.items[i])
    }
}

static NULL: Value = Value::Null;

fn index<'v>(
    list: &ListAtom,
    items: &'v [Value],
    allow_duplicates: bool,
    path: &str,
    errors: &mut Vec<PathError>,
) -> Indexed<'v> {
    let mut out = Indexed {
        elements: Vec::with_capacity(items.len()),
        items: Vec::with_capacity(items.len()),
    };
    let mut first: Vec<Element> = Vec::new();
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
