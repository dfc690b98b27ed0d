//! What the operator holds per binding (issue 46, part 2: 1,000 policies × 100 bindings within
//! 256 MiB), measured in heap bytes: the realistic fixture's policies (`e2e/src/fixture.rs`),
//! each with its own binding and more bindings for other tenants (as `make
//! bench-scale-bindings` creates them), stored as kube-apiserver returns them (metadata,
//! managedFields, a status), then taken in the way the controllers and the leader's audit take
//! them, owner by owner: the reflector stores, the compiled policies, the converted bindings
//! with the published set, and the audit's plan, inputs, findings, written statuses and gauges.
//! It lives in the audit because the audit's parts are private to it.
//!
//! A measurement, not a check (`make bench-footprint`, which runs it alone so that only it
//! allocates): `FOOTPRINT_POLICIES` (default 1000) and `FOOTPRINT_BINDINGS_PER_POLICY` (default
//! 20). Reports bytes per binding of each owner.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A measurement: a failure is a failed run.

use std::collections::HashMap;
use std::sync::Arc;

use celgate_crds::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use celgate_kinds::builtin::BuiltinDiscovery;
use celgate_kinds::served::ServedResources;
use celgate_snapshot::SnapshotStore;
use celgate_snapshot::{Deps, KindSchemaView};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use peak_alloc::PeakAlloc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::findings::{Findings, UnitKey};
use super::inputs::{Inputs, resource_inputs};
use super::{Sources, key, targets, writer};
use crate::cluster::discovery::Discovery;
use crate::controllers::policies::{KindStores, without_unread_fields};
use crate::controllers::policy_set::{PolicyCache, Stored, compile};
use crate::controllers::stored_binding::{self, BindingStore};
use crate::metrics;

#[path = "../../../e2e/src/fixture.rs"]
#[allow(dead_code, missing_docs)]
mod fixture;

/// The system allocator, counting the bytes held (the operator's unit tests share it).
#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

/// Heap bytes held now.
fn held() -> usize {
    ALLOCATOR.current_usage()
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `manifest` as kube-apiserver returns it from a list: with uid, resourceVersion, generation,
/// creation time and the managedFields of its creator and (bindings) of celgate's status
/// writer and audit, and a binding's status as celgate writes it.
fn as_stored(mut manifest: Value, i: usize) -> Value {
    let binding = manifest["kind"] == "ValidatingAdmissionPolicyBinding";
    let policy = manifest["spec"]["policyName"].clone();
    let meta = manifest["metadata"].as_object_mut().unwrap();
    meta.insert(
        "uid".into(),
        json!(format!("4c5e8f2a-1b3d-4e6f-8a9b-{i:012}")),
    );
    meta.insert("resourceVersion".into(), json!(format!("{}", 100_000 + i)));
    meta.insert("generation".into(), json!(1));
    meta.insert("creationTimestamp".into(), json!("2026-12-05T23:00:00Z"));
    let entry = |manager: &str, subresource: Option<&str>, fields: Value| {
        let mut e = json!({"manager": manager, "operation": "Update",
            "apiVersion": "admission.celgate.io/v1", "time": "2026-12-05T23:00:00Z",
            "fieldsType": "FieldsV1", "fieldsV1": fields});
        if let Some(s) = subresource {
            e["subresource"] = json!(s);
            e["operation"] = json!("Apply");
        }
        e
    };
    let mut managed = vec![entry(
        "bench",
        None,
        json!({"f:spec": {".": {}, "f:policyName": {}, "f:validationActions": {},
            "f:matchResources": {".": {}, "f:namespaceSelector": {}}}}),
    )];
    if binding {
        managed.push(entry(
            "celgate",
            Some("status"),
            json!({"f:status": {"f:observedGeneration": {}, "f:conditions": {
                "k:{\"type\":\"Ready\"}": {".": {}, "f:type": {}, "f:status": {}, "f:reason": {},
                "f:message": {}, "f:lastTransitionTime": {}, "f:observedGeneration": {}}}}}),
        ));
        managed.push(entry(
            "celgate-audit",
            Some("status"),
            json!({"f:status": {"f:audit": {".": {}, "f:scanned": {}, "f:violations": {},
                "f:lastScanTime": {}}}}),
        ));
    }
    meta.insert("managedFields".into(), Value::Array(managed));
    if binding {
        manifest["status"] = json!({
            "observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Enforced",
                "message": format!("enforced with policy '{}' generation 1", policy.as_str().unwrap_or_default()),
                "lastTransitionTime": "2026-12-05T23:00:05Z", "observedGeneration": 1}],
            "audit": {"scanned": 0, "violations": 0, "lastScanTime": "2026-12-05T23:01:00Z"},
        });
    }
    manifest
}

/// A store holding `objects` after one list, each taken in as the policy watch takes it in.
fn stored_policies(objects: Vec<ValidatingAdmissionPolicy>) -> Store<ValidatingAdmissionPolicy> {
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&Event::Init);
    for mut object in objects {
        without_unread_fields(&mut object);
        writer.apply_watcher_event(&Event::InitApply(object));
    }
    writer.apply_watcher_event(&Event::InitDone);
    // The writer is dropped; the readers keep what it stored.
    store
}

/// A store holding `objects` after one list, as the binding watch takes them in.
fn stored_bindings(
    objects: Vec<ValidatingAdmissionPolicyBinding>,
) -> BindingStore<ValidatingAdmissionPolicy> {
    let (store, mut writer) = stored_binding::store();
    writer.apply_watcher_event(&Event::Init);
    for object in objects {
        writer.apply_watcher_event(&Event::InitApply(object));
    }
    writer.apply_watcher_event(&Event::InitDone);
    store
}

/// One owner's bytes: in total, per policy and per binding.
struct Row {
    owner: &'static str,
    bytes: usize,
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "a measurement: `make bench-footprint` runs it alone"]
async fn bytes_per_binding_by_owner() {
    let policies_n = env_count("FOOTPRINT_POLICIES", 1000);
    let per_policy = env_count("FOOTPRINT_BINDINGS_PER_POLICY", 20);
    let fixtures = fixture::validating(policies_n, 20.min(policies_n));
    let manifests = fixture::with_tenant_bindings(
        fixture::validating_manifests("admission.celgate.io/v1", &fixtures),
        per_policy,
    );
    let manifests: Vec<Value> = (manifests.into_iter().enumerate())
        .map(|(i, m)| as_stored(m, i))
        .collect();
    let (policy_values, binding_values): (Vec<Value>, Vec<Value>) = manifests
        .into_iter()
        .partition(|m| m["kind"] == "ValidatingAdmissionPolicy");
    let bindings_n = binding_values.len();
    let mut rows = Vec::new();
    let mut measure = |owner: &'static str, before: usize| {
        rows.push(Row {
            owner,
            bytes: held().saturating_sub(before),
        });
    };

    // The reflector stores (a decoded object is what the watch stream hands over).
    let before = held();
    let policies = stored_policies(
        (policy_values.iter())
            .map(|v| ValidatingAdmissionPolicy::deserialize(v).unwrap())
            .collect(),
    );
    measure("stored policies", before);
    let before = held();
    let bindings = stored_bindings(
        (binding_values.iter())
            .map(|v| ValidatingAdmissionPolicyBinding::deserialize(v).unwrap())
            .collect(),
    );
    measure("stored bindings", before);
    drop((policy_values, binding_values));
    let stores = KindStores { policies, bindings };

    // The policy controller: each policy compiled, then the set built and published.
    let before = held();
    let mut cache = PolicyCache::default();
    for policy in stores.policies.state() {
        cache.insert(&*policy, compile(&*policy));
    }
    measure("compiled policies", before);
    let before = held();
    let empty = Stored {
        policies: Vec::new(),
        bindings: Vec::new(),
    };
    let set = Arc::new(cache.build(stores.state(), empty));
    let store = SnapshotStore::new();
    store.publish_policies(
        set,
        cache.param_kinds(),
        Arc::new(KindSchemaView::default()),
    );
    measure("converted bindings and the published set", before);
    let snapshot = store.load();

    // The audit, as the leader holds it after a scan.
    let served = ServedResources::from_discovery(&BuiltinDiscovery::load().unwrap().discovery);
    let (client, _api) = {
        let (service, handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        (kube::Client::new(service, "default"), handle)
    };
    let sources = Sources {
        store: store.clone(),
        stores: stores.clone(),
        discovery: Discovery::spawn(client),
        deps: Deps::default(),
    };
    let before = held();
    let plan = targets::plan(
        &snapshot,
        &stores.policies,
        &stores.bindings,
        &served,
        false,
    );
    measure("audit plan (units)", before);
    let before = held();
    let inputs = Inputs::now(&snapshot, &sources);
    measure("audit inputs (held, and built again every poll)", before);
    let before = held();
    let reads = resource_inputs(&plan, &snapshot);
    measure("audit inputs per resource", before);
    let before = held();
    let mut findings = Findings::default();
    for resource in &plan.resources {
        let keys: Vec<UnitKey> = (plan.units.iter())
            .filter(|u| u.resources.contains(resource))
            .map(|u| key(u))
            .collect();
        let pass = findings.start(resource);
        findings.finish(resource, pass, &keys);
    }
    measure("audit findings (counts per binding)", before);
    let before = held();
    let written: HashMap<UnitKey, _> = (plan.units.iter())
        .map(|u| {
            let status = writer::status_of(&findings.of_unit(
                &key(u),
                &u.resources,
                writer::LISTED_VIOLATIONS,
            ));
            metrics::audit_binding(&u.policy, &u.binding, status.scanned, status.violations);
            (key(u), writer::fingerprint(&status))
        })
        .collect();
    measure("audit statuses written and gauges", before);

    let total: usize = rows.iter().map(|r| r.bytes).sum();
    println!(
        "{policies_n} policies, {bindings_n} bindings ({per_policy} per policy), {} audit units over {} resources",
        plan.units.len(),
        plan.resources.len()
    );
    println!("{:<50} {:>12} {:>14}", "owner", "bytes", "per binding");
    for row in rows.iter().chain([&Row {
        owner: "total",
        bytes: total,
    }]) {
        println!(
            "{:<50} {:>12} {:>14.0}",
            row.owner,
            row.bytes,
            row.bytes as f64 / bindings_n as f64
        );
    }
    drop((inputs, reads, written, findings, plan));
}
