//! OpenAPI v3 structural schemas of Kubernetes kinds, as the API server publishes them
//! (`/openapi/v3/apis/<group>/<version>`) or as a CustomResourceDefinition declares them, with
//! `$ref`s resolved ([`parse`]); the CEL types kube-apiserver's type checker derives from them
//! ([`cel_types`]); and the `Object` types of apply configurations ([`apply`]).
//!
//! A [`Schema`] is a handle on one node of an immutable graph shared by the document's
//! schemas: recursive types (such as `JSONSchemaProps`) are cycles in the graph, so every
//! walk that follows children must guard itself (see [`Schema::component`]). The node keeps
//! what type checking and server-side apply merging need: the type, its format, children,
//! limits and Kubernetes' list, map and field markers.

mod apply;
mod cel_types;
pub(crate) mod escape;
mod parse;

use std::fmt;
use std::sync::Arc;

use serde_json::Value;

pub use apply::ApplyConfigurationTypes;
pub use cel_types::resource_type;
pub use escape::escape_field_name;
pub use parse::{schemas_from_crd, schemas_from_openapi};

/// A group, version and kind. `Display` writes it as Kubernetes' warnings do:
/// `apps/v1, Kind=Deployment`, and `/v1, Kind=Pod` for the core group. Ordered by group, then
/// version, then kind, as upstream sorts the kinds it checks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Gvk {
    /// The API group; empty for the core group.
    pub group: String,
    /// The version.
    pub version: String,
    /// The kind.
    pub kind: String,
}

impl Gvk {
    /// A kind from its parts.
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.to_string(),
            version: version.to_string(),
            kind: kind.to_string(),
        }
    }

    /// A kind from an `apiVersion` (`group/version`, or `version` for the core group).
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        Self::new(group, version, kind)
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}, Kind={}", self.group, self.version, self.kind)
    }
}

/// Why a document or CustomResourceDefinition yields no schemas.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// A schema is not a JSON object.
    #[error("{at}: a schema must be a JSON object")]
    NotAnObject {
        /// Where, as a JSON path into the document.
        at: String,
    },
    /// A `$ref` names no schema of the document.
    #[error("{at}: $ref {reference:?} names no schema under #/components/schemas/")]
    UnresolvedRef {
        /// Where, as a JSON path into the document.
        at: String,
        /// The reference as written.
        reference: String,
    },
    /// A CustomResourceDefinition lacks a field every served one has.
    #[error("the CustomResourceDefinition has no {field}")]
    CrdField {
        /// The missing field's path, e.g. `spec.names.kind`.
        field: &'static str,
    },
}

/// `x-kubernetes-list-type`: how server-side apply merges a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// A set of scalars, merged by value.
    Set,
    /// A list of objects merged by the `x-kubernetes-list-map-keys` fields.
    Map,
}

/// `x-kubernetes-map-type`: how server-side apply merges an object or map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapType {
    /// Replaced as a whole.
    Atomic,
    /// Merged key by key.
    Granular,
}

/// A link from a node to a child: in the same graph, or a node of another graph (a
/// CustomResourceDefinition's `metadata`, which is ObjectMeta of a built-in document).
#[derive(Clone, Debug)]
enum Link {
    Local(usize),
    Foreign(Schema),
}

/// `additionalProperties`: a boolean or a schema.
#[derive(Clone, Debug)]
enum Additional {
    Allowed(bool),
    Schema(Link),
}

/// One schema node as parsed.
#[derive(Clone, Debug, Default)]
struct Node {
    component: Option<String>,
    types: Vec<String>,
    format: String,
    properties: Properties,
    required: Vec<String>,
    items: Option<Link>,
    additional: Option<Additional>,
    nullable: bool,
    enum_values: Vec<Value>,
    default: Option<Value>,
    max_items: Option<i64>,
    max_length: Option<i64>,
    max_properties: Option<i64>,
    list_type: Option<ListType>,
    list_map_keys: Vec<String>,
    map_type: Option<MapType>,
    /// Whether `x-kubernetes-patch-strategy` merges lists (`merge`, `merge,retainKeys`).
    merge_strategy: bool,
    patch_merge_key: Option<String>,
    int_or_string: bool,
    preserve_unknown_fields: bool,
    embedded_resource: bool,
    /// Worked out from the fields above when the graph is built.
    apply_kind: ApplyKind,
    /// Worked out when the graph is built: see [`SchemaRef::may_hold_unkeyed_items`].
    unkeyed_items: bool,
}

/// The component kube-openapi treats as an untyped scalar.
const QUANTITY: &str = "io.k8s.apimachinery.pkg.api.resource.Quantity";
/// The component kube-openapi treats as untyped (atomic) data.
const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";

/// What a node holds as server-side apply reads its own declarations (kube-openapi's
/// conversion to structured-merge-diff's schema), worked out once when the graph is built
/// because merges and schema checks ask it of every value they walk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ApplyKind {
    /// No `type`: a scalar of any type, a list or a map.
    #[default]
    Any,
    /// `object`: a map or struct.
    Object,
    /// `array`: a list.
    Array,
    /// `integer` or `number`.
    Numeric,
    /// `boolean`.
    Boolean,
    /// `string` without a format or with format `byte`.
    String,
    /// A scalar of any type: a `Quantity`, a string of another format, an unknown type.
    Scalar,
    /// Untyped data (a `RawExtension`): a scalar, or a list or map replaced whole.
    Untyped,
}

impl Node {
    fn apply_kind(&self) -> ApplyKind {
        match self.component.as_deref() {
            Some(QUANTITY) => return ApplyKind::Scalar,
            Some(RAW_EXTENSION) => return ApplyKind::Untyped,
            _ => {}
        }
        match self.types.first().map(String::as_str).unwrap_or_default() {
            "" => ApplyKind::Any,
            "object" => ApplyKind::Object,
            "array" => ApplyKind::Array,
            "integer" | "number" => ApplyKind::Numeric,
            "boolean" => ApplyKind::Boolean,
            "string" => match self.format.as_str() {
                "" | "byte" => ApplyKind::String,
                _ => ApplyKind::Scalar,
            },
            _ => ApplyKind::Scalar,
        }
    }
}

/// A node's `properties`, in name order, with a short hash of each name beside it: a merge or
/// a schema check looks a field up for every member of the object it walks, and scanning
/// the hashes reads a few contiguous cache lines where comparing names reads each name.
#[derive(Clone, Debug, Default)]
struct Properties {
    /// By name.
    entries: Vec<(String, Link)>,
    /// `name_hash` of each entry's name, in the same order.
    hashes: Vec<u32>,
}

/// A hash of a property name (FNV-1a, 32 bits): names are short and come from the schema or
/// the object being walked, so anything that spreads them will do.
fn name_hash(name: &str) -> u32 {
    name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

impl Properties {
    /// The link of property `name`.
    fn get(&self, name: &str) -> Option<&Link> {
        let hash = name_hash(name);
        self.hashes
            .iter()
            .zip(&self.entries)
            .find(|(h, (k, _))| **h == hash && k == name)
            .map(|(_, (_, link))| link)
    }

    /// Sets property `name` (replacing one of that name).
    fn insert(&mut self, name: String, link: Link) {
        match self
            .entries
            .binary_search_by(|(k, _)| k.as_str().cmp(&name))
        {
            Ok(at) => self.entries[at].1 = link,
            Err(at) => {
                self.hashes.insert(at, name_hash(&name));
                self.entries.insert(at, (name, link));
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&String, &Link)> {
        self.entries.iter().map(|(k, l)| (k, l))
    }

    fn keys(&self) -> impl Iterator<Item = &String> {
        self.entries.iter().map(|(k, _)| k)
    }

    fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The nodes of one document (or CustomResourceDefinition version).
#[derive(Debug)]
struct Graph {
    nodes: Vec<Node>,
}

impl Graph {
    /// The graph of these nodes, with what is worked out of each node's fields.
    fn new(mut nodes: Vec<Node>) -> Self {
        for node in &mut nodes {
            node.apply_kind = node.apply_kind();
        }
        let unkeyed = unkeyed_items(&nodes);
        for (node, unkeyed) in nodes.iter_mut().zip(unkeyed) {
            node.unkeyed_items = unkeyed;
        }
        Graph { nodes }
    }
}

/// The node a link leads to, among `nodes` (those of the graph being built) or in another graph.
fn linked<'n>(nodes: &'n [Node], link: &'n Link) -> Option<&'n Node> {
    match link {
        Link::Local(id) => nodes.get(*id),
        Link::Foreign(schema) => Some(schema.node()),
    }
}

/// Whether a list of this node may hold, as an object encoded from its Go type holds it, an
/// item server-side apply cannot key: the list is associative (a set, or a list map keyed by
/// `x-kubernetes-list-map-keys` or a merge key) and its items may leave every key out (none
/// required, none defaulted), or are not scalars in a set.
fn lists_unkeyed_items(nodes: &[Node], node: &Node) -> bool {
    if !matches!(node.apply_kind, ApplyKind::Array | ApplyKind::Any) {
        return false;
    }
    let keys: &[String] = match node.list_type {
        Some(ListType::Atomic) => return false,
        Some(ListType::Set) => &[],
        Some(ListType::Map) => &node.list_map_keys,
        None if node.merge_strategy => node.patch_merge_key.as_slice(),
        None => return false,
    };
    let Some(item) = node.items.as_ref().and_then(|l| linked(nodes, l)) else {
        return true;
    };
    if keys.is_empty() {
        return !matches!(
            item.apply_kind,
            ApplyKind::String | ApplyKind::Numeric | ApplyKind::Boolean | ApplyKind::Scalar
        );
    }
    !keys.iter().any(|key| {
        item.required.contains(key)
            || (item.properties.get(key))
                .and_then(|l| linked(nodes, l))
                .is_some_and(|field| field.default.is_some())
    })
}

/// For each node, whether [`lists_unkeyed_items`] holds of it or of a node below it (through
/// properties, items and map values): marked where it holds, then spread to the nodes above
/// until nothing changes (the graph may be cyclic).
fn unkeyed_items(nodes: &[Node]) -> Vec<bool> {
    let mut marked: Vec<bool> = nodes
        .iter()
        .map(|n| lists_unkeyed_items(nodes, n))
        .collect();
    loop {
        let mut changed = false;
        for (id, node) in nodes.iter().enumerate() {
            if marked[id] {
                continue;
            }
            let additional = match &node.additional {
                Some(Additional::Schema(link)) => Some(link),
                _ => None,
            };
            let below = (node.properties.iter().map(|(_, l)| l))
                .chain(node.items.as_ref())
                .chain(additional)
                .any(|link| match link {
                    Link::Local(child) => marked.get(*child).copied().unwrap_or(true),
                    Link::Foreign(schema) => schema.node().unkeyed_items,
                });
            if below {
                marked[id] = true;
                changed = true;
            }
        }
        if !changed {
            return marked;
        }
    }
}

/// A schema node. Cheap to clone: a shared graph and an index.
#[derive(Clone)]
pub struct Schema {
    graph: Arc<Graph>,
    id: usize,
}

impl fmt::Debug for Schema {
    /// The node's own fields, not its children (the graph may be cyclic).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.node();
        f.debug_struct("Schema")
            .field("component", &n.component)
            .field("type", &n.types)
            .field("format", &n.format)
            .field("properties", &n.properties.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// What a node's `additionalProperties` says; `S` is the handle of the schema it may hold.
#[derive(Clone, Debug)]
pub enum AdditionalProperties<S = Schema> {
    /// `true` or `false`.
    Allowed(bool),
    /// The schema of every property not in `properties` (a map's values).
    Schema(S),
}

/// A schema node borrowed from its graph. Following a child from it costs nothing, where a
/// [`Schema`] clones the graph's `Arc`: walks that visit every member of an object (applying
/// a mutation) use it. Every accessor of [`Schema`] reads through it.
#[derive(Clone, Copy)]
pub struct SchemaRef<'g> {
    graph: &'g Arc<Graph>,
    id: usize,
}

impl fmt::Debug for SchemaRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.to_schema(), f)
    }
}

impl Schema {
    fn node(&self) -> &Node {
        self.as_ref().node()
    }

    /// This node, borrowed.
    pub fn as_ref(&self) -> SchemaRef<'_> {
        SchemaRef {
            graph: &self.graph,
            id: self.id,
        }
    }

    /// The name of the `#/components/schemas/` entry this node is (a `$ref` to it leads
    /// here), if any. A walk that meets a component it is already inside has met a cycle.
    pub fn component(&self) -> Option<&str> {
        self.as_ref().component()
    }

    /// The first declared `type` (`object`, `array`, `string`, `integer`, `number`,
    /// `boolean`), if any.
    pub fn type_name(&self) -> Option<&str> {
        self.as_ref().type_name()
    }

    /// Whether `type` includes `name` (it may be a list).
    pub fn has_type(&self, name: &str) -> bool {
        self.node().types.iter().any(|t| t == name)
    }

    /// `format`; empty when unset.
    pub fn format(&self) -> &str {
        self.as_ref().format()
    }

    /// `properties`, in name order.
    pub fn properties(&self) -> impl Iterator<Item = (&str, Schema)> {
        self.as_ref().properties().map(|(k, s)| (k, s.to_schema()))
    }

    /// The property `name`.
    pub fn property(&self, name: &str) -> Option<Schema> {
        self.as_ref().property(name).map(SchemaRef::to_schema)
    }

    /// `required`.
    pub fn required(&self) -> &[String] {
        &self.node().required
    }

    /// `items` (a single schema; tuple-style lists of schemas read as absent).
    pub fn items(&self) -> Option<Schema> {
        self.as_ref().items().map(SchemaRef::to_schema)
    }

    /// `additionalProperties`.
    pub fn additional_properties(&self) -> Option<AdditionalProperties> {
        self.as_ref().additional_properties().map(|a| match a {
            AdditionalProperties::Allowed(b) => AdditionalProperties::Allowed(b),
            AdditionalProperties::Schema(s) => AdditionalProperties::Schema(s.to_schema()),
        })
    }

    /// The schema of `additionalProperties` when it is one (the node is a map).
    pub fn additional_properties_schema(&self) -> Option<Schema> {
        match self.additional_properties()? {
            AdditionalProperties::Schema(s) => Some(s),
            AdditionalProperties::Allowed(_) => None,
        }
    }

    /// `nullable`.
    pub fn nullable(&self) -> bool {
        self.node().nullable
    }

    /// `enum`.
    pub fn enum_values(&self) -> &[Value] {
        &self.node().enum_values
    }

    /// `default`.
    pub fn default_value(&self) -> Option<&Value> {
        self.as_ref().default_value()
    }

    /// `maxItems`.
    pub fn max_items(&self) -> Option<i64> {
        self.node().max_items
    }

    /// `maxLength`.
    pub fn max_length(&self) -> Option<i64> {
        self.node().max_length
    }

    /// `maxProperties`.
    pub fn max_properties(&self) -> Option<i64> {
        self.node().max_properties
    }

    /// `x-kubernetes-list-type` (an unrecognised value reads as absent).
    pub fn list_type(&self) -> Option<ListType> {
        self.as_ref().list_type()
    }

    /// `x-kubernetes-list-map-keys`.
    pub fn list_map_keys(&self) -> &[String] {
        self.as_ref().list_map_keys()
    }

    /// `x-kubernetes-map-type` (an unrecognised value reads as absent).
    pub fn map_type(&self) -> Option<MapType> {
        self.as_ref().map_type()
    }

    /// `x-kubernetes-patch-merge-key`, if set.
    pub fn patch_merge_key(&self) -> Option<&str> {
        self.as_ref().patch_merge_key().map(String::as_str)
    }

    /// Whether the value is an int or a string: `x-kubernetes-int-or-string`, or the
    /// `int-or-string` format built-in kinds use.
    pub fn is_int_or_string(&self) -> bool {
        self.as_ref().is_int_or_string()
    }

    /// `x-kubernetes-preserve-unknown-fields`.
    pub fn preserves_unknown_fields(&self) -> bool {
        self.as_ref().preserves_unknown_fields()
    }

    /// `x-kubernetes-embedded-resource`.
    pub fn is_embedded_resource(&self) -> bool {
        self.node().embedded_resource
    }
}

impl<'g> SchemaRef<'g> {
    fn node(self) -> &'g Node {
        // Ids are assigned by the parser and always index the graph they came with.
        &self.graph.nodes[self.id]
    }

    fn follow(self, link: &'g Link) -> SchemaRef<'g> {
        match link {
            Link::Local(id) => SchemaRef {
                graph: self.graph,
                id: *id,
            },
            Link::Foreign(s) => s.as_ref(),
        }
    }

    /// This node as an owned handle.
    pub fn to_schema(self) -> Schema {
        Schema {
            graph: self.graph.clone(),
            id: self.id,
        }
    }

    /// See [`Schema::component`].
    pub fn component(self) -> Option<&'g str> {
        self.node().component.as_deref()
    }

    /// See [`Schema::type_name`].
    pub fn type_name(self) -> Option<&'g str> {
        self.node().types.first().map(String::as_str)
    }

    /// See [`Schema::format`].
    pub fn format(self) -> &'g str {
        &self.node().format
    }

    /// See [`Schema::properties`].
    pub fn properties(self) -> impl Iterator<Item = (&'g str, SchemaRef<'g>)> {
        self.node()
            .properties
            .iter()
            .map(move |(k, l)| (k.as_str(), self.follow(l)))
    }

    /// See [`Schema::required`].
    pub fn required(self) -> &'g [String] {
        &self.node().required
    }

    /// Whether the node declares any property.
    pub fn has_properties(self) -> bool {
        !self.node().properties.is_empty()
    }

    /// See [`Schema::property`].
    pub fn property(self, name: &str) -> Option<SchemaRef<'g>> {
        self.node().properties.get(name).map(|l| self.follow(l))
    }

    /// See [`Schema::items`].
    pub fn items(self) -> Option<SchemaRef<'g>> {
        self.node().items.as_ref().map(|l| self.follow(l))
    }

    /// See [`Schema::additional_properties`].
    pub fn additional_properties(self) -> Option<AdditionalProperties<SchemaRef<'g>>> {
        self.node().additional.as_ref().map(|a| match a {
            Additional::Allowed(b) => AdditionalProperties::Allowed(*b),
            Additional::Schema(l) => AdditionalProperties::Schema(self.follow(l)),
        })
    }

    /// See [`Schema::default_value`].
    pub fn default_value(self) -> Option<&'g Value> {
        self.node().default.as_ref()
    }

    /// See [`Schema::list_type`].
    pub fn list_type(self) -> Option<ListType> {
        self.node().list_type
    }

    /// See [`Schema::list_map_keys`].
    pub fn list_map_keys(self) -> &'g [String] {
        &self.node().list_map_keys
    }

    /// See [`Schema::map_type`].
    pub fn map_type(self) -> Option<MapType> {
        self.node().map_type
    }

    /// See [`Schema::patch_merge_key`].
    pub fn patch_merge_key(self) -> Option<&'g String> {
        self.node().patch_merge_key.as_ref()
    }

    /// See [`Schema::is_int_or_string`].
    pub fn is_int_or_string(self) -> bool {
        self.node().int_or_string || self.format() == "int-or-string"
    }

    /// See [`Schema::preserves_unknown_fields`].
    pub fn preserves_unknown_fields(self) -> bool {
        self.node().preserve_unknown_fields
    }

    /// What the node holds as server-side apply reads its own declarations.
    pub fn apply_kind(self) -> ApplyKind {
        self.node().apply_kind
    }

    /// Whether `x-kubernetes-patch-strategy` merges lists (`merge`, `merge,retainKeys`).
    pub fn merges_lists(self) -> bool {
        self.node().merge_strategy
    }

    /// Whether a value of this node, encoded from its Go type, may hold (here or below) an
    /// item of an associative list that server-side apply cannot key: one leaving out every
    /// key field where none is required or defaulted, or a map in a set. The only way such
    /// a value can fail apply's typed conversion.
    pub fn may_hold_unkeyed_items(self) -> bool {
        self.node().unkeyed_items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn properties_are_found_by_name_and_listed_in_name_order() {
        let mut props = Properties::default();
        for (i, name) in ["spec", "metadata", "kind", "apiVersion", "status", "a", ""]
            .into_iter()
            .enumerate()
        {
            props.insert(name.to_string(), Link::Local(i));
        }
        props.insert("kind".to_string(), Link::Local(9));
        let names: Vec<&str> = props.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["", "a", "apiVersion", "kind", "metadata", "spec", "status"]
        );
        let id = |name| match props.get(name) {
            Some(Link::Local(i)) => Some(*i),
            _ => None,
        };
        assert_eq!(id("spec"), Some(0));
        assert_eq!(id("kind"), Some(9));
        assert_eq!(id(""), Some(6));
        assert_eq!(id("statu"), None);
        assert_eq!(id("Kind"), None);
        assert_eq!(props.hashes.len(), props.entries.len());
    }

    #[test]
    fn apply_kinds_follow_kube_openapis_conversion() {
        let node = |component: Option<&str>, ty: &str, format: &str| Node {
            component: component.map(String::from),
            types: (!ty.is_empty())
                .then(|| ty.to_string())
                .into_iter()
                .collect(),
            format: format.to_string(),
            ..Node::default()
        };
        let cases = [
            (node(Some(QUANTITY), "string", ""), ApplyKind::Scalar),
            (node(Some(RAW_EXTENSION), "object", ""), ApplyKind::Untyped),
            (node(None, "", ""), ApplyKind::Any),
            (node(None, "object", ""), ApplyKind::Object),
            (node(None, "array", ""), ApplyKind::Array),
            (node(None, "integer", "int32"), ApplyKind::Numeric),
            (node(None, "number", ""), ApplyKind::Numeric),
            (node(None, "boolean", ""), ApplyKind::Boolean),
            (node(None, "string", "byte"), ApplyKind::String),
            (node(None, "string", "date-time"), ApplyKind::Scalar),
            (node(None, "null", ""), ApplyKind::Scalar),
        ];
        let expected: Vec<ApplyKind> = cases.iter().map(|(_, k)| *k).collect();
        let graph = Graph::new(cases.into_iter().map(|(n, _)| n).collect());
        let got: Vec<ApplyKind> = graph.nodes.iter().map(|n| n.apply_kind).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn lists_whose_items_may_leave_every_key_out_are_marked_with_the_nodes_above() {
        use serde_json::json;
        let r = |c: &str| json!({"$ref": format!("#/components/schemas/{c}")});
        let list = |markers: Value, item: Value| {
            let mut l = json!({"type": "array", "items": item});
            if let (Some(l), Value::Object(markers)) = (l.as_object_mut(), markers) {
                l.extend(markers);
            }
            l
        };
        let keyed_by = |key: &str| json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]});
        let set = || json!({"x-kubernetes-list-type": "set"});
        let doc = json!({"components": {"schemas": {
            "Root": {"type": "object", "properties": {
                "keyed": r("Keyed"), "loose": r("Loose"), "tree": r("Tree"), "chain": r("Chain")},
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Root"}]},
            "Keyed": {"type": "object", "properties": {
                "required": list(keyed_by("name"), r("Named")),
                "defaulted": list(keyed_by("port"), r("Port")),
                "scalars": list(set(), json!({"type": "string"})),
                "atomic": list(json!({}), r("Free"))}},
            "Named": {"type": "object", "required": ["name"],
                "properties": {"name": {"type": "string"}}},
            "Port": {"type": "object", "properties": {"port": {"type": "integer", "default": 80}}},
            "Free": {"type": "object", "properties": {"name": {"type": "string"}}},
            "Loose": {"type": "object", "properties": {"refs": list(json!({
                "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"}),
                r("Free"))}},
            "Tree": {"type": "object", "properties": {
                "children": list(json!({}), r("Tree")),
                "maps": list(set(), r("Free"))}},
            "Chain": {"type": "object", "properties": {"next": r("Chain"), "name": {"type": "string"}}}
        }}});
        let schemas = schemas_from_openapi(&doc).unwrap_or_default();
        let root = Schema::as_ref(&schemas[0].1);
        let marked = |path: &[&str]| {
            let at = path.iter().try_fold(root, |s, step| match *step {
                "[]" => s.items(),
                name => s.property(name),
            });
            at.map(SchemaRef::may_hold_unkeyed_items)
        };
        // Keyed by a required or defaulted field, a set of scalars, an atomic list: never.
        for path in [
            &["keyed"][..],
            &["keyed", "required"],
            &["keyed", "defaulted"],
            &["keyed", "scalars"],
            &["keyed", "atomic"],
            &["loose", "refs", "[]"],
            &["chain"],
            &["chain", "next", "next"],
        ] {
            assert_eq!(marked(path), Some(false), "{path:?}");
        }
        // Keyed by a merge key its items may leave out, a set of maps, and every node above
        // one (through a cycle too).
        for path in [
            &[][..],
            &["loose"],
            &["loose", "refs"],
            &["tree"],
            &["tree", "maps"],
            &["tree", "children"],
            &["tree", "children", "[]", "children", "[]"],
        ] {
            assert_eq!(marked(path), Some(true), "{path:?}");
        }
    }

    #[test]
    fn kinds_display_and_sort_as_upstream() {
        assert_eq!(
            Gvk::new("apps", "v1", "Deployment").to_string(),
            "apps/v1, Kind=Deployment"
        );
        assert_eq!(
            Gvk::from_api_version("v1", "Pod").to_string(),
            "/v1, Kind=Pod"
        );
        assert_eq!(
            Gvk::from_api_version("batch/v1", "Job"),
            Gvk::new("batch", "v1", "Job")
        );
        let mut kinds = [
            Gvk::new("apps", "v1", "Deployment"),
            Gvk::new("", "v1", "Pod"),
            Gvk::new("apps", "v1", "DaemonSet"),
            Gvk::new("", "v1", "ConfigMap"),
        ];
        kinds.sort();
        let shown: Vec<String> = kinds.iter().map(|k| k.kind.clone()).collect();
        assert_eq!(shown, ["ConfigMap", "Pod", "DaemonSet", "Deployment"]);
    }
}
