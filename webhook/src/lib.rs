//! celgate's admission server: HTTPS `/validate`, `/mutate` and `/validate-policies` for
//! AdmissionReview v1 under the limits of [`limits`] and, optionally, the authentication of
//! [`auth`]; `/healthz` and `/readyz` on a plain-HTTP port of their own ([`ProbeServer`]); and
//! the plain-HTTP `/metrics` endpoint of the process's registry. A handler only decodes the review ([`review`]), calls the HTTP-free
//! dispatch of `celgate-snapshot` over the store the operator publishes into, and encodes the
//! answer.

pub mod auth;
mod connection;
pub mod decision_log;
pub mod limits;
pub mod metrics;
pub mod metrics_server;
pub mod probe_server;
pub mod review;
pub mod server;

pub use auth::{AuthConfig, Authenticator};
pub use limits::Limits;
pub use metrics_server::MetricsServer;
pub use probe_server::ProbeServer;
pub use server::{AppState, Server, ServerError, TlsMaterial};
