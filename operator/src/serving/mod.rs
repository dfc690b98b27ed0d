//! What makes the webhook reachable and trusted: the webhook configurations celgate registers
//! (rules from the published policies), its CA and serving certificate, and the leader Lease
//! that decides which replica writes them.

pub mod cert_watch;
pub mod certs;
pub mod fence;
pub mod leader;
pub mod registration;
