//! A CustomResourceDefinition made from a seed: the kind `Gadget` in a group named after the
//! seed (so CRDs of different runs never clash), with a subset of spec fields, each carrying
//! schema markers (list types, map types, int-or-string, nullable, defaults, limits,
//! preserve-unknown-fields), and `status` and `scale` subresources.

use fastrand::Rng;
use serde_json::{Map, Value, json};

use super::expressions::Ty;
use super::requests::Target;
use super::tree::{MARKERS, TreeCrd};

/// One spec field: its name, its schema, the CEL type a policy reads it as (none when the
/// type is dynamic), and a value maker.
struct Field {
    name: &'static str,
    schema: fn() -> Value,
    ty: Option<Ty>,
    sample: fn(&mut Rng) -> Value,
}

const FIELDS: &[Field] = &[
    Field {
        name: "size",
        schema: || json!({"type": "integer", "minimum": 0, "maximum": 1000}),
        ty: Some(Ty::Int),
        sample: |rng| json!([0, 3, 1000, 1001, -1][rng.usize(..5)]),
    },
    Field {
        name: "title",
        schema: || json!({"type": "string", "maxLength": 12}),
        ty: Some(Ty::Str),
        sample: |rng| json!(["a", "", "é日本", "much-too-long-title"][rng.usize(..4)]),
    },
    Field {
        name: "ratio",
        schema: || json!({"type": "number"}),
        ty: Some(Ty::Double),
        sample: |rng| one(rng, vec![json!(0.5), json!(2), json!(-1.25)]),
    },
    Field {
        name: "enabled",
        schema: || json!({"type": "boolean"}),
        ty: Some(Ty::Bool),
        sample: |rng| json!(rng.bool()),
    },
    Field {
        name: "tags",
        schema: || json!({"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}),
        ty: Some(Ty::StrList),
        sample: |rng| one(rng, vec![json!(["a", "b"]), json!([]), json!(["x"])]),
    },
    Field {
        name: "args",
        schema: || json!({"type": "array", "items": {"type": "string"}}),
        ty: Some(Ty::StrList),
        sample: |rng| one(rng, vec![json!(["--v=2"]), json!([]), json!(["a", "a"])]),
    },
    Field {
        name: "ports",
        schema: || {
            json!({"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"}, "port": {"type": "integer"}}}})
        },
        ty: None,
        sample: |rng| {
            one(
                rng,
                vec![
                    json!([{"name": "http", "port": 80}]),
                    json!([]),
                    json!([{"name": "a"}, {"name": "b", "port": 2}]),
                ],
            )
        },
    },
    Field {
        name: "settings",
        schema: || json!({"type": "object", "additionalProperties": {"type": "string"}}),
        ty: Some(Ty::StrMap),
        sample: |rng| {
            one(
                rng,
                vec![json!({"k": "v"}), json!({}), json!({"a.b/c": "x y"})],
            )
        },
    },
    Field {
        name: "selector",
        schema: || {
            json!({"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}})
        },
        ty: None,
        sample: |rng| one(rng, vec![json!({"matchLabels": {"app": "a"}}), json!({})]),
    },
    Field {
        name: "port",
        schema: || json!({"x-kubernetes-int-or-string": true}),
        ty: None,
        sample: |rng| one(rng, vec![json!(8080), json!("http")]),
    },
    Field {
        name: "note",
        schema: || json!({"type": "string", "nullable": true}),
        ty: Some(Ty::Str),
        sample: |rng| one(rng, vec![Value::Null, json!("n")]),
    },
    Field {
        name: "mode",
        schema: || json!({"type": "string", "default": "auto", "enum": ["auto", "manual"]}),
        ty: Some(Ty::Str),
        sample: |rng| json!(["auto", "manual", "other"][rng.usize(..3)]),
    },
    Field {
        name: "extra",
        schema: || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        ty: None,
        sample: |rng| one(rng, vec![json!({"any": [1, "two"]}), json!({})]),
    },
    Field {
        name: "nested",
        schema: || {
            json!({"type": "object", "properties": {
                "inner": {"type": "object", "additionalProperties": {"type": "string"}},
                "counts": {"type": "object", "x-kubernetes-map-type": "atomic",
                    "additionalProperties": {"type": "integer"}},
                "depth": {"type": "object", "properties": {
                    "leaf": {"type": "string", "default": "d"},
                    "maybe": {"type": "string", "nullable": true}}},
                "items": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["key"],
                    "items": {"type": "object", "required": ["key"], "properties": {
                        "key": {"type": "string"},
                        "values": {"type": "object", "additionalProperties": {"type": "string"}}}}}}})
        },
        ty: None,
        sample: |rng| {
            one(
                rng,
                vec![
                    json!({"inner": {"a": "b"}, "depth": {}}),
                    json!({}),
                    json!({"counts": {"x": 1}, "items": [{"key": "k", "values": {"v": "w"}}]}),
                ],
            )
        },
    },
];

/// The members of the `nested` field's struct a mutation may set.
pub const NESTED_MEMBERS: &[&str] = &["inner", "counts", "depth", "items"];

/// One of `options`.
fn one(rng: &mut Rng, mut options: Vec<Value>) -> Value {
    let i = rng.usize(..options.len());
    options.swap_remove(i)
}

/// The generated CRDs of one run: `Gadget` (its fields chosen from a fixed set), the tree CRDs
/// `Gizmo` (namespaced) and `Widget` (cluster-scoped), all in one group.
#[derive(Clone, Debug)]
pub struct Crd {
    /// Its API group.
    pub group: String,
    fields: Vec<usize>,
    gizmo: TreeCrd,
    widget: TreeCrd,
}

impl Crd {
    /// The CRD of seed `seed`: `size` (the scale's replicas) and about two thirds of the others.
    pub fn new(rng: &mut Rng, seed: u64) -> Self {
        let fields = (0..FIELDS.len())
            .filter(|&i| FIELDS[i].name == "size" || rng.u8(..3) < 2)
            .collect();
        let group = format!("s{seed:x}.fuzz.example.com");
        // Trees drawn again (a bounded number of times) until the two hold every schema
        // marker between them, so that every run, however short, has each.
        let mut trees = (
            TreeCrd::new(rng, &group, true),
            TreeCrd::new(rng, &group, false),
        );
        for _ in 0..200 {
            let mut held = trees.0.markers();
            held.extend(trees.1.markers());
            if MARKERS.iter().all(|m| held.contains(m)) {
                break;
            }
            trees = (
                TreeCrd::new(rng, &group, true),
                TreeCrd::new(rng, &group, false),
            );
        }
        Crd {
            gizmo: trees.0,
            widget: trees.1,
            group,
            fields,
        }
    }

    /// The tree CRD of `target` (`Widget` for any target but `Gizmo`).
    pub fn tree(&self, target: Target) -> &TreeCrd {
        if target == Target::Gizmo {
            &self.gizmo
        } else {
            &self.widget
        }
    }

    /// The CRD objects `target` needs.
    pub fn objects_for(&self, target: Target) -> Vec<Value> {
        match target {
            Target::Gadget | Target::GadgetStatus | Target::GadgetScale => vec![self.object()],
            Target::Gizmo | Target::Widget | Target::WidgetStatus => {
                vec![self.tree(target).object()]
            }
            _ => Vec::new(),
        }
    }

    /// The `Gadget` CustomResourceDefinition object.
    pub fn object(&self) -> Value {
        let properties: Map<String, Value> = self
            .fields
            .iter()
            .map(|&i| (FIELDS[i].name.to_string(), (FIELDS[i].schema)()))
            .collect();
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("gadgets.{}", self.group)},
            "spec": {
                "group": self.group,
                "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget"},
                "scope": "Namespaced",
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": properties},
                        "status": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    }}},
                    "subresources": {"status": {}, "scale": {
                        "specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                }],
            },
        })
    }

    /// The spec fields a policy can read with a static type: (type, field name).
    pub fn typed_fields(&self) -> Vec<(Ty, &'static str)> {
        self.fields
            .iter()
            .filter_map(|&i| FIELDS[i].ty.map(|t| (t, FIELDS[i].name)))
            .collect()
    }

    /// The spec fields with a default in the schema.
    pub fn defaulted_fields(&self) -> Vec<&'static str> {
        self.fields
            .iter()
            .filter(|&&i| (FIELDS[i].schema)().get("default").is_some())
            .map(|&i| FIELDS[i].name)
            .collect()
    }

    /// All spec field names.
    pub fn field_names(&self) -> Vec<&'static str> {
        self.fields.iter().map(|&i| FIELDS[i].name).collect()
    }

    /// A spec with some of the fields, some values outside their limits.
    pub fn sample_spec(&self, rng: &mut Rng) -> Value {
        let mut spec = Map::new();
        for &i in &self.fields {
            if rng.u8(..4) < 3 {
                spec.insert(FIELDS[i].name.to_string(), (FIELDS[i].sample)(rng));
            }
        }
        Value::Object(spec)
    }

    /// A value for spec field `name` (Null for an unknown name).
    pub fn sample_field(&self, rng: &mut Rng, name: &str) -> Value {
        FIELDS
            .iter()
            .find(|f| f.name == name)
            .map_or(Value::Null, |f| (f.sample)(rng))
    }
}
