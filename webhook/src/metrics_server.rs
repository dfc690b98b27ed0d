//! The plain-HTTP metrics endpoint: `GET /metrics` answers the OpenMetrics text of the
//! process's registry, and nothing else is served on its port. Its connections have the
//! webhook's cap and timeouts (they share the process's file descriptors with the webhook).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tracing::warn;

use crate::connection::{self, Activity, Serving};
use crate::limits::Limits;
use crate::metrics::encode;
use crate::server::ServerError;

/// The metrics endpoint, bound to its port.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
    registry: Arc<Registry>,
    limits: Limits,
}

impl MetricsServer {
    /// Binds `addr` for the metrics of `registry`, holding connections as `limits` say
    /// (`max_connections`, `header_timeout`, `idle_timeout`).
    pub async fn bind(
        addr: SocketAddr,
        registry: Arc<Registry>,
        limits: Limits,
    ) -> Result<Self, ServerError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Serve { addr, source })?;
        Ok(Self {
            listener,
            registry,
            limits,
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until the process stops (or the future is dropped): a connection past the cap is
    /// closed when accepted, one without a request's headers in time or idle too long is closed.
    pub async fn serve(self) -> Result<(), ServerError> {
        let router = router(self.registry);
        let slots = Arc::new(Semaphore::new(
            self.limits.max_connections.min(Semaphore::MAX_PERMITS),
        ));
        // Never stops: the metrics are served until the process exits.
        let (_stop, stopping) = watch::channel(None);
        loop {
            let tcp = match self.listener.accept().await {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors, typically: wait for connections to close.
                    warn!(error = %e, "cannot accept a metrics connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                continue; // closed at once
            };
            let activity = Activity::new(Instant::now(), true, self.limits.header_timeout);
            let serving = Serving {
                router: router.clone(),
                peer: None,
                limits: self.limits.clone(),
                stopping: stopping.clone(),
                draining: None,
            };
            tokio::spawn(async move {
                let _ = connection::serve(tcp, false, activity, serving).await;
                drop(slot);
            });
        }
    }
}

/// `/metrics` over `registry` (public for in-process tests).
pub fn router(registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .with_state(registry)
}

async fn metrics(State(registry): State<Arc<Registry>>) -> Response {
    match encode(&registry) {
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
