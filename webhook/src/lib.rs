//! celgate's admission server: HTTPS `/validate`, `/mutate` and `/validate-policies` for
//! AdmissionReview v1, `/healthz` and `/readyz`; and the plain-HTTP `/metrics` endpoint of the
//! process's registry. A handler only decodes the review ([`review`]), calls the HTTP-free
//! dispatch of `celgate-snapshot` over the store the operator publishes into, and encodes the
//! answer.

pub mod decision_log;
pub mod metrics;
pub mod metrics_server;
pub mod review;
pub mod server;

pub use metrics_server::MetricsServer;
pub use server::{AppState, Server, ServerError, TlsMaterial};
