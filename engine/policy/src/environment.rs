//! The CEL environments policy expressions compile in: the base one (object, oldObject,
//! request, namespaceObject, params and authorizer as the policy has them), a policy's variables
//! compiled in it, and the mutation environment on top.

use std::sync::{Arc, OnceLock};

use celgate_cel::{Env, Type, Variables, authz};

use crate::declarations;

/// The policy environment, with `params` declared when the policy has a paramKind and
/// `authorizer` (with `authorizer.requestResource`) everywhere but in message expressions.
pub fn base_environment(has_params: bool, has_authorizer: bool) -> Env {
    // Built once per combination and shared: every policy's expressions compile against one
    // of these four, and each holds the `request` and `namespaceObject` types (~10 KB).
    static BUILT: [OnceLock<Env>; 4] = [const { OnceLock::new() }; 4];
    BUILT[usize::from(has_params) * 2 + usize::from(has_authorizer)]
        .get_or_init(|| build_base_environment(has_params, has_authorizer))
        .clone()
}

/// A policy's variables compiled in its base environment (see [`base_environment`]). Policies
/// without variables share one compiled empty set per environment (it still declares
/// `variables`, with no fields, so `variables.x` reads as upstream reports it).
pub fn policy_variables<'s>(
    has_params: bool,
    has_authorizer: bool,
    variables: impl ExactSizeIterator<Item = (&'s str, &'s str)>,
) -> Arc<Variables> {
    static EMPTY: [OnceLock<Arc<Variables>>; 4] = [const { OnceLock::new() }; 4];
    let base = || base_environment(has_params, has_authorizer);
    if variables.len() > 0 {
        return base().compile_variables(variables);
    }
    EMPTY[usize::from(has_params) * 2 + usize::from(has_authorizer)]
        .get_or_init(|| base().compile_variables(std::iter::empty()))
        .clone()
}

fn build_base_environment(has_params: bool, has_authorizer: bool) -> Env {
    let mut b = Env::kubernetes()
        .variable("object", Type::Dyn)
        .variable("oldObject", Type::Dyn)
        .variable("request", declarations::admission_request())
        .variable("namespaceObject", declarations::namespace());
    if has_params {
        b = b.variable("params", Type::Dyn);
    }
    if has_authorizer {
        b = b
            .variable(authz::AUTHORIZER_VARIABLE, authz::authorizer_type())
            .variable(
                authz::REQUEST_RESOURCE_VARIABLE,
                authz::resource_check_type(),
            );
    }
    b.build()
}

/// The environment of mutation expressions: `env` (with the policy's variables) plus the
/// message types `Object`, `Object.<path>` and `JSONPatch` and `jsonpatch.escapeKey`.
pub fn mutation_environment(env: &Env) -> Env {
    env.extend().mutation_library().build()
}
