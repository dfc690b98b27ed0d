//! What both kinds of policy work out alike before evaluating an expression: whether a policy
//! is configured to decide the request (its match constraints, its param kind, the request's
//! namespace) and, for each binding, whether it applies and with which params. Each kind then
//! reports these errors in its own way.

use serde_json::Value;

use crate::compile::PolicySpec;
use crate::context::Context;
use crate::evaluation::namespace_object;
use crate::matching::{self, MatchError, Namespaces};
use crate::model::{MatchResources, MutatingBindingSpec, ParamRef, ValidatingBindingSpec};
use crate::params::{self, Collected, ParamError, ParamKindState, ParamList, Params};
use crate::request::Request;
use crate::trace::Skip;

/// Why a policy cannot decide a request, worded as upstream words it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ScopeError {
    /// The policy has no match constraints.
    #[error("failed to configure policy: policy contained no match constraints, a required field")]
    NoMatchConstraints,
    /// The policy's match constraints cannot be evaluated.
    #[error("failed to configure policy: {0}")]
    Match(MatchError),
    /// The API server does not serve the policy's param kind ([`params::not_served`]'s text).
    #[error("failed to configure policy: {0}")]
    ParamKindNotServed(String),
    /// The request's namespace is unknown: upstream returns this at once, as `NotFound`,
    /// whatever the failurePolicy.
    #[error(transparent)]
    Namespace(MatchError),
}

/// Whether a policy decides the request: the request's Namespace object (`null` where it has
/// none) when it does, `None` when the policy's match constraints miss.
pub(crate) fn policy_scope<'n>(
    spec: &impl PolicySpec,
    req: &Request<'_>,
    ctx: &Context<'n>,
) -> Result<Option<&'n Value>, ScopeError> {
    let constraints = spec
        .match_constraints()
        .ok_or(ScopeError::NoMatchConstraints)?;
    if !matching::matches(constraints, req, ctx.namespaces).map_err(ScopeError::Match)? {
        return Ok(None);
    }
    let unserved = (spec.param_kind())
        .filter(|kind| matches!(ctx.params.kind(kind), ParamKindState::NotServed));
    if let Some(kind) = unserved {
        return Err(ScopeError::ParamKindNotServed(params::not_served(kind)));
    }
    namespace_object(req, ctx.namespaces)
        .map(Some)
        .map_err(ScopeError::Namespace)
}

/// Why a binding cannot decide a request (under the policy's failurePolicy), worded as
/// upstream words it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BindingError {
    /// The binding's match resources cannot be evaluated.
    #[error("failed to configure binding: {0}")]
    Match(#[from] MatchError),
    /// The binding's params cannot be collected.
    #[error("failed to configure binding: {0}")]
    Params(#[from] ParamError),
}

/// The params to evaluate a binding with, or why the binding does not apply (its match
/// resources miss, or no param and `Allow`).
pub(crate) type BindingParams<'p> = Result<ParamList<'p>, Skip>;

/// What a binding of either kind holds alike.
pub(crate) trait BindingSpec {
    /// The binding's match resources, if any.
    fn match_resources(&self) -> Option<&MatchResources>;
    /// The binding's paramRef, if any.
    fn param_ref(&self) -> Option<&ParamRef>;
}

/// Implements [`BindingSpec`] for bindings whose fields are named as the trait's methods.
macro_rules! impl_binding_spec {
    ($($binding:ty),+) => {$(
        impl BindingSpec for $binding {
            fn match_resources(&self) -> Option<&MatchResources> {
                self.match_resources.as_ref()
            }
            fn param_ref(&self) -> Option<&ParamRef> {
                self.param_ref.as_deref()
            }
        }
    )+};
}

impl_binding_spec!(ValidatingBindingSpec, MutatingBindingSpec);

/// The params to evaluate a binding of the policy `spec` with, its match read in `namespaces`.
pub(crate) fn binding_params<'p>(
    spec: &impl PolicySpec,
    binding: &impl BindingSpec,
    req: &Request<'_>,
    namespaces: &dyn Namespaces,
    params: &'p dyn Params,
) -> Result<BindingParams<'p>, BindingError> {
    if let Some(m) = binding.match_resources()
        && !matching::matches(m, req, namespaces)?
    {
        return Ok(Err(Skip::BindingNotMatched));
    }
    let collected = params::collect(spec.param_kind(), binding.param_ref(), req, params)?;
    Ok(match collected {
        Collected::Evaluate(list) => Ok(list),
        Collected::Skip => Err(Skip::NoParams),
    })
}
