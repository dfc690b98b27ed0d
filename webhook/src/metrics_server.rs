//! The plain-HTTP metrics endpoint: `GET /metrics` answers the OpenMetrics text of the
//! process's registry, and nothing else is served on its port.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::metrics::encode;
use crate::server::ServerError;

/// The metrics endpoint, bound to its port.
#[derive(Debug)]
pub struct MetricsServer {
    listener: TcpListener,
    registry: Arc<Registry>,
}

impl MetricsServer {
    /// Binds `addr` for the metrics of `registry`.
    pub async fn bind(addr: SocketAddr, registry: Arc<Registry>) -> Result<Self, ServerError> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Serve { addr, source })?;
        Ok(Self { listener, registry })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until the process stops (or the future is dropped).
    pub async fn serve(self) -> Result<(), ServerError> {
        let addr = self
            .listener
            .local_addr()
            .map_err(|source| ServerError::Serve {
                addr: SocketAddr::from(([0, 0, 0, 0], 0)),
                source,
            })?;
        axum::serve(self.listener, router(self.registry))
            .await
            .map_err(|source| ServerError::Serve { addr, source })
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
