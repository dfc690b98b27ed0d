//! What the operator holds per binding (issue 46, part 2: 1,000 policies × 100 bindings within
//! 256 MiB), measured in heap bytes: the realistic fixture's policies (`e2e/src/fixture.rs`),
//! each with its own binding and more bindings for other tenants (as `make
//! bench-scale-bindings` creates them), taken in the way celgate starts on them, owner by
//! owner: the lists as kube-apiserver answers them (pages of 500, decoded one at a time, as
//! the watches read them) into the stores, the compiled policies, the converted bindings with
//! the published set (built twice: each reconcile builds a new one while the last is
//! published), the status writer's first pass (every binding's status written, each write
//! coming back as a watch event that stores the binding again, while the pass holds what it
//! read), and the leader's audit: its plan, inputs, follows, findings, written statuses and
//! gauges.
//! It lives in the audit because the audit's parts are private to it.
//!
//! A measurement, not a check (`make bench-footprint`, which runs it alone so that only it
//! allocates): `FOOTPRINT_POLICIES` (default 1000) and `FOOTPRINT_BINDINGS_PER_POLICY` (default
//! 20). Reports bytes per binding of each owner held once its step is done, and the most held
//! during each step above what was held before the first (the start-up's high-water mark is
//! the largest).

#![allow(clippy::expect_used, clippy::unwrap_used)] // A measurement: a failure is a failed run.

use std::collections::HashMap;
use std::sync::Arc;

use celgate_crds::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use celgate_kinds::builtin::BuiltinDiscovery;
use celgate_kinds::served::ServedResources;
use celgate_snapshot::SnapshotStore;
use celgate_snapshot::{Deps, KindSchemaView};
use kube::core::ObjectList;
use kube::runtime::reflector;
use kube::runtime::watcher::Event;
use peak_alloc::PeakAlloc;
use serde::Deserialize;
use serde_json::{Value, json};

use super::findings::{Findings, UnitKey};
use super::inputs::{Inputs, resource_inputs};
use super::{Audited, Sources, key, targets, writer};
use crate::cluster::discovery::Discovery;
use crate::controllers::policies::{KindStores, without_unread_fields};
use crate::controllers::policy_set::{PolicyCache, Stored, compile};
use crate::controllers::stored_binding;
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
/// creation time and the managedFields of its creator; with `written`, a binding also has its
/// status as celgate's status writer and audit write it, with their managedFields.
fn as_stored(mut manifest: Value, i: usize, written: bool) -> Value {
    let binding = manifest["kind"] == "ValidatingAdmissionPolicyBinding";
    let written = written && binding;
    let policy = manifest["spec"]["policyName"].clone();
    let meta = manifest["metadata"].as_object_mut().unwrap();
    meta.insert(
        "uid".into(),
        json!(format!("4c5e8f2a-1b3d-4e6f-8a9b-{i:012}")),
    );
    let version = if written { 300_000 } else { 100_000 } + i;
    meta.insert("resourceVersion".into(), json!(format!("{version}")));
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
    if written {
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
    if written {
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

/// The watches' page size (kube-runtime's default).
const PAGE: usize = 500;

/// Hands `take` each object of `objects` as a watch's first list delivers them: page by page,
/// each page's body held until it is decoded, and its objects one at a time.
fn listed<K: serde::de::DeserializeOwned + Clone>(
    objects: &[Value],
    mut take: impl FnMut(Event<K>),
) {
    take(Event::Init);
    for page in objects.chunks(PAGE) {
        let body = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List",
            "metadata": {"resourceVersion": "1"}, "items": page}))
        .unwrap();
        let list: ObjectList<K> = serde_json::from_slice(&body).unwrap();
        drop(body);
        for object in list.items {
            take(Event::InitApply(object));
        }
    }
    take(Event::InitDone);
}

/// One owner's bytes held once its step is done, and the most held during the step above what
/// was held before the first step.
struct Row {
    owner: &'static str,
    bytes: usize,
    high_water: usize,
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
    let (policy_values, binding_values): (Vec<Value>, Vec<Value>) = manifests
        .into_iter()
        .partition(|m| m["kind"] == "ValidatingAdmissionPolicy");
    let stored = |values: &[Value], written: bool| -> Vec<Value> {
        (values.iter().enumerate())
            .map(|(i, m)| as_stored(m.clone(), i, written))
            .collect()
    };
    let policy_values = stored(&policy_values, false);
    let (listed_bindings, mut written_bindings) = (
        stored(&binding_values, false),
        stored(&binding_values, true),
    );
    written_bindings.sort_unstable_by(|a, b| {
        let name = |v: &Value| {
            v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        };
        name(a).cmp(&name(b))
    });
    drop(binding_values);
    let bindings_n = listed_bindings.len();
    let mut rows = Vec::new();
    let start = held();
    let mut step = |owner: &'static str, before: usize| {
        rows.push(Row {
            owner,
            bytes: held().saturating_sub(before),
            high_water: ALLOCATOR.peak_usage().saturating_sub(start),
        });
        ALLOCATOR.reset_peak_usage();
        held()
    };
    ALLOCATOR.reset_peak_usage();

    // The watches' first lists, into the stores.
    let before = held();
    let (policies, mut policy_writer) = reflector::store();
    listed(
        &policy_values,
        |mut event: Event<ValidatingAdmissionPolicy>| {
            if let Event::InitApply(object) = &mut event {
                without_unread_fields(object);
            }
            policy_writer.apply_watcher_event(&event);
        },
    );
    let before = step("stored policies", before);
    let (bindings, mut binding_writer) = stored_binding::store();
    listed(
        &listed_bindings,
        |event: Event<ValidatingAdmissionPolicyBinding>| {
            binding_writer.apply_watcher_event(&event);
        },
    );
    let before = step("stored bindings, as listed", before);
    let stores = KindStores { policies, bindings };

    // The policy controller: each policy compiled, then the set built and published, and built
    // again by the next reconcile while the first is published.
    let mut cache = PolicyCache::default();
    for policy in stores.policies.state() {
        cache.insert(&*policy, compile(&*policy));
    }
    let before = step("compiled policies", before);
    let store = SnapshotStore::new();
    let mut publish_times = Vec::new();
    for _ in 0..2 {
        let started = std::time::Instant::now();
        let empty = Stored {
            policies: Vec::new(),
            bindings: crate::controllers::stored_binding::BindingStore::default(),
        };
        let set = Arc::new(cache.build(stores.state(), empty));
        store.publish_policies(
            set,
            cache.param_kinds(),
            Arc::new(KindSchemaView::default()),
        );
        publish_times.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let before = step("converted bindings and the published set", before);
    let snapshot = store.load();

    // The status writer's first pass reads every stored binding, sorted by name, then writes
    // each one's status (and the audit its status.audit): each write comes back as a watch
    // event that stores the binding again; the pass lets go of each binding it read once that
    // binding's write is worked out.
    let mut pass = stores.bindings.state();
    pass.sort_unstable_by(|a, b| a.name().cmp(b.name()));
    for (read, value) in pass.into_iter().zip(&written_bindings) {
        drop(read);
        let written = ValidatingAdmissionPolicyBinding::deserialize(value).unwrap();
        binding_writer.apply_watcher_event(&Event::Apply(written));
    }
    step("stored bindings' statuses, written", before);

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
    ALLOCATOR.reset_peak_usage();
    let plan = targets::plan(
        &snapshot,
        &stores.policies,
        &stores.bindings,
        &served,
        false,
    );
    let before = step("audit plan (units)", before);
    let inputs = Inputs::now(&snapshot, &sources);
    let before = step("audit inputs (held, and built again every poll)", before);
    let reads = resource_inputs(&plan, &snapshot);
    let before = step("audit inputs per resource", before);
    let follows: Vec<Audited> = (plan.resources.iter())
        .map(|r| Audited::of(&plan.units, r))
        .collect();
    let before = step("audit follows (their bindings' names)", before);
    let mut findings = Findings::default();
    for resource in &plan.resources {
        let keys: Vec<UnitKey> = (plan.units.iter())
            .filter(|u| u.resources.contains(resource))
            .map(|u| key(u))
            .collect();
        let pass = findings.start(resource);
        findings.finish(resource, pass, &keys);
    }
    let before = step("audit findings (counts per binding)", before);
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
    step("audit statuses written and gauges", before);

    let total: usize = rows.iter().map(|r| r.bytes).sum();
    let high_water = rows.iter().map(|r| r.high_water).max().unwrap_or_default();
    println!(
        "{policies_n} policies, {bindings_n} bindings ({per_policy} per policy), {} audit units over {} resources",
        plan.units.len(),
        plan.resources.len()
    );
    // What each publish costs at this size (a policy or binding change waits for one).
    println!(
        "the set read from the stores, built and published: {} ms (each of two builds)",
        (publish_times.iter())
            .map(|ms| format!("{ms:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "{:<50} {:>12} {:>12} {:>14}",
        "owner (held after its step; high-water mark during it)",
        "bytes",
        "per binding",
        "high-water/b"
    );
    for row in rows.iter().chain([&Row {
        owner: "total",
        bytes: total,
        high_water,
    }]) {
        let per = |bytes: usize| bytes as f64 / bindings_n as f64;
        println!(
            "{:<50} {:>12} {:>12.0} {:>14.0}",
            row.owner,
            row.bytes,
            per(row.bytes),
            per(row.high_water)
        );
    }
    drop((inputs, reads, follows, written, findings, plan));
    // The test's own manifests, held throughout (the marks are above them).
    drop((policy_values, listed_bindings, written_bindings));
}
