//! The HTTPS server: routes, handlers, and TLS whose certificate can be swapped while serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, Request, State as AxumState};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::Handle;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use thiserror::Error;

use celgate_engine::MutatingWebhookGroup;
use celgate_engine::model::{FailurePolicy, ReinvocationPolicy};

use celgate_snapshot::Deps;
use celgate_snapshot::SnapshotStore;
use celgate_snapshot::dispatch::{self, Call, DEFAULT_CALL_TIMEOUT, DispatchError};

use crate::decision_log::AdmissionKind;
use crate::decision_log::Denied;
use crate::metrics::{Metrics, admission_path};
use crate::review::{self, Review, TextReview, ValidationReview};

/// Largest AdmissionReview body accepted: an object and its old version at the API server's
/// request size limit, with room to spare.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// HTTP/2 receive window of one review's stream: a typical review (a few KiB to a few hundred)
/// arrives without waiting for a window update.
const STREAM_WINDOW_BYTES: u32 = 1024 * 1024;
/// HTTP/2 receive window of a connection, shared by its concurrent reviews.
const CONNECTION_WINDOW_BYTES: u32 = 4 * 1024 * 1024;

/// What the handlers share: the snapshot store the operator publishes into, dispatch's
/// dependencies, and the metrics.
#[derive(Debug)]
pub struct AppState {
    /// The current snapshot.
    pub store: Arc<SnapshotStore>,
    /// Authorizer and CEL compatibility for dispatch.
    pub deps: Deps,
    /// The webhook's metrics.
    pub metrics: Metrics,
    /// Set once the process is stopping: `/readyz` answers 503 so load balancers and Service
    /// endpoints stop sending new connections, while requests keep being decided.
    draining: AtomicBool,
}

impl AppState {
    /// Handler state over `store`, recording into `metrics`.
    pub fn new(store: Arc<SnapshotStore>, deps: Deps, metrics: Metrics) -> Arc<Self> {
        Arc::new(Self {
            store,
            deps,
            metrics,
            draining: AtomicBool::new(false),
        })
    }
}

/// A PEM certificate chain and private key for the serving endpoint.
#[derive(Clone, Debug)]
pub struct TlsMaterial {
    /// The certificate chain, PEM.
    pub cert_pem: String,
    /// The private key, PEM.
    pub key_pem: String,
}

/// Errors starting or running the server.
#[derive(Debug, Error)]
pub enum ServerError {
    /// The certificate or key cannot be used.
    #[error("invalid serving certificate or key: {0}")]
    Tls(std::io::Error),
    /// The listener failed.
    #[error("webhook server on {addr} failed: {source}")]
    Serve {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// The admission webhook server.
#[derive(Clone)]
pub struct Server {
    state: Arc<AppState>,
    tls: RustlsConfig,
    addr: SocketAddr,
    handle: Handle<SocketAddr>,
}

impl Server {
    /// Prepares a server on `addr` with an initial certificate, deciding over the snapshots
    /// published into `store` and recording into `metrics`.
    pub async fn new(
        addr: SocketAddr,
        store: Arc<SnapshotStore>,
        deps: Deps,
        tls: TlsMaterial,
        metrics: Metrics,
    ) -> Result<Self, ServerError> {
        let state = AppState::new(store, deps, metrics);
        let tls = RustlsConfig::from_pem(tls.cert_pem.into_bytes(), tls.key_pem.into_bytes())
            .await
            .map_err(ServerError::Tls)?;
        Ok(Self {
            state,
            tls,
            addr,
            handle: Handle::new(),
        })
    }

    /// Swaps the serving certificate; new connections use it at once.
    pub async fn reload_tls(&self, tls: TlsMaterial) -> Result<(), ServerError> {
        self.tls
            .reload_from_pem(tls.cert_pem.into_bytes(), tls.key_pem.into_bytes())
            .await
            .map_err(ServerError::Tls)
    }

    /// Serves until [`Server::shutdown`] is called.
    pub async fn serve(&self) -> Result<(), ServerError> {
        // TCP_NODELAY: an HTTP/2 answer (what kube-apiserver reads) is several frames written
        // apart; with Nagle's algorithm the last one waits for the peer's delayed ACK (~40 ms).
        let acceptor = RustlsAcceptor::new(self.tls.clone()).acceptor(NoDelayAcceptor::new());
        let mut server = axum_server::bind(self.addr)
            .acceptor(acceptor)
            .handle(self.handle.clone());
        // HTTP/2 receive windows that hold a review whole: with the protocol's 64 KiB defaults,
        // concurrent reviews on one connection (how kube-apiserver calls a webhook over
        // HTTP/2) stall on flow control and pay a WINDOW_UPDATE round trip per 64 KiB.
        server
            .http_builder()
            .http2()
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES);
        server
            .serve(router(self.state.clone()).into_make_service())
            .await
            .map_err(|source| ServerError::Serve {
                addr: self.addr,
                source,
            })
    }

    /// Marks the server as stopping: `/readyz` fails from now on, and everything else is
    /// served as before (the first step of a graceful stop).
    pub fn drain(&self) {
        self.state.draining.store(true, Ordering::Relaxed);
    }

    /// Stops accepting connections, tells HTTP/2 clients to go elsewhere (GOAWAY) and lets
    /// in-flight requests finish for at most `grace`; [`Server::serve`] returns once they have.
    pub fn shutdown(&self, grace: Duration) {
        self.handle.graceful_shutdown(Some(grace));
    }

    /// Connections open now (in-flight and idle keep-alive ones).
    pub fn connections(&self) -> usize {
        self.handle.connection_count()
    }
}

/// The routes, over shared state (public for in-process tests). Metrics are served on their
/// own plain-HTTP port ([`crate::MetricsServer`]), not here.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/validate", post(validate_all))
        .route("/validate/{failure}", post(validate_by_failure_policy))
        .route("/mutate", post(mutate_all))
        .route("/mutate/{failure}/{reinvocation}", post(mutate_by_group))
        .route("/validate-policies", post(validate_policies))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// Counts and times every request on an admission route (by route and HTTP code answered,
/// including rejections of the body before a handler runs).
async fn observe(AxumState(state): AxumState<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(path) = admission_path(req.uri().path()) else {
        return next.run(req).await;
    };
    let started = std::time::Instant::now();
    let response = next.run(req).await;
    let status = response.status();
    state
        .metrics
        .request(path, status.as_u16(), started.elapsed());
    if !status.is_success() {
        state.metrics.error(path, error_reason(status));
    }
    response
}

/// The `reason` label of a review answered with HTTP `status`: the webhook was not ready (503),
/// the review could not be read (another 4xx), or celgate failed (another 5xx).
fn error_reason(status: StatusCode) -> &'static str {
    if status == StatusCode::SERVICE_UNAVAILABLE {
        "not_ready"
    } else if status.is_client_error() {
        "bad_request"
    } else {
        "internal"
    }
}

fn json_response(body: Vec<u8>) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
}

/// A review dispatch could not decide, as the HTTP answer kube-apiserver reads: a call
/// failure (which it resolves by the webhook's failurePolicy) that says why.
fn dispatch_error(e: &DispatchError) -> Response {
    let status = match e {
        DispatchError::NotReady => StatusCode::SERVICE_UNAVAILABLE,
        DispatchError::Request(_) => StatusCode::BAD_REQUEST,
        DispatchError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    (status, format!("{e}\n")).into_response()
}

/// The API server's `?timeout=` for this call (Go duration seconds, e.g. `10s`), or its default.
fn call_timeout(query: Option<&str>) -> std::time::Duration {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(|t| t.strip_suffix('s'))
        .and_then(|secs| secs.parse::<u64>().ok())
        .map_or(DEFAULT_CALL_TIMEOUT, std::time::Duration::from_secs)
}

/// Every bound policy (for direct use and tests).
async fn validate_all(
    state: AxumState<Arc<AppState>>,
    uri: axum::http::Uri,
    review: ValidationReview,
) -> Response {
    validate(state, uri, review, None).await
}

/// The policies of one failure policy: `/validate/fail` (the fail-closed webhook) and
/// `/validate/ignore` (the fail-open one).
async fn validate_by_failure_policy(
    state: AxumState<Arc<AppState>>,
    Path(failure): Path<String>,
    uri: axum::http::Uri,
    review: ValidationReview,
) -> Response {
    let only = match failure.as_str() {
        "fail" => FailurePolicy::Fail,
        "ignore" => FailurePolicy::Ignore,
        _ => {
            return (
                StatusCode::NOT_FOUND,
                "use /validate/fail or /validate/ignore\n",
            )
                .into_response();
        }
    };
    validate(state, uri, review, Some(only)).await
}

async fn validate(
    AxumState(state): AxumState<Arc<AppState>>,
    uri: axum::http::Uri,
    Review(review): ValidationReview,
    only: Option<FailurePolicy>,
) -> Response {
    let call = Call {
        started: tokio::time::Instant::now(),
        timeout: call_timeout(uri.query()),
    };
    match dispatch::validate(&state.store, &state.deps, review, call, only).await {
        Ok(decided) => {
            let outcome = &decided.outcome;
            state.metrics.record(&outcome.checks);
            let denied = outcome.denial.as_ref().map(|denial| {
                // The first check that denied is the denial reported.
                let by = outcome
                    .checks
                    .iter()
                    .find(|c| c.enforcement_action == "deny");
                Denied::by(by.map(|c| (&*c.policy, &*c.binding)), &denial.message)
            });
            state
                .metrics
                .decided(AdmissionKind::Validating, decided.review.fields(), denied);
            json_response(review::response(&decided.uid, outcome))
        }
        Err(e) => dispatch_error(&e),
    }
}

/// Every bound mutating policy (for direct use and tests).
async fn mutate_all(
    state: AxumState<Arc<AppState>>,
    uri: axum::http::Uri,
    review: TextReview,
) -> Response {
    mutate(state, uri, review, None).await
}

/// The mutating policies of one webhook group: `/mutate/<fail|ignore>/<never|ifneeded>`
/// (the failure and reinvocation policy of the webhook that calls it).
async fn mutate_by_group(
    state: AxumState<Arc<AppState>>,
    Path((failure, reinvocation)): Path<(String, String)>,
    uri: axum::http::Uri,
    review: TextReview,
) -> Response {
    let failure = match failure.as_str() {
        "fail" => Some(FailurePolicy::Fail),
        "ignore" => Some(FailurePolicy::Ignore),
        _ => None,
    };
    let reinvocation = match reinvocation.as_str() {
        "never" => Some(ReinvocationPolicy::Never),
        "ifneeded" => Some(ReinvocationPolicy::IfNeeded),
        _ => None,
    };
    let (Some(failure), Some(reinvocation)) = (failure, reinvocation) else {
        return (
            StatusCode::NOT_FOUND,
            "use /mutate/<fail|ignore>/<never|ifneeded>\n",
        )
            .into_response();
    };
    let group = MutatingWebhookGroup::new(failure, reinvocation);
    mutate(state, uri, review, Some(group)).await
}

async fn mutate(
    AxumState(state): AxumState<Arc<AppState>>,
    uri: axum::http::Uri,
    Review(review): TextReview,
    only: Option<MutatingWebhookGroup>,
) -> Response {
    let call = Call {
        started: tokio::time::Instant::now(),
        timeout: call_timeout(uri.query()),
    };
    match dispatch::mutate(&state.store, &state.deps, review, call, only).await {
        Ok(mutated) => {
            let outcome = &mutated.outcome;
            state.metrics.record_mutations(&outcome.checks);
            let denied = outcome.denial.as_ref().map(|denial| {
                // The first mutation that failed is the denial reported.
                let by = outcome
                    .checks
                    .iter()
                    .find(|c| c.error_type != celgate_engine::validate::ErrorType::NoError);
                Denied::by(by.map(|c| (&*c.policy, &*c.binding)), &denial.message)
            });
            state
                .metrics
                .decided(AdmissionKind::Mutating, mutated.review.fields(), denied);
            json_response(review::mutation_response(&mutated.uid, outcome))
        }
        Err(e) => dispatch_error(&e),
    }
}

/// Rejects celgate's own policies and bindings exactly where kube-apiserver rejects the in-tree
/// kinds on create and update.
async fn validate_policies(
    AxumState(state): AxumState<Arc<AppState>>,
    Review(review): TextReview,
) -> Response {
    match dispatch::validate_policy_write(&state.store, &state.deps, review).await {
        Ok(verdict) => match review::policy_validation_response(&verdict.review, &verdict.errors) {
            Ok(body) => json_response(body),
            Err(e) => dispatch_error(&e),
        },
        Err(e) => dispatch_error(&e),
    }
}

async fn readyz(AxumState(state): AxumState<Arc<AppState>>) -> Response {
    if state.draining.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    } else if state.store.load().ready {
        "ok".into_response()
    } else {
        dispatch_error(&DispatchError::NotReady)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_servers_timeout_bounds_evaluation() {
        assert_eq!(
            call_timeout(Some("timeout=3s")),
            std::time::Duration::from_secs(3)
        );
        assert_eq!(
            call_timeout(Some("a=b&timeout=30s")),
            std::time::Duration::from_secs(30)
        );
        assert_eq!(call_timeout(Some("timeout=oops")), DEFAULT_CALL_TIMEOUT);
        assert_eq!(call_timeout(None), DEFAULT_CALL_TIMEOUT);
    }
}
