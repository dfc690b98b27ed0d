//! Schema → CEL checker type, as kube-apiserver's type checker types `object`, `oldObject`
//! and `params` (`SchemaDeclType(schema, true)`, then `MaybeAssignTypeName`):
//!
//! * int-or-string (extension or format) is `dyn`; a schema without a known `type` (a
//!   quantity: `oneOf` string/number) is not exposed, nor is an array or map whose elements
//!   are not, nor a property whose schema is not (a field access is then `undefined field`);
//! * `object` with an `additionalProperties` schema is `map(string, V)`, otherwise an object
//!   type with the escaped property names as fields (a reserved word is found both escaped
//!   and plain); `x-kubernetes-preserve-unknown-fields` adds nothing;
//! * the root and every `x-kubernetes-embedded-resource` object get `apiVersion`, `kind` and
//!   `metadata` (`name`, `generateName`) unless the schema already has them all;
//! * strings of format `byte` are `bytes`, `duration` is `google.protobuf.Duration`, `date`
//!   and `date-time` are `google.protobuf.Timestamp`;
//! * object types are named by their path from the root: `<root>.spec.template`, list
//!   elements `<list>.@idx`, map values `<map>.@elem`;
//! * a `$ref` back to a schema being expanded (a recursive type) is an object without fields.

use celgate_cel::Type;

use super::escape::{RESERVED, escape_field_name};
use super::{Graph, Link, Node, Schema};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The CEL type of a resource whose schema is `schema`, with root type name `name`; `None`
/// when kube-apiserver exposes no type for it (expressions then see `dyn`).
pub fn resource_type(schema: &Schema, name: &str) -> Option<Type> {
    Converter { inside: Vec::new() }.enter(schema, name, true)
}

struct Converter {
    /// The components being expanded, outermost first.
    inside: Vec<String>,
}

impl Converter {
    /// `s` named `name`; a component already being expanded is a cycle, which kube-apiserver
    /// replaces by a bare object.
    fn enter(&mut self, s: &Schema, name: &str, resource_root: bool) -> Option<Type> {
        match s.component() {
            Some(c) if self.inside.iter().any(|i| i == c) => Some(Type::object(name, [])),
            Some(c) => {
                self.inside.push(c.to_string());
                let t = self.convert(s, name, resource_root);
                self.inside.pop();
                t
            }
            None => self.convert(s, name, resource_root),
        }
    }

    fn child(&mut self, s: &Schema, name: &str) -> Option<Type> {
        self.enter(s, name, s.is_embedded_resource())
    }

    fn convert(&mut self, s: &Schema, name: &str, resource_root: bool) -> Option<Type> {
        if s.is_int_or_string() {
            return Some(Type::Dyn);
        }
        match s.type_name()? {
            "array" => {
                let items = s.items()?;
                let elem = self.child(&items, &format!("{name}.@idx"))?;
                Some(Type::list(elem))
            }
            "object" => {
                if let Some(values) = s.additional_properties_schema() {
                    let value = self.child(&values, &format!("{name}.@elem"))?;
                    return Some(Type::map(Type::String, value));
                }
                let properties = if resource_root {
                    with_type_and_object_meta(s)
                } else {
                    s.properties().map(|(n, p)| (n.to_string(), p)).collect()
                };
                let mut fields = Vec::with_capacity(properties.len());
                for (property, schema) in properties {
                    let Some(field) = escape_field_name(&property) else {
                        continue;
                    };
                    let Some(t) = self.child(&schema, &format!("{name}.{field}")) else {
                        continue;
                    };
                    // Reserved words are also found by their plain name (Kubernetes
                    // recognises keywords as field names since 1.31).
                    if RESERVED.contains(&property.as_str()) {
                        fields.push((property.clone(), t.clone()));
                    }
                    fields.push((field, t));
                }
                Some(Type::object(name, fields))
            }
            "string" => Some(match s.format() {
                "byte" => Type::Bytes,
                "duration" => Type::Duration,
                "date" | "date-time" => Type::Timestamp,
                _ => Type::String,
            }),
            "boolean" => Some(Type::Bool),
            "number" => Some(Type::Double),
            "integer" => Some(Type::Int),
            _ => None,
        }
    }
}

/// The properties of a resource root: its own, unless `kind`, `apiVersion` (strings) and
/// `metadata` (an object with string `name` and `generateName`) are not all there; then
/// those three are set to exactly that.
fn with_type_and_object_meta(s: &Schema) -> BTreeMap<String, Schema> {
    let string = |p: Option<Schema>| p.is_some_and(|p| p.has_type("string"));
    let complete = string(s.property("kind"))
        && string(s.property("apiVersion"))
        && s.property("metadata").is_some_and(|m| {
            m.has_type("object") && string(m.property("name")) && string(m.property("generateName"))
        });
    let mut props: BTreeMap<String, Schema> =
        s.properties().map(|(n, p)| (n.to_string(), p)).collect();
    if !complete {
        let (string, metadata) = type_meta();
        props.insert("kind".into(), string.clone());
        props.insert("apiVersion".into(), string);
        props.insert("metadata".into(), metadata);
    }
    props
}

/// A string schema, and an object schema with string `name` and `generateName`.
fn type_meta() -> (Schema, Schema) {
    let mut metadata = Node {
        types: vec!["object".into()],
        ..Node::default()
    };
    for field in ["name", "generateName"] {
        metadata.properties.insert(field.into(), Link::Local(1));
    }
    let string = Node {
        types: vec!["string".into()],
        ..Node::default()
    };
    let graph = Arc::new(Graph::new(vec![metadata, string]));
    let at = |id| Schema {
        graph: graph.clone(),
        id,
    };
    (at(1), at(0))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::schema::schemas_from_openapi;

    /// The type of the first kind of `doc`, named after its kind, as a compact string:
    /// objects as `Name{field: type, …}`.
    fn shown(doc: Value) -> String {
        let schemas = schemas_from_openapi(&doc).unwrap();
        let (gvk, schema) = &schemas[0];
        resource_type(schema, &gvk.kind).map_or("none".into(), |t| show(&t))
    }

    fn show(t: &Type) -> String {
        match t {
            Type::Object(o) => {
                let fields: Vec<String> = o
                    .fields()
                    .map(|(n, t)| format!("{n}: {}", show(t)))
                    .collect();
                format!("{}{{{}}}", o.name(), fields.join(", "))
            }
            Type::List(e) => format!("list({})", show(e)),
            Type::Map(k, v) => format!("map({}, {})", show(k), show(v)),
            other => other.to_string(),
        }
    }

    fn kind(props: Value) -> Value {
        json!({"components": {"schemas": {"K": {
            "type": "object",
            "properties": props,
            "x-kubernetes-group-version-kind": [{"group": "g", "version": "v1", "kind": "K"}]
        }}}})
    }

    const META: &str = "metadata: K.metadata{generateName: string, name: string}";

    #[test]
    fn scalars_formats_lists_and_maps() {
        let t = shown(kind(json!({
            "i": {"type": "integer", "format": "int64"},
            "d": {"type": "number"},
            "b": {"type": "boolean"},
            "s": {"type": "string", "maxLength": 3},
            "raw": {"type": "string", "format": "byte"},
            "ttl": {"type": "string", "format": "duration"},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "ports": {"type": "array", "items": {"type": "object", "properties": {"port": {"type": "integer"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "nested": {"type": "object", "additionalProperties": {"type": "object", "properties": {"x": {"type": "boolean"}}}},
            "free": {"type": "object", "additionalProperties": true}
        })));
        assert_eq!(
            t,
            format!(
                "K{{apiVersion: string, at: google.protobuf.Timestamp, b: bool, d: double, \
                 day: google.protobuf.Timestamp, free: K.free{{}}, i: int, kind: string, \
                 labels: map(string, string), {META}, \
                 nested: map(string, K.nested.@elem{{x: bool}}), \
                 ports: list(K.ports.@idx{{port: int}}), raw: bytes, s: string, \
                 tags: list(string), ttl: google.protobuf.Duration}}"
            )
        );
    }

    #[test]
    fn int_or_string_is_dyn_and_quantities_are_hidden() {
        let doc = json!({"components": {"schemas": {
            "K": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object", "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}}},
                    "surge": {"allOf": [{"$ref": "#/components/schemas/IntOrString"}]},
                    "size": {"x-kubernetes-int-or-string": true},
                    "cpu": {"$ref": "#/components/schemas/Quantity"},
                    "limits": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/Quantity"}},
                    "all": {"type": "array", "items": {"$ref": "#/components/schemas/Quantity"}},
                    "anything": {"x-kubernetes-preserve-unknown-fields": true},
                    "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"known": {"type": "string"}}}
                },
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "K"}]
            },
            "IntOrString": {"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]},
            "Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]}
        }}});
        assert_eq!(
            shown(doc),
            "K{apiVersion: string, kind: string, metadata: K.metadata{generateName: string, name: string}, \
             open: K.open{known: string}, size: dyn, surge: dyn}"
        );
    }

    #[test]
    fn resource_roots_get_type_and_object_meta() {
        // metadata without generateName is replaced whole, labels and all.
        let t = shown(kind(json!({
            "kind": {"type": "string"},
            "metadata": {"type": "object", "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
            }},
            "spec": {"type": "object", "properties": {
                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object"}}},
                "plain": {"type": "object", "properties": {"spec": {"type": "object"}}}
            }}
        })));
        assert_eq!(
            t,
            format!(
                "K{{apiVersion: string, kind: string, {META}, spec: K.spec{{\
                 plain: K.spec.plain{{spec: K.spec.plain.spec{{}}}}, \
                 template: K.spec.template{{apiVersion: string, kind: string, \
                 metadata: K.spec.template.metadata{{generateName: string, name: string}}, \
                 spec: K.spec.template.spec{{}}}}}}}}"
            )
        );
    }

    #[test]
    fn property_names_are_escaped_and_keywords_found_plainly() {
        let t = shown(kind(json!({
            "x-flag": {"type": "boolean"},
            "namespace": {"type": "string"},
            "1bad": {"type": "string"},
            "in": {"type": "object", "properties": {"a.b": {"type": "integer"}}}
        })));
        assert_eq!(
            t,
            format!(
                "K{{__in__: K.__in__{{a__dot__b: int}}, __namespace__: string, apiVersion: string, \
                 in: K.__in__{{a__dot__b: int}}, kind: string, {META}, namespace: string, \
                 x__dash__flag: bool}}"
            )
        );
    }

    #[test]
    fn recursive_types_end_in_bare_objects() {
        let doc = json!({"components": {"schemas": {
            "Root": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"type": "object", "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}}},
                    "schema": {"$ref": "#/components/schemas/Props"}
                },
                "x-kubernetes-group-version-kind": [{"group": "g", "version": "v1", "kind": "Root"}]
            },
            "Props": {
                "type": "object",
                "properties": {
                    "type": {"type": "string"},
                    "properties": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/Props"}},
                    "not": {"allOf": [{"$ref": "#/components/schemas/Props"}]}
                }
            }
        }}});
        assert_eq!(
            shown(doc),
            "Root{apiVersion: string, kind: string, metadata: Root.metadata{generateName: string, name: string}, \
             schema: Root.schema{not: Root.schema.not{}, \
             properties: map(string, Root.schema.properties.@elem{}), type: string}}"
        );
    }

    #[test]
    fn schemas_without_a_type_are_not_exposed() {
        let doc = json!({"components": {"schemas": {"K": {
            "x-kubernetes-group-version-kind": [{"group": "g", "version": "v1", "kind": "K"}]
        }}}});
        assert_eq!(shown(doc), "none");
    }
}
