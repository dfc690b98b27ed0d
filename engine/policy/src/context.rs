//! What evaluating a request reads beyond the request itself: the cluster's namespaces and
//! params through the operator's caches, the authorizer, the deadline, a tracer and the
//! PolicyExceptions honoured. Shared by validating and mutating policies.

use std::sync::Arc;
use std::time::Instant;

use celgate_cel::Authorizer;

use crate::exception::ExceptionsAt;
use crate::matching::Namespaces;
use crate::params::Params;
use crate::trace::Trace;

/// What evaluation reads from the cluster, through the operator's caches.
#[derive(Clone, Copy)]
pub struct Context<'c> {
    /// Namespaces, for selectors and `namespaceObject`.
    pub namespaces: &'c dyn Namespaces,
    /// Param kinds and their objects.
    pub params: &'c dyn Params,
    /// Authorization checks for the request's user (`authorizer`); unbound when `None`.
    pub authorizer: Option<&'c Arc<dyn Authorizer>>,
    /// When evaluation must stop (the API server's webhook timeout), if any.
    pub deadline: Option<Instant>,
    /// Receives each evaluated expression (offline tools); `None` in the webhook.
    pub trace: Option<&'c dyn Trace>,
    /// The PolicyExceptions honoured and the time of the decision; `None` honours none
    /// (mutating policies are never excepted).
    pub exceptions: Option<ExceptionsAt<'c>>,
}
