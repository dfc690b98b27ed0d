//! Runs every watch and controller of the operator until the process stops: the policy
//! controller (which also starts and stops the param watches), the mutating policies, the
//! namespaces, the webhook registration, and the status writer (which writes only while this
//! replica leads). They share nothing but the snapshot store, the stores of the four kinds and
//! the streams of published and registered policy sets.

use std::sync::Arc;

use celgate_snapshot::SnapshotStore;
use kube::Client;
use kube::runtime::reflector;
use tokio::sync::watch;

use crate::leader::Leadership;
use crate::registration::{Applied, Inputs, Registration};
use crate::status::{self, Checker, StatusWriter};
use crate::{mutating, namespaces, policies};

/// How status is written: by whom, when, and with what type checker.
pub struct StatusConfig {
    /// Whether this replica leads (writes status) now.
    pub leadership: Leadership,
    /// The type checker of policies.
    pub checker: Arc<dyn Checker>,
    /// This replica's identity, reported with its events.
    pub identity: String,
}

/// Runs the operator's controllers against `client`, publishing into `store`, registers the
/// webhooks as `registration` says (trusting the CA bundle on `ca`) while this replica leads,
/// and writes status as `status` says.
pub async fn run(
    client: Client,
    store: Arc<SnapshotStore>,
    registration: Registration,
    ca: watch::Receiver<String>,
    status: StatusConfig,
    schemas: mutating::SchemaSource,
) {
    let (policies, policy_writer) = reflector::store();
    let (bindings, binding_writer) = reflector::store();
    let (mutating, mutating_writer) = reflector::store();
    let (mutating_bindings, mutating_binding_writer) = reflector::store();
    let (published, sets) = watch::channel(None);
    let (applied_sender, applied) = watch::channel(Applied::default());
    let ctx = Arc::new(policies::Context::new(
        client.clone(),
        store.clone(),
        policies::Stores {
            policies,
            bindings,
            mutating,
            mutating_bindings,
        },
        published,
    ));
    let (validating, validating_bindings) = ctx.stores();
    let (mutating, mutating_bindings) = ctx.mutating_stores();
    let writer = StatusWriter::new(
        client.clone(),
        status::Sources {
            validating,
            validating_bindings,
            mutating,
            mutating_bindings,
            snapshot: store.clone(),
            applied,
            touched: ctx.touched(),
        },
        status.checker,
        status.identity,
    );
    tokio::join!(
        policies::run(client.clone(), ctx.clone(), policy_writer, binding_writer),
        mutating::run(
            client.clone(),
            ctx,
            mutating_writer,
            mutating_binding_writer,
            schemas
        ),
        namespaces::run(client.clone(), store),
        registration.keep_applied(
            client,
            Inputs {
                sets,
                ca,
                leadership: status.leadership.clone(),
            },
            applied_sender
        ),
        writer.run(status.leadership),
    );
}
