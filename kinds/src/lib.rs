//! What celgate knows of Kubernetes kinds without asking a cluster: the built-in kinds of the
//! pinned version ([`builtin`]), how served resources map to kinds ([`served`]), and the one
//! conversion of celgate's CRD types into the engine's model ([`convert`]). The running
//! operator and the offline commands both build on it; it talks to no API server.

pub mod builtin;
pub mod convert;
pub mod served;
