//! What kube-apiserver rejects when a policy or binding is written: field rules, limits and the
//! compilation of every expression, with upstream's field paths and messages. It reads the
//! object as JSON (defaults already applied by the CRD schema), so paths are the JSON paths.

mod bindings;
mod environments;
mod expressions;
mod field_error;
mod json;
mod match_resources;
mod mutating_policy;
mod names;
mod policy_fields;
#[cfg(test)]
mod test_objects;
mod validating_policy;

pub use bindings::{validate_binding, validate_mutating_binding};
pub use environments::Environments;
pub use field_error::{FieldError, FieldErrorType, invalid_message};
pub use match_resources::validate_resource_rules;
pub use mutating_policy::validate_mutating_policy;
pub use names::{dns1123_subdomain_errors, qualified_name_errors};
pub use validating_policy::validate_policy;
