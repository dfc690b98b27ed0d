//! An apply configuration merged into the object as kube-apiserver's mutating policies merge
//! it (structured-merge-diff's `Merge`, no field ownership kept): the configuration must fit
//! the kind's schema and, under upstream's semantics, set nothing atomic; the object is then
//! merged with it. Under celgate's opt-in server-side semantics atomic values are set or
//! replaced whole, as server-side apply does for the field manager that applies them.

use serde_json::Value;

use super::merge::merge;
use super::typed::{Ty, atomic_paths, join_errors, validate};
use crate::schema::Schema;

/// Annotation on a mutating policy selecting its apply semantics.
pub const APPLY_SEMANTICS_ANNOTATION: &str = "admission.celgate.io/apply-semantics";

/// How a policy's apply configurations treat atomic lists, maps and structs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApplySemantics {
    /// As kube-apiserver: a configuration that sets anything atomic is an error
    /// (`may not mutate atomic arrays, maps or structs: …`).
    #[default]
    Upstream,
    /// Full server-side apply: atomic values in the configuration replace the object's, as
    /// they would for the field manager applying them (celgate's opt-in, selected by
    /// [`APPLY_SEMANTICS_ANNOTATION`]`: server-side`).
    ServerSide,
}

impl ApplySemantics {
    /// The semantics the annotation's value selects (`server-side`; anything else or none is
    /// upstream's).
    pub fn from_annotation(value: Option<&str>) -> Self {
        match value {
            Some("server-side") => ApplySemantics::ServerSide,
            _ => ApplySemantics::Upstream,
        }
    }
}

/// Merges `config` into `object`, whose kind's schema is `schema`. The error is upstream's
/// text after `error applying patch: `.
pub(super) fn apply(
    schema: &Schema,
    object: &Value,
    mut config: Value,
    semantics: ApplySemantics,
) -> Result<Value, String> {
    // The configuration is of the object's kind, whatever it says.
    if let Value::Object(c) = &mut config {
        for field in ["apiVersion", "kind"] {
            match object.get(field) {
                Some(v) => c.insert(field.to_string(), v.clone()),
                None => c.remove(field),
            };
        }
    }
    let root = Ty::root(schema);
    let errors = validate(&root, &config, false);
    if !errors.is_empty() {
        return Err(format!(
            "failed to convert patch object to typed object: {}",
            join_errors(&errors)
        ));
    }
    if semantics == ApplySemantics::Upstream {
        let atomics = atomic_paths(&root, &config);
        if !atomics.is_empty() {
            return Err(format!(
                "invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {}",
                atomics.join(", ")
            ));
        }
    }
    let errors = validate(&root, object, true);
    if !errors.is_empty() {
        return Err(format!(
            "failed to convert original object to typed object: {}",
            join_errors(&errors)
        ));
    }
    match merge(&root, Some(object), Some(&config)) {
        Ok(merged) => Ok(merged.unwrap_or_else(|| Value::Object(serde_json::Map::new()))),
        Err(errors) => Err(format!("failed to merge patch: {}", join_errors(&errors))),
    }
}

/// Fields a strict decoding of a built-in kind rejects: members its schema does not declare,
/// as `unknown field "<path>"` (paths dotted, list items `[i]`).
pub(super) fn unknown_fields(schema: &Schema, object: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk_unknown(&Ty::root(schema), object, &mut String::new(), 0, &mut out);
    out
}

fn walk_unknown(ty: &Ty, v: &Value, path: &mut String, depth: usize, out: &mut Vec<String>) {
    if depth > super::typed::MAX_DEPTH {
        return;
    }
    let atom = ty.atom();
    match (v, &atom.map, &atom.list) {
        (Value::Object(map), Some(m), _) => {
            for (key, item) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match m.entry(key) {
                    Some(t) => walk_unknown(&t, item, path, depth + 1, out),
                    None => out.push(format!("unknown field {:?}", path.as_str())),
                }
                path.truncate(len);
            }
        }
        (Value::Array(items), _, Some(list)) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk_unknown(&list.elem, item, path, depth + 1, out);
                path.truncate(len);
            }
        }
        _ => {}
    }
}
