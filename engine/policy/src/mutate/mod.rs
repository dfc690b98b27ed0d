//! Evaluates the MutatingAdmissionPolicies that match a request, in the order given, each
//! mutation seeing the object as the previous ones left it, and folds their errors into one
//! outcome with kube-apiserver's messages; the result is the mutated object and the JSON patch
//! (RFC 6902) from the request's object to it.
//!
//! Each file holds one job: `compile` the policy's expressions, `patch_values` a mutation's
//! CEL result as a patch (`go_value` what upstream's conversion to Go leaves of CEL values),
//! `typed` the kind's schema as server-side apply sees it (and the checks of an apply
//! configuration), `merge` server-side apply's merge, `granular` the common configuration
//! (strings in granular structs and maps) checked and merged at less cost, `apply` these put
//! together with upstream's errors, `json_patch` RFC 6902 as kube-apiserver's library applies
//! it, `touched` the places patches write (kept as they were, to compare, undo and diff for
//! the response); this module runs the policy, binding, param and mutation loops.

mod apply;
mod compile;
mod connect_options;
mod go_object;
mod go_value;
mod granular;
pub mod json_patch;
mod merge;
mod object;
mod patch_values;
#[cfg(test)]
mod tests;
mod touched;
mod typed;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use celgate_cel::{EvalError, RUNTIME_BUDGET};
use serde_json::Value;

use crate::check::{CheckError, ErrorType};
use crate::compile::ExprError;
use crate::context::Context;
use crate::evaluation::{Batch, Evaluation, guarded};
use crate::match_conditions::{MatchConditions, Sources, evaluate_match_conditions};
use crate::matching;
use crate::model::{FailurePolicy, MutatingBindingSpec, ReinvocationPolicy};
use crate::request::{Operation, Request};
use crate::schema::{Gvk, Schema};
use crate::scope::{ScopeError, binding_params, policy_scope};
use crate::validate::Denial;
use crate::validate::exempt::exempt;
use object::RunObject;
use patch_values::Patch;
use touched::{Places, Saved, Writes};
use typed::{Fit, Within, Written};

pub use apply::{APPLY_SEMANTICS_ANNOTATION, ApplySemantics};
pub use compile::{CompiledMutation, CompiledPatch, Mutating, MutatingPolicy, compile_mutating};
pub use touched::JsonPatchText;

/// A bound mutating policy in a snapshot: the compiled policy and its bindings, in list order.
#[derive(Debug, Clone)]
pub struct BoundMutatingPolicy {
    /// The compiled policy.
    pub policy: Arc<MutatingPolicy>,
    /// Its bindings.
    pub bindings: Arc<[Arc<MutatingBindingSpec>]>,
}

/// The schema of a kind, as mutations need it.
#[derive(Debug, Clone)]
pub struct KindSchema {
    /// The kind's structural schema.
    pub schema: Arc<Schema>,
    /// Whether the kind is built into the API server (its objects are decoded strictly after
    /// a JSON patch, so unknown fields are an error); false for custom resources.
    pub built_in: bool,
}

/// The schemas of the kinds the API server serves (its OpenAPI v3 discovery).
pub trait KindSchemas {
    /// The schema of `gvk`, if the API server publishes one.
    fn schema(&self, gvk: &Gvk) -> Option<&KindSchema>;
}

/// One mutation's metric observation
/// (`apiserver_mutating_admission_policy_check_total` and `…_duration_seconds`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MutationCheck {
    /// Policy name.
    pub policy: Arc<str>,
    /// Binding name.
    pub binding: Arc<str>,
    /// `no_error`, `compile_error`, `out_of_budget` or `invalid_error`.
    pub error_type: ErrorType,
    /// Time spent on the mutation.
    pub elapsed: Duration,
}

/// One evaluation of a policy under a binding with one param, for reinvocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Policy name.
    pub policy: Arc<str>,
    /// Binding name.
    pub binding: Arc<str>,
    /// The param's namespace and name, when the policy has params.
    pub param: Option<(String, String)>,
    /// The policy's reinvocation policy.
    pub reinvocation: ReinvocationPolicy,
    /// Whether its mutations changed the object.
    pub changed: bool,
}

/// The result of mutating one request.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct MutationOutcome {
    /// The JSON patch (RFC 6902 operations) from the request's object to the object after
    /// every mutation ([`MutationOutcome::object`]), as JSON text; empty when unchanged.
    pub patch: JsonPatchText,
    /// Set when the request is rejected: a policy error under failurePolicy Fail (code 403,
    /// the first error's message), or an error upstream returns at once (no schema for the
    /// kind: 503; a patch a built-in kind cannot decode: 500; an unknown namespace: 404).
    pub denial: Option<Denial>,
    /// Metric observations, one per mutation evaluated.
    pub checks: Vec<MutationCheck>,
    /// The invocations, in order.
    pub invocations: Vec<Invocation>,
}

impl MutationOutcome {
    /// True when the request is admitted.
    pub fn allowed(&self) -> bool {
        self.denial.is_none()
    }

    /// The object after every mutation, when it differs from `object`, the request's: the
    /// patch applied to it. The run itself decodes only the members patches reach.
    pub fn object(&self, object: &Value) -> Option<Value> {
        if self.patch.is_empty() {
            return None;
        }
        let patch: ::json_patch::Patch = serde_json::from_slice(self.patch.as_bytes()).ok()?;
        let mut mutated = object.clone();
        ::json_patch::patch(&mut mutated, &patch).ok()?;
        Some(mutated)
    }
}

/// A policy error, subject to the policy's failurePolicy.
struct PolicyError {
    message: String,
    /// `Invalid` for errors of mutations and match conditions; none (`Forbidden`) for
    /// configuration errors.
    reason: Option<&'static str>,
    fail: bool,
}

/// An error upstream returns at once, whatever the failurePolicy.
struct Immediate(Denial);

impl Immediate {
    #[cold]
    fn new(code: u16, reason: &str, message: String) -> Self {
        Immediate(Denial {
            message,
            reason: reason.to_string(),
            code,
        })
    }
}

/// The loop's state: the object as it stands and what was observed.
struct Run<'r> {
    req: &'r Request<'r>,
    ctx: &'r Context<'r>,
    schemas: &'r dyn KindSchemas,
    /// The schema of the request's kind, once looked up.
    kind: Option<Option<&'r KindSchema>>,
    object: RunObject<'r>,
    /// What is known of whether `object` fits its kind's schema (checked by an apply
    /// configuration where not known, kept by merges, narrowed by JSON patches); for a
    /// built-in kind, from when the kind is looked up, that it is the request's object.
    fit: Fit,
    /// Where patches wrote: `object` differs from the request's only there.
    writes: Writes,
    errors: Vec<PolicyError>,
    checks: Vec<MutationCheck>,
    invocations: Vec<Invocation>,
    /// Whether a mutation applied (changing the object or not): kube-apiserver then runs its
    /// policies a second time.
    applied: bool,
    /// In the second pass, for a policy not invoked again: its match conditions only.
    conditions_only: bool,
}

/// Mutates a request with the bound policies, in their order.
pub fn mutate<'p>(
    policies: impl IntoIterator<Item = &'p BoundMutatingPolicy>,
    req: &Request<'_>,
    ctx: &Context<'_>,
    schemas: &dyn KindSchemas,
) -> MutationOutcome {
    let mut out = MutationOutcome::default();
    let policies: Vec<&BoundMutatingPolicy> = policies.into_iter().collect();
    // With no candidate the object is not read (nor decoded, when received as text).
    if policies.is_empty() || exempt(req) || req.operation == Operation::Delete {
        return out;
    }
    // The run's own object. The response's patch is worked out from the places the run
    // writes, kept as the request had them, so the request's object is decoded only where
    // matching reads it (then the run reads that value) and where patches reach; else the
    // run reads it in place.
    let matching_reads_object = policies.iter().any(|bound| {
        let bindings = bound.bindings.iter();
        (bound.policy.spec.match_constraints.iter())
            .chain(bindings.filter_map(|b| b.match_resources.as_ref()))
            .any(|criteria| matching::may_read_object(criteria, req))
    });
    let received = if matching_reads_object {
        celgate_cel::Value::from_json(req.object())
    } else {
        req.cel_object()
    };
    let object = match RunObject::of(received) {
        Some(object) => object,
        None => match req.object_owned() {
            Value::Null => return out,
            other => RunObject::decoded(other),
        },
    };
    let mut run = Run {
        req,
        ctx,
        schemas,
        kind: None,
        object,
        fit: Fit::Unknown,
        writes: Writes::default(),
        errors: Vec::new(),
        // One check per mutation and one invocation per policy, with one binding and param
        // each (the usual case; more grow the lists).
        checks: Vec::with_capacity(policies.iter().map(|b| b.policy.mutations.len()).sum()),
        invocations: Vec::with_capacity(policies.len()),
        applied: false,
        conditions_only: false,
    };
    // For each `IfNeeded` policy, the run keeps what it found where it is written after
    // (`Writes::since`), for the second pass.
    for &bound in &policies {
        if bound.policy.spec.reinvocation_policy == ReinvocationPolicy::IfNeeded {
            run.writes.since.push(Saved::default());
        }
        if let Err(Immediate(denial)) = run.policy_guarded(bound) {
            out.denial = Some(denial);
            out.checks = run.checks;
            out.invocations = run.invocations;
            return out;
        }
    }
    // The second pass, as kube-apiserver runs its in-tree policies again once a mutation
    // applied (and the first pass did not fail the request): every policy's match conditions
    // are evaluated again on the object as it now is, an error counting under the policy's
    // failurePolicy, and an `IfNeeded` policy runs once more, in order, when the object
    // changed after it was first given it (by itself or by a later policy).
    if run.applied && !run.errors.iter().any(|e| e.fail) {
        let mut reinvocable = 0;
        for &bound in &policies {
            let again = bound.policy.spec.reinvocation_policy == ReinvocationPolicy::IfNeeded && {
                reinvocable += 1;
                (run.writes.since.get(reinvocable - 1))
                    .is_some_and(|s| s.differs(run.object.value()))
            };
            // Without match conditions, what is left of a policy not invoked again (its scope
            // and params) reads the request as the first pass did and finds what it found: an
            // error there either stopped the run or fails nothing.
            if !again && bound.policy.match_conditions.is_empty() {
                continue;
            }
            run.conditions_only = !again;
            if let Err(Immediate(denial)) = run.policy_guarded(bound) {
                out.denial = Some(denial);
                out.checks = run.checks;
                out.invocations = run.invocations;
                return out;
            }
        }
    }
    out.checks = run.checks;
    out.invocations = run.invocations;
    if let Some(first) = run.errors.iter().find(|e| e.fail) {
        out.denial = Some(Denial {
            message: first.message.clone(),
            reason: first.reason.unwrap_or("Forbidden").to_string(),
            code: 403,
        });
    }
    if let Some(patch) = run.writes.original.patch(run.object.value()) {
        out.patch = patch;
    }
    out
}

/// A policy error's message: `policy '<p>' with binding '<b>' denied request: …`, or
/// `policy "<p>" denied request: …` for the policy's own configuration errors.
/// A variant for a Pod controller is named with its controller ([`crate::autogen::variant_label`]).
fn policy_message(policy: &MutatingPolicy, binding: Option<&str>, message: &str) -> String {
    let name = &*policy.name;
    let variant = crate::autogen::variant_label(policy.spec.pod_controller);
    match binding {
        Some(b) => format!("policy '{name}'{variant} with binding '{b}' denied request: {message}"),
        None => format!("policy {name:?}{variant} denied request: {message}"),
    }
}

/// Why one mutation failed, worded as kube-apiserver words it. The metric's `error_type` is
/// read from the variant ([`MutationError::error_type`]), never from the text.
#[derive(Debug, thiserror::Error)]
enum MutationError {
    /// The mutation's expression did not compile (shown as the compile error itself).
    #[error("{0}")]
    Compile(ExprError),
    /// The policy has no evaluator for the mutation's patch type.
    #[error("policy evaluator is nil")]
    Missing,
    /// Evaluating the expression failed, or ran out of budget (validation's errors and text).
    #[error(transparent)]
    Eval(CheckError),
    /// The expression's result is not a patch of its type.
    #[error(transparent)]
    Patch(patch_values::PatchValueError),
    /// The apply configuration could not be merged into the object.
    #[error("error applying patch: {0}")]
    Apply(apply::ApplyError),
    /// The JSON patch could not be applied to the object.
    #[error("JSON Patch: {0}")]
    JsonPatch(json_patch::PatchError),
    /// A custom resource's `Scale` was patched: kube-apiserver converts the patched object to
    /// the custom resource's own version, which a `Scale` is not.
    #[error("request to convert CR to an invalid group/version: autoscaling/v1")]
    CustomResourceScale,
}

impl MutationError {
    /// The `error_type` metric label of this failure: only a parse or type-check error
    /// (`compilation failed: …`) counts as a compile error.
    fn error_type(&self) -> ErrorType {
        match self {
            MutationError::Compile(ExprError::Compile(_)) => ErrorType::CompileError,
            MutationError::Eval(e) => e.error_type(),
            MutationError::Compile(ExprError::Program(_) | ExprError::ResultType { .. })
            | MutationError::Missing
            | MutationError::Patch(_)
            | MutationError::Apply(_)
            | MutationError::JsonPatch(_)
            | MutationError::CustomResourceScale => ErrorType::InvalidError,
        }
    }
}

impl Run<'_> {
    #[cold]
    fn error(
        &mut self,
        policy: &MutatingPolicy,
        binding: Option<&str>,
        message: &str,
        reason: Option<&'static str>,
    ) {
        self.errors.push(PolicyError {
            message: policy_message(policy, binding, message),
            reason,
            fail: policy.failure_policy() == FailurePolicy::Fail,
        });
    }

    /// Runs one policy so that a panic inside it (a defect in celgate) becomes that policy's
    /// error under its failurePolicy; the object keeps what the policy's earlier invocations
    /// did.
    fn policy_guarded(&mut self, bound: &BoundMutatingPolicy) -> Result<(), Immediate> {
        match guarded(|| self.policy(bound)) {
            Ok(result) => result,
            Err(internal) => {
                self.error(&bound.policy, None, &internal.to_string(), None);
                Ok(())
            }
        }
    }

    fn policy(&mut self, bound: &BoundMutatingPolicy) -> Result<(), Immediate> {
        let policy = &bound.policy;
        let (req, ctx) = (self.req, self.ctx);
        let scope = policy_scope(&policy.spec, req, ctx);
        let namespace_object = match scope {
            Ok(Some(ns)) => ns,
            Ok(None) => return Ok(()),
            Err(ScopeError::Namespace(e)) => {
                return Err(Immediate::new(404, "NotFound", e.to_string()));
            }
            Err(e) => {
                self.error(policy, None, &e.to_string(), None);
                return Ok(());
            }
        };
        for binding in bound.bindings.iter() {
            let params = binding_params(&policy.spec, &**binding, req, ctx.namespaces, ctx.params);
            let list = match params {
                Ok(Ok(list)) => list,
                Ok(Err(_)) => continue,
                Err(e) => {
                    self.error(policy, Some(&binding.name), &e.to_string(), None);
                    continue;
                }
            };
            let binding_name = &binding.name;
            for param in list {
                self.invocation(policy, binding, binding_name, namespace_object, param)?;
            }
        }
        Ok(())
    }

    /// One (policy, binding, param): its match conditions, then its mutations in order.
    fn invocation(
        &mut self,
        policy: &MutatingPolicy,
        binding: &MutatingBindingSpec,
        binding_name: &Arc<str>,
        namespace_object: &Value,
        param: Option<&Value>,
    ) -> Result<(), Immediate> {
        // Most policies have no match conditions: then nothing is made for them.
        let conditions = if policy.match_conditions.is_empty() {
            MatchConditions::Apply
        } else {
            let evaluation = self.evaluation(policy, namespace_object, param);
            let sources = Sources {
                match_conditions: &policy.spec.match_conditions,
                variables: &policy.spec.variables,
            };
            evaluate_match_conditions(&evaluation, &policy.match_conditions, sources)
        };
        match conditions {
            MatchConditions::Apply if self.conditions_only => return Ok(()),
            MatchConditions::Apply => {}
            MatchConditions::Skip => return Ok(()),
            MatchConditions::Error(msg) => {
                self.error(policy, Some(&binding.name), &msg, Some("Invalid"));
                return Ok(());
            }
        }
        // With one mutation, whether it changed the object says whether the invocation did;
        // with more, the places they write are kept as the invocation found them and compared
        // (they may undo each other).
        self.writes.invocation = (policy.mutations.len() > 1).then(Saved::default);
        let mut changed = false;
        if policy
            .mutations
            .iter()
            .any(|m| matches!(m, CompiledMutation::Missing))
        {
            let got = policy
                .mutations
                .iter()
                .filter(|m| !matches!(m, CompiledMutation::Missing))
                .count();
            return Err(Immediate::new(
                500,
                "InternalError",
                format!(
                    "Internal error occurred: expected {} compiled evaluators for policy {}, got {got}",
                    policy.mutations.len(),
                    policy.name
                ),
            ));
        }
        for mutation in &policy.mutations {
            let started = Instant::now();
            let result = self.mutation(policy, mutation, namespace_object, param)?;
            let error_type = match &result {
                Ok(_) => ErrorType::NoError,
                Err(e) => e.error_type(),
            };
            self.checks.push(MutationCheck {
                policy: policy.name.clone(),
                binding: binding_name.clone(),
                error_type,
                elapsed: started.elapsed(),
            });
            match result {
                Ok(c) => {
                    self.applied = true;
                    changed |= c;
                }
                Err(e) => {
                    let msg = e.to_string();
                    self.error(policy, Some(&binding.name), &msg, Some("Invalid"));
                }
            }
        }
        let param_key = param.map(|p| {
            let meta = |f: &str| {
                (p.get("metadata").and_then(|m| m.get(f)))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            (meta("namespace"), meta("name"))
        });
        self.invocations.push(Invocation {
            policy: policy.name.clone(),
            binding: binding_name.clone(),
            param: param_key,
            reinvocation: policy.spec.reinvocation_policy,
            changed: self
                .writes
                .invocation
                .take()
                .map_or(changed, |kept| kept.differs(self.object.value())),
        });
        Ok(())
    }

    /// The look after a JSON patch at a built-in kind's object: Go's error for the first
    /// value written since the last look that the kind's Go type cannot hold. `own`: how many
    /// of the last places written are the patch's own, known to hold strings where strings are
    /// declared (so, when the others do too, there is nothing to find).
    fn decode_check(&mut self, kind: &KindSchema, own: Option<usize>) -> Result<(), Immediate> {
        if !kind.built_in {
            return Ok(());
        }
        // Only what was written since the last look can fail to decode.
        let since = self.writes.since_decoded();
        let object = self.object.value();
        let strings = own.is_some_and(|own| {
            let before = &since[..since.len().saturating_sub(own)];
            granular::strings_at(&kind.schema, object, before)
        });
        if strings {
            return Ok(());
        }
        match go_object::decode_error(&kind.schema, object, &Within::of_paths(since)) {
            Some(e) => Err(Immediate::new(
                500,
                "InternalError",
                format!("Internal error occurred: {e}"),
            )),
            None => Ok(()),
        }
    }

    fn evaluation<'e>(
        &'e self,
        policy: &'e MutatingPolicy,
        namespace_object: &'e Value,
        param: Option<&'e Value>,
    ) -> Evaluation<'e> {
        Evaluation {
            req: self.req,
            object: self.object.cel(),
            old_object: Evaluation::old_object_for(self.req, policy.reads_old_object),
            namespace_object,
            has_params: policy.spec.param_kind.is_some(),
            param,
            variables: &policy.variables,
            message_variables: &policy.variables,
            authorizer: self.ctx.authorizer.filter(|_| policy.uses_authorizer),
            deadline: self.ctx.deadline,
            trace: None,
        }
    }

    /// Evaluates one mutation and applies its patch to the object; the inner `Ok` says whether
    /// the object changed. The inner `Err` is a policy error; the outer one an error upstream
    /// returns at once.
    fn mutation(
        &mut self,
        policy: &MutatingPolicy,
        mutation: &CompiledMutation,
        namespace_object: &Value,
        param: Option<&Value>,
    ) -> Result<Result<bool, MutationError>, Immediate> {
        let gvk = || {
            Gvk::new(
                self.req.kind.group,
                self.req.kind.version,
                self.req.kind.name,
            )
        };
        let kind = match self.kind {
            Some(kind) => kind,
            None => {
                let gvk = gvk();
                let kind = (self.schemas.schema(&gvk)).or_else(|| connect_options::schema(&gvk));
                self.kind = Some(kind);
                // A built-in kind's object is as kube-apiserver encoded it from its Go type
                // (nothing has written it yet); a custom resource's is checked whole.
                if kind.is_some_and(|k| k.built_in) {
                    self.fit = Fit::Received(Written::default());
                }
                kind
            }
        };
        let Some(kind) = kind else {
            let gvk = gvk();
            return Err(Immediate::new(
                503,
                "ServiceUnavailable",
                format!(
                    "Resource kind {gvk} not found. There can be a delay between when CustomResourceDefinitions are created and when they are available."
                ),
            ));
        };
        let (compiled, is_apply) = match mutation {
            CompiledMutation::ApplyConfiguration(c) => (c, true),
            CompiledMutation::JsonPatch(c) => (c, false),
            CompiledMutation::Missing => return Ok(Err(MutationError::Missing)),
        };
        let program = match &compiled.expr {
            Ok(p) => p,
            Err(e) => return Ok(Err(MutationError::Compile(e.clone()))),
        };
        // The patch, as JSON, computed while the activation borrows the object.
        let patch = match &compiled.constant {
            Some(constant) => Cow::Borrowed(constant),
            None => Cow::Owned({
                let evaluation = self.evaluation(policy, namespace_object, param);
                let failed = |error| {
                    Ok(Err(MutationError::Eval(match error {
                        EvalError::BudgetExhausted => CheckError::OutOfBudget,
                        error => CheckError::Eval {
                            expression: program.source().to_string(),
                            error,
                        },
                    })))
                };
                // A literal's leaves alone (charged, and failing, as the whole expression),
                // the patch worked out from them; else the whole value.
                let from_leaves = compiled.literal.as_ref().map(|shape| {
                    let act = evaluation.activation(Batch::Checks);
                    let mut budget = evaluation.budget(RUNTIME_BUDGET);
                    (program.eval_leaves(shape, &act, &mut budget))
                        .map(|leaves| patch_values::patch_of_leaves(program, shape, leaves))
                });
                let patch = match from_leaves {
                    Some(Err(error)) => return failed(error),
                    Some(Ok(Some(patch))) => patch,
                    None | Some(Ok(None)) => {
                        let act = evaluation.activation(Batch::Checks);
                        let mut budget = evaluation.budget(RUNTIME_BUDGET);
                        match program.eval(&act, &mut budget) {
                            Ok(value) => patch_values::patch(&value, is_apply),
                            Err(error) => return failed(error),
                        }
                    }
                };
                match patch {
                    Ok(p) => p,
                    Err(e) => return Ok(Err(MutationError::Patch(e))),
                }
            }),
        };
        // A JSON patch is only read: a constant one is not copied.
        match patch {
            Cow::Borrowed(Patch::Apply(config)) => {
                self.apply_configuration(policy, kind, config.clone())
            }
            Cow::Owned(Patch::Apply(config)) => self.apply_configuration(policy, kind, config),
            Cow::Borrowed(Patch::Json(ops)) => self.json_patch(kind, ops),
            Cow::Owned(Patch::Json(ops)) => self.json_patch(kind, &ops),
        }
    }

    /// Merges an apply configuration into the object.
    fn apply_configuration(
        &mut self,
        policy: &MutatingPolicy,
        kind: &KindSchema,
        config: go_value::Converted,
    ) -> Result<Result<bool, MutationError>, Immediate> {
        // What the merge reads and writes: the members the configuration names, and
        // the kind's; with the object not known to fit, all of it.
        match &config.0 {
            Value::Object(members) if !matches!(self.fit, Fit::Unknown) => {
                let named = members.keys().map(String::as_str);
                self.object.decode(named.chain(["apiVersion", "kind"]));
                if matches!(self.fit, Fit::Received(_)) {
                    let root = typed::Ty::root(&kind.schema);
                    self.object.decode_where_unkeyed(&root);
                }
            }
            _ => self.object.decode_all(),
        }
        let object = self.object.value_mut();
        let (fit, writes) = (&mut self.fit, &mut self.writes);
        let semantics = policy.apply_semantics;
        match apply::apply(&kind.schema, object, fit, config, semantics, writes) {
            Ok(merged) => {
                // Only what was written since the last time can be too wide (strings
                // are not; they are passed over by the next look, if any).
                if kind.built_in && !merged.strings_only {
                    go_object::narrow_ints(&kind.schema, object, &writes.since_narrowed());
                }
                Ok(Ok(merged.changed))
            }
            Err(e) => Ok(Err(MutationError::Apply(e))),
        }
    }

    /// Applies JSON patch operations to the object.
    fn json_patch(
        &mut self,
        kind: &KindSchema,
        ops: &[json_patch::Operation],
    ) -> Result<Result<bool, MutationError>, Immediate> {
        // One string added or replaced where the kind declares strings: nothing else
        // to keep, undo, look at or tell the fit (`granular`).
        if let Some((path, string)) = granular::one_string(ops)
            && self.req.sub_resource != "scale"
        {
            self.object.decode(path.first().map(|first| &**first));
            let object = self.object.value();
            if let Some(old) = granular::string_member(&kind.schema, object, &path) {
                let changed = old.and_then(Value::as_str) != Some(string);
                if changed {
                    self.writes.before_strings(&path, old);
                    granular::put_string(self.object.value_mut(), &path, string);
                }
                self.decode_check(kind, Some(0))?;
                return Ok(Ok(changed));
            }
        }
        self.json_patch_general(kind, ops)
    }

    /// Applies JSON patch operations to the object the general way: what they write kept
    /// first (to undo a patch that fails half-way, and for the response), the object looked
    /// at where they wrote. Kept out of line: most patches take the way of one string, whose
    /// code stays compact.
    #[inline(never)]
    fn json_patch_general(
        &mut self,
        kind: &KindSchema,
        ops: &[json_patch::Operation],
    ) -> Result<Result<bool, MutationError>, Immediate> {
        // Where the patch writes or removes: what may no longer fit, and the only place
        // a member the schema does not declare can have come from.
        let pointers: Vec<&str> = ops
            .iter()
            .flat_map(|op| {
                let (to, from) = match op.op.as_str() {
                    "add" | "remove" | "replace" | "copy" => (true, None),
                    "move" => (true, op.from.as_deref()),
                    _ => (false, None),
                };
                to.then_some(op.path.as_str()).into_iter().chain(from)
            })
            .collect();
        let places = Places::of_pointers(pointers.iter().copied());
        // The patch reads where it writes, and where it tests and copies from.
        let read = ops
            .iter()
            .flat_map(|op| [Some(op.path.as_str()), op.from.as_deref()]);
        self.object.decode_below(read.flatten());
        // A custom resource's Scale (only "" and apps serve one among the built-in
        // groups) cannot take a patch; kube-apiserver says so once the patch applied.
        let custom_resource_scale = self.req.sub_resource == "scale"
            && !matches!(self.req.resource.group, "" | "apps")
            && {
                self.object.decode_all();
                apply::is_scale(self.object.value())
            };
        let custom_resource_scale = custom_resource_scale.then(|| self.object.value().clone());
        self.writes.before(self.object.value(), places.clone());
        // What a patch that may fail half-way writes is kept, to be put back.
        let undo = (!json_patch::changes_nothing_on_error(ops))
            .then(|| Saved::new(self.object.value(), &places));
        let written = Written::of_paths(places.into_paths());
        let changed = match json_patch::apply(self.object.value_mut(), ops) {
            Ok(changed) => changed,
            Err(e) => {
                if let Some(undo) = undo {
                    undo.restore(self.object.value_mut());
                }
                return Ok(match e {
                    // A failed test leaves the object as it was.
                    json_patch::PatchError::TestFailed(_) => Ok(false),
                    e => Err(MutationError::JsonPatch(e)),
                });
            }
        };
        if let Some(before) = custom_resource_scale {
            *self.object.value_mut() = before;
            return Ok(Err(MutationError::CustomResourceScale));
        }
        // A string written where the kind declares one, through declared members,
        // leaves nothing for the checks below to find (`granular::strings_at`).
        let strings_only = granular::strings_at(&kind.schema, self.object.value(), written.paths());
        self.decode_check(kind, strings_only.then_some(written.paths().len()))?;
        if kind.built_in && !strings_only {
            // The request's object has no member its Go type does not declare, nor
            // an empty optional one: only where the patch wrote can there be one.
            let within = written.within();
            let unknown = apply::unknown_fields(&kind.schema, self.object.value(), &within);
            if !unknown.is_empty() {
                return Err(Immediate::new(
                    500,
                    "InternalError",
                    format!(
                        "Internal error occurred: strict decoding error: {}",
                        unknown.join(", ")
                    ),
                ));
            }
            go_object::drop_empty(&kind.schema, self.object.value_mut(), &within);
        }
        // Operations may undo each other: only what was kept says whether they did.
        let changed = undo.map_or(changed, |kept| kept.differs(self.object.value()));
        // Strings where strings are declared still fit.
        if changed && !strings_only {
            self.fit = match std::mem::replace(&mut self.fit, Fit::Unknown) {
                Fit::Unknown => Fit::Unknown,
                Fit::Fits => Fit::FitsBut(written),
                Fit::FitsBut(mut before) => {
                    before.join(written);
                    Fit::FitsBut(before)
                }
                Fit::Received(mut before) => {
                    before.join(written);
                    Fit::Received(before)
                }
            };
        }
        Ok(Ok(changed))
    }
}
