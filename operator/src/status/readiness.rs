//! Whether a policy or binding, at the generation it has now, is compiled and enforced by this
//! process: its compiled form is in the published snapshot and the webhook configurations
//! covering that snapshot are applied. Also how many params a binding resolves.

use std::sync::Arc;

use celgate_engine::ValidatingPolicy;
use celgate_engine::matching::selector_matches;
use celgate_engine::model::{ParamKind, ParamRef, ValidatingBindingSpec};
use celgate_snapshot::{ParamKindEntry, Snapshot};

use crate::registration::Applied;

/// Ready reason: compiled and enforced.
pub const ENFORCED: &str = "Enforced";
/// NotReady reason: an expression does not compile.
pub const COMPILE_ERROR: &str = "CompileError";
/// NotReady reason: no binding names the policy, so it applies to no request.
pub const NOT_BOUND: &str = "NotBound";
/// NotReady reason: the binding names a policy that does not exist.
pub const POLICY_NOT_FOUND: &str = "PolicyNotFound";
/// NotReady reason: the API server does not serve the paramKind.
pub const PARAM_KIND_NOT_SERVED: &str = "ParamKindNotServed";
/// NotReady reason: celgate may not read the paramKind.
pub const PARAM_KIND_FORBIDDEN: &str = "ParamKindForbidden";
/// NotReady reason: the webhook configurations covering this generation could not be applied.
pub const WEBHOOK_NOT_REGISTERED: &str = "WebhookNotRegistered";
/// NotReady reason: celgate does not enforce MutatingAdmissionPolicies yet.
pub const MUTATION_NOT_ENFORCED: &str = "MutationNotEnforced";

/// How an object stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// This process has not caught up with the object's generation yet (not compiled, not
    /// published, or the webhook registration not applied yet): nothing is written until it
    /// has, so `Ready` is never True before enforcement nor False for a moment.
    Pending,
    /// Compiled and enforced.
    Ready(String),
    /// Not enforced, or enforced with errors, for this reason.
    NotReady {
        /// CamelCase reason.
        reason: &'static str,
        /// What a user reads.
        message: String,
    },
}

impl Readiness {
    fn not_ready(reason: &'static str, message: impl Into<String>) -> Self {
        Self::NotReady {
            reason,
            message: message.into(),
        }
    }
}

/// The message of a compile failure: each failing field with its error.
pub fn compile_message(errors: &[(String, String)]) -> String {
    errors
        .iter()
        .map(|(field, error)| format!("{field}: {error}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether the paramKind's watch keeps the policy from being enforced, and why.
fn param_kind_problem(snapshot: &Snapshot, kind: &ParamKind) -> Option<Readiness> {
    match snapshot.params.entry(&kind.api_version, &kind.kind) {
        Some(ParamKindEntry::Ready(_)) => None,
        Some(ParamKindEntry::NotServed) => Some(Readiness::not_ready(
            PARAM_KIND_NOT_SERVED,
            celgate_engine::params::not_served(kind),
        )),
        Some(ParamKindEntry::Forbidden(message)) => Some(Readiness::not_ready(
            PARAM_KIND_FORBIDDEN,
            format!("{message}; grant celgate's ServiceAccount get, list and watch on it"),
        )),
        Some(ParamKindEntry::Syncing) | None => Some(Readiness::Pending),
    }
}

/// Whether the applied webhook configurations cover `compiled` (the same compiled policy is in
/// the set they were built from), else why not.
fn registered(applied: &Applied, covered: impl Fn(&celgate_engine::PolicySet) -> bool) -> Readiness {
    match (&applied.set, &applied.error) {
        (Some(set), _) if covered(set) => Readiness::Ready(String::new()),
        (_, Some(error)) => Readiness::not_ready(WEBHOOK_NOT_REGISTERED, error.clone()),
        _ => Readiness::Pending,
    }
}

/// The compiled policy bound in `set` under `name`, if it is that uid and generation.
fn bound<'a>(
    set: &'a celgate_engine::PolicySet,
    name: &str,
    uid: &str,
    generation: i64,
) -> Option<&'a celgate_engine::BoundPolicy> {
    set.validating.iter().find(|b| {
        &*b.policy.name == name && b.policy.spec.uid == uid && b.policy.spec.generation == generation
    })
}

/// A ValidatingAdmissionPolicy at `uid` and `generation`. `compiled` is its compiled form
/// when the snapshot does not hold it (an unbound policy); `has_bindings` says whether a
/// stored binding names it (then the snapshot will hold it once published).
pub fn validating_policy(
    name: &str,
    uid: &str,
    generation: i64,
    snapshot: &Snapshot,
    applied: &Applied,
    unbound: impl FnOnce() -> Arc<ValidatingPolicy>,
    has_bindings: bool,
) -> Readiness {
    let Some(published) = bound(&snapshot.policies, name, uid, generation) else {
        if has_bindings {
            return Readiness::Pending;
        }
        let errors = unbound().compile_errors();
        if !errors.is_empty() {
            return Readiness::not_ready(COMPILE_ERROR, compile_message(&errors));
        }
        return Readiness::not_ready(
            NOT_BOUND,
            "no ValidatingAdmissionPolicyBinding names this policy, so it applies to no request",
        );
    };
    let errors = published.policy.compile_errors();
    if !errors.is_empty() {
        return Readiness::not_ready(COMPILE_ERROR, compile_message(&errors));
    }
    if let Some(kind) = &published.policy.spec.param_kind
        && let Some(problem) = param_kind_problem(snapshot, kind)
    {
        return problem;
    }
    match registered(applied, |set| {
        bound(set, name, uid, generation).is_some_and(|b| Arc::ptr_eq(&b.policy, &published.policy))
    }) {
        Readiness::Ready(_) => Readiness::Ready(format!(
            "generation {generation} is compiled and enforced through {} binding(s)",
            published.bindings.len()
        )),
        other => other,
    }
}

/// A ValidatingAdmissionPolicyBinding whose converted spec is `binding`. `policy` is the
/// readiness of the policy it names at that policy's stored uid and generation, `None` when
/// no such policy is stored.
pub fn validating_binding(
    binding: &ValidatingBindingSpec,
    policy: Option<(&str, i64, Readiness)>,
    snapshot: &Snapshot,
    applied: &Applied,
) -> Readiness {
    let Some((uid, generation, policy_readiness)) = policy else {
        return Readiness::not_ready(
            POLICY_NOT_FOUND,
            format!(
                "ValidatingAdmissionPolicy '{}' does not exist; this binding applies to no request until it does",
                binding.policy_name
            ),
        );
    };
    match policy_readiness {
        Readiness::Pending => return Readiness::Pending,
        Readiness::NotReady { reason, message } if reason != NOT_BOUND => {
            return Readiness::not_ready(
                reason,
                format!("policy '{}': {message}", binding.policy_name),
            );
        }
        _ => {}
    }
    let in_set = |set: &celgate_engine::PolicySet| {
        bound(set, &binding.policy_name, uid, generation)
            .is_some_and(|b| b.bindings.iter().any(|b| **b == *binding))
    };
    if !in_set(&snapshot.policies) {
        return Readiness::Pending;
    }
    match registered(applied, in_set) {
        Readiness::Ready(_) => Readiness::Ready(format!(
            "enforced with policy '{}' generation {generation}",
            binding.policy_name
        )),
        other => other,
    }
}

/// A MutatingAdmissionPolicy: stored and type checked, never enforced by this version.
pub fn mutating_policy() -> Readiness {
    Readiness::not_ready(
        MUTATION_NOT_ENFORCED,
        "celgate does not enforce MutatingAdmissionPolicies yet: the policy is type checked, but no request is mutated",
    )
}

/// A MutatingAdmissionPolicyBinding naming `policy_name`, which is stored or not.
pub fn mutating_binding(policy_name: &str, policy_stored: bool) -> Readiness {
    if !policy_stored {
        return Readiness::not_ready(
            POLICY_NOT_FOUND,
            format!(
                "MutatingAdmissionPolicy '{policy_name}' does not exist; this binding applies to no request until it does"
            ),
        );
    }
    Readiness::not_ready(
        MUTATION_NOT_ENFORCED,
        "celgate does not enforce MutatingAdmissionPolicies yet: no request is mutated through this binding",
    )
}

/// How many objects of `kind` the `param_ref` selects now (all namespaces when a namespaced
/// kind's paramRef names none, as each request's namespace is then used); `None` without a
/// paramRef or while the kind's objects are not known.
pub fn resolved_params(
    snapshot: &Snapshot,
    kind: Option<&ParamKind>,
    param_ref: Option<&ParamRef>,
) -> Option<i32> {
    let (kind, param_ref) = (kind?, param_ref?);
    let Some(ParamKindEntry::Ready(store)) = snapshot.params.entry(&kind.api_version, &kind.kind)
    else {
        return None;
    };
    let namespace = param_ref.namespace.as_deref().filter(|n| !n.is_empty());
    let count = store
        .objects
        .iter()
        .filter(|((ns, name), object)| {
            namespace.is_none_or(|want| !store.namespaced || ns == want)
                && param_ref.name.as_ref().is_none_or(|n| n == name)
                && param_ref.selector.as_ref().is_none_or(|selector| {
                    let labels = object
                        .get("metadata")
                        .and_then(|m| m.get("labels"))
                        .and_then(serde_json::Value::as_object);
                    selector_matches(selector, labels).unwrap_or(false)
                })
        })
        .count();
    Some(i32::try_from(count).unwrap_or(i32::MAX))
}
