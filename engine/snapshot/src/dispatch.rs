//! Admission dispatch with no HTTP in it: a decoded AdmissionReview in, a decision out, over
//! one snapshot. The webhook only decodes, calls these and encodes; tests call them directly,
//! with paused time.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use celgate_cel::Authorizer;
use celgate_engine::apivalidation::FieldError;
use celgate_engine::model::FailurePolicy;
use celgate_engine::received::ReceivedRequest;
use celgate_engine::trace::Trace;
use celgate_engine::{
    Context, ExceptionsAt, MutatingWebhookGroup, MutationOutcome, Outcome, Request, RequestError,
};
use serde_json::Value;
use thiserror::Error;
use tokio::time::Instant;

use crate::deps::Deps;
use crate::policy_write;
use crate::store::SnapshotStore;
use crate::view::Snapshot;

/// The stack every thread that compiles or evaluates needs: the parser's and evaluator's
/// recursion at the engine's depth limits (expression nesting 250, JSON nesting 10,000) does
/// not fit in tokio's default 2 MiB. The binary builds its runtime with it.
pub const THREAD_STACK_BYTES: usize = 16 * 1024 * 1024;

/// The longest a request waits for param kinds that are still syncing or for a namespace the
/// cache has not seen yet (well inside the API server's default webhook timeout of 10 s; a
/// shorter call timeout shortens the wait, see [`Call::sync_deadline`]).
pub const CACHE_SYNC_WAIT: Duration = Duration::from_secs(5);

/// The part of the call timeout a cache wait never takes.
pub const DECISION_HEADROOM: Duration = Duration::from_millis(500);

/// kube-apiserver's default webhook timeout.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// One call of the API server: when it arrived and how long the API server waits for it.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// When the call arrived (tokio's clock, so tests can pause it).
    pub started: Instant,
    /// The API server's timeout for the call.
    pub timeout: Duration,
    /// The wall-clock time the call arrived: PolicyExceptions expire by it.
    pub at: SystemTime,
}

impl Call {
    /// A call that arrived now with the API server's default timeout.
    pub fn now() -> Self {
        Self {
            started: Instant::now(),
            timeout: DEFAULT_CALL_TIMEOUT,
            at: SystemTime::now(),
        }
    }

    /// How long a request may wait for caches: [`CACHE_SYNC_WAIT`], cut short so that at
    /// least [`DECISION_HEADROOM`] of the call timeout is left to decide and answer.
    pub fn sync_deadline(&self) -> Instant {
        self.started + CACHE_SYNC_WAIT.min(self.timeout.saturating_sub(DECISION_HEADROOM))
    }

    /// When evaluation must stop: the API server has given up on the call by then. A timeout
    /// too large for the clock (the webhook clamps it to 30 s first) leaves no time at all.
    pub fn evaluation_deadline(&self) -> std::time::Instant {
        let started = self.started.into_std();
        started.checked_add(self.timeout).unwrap_or(started)
    }
}

/// Why a review was not decided.
#[derive(Debug, Error)]
pub enum DispatchError {
    /// The operator has not published its first policy set.
    #[error("celgate has not loaded its policies yet")]
    NotReady,
    /// The review's request is malformed.
    #[error("invalid AdmissionReview: {0}")]
    Request(#[from] RequestError),
    /// The evaluation thread failed outside any one policy.
    #[error("internal error deciding the request: {0}")]
    Internal(String),
}

/// A decided review: the decision, with what the response is written from.
#[derive(Debug)]
pub struct Decision<O> {
    /// The request's uid, echoed in the response.
    pub uid: String,
    /// The decision: a validation's outcome, or a mutation's (the mutated object and its
    /// patch, or the denial).
    pub outcome: O,
    /// The request it decides (returned, so a denial can be logged with the request's names).
    pub review: ReceivedRequest,
}

/// A decided validation.
pub type Decided = Decision<Outcome>;

/// A decided mutation.
pub type Mutated = Decision<MutationOutcome>;

/// The result of validating a write of one of celgate's own kinds.
#[derive(Debug)]
pub struct PolicyWriteVerdict {
    /// The request it answers (returned, so the response can be written from it).
    pub review: ReceivedRequest,
    /// The field errors; empty when the write is allowed.
    pub errors: Vec<FieldError>,
}

fn request_of(review: &ReceivedRequest) -> Result<Request<'_>, DispatchError> {
    Ok(review.request()?)
}

/// `decided`, unless deciding read an object that cannot be decoded: then the request is
/// malformed, whatever was decided while that object read as `null`.
fn unless_undecodable<T>(review: &ReceivedRequest, decided: T) -> Result<T, DispatchError> {
    match review.decode_error() {
        Some(e) => Err(e.into()),
        None => Ok(decided),
    }
}

/// Decides a request against one snapshot at `now` (the snapshot's PolicyExceptions expire
/// by it), with no waiting: the pure core of [`validate`]. With `only`, just the policies of
/// that failure policy (each of celgate's two validating webhooks serves one).
pub fn decide(
    snapshot: &Snapshot,
    req: &Request<'_>,
    authorizer: Option<&Arc<dyn Authorizer>>,
    deadline: Option<std::time::Instant>,
    only: Option<FailurePolicy>,
    now: SystemTime,
) -> Outcome {
    let ctx = context_at(snapshot, authorizer, deadline, None, now);
    snapshot.policies.validate(req, &ctx, only)
}

/// Decides a request against one snapshot as [`decide`] does, with no deadline, reporting
/// each expression evaluated to `trace` (offline tools: `celgate eval`, the audit).
pub fn decide_traced(
    snapshot: &Snapshot,
    req: &Request<'_>,
    authorizer: Option<&Arc<dyn Authorizer>>,
    trace: &dyn Trace,
    now: SystemTime,
) -> Outcome {
    let ctx = context_at(snapshot, authorizer, None, Some(trace), now);
    snapshot.policies.validate(req, &ctx, None)
}

/// The evaluation context of a validation over one snapshot at `now`: the snapshot's
/// PolicyExceptions honoured as they stand then.
pub(crate) fn context_at<'c>(
    snapshot: &'c Snapshot,
    authorizer: Option<&'c Arc<dyn Authorizer>>,
    deadline: Option<std::time::Instant>,
    trace: Option<&'c dyn Trace>,
    now: SystemTime,
) -> Context<'c> {
    let mut ctx = context(snapshot, authorizer, deadline, trace);
    ctx.exceptions = exceptions(snapshot, now);
    ctx
}

/// The snapshot's PolicyExceptions as a decision at `now` honours them; `None` when it holds
/// none, so that no binding of any request looks for one.
fn exceptions(snapshot: &Snapshot, now: SystemTime) -> Option<ExceptionsAt<'_>> {
    (!snapshot.exceptions.is_empty()).then(|| ExceptionsAt {
        set: snapshot.exceptions.as_ref(),
        now,
    })
}

/// The evaluation context over one snapshot, honouring no exception (mutations never are).
fn context<'c>(
    snapshot: &'c Snapshot,
    authorizer: Option<&'c Arc<dyn Authorizer>>,
    deadline: Option<std::time::Instant>,
    trace: Option<&'c dyn Trace>,
) -> Context<'c> {
    Context {
        namespaces: snapshot.namespaces.as_ref(),
        params: snapshot.params.as_ref(),
        authorizer,
        deadline,
        trace,
        exceptions: None,
    }
}

/// Validates an AdmissionReview (already checked to be one) against the current snapshot.
/// It first waits, until the call's [sync deadline](Call::sync_deadline), for the param kinds
/// and the namespace the request needs; then it loads the snapshot once and decides against
/// that one view. Policies that ask the authorizer are evaluated on a blocking thread, since
/// each check may wait for the API server.
pub async fn validate(
    store: &SnapshotStore,
    deps: &Deps,
    review: ReceivedRequest,
    call: Call,
    only: Option<FailurePolicy>,
) -> Result<Decided, DispatchError> {
    let now = call.at;
    let decide = move |s: &Snapshot, r: &Request<'_>, a: Option<&Arc<dyn Authorizer>>, d, o| {
        decide(s, r, a, d, o, now)
    };
    over_snapshot(store, deps, review, call, only, decide).await
}

/// Mutates a request against one snapshot, with no waiting: the pure core of [`mutate`].
/// With `only`, just the mutating policies of that webhook group (each of celgate's mutating
/// webhooks serves one).
pub fn decide_mutation(
    snapshot: &Snapshot,
    req: &Request<'_>,
    authorizer: Option<&Arc<dyn Authorizer>>,
    deadline: Option<std::time::Instant>,
    only: Option<MutatingWebhookGroup>,
) -> MutationOutcome {
    let ctx = context(snapshot, authorizer, deadline, None);
    snapshot
        .policies
        .mutate(req, &ctx, snapshot.schemas.as_ref(), only)
}

/// Mutates the object of an AdmissionReview (already checked to be one) with the bound
/// mutating policies of the current snapshot, in their order, each seeing the previous ones'
/// result. Params, namespaces and the authorizer are waited for and used exactly as
/// [`validate`] does; the kinds' schemas are those published with the policies.
pub async fn mutate(
    store: &SnapshotStore,
    deps: &Deps,
    review: ReceivedRequest,
    call: Call,
    only: Option<MutatingWebhookGroup>,
) -> Result<Mutated, DispatchError> {
    over_snapshot(store, deps, review, call, only, decide_mutation).await
}

/// Decides a review over one snapshot, for either kind: `decide` is the kind's pure core
/// ([`decide`], [`decide_mutation`]) and `only` the webhook's share of its policies. Waits,
/// until the call's sync deadline, for the param kinds and the namespace the request needs,
/// loads the snapshot once, and calls `decide` with the call's evaluation deadline and the
/// request's authorizer when a bound policy may use it (then on a blocking thread, since each
/// check may wait for the API server).
async fn over_snapshot<O, K, F>(
    store: &SnapshotStore,
    deps: &Deps,
    review: ReceivedRequest,
    call: Call,
    only: Option<K>,
    decide: F,
) -> Result<Decision<O>, DispatchError>
where
    O: Send + 'static,
    K: Send + 'static,
    F: FnOnce(
            &Snapshot,
            &Request<'_>,
            Option<&Arc<dyn Authorizer>>,
            Option<std::time::Instant>,
            Option<K>,
        ) -> O
        + Send
        + 'static,
{
    let deadline = Some(call.evaluation_deadline());
    let (snapshot, source) = {
        let req = request_of(&review)?;
        // A snapshot that is not ready has no policies, so this returns at once.
        let snapshot = store
            .wait_until(call.sync_deadline(), |s| s.caught_up_for(req.namespace))
            .await;
        if !snapshot.ready {
            return Err(DispatchError::NotReady);
        }
        let authorizers = deps.authorizers.as_ref();
        let Some(source) = authorizers.filter(|_| snapshot.policies.uses_authorizer()) else {
            let uid = req.uid.to_string();
            let outcome = decide(&snapshot, &req, None, deadline, only);
            return decided(uid, outcome, review);
        };
        (snapshot, source.clone())
    };
    tokio::task::spawn_blocking(move || {
        let (uid, outcome) = {
            let req = request_of(&review)?;
            let authorizer = source.for_user(req.raw.get("userInfo").unwrap_or(&Value::Null));
            let outcome = decide(&snapshot, &req, Some(&authorizer), deadline, only);
            (req.uid.to_string(), outcome)
        };
        decided(uid, outcome, review)
    })
    .await
    .map_err(|e| DispatchError::Internal(e.to_string()))?
}

/// The decision of `review`, unless deciding read an object that cannot be decoded.
fn decided<O>(
    uid: String,
    outcome: O,
    review: ReceivedRequest,
) -> Result<Decision<O>, DispatchError> {
    let outcome = unless_undecodable(&review, outcome)?;
    Ok(Decision {
        uid,
        outcome,
        review,
    })
}

/// Validates a write of one of celgate's own policies or bindings exactly where kube-apiserver
/// rejects the in-tree kinds; the param access check (which asks the API server) runs on a
/// blocking thread.
pub async fn validate_policy_write(
    store: &SnapshotStore,
    deps: &Deps,
    review: ReceivedRequest,
) -> Result<PolicyWriteVerdict, DispatchError> {
    let snapshot = store.load();
    let deps = deps.clone();
    tokio::task::spawn_blocking(move || {
        let errors = {
            let req = request_of(&review)?;
            policy_write::errors(&snapshot, &deps, &req)
        };
        let errors = unless_undecodable(&review, errors)?;
        Ok(PolicyWriteVerdict { review, errors })
    })
    .await
    .map_err(|e| DispatchError::Internal(e.to_string()))?
}
