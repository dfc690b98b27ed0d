//! The `Object` types of a MutatingAdmissionPolicy's apply configurations, typed by the
//! mutated kind's schema, for type checking only (evaluation keeps Kubernetes' dynamic
//! types). `Object` is the root; `Object.<f>.<g>` is the object at that field path, where a
//! list or map field names its elements, as Kubernetes names nested literals.
//!
//! A literal may set only the fields the schema declares (any field where it preserves
//! unknown fields); a path the schema has no object at is an undeclared type. Field types are
//! strict only for strings, integers and booleans: everything else is `dyn`, since a map, a
//! list, a number or an object may be written in more than one way that Kubernetes accepts
//! (a map literal for an object, an int for a number, an object read from `object`).

use std::sync::Arc;

use celgate_cel::{ObjectSchemas, ObjectType, Type};

use super::Schema;

/// The root type's name.
const ROOT: &str = "Object";
/// How many nested lists or maps a path step looks through (a guard against cyclic schemas).
const MAX_NESTING: usize = 32;

/// The `Object` types of one kind.
#[derive(Debug, Clone)]
pub struct ApplyConfigurationTypes {
    root: Arc<Schema>,
}

impl ApplyConfigurationTypes {
    /// The `Object` types of the kind whose schema is `root`.
    pub fn new(root: Arc<Schema>) -> Self {
        Self { root }
    }
}

impl ObjectSchemas for ApplyConfigurationTypes {
    fn object_type(&self, name: &str) -> Option<Arc<ObjectType>> {
        let path = name.strip_prefix(ROOT)?;
        let steps: Vec<&str> = match path {
            "" => Vec::new(),
            p => p.strip_prefix('.')?.split('.').collect(),
        };
        let mut node = (*self.root).clone();
        for step in steps {
            node = elements(node);
            match node.property(step) {
                Some(p) => node = p,
                None if node.preserves_unknown_fields() => {
                    return Some(Arc::new(ObjectType::open(name, [], Type::Dyn)));
                }
                None => return None,
            }
        }
        let node = elements_of_lists(node);
        if let Some(values) = node.additional_properties_schema() {
            let values = elements(values);
            if !is_object(&values) {
                // A map of scalars written as a literal: any key, values of the map's type.
                return Some(Arc::new(ObjectType::open(name, [], field_type(&values))));
            }
            return Some(object(name, &values));
        }
        is_object(&node).then(|| object(name, &node))
    }
}

/// The object type `name` with `node`'s fields.
fn object(name: &str, node: &Schema) -> Arc<ObjectType> {
    let fields = node
        .properties()
        .map(|(n, p)| (n.to_string(), field_type(&p)));
    if node.preserves_unknown_fields() {
        Arc::new(ObjectType::open(name, fields, Type::Dyn))
    } else {
        Arc::new(ObjectType::new(name, fields))
    }
}

/// Whether values of `node` are objects a literal can build.
fn is_object(node: &Schema) -> bool {
    match node.type_name() {
        Some(t) => t == "object",
        None => node.preserves_unknown_fields() && !node.is_int_or_string(),
    }
}

/// The type a field of a literal accepts.
fn field_type(p: &Schema) -> Type {
    if p.is_int_or_string() {
        return Type::Dyn;
    }
    match p.type_name() {
        Some("string") => Type::String,
        Some("integer") => Type::Int,
        Some("boolean") => Type::Bool,
        _ => Type::Dyn,
    }
}

/// The schema of the values inside `node`, looking through lists and maps.
fn elements(mut node: Schema) -> Schema {
    for _ in 0..MAX_NESTING {
        let next = match node.type_name() {
            Some("array") => node.items(),
            _ => node.additional_properties_schema(),
        };
        match next {
            Some(n) => node = n,
            None => break,
        }
    }
    node
}

/// The schema of the elements of `node`, looking through lists only.
fn elements_of_lists(mut node: Schema) -> Schema {
    for _ in 0..MAX_NESTING {
        match (node.type_name(), node.items()) {
            (Some("array"), Some(items)) => node = items,
            _ => break,
        }
    }
    node
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schema::schemas_from_openapi;

    fn types() -> ApplyConfigurationTypes {
        let doc = json!({"components": {"schemas": {"Deployment": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                }},
                "spec": {"type": "object", "properties": {
                    "replicas": {"type": "integer"},
                    "paused": {"type": "boolean"},
                    "ratio": {"type": "number"},
                    "surge": {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
                    "containers": {"type": "array", "items": {"type": "object", "properties": {
                        "name": {"type": "string"},
                        "args": {"type": "array", "items": {"type": "string"}}
                    }}},
                    "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"mode": {"type": "string"}}}
                }}
            },
            "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "Deployment"}]
        }}}});
        let schemas = schemas_from_openapi(&doc).unwrap();
        ApplyConfigurationTypes::new(schemas[0].1.clone())
    }

    fn fields(name: &str) -> Option<String> {
        let t = types().object_type(name)?;
        assert_eq!(t.name(), name);
        let shown: Vec<String> = t.fields().map(|(n, t)| format!("{n}: {t}")).collect();
        let open = t.field("surely-not-declared").map_or("", |_| " +any");
        Some(format!("{}{open}", shown.join(", ")))
    }

    #[test]
    fn object_paths_resolve_to_the_schema_objects() {
        let cases = [
            (
                "Object",
                Some("apiVersion: string, kind: string, metadata: dyn, spec: dyn"),
            ),
            (
                "Object.spec",
                Some(
                    "config: dyn, containers: dyn, paused: bool, ratio: dyn, replicas: int, surge: dyn",
                ),
            ),
            ("Object.spec.containers", Some("args: dyn, name: string")),
            ("Object.spec.config", Some("mode: string +any")),
            ("Object.spec.config.deep.er", Some(" +any")),
            ("Object.metadata.labels", Some(" +any")),
            ("Object.spec.replicas", None),
            ("Object.spce", None),
            ("Object.spec.containers.image", None),
            ("Objects", None),
            ("Object.", None),
        ];
        for (name, want) in cases {
            assert_eq!(fields(name).as_deref(), want, "{name}");
        }
        let labels = types().object_type("Object.metadata.labels").unwrap();
        assert_eq!(labels.field("app"), Some(&Type::String));
    }
}
