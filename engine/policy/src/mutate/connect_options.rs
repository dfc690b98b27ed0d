//! The kinds of a connection's object (CONNECT: `PodExecOptions` for `pods/exec`, …), which
//! kube-apiserver's OpenAPI v3 does not publish. A mutating policy can JSON-patch them as
//! in-tree does: kube-apiserver decodes the patched options strictly into their Go type and
//! connects with them (the exec command, the container, the ports). Their schemas are written
//! here from the Go types (`k8s.io/api/core/v1`): every field is `omitempty` but
//! `PodExecOptions.command`. Server-side apply has no typed model of them, so an apply
//! configuration fails on them as it does in-tree (`no corresponding type for /v1,
//! Kind=PodExecOptions`).

use std::sync::LazyLock;

use serde_json::{Value, json};

use super::KindSchema;
use crate::schema::{Gvk, schemas_from_openapi};

/// The options kinds of the core group's connections.
const KINDS: [&str; 6] = [
    "PodExecOptions",
    "PodAttachOptions",
    "PodPortForwardOptions",
    "PodProxyOptions",
    "NodeProxyOptions",
    "ServiceProxyOptions",
];

/// The schema of every options kind, parsed once.
static SCHEMAS: LazyLock<Vec<(Gvk, KindSchema)>> = LazyLock::new(|| {
    // A constant document: a unit test proves it yields every kind.
    schemas_from_openapi(&document())
        .unwrap_or_default()
        .into_iter()
        .map(|(gvk, schema)| {
            let built_in = true;
            (gvk, KindSchema { schema, built_in })
        })
        .collect()
});

/// The schema of `gvk` when it is a connection's options kind.
pub(super) fn schema(gvk: &Gvk) -> Option<&'static KindSchema> {
    SCHEMAS.iter().find(|(g, _)| g == gvk).map(|(_, s)| s)
}

/// The kind of `object`, shown as Go shows it (`/v1, Kind=PodExecOptions`), when it is a
/// connection's options kind: kube-apiserver's server-side apply has no typed model of it.
pub(super) fn untyped_kind(object: &Value) -> Option<String> {
    let kind = object.get("kind").and_then(Value::as_str)?;
    (object.get("apiVersion").and_then(Value::as_str) == Some("v1") && KINDS.contains(&kind))
        .then(|| Gvk::new("", "v1", kind).to_string())
}

/// The OpenAPI v3 document of the options kinds, as kube-apiserver would publish it.
fn document() -> Value {
    let string = || json!({"type": "string"});
    let boolean = || json!({"type": "boolean"});
    let type_meta = |mut fields: Value| {
        fields["apiVersion"] = string();
        fields["kind"] = string();
        fields
    };
    let kind = |name: &str, properties: Value, required: &[&str]| {
        let mut body = json!({
            "type": "object",
            "properties": type_meta(properties),
            "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": name}],
        });
        if !required.is_empty() {
            body["required"] = json!(required);
        }
        (format!("io.k8s.api.core.v1.{name}"), body)
    };
    let streams = || {
        json!({"stdin": boolean(), "stdout": boolean(), "stderr": boolean(), "tty": boolean(),
            "container": string()})
    };
    let mut exec = streams();
    exec["command"] = json!({"type": "array", "items": string()});
    let path = || json!({"path": string()});
    let schemas: serde_json::Map<String, Value> = [
        kind("PodExecOptions", exec, &["command"]),
        kind("PodAttachOptions", streams(), &[]),
        kind(
            "PodPortForwardOptions",
            json!({"ports": {"type": "array",
                "items": {"type": "integer", "format": "int32"}}}),
            &[],
        ),
        kind("PodProxyOptions", path(), &[]),
        kind("NodeProxyOptions", path(), &[]),
        kind("ServiceProxyOptions", path(), &[]),
    ]
    .into_iter()
    .collect();
    json!({"components": {"schemas": schemas}})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_options_kind_has_a_schema_and_no_typed_model() {
        for name in KINDS {
            let gvk = Gvk::new("", "v1", name);
            let kind = schema(&gvk).unwrap_or_else(|| panic!("{name} has no schema"));
            assert!(kind.built_in);
            assert!(kind.schema.property("kind").is_some(), "{name}");
            let object = json!({"apiVersion": "v1", "kind": name});
            assert_eq!(
                untyped_kind(&object).as_deref(),
                Some(format!("/v1, Kind={name}").as_str())
            );
        }
        let exec = schema(&Gvk::new("", "v1", "PodExecOptions")).expect("exec");
        assert_eq!(exec.schema.required(), ["command"]);
        assert!(exec.schema.property("tty").is_some());
        assert!(schema(&Gvk::new("", "v1", "Pod")).is_none());
        assert_eq!(
            untyped_kind(&json!({"apiVersion": "v1", "kind": "Pod"})),
            None
        );
        let other_group = json!({"apiVersion": "example.com/v1", "kind": "PodExecOptions"});
        assert_eq!(untyped_kind(&other_group), None);
    }
}
