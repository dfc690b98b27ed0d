//! Kubernetes' authorization library (`kubernetes.authorization.*`), with the field and label
//! selector functions 1.36 enables: `authorizer.path(p)`, `authorizer.group(g).resource(r)`,
//! `.subresource`, `.namespace`, `.name`, `.fieldSelector`, `.labelSelector`, `.check(verb)`,
//! `authorizer.serviceAccount(ns, name)`, and a decision's `allowed`, `reason`, `errored` and
//! `error`. Checks are answered by an [`Authorizer`] the host implements (the webhook asks the
//! API server with SubjectAccessReviews) and binds with
//! [`Activation::bind_authorizer`](crate::Activation::bind_authorizer).
//!
//! Declare the variables with [`authorizer_type`] and [`resource_check_type`]:
//!
//! ```
//! use std::sync::Arc;
//! use celgate_cel::authz::{self, Authorizer, AuthzDecision, AuthzRequest, Decision};
//! use celgate_cel::{Activation, Budget, Env, Value};
//!
//! struct AllowAll;
//! impl Authorizer for AllowAll {
//!     fn check(&self, _: &AuthzRequest) -> AuthzDecision {
//!         AuthzDecision { decision: Decision::Allow, reason: "ok".into(), error: None }
//!     }
//! }
//!
//! let env = Env::kubernetes()
//!     .variable(authz::AUTHORIZER_VARIABLE, authz::authorizer_type())
//!     .build();
//! let p = env.compile("authorizer.group('apps').resource('deployments').check('create').allowed()").unwrap();
//! let mut act = Activation::new();
//! act.bind_authorizer(Arc::new(AllowAll), None);
//! assert_eq!(p.eval(&act, &mut Budget::default()).unwrap(), Value::Bool(true));
//! ```

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use super::format::{dns1123_label_errors, dns1123_subdomain_errors};
use super::opaque::{opaque, opaque_arg};
use super::str_arg;
use crate::activation::Activation;
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{Opaque, Value};

/// The name of the authorizer variable.
pub const AUTHORIZER_VARIABLE: &str = "authorizer";
/// The name of the variable holding a resource check preset to the request's resource.
pub const REQUEST_RESOURCE_VARIABLE: &str = "authorizer.requestResource";

const AUTHORIZER: &str = "kubernetes.authorization.Authorizer";
const PATH_CHECK: &str = "kubernetes.authorization.PathCheck";
const GROUP_CHECK: &str = "kubernetes.authorization.GroupCheck";
const RESOURCE_CHECK: &str = "kubernetes.authorization.ResourceCheck";
const DECISION: &str = "kubernetes.authorization.Decision";

/// The cost Kubernetes charges for one authorization check (two fit in a call's limit).
const CHECK_COST: u64 = 350_000;

/// The type of the `authorizer` variable.
pub fn authorizer_type() -> Type {
    Type::opaque(AUTHORIZER)
}

/// The type of the `authorizer.requestResource` variable.
pub fn resource_check_type() -> Type {
    Type::opaque(RESOURCE_CHECK)
}

/// Answers authorization checks made by expressions. Implementations should cache answers
/// for the duration of one admission request, as Kubernetes does.
pub trait Authorizer: Send + Sync {
    /// Decides whether the request's subject may do what `req` asks.
    fn check(&self, req: &AuthzRequest) -> AuthzDecision;
}

/// Whose permissions a check asks about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    /// The user who made the admission request.
    RequestUser,
    /// A service account chosen with `authorizer.serviceAccount(namespace, name)`.
    ServiceAccount {
        /// The service account's namespace.
        namespace: String,
        /// The service account's name.
        name: String,
    },
}

impl Subject {
    /// The user name to authorize (`system:serviceaccount:<ns>:<name>`), for service accounts.
    pub fn username(&self) -> Option<String> {
        match self {
            Subject::RequestUser => None,
            Subject::ServiceAccount { namespace, name } => {
                Some(format!("system:serviceaccount:{namespace}:{name}"))
            }
        }
    }

    /// The groups a service account belongs to (`system:serviceaccounts` and
    /// `system:serviceaccounts:<ns>`); empty for the request's user.
    pub fn groups(&self) -> Vec<String> {
        match self {
            Subject::RequestUser => Vec::new(),
            Subject::ServiceAccount { namespace, .. } => vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
            ],
        }
    }
}

/// The resource a resource check names. The API version is always `*`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceAttributes {
    /// The API group (`""` for the core group).
    pub group: String,
    /// The resource, e.g. `deployments`.
    pub resource: String,
    /// The subresource, e.g. `status`.
    pub subresource: String,
    /// The namespace (`""` for all namespaces or cluster-scoped resources).
    pub namespace: String,
    /// The object name (`""` for all).
    pub name: String,
    /// A field selector as written (`""` for none). Kubernetes includes its requirements only
    /// if it parses.
    pub field_selector: String,
    /// A label selector as written (`""` for none). Kubernetes includes its requirements only
    /// if it parses.
    pub label_selector: String,
}

/// What a check asks about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthzTarget {
    /// A non-resource URL path.
    Path(String),
    /// An API resource.
    Resource(ResourceAttributes),
}

/// One authorization question.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthzRequest {
    /// Whose permissions to check.
    pub subject: Subject,
    /// The verb: an API verb (`get`, `list`, `create`, …) for resources, an HTTP verb in lower
    /// case for paths.
    pub verb: String,
    /// The path or resource.
    pub target: AuthzTarget,
}

/// An authorizer's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed.
    Allow,
    /// Denied.
    Deny,
    /// No authorizer had an opinion (treated as not allowed).
    NoOpinion,
}

/// The answer to an [`AuthzRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthzDecision {
    /// The verdict.
    pub decision: Decision,
    /// The reason the authorizer gave, if any.
    pub reason: String,
    /// The error that occurred while authorizing, if any.
    pub error: Option<String>,
}

/// The `authorizer` value: the host's authorizer and the subject to check.
#[derive(Clone)]
struct AuthorizerVal {
    authz: Arc<dyn Authorizer>,
    subject: Subject,
}

impl fmt::Debug for AuthorizerVal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "authorizer({:?})", self.subject)
    }
}

#[derive(Clone, Debug)]
struct PathCheck {
    authorizer: AuthorizerVal,
    path: String,
}

#[derive(Clone, Debug)]
struct GroupCheck {
    authorizer: AuthorizerVal,
    group: String,
}

#[derive(Clone, Debug)]
struct ResourceCheck {
    authorizer: AuthorizerVal,
    attrs: ResourceAttributes,
}

#[derive(Clone, Debug)]
struct DecisionVal(AuthzDecision);

macro_rules! receiver_only {
    ($t:ty, $name:expr, $go_name:expr) => {
        impl Opaque for $t {
            fn type_name(&self) -> &'static str {
                $name
            }
            fn go_type_name(&self) -> &'static str {
                $go_name
            }
            fn as_any(&self) -> &dyn Any {
                self
            }
            /// Authorization values are receivers only; they never compare equal.
            fn equals(&self, _: &dyn Opaque) -> bool {
                false
            }
        }
    };
}

receiver_only!(AuthorizerVal, AUTHORIZER, "library.authorizerVal");
receiver_only!(PathCheck, PATH_CHECK, "library.pathCheckVal");
receiver_only!(GroupCheck, GROUP_CHECK, "library.groupCheckVal");
receiver_only!(ResourceCheck, RESOURCE_CHECK, "library.resourceCheckVal");
receiver_only!(DecisionVal, DECISION, "library.decisionVal");

impl<'a> Activation<'a> {
    /// Binds `authorizer` to `authz`, and `authorizer.requestResource` to a resource check
    /// preset to `request_resource` when given (declare them with [`authorizer_type`] and
    /// [`resource_check_type`]).
    pub fn bind_authorizer(
        &mut self,
        authz: Arc<dyn Authorizer>,
        request_resource: Option<ResourceAttributes>,
    ) {
        if let Some(r) = request_resource {
            self.bind(
                REQUEST_RESOURCE_VARIABLE,
                request_resource_value(authz.clone(), r),
            );
        }
        self.bind(AUTHORIZER_VARIABLE, authorizer_value(authz));
    }
}

/// The value of the `authorizer` variable for `authz`.
pub fn authorizer_value(authz: Arc<dyn Authorizer>) -> Value<'static> {
    opaque(AuthorizerVal {
        authz,
        subject: Subject::RequestUser,
    })
}

/// The value of the `authorizer.requestResource` variable: a resource check preset to the
/// request's group, resource, subresource, namespace and name.
pub fn request_resource_value(
    authz: Arc<dyn Authorizer>,
    resource: ResourceAttributes,
) -> Value<'static> {
    opaque(ResourceCheck {
        authorizer: AuthorizerVal {
            authz,
            subject: Subject::RequestUser,
        },
        attrs: resource,
    })
}

pub(crate) fn register(r: &mut Registry) {
    use Type::{Bool, String};
    let t = |n: &str| Type::opaque(n);
    r.def("path")
        .member(&[t(AUTHORIZER), String], t(PATH_CHECK))
        .imp(path)
        .done();
    r.def("group")
        .member(&[t(AUTHORIZER), String], t(GROUP_CHECK))
        .imp(group)
        .done();
    r.def("serviceAccount")
        .member(&[t(AUTHORIZER), String, String], t(AUTHORIZER))
        .imp(service_account)
        .done();
    r.def("resource")
        .member(&[t(GROUP_CHECK), String], t(RESOURCE_CHECK))
        .imp(resource)
        .done();
    let setters: [(&str, crate::registry::ImplFn); 5] = [
        ("subresource", subresource),
        ("namespace", namespace),
        ("name", name),
        ("fieldSelector", field_selector),
        ("labelSelector", label_selector),
    ];
    for (n, f) in setters {
        r.def(n)
            .member(&[t(RESOURCE_CHECK), String], t(RESOURCE_CHECK))
            .imp(f)
            .done();
    }
    r.def("check")
        .member(&[t(PATH_CHECK), String], t(DECISION))
        .imp(check)
        .cost(|_, _| CHECK_COST)
        .done();
    r.def("check")
        .member(&[t(RESOURCE_CHECK), String], t(DECISION))
        .imp(check)
        .cost(|_, _| CHECK_COST)
        .done();
    r.def("allowed")
        .member(&[t(DECISION)], Bool)
        .imp(allowed)
        .done();
    r.def("reason")
        .member(&[t(DECISION)], String)
        .imp(reason)
        .done();
    r.def("errored")
        .member(&[t(DECISION)], Bool)
        .imp(errored)
        .done();
    r.def("error")
        .member(&[t(DECISION)], String)
        .imp(error)
        .done();
}

fn authorizer<'v>(args: &'v [Value<'_>]) -> Result<&'v AuthorizerVal, EvalError> {
    opaque_arg::<AuthorizerVal>(args, 0)
}

fn path<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let a = authorizer(args)?;
    let p = str_arg(args, 1)?;
    if p.trim().is_empty() {
        return Err(EvalError::msg("path must not be empty"));
    }
    Ok(opaque(PathCheck {
        authorizer: a.clone(),
        path: p.to_string(),
    }))
}

fn group<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(opaque(GroupCheck {
        authorizer: authorizer(args)?.clone(),
        group: str_arg(args, 1)?.to_string(),
    }))
}

fn service_account<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let a = authorizer(args)?;
    let namespace = str_arg(args, 1)?;
    let name = str_arg(args, 2)?;
    if !dns1123_subdomain_errors(name).is_empty() {
        return Err(EvalError::msg("Invalid service account name"));
    }
    if !dns1123_label_errors(namespace).is_empty() {
        return Err(EvalError::msg("Invalid service account namespace"));
    }
    Ok(opaque(AuthorizerVal {
        authz: a.authz.clone(),
        subject: Subject::ServiceAccount {
            namespace: namespace.to_string(),
            name: name.to_string(),
        },
    }))
}

fn resource<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let g = opaque_arg::<GroupCheck>(args, 0)?;
    let r = str_arg(args, 1)?;
    if r.trim().is_empty() {
        return Err(EvalError::msg("resource must not be empty"));
    }
    Ok(opaque(ResourceCheck {
        authorizer: g.authorizer.clone(),
        attrs: ResourceAttributes {
            group: g.group.clone(),
            resource: r.to_string(),
            ..ResourceAttributes::default()
        },
    }))
}

/// A copy of the resource check with one attribute replaced.
fn with<'a>(
    args: &[Value<'a>],
    set: fn(&mut ResourceAttributes, String),
) -> Result<Value<'a>, EvalError> {
    let mut rc = opaque_arg::<ResourceCheck>(args, 0)?.clone();
    set(&mut rc.attrs, str_arg(args, 1)?.to_string());
    Ok(opaque(rc))
}

fn subresource<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    with(args, |a, v| a.subresource = v)
}

fn namespace<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    with(args, |a, v| a.namespace = v)
}

fn name<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    with(args, |a, v| a.name = v)
}

fn field_selector<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    with(args, |a, v| a.field_selector = v)
}

fn label_selector<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    with(args, |a, v| a.label_selector = v)
}

fn check<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let verb = str_arg(args, 1)?.to_string();
    let (authorizer, target) = if let Ok(p) = opaque_arg::<PathCheck>(args, 0) {
        (&p.authorizer, AuthzTarget::Path(p.path.clone()))
    } else {
        let rc = opaque_arg::<ResourceCheck>(args, 0)?;
        (&rc.authorizer, AuthzTarget::Resource(rc.attrs.clone()))
    };
    let req = AuthzRequest {
        subject: authorizer.subject.clone(),
        verb,
        target,
    };
    Ok(opaque(DecisionVal(authorizer.authz.check(&req))))
}

fn decision<'v>(args: &'v [Value<'_>]) -> Result<&'v AuthzDecision, EvalError> {
    opaque_arg::<DecisionVal>(args, 0).map(|d| &d.0)
}

fn allowed<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(decision(args)?.decision == Decision::Allow))
}

fn reason<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(decision(args)?.reason.as_str()))
}

fn errored<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(decision(args)?.error.is_some()))
}

fn error<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(
        decision(args)?.error.as_deref().unwrap_or_default(),
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::libs::testing::render;
    use crate::{Activation, Budget, Env};

    /// Allows `get` on anything, errors on `delete`, denies the rest; records requests.
    #[derive(Default)]
    struct Fake {
        seen: Mutex<Vec<AuthzRequest>>,
    }

    impl Authorizer for Fake {
        fn check(&self, req: &AuthzRequest) -> AuthzDecision {
            if let Ok(mut seen) = self.seen.lock() {
                seen.push(req.clone());
            }
            match req.verb.as_str() {
                "get" => AuthzDecision {
                    decision: Decision::Allow,
                    reason: "rbac allows".into(),
                    error: None,
                },
                "delete" => AuthzDecision {
                    decision: Decision::NoOpinion,
                    reason: String::new(),
                    error: Some("webhook unreachable".into()),
                },
                _ => AuthzDecision {
                    decision: Decision::Deny,
                    reason: "no".into(),
                    error: None,
                },
            }
        }
    }

    fn run(src: &str, fake: &Arc<Fake>) -> (String, u64) {
        let env = Env::kubernetes()
            .variable(AUTHORIZER_VARIABLE, authorizer_type())
            .variable(REQUEST_RESOURCE_VARIABLE, resource_check_type())
            .build();
        let p = match env.compile(src) {
            Ok(p) => p,
            Err(e) => return (format!("compile: {e}"), 0),
        };
        let mut act = Activation::new();
        let request = ResourceAttributes {
            group: "apps".into(),
            resource: "deployments".into(),
            namespace: "prod".into(),
            name: "web".into(),
            ..ResourceAttributes::default()
        };
        act.bind_authorizer(fake.clone(), Some(request));
        let mut budget = Budget::default();
        let (r, cost) = p.eval_with_cost(&act, &mut budget);
        let s = match r {
            Ok(v) => render(&v),
            Err(e) => format!("error: {e}"),
        };
        (s, cost)
    }

    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            ("authorizer.path('/healthz').check('get').allowed()", "true"),
            (
                "authorizer.path('/healthz').check('post').allowed()",
                "false",
            ),
            (
                "authorizer.path('/healthz').check('post').reason()",
                "\"no\"",
            ),
            ("authorizer.path(' ')", "error: path must not be empty"),
            (
                "authorizer.group('').resource('pods').check('get').reason()",
                "\"rbac allows\"",
            ),
            (
                "authorizer.group('').resource('')",
                "error: resource must not be empty",
            ),
            (
                "authorizer.group('').resource('pods').check('delete').errored()",
                "true",
            ),
            (
                "authorizer.group('').resource('pods').check('delete').error()",
                "\"webhook unreachable\"",
            ),
            (
                "authorizer.group('').resource('pods').check('delete').allowed()",
                "false",
            ),
            (
                "authorizer.group('').resource('pods').check('get').error()",
                "\"\"",
            ),
            (
                "authorizer.serviceAccount('default', 'Bad_Name')",
                "error: Invalid service account name",
            ),
            (
                "authorizer.serviceAccount('a.b', 'ok')",
                "error: Invalid service account namespace",
            ),
            ("authorizer.requestResource.check('get').allowed()", "true"),
        ];
        for (src, want) in cases {
            let fake = Arc::new(Fake::default());
            assert_eq!(run(src, &fake).0, *want, "{src}");
        }
    }

    #[test]
    fn requests_carry_every_attribute() {
        let fake = Arc::new(Fake::default());
        let (out, cost) = run(
            "authorizer.serviceAccount('ns', 'sa').group('apps').resource('deployments')\
             .subresource('scale').namespace('prod').name('web')\
             .fieldSelector('spec.x=y').labelSelector('app=web').check('update').allowed()",
            &fake,
        );
        assert_eq!(out, "false");
        // Eight builders and `allowed` cost 1 each, the check 350000, the variable read 1.
        assert_eq!(cost, 350_010);
        let seen = fake.seen.lock().map(|s| s.clone()).unwrap_or_default();
        let subject = Subject::ServiceAccount {
            namespace: "ns".into(),
            name: "sa".into(),
        };
        assert_eq!(
            subject.username().as_deref(),
            Some("system:serviceaccount:ns:sa")
        );
        assert_eq!(
            seen,
            vec![AuthzRequest {
                subject,
                verb: "update".into(),
                target: AuthzTarget::Resource(ResourceAttributes {
                    group: "apps".into(),
                    resource: "deployments".into(),
                    subresource: "scale".into(),
                    namespace: "prod".into(),
                    name: "web".into(),
                    field_selector: "spec.x=y".into(),
                    label_selector: "app=web".into(),
                }),
            }]
        );
        let fake = Arc::new(Fake::default());
        run("authorizer.requestResource.check('get').allowed()", &fake);
        let seen = fake.seen.lock().map(|s| s.clone()).unwrap_or_default();
        assert!(matches!(
            &seen[..],
            [AuthzRequest { subject: Subject::RequestUser, target: AuthzTarget::Resource(r), .. }]
                if r.resource == "deployments" && r.name == "web"
        ));
    }
}
