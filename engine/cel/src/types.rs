//! Checker types: what the type checker infers for every expression, and what declarations use.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// A CEL type as the checker sees it. `Display` spells it as cel-go does.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Type {
    /// `dyn`: any value; assignable to and from every type.
    Dyn,
    /// `null_type`.
    Null,
    /// `bool`.
    Bool,
    /// `int` (64-bit signed).
    Int,
    /// `uint` (64-bit unsigned).
    Uint,
    /// `double`.
    Double,
    /// `string`.
    String,
    /// `bytes`.
    Bytes,
    /// `google.protobuf.Timestamp`.
    Timestamp,
    /// `google.protobuf.Duration`.
    Duration,
    /// `list(T)`.
    List(Box<Type>),
    /// `map(K, V)`.
    Map(Box<Type>, Box<Type>),
    /// `type(T)`: the type of a type value such as `int`.
    Type(Box<Type>),
    /// `optional_type(T)`.
    Optional(Box<Type>),
    /// A named object type with declared fields, e.g. `kubernetes.AdmissionRequest`.
    Object(Arc<ObjectType>),
    /// A named opaque (abstract) type with type parameters, e.g. `kubernetes.Quantity`,
    /// `net.IP` or `tuple(int, string)`.
    Opaque(Arc<str>, Vec<Type>),
    /// A type parameter (in declarations) or a free type variable (while checking).
    Param(Arc<str>),
    /// The type of an expression that failed to check.
    Error,
}

/// A named object type and its fields.
#[derive(Clone, Debug)]
pub struct ObjectType {
    name: String,
    fields: BTreeMap<String, Type>,
    /// The type of every field not in `fields`, for types that accept any field name.
    other_fields: Option<Type>,
}

impl ObjectType {
    /// An object type named `name` with `fields`.
    pub fn new(name: impl Into<String>, fields: impl IntoIterator<Item = (String, Type)>) -> Self {
        Self {
            name: name.into(),
            fields: fields.into_iter().collect(),
            other_fields: None,
        }
    }

    /// An object type that also accepts fields it does not declare, each of type `other`
    /// (Kubernetes' dynamic `Object` types: every field `dyn`).
    pub fn open(
        name: impl Into<String>,
        fields: impl IntoIterator<Item = (String, Type)>,
        other: Type,
    ) -> Self {
        Self {
            other_fields: Some(other),
            ..Self::new(name, fields)
        }
    }

    /// The type's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The type of field `name`, if declared.
    pub fn field(&self, name: &str) -> Option<&Type> {
        self.fields.get(name).or(self.other_fields.as_ref())
    }

    /// All fields in name order.
    pub fn fields(&self) -> impl Iterator<Item = (&str, &Type)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v))
    }
}

impl PartialEq for ObjectType {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}
impl Eq for ObjectType {}
impl std::hash::Hash for ObjectType {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}
impl PartialOrd for ObjectType {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ObjectType {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.name.cmp(&other.name)
    }
}

impl Type {
    /// `list(elem)`.
    pub fn list(elem: Type) -> Type {
        Type::List(Box::new(elem))
    }

    /// `map(key, value)`.
    pub fn map(key: Type, value: Type) -> Type {
        Type::Map(Box::new(key), Box::new(value))
    }

    /// `optional_type(inner)`.
    pub fn optional(inner: Type) -> Type {
        Type::Optional(Box::new(inner))
    }

    /// `type(inner)`.
    pub fn type_of(inner: Type) -> Type {
        Type::Type(Box::new(inner))
    }

    /// An opaque type without parameters (library types such as `kubernetes.URL`).
    pub fn opaque(name: &str) -> Type {
        Type::Opaque(Arc::from(name), Vec::new())
    }

    /// An abstract type with parameters, e.g. `tuple(int, string)`.
    pub fn abstract_type(name: &str, params: Vec<Type>) -> Type {
        Type::Opaque(Arc::from(name), params)
    }

    /// The type of a field a type provider declares without a type (cel-go's nil field type,
    /// as for unknown `JSONPatch` fields): printed empty, and only `dyn` is assignable to it.
    pub fn untyped() -> Type {
        Type::Opaque(Arc::from(""), Vec::new())
    }

    /// True for [`Type::untyped`].
    pub fn is_untyped(&self) -> bool {
        matches!(self, Type::Opaque(n, p) if n.is_empty() && p.is_empty())
    }

    /// A type parameter named `name`.
    pub fn param(name: &str) -> Type {
        Type::Param(Arc::from(name))
    }

    /// An object type with fields.
    pub fn object(
        name: impl Into<String>,
        fields: impl IntoIterator<Item = (String, Type)>,
    ) -> Type {
        Type::Object(Arc::new(ObjectType::new(name, fields)))
    }

    /// True for `dyn` (and the error type, which behaves like it).
    pub fn is_dyn(&self) -> bool {
        matches!(self, Type::Dyn | Type::Error)
    }

    /// The name of the runtime type of values of this type, as `type(x)` reports it
    /// (`list`, `map`, `int`, …).
    pub fn runtime_name(&self) -> &str {
        match self {
            Type::Dyn => "dyn",
            Type::Null => "null_type",
            Type::Bool => "bool",
            Type::Int => "int",
            Type::Uint => "uint",
            Type::Double => "double",
            Type::String => "string",
            Type::Bytes => "bytes",
            Type::Timestamp => "google.protobuf.Timestamp",
            Type::Duration => "google.protobuf.Duration",
            Type::List(_) => "list",
            Type::Map(..) => "map",
            Type::Type(_) => "type",
            Type::Optional(_) => "optional_type",
            Type::Object(o) => o.name(),
            Type::Opaque(n, _) => n,
            Type::Param(p) => p,
            Type::Error => "*error*",
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::List(e) => write!(f, "list({e})"),
            Type::Map(k, v) => write!(f, "map({k}, {v})"),
            Type::Type(t) => write!(f, "type({t})"),
            Type::Optional(t) => write!(f, "optional_type({t})"),
            Type::Opaque(n, params) if !params.is_empty() => {
                write!(f, "{n}(")?;
                for (i, p) in params.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{p}")?;
                }
                f.write_str(")")
            }
            other => f.write_str(other.runtime_name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_matches_cel_go() {
        assert_eq!(Type::list(Type::String).to_string(), "list(string)");
        assert_eq!(
            Type::map(Type::String, Type::Dyn).to_string(),
            "map(string, dyn)"
        );
        assert_eq!(Type::Null.to_string(), "null_type");
        assert_eq!(Type::type_of(Type::Int).to_string(), "type(int)");
        assert_eq!(Type::optional(Type::Int).to_string(), "optional_type(int)");
        assert_eq!(
            Type::object("kubernetes.AdmissionRequest", []).to_string(),
            "kubernetes.AdmissionRequest"
        );
    }
}
