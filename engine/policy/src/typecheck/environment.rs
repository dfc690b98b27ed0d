//! The environments expressions are type-checked in, per kind.
//!
//! Upstream's (kube-controller-manager): the stored-expressions base environment with
//! `object`/`oldObject` typed by the kind's schema, `params` typed by the paramKind's (or
//! `dyn`), `request`, `namespaceObject`, and `authorizer` (without
//! `authorizer.requestResource`) for every expression, message expressions included; the
//! policy's variables checked in order into it.
//!
//! celgate's checks of variables, matchConditions, auditAnnotations and mutations use the
//! declarations those expressions have at run time instead: `authorizer.requestResource`
//! too, and for mutations the `Object` and `JSONPatch` types, `Object` typed by the kind's
//! schema.

use std::sync::Arc;

use celgate_cel::{CheckedVariables, Env, EnvBuilder, Type, authz};

use crate::declarations;
use crate::model::NamedExpression;
use crate::schema::{ApplyConfigurationTypes, Schema};

/// The typed declarations of one kind.
pub(crate) struct Declarations {
    /// The type of `object` and `oldObject`.
    pub object: Type,
    /// The type of `params`, when the policy has a paramKind.
    pub params: Option<Type>,
    /// The kind's schema, for mutations' `Object` types.
    pub schema: Arc<Schema>,
}

/// Which declarations an environment has.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavour {
    /// kube-controller-manager's type checker.
    Upstream,
    /// What a validating policy's expressions see at run time.
    Runtime,
    /// What a mutating policy's expressions see at run time (with typed `Object`s).
    Mutation,
}

/// One kind's environment of one flavour, with the policy's variables.
pub(crate) fn environment(
    decls: &Declarations,
    flavour: Flavour,
    variables: &[NamedExpression],
) -> CheckedVariables {
    let mut b: EnvBuilder = Env::kubernetes()
        .variable("object", decls.object.clone())
        .variable("oldObject", decls.object.clone())
        .variable("request", declarations::admission_request())
        .variable("namespaceObject", declarations::namespace());
    if let Some(params) = &decls.params {
        b = b.variable("params", params.clone());
    }
    b = b.variable(authz::AUTHORIZER_VARIABLE, authz::authorizer_type());
    if matches!(flavour, Flavour::Runtime | Flavour::Mutation) {
        b = b.variable(
            authz::REQUEST_RESOURCE_VARIABLE,
            authz::resource_check_type(),
        );
    }
    if flavour == Flavour::Mutation {
        let types = ApplyConfigurationTypes::new(decls.schema.clone());
        b = b.typed_mutation_library(Arc::new(types));
    }
    b.build().check_variables(
        variables
            .iter()
            .map(|v| (v.name.as_str(), v.expression.as_str())),
    )
}
