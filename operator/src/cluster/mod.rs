//! What the running operator learns from the API server: whether it can run there
//! (requirements), the served resources (discovery),
//! the OpenAPI v3 schemas of the kinds it needs, the type checker's view of both, who celgate
//! is to RBAC, and authorization checks for the `authorizer` of policy expressions.

pub mod authorizer;
pub mod discovery;
pub mod identity;
pub mod requirements;
pub mod schemas;
pub mod types;
