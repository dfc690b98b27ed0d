//! One writer of status: two celgate processes on one control plane (both serve admission), only
//! the one holding the leader Lease writes status and events. When the leader dies without
//! releasing the Lease (SIGKILL), a policy changed meanwhile gets its status from the other
//! process once the Lease has expired.
//!
//! Who wrote is read from the outside: the Lease's holder, the `reportingInstance` of the events
//! about the policy (celgate's recorder reports its identity), and each process's own log.

use std::time::{Duration, Instant};

use celgate_e2e::demo::CELGATE_API;
use celgate_e2e::{Celgate, Cluster, free_port, policies_api, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::Value;

/// The Lease celgate holds (its default name, in its default namespace).
const LEASE: &str = "celgate-leader";
const NAMESPACE: &str = "celgate-system";
/// The Lease duration the processes run with, in seconds: short, so the test does not wait long.
const LEASE_SECONDS: u64 = 6;
const POLICY: &str = "leader-policy";
/// What celgate logs when it acquires the Lease.
const ACQUIRED: &str = "acquired the leader lease";

fn spawn(cluster: &Cluster, identity: &str) -> Celgate {
    let duration = LEASE_SECONDS.to_string();
    Celgate::spawn_with(
        cluster,
        free_port(),
        identity,
        &[
            "--identity",
            identity,
            "--lease-duration-seconds",
            &duration,
        ],
        "info",
    )
}

async fn holder(client: &kube::Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), NAMESPACE)
        .get(LEASE)
        .await
        .ok()?
        .spec?
        .holder_identity
}

fn policy(expression: &str) -> String {
    format!(
        "apiVersion: {CELGATE_API}\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {POLICY}\nspec:\n  matchConstraints:\n    resourceRules:\n    - {{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}}\n  validations:\n  - expression: \"{expression}\"\n"
    )
}

/// Waits (up to `limit`) until the policy's status describes generation `generation`; returns
/// its `typeChecking`.
async fn wait_status(
    api: &Api<kube::api::DynamicObject>,
    generation: i64,
    limit: Duration,
) -> Value {
    wait_for(
        &format!("the status of generation {generation}"),
        limit,
        || async {
            let object = api.get(POLICY).await.ok()?;
            let status = object.data.get("status")?;
            (object.metadata.generation == Some(generation)
                && status["observedGeneration"].as_i64() == Some(generation))
            .then(|| status["typeChecking"].clone())
        },
    )
    .await
}

/// The `reportingInstance` of every event about the policy.
async fn reporters(client: &kube::Client) -> Vec<String> {
    Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("cannot list events: {e}"))
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(POLICY))
        .map(|e| e.reporting_instance.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_status_and_the_other_takes_over() {
    let cluster = Cluster::start();
    cluster.install_crds();
    let client = cluster.client().await;
    let policies = policies_api(&client, CELGATE_API);

    // `a` starts first and leads; `b` starts once the Lease is `a`'s.
    let mut a = spawn(&cluster, "celgate-a");
    a.wait_ready().await;
    wait_for(
        "celgate-a to hold the Lease",
        Duration::from_secs(60),
        || async { (holder(&client).await.as_deref() == Some("celgate-a")).then_some(()) },
    )
    .await;
    let b = spawn(&cluster, "celgate-b");
    b.wait_ready().await;

    // Generation 1, written by the leader only.
    cluster.apply(&policy("object.spec.replica > 1"));
    let first = wait_status(&policies, 1, Duration::from_secs(60)).await;
    assert!(
        first.to_string().contains("undefined field 'replica'"),
        "generation 1 is not type checked: {first}"
    );
    let before = wait_for(
        "events about the policy",
        Duration::from_secs(30),
        || async {
            let r = reporters(&client).await;
            (!r.is_empty()).then_some(r)
        },
    )
    .await;
    assert!(
        before.iter().all(|r| r == "celgate-a"),
        "events about the policy come from other replicas than the leader: {before:?}"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("celgate-a"));
    assert!(
        a.logs().contains(ACQUIRED),
        "celgate-a never logged leading"
    );
    assert!(
        !b.logs().contains(ACQUIRED),
        "celgate-b leads while celgate-a holds the Lease:\n{}",
        b.logs()
    );

    // The leader dies without releasing the Lease; the policy changes while nobody leads.
    a.kill();
    let killed = Instant::now();
    let fixed: Value = serde_saphyr::from_str(&policy("object.spec.replicas > 1"))
        .unwrap_or_else(|e| panic!("policy fixture: {e}"));
    policies
        .patch(
            POLICY,
            &PatchParams::apply("leader-e2e").force(),
            &Patch::Apply(&fixed),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot change the policy: {e}"));

    // The other writes it once the Lease expired: within the lease duration after the last
    // renewal, bounded here with a generous factor for a loaded machine.
    let limit = Duration::from_secs(LEASE_SECONDS * 4 + 10);
    let second = wait_status(&policies, 2, limit).await;
    let took = killed.elapsed();
    println!(
        "status of the change written {:.1} s after the leader was killed (lease {LEASE_SECONDS} s)",
        took.as_secs_f64()
    );
    assert!(
        second.get("expressionWarnings").is_none_or(Value::is_null),
        "generation 2 still has warnings: {second}"
    );
    assert_eq!(holder(&client).await.as_deref(), Some("celgate-b"));
    assert!(
        b.logs().contains(ACQUIRED),
        "celgate-b wrote status without logging that it leads"
    );
    let after = wait_for(
        "an event from celgate-b",
        Duration::from_secs(30),
        || async {
            let r = reporters(&client).await;
            r.iter().any(|r| r == "celgate-b").then_some(r)
        },
    )
    .await;
    assert!(
        after.iter().all(|r| r == "celgate-a" || r == "celgate-b"),
        "events from unknown reporters: {after:?}"
    );
}
