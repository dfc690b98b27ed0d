//! What dispatch needs besides the snapshot: the source of authorizers (the operator's
//! SubjectAccessReview client) and the CEL compatibility version of policy writes.

use std::sync::Arc;

use celgate_cel::{Authorizer, Compatibility};
use celgate_engine::model::ParamKind;
use serde_json::Value;

/// Makes authorizers that answer `authorizer` checks for a request's user (the operator's
/// SubjectAccessReview client). Each authorizer serves one request and may cache within it.
/// Its calls may block: dispatch makes them on a blocking thread, never on a runtime worker.
pub trait AuthorizerSource: Send + Sync + std::fmt::Debug {
    /// An authorizer for the user described by the request's `userInfo` JSON.
    fn for_user(&self, user_info: &Value) -> Arc<dyn Authorizer>;

    /// The resource (plural) of a param kind, if the API server serves it.
    fn resource_for(&self, kind: &ParamKind) -> Option<String>;
}

/// What dispatch needs besides the snapshot.
#[derive(Clone, Debug, Default)]
pub struct Deps {
    /// Answers `authorizer` checks and param access checks; without it expressions see no
    /// authorizer and policy writes skip the param access check.
    pub authorizers: Option<Arc<dyn AuthorizerSource>>,
    /// Which CEL libraries new expressions in policy writes may use.
    pub compatibility: Compatibility,
}
