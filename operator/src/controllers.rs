//! Runs every watch and controller of the operator until the process stops: the policy
//! controller (which also starts and stops the param watches), the mutating policies, the
//! namespaces, and the webhook registration. They share nothing but the snapshot store and the
//! stream of published policy sets.

use std::sync::Arc;

use celgate_snapshot::SnapshotStore;
use kube::Client;
use kube::runtime::reflector;
use tokio::sync::watch;

use crate::registration::Registration;
use crate::{mutating, namespaces, policies};

/// Runs the operator's controllers against `client`, publishing into `store`, and registers
/// the webhooks as `registration` says.
pub async fn run(client: Client, store: Arc<SnapshotStore>, registration: Registration) {
    let (policies, policy_writer) = reflector::store();
    let (bindings, binding_writer) = reflector::store();
    let (published, sets) = watch::channel(None);
    let ctx = Arc::new(policies::Context::new(
        client.clone(),
        store.clone(),
        policies,
        bindings,
        published,
    ));
    tokio::join!(
        policies::run(client.clone(), ctx.clone(), policy_writer, binding_writer),
        mutating::run(client.clone(), ctx),
        namespaces::run(client.clone(), store),
        registration.keep_applied(client, sets),
    );
}
