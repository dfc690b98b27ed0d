//! One evaluation of a policy (the request, the object as it stands, its namespace, one param,
//! the authorizer): the activation each batch of expressions runs in, and the cost budgets.
//! Shared by validating and mutating policies.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use celgate_cel::authz::ResourceAttributes;
use celgate_cel::{Activation, Authorizer, Budget, PER_CALL_LIMIT, Variables};

use crate::matching::{MatchError, Namespaces};
use crate::request::Request;

use crate::check::CheckError;
use crate::trace::Trace;

static NULL: serde_json::Value = serde_json::Value::Null;

/// The Namespace object of a namespaced request (null for cluster-scoped requests and for
/// Namespace objects themselves); an unknown namespace is an error returned as is, as upstream.
pub(crate) fn namespace_object<'n>(
    req: &Request<'_>,
    namespaces: &'n dyn Namespaces,
) -> Result<&'n serde_json::Value, MatchError> {
    let is_namespace = req.kind.group.is_empty() && req.kind.name == "Namespace";
    if req.namespace.is_empty() || is_namespace {
        return Ok(&NULL);
    }
    namespaces
        .get(req.namespace)
        .ok_or_else(|| MatchError::NamespaceNotFound(req.namespace.to_string()))
}

/// Runs `evaluate` (one policy's evaluation) so that a panic inside it, a defect in celgate,
/// becomes that policy's error (under its failurePolicy) instead of taking the request, or the
/// process, down.
pub(crate) fn guarded<T>(evaluate: impl FnOnce() -> T) -> Result<T, CheckError> {
    catch_unwind(AssertUnwindSafe(evaluate)).map_err(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string());
        CheckError::Internal(what)
    })
}

/// One evaluation of a policy: the request, the object its expressions see as `object` (the
/// request's, or a mutating policy's result so far), its namespace, one param and the
/// authorizer. Each expression batch gets a fresh activation from it, so composited variables
/// are memoised per batch as upstream.
pub(crate) struct Evaluation<'a> {
    pub(crate) req: &'a Request<'a>,
    pub(crate) object: celgate_cel::Value<'a>,
    /// The request's old object, or `null` for a policy that never reads it (see
    /// [`Evaluation::old_object_for`]).
    pub(crate) old_object: celgate_cel::Value<'a>,
    pub(crate) namespace_object: &'a serde_json::Value,
    /// Whether the policy has a paramKind (so `params` is declared).
    pub(crate) has_params: bool,
    pub(crate) param: Option<&'a serde_json::Value>,
    /// The policy's variables, for expressions that may read `authorizer`.
    pub(crate) variables: &'a Arc<Variables>,
    /// The policy's variables as message expressions see them (no `authorizer`).
    pub(crate) message_variables: &'a Arc<Variables>,
    pub(crate) authorizer: Option<&'a Arc<dyn Authorizer>>,
    pub(crate) deadline: Option<Instant>,
    /// Receives each evaluated expression (offline tools); `None` in the webhook.
    pub(crate) trace: Option<&'a dyn Trace>,
}

/// Which expressions an activation serves: they differ in `authorizer` and variables.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Batch {
    /// Validations, match conditions, mutations: `authorizer` bound.
    Checks,
    /// Message expressions: no `authorizer` declared.
    Messages,
    /// Audit annotations: `authorizer` declared but not bound, as upstream.
    AuditAnnotations,
}

impl<'a> Evaluation<'a> {
    /// What a policy's evaluations bind as `oldObject`: the request's old object when the
    /// policy may read it, else `null`, so the old object is not decoded for it.
    pub(crate) fn old_object_for(
        req: &Request<'a>,
        reads_old_object: bool,
    ) -> celgate_cel::Value<'a> {
        if reads_old_object {
            req.cel_old_object()
        } else {
            celgate_cel::Value::Null
        }
    }

    /// A fresh budget of `total`, stopping at the request's deadline.
    pub(crate) fn budget(&self, total: u64) -> Budget {
        let budget = Budget::new(PER_CALL_LIMIT, total);
        match self.deadline {
            Some(at) => budget.with_deadline(at),
            None => budget,
        }
    }

    /// The activation for a policy's validations, kept in `slot` for the evaluations of its
    /// other params for the same request: nothing in it but `params` and the variables' memo
    /// depends on the param, so those two are bound again (1,024 params: a fifth of each
    /// param's evaluation was building and dropping its activation).
    pub(crate) fn checks_activation<'s>(
        &self,
        slot: &'s mut Option<Activation<'a>>,
    ) -> &'s Activation<'a> {
        match slot {
            Some(act) => {
                if self.has_params {
                    act.bind_json("params", self.param.unwrap_or(&NULL));
                }
                act.bind_variables(self.variables);
                act
            }
            None => slot.insert(self.activation(Batch::Checks)),
        }
    }

    /// A fresh activation for one batch of expressions.
    pub(crate) fn activation(&self, batch: Batch) -> Activation<'a> {
        let mut act = Activation::new();
        act.bind("object", self.object.clone());
        act.bind("oldObject", self.old_object.clone());
        act.bind_json("request", self.req.raw);
        act.bind_json("namespaceObject", self.namespace_object);
        if self.has_params {
            act.bind_json("params", self.param.unwrap_or(&NULL));
        }
        if batch == Batch::Messages {
            act.bind_variables(self.message_variables);
        } else {
            act.bind_variables(self.variables);
        }
        if let (Batch::Checks, Some(authz)) = (batch, self.authorizer) {
            let r = self.req;
            act.bind_authorizer(
                authz.clone(),
                Some(ResourceAttributes {
                    group: r.resource.group.to_string(),
                    resource: r.resource.name.to_string(),
                    subresource: r.sub_resource.to_string(),
                    namespace: r.namespace.to_string(),
                    name: r.name.to_string(),
                    ..Default::default()
                }),
            );
        }
        act
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use serde_json::json;

    use crate::model::{NamedExpression, Validation, ValidationAction};
    use crate::request::Request;
    use crate::validate::test_policies::{bound, cache, context, create_deployment, run, spec};
    use crate::validate::validate;

    #[test]
    fn variables_and_namespace_object_as_in_the_docs_example() {
        let mut s = spec(vec![Validation {
            expression: "variables.exempt || variables.containersToCheck.all(c, c.image.startsWith(variables.environment + '.'))".into(),
            message_expression: Some("'only ' + variables.environment + ' images are allowed in namespace ' + namespaceObject.metadata.name".into()),
            ..Default::default()
        }]);
        let var = |name: &str, expression: &str| NamedExpression {
            name: name.into(),
            expression: expression.into(),
        };
        s.variables = vec![
            var(
                "environment",
                "'environment' in namespaceObject.metadata.labels ? namespaceObject.metadata.labels['environment'] : 'prod'",
            ),
            var(
                "exempt",
                "'exempt' in namespaceObject.metadata.labels && namespaceObject.metadata.labels['exempt'] == 'true'",
            ),
            var("containers", "object.spec.template.spec.containers"),
            var(
                "containersToCheck",
                "variables.containers.filter(c, c.image.contains('example.com/'))",
            ),
        ];
        let denied = run(s.clone(), &[ValidationAction::Deny], "example.com/app:1");
        assert_eq!(
            denied.denial.map(|d| d.message),
            Some("ValidatingAdmissionPolicy 'p' with binding 'b' denied request: only staging images are allowed in namespace staging-ns".to_string())
        );
        assert!(run(s, &[ValidationAction::Deny], "staging.example.com/app:1").allowed());
    }

    #[test]
    fn evaluation_stops_at_the_deadline() {
        let list = (0..30).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        let s = spec(vec![Validation {
            expression: format!("[{list}].all(a, [{list}].all(b, a + b >= 0))"),
            ..Default::default()
        }]);
        let bound = bound(s, vec![ValidationAction::Deny]);
        let raw = create_deployment(json!({"spec": {}}));
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let mut ctx = context(&namespaces);
        assert!(validate(std::slice::from_ref(&bound), &req, &ctx).allowed());
        ctx.deadline = Some(Instant::now());
        let denial = validate(&[bound], &req, &ctx).denial.expect("interrupted");
        assert!(
            denial
                .message
                .ends_with("resulted in error: operation interrupted"),
            "{}",
            denial.message
        );
    }
}
