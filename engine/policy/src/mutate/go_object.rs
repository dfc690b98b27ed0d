//! A built-in kind's object as kube-apiserver turns it into the kind's Go type after each
//! mutation. After a JSON patch it decodes the patched JSON: a value of the wrong JSON type, or
//! a number an integer field cannot hold, fails the request with Go's `json: cannot unmarshal …`
//! before the next policy sees the object. After an apply configuration it converts the merged
//! object field by field: an integer too wide for its field is cut to the field's width (Go's
//! integer conversion), so `2^63 - 1` in an int32 field becomes `-1`. Fields with a decoder of
//! their own (quantities, times, int-or-string, raw extensions, preserved unknown fields) and
//! unknown fields are left alone. The next mutation sees the object as the Go type encodes it:
//! optional fields left null, or holding an empty map or list, are left out (`omitempty`).

use serde_json::Value;

use super::typed::Within;
use crate::schema::{AdditionalProperties, Schema, SchemaRef};

/// Components whose Go types decode themselves (their errors are theirs, not encoding/json's).
const OWN_DECODERS: [&str; 7] = [
    "io.k8s.apimachinery.pkg.api.resource.Quantity",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Duration",
    "io.k8s.apimachinery.pkg.runtime.RawExtension",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
];

/// How deep the walk follows the object (deeper values are not checked).
const MAX_DEPTH: usize = 64;

/// Go's error for the first value of `object` (in the object's order) that its kind's Go type
/// cannot hold, as kube-apiserver's JSON decoder words it, looked for `within` the object (the
/// caller knows the rest holds none: it was looked at since it was last written).
pub(super) fn decode_error(kind: &Schema, object: &Value, within: &Within<'_>) -> Option<String> {
    let kind = kind.as_ref();
    if !is_struct(kind) {
        return None;
    }
    let mut path = Vec::new();
    walk(kind, object, within, &mut path, kind, 0)
}

/// Cuts every integer of `object` too wide for its int32 field to 32 bits, as Go's conversion
/// of an int64 to an int32 does, looking `within` the object (the caller knows the rest holds
/// none: it was narrowed since it was last written).
pub(super) fn narrow_ints(kind: &Schema, object: &mut Value, within: &Within<'_>) {
    narrow(kind.as_ref(), object, within, 0);
}

/// Leaves out, `within` the object, the optional fields (those the schema does not require:
/// Kubernetes' optional fields are `omitempty`) that hold a null, an empty map or an empty
/// list, which the kind's Go type encodes as nothing; an empty struct is kept. The next
/// mutation sees the object so, as kube-apiserver decodes each patched object into the Go type
/// and encodes it again for the next.
pub(super) fn drop_empty(kind: &Schema, object: &mut Value, within: &Within<'_>) {
    drop_in(kind.as_ref(), object, within, 0);
}

fn drop_in(schema: SchemaRef<'_>, v: &mut Value, within: &Within<'_>, depth: usize) {
    // Only maps, structs and lists hold fields to leave out (scalars are most values: their
    // schema is not looked at).
    let container = matches!(v, Value::Object(_) | Value::Array(_));
    if !container || depth > MAX_DEPTH || decodes_itself(schema) {
        return;
    }
    match v {
        Value::Object(members) => {
            if let Some(values) = map_values(schema) {
                within.each_member_mut(members, |_, m, below| {
                    drop_in(values, m, below, depth + 1);
                });
                return;
            }
            let mut omitted = Vec::new();
            within.each_member_mut(members, |key, m, below| {
                let Some(field) = schema.property(key) else {
                    return;
                };
                drop_in(field, m, below, depth + 1);
                if encodes_as_nothing(field, m) && !schema.required().iter().any(|r| r == key) {
                    omitted.push(key.to_string());
                }
            });
            for key in omitted {
                members.remove(&key);
            }
        }
        Value::Array(items) => {
            if let (Some(item), Some(below)) = (schema.items(), within.step(None)) {
                for i in items {
                    drop_in(item, i, &below, depth + 1);
                }
            }
        }
        _ => {}
    }
}

/// Whether an `omitempty` field of this schema holding `v` is left out of the Go encoding: a
/// null (a nil map, slice or pointer), an empty list, or an empty map (not a struct).
fn encodes_as_nothing(field: SchemaRef<'_>, v: &Value) -> bool {
    match v {
        Value::Null => !decodes_itself(field),
        Value::Array(items) => items.is_empty(),
        Value::Object(members) => {
            members.is_empty() && !field.has_properties() && map_values(field).is_some()
        }
        _ => false,
    }
}

fn narrow(schema: SchemaRef<'_>, v: &mut Value, within: &Within<'_>, depth: usize) {
    // Only numbers are cut, and only containers hold them: other scalars are passed by.
    let scalar = matches!(v, Value::Null | Value::Bool(_) | Value::String(_));
    if scalar || depth > MAX_DEPTH || decodes_itself(schema) {
        return;
    }
    match v {
        Value::Object(members) => {
            let values = map_values(schema);
            within.each_member_mut(members, |key, m, below| {
                if let Some(field) = values.or_else(|| schema.property(key)) {
                    narrow(field, m, below, depth + 1);
                }
            });
        }
        Value::Array(items) => {
            if let (Some(item), Some(below)) = (schema.items(), within.step(None)) {
                for i in items {
                    narrow(item, i, &below, depth + 1);
                }
            }
        }
        Value::Number(n) if schema.type_name() == Some("integer") && schema.format() == "int32" => {
            if let Some(wide) = n.as_i64().filter(|w| i32::try_from(*w).is_err()) {
                // Go's int64 → int32 conversion keeps the low 32 bits.
                *v = Value::from(wide as i32);
            }
        }
        _ => {}
    }
}

/// Walks `v` of `schema` for [`decode_error`]; `go_struct` is the schema of the innermost Go
/// struct around `v` (a component with properties), whose name an error gives.
fn walk<'v, 's>(
    schema: SchemaRef<'s>,
    v: &'v Value,
    part: &Within<'_>,
    path: &mut Vec<&'v str>,
    go_struct: SchemaRef<'s>,
    depth: usize,
) -> Option<String> {
    // A string of a string field or a bool of a boolean one decodes whatever decodes the
    // field (most values: their schema's decoder is not looked up).
    let plain = match v {
        Value::Null => true,
        Value::String(_) => schema.type_name() == Some("string"),
        Value::Bool(_) => schema.type_name() == Some("boolean"),
        _ => false,
    };
    if plain || depth > MAX_DEPTH || decodes_itself(schema) {
        return None;
    }
    // The Go types' names are built only for the error (this walk runs after every patch).
    let error = |value: String| {
        let go_struct = struct_name(go_struct).unwrap_or_default();
        go_type(schema).map(|expected| {
            format!(
                "json: cannot unmarshal {value} into Go struct field {go_struct}.{} of type {expected}",
                path.join(".")
            )
        })
    };
    match schema.type_name()? {
        "object" => {
            let Value::Object(members) = v else {
                return error(json_kind(v).into());
            };
            if let Some(values) = map_values(schema) {
                return part.find_member(members, |_, m, below| {
                    walk(values, m, below, path, go_struct, depth + 1)
                });
            }
            let inner = if is_struct(schema) { schema } else { go_struct };
            part.find_member(members, |key, m, below| {
                let field = schema.property(key)?;
                path.push(key);
                let found = walk(field, m, below, path, inner, depth + 1);
                path.pop();
                found
            })
        }
        "array" => {
            let Value::Array(items) = v else {
                return error(json_kind(v).into());
            };
            let item = schema.items()?;
            let below = part.step(None)?;
            items
                .iter()
                .find_map(|i| walk(item, i, &below, path, go_struct, depth + 1))
        }
        "string" if !v.is_string() => error(json_kind(v).into()),
        "boolean" if !v.is_boolean() => error(json_kind(v).into()),
        "number" if !v.is_number() => error(json_kind(v).into()),
        "integer" => match v {
            Value::Number(n) => {
                // An int64 is its own text; other numbers are read as Go writes them (the text
                // is only built for them and for the error).
                let fits = match (n.as_i64(), schema.format()) {
                    (Some(i), "int32") => i32::try_from(i).is_ok(),
                    (Some(_), _) => true,
                    (None, "int32") => go_number(n).parse::<i32>().is_ok(),
                    (None, _) => go_number(n).parse::<i64>().is_ok(),
                };
                (!fits)
                    .then(|| error(format!("number {}", go_number(n))))
                    .flatten()
            }
            other => error(json_kind(other).into()),
        },
        _ => None,
    }
}

/// Whether the position's Go type has a decoder of its own, or holds anything.
fn decodes_itself(schema: SchemaRef<'_>) -> bool {
    schema.is_int_or_string()
        || schema.preserves_unknown_fields()
        || schema.format() == "byte"
        || schema
            .component()
            .is_some_and(|c| OWN_DECODERS.contains(&c))
}

/// The Go struct a component names (`io.k8s.api.core.v1.PodSpec` → `PodSpec`), for objects
/// with fields.
/// The name of the Go struct of `schema`: its component's last part, for a component with
/// properties.
fn struct_name(schema: SchemaRef<'_>) -> Option<&str> {
    let component = schema.component().filter(|_| schema.has_properties())?;
    component.rsplit('.').next()
}

/// Whether `schema` is a Go struct's ([`struct_name`] gives its name), without building it.
fn is_struct(schema: SchemaRef<'_>) -> bool {
    schema.has_properties() && schema.component().is_some()
}

/// The schema of a map's values (`additionalProperties` as a schema).
fn map_values(schema: SchemaRef<'_>) -> Option<SchemaRef<'_>> {
    match schema.additional_properties()? {
        AdditionalProperties::Schema(values) => Some(values),
        AdditionalProperties::Allowed(_) => None,
    }
}

/// Go's name of the position's type as `%v` of a `reflect.Type` prints it; `None` when unknown.
fn go_type(schema: SchemaRef<'_>) -> Option<String> {
    Some(match schema.type_name()? {
        "string" => "string".into(),
        "boolean" => "bool".into(),
        "integer" => match schema.format() {
            "int32" => "int32".into(),
            "int64" => "int64".into(),
            _ => "int".into(),
        },
        "number" => match schema.format() {
            "float" => "float32".into(),
            _ => "float64".into(),
        },
        "array" => format!("[]{}", go_type(schema.items()?)?),
        "object" => match map_values(schema) {
            Some(values) => format!("map[string]{}", go_type(values)?),
            None => {
                let component = schema.component()?;
                let mut parts = component.rsplit('.');
                let (name, package) = (parts.next()?, parts.next()?);
                format!("{package}.{name}")
            }
        },
        _ => return None,
    })
}

/// The JSON type Go names in its error.
fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A number as Go's encoding/json writes it: integers as they are, floats in their shortest
/// form, with an exponent (`1e+21`, `1e-7`) outside [1e-6, 1e21).
fn go_number(n: &serde_json::Number) -> String {
    match n.as_f64() {
        Some(f) if n.is_f64() => {
            let abs = f.abs();
            if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
                let text = format!("{f:e}");
                match text.split_once('e') {
                    Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
                    _ => text,
                }
            } else {
                format!("{f}")
            }
        }
        _ => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schema::schemas_from_openapi;

    /// A Pod as the built-in kinds' OpenAPI names its parts.
    fn pod_schema() -> std::sync::Arc<Schema> {
        let r = |c: &str| json!({"$ref": format!("#/components/schemas/{c}")});
        let doc = json!({"components": {"schemas": {
            "io.k8s.api.core.v1.Pod": {"type": "object", "properties": {
                "metadata": r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"),
                "spec": r("io.k8s.api.core.v1.PodSpec")},
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Pod"}]},
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {
                "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                "creationTimestamp": r("io.k8s.apimachinery.pkg.apis.meta.v1.Time")}},
            "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
            "io.k8s.api.core.v1.PodSpec": {"type": "object", "properties": {
                "containers": {"type": "array", "items": r("io.k8s.api.core.v1.Container")},
                "hostNetwork": {"type": "boolean"}}},
            "io.k8s.api.core.v1.Container": {"type": "object", "properties": {
                "name": {"type": "string"},
                "ports": {"type": "array", "items": r("io.k8s.api.core.v1.ContainerPort")}}},
            "io.k8s.api.core.v1.ContainerPort": {"type": "object", "properties": {
                "containerPort": {"type": "integer", "format": "int32"}}},
        }}});
        schemas_from_openapi(&doc).expect("schema")[0].1.clone()
    }

    #[test]
    fn the_first_value_go_cannot_decode_is_named_as_go_names_it() {
        let schema = pod_schema();
        let error = |object: Value| decode_error(&schema, &object, &Within::All);
        let port = |p: Value| json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": p}]}]}});
        let into_port = |what: &str| {
            Some(format!(
                "json: cannot unmarshal {what} into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"
            ))
        };
        assert_eq!(error(port(json!(80))), None);
        assert_eq!(error(port(json!(80.0))), None, "written 80 by Go");
        assert_eq!(error(port(json!(1.5))), into_port("number 1.5"));
        assert_eq!(
            error(port(json!(3_000_000_000u64))),
            into_port("number 3000000000")
        );
        assert_eq!(error(port(json!("80"))), into_port("string"));
        assert_eq!(
            error(json!({"metadata": {"annotations": {"a": true}}})).as_deref(),
            Some(
                "json: cannot unmarshal bool into Go struct field ObjectMeta.metadata.annotations of type string"
            )
        );
        assert_eq!(
            error(json!({"metadata": {"annotations": "x"}})).as_deref(),
            Some(
                "json: cannot unmarshal string into Go struct field ObjectMeta.metadata.annotations of type map[string]string"
            )
        );
        assert_eq!(
            error(json!({"spec": {"containers": {"name": "c"}}})).as_deref(),
            Some(
                "json: cannot unmarshal object into Go struct field PodSpec.spec.containers of type []v1.Container"
            )
        );
        assert_eq!(
            error(json!({"spec": "x"})).as_deref(),
            Some("json: cannot unmarshal string into Go struct field Pod.spec of type v1.PodSpec")
        );
        // Nulls, unknown fields and types that decode themselves are left to kube-apiserver.
        assert_eq!(
            error(json!({"spec": null, "other": 1, "metadata": {"creationTimestamp": 5}})),
            None
        );
    }

    #[test]
    fn an_applied_integer_too_wide_for_an_int32_field_is_cut_to_32_bits() {
        let schema = pod_schema();
        let mut object = json!({"spec": {"containers": [{"name": "c", "ports": [
            {"containerPort": 9_223_372_036_854_775_807_i64}, {"containerPort": 4_294_967_297_i64},
            {"containerPort": 80}]}]}});
        narrow_ints(&schema, &mut object, &Within::All);
        assert_eq!(
            object["spec"]["containers"][0]["ports"],
            json!([{"containerPort": -1}, {"containerPort": 1}, {"containerPort": 80}])
        );
    }

    #[test]
    fn numbers_are_written_as_go_writes_them() {
        let text = |v: Value| match v {
            Value::Number(n) => go_number(&n),
            _ => unreachable!(),
        };
        assert_eq!(text(json!(2.0)), "2");
        assert_eq!(text(json!(1.5)), "1.5");
        assert_eq!(text(json!(1e21)), "1e+21");
        assert_eq!(text(json!(1e300)), "1e+300");
        assert_eq!(text(json!(1.5e-7)), "1.5e-7");
        assert_eq!(text(json!(-7)), "-7");
        assert_eq!(text(json!(3_000_000_000u64)), "3000000000");
    }
}
