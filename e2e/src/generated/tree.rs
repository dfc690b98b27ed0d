//! CustomResourceDefinitions whose spec schema is a random tree: structs (granular or atomic),
//! maps (granular or atomic) of any node, lists of every list type (atomic, set, map with a
//! required key, none given), scalars with limits, int-or-string and preserve-unknown-fields
//! nodes; any node may be nullable, scalars may carry defaults at any depth. One is namespaced
//! (`Gizmo`), one cluster-scoped (`Widget`); values, JSON patch paths and apply configurations
//! reach every depth of the tree.

use fastrand::Rng;
use serde_json::{Map, Value, json};

use super::expressions::Ty;

/// How deep the tree nests below `spec`.
const DEPTH: u32 = 3;

/// The kind of one schema node.
#[derive(Clone, Debug)]
enum Kind {
    Str,
    Int,
    Num,
    Bool,
    IntOrString,
    Preserve,
    /// Properties in order; `atomic` sets `x-kubernetes-map-type: atomic`.
    Struct(Vec<(String, Node)>, bool),
    /// `additionalProperties`; `Some(atomic)` when the map type is given.
    Map(Box<Node>, Option<bool>),
    /// Items and the list type.
    List(Box<Node>, ListType),
}

/// `x-kubernetes-list-type`, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ListType {
    Unset,
    Atomic,
    Set,
    /// Items are structs whose first property, `name`, is the required key.
    Map,
}

/// One schema node.
#[derive(Clone, Debug)]
struct Node {
    kind: Kind,
    nullable: bool,
    default: Option<Value>,
}

/// How a path steps into a node.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Key,
    Item,
}

const NAMES: &[&str] = &["alpha", "beta", "gamma", "delta"];

fn scalar(rng: &mut Rng) -> Node {
    let kind = match rng.u8(..5) {
        0 => Kind::Str,
        1 => Kind::Int,
        2 => Kind::Num,
        3 => Kind::Bool,
        _ => Kind::IntOrString,
    };
    let default = match (&kind, rng.u8(..4)) {
        (Kind::Str, 0) => Some(json!("d")),
        (Kind::Int, 0) => Some(json!(1)),
        (Kind::Bool, 0) => Some(json!(true)),
        (Kind::IntOrString, 0) => Some(json!("50%")),
        _ => None,
    };
    Node {
        kind,
        nullable: rng.u8(..4) == 0,
        default,
    }
}

fn node(rng: &mut Rng, depth: u32) -> Node {
    if depth >= DEPTH {
        return if rng.u8(..6) == 0 {
            plain(Kind::Preserve)
        } else {
            scalar(rng)
        };
    }
    let mut n = match rng.u8(..10) {
        0..=2 => scalar(rng),
        3 => plain(Kind::Preserve),
        4 | 5 => plain(structure(rng, depth)),
        6 | 7 => plain(Kind::Map(
            Box::new(node(rng, depth + 1)),
            [None, Some(false), Some(true)][rng.usize(..3)],
        )),
        _ => {
            let list_type = [
                ListType::Unset,
                ListType::Atomic,
                ListType::Set,
                ListType::Map,
            ][rng.usize(..4)];
            let item = match list_type {
                ListType::Set => {
                    let mut s = scalar(rng);
                    if matches!(s.kind, Kind::Num | Kind::IntOrString) {
                        s.kind = Kind::Str;
                    }
                    s.default = None;
                    s.nullable = false;
                    s
                }
                ListType::Map => {
                    let mut props = properties(rng, depth + 1);
                    props.insert(0, ("name".into(), plain(Kind::Str)));
                    plain(Kind::Struct(props, false))
                }
                _ => node(rng, depth + 1),
            };
            plain(Kind::List(Box::new(item), list_type))
        }
    };
    n.nullable = rng.u8(..5) == 0;
    n
}

fn plain(kind: Kind) -> Node {
    Node {
        kind,
        nullable: false,
        default: None,
    }
}

/// One to three properties of a struct at `depth`.
fn properties(rng: &mut Rng, depth: u32) -> Vec<(String, Node)> {
    let mut names: Vec<&str> = NAMES.to_vec();
    rng.shuffle(&mut names);
    names[..1 + rng.usize(..3)]
        .iter()
        .map(|n| (n.to_string(), node(rng, depth + 1)))
        .collect()
}

fn structure(rng: &mut Rng, depth: u32) -> Kind {
    Kind::Struct(properties(rng, depth), rng.u8(..4) == 0)
}

impl Node {
    fn schema(&self) -> Value {
        let mut s = match &self.kind {
            Kind::Str => json!({"type": "string", "maxLength": 8}),
            Kind::Int => json!({"type": "integer", "minimum": -5, "maximum": 100}),
            Kind::Num => json!({"type": "number"}),
            Kind::Bool => json!({"type": "boolean"}),
            Kind::IntOrString => json!({"x-kubernetes-int-or-string": true}),
            Kind::Preserve => {
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
            }
            Kind::Struct(props, atomic) => {
                let properties: Map<String, Value> =
                    props.iter().map(|(k, n)| (k.clone(), n.schema())).collect();
                let mut s = json!({"type": "object", "properties": properties});
                if *atomic {
                    s["x-kubernetes-map-type"] = json!("atomic");
                }
                s
            }
            Kind::Map(value, map_type) => {
                let mut s = json!({"type": "object", "additionalProperties": value.schema()});
                if let Some(atomic) = map_type {
                    s["x-kubernetes-map-type"] = json!(if *atomic { "atomic" } else { "granular" });
                }
                s
            }
            Kind::List(item, list_type) => {
                let mut s = json!({"type": "array", "items": item.schema()});
                match list_type {
                    ListType::Unset => {}
                    ListType::Atomic => s["x-kubernetes-list-type"] = json!("atomic"),
                    ListType::Set => s["x-kubernetes-list-type"] = json!("set"),
                    ListType::Map => {
                        s["x-kubernetes-list-type"] = json!("map");
                        s["x-kubernetes-list-map-keys"] = json!(["name"]);
                        s["items"]["required"] = json!(["name"]);
                    }
                }
                s
            }
        };
        if self.nullable {
            s["nullable"] = json!(true);
        }
        if let Some(d) = &self.default {
            s["default"] = d.clone();
        }
        s
    }

    /// A value for this node, now and then of the wrong type or out of its limits.
    fn sample(&self, rng: &mut Rng) -> Value {
        if self.nullable && rng.u8(..6) == 0 {
            return Value::Null;
        }
        if rng.u8(..12) == 0 {
            return [json!("wrong"), json!(7), json!({}), json!(false)][rng.usize(..4)].clone();
        }
        match &self.kind {
            Kind::Str => json!(["a", "", "much-too-long", "é"][rng.usize(..4)]),
            Kind::Int => json!([0, 3, 101, -6][rng.usize(..4)]),
            Kind::Num => json!([0.5, 2.0, -1.25][rng.usize(..3)]),
            Kind::Bool => json!(rng.bool()),
            Kind::IntOrString => json!([json!(8080), json!("http")][rng.usize(..2)]),
            Kind::Preserve => json!([json!({"any": [1, "two"]}), json!({})][rng.usize(..2)]),
            Kind::Struct(props, _) => {
                let mut m = Map::new();
                for (k, n) in props {
                    if k == "name" || rng.u8(..3) > 0 {
                        m.insert(k.clone(), n.sample(rng));
                    }
                }
                Value::Object(m)
            }
            Kind::Map(value, _) => {
                let mut m = Map::new();
                for k in ["k", "a.b/c"].iter().take(rng.usize(..3)) {
                    m.insert((*k).into(), value.sample(rng));
                }
                Value::Object(m)
            }
            Kind::List(item, list_type) => {
                let len = rng.usize(..3);
                let mut items: Vec<Value> = (0..len).map(|_| item.sample(rng)).collect();
                if *list_type == ListType::Map {
                    for (i, v) in items.iter_mut().enumerate() {
                        if let Some(m) = v.as_object_mut() {
                            m.insert("name".into(), json!(format!("n{}", i % 2)));
                        }
                    }
                }
                Value::Array(items)
            }
        }
    }

    /// Every path below this node (not this node itself), up to the given depth, with the
    /// node each reaches.
    fn paths<'n>(&'n self, prefix: &[Step], out: &mut Vec<(Vec<Step>, &'n Node)>) {
        let mut step = |s: Step, n: &'n Node| {
            let mut p = prefix.to_vec();
            p.push(s);
            out.push((p.clone(), n));
            n.paths(&p, out);
        };
        match &self.kind {
            Kind::Struct(props, _) => {
                for (k, n) in props {
                    step(Step::Field(k.clone()), n);
                }
            }
            Kind::Map(value, _) => step(Step::Key, value),
            Kind::List(item, _) => step(Step::Item, item),
            _ => {}
        }
    }
}

/// What a run's two trees hold between them (see `Crd::new`), as their schemas' JSON text has it.
pub const MARKERS: &[&str] = &[
    "\"x-kubernetes-list-type\":\"map\"",
    "\"x-kubernetes-list-type\":\"set\"",
    "\"x-kubernetes-list-type\":\"atomic\"",
    "\"type\":\"array\",\"items\"",
    "\"x-kubernetes-map-type\":\"atomic\"",
    "\"x-kubernetes-map-type\":\"granular\"",
    "\"additionalProperties\"",
    "\"x-kubernetes-int-or-string\":true",
    "\"x-kubernetes-preserve-unknown-fields\":true",
    "\"nullable\":true",
    "\"default\"",
];

/// A generated CRD of a tree schema.
#[derive(Clone, Debug)]
pub struct TreeCrd {
    /// Its API group (the run's).
    pub group: String,
    /// `Gizmo` (namespaced) or `Widget` (cluster-scoped).
    pub kind: &'static str,
    /// Its resource name.
    pub plural: &'static str,
    /// Whether it is namespaced.
    pub namespaced: bool,
    spec: Node,
}

impl TreeCrd {
    /// The tree CRD `kind` of the run of `seed`, in the run's group.
    pub fn new(rng: &mut Rng, group: &str, namespaced: bool) -> Self {
        let (kind, plural) = if namespaced {
            ("Gizmo", "gizmos")
        } else {
            ("Widget", "widgets")
        };
        let mut props = properties(rng, 0);
        // Always a struct and a list below the top, so every run reaches depth.
        props.push(("deep".into(), plain(structure(rng, 1))));
        props.push((
            "entries".into(),
            plain(Kind::List(
                Box::new(plain(Kind::Struct(
                    vec![
                        ("name".into(), plain(Kind::Str)),
                        ("value".into(), node(rng, 2)),
                    ],
                    false,
                ))),
                ListType::Map,
            )),
        ));
        TreeCrd {
            group: group.to_string(),
            kind,
            plural,
            namespaced,
            spec: plain(Kind::Struct(props, false)),
        }
    }

    /// The schema markers (of [`MARKERS`]) the tree holds.
    pub fn markers(&self) -> Vec<&'static str> {
        let text = self.spec.schema().to_string();
        MARKERS
            .iter()
            .copied()
            .filter(|m| text.contains(m))
            .collect()
    }

    /// The CustomResourceDefinition object.
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{}", self.plural, self.group)},
            "spec": {
                "group": self.group,
                "names": {"kind": self.kind, "plural": self.plural,
                    "singular": self.kind.to_lowercase()},
                "scope": if self.namespaced { "Namespaced" } else { "Cluster" },
                "versions": [{
                    "name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": self.spec.schema(),
                        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                    }}},
                    "subresources": {"status": {}},
                }],
            },
        })
    }

    /// A spec, some values wrong or out of limits.
    pub fn sample_spec(&self, rng: &mut Rng) -> Value {
        self.spec.sample(rng)
    }

    /// Scalar fields reached through structs only, as CEL reads them below `object.spec`, with
    /// their types.
    pub fn typed_fields(&self) -> Vec<(Ty, String)> {
        let mut all = Vec::new();
        self.spec.paths(&[], &mut all);
        all.into_iter()
            .filter(|(p, _)| p.iter().all(|s| matches!(s, Step::Field(_))))
            .filter_map(|(p, n)| {
                let ty = match n.kind {
                    Kind::Str => Ty::Str,
                    Kind::Int => Ty::Int,
                    Kind::Num => Ty::Double,
                    Kind::Bool => Ty::Bool,
                    _ => return None,
                };
                let names: Vec<String> = p
                    .iter()
                    .map(|s| match s {
                        Step::Field(f) => f.clone(),
                        _ => String::new(),
                    })
                    .collect();
                Some((ty, names.join(".")))
            })
            .collect()
    }

    /// Whether a path crosses a defaulted node (kube-apiserver defaults again between in-tree
    /// mutations, a webhook cannot: docs/limitations.md).
    fn defaulted(&self, path: &[Step]) -> bool {
        let mut all = Vec::new();
        self.spec.paths(&[], &mut all);
        all.iter()
            .any(|(p, n)| n.default.is_some() && path.starts_with(p))
    }

    /// A JSON pointer (as a CEL string literal) to any node of the spec, with list items and
    /// map keys at index 0 and key `k`, or the end of a list; `removable` leaves out defaulted
    /// nodes.
    pub fn pointers(&self, removable: bool) -> Vec<String> {
        let mut all = Vec::new();
        self.spec.paths(&[], &mut all);
        all.iter()
            .filter(|(p, _)| !(removable && self.defaulted(p)))
            .flat_map(|(p, _)| {
                let mut text = String::from("/spec");
                for s in p {
                    text.push('/');
                    text.push_str(match s {
                        Step::Field(f) => f,
                        Step::Key => "k",
                        Step::Item => "0",
                    });
                }
                let mut out = vec![format!("\"{text}\"")];
                if p.last() == Some(&Step::Item) {
                    out.push(format!("\"{}-\"", text.trim_end_matches('0')));
                }
                out
            })
            .collect()
    }

    /// An apply configuration setting `value` (a CEL expression) at a random node of the spec,
    /// built through the typed objects (`Object.spec.a{…}`), list literals and map literals on
    /// the way; a list map's item always names its key.
    pub fn apply(&self, rng: &mut Rng, value: &str) -> String {
        let mut all = Vec::new();
        self.spec.paths(&[], &mut all);
        let all: Vec<_> = all
            .into_iter()
            .filter(|(p, _)| !self.defaulted(p))
            .collect();
        let Some((path, _)) = all.get(rng.usize(..all.len().max(1))) else {
            return "Object{}".into();
        };
        let inner = wrap(&self.spec, "Object.spec", path, value);
        format!("Object{{spec: {inner}}}")
    }
}

/// The CEL for `node` (typed `type_name`) holding `value` at `path` below it.
fn wrap(node: &Node, type_name: &str, path: &[Step], value: &str) -> String {
    let Some((first, rest)) = path.split_first() else {
        return value.to_string();
    };
    match (&node.kind, first) {
        (Kind::Struct(props, _), Step::Field(f)) => {
            let Some((_, child)) = props.iter().find(|(k, _)| k == f) else {
                return value.to_string();
            };
            let inner = wrap(child, &format!("{type_name}.{f}"), rest, value);
            // A list map's item names its key.
            let key = if f != "name" && props.first().is_some_and(|(k, _)| k == "name") {
                "name: \"n0\", "
            } else {
                ""
            };
            format!("{type_name}{{{key}{f}: {inner}}}")
        }
        (Kind::Map(child, _), Step::Key) => {
            format!("{{\"k\": {}}}", wrap(child, type_name, rest, value))
        }
        (Kind::List(child, _), Step::Item) => {
            if rest.is_empty() {
                format!("[{value}]")
            } else {
                format!("[{}]", wrap(child, type_name, rest, value))
            }
        }
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_reach_depth_and_every_list_type_and_apply_configurations_name_list_map_keys() {
        let mut kinds = std::collections::BTreeSet::new();
        for seed in 0..40 {
            let mut rng = Rng::with_seed(seed);
            let crd = TreeCrd::new(&mut rng, "g.example.com", seed % 2 == 0);
            let text = crd.object().to_string();
            for marker in [
                "\"x-kubernetes-list-type\":\"map\"",
                "\"x-kubernetes-list-type\":\"set\"",
                "\"x-kubernetes-list-type\":\"atomic\"",
                "\"x-kubernetes-map-type\":\"atomic\"",
                "\"x-kubernetes-map-type\":\"granular\"",
                "\"x-kubernetes-int-or-string\":true",
                "\"x-kubernetes-preserve-unknown-fields\":true",
                "\"nullable\":true",
                "\"default\"",
                "\"scope\":\"Cluster\"",
                "\"scope\":\"Namespaced\"",
            ] {
                if text.contains(marker) {
                    kinds.insert(marker);
                }
            }
            let deepest = crd
                .pointers(false)
                .iter()
                .map(|p| p.matches('/').count())
                .max();
            assert!(deepest >= Some(3), "seed {seed}: {:?}", crd.pointers(false));
            let apply = crd.apply(&mut Rng::with_seed(1), "null");
            assert!(apply.starts_with("Object{spec: Object.spec{"), "{apply}");
        }
        assert_eq!(kinds.len(), 11, "{kinds:?}");
        let mut rng = Rng::with_seed(3);
        let crd = TreeCrd::new(&mut rng, "g.example.com", true);
        let entries = (0..50)
            .map(|i| crd.apply(&mut Rng::with_seed(i), "1"))
            .find(|a| a.contains("entries: [Object") && a.contains("value: "))
            .expect("some apply configuration sets an entry's member");
        assert!(
            entries.contains("Object.spec.entries{name: \"n0\", value: "),
            "{entries}"
        );
    }
}
