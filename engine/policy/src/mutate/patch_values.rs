//! A mutation's CEL result as the patch kube-apiserver builds from it: an `Object{…}` as a
//! JSON apply configuration, a `list(JSONPatch)` as RFC 6902 operations. Both first check that
//! every nested `Object` literal is named after its field path from the root
//! (`Object.spec.template`), as upstream does at run time.

use std::sync::Arc;

use base64::Engine as _;
use celgate_cel::{Literal, Program, Value};

use super::go_value::{self, Converted};
use super::json_patch::Operation;

/// The name of the root apply-configuration type.
const ROOT: &str = "Object";
/// Deepest value converted (a guard against stack exhaustion).
const MAX_DEPTH: usize = 256;
/// Deepest `Object` literal whose leaves alone are taken (far past any configuration written;
/// a deeper one is converted whole, with the conversion's own limit).
const MAX_SHAPED_DEPTH: usize = 32;
/// The largest integer magnitude a JSON number (a double) holds exactly: 2^53 − 1.
const MAX_JSON_INT: u64 = (1 << 53) - 1;

/// Type-name mismatches of the `Object` literals inside `v`, with `path` the type name its
/// position calls for (`Object.spec`): upstream's `unexpected type name …` errors, joined by
/// newlines.
fn check_type_names(v: &Value<'_>, path: &mut String, depth: usize, errors: &mut Vec<String>) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::Struct(s) if is_object_type(s.type_name()) => {
            if s.type_name() != path.as_str() {
                errors.push(format!(
                    "unexpected type name {:?}, expected {:?}, which matches field name path from root Object type",
                    s.type_name(),
                    path.as_str()
                ));
            }
            for (name, field) in s.fields() {
                let len = path.len();
                path.push('.');
                path.push_str(name);
                check_type_names(field, path, depth + 1, errors);
                path.truncate(len);
            }
        }
        Value::List(l) => {
            for item in l.iter() {
                check_type_names(&item, path, depth + 1, errors);
            }
        }
        Value::Map(m) => {
            m.find_map(|_, item| {
                check_type_names(&item, path, depth + 1, errors);
                None::<()>
            });
        }
        _ => {}
    }
}

/// A mutation's patch: an apply configuration as upstream converts it, or JSON patch
/// operations.
#[derive(Clone, Debug)]
pub(super) enum Patch {
    Apply(Converted),
    Json(Vec<Operation>),
}

/// A mutation's CEL result as its patch (`is_apply`: an apply configuration's, else a JSON
/// patch's).
pub(super) fn patch(v: &Value<'_>, is_apply: bool) -> Result<Patch, PatchValueError> {
    if is_apply {
        apply_configuration(v).map(Patch::Apply)
    } else {
        json_patch(v).map(Patch::Json)
    }
}

/// Why a mutation's result is not a patch of its type, worded as upstream words it.
#[derive(Debug, thiserror::Error)]
pub(super) enum PatchValueError {
    /// `Object` literals not named after their field paths (upstream's errors, one a line).
    #[error("type mismatch: {0}")]
    TypeNames(String),
    /// An `ApplyConfiguration` expression gave something other than an `Object`.
    #[error("unsupported return type from ApplyConfiguration expression: {0}")]
    NotObject(String),
    /// An apply configuration upstream cannot convert to Go (a map literal among its fields
    /// has a key other than a string), shown as the Go type it failed to convert.
    #[error("invalid return type: *dynamic.ObjectVal")]
    NotConvertible,
    /// A `JSONPatch` expression gave something other than a list.
    #[error("type mismatch: JSONPatchType.expression should evaluate to array")]
    NotList,
    /// An item of a `JSONPatch` expression's list is not a `JSONPatch`.
    #[error(
        "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch: type conversion error from '{0}' to 'JSONPatch'"
    )]
    NotJsonPatch(String),
    /// A `JSONPatch` value that cannot be written as JSON.
    #[error("JSONPath valueExpression evaluated to a type that could not marshal to JSON: {0}")]
    Value(String),
}

/// `Ok` when the `Object` literals in `v` (rooted at type `root`) are named by their paths.
fn type_names_match(v: &Value<'_>, root: &str) -> Result<(), PatchValueError> {
    let mut errors = Vec::new();
    let mut path = String::with_capacity(root.len() + 64);
    path.push_str(root);
    check_type_names(v, &mut path, 0, &mut errors);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(PatchValueError::TypeNames(errors.join("\n")))
    }
}

/// An `ApplyConfiguration` result as upstream converts it to Go: JSON, and where it holds Go
/// values the typed conversion refuses.
fn apply_configuration(v: &Value<'_>) -> Result<Converted, PatchValueError> {
    let Value::Struct(s) = v else {
        return Err(PatchValueError::NotObject(v.type_name().to_string()));
    };
    type_names_match(v, s.type_name())?;
    go_value::object(s.fields(), 0).map_err(|_| PatchValueError::NotConvertible)
}

/// A `JSONPatch` expression's result as operations.
fn json_patch(v: &Value<'_>) -> Result<Vec<Operation>, PatchValueError> {
    let Value::List(list) = v else {
        return Err(PatchValueError::NotList);
    };
    let mut ops = Vec::with_capacity(list.len());
    for item in list.iter() {
        let Value::Struct(s) = &item else {
            return Err(PatchValueError::NotJsonPatch(item.type_name().to_string()));
        };
        ops.push(operation(|f| s.field(f))?);
    }
    Ok(ops)
}

/// A `JSONPatch` value as an operation, from its fields (`field`).
fn operation<'v, 'a: 'v>(
    field: impl Fn(&str) -> Option<&'v Value<'a>>,
) -> Result<Operation, PatchValueError> {
    let text = |f: &str| {
        field(f)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let value = match field("value") {
        None => None,
        Some(val) => {
            if let Value::Struct(o) = val {
                type_names_match(val, o.type_name())?;
            }
            Some(json_value(val, 0).map_err(PatchValueError::Value)?)
        }
    };
    let from = text("from");
    Ok(Operation {
        op: text("op"),
        path: text("path"),
        from: (!from.is_empty()).then_some(from),
        value,
    })
}

/// The part of a mutation's literal (`Program::literal`) whose leaves alone give its patch:
/// of an apply configuration, its `Object` literals (each named by its field path from the
/// root, or there is none: the whole value gives the error) and the map and list literals
/// among their fields, whose items are leaves; of a JSON patch, its list literal of message
/// literals, whose fields are leaves. `None` when the result is not such a literal.
pub(super) fn shape(literal: Literal, is_apply: bool) -> Option<Literal> {
    match literal {
        Literal::Message(name, fields) if is_apply => {
            let mut path = name.to_string();
            object_shape(name, fields, &mut path, 0)
        }
        Literal::List(items) if !is_apply => {
            let items = items.into_iter().map(|item| match item {
                Literal::Message(name, fields) => {
                    let fields = fields.into_iter().map(|(f, _)| (f, Literal::Leaf));
                    Some(Literal::Message(name, fields.collect()))
                }
                _ => None,
            });
            Some(Literal::List(items.collect::<Option<_>>()?))
        }
        _ => None,
    }
}

/// An `Object` literal's shape at `path` (its type's name): see [`shape`].
fn object_shape(
    name: Arc<str>,
    fields: Box<[(Arc<str>, Literal)]>,
    path: &mut String,
    depth: usize,
) -> Option<Literal> {
    if depth > MAX_SHAPED_DEPTH {
        return None;
    }
    let mut shaped = Vec::with_capacity(fields.len());
    for (field, literal) in fields {
        let shape = match literal {
            Literal::Message(inner, below) if is_object_type(&inner) => {
                let len = path.len();
                path.push('.');
                path.push_str(&field);
                let shape = (*inner == **path).then(|| object_shape(inner, below, path, depth + 1));
                path.truncate(len);
                shape??
            }
            Literal::Map(entries) => Literal::Map(
                entries
                    .into_iter()
                    .map(|(k, _)| (k, Literal::Leaf))
                    .collect(),
            ),
            Literal::List(items) => Literal::List(items.iter().map(|_| Literal::Leaf).collect()),
            _ => Literal::Leaf,
        };
        shaped.push((field, shape));
    }
    Some(Literal::Message(name, shaped.into()))
}

/// Whether a message type is an apply configuration's, named after its field path.
fn is_object_type(name: &str) -> bool {
    name == ROOT || name.starts_with("Object.")
}

/// A mutation's patch from the leaves of its [`shape`] (`Program::eval_leaves`), as [`patch`]
/// gives it from the whole value. An apply configuration whose leaves are all plain JSON data
/// (`go_value::plain`) is converted from them; any other is converted from the whole value,
/// built around them (`Program::assemble`). `None` when `leaves` are not those of `shape`.
pub(super) fn patch_of_leaves<'a>(
    program: &'a Program,
    shape: &Literal,
    leaves: Vec<Value<'a>>,
) -> Option<Result<Patch, PatchValueError>> {
    match shape {
        Literal::Message(_, fields) => {
            let mut plain = leaves.iter();
            match config_of_leaves(fields, &mut plain) {
                Some(config) if plain.next().is_none() => Some(Ok(Patch::Apply((config, None)))),
                _ => Some(patch(&program.assemble(shape, leaves)?, true)),
            }
        }
        Literal::List(items) => {
            let mut ops = Vec::with_capacity(items.len());
            let mut rest = &leaves[..];
            for item in items.iter() {
                let Literal::Message(_, fields) = item else {
                    return None;
                };
                let (values, after) = rest.split_at_checked(fields.len())?;
                rest = after;
                let field = |f: &str| {
                    let i = fields.iter().position(|(name, _)| **name == *f)?;
                    values.get(i)
                };
                match operation(field) {
                    Ok(op) => ops.push(op),
                    Err(e) => return Some(Err(e)),
                }
            }
            rest.is_empty().then_some(Ok(Patch::Json(ops)))
        }
        _ => None,
    }
}

/// An `Object` literal's fields from their leaves, as `go_value::object` converts them.
fn config_of_leaves<'v, 'a: 'v>(
    fields: &[(Arc<str>, Literal)],
    leaves: &mut impl Iterator<Item = &'v Value<'a>>,
) -> Option<serde_json::Value> {
    let mut out = serde_json::Map::new();
    for (name, shape) in fields {
        let json = match shape {
            Literal::Message(_, inner) => config_of_leaves(inner, leaves)?,
            Literal::Map(entries) => serde_json::Value::Object(
                (entries.iter())
                    .map(|(key, _)| Some((key.to_string(), go_value::plain(leaves.next()?)?)))
                    .collect::<Option<_>>()?,
            ),
            Literal::List(items) => serde_json::Value::Array(
                (items.iter())
                    .map(|_| go_value::plain(leaves.next()?))
                    .collect::<Option<_>>()?,
            ),
            Literal::Leaf => go_value::plain(leaves.next()?)?,
        };
        out.insert(name.to_string(), json);
    }
    Some(serde_json::Value::Object(out))
}

/// A value as upstream passes it through protobuf's `Value`: numbers as doubles, but an int or
/// uint beyond ±(2^53 − 1), which a double cannot hold exactly, as its decimal text (cel-go's
/// conversion, as protobuf's JSON mapping does); bytes base64, timestamps and durations as text.
fn json_value(v: &Value<'_>, depth: usize) -> Result<serde_json::Value, String> {
    use serde_json::Value as J;
    if depth > MAX_DEPTH {
        return Err("value nests too deeply".into());
    }
    Ok(match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Int(i) if i.unsigned_abs() > MAX_JSON_INT => J::String(i.to_string()),
        Value::Int(i) => number(*i as f64)?,
        Value::Uint(u) if *u > MAX_JSON_INT => J::String(u.to_string()),
        Value::Uint(u) => number(*u as f64)?,
        Value::Double(d) => number(*d)?,
        Value::String(s) => J::String(s.to_string()),
        Value::Bytes(b) => J::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Value::Timestamp(t) => J::String(t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)),
        Value::Duration(d) => {
            let secs = d
                .num_nanoseconds()
                .map_or(d.num_seconds() as f64, |n| n as f64 / 1e9);
            J::String(format!("{secs}s"))
        }
        Value::List(l) => J::Array(
            l.iter()
                .map(|e| json_value(&e, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        Value::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, item) in m.entries() {
                let Value::String(k) = k else {
                    return Err(format!("unsupported map key type: {}", k.type_name()));
                };
                out.insert(k.to_string(), json_value(&item, depth + 1)?);
            }
            J::Object(out)
        }
        Value::Struct(s) => {
            let mut out = serde_json::Map::new();
            for (k, item) in s.fields() {
                out.insert(k.to_string(), json_value(item, depth + 1)?);
            }
            J::Object(out)
        }
        Value::Optional(Some(inner)) => json_value(inner, depth + 1)?,
        Value::Optional(None) => J::Null,
        other => {
            return Err(format!(
                "type conversion error from '{}' to 'google.protobuf.Value'",
                other.type_name()
            ));
        }
    })
}

/// A double as JSON: integral values as integers (Go writes them without a fraction). A
/// protobuf `Value` cannot hold an infinity or a NaN: protojson's error, as upstream reports it.
fn number(f: f64) -> Result<serde_json::Value, String> {
    if !f.is_finite() {
        let go = if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        };
        return Err(format!(
            "json: error calling MarshalJSON for type *structpb.Value: proto: google.protobuf.Value.number_value: invalid {go} value"
        ));
    }
    if f.fract() == 0.0 && f.abs() < 9.2e18 {
        return Ok(serde_json::Value::from(f as i64));
    }
    serde_json::Number::from_f64(f)
        .map(serde_json::Value::Number)
        .ok_or_else(|| format!("json: unsupported value: {f}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_literals_leaves_give_the_patch_its_whole_value_gives() {
        use celgate_cel::{Activation, Budget, Env, Type};
        let env = (Env::kubernetes().variable("object", Type::Dyn))
            .mutation_library()
            .build();
        let object = json!({"metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"n": 3, "list": [1, {"b": 2}]}, "nothing": null});
        // (expression, whether an apply configuration's leaves are plain JSON data)
        let cases = [
            (
                "Object{metadata: Object.metadata{labels: {'a': object.metadata.name, 'b': dyn('c')}}}",
                true,
            ),
            (
                "Object{spec: Object.spec{replicas: object.spec.n, ports: [object.spec.n, dyn(2)], template: Object.spec.template{metadata: Object.spec.template.metadata{labels: object.metadata.labels}}}}",
                true,
            ),
            // Data read from the request as it is, a double, a boolean.
            (
                "Object{spec: Object.spec{list: object.spec.list, ratio: double(object.spec.n) / 2.0, on: object.spec.n > 1}}",
                true,
            ),
            // What the conversion keeps as Go values (a null, a uint), an `Object` or a list
            // literal inside a map literal: converted from the whole value, built around them.
            ("Object{spec: Object.spec{paused: object.nothing}}", false),
            ("Object{spec: Object.spec{n: dyn(1u)}}", false),
            (
                "Object{spec: Object.spec{m: {'a': Object.spec.m{}}}}",
                false,
            ),
            (
                "Object{spec: Object.spec{m: {'a': [object.spec.n]}}}",
                false,
            ),
            (
                "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b'), value: object.metadata.name}, JSONPatch{op: 'remove', path: '/spec/n'}]",
                true,
            ),
            (
                "[JSONPatch{op: 'add', path: '/spec', value: Object.spec{n: object.spec.n}}, JSONPatch{op: 'copy', from: '/a', path: '/b'}]",
                true,
            ),
            // Errors: a misnamed `Object` in a patch's value, a value JSON cannot hold.
            (
                "[JSONPatch{op: 'add', path: '/spec', value: Object.spec{x: Object.metadata{}}}]",
                true,
            ),
            (
                "[JSONPatch{op: 'add', path: '/x', value: double(object.spec.n) / 0.0}]",
                true,
            ),
        ];
        for (src, by_plain_leaves) in cases {
            let program = env.compile(src).expect(src);
            let mut act = Activation::new();
            act.bind_json("object", &object);
            let is_apply = src.starts_with("Object");
            let shape = shape(program.literal(), is_apply).expect(src);
            let whole = program.eval(&act, &mut Budget::default()).expect(src);
            let want = format!("{:?}", patch(&whole, is_apply));
            let leaves = (program.eval_leaves(&shape, &act, &mut Budget::default())).expect(src);
            if let Literal::Message(_, fields) = &shape {
                let plain = config_of_leaves(fields, &mut leaves.iter()).is_some();
                assert_eq!(plain, by_plain_leaves, "{src}");
            }
            let got = patch_of_leaves(&program, &shape, leaves).expect(src);
            assert_eq!(format!("{got:?}"), want, "{src}");
        }
        // A misnamed `Object` in a configuration: no shape, the whole value tells.
        for src in [
            "Object{spec: Object.metadata{}}",
            "Object{spec: Object.spec{template: Object.spec{}}}",
        ] {
            let program = env.compile(src).expect(src);
            assert_eq!(shape(program.literal(), true), None, "{src}");
        }
    }

    #[test]
    fn an_integer_a_double_cannot_hold_becomes_its_text() {
        let limit = (1_i64 << 53) - 1;
        let cases = [
            (Value::Int(limit), json!(limit)),
            (Value::Int(-limit), json!(-limit)),
            (Value::Int(limit + 1), json!("9007199254740992")),
            (Value::Int(-limit - 1), json!("-9007199254740992")),
            (Value::Int(i64::MIN), json!("-9223372036854775808")),
            (Value::Uint(limit as u64), json!(limit)),
            (Value::Uint(u64::MAX), json!("18446744073709551615")),
            // A double keeps its (rounded) value.
            (
                Value::Double(9007199254740993.0),
                json!(9007199254740992_i64),
            ),
        ];
        for (value, want) in cases {
            assert_eq!(json_value(&value, 0), Ok(want), "{value:?}");
        }
    }

    #[test]
    fn an_infinity_or_a_nan_fails_as_protojson_words_it() {
        for (f, go) in [
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(
                json_value(&Value::Double(f), 0),
                Err(format!(
                    "json: error calling MarshalJSON for type *structpb.Value: proto: google.protobuf.Value.number_value: invalid {go} value"
                ))
            );
        }
    }
}
