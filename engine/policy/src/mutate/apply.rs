//! An apply configuration merged into the object as kube-apiserver's mutating policies merge
//! it (structured-merge-diff's `Merge`, no field ownership kept): the configuration must fit
//! the kind's schema and, under upstream's semantics, set nothing atomic; the object is then
//! merged with it. Under celgate's opt-in server-side semantics atomic values are set or
//! replaced whole, as server-side apply does for the field manager that applies them.

use serde_json::Value;

use std::fmt::Write as _;

use super::go_value::Converted;
use super::granular;
use super::merge::merge_into;
use super::touched::Writes;
use super::typed::{Fit, Ty, Within, atomic_paths, join_errors, validate, validate_config};
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

/// Why an apply configuration could not be merged, worded as upstream words it (after
/// `error applying patch: `); each holds structured-merge-diff's joined path errors.
#[derive(Debug, thiserror::Error)]
pub(super) enum ApplyError {
    /// The configuration does not fit the kind's schema.
    #[error("failed to convert patch object to typed object: {0}")]
    Config(String),
    /// The configuration sets atomic values (upstream's semantics), at these paths.
    #[error("invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {0}")]
    Atomic(String),
    /// The object does not fit the kind's schema.
    #[error("failed to convert original object to typed object: {0}")]
    Object(String),
    /// The merge itself failed.
    #[error("failed to merge patch: {0}")]
    Merge(String),
    /// kube-apiserver's apply has no typed model of this kind (a `Scale`, a connection's
    /// options), shown as Go shows a group/version/kind (`autoscaling/v1, Kind=Scale`).
    #[error("failed to convert patch object to typed object: no corresponding type for {0}")]
    NoType(String),
}

/// Whether `object` is an `autoscaling/v1` `Scale`, which kube-apiserver's apply has no typed
/// model of (celgate's server-side opt-in applies to it all the same).
pub(super) fn is_scale(object: &Value) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some("autoscaling/v1")
        && object.get("kind").and_then(Value::as_str) == Some("Scale")
}

/// What a merge did.
pub(super) struct Merged {
    /// Whether the object changed.
    pub(super) changed: bool,
    /// Whether the configuration set only strings in granular structs and maps.
    pub(super) strings_only: bool,
}

/// Merges `config` into `object`, whose kind's schema is `schema`, in place; `foreign` marks
/// the Go values in `config` the typed conversion refuses; `fit` is what is known of whether
/// `object` fits the schema (what is not known is checked; after a merge it fits), and
/// `writes` is told where the merge writes before it does. Returns whether the object
/// changed, and whether the configuration set only strings (see [`granular`]). On error the
/// object is unchanged.
pub(super) fn apply(
    schema: &Schema,
    object: &mut Value,
    fit: &mut Fit,
    (config, foreign): Converted,
    semantics: ApplySemantics,
    writes: &mut Writes,
) -> Result<Merged, ApplyError> {
    if semantics == ApplySemantics::Upstream {
        if is_scale(object) {
            return Err(ApplyError::NoType("autoscaling/v1, Kind=Scale".into()));
        }
        if let Some(kind) = super::connect_options::untyped_kind(object) {
            return Err(ApplyError::NoType(kind));
        }
    }
    let root = Ty::root(schema);
    // Most configurations set strings in granular structs and maps: such a one fits the
    // schema and sets nothing atomic, which the general checks would find at more cost, and
    // its merge is worked out as it is recognised.
    let granular = match foreign {
        None => match granular::plan(&root, object, &config) {
            Some(places) => {
                check_object(&root, object, fit)?;
                for (path, old) in &places {
                    writes.before_strings(path, *old);
                }
                true
            }
            None => false,
        },
        Some(_) => false,
    };
    if !granular {
        return general(&root, object, fit, (config, foreign), semantics, writes);
    }
    Ok(Merged {
        changed: granular::perform(object, config),
        strings_only: true,
    })
}

/// The general way: the configuration checked against the schema (and, under upstream's
/// semantics, for atomic values), the object checked where not known to fit, then merged.
/// Kept out of line: most configurations take the granular way, whose code stays compact.
#[inline(never)]
fn general(
    root: &Ty,
    object: &mut Value,
    fit: &mut Fit,
    (mut config, mut foreign): Converted,
    semantics: ApplySemantics,
    writes: &mut Writes,
) -> Result<Merged, ApplyError> {
    // The configuration is of the object's kind, whatever it says.
    if let Value::Object(c) = &mut config {
        for field in ["apiVersion", "kind"] {
            match object.get(field) {
                Some(v) => c.insert(field.to_string(), v.clone()),
                None => c.remove(field),
            };
            if let Some(f) = &mut foreign {
                f.forget(field);
            }
        }
    }
    let errors = validate_config(root, &config, foreign.as_ref());
    if !errors.is_empty() {
        return Err(ApplyError::Config(join_errors(&errors)));
    }
    if semantics == ApplySemantics::Upstream {
        let atomics = atomic_paths(root, &config);
        if !atomics.is_empty() {
            return Err(ApplyError::Atomic(atomics.join(", ")));
        }
    }
    check_object(root, object, fit)?;
    // A merge of two values that fit the schema fits it too.
    match merge_into(root, object, &config, writes) {
        Ok(changed) => Ok(Merged {
            changed,
            strings_only: false,
        }),
        Err(errors) => Err(ApplyError::Merge(join_errors(&errors))),
    }
}

/// Checks that `object` fits the schema where `fit` does not say it does; then it does.
fn check_object(root: &Ty, object: &Value, fit: &mut Fit) -> Result<(), ApplyError> {
    let unchecked = match fit {
        Fit::Fits => None,
        Fit::Unknown => Some((Within::All, false)),
        Fit::FitsBut(written) => Some((written.within(), false)),
        Fit::Received(written) => Some((written.within(), true)),
    };
    if let Some((within, unkeyed_elsewhere)) = unchecked {
        let errors = validate(root, object, true, &within, unkeyed_elsewhere);
        if !errors.is_empty() {
            return Err(ApplyError::Object(join_errors(&errors)));
        }
        *fit = Fit::Fits;
    }
    Ok(())
}

/// Fields a strict decoding of a built-in kind rejects: members its schema does not declare,
/// as `unknown field "<path>"` (paths dotted, list items `[i]`), looked at `within` the object
/// (the caller knows the rest has none).
pub(super) fn unknown_fields(schema: &Schema, object: &Value, within: &Within<'_>) -> Vec<String> {
    let mut out = Vec::new();
    walk_unknown(
        &Ty::root(schema),
        object,
        &mut String::with_capacity(64),
        0,
        &mut out,
        within,
    );
    out
}

fn walk_unknown(
    ty: &Ty,
    v: &Value,
    path: &mut String,
    depth: usize,
    out: &mut Vec<String>,
    within: &Within<'_>,
) {
    // Only maps and lists can hold a member the schema does not declare.
    if depth > super::typed::MAX_DEPTH || !matches!(v, Value::Object(_) | Value::Array(_)) {
        return;
    }
    let atom = ty.atom();
    match (v, &atom.map, &atom.list) {
        (Value::Object(map), Some(m), _) => {
            within.find_member(map, |key, item, below| {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                match m.entry(key) {
                    Some(t) => walk_unknown(&t, item, path, depth + 1, out, below),
                    None => out.push(format!("unknown field {:?}", path.as_str())),
                }
                path.truncate(len);
                None::<()>
            });
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

    use super::{ApplySemantics, Writes, apply, unknown_fields};
    use crate::mutate::touched::Places;
    use crate::mutate::typed::{Fit, Ty, Within, Written, join_errors, validate};
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
                            "containerPort": {"type": "integer", "format": "int32"},
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
        let (mut out, mut fit) = (object.clone(), Fit::Unknown);
        let got = apply(
            schema,
            &mut out,
            &mut fit,
            (config, None),
            semantics,
            &mut Writes::default(),
        );
        match got {
            Ok(merged) => {
                assert_eq!(merged.changed, out != *object, "whether the object changed");
                assert!(matches!(fit, Fit::Fits), "a merged object fits its schema");
                Ok(out)
            }
            Err(e) => {
                assert_eq!(out, *object, "an error leaves the object unchanged");
                Err(e.to_string())
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

    /// The places of these JSON Pointers.
    fn at(pointers: &[&str]) -> Written {
        Written::of_paths(Places::of_pointers(pointers.iter().copied()).into_paths())
    }

    #[test]
    fn unknown_fields_are_found_everywhere_or_where_a_patch_wrote() {
        let schema = pod_schema();
        let mut object = pod();
        object["metadata"]["labelz"] = json!({});
        object["spec"]["containers"][0]["portz"] = json!(1);
        object["spec"]["volumes"][0]["sizez"] = json!(1);
        assert_eq!(
            unknown_fields(&schema, &object, &Within::All),
            [
                "unknown field \"metadata.labelz\"",
                "unknown field \"spec.containers[0].portz\"",
                "unknown field \"spec.volumes[0].sizez\""
            ]
        );
        // Only below the pointers written (every item of a list on the way), decoded.
        let written = at(&["/spec/containers/-", "/spec/volumes/0/name"]);
        assert_eq!(
            unknown_fields(&schema, &object, &written.within()),
            ["unknown field \"spec.containers[0].portz\""]
        );
        object["metadata"]["a/b"] = json!({"c": 1});
        let written = at(&["/metadata/a~1b/c"]);
        assert_eq!(
            unknown_fields(&schema, &object, &written.within()),
            ["unknown field \"metadata.a/b\""]
        );
        let nothing = at(&[]);
        assert!(unknown_fields(&schema, &object, &nothing.within()).is_empty());
        let root = at(&[""]);
        assert_eq!(unknown_fields(&schema, &object, &root.within()).len(), 4);
    }

    #[test]
    fn an_object_is_checked_where_patches_wrote() {
        let schema = pod_schema();
        let root = Ty::root(&schema);
        let mut object = pod();
        object["spec"]["replicas"] = json!("three");
        object["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .remove("name");
        let shown =
            |within: &Within<'_>| join_errors(&validate(&root, &object, true, within, false));
        assert_eq!(
            shown(&Within::All),
            "errors:\n  .spec.containers: element 0: associative list with keys has an element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)\n  .spec.replicas: expected numeric (int or float), got string"
        );
        // A list on the way is checked whole (its items' keys); other members are not.
        let containers = at(&["/spec/containers/0/name"]);
        assert_eq!(
            shown(&containers.within()),
            "errors:\n  .spec.containers: element 0: associative list with keys has an element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)"
                .trim_start_matches("errors:\n  ")
        );
        let replicas = at(&["/spec/replicas"]);
        assert_eq!(
            shown(&replicas.within()),
            ".spec.replicas: expected numeric (int or float), got string"
        );
        assert!(
            validate(
                &root,
                &object,
                true,
                &at(&["/metadata/labels/a"]).within(),
                false
            )
            .is_empty()
        );
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
