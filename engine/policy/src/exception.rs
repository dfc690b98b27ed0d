//! Policy exceptions: which requests skip which validating policies' bindings, until when. The
//! one decision of "is this request excepted from this binding now?", which admission, the audit
//! and the offline commands all reach through [`crate::validate`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use celgate_cel::Variables;

use crate::compile::{CompiledMatchCondition, compile_checked, result_types};
use crate::environment::policy_variables;
use crate::evaluation::Evaluation;
use crate::match_conditions::{MatchConditions, Sources, evaluate_match_conditions};
use crate::matching::{self, Namespaces};
use crate::model::{MatchResources, NamedExpression};
use crate::request::Request;

/// One policy an exception names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExceptedPolicy {
    /// The ValidatingAdmissionPolicy's name.
    pub name: String,
    /// The bindings excepted; `None` excepts every binding of the policy.
    pub bindings: Option<Vec<String>>,
}

/// A PolicyException as written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ExceptionSpec {
    /// The exception's namespace.
    pub namespace: String,
    /// The exception's name.
    pub name: String,
    /// The policies (and bindings) it excepts.
    pub policies: Vec<ExceptedPolicy>,
    /// The requests it excepts.
    pub match_resources: MatchResources,
    /// CEL conditions that must all be true for it to apply.
    pub match_conditions: Vec<NamedExpression>,
    /// From this instant on it no longer applies; `None` never expires.
    pub expires_at: Option<SystemTime>,
}

/// A PolicyException ready to decide requests.
pub struct Exception {
    /// The exception as written.
    pub spec: ExceptionSpec,
    /// `namespace/name`, as decisions, reports and metrics name it.
    pub id: Arc<str>,
    match_conditions: Vec<CompiledMatchCondition>,
    /// Whether every match condition compiled (else the exception never applies).
    compiled: bool,
    /// The (empty) variables its conditions' environment declares.
    variables: Arc<Variables>,
}

impl std::fmt::Debug for Exception {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exception")
            .field("id", &self.id)
            .field("compiled", &self.compiled)
            .finish_non_exhaustive()
    }
}

impl Exception {
    /// Compiles the exception's match conditions (no params, no authorizer).
    pub fn compile(spec: ExceptionSpec) -> Self {
        let variables = policy_variables(false, false, std::iter::empty());
        let match_conditions = (spec.match_conditions.iter())
            .map(|c| CompiledMatchCondition {
                name: c.name.clone(),
                program: compile_checked(variables.env(), &c.expression, result_types::CONDITION),
            })
            .collect::<Vec<_>>();
        let compiled = match_conditions.iter().all(|c| c.program.is_ok());
        Self {
            compiled,
            id: Arc::from(format!("{}/{}", spec.namespace, spec.name)),
            spec,
            match_conditions,
            variables,
        }
    }

    /// The match conditions that do not compile, with their field paths. Such an exception
    /// never applies: the policies it names stay in force.
    pub fn compile_errors(&self) -> Vec<(String, String)> {
        crate::compile::match_condition_errors(&self.match_conditions).collect()
    }

    /// Whether the exception has expired at `now`: from its `expiresAt` second on.
    pub fn expired_at(&self, now: SystemTime) -> bool {
        self.spec.expires_at.is_some_and(|at| now >= at)
    }

    /// Whether the exception names this binding of this policy.
    pub fn names(&self, policy: &str, binding: &str) -> bool {
        self.spec.policies.iter().any(|p| {
            p.name == policy
                && p.bindings
                    .as_ref()
                    .is_none_or(|b| b.iter().any(|b| b == binding))
        })
    }

    /// Whether the exception applies to `req` at `now`: not expired, compiled, its match
    /// resources match and its conditions all hold. A selector or condition that cannot be
    /// evaluated means no: the exception lets through only what it clearly matches.
    fn applies(
        &self,
        req: &Request<'_>,
        namespaces: &dyn Namespaces,
        deadline: Option<Instant>,
        now: SystemTime,
    ) -> bool {
        if self.expired_at(now) || !self.compiled {
            return false;
        }
        if !matching::matches(&self.spec.match_resources, req, namespaces).unwrap_or(false) {
            return false;
        }
        if self.match_conditions.is_empty() {
            return true;
        }
        let evaluation = Evaluation {
            req,
            object: req.cel_object(),
            old_object: req.cel_old_object(),
            namespace_object: &serde_json::Value::Null,
            has_params: false,
            param: None,
            variables: &self.variables,
            message_variables: &self.variables,
            authorizer: None,
            deadline,
            trace: None,
        };
        let sources = Sources {
            match_conditions: &self.spec.match_conditions,
            variables: &[],
        };
        evaluate_match_conditions(&evaluation, &self.match_conditions, sources)
            == MatchConditions::Apply
    }
}

/// The exceptions honoured, filed by the policy they name.
#[derive(Debug, Default, Clone)]
pub struct ExceptionSet {
    by_policy: HashMap<String, Vec<Arc<Exception>>>,
    all: Vec<Arc<Exception>>,
}

impl ExceptionSet {
    /// The set of these exceptions, ordered by namespace and name (the first that applies is
    /// the one a decision names).
    pub fn new(exceptions: impl IntoIterator<Item = Arc<Exception>>) -> Self {
        let mut all: Vec<Arc<Exception>> = exceptions.into_iter().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        let mut by_policy: HashMap<String, Vec<Arc<Exception>>> = HashMap::new();
        for e in &all {
            let mut names: Vec<&str> = e.spec.policies.iter().map(|p| p.name.as_str()).collect();
            names.dedup();
            for name in names {
                by_policy
                    .entry(name.to_string())
                    .or_default()
                    .push(e.clone());
            }
        }
        Self { by_policy, all }
    }

    /// Every exception, by namespace and name.
    pub fn all(&self) -> &[Arc<Exception>] {
        &self.all
    }

    /// Whether the set holds no exception.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }
}

/// The exceptions a decision honours, and the time it is decided at (expiry is to the second
/// of this clock, which tests set).
#[derive(Clone, Copy, Debug)]
pub struct ExceptionsAt<'c> {
    /// The exceptions.
    pub set: &'c ExceptionSet,
    /// The time of the decision.
    pub now: SystemTime,
}

impl<'c> ExceptionsAt<'c> {
    /// The first exception that excepts `req` from `binding` of `policy`, if any: the
    /// request's namespace is looked up in `namespaces`, and its match conditions stop at
    /// `deadline`.
    pub fn excepting(
        &self,
        policy: &str,
        binding: &str,
        req: &Request<'_>,
        namespaces: &dyn Namespaces,
        deadline: Option<Instant>,
    ) -> Option<&'c Arc<Exception>> {
        (self.set.by_policy.get(policy)?.iter())
            .find(|e| e.names(policy, binding) && e.applies(req, namespaces, deadline, self.now))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::model::{ResourceRule, Validation, ValidationAction};
    use crate::validate::test_policies::{bound, cache, context, create_deployment, spec};
    use crate::validate::{Excepted, validate};

    const EXPIRES: Duration = Duration::from_secs(1_800_000_000);

    /// An exception `team-a/web` of policy `p` (all bindings, or `bindings`) for Deployments
    /// named `web`, expiring at [`EXPIRES`].
    fn web(bindings: Option<Vec<String>>, conditions: &[&str]) -> ExceptionSpec {
        ExceptionSpec {
            namespace: "team-a".into(),
            name: "web".into(),
            policies: vec![ExceptedPolicy {
                name: "p".into(),
                bindings,
            }],
            match_resources: MatchResources {
                resource_rules: vec![ResourceRule {
                    resource_names: vec!["web".into()],
                    operations: vec!["*".into()],
                    api_groups: vec!["apps".into()],
                    api_versions: vec!["*".into()],
                    resources: vec!["deployments".into()],
                    scope: "*".into(),
                }],
                ..Default::default()
            },
            match_conditions: conditions
                .iter()
                .enumerate()
                .map(|(i, e)| NamedExpression {
                    name: format!("c{i}"),
                    expression: (*e).into(),
                })
                .collect(),
            expires_at: Some(SystemTime::UNIX_EPOCH + EXPIRES),
        }
    }

    /// Validates a create of Deployment `name` (3 replicas) against policy `p` (denying more
    /// than 2 replicas) with `exceptions` at `now`.
    fn decide(name: &str, exceptions: &ExceptionSet, now: SystemTime) -> crate::Outcome {
        let denying = spec(vec![Validation {
            expression: "object.spec.replicas <= 2".into(),
            ..Default::default()
        }]);
        let raw = create_deployment(json!({"metadata": {"name": name}, "spec": {"replicas": 3}}));
        let mut raw = raw;
        raw["name"] = json!(name);
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let mut ctx = context(&namespaces);
        ctx.exceptions = Some(ExceptionsAt {
            set: exceptions,
            now,
        });
        validate(&[bound(denying, vec![ValidationAction::Deny])], &req, &ctx)
    }

    fn set(specs: Vec<ExceptionSpec>) -> ExceptionSet {
        ExceptionSet::new(specs.into_iter().map(|s| Arc::new(Exception::compile(s))))
    }

    fn at(seconds: Duration) -> SystemTime {
        SystemTime::UNIX_EPOCH + seconds
    }

    #[test]
    fn an_exception_lets_its_request_through_and_names_itself_until_its_second() {
        let exceptions = set(vec![web(None, &[])]);
        let just_before = at(EXPIRES - Duration::from_millis(1));
        let out = decide("web", &exceptions, just_before);
        assert!(out.allowed(), "{:?}", out.denial);
        assert_eq!(
            out.excepted,
            vec![Excepted {
                policy: "p".into(),
                binding: "b".into(),
                exception: "team-a/web".into(),
            }]
        );
        assert!(out.checks.is_empty(), "an excepted binding is not checked");
        // At its second it stops applying: the policy denies again.
        let out = decide("web", &exceptions, at(EXPIRES));
        assert!(out.excepted.is_empty());
        assert_eq!(
            out.denial.map(|d| d.message).as_deref(),
            Some(
                "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed expression: object.spec.replicas <= 2"
            )
        );
        // Without an expiry it never stops.
        let mut forever = web(None, &[]);
        forever.expires_at = None;
        assert!(decide("web", &set(vec![forever]), at(EXPIRES * 2)).allowed());
    }

    #[test]
    fn only_the_named_resources_policies_and_bindings_are_excepted() {
        let now = at(EXPIRES / 2);
        let exceptions = set(vec![web(None, &[])]);
        assert!(!decide("api", &exceptions, now).allowed(), "another name");
        let other_binding = set(vec![web(Some(vec!["other".into()]), &[])]);
        assert!(!decide("web", &other_binding, now).allowed());
        let this_binding = set(vec![web(Some(vec!["b".into()]), &[])]);
        assert!(decide("web", &this_binding, now).allowed());
        let mut other_policy = web(None, &[]);
        other_policy.policies[0].name = "q".into();
        assert!(!decide("web", &set(vec![other_policy]), now).allowed());
    }

    #[test]
    fn match_conditions_must_all_hold_and_an_error_or_a_compile_error_keeps_the_policy() {
        let now = at(EXPIRES / 2);
        let holds = set(vec![web(None, &["object.spec.replicas == 3"])]);
        assert!(decide("web", &holds, now).allowed());
        let fails = set(vec![web(None, &["object.spec.replicas == 4"])]);
        assert!(!decide("web", &fails, now).allowed());
        let errors = set(vec![web(None, &["object.spec.missing == 1"])]);
        assert!(!decide("web", &errors, now).allowed());
        let broken = Exception::compile(web(None, &["object.spec.replicas +"]));
        assert_eq!(broken.compile_errors().len(), 1);
        assert!(!decide("web", &ExceptionSet::new([Arc::new(broken)]), now).allowed());
    }
}
