//! The HTTPS server: routes, handlers, and TLS whose certificate can be swapped while serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use axum::body::{Body, HttpBody};
use axum::extract::{DefaultBodyLimit, Request, State as AxumState};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get, post};
use axum::{Extension, Router};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use thiserror::Error;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tracing::warn;

use celgate_engine::MutatingWebhookGroup;
use celgate_engine::model::{FailurePolicy, ReinvocationPolicy};
use celgate_engine::received::ReceivedRequest;

use celgate_snapshot::Deps;
use celgate_snapshot::SnapshotStore;
use celgate_snapshot::dispatch::{self, Call, DEFAULT_CALL_TIMEOUT, DispatchError};

use crate::auth::{AuthError, Authenticator, Peer};
use crate::connection::{self, Activity, CloseAfter, Serving};
use crate::limits::{
    Budget, HEAVY_BODY_BYTES, Limits, MAX_CALL_TIMEOUT, heavy_max_bytes, overloaded,
};
use crate::metrics::{Metrics, OTHER_PATH, admission_path};
use crate::review::{self, MutatingReview, Review, TextReview, ValidationReview};

/// The probes' paths: the only ones served without credentials.
const PROBE_PATHS: [&str; 2] = ["/healthz", "/readyz"];

/// A body is held twice while it is read, as its frames and as the one buffer they are joined
/// into: it is charged twice its declared length before it is read.
const BODY_COPIES: usize = 2;

/// What the handlers share: the snapshot store the operator publishes into, dispatch's
/// dependencies, the metrics, the limits and the credentials accepted.
#[derive(Debug)]
pub struct AppState {
    /// The current snapshot.
    pub store: Arc<SnapshotStore>,
    /// Authorizer and CEL compatibility for dispatch.
    pub deps: Deps,
    /// The webhook's metrics.
    pub metrics: Metrics,
    limits: Limits,
    auth: Option<Authenticator>,
    /// Reviews in flight, one permit each.
    in_flight: Arc<Semaphore>,
    /// Review bytes in flight, and the threads for heavy reviews.
    budget: Budget,
    /// Set once the webhook's port is bound: `/healthz` answers 200 from then on.
    listening: AtomicBool,
    /// Set once the process is stopping: `/readyz` answers 503 so load balancers and Service
    /// endpoints stop sending new connections, while requests keep being decided.
    draining: Arc<AtomicBool>,
}

impl AppState {
    /// Handler state over `store`, recording into `metrics`, with the default limits and no
    /// authentication.
    pub fn new(store: Arc<SnapshotStore>, deps: Deps, metrics: Metrics) -> Arc<Self> {
        let limits = Limits::DEFAULT;
        Arc::new(Self {
            in_flight: Arc::new(Semaphore::new(limits.max_in_flight)),
            budget: Budget::new(&limits),
            limits,
            auth: None,
            store,
            deps,
            metrics,
            listening: AtomicBool::new(false),
            draining: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Handler state with `limits`, accepting only calls `auth` authenticates (when given).
    pub fn configured(
        store: Arc<SnapshotStore>,
        deps: Deps,
        metrics: Metrics,
        limits: Limits,
        auth: Option<Authenticator>,
    ) -> Result<Arc<Self>, ServerError> {
        if limits.max_connections == 0 || limits.max_in_flight == 0 || limits.max_body_bytes == 0 {
            return Err(ServerError::Limits(
                "the connection, in-flight and body limits must be at least 1".into(),
            ));
        }
        if heavy_max_bytes(limits.max_in_flight_bytes) / BODY_COPIES < limits.max_body_bytes {
            return Err(ServerError::Limits(format!(
                "seven eighths of the review bytes in flight ({}), what large reviews may take, must be at least twice the largest review body ({}), or a review that large could never be admitted",
                limits.max_in_flight_bytes, limits.max_body_bytes
            )));
        }
        Ok(Arc::new(Self {
            in_flight: Arc::new(Semaphore::new(
                limits.max_in_flight.min(Semaphore::MAX_PERMITS),
            )),
            budget: Budget::new(&limits),
            limits,
            auth,
            store,
            deps,
            metrics,
            listening: AtomicBool::new(false),
            draining: Arc::new(AtomicBool::new(false)),
        }))
    }

    /// The limits served with.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether the process is alive and serving: the webhook listens.
    pub fn healthy(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }

    /// Whether the process is stopping ([`Server::drain`]).
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Why the replica should not be sent reviews now, if it should not.
    pub fn unready(&self) -> Option<&'static str> {
        if self.draining() {
            Some("shutting down")
        } else if !self.store.load().ready {
            Some("no policy set is published yet")
        } else {
            None
        }
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
    Tls(String),
    /// The limits contradict each other.
    #[error("invalid webhook limits: {0}")]
    Limits(String),
    /// The credentials to accept cannot be loaded.
    #[error(transparent)]
    Auth(#[from] AuthError),
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
    router: Router,
    tls: Arc<ArcSwap<rustls::ServerConfig>>,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    addr: SocketAddr,
    listener: Arc<std::sync::Mutex<Option<TcpListener>>>,
    connections: Arc<Semaphore>,
    stopping: Arc<watch::Sender<Option<Duration>>>,
}

impl Server {
    /// Binds `addr` for a server with an initial certificate, serving `state` (its limits, its
    /// credentials, the snapshots published into its store); connections wait in the
    /// listener's backlog until [`Server::serve`] runs.
    pub async fn new(
        addr: SocketAddr,
        state: Arc<AppState>,
        tls: TlsMaterial,
    ) -> Result<Self, ServerError> {
        let verifier = state.auth.as_ref().and_then(Authenticator::client_verifier);
        let config = tls_config(&tls, verifier.clone())?;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Serve { addr, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ServerError::Serve { addr, source })?;
        state.listening.store(true, Ordering::Relaxed);
        Ok(Self {
            listener: Arc::new(std::sync::Mutex::new(Some(listener))),
            connections: Arc::new(Semaphore::new(
                state.limits.max_connections.min(Semaphore::MAX_PERMITS),
            )),
            router: router(state.clone()),
            state,
            tls: Arc::new(ArcSwap::from_pointee(config)),
            verifier,
            addr,
            stopping: Arc::new(watch::Sender::new(None)),
        })
    }

    /// Swaps the serving certificate; new connections use it at once.
    pub async fn reload_tls(&self, tls: TlsMaterial) -> Result<(), ServerError> {
        self.tls
            .store(Arc::new(tls_config(&tls, self.verifier.clone())?));
        Ok(())
    }

    /// The address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until [`Server::shutdown`] is called and the connections have finished (or
    /// its grace has passed).
    pub async fn serve(&self) -> Result<(), ServerError> {
        let listener = self
            .listener
            .lock()
            .ok()
            .and_then(|mut l| l.take())
            .ok_or_else(|| ServerError::Serve {
                addr: self.addr,
                source: std::io::Error::other("the server is served already"),
            })?;
        let mut stopping = self.stopping.subscribe();
        let mut tasks = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => self.accept(tcp, &mut tasks),
                    Err(e) => {
                        // Out of file descriptors, typically: wait for connections to close.
                        warn!(error = %e, "cannot accept a webhook connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                () = connection::stopped(&mut stopping) => break,
            }
        }
        drop(listener);
        let grace = stopping.borrow().unwrap_or_default();
        let finished = async { while tasks.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(grace, finished).await;
        tasks.shutdown().await;
        Ok(())
    }

    /// Serves one accepted connection as a task of `tasks`, or closes it at once when as
    /// many are open as allowed.
    fn accept(&self, tcp: TcpStream, tasks: &mut JoinSet<()>) {
        let metrics = &self.state.metrics;
        let Ok(permit) = self.connections.clone().try_acquire_owned() else {
            metrics.connection_closed("over_limit");
            return;
        };
        // TCP_NODELAY: an HTTP/2 answer (what kube-apiserver reads) is several frames written
        // apart; with Nagle's algorithm the last one waits for the peer's delayed ACK (~40 ms).
        let _ = tcp.set_nodelay(true);
        let state = self.state.clone();
        let acceptor = TlsAcceptor::from(self.tls.load_full());
        let stopping = self.stopping.subscribe();
        let router = self.router.clone();
        tasks.spawn(async move {
            let open = Open::new(&state, permit);
            let accepted = Instant::now();
            let limits = &state.limits;
            let tls = match tokio::time::timeout(limits.header_timeout, acceptor.accept(tcp)).await
            {
                Ok(Ok(tls)) => tls,
                Ok(Err(_)) => return state.metrics.connection_closed("tls"),
                Err(_) => return state.metrics.connection_closed("header_timeout"),
            };
            let (_, session) = tls.get_ref();
            let http2 = session.alpn_protocol() == Some(b"h2");
            let peer = state
                .auth
                .as_ref()
                .map(|auth| auth.peer(session.peer_certificates()));
            let activity = Activity::new(accepted, !http2, limits.header_timeout);
            let serving = Serving {
                router,
                peer,
                limits: limits.clone(),
                stopping,
                draining: Some(state.draining.clone()),
            };
            if let Some(closed) = connection::serve(tls, http2, activity, serving).await {
                state.metrics.connection_closed(closed.reason());
            }
            drop(open);
        });
    }

    /// Marks the server as stopping: `/readyz` fails from now on, and everything else is
    /// served as before (the first step of a graceful stop).
    pub fn drain(&self) {
        self.state.draining.store(true, Ordering::Relaxed);
    }

    /// Stops accepting connections, tells HTTP/2 clients to go elsewhere (GOAWAY) and lets
    /// in-flight requests finish for at most `grace`; [`Server::serve`] returns once they have.
    pub fn shutdown(&self, grace: Duration) {
        self.stopping.send_replace(Some(grace));
    }

    /// Connections open now (in-flight and idle keep-alive ones).
    pub fn connections(&self) -> usize {
        self.state
            .limits
            .max_connections
            .min(Semaphore::MAX_PERMITS)
            .saturating_sub(self.connections.available_permits())
    }
}

/// An open connection: holds its place under the connection limit and counts in the gauge.
struct Open<'a> {
    state: &'a AppState,
    _permit: OwnedSemaphorePermit,
}

impl<'a> Open<'a> {
    fn new(state: &'a AppState, permit: OwnedSemaphorePermit) -> Self {
        state.metrics.connections_open(1);
        Self {
            state,
            _permit: permit,
        }
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        self.state.metrics.connections_open(-1);
    }
}

/// The TLS configuration of `material`, asking clients for a certificate `verifier` checks
/// (optional: a client without one completes the handshake), offering HTTP/2 and HTTP/1.1.
fn tls_config(
    material: &TlsMaterial,
    verifier: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<rustls::ServerConfig, ServerError> {
    let tls = |e: &dyn std::fmt::Display| ServerError::Tls(e.to_string());
    let chain = CertificateDer::pem_slice_iter(material.cert_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls(&e))?;
    if chain.is_empty() {
        return Err(ServerError::Tls("no PEM certificate in the chain".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(material.key_pem.as_bytes()).map_err(|e| tls(&e))?;
    let builder = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| tls(&e))?;
    let builder = match verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_single_cert(chain, key).map_err(|e| tls(&e))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// The routes, over shared state (public for in-process tests): each admission route is one
/// exact path ([`crate::metrics::ADMISSION_PATHS`]), matched on the path as sent, never
/// percent-decoded. Metrics are served on their own plain-HTTP port ([`crate::MetricsServer`]),
/// the probes on theirs too ([`crate::ProbeServer`]) and here as well.
pub fn router(state: Arc<AppState>) -> Router {
    use FailurePolicy::{Fail, Ignore};
    use ReinvocationPolicy::{IfNeeded, Never};
    let group = |failure, reinvocation| Some(MutatingWebhookGroup::new(failure, reinvocation));
    Router::new()
        .route("/validate", validating(None))
        .route("/validate/fail", validating(Some(Fail)))
        .route("/validate/ignore", validating(Some(Ignore)))
        .route("/mutate", mutating(None))
        .route("/mutate/fail/never", mutating(group(Fail, Never)))
        .route("/mutate/fail/ifneeded", mutating(group(Fail, IfNeeded)))
        .route("/mutate/ignore/never", mutating(group(Ignore, Never)))
        .route("/mutate/ignore/ifneeded", mutating(group(Ignore, IfNeeded)))
        .route("/validate-policies", post(validate_policies))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(state.limits.max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), admit))
        .layer(middleware::from_fn_with_state(state.clone(), observe))
        .with_state(state)
}

/// The probes alone, for the probe port.
pub fn probe_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Counts and times every request but the probes' (by route, `other` for any other path, and
/// HTTP code answered, including rejections before a handler runs).
async fn observe(AxumState(state): AxumState<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if PROBE_PATHS.contains(&path) {
        return next.run(req).await;
    }
    let path = admission_path(path).unwrap_or(OTHER_PATH);
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

/// Lets a request through only if it is authenticated (else 401, whatever its path: only the
/// probes are exempt), is sent to an admission route (else 404), and is within the limits of
/// reviews and review bytes in flight (else 429 at once) and, for a heavy body, gets its turn
/// (else 429, see [`Budget::turn`]), all before its body is read; then
/// bounds reading and deciding it by the call's timeout (else 408).
async fn admit(AxumState(state): AxumState<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    if PROBE_PATHS.contains(&path) {
        return next.run(req).await;
    }
    if let Some(auth) = &state.auth
        && !auth.allows(req.extensions().get::<Peer>().copied(), req.headers())
    {
        return unauthenticated();
    }
    if admission_path(path).is_none() {
        return not_found();
    }
    let limits = &state.limits;
    let Ok(_review) = state.in_flight.clone().try_acquire_owned() else {
        return overloaded(&format!(
            "{} reviews are in flight, the limit (--webhook-max-in-flight)",
            limits.max_in_flight
        ));
    };
    // A body without a length may be as large as allowed.
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    let declared = length
        .unwrap_or(limits.max_body_bytes)
        .min(limits.max_body_bytes);
    // A heavy body is read only in its turn, so that few are read and decoded at once and the
    // rest stay unread in the connection (one declared too large is refused unread).
    let turn = if declared >= HEAVY_BODY_BYTES && length.is_none_or(|n| n <= limits.max_body_bytes)
    {
        match state.budget.turn().await {
            Ok(turn) => Some(turn),
            Err(no_turn) => return no_turn.response(),
        }
    } else {
        None
    };
    let charged = match turn {
        Some(_) => state
            .budget
            .charge_heavy(declared.saturating_mul(BODY_COPIES)),
        None => state.budget.charge(declared.saturating_mul(BODY_COPIES)),
    };
    let Ok(_bytes) = charged else {
        return overloaded(&format!(
            "reviews of {} bytes in all are in flight, and this one's {declared}, held twice while it is read, would pass the limit (--webhook-max-in-flight-mib)",
            state.budget.in_use()
        ));
    };
    let mut req = match receive(req, limits).await {
        Ok(req) => req,
        Err(refused) => return refused,
    };
    // What decoding the review builds is charged by the review's extractor, once counted; a
    // heavy review is decoded and decided in its turn.
    req.extensions_mut().insert(state.budget.clone());
    if let Some(turn) = turn {
        req.extensions_mut().insert(turn);
    }
    let timeout = call_timeout(req.uri().query());
    // Past the timeout the API server has given up; dispatch answers its own timeouts first.
    match tokio::time::timeout(timeout + Duration::from_secs(1), next.run(req)).await {
        Ok(response) => response,
        Err(_) => (
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the review was not received and decided within the call's timeout of {}s\n",
                timeout.as_secs()
            ),
        )
            .into_response(),
    }
}

/// `req` with its body read whole: the largest review at most (else 413), arrived within the
/// header timeout (else 408), so a stream that never sends its body holds its review's permits
/// no longer than a connection that never sends its headers holds its slot.
async fn receive(req: Request, limits: &Limits) -> Result<Request, Response> {
    let (parts, body) = req.into_parts();
    let too_large = || {
        (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the review is larger than {} bytes, the limit (--webhook-max-body-mib)\n",
                limits.max_body_bytes
            ),
        )
            .into_response()
    };
    // A body declared (Content-Length) larger than the limit is not read at all.
    if usize::try_from(body.size_hint().lower()).map_or(true, |n| n > limits.max_body_bytes) {
        return Err(too_large());
    }
    let read = Limited::new(body, limits.max_body_bytes).collect();
    match tokio::time::timeout(limits.header_timeout, read).await {
        Ok(Ok(body)) => Ok(Request::from_parts(parts, Body::from(body.to_bytes()))),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large()),
        Ok(Err(e)) => Err((
            StatusCode::BAD_REQUEST,
            format!("the review's body could not be read: {e}\n"),
        )
            .into_response()),
        Err(_) => Err((
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the review's body did not arrive within {}s of its headers (--webhook-header-timeout-seconds)\n",
                limits.header_timeout.as_secs()
            ),
        )
            .into_response()),
    }
}

/// The answer to a call without valid credentials; its connection is closed after it.
fn unauthenticated() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Extension(CloseAfter),
        [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
        "celgate accepts reviews only from authenticated API servers: present a client certificate signed by --client-ca-file, or a bearer token of --token-file (see the Security section of docs/install.md)\n",
    )
        .into_response()
}

/// The answer to a request on a path that is no route; its body is not read.
fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "no such route: reviews go to /validate/fail, /validate/ignore, /mutate/<fail|ignore>/<never|ifneeded> or /validate-policies, spelled exactly so\n",
    )
        .into_response()
}

/// The `reason` label of a review answered with HTTP `status`: the webhook was not ready (503),
/// the call was not authenticated (401), the webhook was overloaded (429), the review was not
/// read and decided in time (408), it was too large to read or decode (413), it could not be
/// read (another 4xx), or celgate failed (another 5xx).
fn error_reason(status: StatusCode) -> &'static str {
    match status {
        StatusCode::SERVICE_UNAVAILABLE => "not_ready",
        StatusCode::UNAUTHORIZED => "unauthenticated",
        StatusCode::TOO_MANY_REQUESTS => "overloaded",
        StatusCode::REQUEST_TIMEOUT => "timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "too_large",
        s if s.is_client_error() => "bad_request",
        _ => "internal",
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

/// The API server's `?timeout=` for this call (Go duration seconds, e.g. `10s`), or its default;
/// at most [`MAX_CALL_TIMEOUT`], so a forged one cannot overflow a deadline.
fn call_timeout(query: Option<&str>) -> Duration {
    query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|kv| kv.strip_prefix("timeout="))
        .and_then(|t| t.strip_suffix('s'))
        .and_then(|secs| secs.parse::<u64>().ok())
        .map_or(DEFAULT_CALL_TIMEOUT, |secs| {
            Duration::from_secs(secs).min(MAX_CALL_TIMEOUT)
        })
}

/// The route of validating reviews: every bound policy (`/validate`, for direct use and tests),
/// or those of one failure policy (`/validate/fail`, the fail-closed webhook, and
/// `/validate/ignore`, the fail-open one).
fn validating(only: Option<FailurePolicy>) -> MethodRouter<Arc<AppState>> {
    post(
        move |state: AxumState<Arc<AppState>>, uri: axum::http::Uri, review: ValidationReview| {
            validate(state, uri, review, only)
        },
    )
}

async fn validate(
    AxumState(state): AxumState<Arc<AppState>>,
    uri: axum::http::Uri,
    Review(review, held): ValidationReview,
    only: Option<FailurePolicy>,
) -> Response {
    let call = Call {
        started: tokio::time::Instant::now(),
        timeout: call_timeout(uri.query()),
        at: std::time::SystemTime::now(),
    };
    held.decide(decide_validation(state, review, call, only))
        .await
}

/// Validates a decoded review and answers it.
async fn decide_validation(
    state: Arc<AppState>,
    review: ReceivedRequest,
    call: Call,
    only: Option<FailurePolicy>,
) -> Response {
    let at = call.at;
    match dispatch::validate(&state.store, &state.deps, review, call, only).await {
        Ok(decided) => {
            state.metrics.validated(&decided, at);
            json_response(review::response(&decided.uid, &decided.outcome))
        }
        Err(e) => dispatch_error(&e),
    }
}

/// The route of mutating reviews: every bound mutating policy (`/mutate`, for direct use and
/// tests), or those of one webhook group (`/mutate/<fail|ignore>/<never|ifneeded>`, the failure
/// and reinvocation policy of the webhook that calls it).
fn mutating(only: Option<MutatingWebhookGroup>) -> MethodRouter<Arc<AppState>> {
    post(
        move |state: AxumState<Arc<AppState>>, uri: axum::http::Uri, review: MutatingReview| {
            mutate(state, uri, review, only)
        },
    )
}

async fn mutate(
    AxumState(state): AxumState<Arc<AppState>>,
    uri: axum::http::Uri,
    Review(review, held): MutatingReview,
    only: Option<MutatingWebhookGroup>,
) -> Response {
    let call = Call {
        started: tokio::time::Instant::now(),
        timeout: call_timeout(uri.query()),
        at: std::time::SystemTime::now(),
    };
    held.decide(decide_mutation(state, review, call, only))
        .await
}

/// Mutates a decoded review and answers it.
async fn decide_mutation(
    state: Arc<AppState>,
    review: ReceivedRequest,
    call: Call,
    only: Option<MutatingWebhookGroup>,
) -> Response {
    match dispatch::mutate(&state.store, &state.deps, review, call, only).await {
        Ok(mutated) => {
            state.metrics.mutated(&mutated);
            json_response(review::mutation_response(&mutated.uid, &mutated.outcome))
        }
        Err(e) => dispatch_error(&e),
    }
}

/// Rejects celgate's own policies and bindings exactly where kube-apiserver rejects the in-tree
/// kinds on create and update.
async fn validate_policies(
    AxumState(state): AxumState<Arc<AppState>>,
    Review(review, held): TextReview,
) -> Response {
    held.decide(async move {
        match dispatch::validate_policy_write(&state.store, &state.deps, review).await {
            Ok(verdict) => {
                match review::policy_validation_response(&verdict.review, &verdict.errors) {
                    Ok(body) => json_response(body),
                    Err(e) => dispatch_error(&e),
                }
            }
            Err(e) => dispatch_error(&e),
        }
    })
    .await
}

async fn healthz(AxumState(state): AxumState<Arc<AppState>>) -> Response {
    if state.healthy() {
        "ok".into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "the webhook does not listen yet\n",
        )
            .into_response()
    }
}

async fn readyz(AxumState(state): AxumState<Arc<AppState>>) -> Response {
    match state.unready() {
        None => "ok".into_response(),
        Some(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")).into_response(),
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
        // A forged timeout is capped, so `Instant + timeout` cannot overflow.
        assert_eq!(
            call_timeout(Some("timeout=18446744073709551615s")),
            MAX_CALL_TIMEOUT
        );
        assert_eq!(call_timeout(None), DEFAULT_CALL_TIMEOUT);
    }
}
