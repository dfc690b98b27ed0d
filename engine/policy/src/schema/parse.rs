//! JSON → schema graphs. An OpenAPI v3 document's `components.schemas`, with `$ref`s resolved
//! as kube-apiserver's schema resolver does (a `$ref`, or an `allOf` wrapping one, replaces
//! the whole referring schema); and the served versions of a CustomResourceDefinition,
//! completed as kube-apiserver publishes them (`apiVersion`, `kind` and `metadata` at the root
//! and in every embedded resource).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Additional, Graph, Gvk, Link, ListType, MapType, Node, Schema, SchemaError};

/// Where `$ref`s point.
const REF_PREFIX: &str = "#/components/schemas/";
/// The extension naming the kinds a component is the schema of.
const GVK_EXTENSION: &str = "x-kubernetes-group-version-kind";

/// One `/openapi/v3/apis/<group>/<version>` (or `/openapi/v3/api/v1`) document → the schema
/// of every component carrying `x-kubernetes-group-version-kind` (a component may name several
/// kinds), in component name order. A document without components has none.
pub fn schemas_from_openapi(doc: &Value) -> Result<Vec<(Gvk, Arc<Schema>)>, SchemaError> {
    let Some(components) = doc
        .pointer("/components/schemas")
        .and_then(Value::as_object)
    else {
        return Ok(Vec::new());
    };
    let index: HashMap<&str, usize> = components
        .keys()
        .enumerate()
        .map(|(i, name)| (name.as_str(), i))
        .collect();
    let mut builder = Builder {
        nodes: vec![Node::default(); components.len()],
        components: Some(Components {
            bodies: components,
            ids: &index,
        }),
    };
    let mut roots = Vec::new();
    for (i, (name, body)) in components.iter().enumerate() {
        let at = format!("components.schemas.{name}");
        let mut node = builder.body(body, &at)?;
        node.component = Some(name.clone());
        builder.nodes[i] = node;
        let kinds = gvks(body);
        if !kinds.is_empty() {
            // A component that is itself a reference stands for what it references.
            let root = match ref_of(body) {
                Some(r) => builder.component(r, &at)?,
                None => i,
            };
            roots.extend(kinds.into_iter().map(|k| (k, root)));
        }
    }
    let graph = Arc::new(Graph::new(builder.nodes));
    Ok(roots
        .into_iter()
        .map(|(gvk, id)| {
            let schema = Schema {
                graph: graph.clone(),
                id,
            };
            (gvk, Arc::new(schema))
        })
        .collect())
}

/// A CustomResourceDefinition (JSON, `apiextensions.k8s.io/v1`) → the schema of each served
/// version, as the API server publishes it: `apiVersion` and `kind` (strings) added at the
/// root and in every `x-kubernetes-embedded-resource` object, and `metadata` replaced there by
/// `object_meta` when given (the published schema references ObjectMeta; take it from any
/// built-in kind's `metadata` property). A version without a schema is a bare object.
pub fn schemas_from_crd(
    crd: &Value,
    object_meta: Option<&Schema>,
) -> Result<Vec<(Gvk, Arc<Schema>)>, SchemaError> {
    let text = |path: &str, field: &'static str| {
        crd.pointer(path)
            .and_then(Value::as_str)
            .ok_or(SchemaError::CrdField { field })
    };
    let group = text("/spec/group", "spec.group")?;
    let kind = text("/spec/names/kind", "spec.names.kind")?;
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .ok_or(SchemaError::CrdField {
            field: "spec.versions",
        })?;
    let mut out = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        if version.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let name = version
            .get("name")
            .and_then(Value::as_str)
            .ok_or(SchemaError::CrdField {
                field: "spec.versions[].name",
            })?;
        let mut builder = Builder {
            nodes: Vec::new(),
            components: None,
        };
        let root = match version.pointer("/schema/openAPIV3Schema") {
            Some(schema) => {
                let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
                let root = builder.link(schema, &at)?;
                builder.complete_resources(root, object_meta);
                root
            }
            None => builder.push(Node {
                types: vec!["object".into()],
                ..Node::default()
            }),
        };
        let schema = Schema {
            graph: Arc::new(Graph::new(builder.nodes)),
            id: root,
        };
        out.push((Gvk::new(group, name, kind), Arc::new(schema)));
    }
    Ok(out)
}

/// The kinds a component names in `x-kubernetes-group-version-kind` (malformed entries are
/// left out).
fn gvks(body: &Value) -> Vec<Gvk> {
    let Some(list) = body.get(GVK_EXTENSION).and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|e| {
            let part = |k: &str| e.get(k).and_then(Value::as_str);
            Some(Gvk::new(part("group")?, part("version")?, part("kind")?))
        })
        .collect()
}

/// The `$ref` of a schema, directly or inside `allOf` (kube-openapi wraps a reference in
/// `allOf` to give it a description or default of its own).
fn ref_of(v: &Value) -> Option<&str> {
    if let Some(r) = v.get("$ref").and_then(Value::as_str) {
        return Some(r);
    }
    v.get("allOf")?.as_array()?.iter().find_map(ref_of)
}

/// A document's components and their node ids.
#[derive(Clone, Copy)]
struct Components<'d> {
    bodies: &'d Map<String, Value>,
    ids: &'d HashMap<&'d str, usize>,
}

/// Builds one graph.
struct Builder<'d> {
    nodes: Vec<Node>,
    /// The document's components (none for a CustomResourceDefinition).
    components: Option<Components<'d>>,
}

impl Builder<'_> {
    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// The node id of the component `reference` names, following components that are
    /// themselves references.
    fn component(&self, reference: &str, at: &str) -> Result<usize, SchemaError> {
        let unresolved = || SchemaError::UnresolvedRef {
            at: at.to_string(),
            reference: reference.to_string(),
        };
        let Components { bodies, ids } = self.components.ok_or_else(unresolved)?;
        let mut current = reference;
        // A chain longer than the document has components is a loop.
        for _ in 0..=bodies.len() {
            let name = current
                .strip_prefix(REF_PREFIX)
                .map(|n| n.replace("~1", "/").replace("~0", "~"))
                .ok_or_else(unresolved)?;
            let body = bodies.get(&name).ok_or_else(unresolved)?;
            match ref_of(body) {
                Some(next) => current = next,
                None => return ids.get(name.as_str()).copied().ok_or_else(unresolved),
            }
        }
        Err(unresolved())
    }

    /// The node a schema value stands for: the referenced component, or a new node.
    fn link(&mut self, v: &Value, at: &str) -> Result<usize, SchemaError> {
        if let Some(r) = ref_of(v) {
            return self.component(r, at);
        }
        let node = self.body(v, at)?;
        Ok(self.push(node))
    }

    /// A schema value's own fields (its `$ref`, if any, is the caller's business).
    fn body(&mut self, v: &Value, at: &str) -> Result<Node, SchemaError> {
        let obj = v
            .as_object()
            .ok_or_else(|| SchemaError::NotAnObject { at: at.into() })?;
        let string = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default();
        let flag = |k: &str| obj.get(k).and_then(Value::as_bool).unwrap_or(false);
        let int = |k: &str| obj.get(k).and_then(Value::as_i64);
        let strings = |k: &str| -> Vec<String> {
            obj.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut node = Node {
            types: match obj.get("type") {
                Some(Value::String(t)) => vec![t.clone()],
                Some(Value::Array(_)) => strings("type"),
                _ => Vec::new(),
            },
            format: string("format").to_string(),
            required: strings("required"),
            nullable: flag("nullable"),
            enum_values: obj
                .get("enum")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            default: obj.get("default").cloned(),
            max_items: int("maxItems"),
            max_length: int("maxLength"),
            max_properties: int("maxProperties"),
            list_type: match string("x-kubernetes-list-type") {
                "atomic" => Some(ListType::Atomic),
                "set" => Some(ListType::Set),
                "map" => Some(ListType::Map),
                _ => None,
            },
            list_map_keys: strings("x-kubernetes-list-map-keys"),
            map_type: match string("x-kubernetes-map-type") {
                "atomic" => Some(MapType::Atomic),
                "granular" => Some(MapType::Granular),
                _ => None,
            },
            merge_strategy: matches!(
                string("x-kubernetes-patch-strategy"),
                "merge" | "merge,retainKeys"
            ),
            patch_merge_key: obj
                .get("x-kubernetes-patch-merge-key")
                .and_then(Value::as_str)
                .map(String::from),
            int_or_string: flag("x-kubernetes-int-or-string"),
            preserve_unknown_fields: flag("x-kubernetes-preserve-unknown-fields"),
            embedded_resource: flag("x-kubernetes-embedded-resource"),
            ..Node::default()
        };
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (name, prop) in props {
                let id = self.link(prop, &format!("{at}.properties.{name}"))?;
                node.properties.insert(name.clone(), Link::Local(id));
            }
        }
        if let Some(items) = obj.get("items").filter(|i| i.is_object()) {
            node.items = Some(Link::Local(self.link(items, &format!("{at}.items"))?));
        }
        node.additional = match obj.get("additionalProperties") {
            Some(Value::Bool(b)) => Some(Additional::Allowed(*b)),
            Some(ap) => {
                let id = self.link(ap, &format!("{at}.additionalProperties"))?;
                Some(Additional::Schema(Link::Local(id)))
            }
            None => None,
        };
        Ok(node)
    }

    /// Adds what the API server publishes beyond a CustomResourceDefinition's own schema:
    /// `apiVersion`, `kind` and `metadata` at the root and in every embedded resource.
    fn complete_resources(&mut self, root: usize, object_meta: Option<&Schema>) {
        let string = Node {
            types: vec!["string".into()],
            ..Node::default()
        };
        let string = Link::Local(self.push(string));
        let resources: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| i == root || self.nodes[i].embedded_resource)
            .collect();
        for id in resources {
            let node = &mut self.nodes[id];
            for field in ["apiVersion", "kind"] {
                node.properties.insert(field.into(), string.clone());
                if id != root && !node.required.iter().any(|r| r == field) {
                    node.required.push(field.into());
                }
            }
            if let Some(meta) = object_meta {
                node.properties
                    .insert("metadata".into(), Link::Foreign(meta.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schema::{AdditionalProperties, ListType, MapType};

    fn doc() -> Value {
        json!({"openapi": "3.0.0", "components": {"schemas": {
            "io.k8s.api.apps.v1.Deployment": {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "default": {}},
                    "spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}], "default": {}}
                },
                "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "Deployment", "version": "v1"}]
            },
            "io.k8s.api.apps.v1.DeploymentSpec": {
                "type": "object",
                "required": ["selector"],
                "properties": {
                    "replicas": {"type": "integer", "format": "int32"},
                    "strategy": {"type": "object", "properties": {
                        "maxSurge": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}
                    }},
                    "volumes": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}},
                        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"], "maxItems": 8},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                        "additionalProperties": {"type": "string", "default": ""}}
                }
            },
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
                "format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "generateName": {"type": "string"}}
            },
            "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions": {
                "type": "object",
                "x-kubernetes-group-version-kind": [
                    {"group": "", "kind": "DeleteOptions", "version": "v1"},
                    {"group": "apps", "kind": "DeleteOptions", "version": "v1"}
                ]
            }
        }}})
    }

    #[test]
    fn components_with_kinds_are_returned_with_refs_resolved() {
        let schemas = schemas_from_openapi(&doc()).unwrap();
        let kinds: Vec<String> = schemas.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(
            kinds,
            [
                "apps/v1, Kind=Deployment",
                "/v1, Kind=DeleteOptions",
                "apps/v1, Kind=DeleteOptions"
            ]
        );
        let deployment = &schemas[0].1;
        assert_eq!(
            deployment.component(),
            Some("io.k8s.api.apps.v1.Deployment")
        );
        let spec = deployment.property("spec").unwrap();
        assert_eq!(spec.component(), Some("io.k8s.api.apps.v1.DeploymentSpec"));
        assert_eq!(spec.required(), ["selector"]);
        let replicas = spec.property("replicas").unwrap();
        assert_eq!(
            (replicas.type_name(), replicas.format()),
            (Some("integer"), "int32")
        );
        let surge = spec
            .property("strategy")
            .and_then(|s| s.property("maxSurge"))
            .unwrap();
        assert!(surge.is_int_or_string());
        assert_eq!(surge.type_name(), None);
        let volumes = spec.property("volumes").unwrap();
        assert_eq!(volumes.list_type(), Some(ListType::Map));
        assert_eq!(volumes.list_map_keys(), ["name"]);
        assert_eq!(volumes.max_items(), Some(8));
        assert!(volumes.items().and_then(|i| i.property("name")).is_some());
        let selector = spec.property("selector").unwrap();
        assert_eq!(selector.map_type(), Some(MapType::Atomic));
        let Some(AdditionalProperties::Schema(value)) = selector.additional_properties() else {
            panic!("selector is a map")
        };
        assert_eq!(value.default_value(), Some(&json!("")));
    }

    #[test]
    fn broken_documents_are_errors() {
        let dangling = json!({"components": {"schemas": {"A": {
            "type": "object",
            "properties": {"b": {"$ref": "#/components/schemas/B"}}
        }}}});
        assert_eq!(
            schemas_from_openapi(&dangling).unwrap_err().to_string(),
            "components.schemas.A.properties.b: $ref \"#/components/schemas/B\" names no schema under #/components/schemas/"
        );
        let looping = json!({"components": {"schemas": {
            "A": {"$ref": "#/components/schemas/B"},
            "B": {"allOf": [{"$ref": "#/components/schemas/A"}]},
            "C": {"properties": {"a": {"$ref": "#/components/schemas/A"}}}
        }}});
        assert!(matches!(
            schemas_from_openapi(&looping),
            Err(SchemaError::UnresolvedRef { .. })
        ));
        let not_object =
            json!({"components": {"schemas": {"A": {"items": 3, "properties": {"x": 1}}}}});
        assert_eq!(
            schemas_from_openapi(&not_object).unwrap_err(),
            SchemaError::NotAnObject {
                at: "components.schemas.A.properties.x".into()
            }
        );
        assert_eq!(schemas_from_openapi(&json!({})).unwrap().len(), 0);
    }

    #[test]
    fn recursive_components_are_cycles_in_the_graph() {
        let doc = json!({"components": {"schemas": {"Props": {
            "type": "object",
            "properties": {
                "properties": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/Props"}},
                "items": {"$ref": "#/components/schemas/Props"}
            },
            "x-kubernetes-group-version-kind": [{"group": "g", "version": "v", "kind": "Props"}]
        }}}});
        let schemas = schemas_from_openapi(&doc).unwrap();
        let root = &schemas[0].1;
        let again = root
            .property("properties")
            .and_then(|p| p.additional_properties_schema())
            .and_then(|p| p.property("items"))
            .unwrap();
        assert_eq!(again.component(), Some("Props"));
    }

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com",
                "names": {"kind": "Widget", "plural": "widgets"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "metadata": {"type": "object"},
                            "spec": {"type": "object", "properties": {
                                "size": {"x-kubernetes-int-or-string": true},
                                "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                                    "x-kubernetes-preserve-unknown-fields": true}
                            }}
                        }
                    }}},
                    {"name": "v1beta1", "served": false, "storage": false},
                    {"name": "v0", "served": true, "storage": false}
                ]
            }
        })
    }

    #[test]
    fn crd_versions_are_completed_as_published() {
        let meta_doc = schemas_from_openapi(&doc()).unwrap();
        let meta = meta_doc[0].1.property("metadata").unwrap();
        let schemas = schemas_from_crd(&crd(), Some(&meta)).unwrap();
        let kinds: Vec<String> = schemas.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(
            kinds,
            ["example.com/v1, Kind=Widget", "example.com/v0, Kind=Widget"]
        );
        let v1 = &schemas[0].1;
        let names: Vec<&str> = v1.properties().map(|(n, _)| n).collect();
        assert_eq!(names, ["apiVersion", "kind", "metadata", "spec"]);
        assert_eq!(
            v1.property("metadata")
                .and_then(|m| m.component().map(String::from)),
            Some("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".to_string())
        );
        let template = v1
            .property("spec")
            .and_then(|s| s.property("template"))
            .unwrap();
        assert!(template.is_embedded_resource() && template.preserves_unknown_fields());
        let names: Vec<&str> = template.properties().map(|(n, _)| n).collect();
        assert_eq!(names, ["apiVersion", "kind", "metadata"]);
        assert_eq!(template.required(), ["apiVersion", "kind"]);
        let v0 = &schemas[1].1;
        assert_eq!(v0.type_name(), Some("object"));
        assert_eq!(v0.properties().count(), 0);

        let without_meta = schemas_from_crd(&crd(), None).unwrap();
        let metadata = without_meta[0].1.property("metadata").unwrap();
        assert_eq!(metadata.component(), None);
        assert_eq!(metadata.type_name(), Some("object"));
        assert_eq!(
            schemas_from_crd(&json!({"spec": {"group": "g"}}), None).unwrap_err(),
            SchemaError::CrdField {
                field: "spec.names.kind"
            }
        );
    }
}
