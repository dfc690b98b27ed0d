//! The HTTPS server: routes, handlers, and TLS whose certificate can be swapped while serving.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State as AxumState};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum_server::Handle;
use axum_server::accept::NoDelayAcceptor;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use serde_json::Value;
use thiserror::Error;

use celgate_engine::Context;
use celgate_engine::model::FailurePolicy;

use crate::review;
use crate::state::State;

/// Largest AdmissionReview body accepted: an object and its old version at the API server's
/// request size limit, with room to spare.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// The longest a request waits for param kinds that are still syncing or for a namespace the
/// cache has not seen yet (well inside the API server's default webhook timeout of 10 s; a
/// shorter `?timeout=` shortens the wait, see [`sync_wait`]).
pub const CACHE_SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

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
    state: Arc<State>,
    tls: RustlsConfig,
    addr: SocketAddr,
    handle: Handle<SocketAddr>,
}

impl Server {
    /// Prepares a server on `addr` with an initial certificate.
    pub async fn new(
        addr: SocketAddr,
        state: Arc<State>,
        tls: TlsMaterial,
    ) -> Result<Self, ServerError> {
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
        axum_server::bind(self.addr)
            .acceptor(acceptor)
            .handle(self.handle.clone())
            .serve(router(self.state.clone()).into_make_service())
            .await
            .map_err(|source| ServerError::Serve {
                addr: self.addr,
                source,
            })
    }

    /// Stops accepting connections and lets in-flight requests finish.
    pub fn shutdown(&self) {
        self.handle
            .graceful_shutdown(Some(std::time::Duration::from_secs(5)));
    }
}

/// The routes, over shared state (public for in-process tests).
pub fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/validate", post(validate_all))
        .route("/validate/{failure}", post(validate_by_failure_policy))
        .route("/mutate", post(mutate))
        .route("/validate-policies", post(validate_policies))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

fn json_response(v: &Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn bad_request(e: review::ReviewError) -> Response {
    (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response()
}

fn not_ready() -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "celgate has not loaded its policies yet\n",
    )
        .into_response()
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

/// How long a request may wait for caches: [`CACHE_SYNC_WAIT`], cut short so that at least
/// [`DECISION_HEADROOM`] of the API server's call timeout is left to decide and answer.
fn sync_wait(call_timeout: std::time::Duration) -> std::time::Duration {
    CACHE_SYNC_WAIT.min(call_timeout.saturating_sub(DECISION_HEADROOM))
}

/// The part of the call timeout a cache wait never takes.
const DECISION_HEADROOM: std::time::Duration = std::time::Duration::from_millis(500);

/// kube-apiserver's default webhook timeout.
const DEFAULT_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Every bound policy (for direct use and tests).
async fn validate_all(state: AxumState<Arc<State>>, uri: axum::http::Uri, body: Bytes) -> Response {
    validate(state, uri, body, None).await
}

/// The policies of one failure policy: `/validate/fail` (the fail-closed webhook) and
/// `/validate/ignore` (the fail-open one).
async fn validate_by_failure_policy(
    state: AxumState<Arc<State>>,
    Path(failure): Path<String>,
    uri: axum::http::Uri,
    body: Bytes,
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
    validate(state, uri, body, Some(only)).await
}

async fn validate(
    AxumState(state): AxumState<Arc<State>>,
    uri: axum::http::Uri,
    body: Bytes,
    only: Option<FailurePolicy>,
) -> Response {
    let started = std::time::Instant::now();
    let review = match review::decode(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let req = match review::request(&review) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let Some(snapshot) = state.snapshot() else {
        return not_ready();
    };
    let call_timeout = call_timeout(uri.query());
    let deadline = tokio::time::Instant::from_std(started) + sync_wait(call_timeout);
    if !snapshot.policies.validating.is_empty() {
        state.wait_for_params(&snapshot, deadline).await;
        if !req.namespace.is_empty() {
            state.wait_for_namespace(req.namespace, deadline).await;
        }
    }
    let (namespaces, params) = (state.namespaces(), state.params());
    // Built only when a policy may ask: it copies the request's user.
    let authorizer = snapshot
        .policies
        .uses_authorizer()
        .then(|| state.authorizer_for(req.raw.get("userInfo").unwrap_or(&Value::Null)))
        .flatten();
    let ctx = Context {
        namespaces: namespaces.as_ref(),
        params: params.as_ref(),
        authorizer: authorizer.as_ref(),
        deadline: Some(started + call_timeout),
    };
    let outcome = snapshot.policies.validate(&req, &ctx, only);
    state.metrics.record(&outcome.checks);
    (
        [(header::CONTENT_TYPE, "application/json")],
        review::response(req.uid, &outcome),
    )
        .into_response()
}

async fn mutate(AxumState(state): AxumState<Arc<State>>, body: Bytes) -> Response {
    let review = match review::decode(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let req = match review::request(&review) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    if state.snapshot().is_none() {
        return not_ready();
    }
    json_response(&review::allow(req.uid))
}

/// Rejects celgate's own policies and bindings exactly where kube-apiserver rejects the in-tree
/// kinds on create and update.
async fn validate_policies(AxumState(state): AxumState<Arc<State>>, body: Bytes) -> Response {
    let review = match review::decode(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let req = match review::request(&review) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let mut errors = review::policy_errors(&req, state.compatibility);
    // Like kube-apiserver, the param access check runs only on an otherwise valid object.
    if errors.is_empty() {
        errors = state.param_access_errors(&req);
    }
    json_response(&review::policy_validation_response(&req, &errors))
}

async fn readyz(AxumState(state): AxumState<Arc<State>>) -> Response {
    match state.snapshot() {
        Some(_) => "ok".into_response(),
        None => not_ready(),
    }
}

async fn metrics(AxumState(state): AxumState<Arc<State>>) -> Response {
    match state.metrics.encode() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
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
