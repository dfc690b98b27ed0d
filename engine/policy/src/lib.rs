//! celgate's policy engine, with no IO: policies are compiled once ([`compile`]), requests are
//! matched against them ([`matching`]) and evaluated into one admission outcome
//! ([`mod@validate`]), or mutated by mutating policies ([`mod@mutate`]).
//! The operator feeds it plain data ([`model`]); the webhook feeds it decoded requests
//! ([`request`]) and a [`PolicySet`] snapshot.

pub mod apivalidation;
pub mod compile;
pub mod declarations;
mod evaluation;
mod match_conditions;
pub mod matching;
pub mod model;
pub mod mutate;
pub mod paramaccess;
pub mod params;
pub mod request;
pub mod schema;
pub mod typecheck;
pub mod validate;

pub use compile::{ValidatingPolicy, compile_validating};
pub use matching::Namespaces;
pub use params::{ParamKindState, ParamObjects, Params};
pub use request::{Request, RequestError};
pub use validate::{BoundPolicy, Context, Outcome, validate};

/// The API group of celgate's own kinds; policies never apply to them.
pub const GROUP: &str = "admission.celgate.io";

/// Everything the webhook needs to decide requests: the bound policies of one snapshot.
#[derive(Debug, Default, Clone)]
pub struct PolicySet {
    /// Validating policies that have at least one binding, with their bindings.
    pub validating: Vec<BoundPolicy>,
}

impl PolicySet {
    /// Whether any bound policy may read `authorizer` in its expressions.
    pub fn uses_authorizer(&self) -> bool {
        self.validating.iter().any(|b| b.policy.uses_authorizer)
    }

    /// Validates a request against the bound validating policies; with `only`, against those
    /// of that failure policy (each of celgate's two webhooks serves one, so a request both
    /// match is evaluated once per policy, not twice).
    pub fn validate(
        &self,
        req: &Request<'_>,
        ctx: &Context<'_>,
        only: Option<model::FailurePolicy>,
    ) -> Outcome {
        validate::validate_only(&self.validating, req, ctx, only)
    }
}
