//! The celgate operator: watches celgate's four kinds, their params and namespaces, compiles
//! policies into the snapshot its co-located webhook decides with, registers the webhook,
//! and writes status while it holds the leader Lease. The rooms follow that pipeline:
//!
//! - `controllers`: the watches and reconcilers that build and publish the snapshot;
//! - `status`: what the Lease holder writes on the four kinds (type checking, conditions,
//!   events, readiness);
//! - `cluster`: what the process learns from the API server (discovery, schemas, identity,
//!   authorization checks);
//! - `serving`: what makes the webhook reachable and trusted (its configurations,
//!   certificates, the Lease);
//! - `audit`: what the Lease holder finds in the objects already stored (would each be
//!   admitted now?), written to PolicyReports and binding status;
//! - `metrics`, `retry`, `args` and `process` (which starts and stops all of it).

pub mod args;
mod audit;
mod cluster;
mod controllers;
pub mod metrics;
mod policy_kind;
mod process;
mod retry;
mod serving;
mod status;

#[cfg(test)]
mod fixtures;

pub use args::RunArgs;
pub use process::{RunError, run};
