//! The seam between celgate's operator and its webhook: one immutable [`Snapshot`] of everything
//! a decision reads (compiled policies and bindings, namespaces, params), published part by part
//! into a [`SnapshotStore`] and swapped atomically, and [`dispatch`]: an AdmissionReview in, a decision
//! out, over one snapshot, with no HTTP and no Kubernetes client in it.
//!
//! The operator writes the store; the webhook reads it; neither knows the other's types.

pub mod audit;
mod deps;
pub mod dispatch;
mod policy_write;
mod store;
mod view;

pub use deps::{AuthorizerSource, Deps};
pub use dispatch::{Call, Decided, Decision, DispatchError, Mutated, PolicyWriteVerdict};
pub use store::SnapshotStore;
pub use view::{
    KindSchemaView, NamespaceView, ParamKey, ParamKindEntry, ParamViews, PolicyParamKinds, Snapshot,
};
