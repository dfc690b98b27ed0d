//! Message literals (`Name{field: value}`): the type-provider hook an environment may carry to
//! resolve such names (the types and the values they evaluate to are part of the value model,
//! [`value`](crate::value), and re-exported here). An environment without a provider has
//! no message types, so every message literal is an undeclared reference there.

use std::fmt;
use std::sync::Arc;

pub use crate::value::{StructType, StructValue};

/// Resolves the type names of message literals.
pub trait TypeProvider: Send + Sync + fmt::Debug {
    /// The struct type named `name` (fully qualified, without a leading dot), if provided.
    fn resolve(&self, name: &str) -> Option<Arc<dyn StructType>>;
}
