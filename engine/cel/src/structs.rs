//! Message literals (`Name{field: value}`): the type-provider hook an environment may carry to
//! resolve such names, and the values they evaluate to. An environment without a provider has
//! no message types, so every message literal is an undeclared reference there.

use std::fmt;
use std::sync::Arc;

use crate::error::EvalError;
use crate::types::ObjectType;
use crate::value::Value;

/// Resolves the type names of message literals.
pub trait TypeProvider: Send + Sync + fmt::Debug {
    /// The struct type named `name` (fully qualified, without a leading dot), if provided.
    fn resolve(&self, name: &str) -> Option<Arc<dyn StructType>>;
}

/// A struct type a [`TypeProvider`] resolved: what the checker sees and how its values behave.
pub trait StructType: Send + Sync + fmt::Debug {
    /// The type's name, as `type(x)` and the checker report it.
    fn name(&self) -> &str;

    /// The name of the type value `type(x)` gives for a value of this type.
    fn type_value_name(&self) -> &str;

    /// The checker's view of the type: its fields and their types.
    fn checker_type(&self) -> Arc<ObjectType>;

    /// Accepts (or rejects, with the error evaluation reports) `value` for `field` when a
    /// literal is built.
    fn check_field(&self, field: &str, value: &Value<'_>) -> Result<(), EvalError>;

    /// `value.field`.
    fn select<'a>(&self, value: &StructValue<'a>, field: &str) -> Result<Value<'a>, EvalError>;

    /// `has(value.field)`.
    fn is_set(&self, value: &StructValue<'_>, field: &str) -> Result<bool, EvalError>;

    /// `value.?field`: the field if the type reports it as present to optional selection.
    fn opt_select<'a>(
        &self,
        value: &StructValue<'a>,
        field: &str,
    ) -> Result<Option<Value<'a>>, EvalError>;

    /// Equality of two values of this type.
    fn equals(&self, a: &StructValue<'_>, b: &StructValue<'_>) -> bool;

    /// True if `value` is the type's zero value (for `optional.ofNonZeroValue`).
    fn is_zero(&self, value: &StructValue<'_>) -> bool;
}

/// A value built by a message literal: its type and the fields it was given, in order (a
/// field given twice keeps the last value).
#[derive(Clone)]
pub struct StructValue<'a> {
    ty: Arc<dyn StructType>,
    fields: Vec<(Arc<str>, Value<'a>)>,
}

impl<'a> StructValue<'a> {
    /// A value of `ty` with `fields`; a name given twice keeps its last value.
    pub fn new(ty: Arc<dyn StructType>, fields: Vec<(Arc<str>, Value<'a>)>) -> Self {
        let mut out: Vec<(Arc<str>, Value<'a>)> = Vec::with_capacity(fields.len());
        for (name, value) in fields {
            match out.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = value,
                None => out.push((name, value)),
            }
        }
        Self { ty, fields: out }
    }

    /// The type's name (`Object.spec`, `JSONPatch`).
    pub fn type_name(&self) -> &str {
        self.ty.name()
    }

    /// The value's type.
    pub fn struct_type(&self) -> &Arc<dyn StructType> {
        &self.ty
    }

    /// The fields that were set, in the order the literal gave them.
    pub fn fields(&self) -> &[(Arc<str>, Value<'a>)] {
        &self.fields
    }

    /// The value of field `name`, if it was set.
    pub fn field(&self, name: &str) -> Option<&Value<'a>> {
        self.fields
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| v)
    }

    /// `self.name`, as the type defines selection.
    pub fn select(&self, name: &str) -> Result<Value<'a>, EvalError> {
        self.ty.select(self, name)
    }

    /// `has(self.name)`.
    pub fn is_set(&self, name: &str) -> Result<bool, EvalError> {
        self.ty.is_set(self, name)
    }

    /// `self.?name`.
    pub fn opt_select(&self, name: &str) -> Result<Option<Value<'a>>, EvalError> {
        self.ty.opt_select(self, name)
    }

    /// CEL equality: same type and equal as the type defines it.
    pub fn equals(&self, other: &StructValue<'_>) -> bool {
        self.type_name() == other.type_name() && self.ty.equals(self, other)
    }
}

impl fmt::Debug for StructValue<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct(self.type_name());
        for (n, v) in &self.fields {
            s.field(n, v);
        }
        s.finish()
    }
}
