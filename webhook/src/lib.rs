//! celgate's admission server: HTTPS `/validate` and `/mutate` for AdmissionReview v1 over the
//! current policy snapshot, `/healthz`, `/readyz` and `/metrics`. The snapshot is swapped
//! atomically by the operator and read without locks on the request path.

pub mod metrics;
pub mod review;
pub mod server;
pub mod state;

pub use server::{Server, ServerError, TlsMaterial};
pub use state::{
    AuthorizerSource, NamespaceCache, ParamCache, ParamKindEntry, PolicyParamKinds, Snapshot, State,
};
