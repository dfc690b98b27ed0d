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
pub use mutate::{BoundMutatingPolicy, KindSchemas, MutatingPolicy, MutationOutcome};
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
    /// Mutating policies that have at least one binding, with their bindings, in the order
    /// they run: by policy name, each policy's bindings by binding name.
    pub mutating: Vec<BoundMutatingPolicy>,
}

/// One of celgate's mutating webhooks: the mutating policies of one failure policy and one
/// reinvocation policy (the API server reinvokes a webhook as a whole, so policies that must
/// run once are served apart from those that may run again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MutatingWebhookGroup {
    /// The policies' failurePolicy.
    pub failure: model::FailurePolicy,
    /// The policies' reinvocationPolicy.
    pub reinvocation: model::ReinvocationPolicy,
}

impl MutatingWebhookGroup {
    /// The four groups, in the order the API server calls celgate's mutating webhooks:
    /// fail-closed before fail-open, run-once before reinvocable.
    pub const ALL: [MutatingWebhookGroup; 4] = [
        Self::new(model::FailurePolicy::Fail, model::ReinvocationPolicy::Never),
        Self::new(
            model::FailurePolicy::Fail,
            model::ReinvocationPolicy::IfNeeded,
        ),
        Self::new(
            model::FailurePolicy::Ignore,
            model::ReinvocationPolicy::Never,
        ),
        Self::new(
            model::FailurePolicy::Ignore,
            model::ReinvocationPolicy::IfNeeded,
        ),
    ];

    /// The group of this failure and reinvocation policy.
    pub const fn new(
        failure: model::FailurePolicy,
        reinvocation: model::ReinvocationPolicy,
    ) -> Self {
        Self {
            failure,
            reinvocation,
        }
    }

    /// The group a mutating policy is served in.
    pub fn of(policy: &MutatingPolicy) -> Self {
        Self::new(policy.failure_policy(), policy.spec.reinvocation_policy)
    }
}

impl PolicySet {
    /// Whether any bound policy may read `authorizer` in its expressions.
    pub fn uses_authorizer(&self) -> bool {
        self.validating.iter().any(|b| b.policy.uses_authorizer)
            || self.mutating.iter().any(|b| b.policy.uses_authorizer)
    }

    /// The bound mutating policies of one webhook group (all with `None`), in order.
    pub fn mutating_in(&self, only: Option<MutatingWebhookGroup>) -> Vec<BoundMutatingPolicy> {
        self.mutating
            .iter()
            .filter(|b| only.is_none_or(|g| MutatingWebhookGroup::of(&b.policy) == g))
            .cloned()
            .collect()
    }

    /// Mutates a request with the bound mutating policies in their order; with `only`, those
    /// of one webhook group. A kind without a schema in `schemas` gets upstream's 503.
    pub fn mutate(
        &self,
        req: &Request<'_>,
        ctx: &Context<'_>,
        schemas: &dyn KindSchemas,
        only: Option<MutatingWebhookGroup>,
    ) -> MutationOutcome {
        match only {
            None => mutate::mutate(&self.mutating, req, ctx, schemas),
            Some(_) => mutate::mutate(&self.mutating_in(only), req, ctx, schemas),
        }
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
