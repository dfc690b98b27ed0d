//! The watches and controllers that build and publish the snapshot: one policy controller per
//! kind (which also start and stop the param watches, and fetch the schemas of mutated kinds),
//! and the namespaces. They share nothing but the snapshot store and the stores of the four
//! kinds; `process` runs them beside the webhook registration and the status writer.

pub mod changes;
pub mod exceptions;
pub mod mutated_schemas;
pub mod namespaces;
pub mod params;
pub mod policies;
pub mod policy_set;
pub mod spec_changes;
pub mod stored_binding;
