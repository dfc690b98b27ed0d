//! An apply configuration merged into the object as kube-apiserver's mutating policies merge
//! it (structured-merge-diff's `Merge`, no field ownership kept): the configuration must fit
//! the kind's schema and, under upstream's semantics, set nothing atomic; the object is then
//! merged with it. Under celgate's opt-in server-side semantics atomic values are set or
//! replaced whole, as server-side apply does for the field manager that applies them.

use serde_json::Value;

use std::fmt::Write as _;

use super::json_patch::decode;
use super::merge::merge_into;
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

/// Merges `config` into `object`, whose kind's schema is `schema`, in place; `fits` says
/// whether `object` is known to fit the schema (it is checked when not, and is known to after
/// a merge). Returns whether the object changed. The error is upstream's text after
/// `error applying patch: `; the object is then unchanged.
pub(super) fn apply(
    schema: &Schema,
    object: &mut Value,
    fits: &mut bool,
    mut config: Value,
    semantics: ApplySemantics,
) -> Result<bool, String> {
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
    if !*fits {
        let errors = validate(&root, object, true);
        if !errors.is_empty() {
            return Err(format!(
                "failed to convert original object to typed object: {}",
                join_errors(&errors)
            ));
        }
        *fits = true;
    }
    // A merge of two values that fit the schema fits it too, so `fits` stays true.
    merge_into(&root, object, &config)
        .map_err(|errors| format!("failed to merge patch: {}", join_errors(&errors)))
}

/// Fields a strict decoding of a built-in kind rejects: members its schema does not declare,
/// as `unknown field "<path>"` (paths dotted, list items `[i]`). With `written`, only the
/// values at those JSON Pointers (and the lists on the way to them) are looked at: the
/// caller knows the rest of the object has none.
pub(super) fn unknown_fields(
    schema: &Schema,
    object: &Value,
    written: Option<&[&str]>,
) -> Vec<String> {
    let mut out = Vec::new();
    // As the patch library reads a pointer: its tokens are what follows its first `/`.
    let tokens: Vec<Vec<String>> = written
        .unwrap_or_default()
        .iter()
        .map(|p| p.split('/').skip(1).map(decode).collect())
        .collect();
    let within = match written {
        None => Within::All,
        Some(_) => Within::below(tokens.iter().map(Vec::as_slice).collect()),
    };
    walk_unknown(
        &Ty::root(schema),
        object,
        &mut String::new(),
        0,
        &mut out,
        &within,
    );
    out
}

/// The part of a value a walk looks at.
enum Within<'t> {
    /// All of it.
    All,
    /// The values at these token paths (relative to the value).
    Paths(Vec<&'t [String]>),
}

impl<'t> Within<'t> {
    /// The paths left, or all of the value when one of them ends here.
    fn below(paths: Vec<&'t [String]>) -> Self {
        if paths.iter().any(|p| p.is_empty()) {
            Within::All
        } else {
            Within::Paths(paths)
        }
    }

    /// What to look at below member `key` (any key, for a list's items); `None`: nothing.
    fn step(&self, key: Option<&str>) -> Option<Within<'t>> {
        match self {
            Within::All => Some(Within::All),
            Within::Paths(paths) => {
                let rest: Vec<&[String]> = paths
                    .iter()
                    .filter(|p| key.is_none_or(|k| p.first().is_some_and(|t| t == k)))
                    .map(|p| &p[1..])
                    .collect();
                (!rest.is_empty()).then(|| Within::below(rest))
            }
        }
    }
}

fn walk_unknown(
    ty: &Ty,
    v: &Value,
    path: &mut String,
    depth: usize,
    out: &mut Vec<String>,
    within: &Within<'_>,
) {
    if depth > super::typed::MAX_DEPTH {
        return;
    }
    let atom = ty.atom();
    match (v, &atom.map, &atom.list) {
        (Value::Object(map), Some(m), _) => {
            for (key, item) in map {
                let Some(below) = within.step(Some(key)) else {
                    continue;
                };
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match m.entry(key) {
                    Some(t) => walk_unknown(&t, item, path, depth + 1, out, &below),
                    None => out.push(format!("unknown field {:?}", path.as_str())),
                }
                path.truncate(len);
            }
        }
        (Value::Array(items), _, Some(list)) => {
            // Items move when one is added or removed: every item of a list on the way counts.
            let Some(below) = within.step(None) else {
                return;
            };
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                let _ = write!(path, "[{i}]");
                walk_unknown(&list.elem, item, path, depth + 1, out, &below);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};

    use super::{ApplySemantics, apply, unknown_fields};
    use crate::schema::{Schema, schemas_from_openapi};

    /// A Pod-like kind: granular labels, containers merged by name with atomic `args`, an
    /// atomic selector, a set of finalizers, ports keyed by port and protocol (protocol
    /// defaulted), an int-or-string, a quantity and a block preserving unknown fields.
    pub(crate) fn pod_schema() -> Arc<Schema> {
        let doc = json!({"components": {"schemas": {
            "Pod": {"type": "object", "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"type": "object", "properties": {
                    "name": {"type": "string"},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "finalizers": {"type": "array", "items": {"type": "string"},
                        "x-kubernetes-list-type": "set"}
                }},
                "spec": {"type": "object", "properties": {
                    "replicas": {"type": "integer"},
                    "selector": {"$ref": "#/components/schemas/Selector"},
                    "surge": {"type": "string", "format": "int-or-string"},
                    "memory": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"},
                    "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"mode": {"type": "string"}}},
                    "containers": {"$ref": "#/components/schemas/Containers"},
                    "initContainers": {"$ref": "#/components/schemas/Containers"},
                    "volumes": {"type": "array", "x-kubernetes-patch-strategy": "merge",
                        "x-kubernetes-patch-merge-key": "name",
                        "items": {"type": "object", "properties": {"name": {"type": "string"},
                            "path": {"type": "string"}}}}
                }}
            },
            "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Pod"}]},
            "Selector": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
            "Containers": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "image": {"type": "string"},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                        "items": {"type": "object", "properties": {
                            "containerPort": {"type": "integer"},
                            "protocol": {"type": "string", "default": "TCP"}}}}
                }}}
        }}});
        let schemas = schemas_from_openapi(&doc).expect("schema");
        schemas[0].1.clone()
    }

    /// The object every case starts from.
    pub(crate) fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["a"]},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                "containers": [{"name": "main", "image": "nginx", "args": ["-v"],
                    "ports": [{"containerPort": 80, "protocol": "TCP"}]}],
                "volumes": [{"name": "data", "path": "/d"}]}})
    }

    /// `apply` to a copy of `object` whose fit is not known, checking what it reports: whether
    /// the object changed, that it fits after a merge, and that an error leaves it unchanged.
    /// A second apply to the merged object, now known to fit, must give the same as a check.
    fn applied(
        schema: &Schema,
        object: &Value,
        config: Value,
        semantics: ApplySemantics,
    ) -> Result<Value, String> {
        let (mut out, mut fits) = (object.clone(), false);
        let got = apply(schema, &mut out, &mut fits, config, semantics);
        match got {
            Ok(changed) => {
                assert_eq!(changed, out != *object, "whether the object changed");
                assert!(fits, "a merged object fits its schema");
                Ok(out)
            }
            Err(e) => {
                assert_eq!(out, *object, "an error leaves the object unchanged");
                Err(e)
            }
        }
    }

    fn with(f: &dyn Fn(&mut Value)) -> Result<Value, String> {
        let mut p = pod();
        f(&mut p);
        Ok(p)
    }

    #[test]
    fn apply_configurations_merge_as_server_side_apply() {
        let schema = pod_schema();
        let cases: Vec<(&str, Value, Result<Value, String>)> = vec![
            ("a label is added, the others kept",
                json!({"metadata": {"labels": {"env": "prod"}}}),
                with(&|p| p["metadata"]["labels"]["env"] = json!("prod"))),
            ("a scalar is replaced", json!({"spec": {"replicas": 3}}),
                with(&|p| p["spec"]["replicas"] = json!(3))),
            ("apiVersion and kind are the object's", json!({"kind": "Other", "spec": {"replicas": 3}}),
                with(&|p| p["spec"]["replicas"] = json!(3))),
            ("a container is merged by name",
                json!({"spec": {"containers": [{"name": "main", "image": "nginx:2"}]}}),
                with(&|p| p["spec"]["containers"][0]["image"] = json!("nginx:2"))),
            ("a new container is appended",
                json!({"spec": {"containers": [{"name": "sidecar", "image": "envoy"}]}}),
                with(&|p| p["spec"]["containers"].as_array_mut().unwrap()
                    .push(json!({"name": "sidecar", "image": "envoy"})))),
            ("a new container before a shared one goes before it",
                json!({"spec": {"containers": [{"name": "first"}, {"name": "main"}]}}),
                with(&|p| p["spec"]["containers"].as_array_mut().unwrap()
                    .insert(0, json!({"name": "first"})))),
            ("an init container without args merges",
                json!({"spec": {"initContainers": [{"name": "init", "image": "busybox"}]}}),
                with(&|p| p["spec"]["initContainers"] = json!([{"name": "init", "image": "busybox"}]))),
            ("an init container with args is rejected",
                json!({"spec": {"initContainers": [{"name": "init", "args": ["x"]}]}}),
                Err("invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.initContainers[0].args".into())),
            ("every atomic path is named",
                json!({"spec": {"selector": {"matchLabels": {"a": "b"}},
                    "containers": [{"name": "main", "args": []}]}}),
                Err("invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.containers[0].args, .spec.selector".into())),
            ("a port keyed with its defaulted protocol merges into the existing one",
                json!({"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 80}]}]}}),
                Ok(pod())),
            ("a set merges by value",
                json!({"metadata": {"finalizers": ["b", "a"]}}),
                with(&|p| p["metadata"]["finalizers"] = json!(["b", "a"]))),
            ("a set adds new values after the shared ones",
                json!({"metadata": {"finalizers": ["a", "c"]}}),
                with(&|p| p["metadata"]["finalizers"] = json!(["a", "c"]))),
            ("a list with a merge patch strategy merges by its key",
                json!({"spec": {"volumes": [{"name": "data", "path": "/e"}]}}),
                with(&|p| p["spec"]["volumes"][0]["path"] = json!("/e"))),
            ("int-or-string and quantities take either",
                json!({"spec": {"surge": 2, "memory": "1Gi"}}),
                with(&|p| { p["spec"]["surge"] = json!(2); p["spec"]["memory"] = json!("1Gi"); })),
            ("unknown fields are kept where the schema preserves them",
                json!({"spec": {"config": {"mode": "a", "extra": {"deep": [1]}}}}),
                with(&|p| p["spec"]["config"] = json!({"mode": "a", "extra": {"deep": [1]}}))),
            ("an undeclared field",
                json!({"spec": {"replicasx": 1}}),
                Err("failed to convert patch object to typed object: .spec.replicasx: field not declared in schema".into())),
            ("a string for an integer",
                json!({"spec": {"replicas": "3"}}),
                Err("failed to convert patch object to typed object: .spec.replicas: expected numeric (int or float), got string".into())),
            ("an integer for a string",
                json!({"metadata": {"labels": {"a": 1}}}),
                Err("failed to convert patch object to typed object: .metadata.labels.a: expected string, got &value.valueUnstructured{Value:1}".into())),
            ("duplicate keys in the configuration",
                json!({"spec": {"containers": [{"name": "a"}, {"name": "a"}]}}),
                Err("failed to convert patch object to typed object: .spec.containers: duplicate entries for key [name=\"a\"]".into())),
            ("a list-map item without its key",
                json!({"spec": {"containers": [{"image": "x"}]}}),
                Err("failed to convert patch object to typed object: .spec.containers: element 0: associative list with keys has an element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)".into())),
        ];
        for (name, config, want) in cases {
            let got = applied(&schema, &pod(), config.clone(), ApplySemantics::Upstream);
            assert_eq!(got, want, "{name}");
            // Applying the same configuration again changes nothing.
            if let Ok(once) = got {
                let twice = applied(&schema, &once, config, ApplySemantics::Upstream);
                assert_eq!(twice, Ok(once), "{name}, twice");
            }
        }
    }

    #[test]
    fn unknown_fields_are_found_everywhere_or_where_a_patch_wrote() {
        let schema = pod_schema();
        let mut object = pod();
        object["metadata"]["labelz"] = json!({});
        object["spec"]["containers"][0]["portz"] = json!(1);
        object["spec"]["volumes"][0]["sizez"] = json!(1);
        assert_eq!(
            unknown_fields(&schema, &object, None),
            [
                "unknown field \"metadata.labelz\"",
                "unknown field \"spec.containers[0].portz\"",
                "unknown field \"spec.volumes[0].sizez\""
            ]
        );
        // Only below the pointers written (every item of a list on the way), decoded.
        assert_eq!(
            unknown_fields(
                &schema,
                &object,
                Some(&["/spec/containers/-", "/spec/volumes/0/name"])
            ),
            ["unknown field \"spec.containers[0].portz\""]
        );
        object["metadata"]["a/b"] = json!({"c": 1});
        assert_eq!(
            unknown_fields(&schema, &object, Some(&["/metadata/a~1b/c"])),
            ["unknown field \"metadata.a/b\""]
        );
        assert_eq!(
            unknown_fields(&schema, &object, Some(&[])),
            Vec::<String>::new()
        );
        assert_eq!(unknown_fields(&schema, &object, Some(&[""])).len(), 4);
    }

    #[test]
    fn server_side_semantics_set_atomic_values_whole() {
        let schema = pod_schema();
        let config = json!({"spec": {"selector": {"matchLabels": {"tier": "a"}},
            "containers": [{"name": "main", "args": ["-q"]}],
            "initContainers": [{"name": "init", "args": ["x"]}]}});
        let want = with(&|p| {
            p["spec"]["selector"] = json!({"matchLabels": {"tier": "a"}});
            p["spec"]["containers"][0]["args"] = json!(["-q"]);
            p["spec"]["initContainers"] = json!([{"name": "init", "args": ["x"]}]);
        });
        let got = applied(&schema, &pod(), config.clone(), ApplySemantics::ServerSide);
        assert_eq!(got, want);
        let once = got.unwrap_or_default();
        assert_eq!(
            applied(&schema, &once, config, ApplySemantics::ServerSide),
            Ok(once.clone())
        );
        assert_eq!(
            ApplySemantics::from_annotation(Some("server-side")),
            ApplySemantics::ServerSide
        );
        assert_eq!(
            ApplySemantics::from_annotation(Some("other")),
            ApplySemantics::Upstream
        );
    }
}
