//! The message types of Kubernetes' mutation expressions: the dynamic `Object` types
//! (`Object`, `Object.spec`, `Object.spec.template`, … — any field, each `dyn`), which build
//! apply configurations, and `JSONPatch` (`op`, `path`, `from`: string; `value`: dyn).
//! For type checking against a kind's schema, [`ObjectSchemas`] gives the `Object` types
//! declared fields instead; evaluation is the same either way.

use std::fmt;
use std::sync::Arc;

use crate::error::EvalError;
use crate::structs::TypeProvider;
use crate::types::{ObjectType, Type};
use crate::value::{Key, List, Map, OwnedMap, Str, StructType, StructValue, Value};

/// The name of the root apply-configuration type.
pub const OBJECT_TYPE: &str = "Object";
/// The name of the JSON Patch operation type.
pub const JSON_PATCH_TYPE: &str = "JSONPatch";

/// The checker's view of the `Object` types of one kind, from its schema.
pub trait ObjectSchemas: Send + Sync + fmt::Debug {
    /// The declared fields of `name` (`Object` or `Object.<path>`), or `None` when the schema
    /// has no object there (the name is then an undeclared reference). The returned type
    /// must be named `name`.
    fn object_type(&self, name: &str) -> Option<Arc<ObjectType>>;
}

/// Resolves `Object`, `Object.<path>` and `JSONPatch`; with `schemas`, the `Object` types
/// have the fields the schema declares.
#[derive(Debug, Default)]
pub(crate) struct MutationTypes {
    pub(crate) schemas: Option<Arc<dyn ObjectSchemas>>,
}

impl TypeProvider for MutationTypes {
    fn resolve(&self, name: &str) -> Option<Arc<dyn StructType>> {
        if name == JSON_PATCH_TYPE {
            return Some(Arc::new(JsonPatchType));
        }
        let is_object = name
            .strip_prefix(OBJECT_TYPE)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'));
        if !is_object {
            return None;
        }
        let checker = match &self.schemas {
            Some(schemas) => schemas.object_type(name)?,
            None => Arc::new(ObjectType::open(name, [], Type::Dyn)),
        };
        Some(Arc::new(DynamicObjectType {
            name: Arc::from(name),
            checker,
        }))
    }
}

/// `Object` or `Object.<path>`: accepts any field at run time; selecting an unset field
/// gives `null`. The checker sees `checker`'s fields.
#[derive(Debug)]
struct DynamicObjectType {
    name: Arc<str>,
    checker: Arc<ObjectType>,
}

impl StructType for DynamicObjectType {
    fn name(&self) -> &str {
        &self.name
    }

    /// Kubernetes converts the value to `type(<this type>)`, whose name is `type`.
    fn type_value_name(&self) -> &str {
        "type"
    }

    fn checker_type(&self) -> Arc<ObjectType> {
        self.checker.clone()
    }

    fn check_field(&self, _field: &str, _value: &Value<'_>) -> Result<(), EvalError> {
        Ok(())
    }

    fn checks_fields(&self) -> bool {
        false
    }

    /// Kubernetes reads the field from the object converted to a plain map, so a nested
    /// object comes back as a map (and keeps no message type).
    fn select<'a>(&self, value: &StructValue<'a>, field: &str) -> Result<Value<'a>, EvalError> {
        Ok(value.field(field).map(native).unwrap_or(Value::Null))
    }

    fn is_set(&self, value: &StructValue<'_>, field: &str) -> Result<bool, EvalError> {
        Ok(value.field(field).is_some())
    }

    /// Kubernetes' field presence test for optional selection reads the object as a plain
    /// map, which a built object never is: `.?field` is always empty.
    fn opt_select<'a>(
        &self,
        _value: &StructValue<'a>,
        _field: &str,
    ) -> Result<Option<Value<'a>>, EvalError> {
        Ok(None)
    }

    fn is_zero(&self, value: &StructValue<'_>) -> bool {
        value.fields().is_empty()
    }

    /// The same fields with values of the same types that are equal.
    fn equals(&self, a: &StructValue<'_>, b: &StructValue<'_>) -> bool {
        a.fields().len() == b.fields().len()
            && a.fields().iter().all(|(n, v)| {
                b.field(n)
                    .is_some_and(|w| v.type_name() == w.type_name() && v.equals(w))
            })
    }
}

/// `JSONPatch`: one JSON Patch operation.
#[derive(Debug)]
struct JsonPatchType;

const OP: &str = "op";
const PATH: &str = "path";
const FROM: &str = "from";
const VALUE: &str = "value";

impl StructType for JsonPatchType {
    fn name(&self) -> &str {
        JSON_PATCH_TYPE
    }

    /// Kubernetes converts the value to `type(<this type>)`, whose name is `type`.
    fn type_value_name(&self) -> &str {
        "type"
    }

    fn checker_type(&self) -> Arc<ObjectType> {
        let fields = [
            (OP.to_string(), Type::String),
            (PATH.to_string(), Type::String),
            (FROM.to_string(), Type::String),
            (VALUE.to_string(), Type::Dyn),
        ];
        Arc::new(ObjectType::open(JSON_PATCH_TYPE, fields, Type::untyped()))
    }

    fn check_field(&self, field: &str, value: &Value<'_>) -> Result<(), EvalError> {
        match field {
            OP | PATH | FROM => match value {
                Value::String(_) => Ok(()),
                other => Err(EvalError::msg(format!(
                    "unexpected type {} for JSONPatchType '{field}' field",
                    go_type_name(other)
                ))),
            },
            VALUE => Ok(()),
            other => Err(EvalError::msg(format!(
                "unexpected JSONPatchType field: {other}"
            ))),
        }
    }

    fn select<'a>(&self, value: &StructValue<'a>, field: &str) -> Result<Value<'a>, EvalError> {
        match field {
            OP | PATH | FROM => Ok(value
                .field(field)
                .cloned()
                .unwrap_or_else(|| Value::string(""))),
            VALUE => Ok(value.field(VALUE).cloned().unwrap_or(Value::Null)),
            other => Err(EvalError::msg(format!("unsupported indexer: {other}"))),
        }
    }

    /// The string fields are set when non-empty, `value` when given.
    fn is_set(&self, value: &StructValue<'_>, field: &str) -> Result<bool, EvalError> {
        match field {
            OP | PATH | FROM => Ok(value
                .field(field)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty())),
            VALUE => Ok(value.field(VALUE).is_some()),
            other => Err(EvalError::msg(format!("unsupported field: {other}"))),
        }
    }

    fn opt_select<'a>(
        &self,
        value: &StructValue<'a>,
        field: &str,
    ) -> Result<Option<Value<'a>>, EvalError> {
        if self.is_set(value, field)? {
            self.select(value, field).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Kubernetes' patch operations have no zero value.
    fn is_zero(&self, _value: &StructValue<'_>) -> bool {
        false
    }

    /// Equal operations and paths (unset is empty), and equal values (or both unset).
    fn equals(&self, a: &StructValue<'_>, b: &StructValue<'_>) -> bool {
        [OP, FROM, PATH].iter().all(|f| {
            let x = a.field(f).and_then(Value::as_str).unwrap_or_default();
            let y = b.field(f).and_then(Value::as_str).unwrap_or_default();
            x == y
        }) && match (a.field(VALUE), b.field(VALUE)) {
            (None, None) => true,
            (Some(x), Some(y)) => x.equals(y),
            _ => false,
        }
    }
}

/// `v` as Kubernetes' conversion of an object to native Go values leaves it: objects become
/// maps of their fields, in lists and maps too.
fn native<'a>(v: &Value<'a>) -> Value<'a> {
    match v {
        Value::Struct(s) => {
            let mut m = OwnedMap::with_capacity(s.fields().len());
            for (name, field) in s.fields() {
                m.insert_new(Key::String(Str::Shared(name.clone())), native(field));
            }
            Value::Map(Map::Owned(Arc::new(m)))
        }
        Value::List(l) if l.iter().any(|e| matches!(e, Value::Struct(_))) => {
            Value::List(List::from_vec(l.iter().map(|e| native(&e)).collect()))
        }
        other => other.clone(),
    }
}

/// The Go type Kubernetes names in `JSONPatch` construction errors.
fn go_type_name<'v>(v: &'v Value<'_>) -> &'v str {
    match v {
        Value::Null => "structpb.NullValue",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int64",
        Value::Uint(_) => "uint64",
        Value::Double(_) => "float64",
        Value::Bytes(_) => "[]uint8",
        Value::Timestamp(_) => "time.Time",
        Value::Duration(_) => "time.Duration",
        other => other.type_name(),
    }
}

#[cfg(test)]
mod tests {
    use crate::{Activation, Budget, Env, Type, Value};
    use serde_json::json as j;

    fn env() -> Env {
        Env::kubernetes()
            .variable("object", Type::Dyn)
            .mutation_library()
            .build()
    }

    /// The first line of the compile error, or the output type.
    fn check(env: &Env, src: &str) -> String {
        match env.compile(src) {
            Ok(p) => p.output_type().to_string(),
            Err(e) => e.to_string().lines().next().unwrap_or_default().to_string(),
        }
    }

    fn eval(src: &str) -> Result<serde_json::Value, String> {
        let p = env().compile(src).map_err(|e| e.to_string())?;
        let object = serde_json::json!({"spec": {"replicas": 3}});
        let mut act = Activation::new();
        act.bind_json("object", &object);
        let v = p
            .eval(&act, &mut Budget::default())
            .map_err(|e| e.to_string())?;
        v.to_json().map_err(|e| e.to_string())
    }

    #[test]
    fn type_check_verdicts_match_kubernetes() {
        let env = env();
        let cases = [
            ("Object{}", "Object"),
            ("Object{spec: Object.spec{replicas: 3}}", "Object"),
            ("Object.spec.template{}", "Object.spec.template"),
            ("Object.spec.x.y{}", "Object.spec.x.y"),
            (".Object{}", "Object"),
            ("Object{foo: 1}", "Object"),
            ("Object{spec: 1}.spec", "dyn"),
            ("Object{spec: 1}.spec + 1", "int"),
            ("has(Object{spec: 1}.foo)", "bool"),
            ("Object{a: 1}.?a", "optional_type(dyn)"),
            ("[1].map(x, Object{a: x})", "list(Object)"),
            ("JSONPatch{op: 'add', path: '/x', value: 1}", "JSONPatch"),
            ("JSONPatch{op: 'add'}.op", "string"),
            ("JSONPatch{op: 'add'}.value", "dyn"),
            ("[JSONPatch{op: 'remove', path: '/y'}]", "list(JSONPatch)"),
            ("JSONPatch{op: dyn('add')}", "JSONPatch"),
            ("JSONPatch{?op: optional.of('x')}", "JSONPatch"),
            ("JSONPatch{foo: dyn(1)}", "JSONPatch"),
            ("type(JSONPatch{})", "type(JSONPatch)"),
            (
                "JSONPatch{op: 1}",
                "ERROR: <input>:1:13: expected type of field 'op' is 'string' but provided type is 'int'",
            ),
            (
                "JSONPatch{op: null}",
                "ERROR: <input>:1:13: expected type of field 'op' is 'string' but provided type is 'null'",
            ),
            (
                "JSONPatch{foo: 1}",
                "ERROR: <input>:1:14: expected type of field 'foo' is '' but provided type is 'int'",
            ),
            (
                "JSONPatch{?op: 'x'}",
                "ERROR: <input>:1:16: expected type 'optional_type(string)' but found 'string'",
            ),
            (
                "JSONPatch{op: 'a'}.foo == 1",
                "ERROR: <input>:1:24: found no matching overload for '_==_' applied to '(, int)'",
            ),
            (
                "Foo{}",
                "ERROR: <input>:1:4: undeclared reference to 'Foo' (in container '')",
            ),
            (
                "JSONPatch.foo{}",
                "ERROR: <input>:1:14: undeclared reference to 'JSONPatch.foo' (in container '')",
            ),
            (
                "x.Object{}",
                "ERROR: <input>:1:9: undeclared reference to 'x.Object' (in container '')",
            ),
            ("int{}", "ERROR: <input>:1:4: 'int' is not a message type"),
            ("object{}", "ERROR: <input>:1:7: 'dyn' is not a type"),
            (
                "Object{} == Object.spec{}",
                "ERROR: <input>:1:10: found no matching overload for '_==_' applied to '(Object, Object.spec)'",
            ),
            (
                "[Object{}, Object.spec{}]",
                "ERROR: <input>:1:23: expected type 'Object' but found 'Object.spec'",
            ),
            (
                "size(Object{a: 1})",
                "ERROR: <input>:1:5: found no matching overload for 'size' applied to '(Object)'",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(check(&env, src), want, "{src}");
        }
    }

    /// `Object` has `spec` (an object with an int `replicas`) and `name`; nothing else.
    #[derive(Debug)]
    struct Schemas;

    impl super::ObjectSchemas for Schemas {
        fn object_type(&self, name: &str) -> Option<std::sync::Arc<crate::ObjectType>> {
            let fields: Vec<(String, Type)> = match name {
                "Object" => vec![("spec".into(), Type::Dyn), ("name".into(), Type::String)],
                "Object.spec" => vec![("replicas".into(), Type::Int)],
                _ => return None,
            };
            Some(std::sync::Arc::new(crate::ObjectType::new(name, fields)))
        }
    }

    #[test]
    fn schema_typed_objects_declare_only_their_fields() {
        let env = Env::kubernetes()
            .variable("object", Type::Dyn)
            .typed_mutation_library(std::sync::Arc::new(Schemas))
            .build();
        let cases = [
            ("Object{spec: Object.spec{replicas: 3}}", "Object"),
            ("Object{name: 'a'}.name", "string"),
            ("[JSONPatch{op: 'add', path: '/x'}]", "list(JSONPatch)"),
            (
                "Object{spce: 1}",
                "ERROR: <input>:1:12: undefined field 'spce'",
            ),
            (
                "Object.spec{replicas: 'x'}",
                "ERROR: <input>:1:21: expected type of field 'replicas' is 'int' but provided type is 'string'",
            ),
            (
                "Object.spce{}",
                "ERROR: <input>:1:12: undeclared reference to 'Object.spce' (in container '')",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(check(&env, src), want, "{src}");
        }
        // Evaluation is unchanged: any field is accepted at run time.
        let p = env
            .compile("Object{spec: Object.spec{replicas: 2}}")
            .unwrap();
        let v = p.eval(&Activation::new(), &mut Budget::default()).unwrap();
        assert_eq!(v.to_json().unwrap(), j!({"spec": {"replicas": 2}}));
    }

    #[test]
    fn message_literals_are_undeclared_outside_mutations() {
        let env = Env::kubernetes().variable("object", Type::Dyn).build();
        assert_eq!(
            check(&env, "Object{spec: Object.spec{replicas: 3}}"),
            "ERROR: <input>:1:7: undeclared reference to 'Object' (in container '')"
        );
        assert_eq!(
            check(&env, "JSONPatch{op: 'add'}"),
            "ERROR: <input>:1:10: undeclared reference to 'JSONPatch' (in container '')"
        );
    }

    #[test]
    fn a_literal_keeps_each_field_where_its_name_first_appears_with_its_last_value() {
        let p = env()
            .compile("Object{a: 1, b: 2, a: 3, c: 4, b: 5, a: 6}")
            .expect("compiles");
        let v = p.eval(&Activation::new(), &mut Budget::default());
        let Ok(Value::Struct(s)) = v else {
            panic!("not an object: {v:?}");
        };
        let fields: Vec<(&str, Option<serde_json::Value>)> = (s.fields().iter())
            .map(|(name, value)| (&**name, value.to_json().ok()))
            .collect();
        assert_eq!(
            fields,
            [("a", Some(j!(6))), ("b", Some(j!(5))), ("c", Some(j!(4)))]
        );
    }

    #[test]
    fn evaluation_builds_objects_and_patches() {
        let cases = [
            ("Object{}", Ok(j!({}))),
            (
                "Object{spec: Object.spec{replicas: object.spec.replicas + 1}}",
                Ok(j!({"spec": {"replicas": 4}})),
            ),
            ("Object{spec: 1, spec: 2}", Ok(j!({"spec": 2}))),
            (
                "Object{a: 1, b: 2, a: 3, c: 4, b: 5, a: 6}",
                Ok(j!({"a": 6, "b": 5, "c": 4})),
            ),
            ("Object{?spec: optional.none()}", Ok(j!({}))),
            ("Object{spec: object.spec}.spec.replicas", Ok(j!(3))),
            ("Object{}.spec", Ok(j!(null))),
            ("has(Object{spec: 1}.spec)", Ok(j!(true))),
            ("has(Object{spec: 1}.foo)", Ok(j!(false))),
            ("Object{a: 1}.?a.hasValue()", Ok(j!(false))),
            ("Object{a: 1} == Object{a: 1}", Ok(j!(true))),
            ("Object{a: 1} == Object{a: 1.0}", Ok(j!(false))),
            ("Object{a: 1} != Object{a: 2}", Ok(j!(true))),
            (
                "[JSONPatch{op: 'add', path: '/x', value: {'a': [1]}}]",
                Ok(j!([{"op": "add", "path": "/x", "value": {"a": [1]}}])),
            ),
            ("JSONPatch{op: 'add'}.from", Ok(j!(""))),
            ("JSONPatch{op: 'add'}.value", Ok(j!(null))),
            ("has(JSONPatch{op: 'add'}.op)", Ok(j!(true))),
            ("has(JSONPatch{op: 'add'}.path)", Ok(j!(false))),
            ("has(JSONPatch{value: null}.value)", Ok(j!(true))),
            ("JSONPatch{op: 'x'}.?op.hasValue()", Ok(j!(true))),
            (
                "JSONPatch{op: 'a', value: 1} == JSONPatch{op: 'a', value: 1.0}",
                Ok(j!(true)),
            ),
            ("JSONPatch{} == JSONPatch{path: ''}", Ok(j!(true))),
            (
                "JSONPatch{op: object.spec.replicas}",
                Err("unexpected type int64 for JSONPatchType 'op' field".to_string()),
            ),
            (
                "JSONPatch{foo: dyn(1)}",
                Err("unexpected JSONPatchType field: foo".to_string()),
            ),
            (
                "JSONPatch{op: 'add'}.foo",
                Err("unsupported indexer: foo".to_string()),
            ),
            ("Object{}.a.b", Err("no such key: b".to_string())),
            (
                "type(Object.spec{}) == type(Object.spec{a: 1})",
                Ok(j!(true)),
            ),
            (
                "optional.ofNonZeroValue(Object{}).hasValue()",
                Ok(j!(false)),
            ),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), want, "{src}");
        }
    }

    #[test]
    fn message_values_keep_type_and_fields() {
        let p = env()
            .compile("Object{spec: Object.spec{replicas: 2}, metadata: {'a': 'b'}}")
            .unwrap();
        let v = p.eval(&Activation::new(), &mut Budget::default()).unwrap();
        let Value::Struct(s) = v else {
            panic!("not a struct: {v:?}")
        };
        assert_eq!(s.type_name(), "Object");
        let names: Vec<&str> = s.fields().iter().map(|(n, _)| &**n).collect();
        assert_eq!(names, ["spec", "metadata"]);
        let Some(Value::Struct(spec)) = s.field("spec") else {
            panic!("spec is not a struct")
        };
        assert_eq!(spec.type_name(), "Object.spec");
    }

    #[test]
    fn building_a_message_costs_forty() {
        let p = env().compile("Object{}").unwrap();
        let (v, cost) = p.eval_with_cost(&Activation::new(), &mut Budget::default());
        assert!(v.is_ok());
        assert_eq!(cost, 40);
    }
}
