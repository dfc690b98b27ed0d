//! Evaluates the ValidatingAdmissionPolicies that match a request and folds their decisions into
//! one outcome, with kube-apiserver's messages, codes, warnings and audit annotations.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::{Duration, Instant};

use celgate_cel::authz::ResourceAttributes;
use celgate_cel::{
    Activation, Authorizer, Budget, EvalError, MATCH_CONDITIONS_BUDGET, PER_CALL_LIMIT,
    RUNTIME_BUDGET, Value,
};

use crate::compile::{CompiledExpr, ExprError, ValidatingPolicy};
use crate::matching::{self, Namespaces};
use crate::model::{FailurePolicy, ValidatingBindingSpec, ValidationAction};
use crate::params::{self, Collected, ParamKindState, Params};
use crate::request::Request;

/// Longest evaluated message kept from a messageExpression, in bytes.
pub const MAX_MESSAGE_EXPRESSION_BYTES: usize = 5 * 1024;
/// Longest audit annotation value, in bytes.
pub const MAX_AUDIT_ANNOTATION_VALUE_BYTES: usize = 10 * 1024;
/// Audit annotation key of validation failures routed to the Audit action.
pub const VALIDATION_FAILURE_KEY: &str = "validation.policy.admission.k8s.io/validation_failure";

/// A bound policy in a snapshot: the compiled policy and its bindings, in list order.
#[derive(Debug, Clone)]
pub struct BoundPolicy {
    /// The compiled policy.
    pub policy: Arc<ValidatingPolicy>,
    /// Its bindings.
    pub bindings: Vec<Arc<ValidatingBindingSpec>>,
}

/// The rejection of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The message (`ValidatingAdmissionPolicy '<p>' with binding '<b>' denied request: …`).
    pub message: String,
    /// The status reason (`Invalid`, `Forbidden`, …).
    pub reason: String,
    /// The HTTP code for the reason.
    pub code: u16,
}

/// How one policy check ended, for the `check_total`/`check_duration_seconds` metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// The policy evaluated without error and admitted.
    NoError,
    /// An expression did not compile.
    CompileError,
    /// The cost budget ran out.
    OutOfBudget,
    /// A validation failed or errored.
    InvalidError,
}

impl ErrorType {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::NoError => "no_error",
            ErrorType::CompileError => "compile_error",
            ErrorType::OutOfBudget => "out_of_budget",
            ErrorType::InvalidError => "invalid_error",
        }
    }
}

/// Why a check could not decide, worded as kube-apiserver words it in its messages. The
/// metric's `error_type` is read from the variant ([`CheckError::error_type`]), never from
/// the text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckError {
    /// The expression did not compile.
    #[error("compilation error: {0}")]
    Compile(ExprError),
    /// Evaluating the expression failed.
    #[error("expression '{expression}' resulted in error: {error}")]
    Eval {
        /// The expression's source.
        expression: String,
        /// The evaluation error (cel-go's text).
        error: EvalError,
    },
    /// A validation evaluated to something other than a bool.
    #[error(
        "expression '{expression}' resulted in error: no such overload: validation result is {type_name}"
    )]
    NotBool {
        /// The expression's source.
        expression: String,
        /// The CEL type of the result.
        type_name: String,
    },
    /// A match condition evaluated to something other than a bool.
    #[error("matchCondition '{name}' resulted in non-bool value {type_name}")]
    ConditionNotBool {
        /// The condition's name.
        name: String,
        /// The CEL type of the result.
        type_name: String,
    },
    /// An audit annotation's value expression gave neither a string nor null.
    #[error(
        "valueExpression '{expression}' resulted in unsupported return type: {type_name}. Return type must be either string or null."
    )]
    AnnotationType {
        /// The expression's source.
        expression: String,
        /// The CEL type of the result.
        type_name: String,
    },
    /// The validations' shared cost budget ran out.
    #[error(
        "validation failed due to running out of cost budget, no further validation rules will be run"
    )]
    OutOfBudget,
    /// The shared cost budget ran out in a message expression.
    #[error(
        "failed messageExpression: validation failed due to running out of cost budget, no further validation rules will be run"
    )]
    MessageOutOfBudget,
    /// celgate failed inside this policy's evaluation (a defect in celgate, not in the
    /// policy); the policy's failurePolicy decides, and other policies are unaffected.
    #[error("internal error in celgate while evaluating the policy: {0}")]
    Internal(String),
}

impl CheckError {
    /// The `error_type` metric label of this failure.
    pub fn error_type(&self) -> ErrorType {
        match self {
            CheckError::Compile(_) => ErrorType::CompileError,
            CheckError::OutOfBudget => ErrorType::OutOfBudget,
            CheckError::Eval { .. }
            | CheckError::NotBool { .. }
            | CheckError::ConditionNotBool { .. }
            | CheckError::AnnotationType { .. }
            | CheckError::MessageOutOfBudget
            | CheckError::Internal(_) => ErrorType::InvalidError,
        }
    }
}

/// One metric observation: a (policy, binding) check and the enforcement it led to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Policy name.
    pub policy: Arc<str>,
    /// Binding name.
    pub binding: Arc<str>,
    /// Error classification.
    pub error_type: ErrorType,
    /// `allow`, `deny`, `warn` or `audit`.
    pub enforcement_action: &'static str,
    /// Time spent evaluating the binding.
    pub elapsed: Duration,
}

/// The result of validating one request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Set when the request is rejected: the first denial, as kube-apiserver reports it.
    pub denial: Option<Denial>,
    /// HTTP warnings for the client.
    pub warnings: Vec<String>,
    /// Audit annotations with upstream's keys (`<policy>/<key>`, `validation.policy…`).
    pub audit_annotations: Vec<(String, String)>,
    /// Metric observations.
    pub checks: Vec<Check>,
}

impl Outcome {
    /// True when the request is admitted.
    pub fn allowed(&self) -> bool {
        self.denial.is_none()
    }

    /// Adds the outcome of a later policy: its denial counts only if none came before, and
    /// only the first validation failure is recorded under [`VALIDATION_FAILURE_KEY`].
    fn merge(&mut self, later: Outcome) {
        if self.denial.is_none() {
            self.denial = later.denial;
        }
        self.warnings.extend(later.warnings);
        let recorded = self
            .audit_annotations
            .iter()
            .any(|(k, _)| k == VALIDATION_FAILURE_KEY);
        self.audit_annotations.extend(
            later
                .audit_annotations
                .into_iter()
                .filter(|(k, _)| !(recorded && k == VALIDATION_FAILURE_KEY)),
        );
        self.checks.extend(later.checks);
    }
}

/// The decision for one validation (or one single-decision error) of one evaluation.
struct Decision {
    deny: bool,
    error: bool,
    message: String,
    reason: Option<String>,
    index: usize,
    error_type: ErrorType,
}

/// Resource groups the policies never see (kube-apiserver's excluded and policy resources).
fn exempt(req: &Request<'_>) -> bool {
    let (g, r) = (req.resource.group, req.resource.name);
    g == crate::GROUP
        || (g == "admissionregistration.k8s.io"
            && matches!(
                r,
                "validatingadmissionpolicies"
                    | "validatingadmissionpolicybindings"
                    | "mutatingadmissionpolicies"
                    | "mutatingadmissionpolicybindings"
            ))
        || (g == "authentication.k8s.io" && matches!(r, "selfsubjectreviews" | "tokenreviews"))
        || (g == "authorization.k8s.io"
            && matches!(
                r,
                "localsubjectaccessreviews"
                    | "selfsubjectaccessreviews"
                    | "selfsubjectrulesreviews"
                    | "subjectaccessreviews"
            ))
}

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
}

/// Validates a request against the bound policies.
pub fn validate(policies: &[BoundPolicy], req: &Request<'_>, ctx: &Context<'_>) -> Outcome {
    validate_only(policies, req, ctx, None)
}

/// Validates a request against the bound policies of one failure policy (all when `None`).
pub fn validate_only(
    policies: &[BoundPolicy],
    req: &Request<'_>,
    ctx: &Context<'_>,
    only: Option<FailurePolicy>,
) -> Outcome {
    let mut out = Outcome::default();
    if exempt(req) {
        return out;
    }
    for bound in policies {
        if only.is_none_or(|f| bound.policy.failure_policy() == f) {
            evaluate_guarded(bound, req, ctx, &mut out);
        }
    }
    out
}

/// Evaluates one policy so that a panic inside it (a defect in celgate) becomes that policy's
/// error under its failurePolicy instead of taking the request, or the process, down.
fn evaluate_guarded(bound: &BoundPolicy, req: &Request<'_>, ctx: &Context<'_>, out: &mut Outcome) {
    let mut one = Outcome::default();
    let evaluated = catch_unwind(AssertUnwindSafe(|| {
        evaluate_policy(bound, req, ctx, &mut one);
    }));
    match evaluated {
        Ok(()) => out.merge(one),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_string());
            if bound.policy.failure_policy() == FailurePolicy::Fail {
                let error = CheckError::Internal(what);
                deny_first(
                    out,
                    policy_message(&bound.policy.name, None, &error.to_string()),
                    None,
                );
            }
        }
    }
}

fn policy_message(policy: &str, binding: Option<&str>, message: &str) -> String {
    match binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{policy}' with binding '{b}' denied request: {message}"
        ),
        None => format!("ValidatingAdmissionPolicy '{policy}' denied request: {message}"),
    }
}

fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

fn deny_first(out: &mut Outcome, message: String, reason: Option<&str>) {
    if out.denial.is_none() {
        let reason = reason.unwrap_or("Invalid").to_string();
        out.denial = Some(Denial {
            code: reason_code(&reason),
            message,
            reason,
        });
    }
}

fn evaluate_policy(bound: &BoundPolicy, req: &Request<'_>, ctx: &Context<'_>, out: &mut Outcome) {
    let policy = &bound.policy;
    let fail = policy.failure_policy() == FailurePolicy::Fail;
    let policy_match = match &policy.spec.match_constraints {
        None => Err("policy contained no match constraints, a required field".to_string()),
        Some(c) => matching::matches(c, req, ctx.namespaces).map_err(|e| e.to_string()),
    };
    match policy_match {
        Ok(false) => return,
        Ok(true) => {}
        Err(e) => {
            if fail {
                let msg = format!("failed to configure policy: {e}");
                deny_first(out, policy_message(&policy.name, None, &msg), None);
            }
            return;
        }
    }
    let unserved = policy
        .spec
        .param_kind
        .as_ref()
        .filter(|kind| matches!(ctx.params.kind(kind), ParamKindState::NotServed));
    if let Some(kind) = unserved {
        if fail {
            let msg = format!("failed to configure policy: {}", params::not_served(kind));
            deny_first(out, policy_message(&policy.name, None, &msg), None);
        }
        return;
    }
    let namespace_object = match namespace_object(req, ctx.namespaces) {
        Ok(ns) => ns,
        Err(e) => {
            deny_first(out, e, Some("NotFound"));
            return;
        }
    };
    let mut annotations: Vec<(String, Vec<String>)> = Vec::new();
    for binding in &bound.bindings {
        let started = Instant::now();
        // A binding whose match or params cannot be worked out is a configuration error.
        let params = binding_params(policy, binding, req, ctx);
        let params = match params {
            Ok(Some(list)) => list,
            Ok(None) => continue,
            Err(e) => {
                if fail {
                    let msg = format!("failed to configure binding: {e}");
                    deny_first(
                        out,
                        policy_message(&policy.name, Some(&binding.name), &msg),
                        None,
                    );
                }
                continue;
            }
        };
        let binding_name: Arc<str> = Arc::from(binding.name.as_str());
        // Each param is its own evaluation with its own budget; any failing param denies.
        for param in params {
            let evaluation = Evaluation {
                req,
                namespace_object,
                policy,
                param,
                authorizer: ctx.authorizer,
                deadline: ctx.deadline,
            };
            if !match_conditions_pass(&evaluation, fail, binding, out) {
                continue;
            }
            let decisions = evaluate_validations(policy, &evaluation, fail);
            for d in &decisions {
                route_decision(policy, binding, &binding_name, d, started.elapsed(), out);
            }
            if !decisions.iter().any(|d| d.deny) {
                let error_type = decisions
                    .iter()
                    .find(|d| d.error)
                    .map_or(ErrorType::NoError, |d| d.error_type);
                if error_type != ErrorType::NoError {
                    out.checks.push(Check {
                        policy: policy.name.clone(),
                        binding: binding_name.clone(),
                        error_type,
                        enforcement_action: "allow",
                        elapsed: started.elapsed(),
                    });
                }
            }
            evaluate_audit_annotations(&evaluation, binding, fail, &mut annotations, out);
        }
    }
    // Distinct values of one key across bindings and params are joined with ", ".
    for (key, values) in annotations {
        out.audit_annotations
            .push((format!("{}/{key}", policy.name), values.join(", ")));
    }
}

/// The params to evaluate a binding with; `None` when the binding does not apply (its match
/// resources miss, or no param and `Allow`).
fn binding_params<'p>(
    policy: &ValidatingPolicy,
    binding: &ValidatingBindingSpec,
    req: &Request<'_>,
    ctx: &Context<'p>,
) -> Result<Option<Vec<Option<&'p serde_json::Value>>>, String> {
    let selected = match &binding.match_resources {
        None => true,
        Some(m) => matching::matches(m, req, ctx.namespaces).map_err(|e| e.to_string())?,
    };
    if !selected {
        return Ok(None);
    }
    let collected = params::collect(
        policy.spec.param_kind.as_ref(),
        binding.param_ref.as_ref(),
        req,
        ctx.params,
    )?;
    Ok(match collected {
        Collected::Evaluate(list) => Some(list),
        Collected::Skip => None,
    })
}

static NULL: serde_json::Value = serde_json::Value::Null;

/// The Namespace object of a namespaced request (null for cluster-scoped requests and for
/// Namespace objects themselves); an unknown namespace is an error returned as is, as upstream.
fn namespace_object<'n>(
    req: &Request<'_>,
    namespaces: &'n dyn Namespaces,
) -> Result<&'n serde_json::Value, String> {
    let is_namespace = req.kind.group.is_empty() && req.kind.name == "Namespace";
    if req.namespace.is_empty() || is_namespace {
        return Ok(&NULL);
    }
    namespaces
        .get(req.namespace)
        .ok_or_else(|| format!("namespaces \"{}\" not found", req.namespace))
}

/// One evaluation of a policy: the request, its namespace, one param and the authorizer. Each
/// expression batch gets a fresh activation from it, so composited variables are memoised per
/// batch as upstream.
struct Evaluation<'a> {
    req: &'a Request<'a>,
    namespace_object: &'a serde_json::Value,
    policy: &'a ValidatingPolicy,
    param: Option<&'a serde_json::Value>,
    authorizer: Option<&'a Arc<dyn Authorizer>>,
    deadline: Option<Instant>,
}

/// Which expressions an activation serves: they differ in `authorizer` and variables.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Batch {
    /// Validations, match conditions: `authorizer` bound.
    Checks,
    /// Message expressions: no `authorizer` declared.
    Messages,
    /// Audit annotations: `authorizer` declared but not bound, as upstream.
    AuditAnnotations,
}

impl<'a> Evaluation<'a> {
    /// A fresh budget of `total`, stopping at the request's deadline.
    fn budget(&self, total: u64) -> Budget {
        let budget = Budget::new(PER_CALL_LIMIT, total);
        match self.deadline {
            Some(at) => budget.with_deadline(at),
            None => budget,
        }
    }

    fn activation(&self, batch: Batch) -> Activation<'a> {
        let mut act = Activation::new();
        act.bind_json("object", self.req.object);
        act.bind_json("oldObject", self.req.old_object);
        act.bind_json("request", self.req.raw);
        act.bind_json("namespaceObject", self.namespace_object);
        if self.policy.spec.param_kind.is_some() {
            act.bind_json("params", self.param.unwrap_or(&NULL));
        }
        if batch == Batch::Messages {
            act.bind_variables(&self.policy.message_variables);
        } else {
            act.bind_variables(&self.policy.variables);
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

/// Evaluates match conditions; false when the policy does not apply to this request.
fn match_conditions_pass(
    evaluation: &Evaluation<'_>,
    fail: bool,
    binding: &ValidatingBindingSpec,
    out: &mut Outcome,
) -> bool {
    let policy = evaluation.policy;
    if policy.match_conditions.is_empty() {
        return true;
    }
    let act = &evaluation.activation(Batch::Checks);
    let mut budget = evaluation.budget(MATCH_CONDITIONS_BUDGET);
    let mut errors = Vec::new();
    let mut any_false = false;
    for cond in &policy.match_conditions {
        match &cond.program {
            Err(e) => errors.push(CheckError::Compile(e.clone())),
            Ok(p) => match p.eval(act, &mut budget) {
                Ok(Value::Bool(false)) => any_false = true,
                Ok(Value::Bool(true)) => {}
                Ok(other) => errors.push(CheckError::ConditionNotBool {
                    name: cond.name.clone(),
                    type_name: other.type_name().to_string(),
                }),
                Err(error) => errors.push(CheckError::Eval {
                    expression: p.source().to_string(),
                    error,
                }),
            },
        }
    }
    if any_false {
        return false;
    }
    if errors.is_empty() {
        return true;
    }
    if fail {
        let msg = if let [one] = errors.as_slice() {
            one.to_string()
        } else {
            let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
            format!("[{}]", all.join(", "))
        };
        deny_first(
            out,
            policy_message(&policy.name, Some(&binding.name), &msg),
            None,
        );
    }
    false
}

fn error_decision(fail: bool, error: &CheckError, index: usize) -> Decision {
    Decision {
        deny: fail,
        error: true,
        error_type: error.error_type(),
        message: error.to_string(),
        reason: None,
        index,
    }
}

fn evaluate_validations(
    policy: &ValidatingPolicy,
    evaluation: &Evaluation<'_>,
    fail: bool,
) -> Vec<Decision> {
    let act = evaluation.activation(Batch::Checks);
    let mut budget = evaluation.budget(RUNTIME_BUDGET);
    let mut results: Vec<Result<bool, CheckError>> = Vec::with_capacity(policy.validations.len());
    for v in &policy.validations {
        let result = match &v.program {
            Err(e) => Err(CheckError::Compile(e.clone())),
            Ok(p) => match p.eval(&act, &mut budget) {
                Ok(Value::Bool(b)) => Ok(b),
                Ok(other) => Err(CheckError::NotBool {
                    expression: p.source().to_string(),
                    type_name: other.type_name().to_string(),
                }),
                Err(EvalError::BudgetExhausted) => {
                    return vec![error_decision(fail, &CheckError::OutOfBudget, 0)];
                }
                Err(error) => Err(CheckError::Eval {
                    expression: p.source().to_string(),
                    error,
                }),
            },
        };
        results.push(result);
    }
    // Message expressions run for every validation that has one, with the remaining budget and
    // their own variable memo (an activation built only when a validation has one).
    let mut act = None;
    let mut messages: Vec<Option<String>> = Vec::with_capacity(results.len());
    for v in &policy.validations {
        let msg = match &v.message_expression {
            Some(Ok(p)) => match p.eval(
                act.get_or_insert_with(|| evaluation.activation(Batch::Messages)),
                &mut budget,
            ) {
                Ok(Value::String(s)) => {
                    let s = s.trim();
                    (!s.is_empty() && s.len() <= MAX_MESSAGE_EXPRESSION_BYTES && !s.contains('\n'))
                        .then(|| s.to_string())
                }
                Err(EvalError::BudgetExhausted) => {
                    return (0..policy.validations.len())
                        .map(|i| error_decision(fail, &CheckError::MessageOutOfBudget, i))
                        .collect();
                }
                _ => None,
            },
            _ => None,
        };
        messages.push(msg);
    }
    let mut decisions = Vec::new();
    for (index, (v, result)) in policy.validations.iter().zip(results).enumerate() {
        match result {
            Err(error) => decisions.push(error_decision(fail, &error, index)),
            Ok(true) => {}
            Ok(false) => {
                let message = messages[index]
                    .take()
                    .or_else(|| {
                        v.message
                            .as_deref()
                            .map(str::trim)
                            .filter(|m| !m.is_empty())
                            .map(str::to_string)
                    })
                    .unwrap_or_else(|| format!("failed expression: {}", v.expression.trim()));
                decisions.push(Decision {
                    deny: true,
                    error: false,
                    message,
                    reason: v.reason.clone(),
                    index,
                    error_type: ErrorType::InvalidError,
                });
            }
        }
    }
    decisions
}

fn route_decision(
    policy: &ValidatingPolicy,
    binding: &ValidatingBindingSpec,
    binding_name: &Arc<str>,
    d: &Decision,
    elapsed: Duration,
    out: &mut Outcome,
) {
    if !d.deny {
        return;
    }
    for action in &binding.validation_actions {
        match action {
            ValidationAction::Deny => deny_first(
                out,
                policy_message(&policy.name, Some(&binding.name), &d.message),
                d.reason.as_deref(),
            ),
            ValidationAction::Warn => out.warnings.push(format!(
                "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                policy.name, binding.name, d.message
            )),
            ValidationAction::Audit => {
                let record = [ValidationFailure {
                    message: &d.message,
                    policy: &policy.name,
                    binding: &binding.name,
                    expression_index: d.index,
                    validation_actions: binding
                        .validation_actions
                        .iter()
                        .map(|a| a.as_str())
                        .collect(),
                }];
                // 1.36 records only the first failure under this key.
                if !out
                    .audit_annotations
                    .iter()
                    .any(|(k, _)| k == VALIDATION_FAILURE_KEY)
                {
                    out.audit_annotations
                        .push((VALIDATION_FAILURE_KEY.to_string(), go_json(&record)));
                }
            }
        }
        out.checks.push(Check {
            policy: policy.name.clone(),
            binding: binding_name.clone(),
            error_type: d.error_type,
            enforcement_action: match action {
                ValidationAction::Deny => "deny",
                ValidationAction::Warn => "warn",
                ValidationAction::Audit => "audit",
            },
            elapsed,
        });
    }
}

/// One entry of the `validation_failure` audit annotation, fields in upstream's order.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ValidationFailure<'a> {
    message: &'a str,
    policy: &'a str,
    binding: &'a str,
    expression_index: usize,
    validation_actions: Vec<&'static str>,
}

/// JSON as Go's encoding/json writes it: `<`, `>` and `&` escaped.
fn go_json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

fn evaluate_audit_annotations(
    evaluation: &Evaluation<'_>,
    binding: &ValidatingBindingSpec,
    fail: bool,
    collected: &mut Vec<(String, Vec<String>)>,
    out: &mut Outcome,
) {
    let policy = evaluation.policy;
    if policy.audit_annotations.is_empty() {
        return;
    }
    let act = &evaluation.activation(Batch::AuditAnnotations);
    let mut budget = evaluation.budget(RUNTIME_BUDGET);
    for a in &policy.audit_annotations {
        let value = eval_annotation(&a.program, &a.expression, act, &mut budget);
        match value {
            Ok(None) => {}
            Ok(Some(mut v)) => {
                if v.len() > MAX_AUDIT_ANNOTATION_VALUE_BYTES {
                    let mut cut = MAX_AUDIT_ANNOTATION_VALUE_BYTES;
                    while !v.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    v.truncate(cut);
                }
                match collected.iter_mut().find(|(k, _)| *k == a.key) {
                    Some((_, values)) if values.contains(&v) => {}
                    Some((_, values)) => values.push(v),
                    None => collected.push((a.key.clone(), vec![v])),
                }
            }
            Err(error) => {
                // An unsupported return type denies even under Ignore, as upstream.
                let always = matches!(error, CheckError::AnnotationType { .. });
                if fail || always {
                    deny_first(
                        out,
                        policy_message(&policy.name, Some(&binding.name), &error.to_string()),
                        None,
                    );
                }
            }
        }
    }
}

/// An annotation value: `Ok(None)` when omitted.
fn eval_annotation(
    program: &CompiledExpr,
    expression: &str,
    act: &Activation<'_>,
    budget: &mut Budget,
) -> Result<Option<String>, CheckError> {
    let p = program
        .as_ref()
        .map_err(|e| CheckError::Compile(e.clone()))?;
    match p.eval(act, budget) {
        Ok(Value::Null) => Ok(None),
        Ok(Value::String(s)) => {
            let s = s.trim();
            Ok((!s.is_empty()).then(|| s.to_string()))
        }
        Ok(other) => Err(CheckError::AnnotationType {
            expression: expression.to_string(),
            type_name: other.type_name().to_string(),
        }),
        Err(error) => Err(CheckError::Eval {
            expression: expression.to_string(),
            error,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::compile_validating;
    use crate::model::{
        AuditAnnotation, MatchResources, NamedExpression, ResourceRule, ValidatingPolicySpec,
        Validation,
    };
    use serde_json::json;
    use std::collections::HashMap;

    struct Cache(HashMap<String, serde_json::Value>);
    impl Namespaces for Cache {
        fn get(&self, name: &str) -> Option<&serde_json::Value> {
            self.0.get(name)
        }
    }

    fn cache() -> Cache {
        Cache(HashMap::from([(
            "staging-ns".to_string(),
            json!({"metadata": {"name": "staging-ns", "labels": {"environment": "staging"}}}),
        )]))
    }

    fn spec(validations: Vec<Validation>) -> ValidatingPolicySpec {
        ValidatingPolicySpec {
            name: "p".into(),
            match_constraints: Some(MatchResources {
                resource_rules: vec![ResourceRule {
                    operations: vec!["*".into()],
                    api_groups: vec!["apps".into()],
                    api_versions: vec!["v1".into()],
                    resources: vec!["deployments".into()],
                    scope: "*".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            validations,
            ..Default::default()
        }
    }

    fn run(spec: ValidatingPolicySpec, actions: &[ValidationAction], image: &str) -> Outcome {
        let bound = BoundPolicy {
            policy: Arc::new(compile_validating(spec)),
            bindings: vec![Arc::new(ValidatingBindingSpec {
                name: "b".into(),
                policy_name: "p".into(),
                match_resources: None,
                param_ref: None,
                validation_actions: actions.to_vec(),
            })],
        };
        let raw = json!({"uid": "u", "operation": "CREATE", "namespace": "staging-ns",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "object": {"metadata": {"name": "web"}, "spec": {"replicas": 3,
                "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}});
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let ctx = Context {
            namespaces: &namespaces,
            params: &crate::params::NoParams,
            authorizer: None,
            deadline: None,
        };
        validate(&[bound], &req, &ctx)
    }

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
    fn warn_and_audit_actions() {
        let s = spec(vec![Validation {
            expression: "object.spec.replicas > 50".into(),
            message: Some(" too few <replicas> ".into()),
            reason: Some("Forbidden".into()),
            ..Default::default()
        }]);
        let out = run(s, &[ValidationAction::Warn, ValidationAction::Audit], "x");
        assert!(out.allowed());
        assert_eq!(
            out.warnings,
            vec![
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': too few <replicas>"
            ]
        );
        assert_eq!(
            out.audit_annotations,
            vec![(
                VALIDATION_FAILURE_KEY.to_string(),
                r#"[{"message":"too few \u003creplicas\u003e","policy":"p","binding":"b","expressionIndex":0,"validationActions":["Warn","Audit"]}]"#.to_string()
            )]
        );
        let actions: Vec<_> = out.checks.iter().map(|c| c.enforcement_action).collect();
        assert_eq!(actions, vec!["warn", "audit"]);
    }

    #[test]
    fn reasons_codes_and_runtime_errors() {
        let s = spec(vec![
            Validation {
                expression: "object.spec.replicas > 50".into(),
                reason: Some("Forbidden".into()),
                ..Default::default()
            },
            Validation {
                expression: "object.spec.missing == 1".into(),
                ..Default::default()
            },
        ]);
        let out = run(s.clone(), &[ValidationAction::Deny], "x");
        let d = out.denial.expect("denied");
        assert_eq!((d.code, d.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: failed expression: object.spec.replicas > 50"
        );
        let mut only_error = s;
        only_error.validations.remove(0);
        let d = run(only_error.clone(), &[ValidationAction::Deny], "x")
            .denial
            .expect("denied");
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: expression 'object.spec.missing == 1' resulted in error: no such key: missing"
        );
        assert_eq!(d.code, 422);
        only_error.failure_policy = FailurePolicy::Ignore;
        let out = run(only_error, &[ValidationAction::Deny], "x");
        assert!(out.allowed());
        assert_eq!(out.checks[0].enforcement_action, "allow");
        assert_eq!(out.checks[0].error_type, ErrorType::InvalidError);
    }

    #[test]
    fn program_instantiation_failures_follow_the_failure_policy() {
        let mut s = spec(vec![Validation {
            expression: "object.metadata.name.find('[') == ''".into(),
            ..Default::default()
        }]);
        let d = run(s.clone(), &[ValidationAction::Deny], "x")
            .denial
            .expect("denied");
        assert_eq!(
            d.message,
            "ValidatingAdmissionPolicy 'p' with binding 'b' denied request: compilation error: program instantiation failed: error parsing regexp: missing closing ]: `[`"
        );
        s.failure_policy = FailurePolicy::Ignore;
        assert!(run(s, &[ValidationAction::Deny], "x").allowed());
    }

    #[test]
    fn evaluation_stops_at_the_deadline() {
        let list = (0..30).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        let s = spec(vec![Validation {
            expression: format!("[{list}].all(a, [{list}].all(b, a + b >= 0))"),
            ..Default::default()
        }]);
        let bound = BoundPolicy {
            policy: Arc::new(compile_validating(s)),
            bindings: vec![Arc::new(ValidatingBindingSpec {
                name: "b".into(),
                policy_name: "p".into(),
                match_resources: None,
                param_ref: None,
                validation_actions: vec![ValidationAction::Deny],
            })],
        };
        let raw = json!({"uid": "u", "operation": "CREATE", "namespace": "staging-ns",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "object": {"spec": {}}});
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let mut ctx = Context {
            namespaces: &namespaces,
            params: &crate::params::NoParams,
            authorizer: None,
            deadline: None,
        };
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

    /// An authorizer with a defect: it panics.
    struct Panicking;
    impl Authorizer for Panicking {
        fn check(&self, _: &celgate_cel::AuthzRequest) -> celgate_cel::AuthzDecision {
            panic!("authorizer defect")
        }
    }

    #[test]
    fn a_panic_in_one_policy_is_that_policys_error_and_the_others_still_decide() {
        let mut broken = spec(vec![Validation {
            expression: "authorizer.path('/healthz').check('get').allowed()".into(),
            ..Default::default()
        }]);
        broken.name = "broken".into();
        let warn = spec(vec![Validation {
            expression: "object.spec.replicas > 50".into(),
            ..Default::default()
        }]);
        let bound = |spec: ValidatingPolicySpec, actions: Vec<ValidationAction>| BoundPolicy {
            bindings: vec![Arc::new(ValidatingBindingSpec {
                name: "b".into(),
                policy_name: spec.name.clone(),
                match_resources: None,
                param_ref: None,
                validation_actions: actions,
            })],
            policy: Arc::new(compile_validating(spec)),
        };
        let raw = json!({"uid": "u", "operation": "CREATE", "namespace": "staging-ns",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "object": {"spec": {"replicas": 3}}});
        let req = Request::from_json(&raw).expect("valid request");
        let namespaces = cache();
        let authorizer: Arc<dyn Authorizer> = Arc::new(Panicking);
        let ctx = Context {
            namespaces: &namespaces,
            params: &crate::params::NoParams,
            authorizer: Some(&authorizer),
            deadline: None,
        };
        let policies = [
            bound(broken.clone(), vec![ValidationAction::Deny]),
            bound(warn, vec![ValidationAction::Warn]),
        ];
        let out = validate(&policies, &req, &ctx);
        assert_eq!(
            out.denial.map(|d| d.message).as_deref(),
            Some(
                "ValidatingAdmissionPolicy 'broken' denied request: internal error in celgate while evaluating the policy: authorizer defect"
            )
        );
        assert_eq!(
            out.warnings,
            vec![
                "Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': failed expression: object.spec.replicas > 50"
            ]
        );
        broken.failure_policy = FailurePolicy::Ignore;
        let policies = [bound(broken, vec![ValidationAction::Deny])];
        assert!(validate(&policies, &req, &ctx).allowed());
    }

    #[test]
    fn audit_annotation_values() {
        let mut s = spec(vec![]);
        s.audit_annotations = vec![
            AuditAnnotation {
                key: "replicas".into(),
                value_expression: "'set to ' + string(object.spec.replicas)".into(),
            },
            AuditAnnotation {
                key: "omitted".into(),
                value_expression: "null".into(),
            },
        ];
        let out = run(s, &[ValidationAction::Deny], "x");
        assert!(out.allowed());
        assert_eq!(
            out.audit_annotations,
            vec![("p/replicas".to_string(), "set to 3".to_string())]
        );
    }
}
