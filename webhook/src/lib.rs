//! celgate's admission server: HTTPS `/validate`, `/mutate` and `/validate-policies` for
//! AdmissionReview v1, `/healthz`, `/readyz` and `/metrics`. A handler only decodes the review
//! ([`review`]), calls the HTTP-free dispatch of `celgate-snapshot` over the store the operator
//! publishes into, and encodes the answer.

pub mod metrics;
pub mod review;
pub mod server;

pub use server::{AppState, Server, ServerError, TlsMaterial};
