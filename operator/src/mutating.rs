//! MutatingAdmissionPolicies and their bindings: watched, not enforced yet. The policies'
//! paramKinds feed the param access check on binding writes, and a warning says what is
//! stored but not enforced.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use celgate_crds::{MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding};
use celgate_engine::model::ParamKind;
use futures::{StreamExt, TryStreamExt};
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::warn;

use crate::changes::{Change, Changes};
use crate::convert;
use crate::policies::Context;

/// An event of either watch.
enum Event {
    Policy(watcher::Event<MutatingAdmissionPolicy>),
    Binding(watcher::Event<MutatingAdmissionPolicyBinding>),
}

/// What is stored, by name.
#[derive(Default)]
struct Stored {
    param_kinds: HashMap<String, Option<ParamKind>>,
    bindings: HashSet<String>,
}

impl Stored {
    /// Applies a policy change; returns whether the paramKinds changed.
    fn policy(&mut self, change: Change<MutatingAdmissionPolicy>) -> bool {
        let kind =
            |p: &MutatingAdmissionPolicy| p.spec.param_kind.as_ref().map(convert::param_kind);
        match change {
            Change::Apply(p) => {
                let kind = kind(&p);
                self.param_kinds.insert(p.name_any(), kind.clone()) != Some(kind)
            }
            Change::Delete(p) => self.param_kinds.remove(&p.name_any()).is_some(),
            Change::Replace(all) => {
                let next: HashMap<_, _> = all.iter().map(|p| (p.name_any(), kind(p))).collect();
                let changed = next != self.param_kinds;
                self.param_kinds = next;
                changed
            }
        }
    }

    fn binding(&mut self, change: Change<MutatingAdmissionPolicyBinding>) {
        match change {
            Change::Apply(b) => {
                self.bindings.insert(b.name_any());
            }
            Change::Delete(b) => {
                self.bindings.remove(&b.name_any());
            }
            Change::Replace(all) => self.bindings = all.iter().map(|b| b.name_any()).collect(),
        }
    }

    fn counts(&self) -> (usize, usize) {
        (self.param_kinds.len(), self.bindings.len())
    }
}

/// Follows MutatingAdmissionPolicies and their bindings into the stores behind
/// `policy_writer` and `binding_writer` until the process stops.
pub async fn run(
    client: Client,
    ctx: Arc<Context>,
    policy_writer: Writer<MutatingAdmissionPolicy>,
    binding_writer: Writer<MutatingAdmissionPolicyBinding>,
) {
    let policies = watcher(Api::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .reflect(policy_writer)
        .map_ok(Event::Policy);
    let bindings = watcher(Api::all(client), watcher::Config::default())
        .default_backoff()
        .reflect(binding_writer)
        .map_ok(Event::Binding);
    let events = futures::stream::select(policies, bindings);
    let mut events = std::pin::pin!(events);
    let (mut policy_changes, mut binding_changes) = (Changes::default(), Changes::default());
    let mut stored = Stored::default();
    let mut warned = (0, 0);
    while let Some(event) = events.next().await {
        if event.is_ok() {
            ctx.touch();
        }
        match event {
            Ok(Event::Policy(event)) => {
                if let Some(change) = policy_changes.next(event)
                    && stored.policy(change)
                {
                    ctx.set_mutating_param_kinds(stored.param_kinds.clone());
                }
            }
            Ok(Event::Binding(event)) => {
                if let Some(change) = binding_changes.next(event) {
                    stored.binding(change);
                }
            }
            Err(error) => {
                warn!(%error, "MutatingAdmissionPolicy watch failed; retrying");
            }
        }
        let counts = stored.counts();
        if counts != warned {
            warned = counts;
            if counts != (0, 0) {
                warn!(
                    policies = counts.0,
                    bindings = counts.1,
                    "MutatingAdmissionPolicies are stored but this version of celgate does not enforce them yet"
                );
            }
        }
    }
}
