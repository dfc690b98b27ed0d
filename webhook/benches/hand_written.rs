//! Hand-written code that must pay its way (issue 29, item 3): each piece against what it
//! replaces, in one run, the two variants timed alternately (A B A B) for `ROUNDS` rounds; each
//! line gives both variants' minimum and median and the ratio of the medians.
//!
//! 1. celgate's JSON tape scanner (`review::decode`) against serde_json's pass alone
//!    (`review::decode_without_scanner`), decoding the realistic 6 KB Pod create review
//!    (`e2e/src/fixture.rs`) for validation; then the server's own cost of one review both ways
//!    (decode, decide against 20 matching of 1,000 validating policies, encode: the in-process
//!    figure of `load.rs`).
//! 2. What celgate's fine check duration families add per check: one more family lookup and
//!    observation.
//! 3. What weighing a review before decoding it adds (issue 40, item 2): counting what its
//!    text holds (`Footprint::of`), the bytes that decode into and holding them in the
//!    in-flight budget, beside decoding alone and beside the whole review in process. The
//!    server weighs a review for mutation so, and one the scanner declines; a review for
//!    validation is counted and charged in the scanner's own pass.
//!
//! (A lock-free histogram of celgate's own was measured here against prometheus-client's and
//! was not faster beyond noise: 25.9 against 28.9 ns per observation on one thread, 83.4
//! against 83.4 ns with two threads; it was removed.)
//!
//! Run: `CARGO_TARGET_DIR=target nice -n 10 cargo bench -p celgate-webhook --bench hand_written`.
//! Environment: `HAND_WRITTEN_ROUNDS` (default 11), `HAND_WRITTEN_MS` (time per variant per round
//! for the microbenchmarks, default 300; the per-review figures take three times as long).

#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)] // A benchmark harness.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use celgate_cel::json_tape::Footprint;
use celgate_engine::PolicySet;
use celgate_snapshot::dispatch::{self, Call};
use celgate_snapshot::{Deps, SnapshotStore};
use celgate_webhook::metrics::{CheckLabels, FINE_CHECK_BUCKETS};
use celgate_webhook::review;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

mod common;

use common::{env_or, fixture, fixture_mutating, fixture_store, fixture_validating};

/// Check durations as celgate's checks take them (a few microseconds), cycled through.
const DURATIONS: [f64; 8] = [3e-6, 5e-6, 8e-6, 1.2e-5, 2e-6, 4e-5, 4e-6, 6e-6];

/// Nanoseconds per operation of `run(n)` (which performs `n` operations), run in batches of
/// `batch` for at least `budget`.
fn per_op(budget: Duration, batch: u64, mut run: impl FnMut(u64)) -> f64 {
    let mut ops = 0u64;
    let start = Instant::now();
    while start.elapsed() < budget {
        run(batch);
        ops += batch;
    }
    start.elapsed().as_nanos() as f64 / ops as f64
}

/// Minimum and median of `samples`.
fn min_median(samples: &mut [f64]) -> (f64, f64) {
    samples.sort_by(f64::total_cmp);
    (samples[0], samples[samples.len() / 2])
}

/// Times `a` and `b` alternately for `rounds` rounds (each `run(n)` performs `n` operations)
/// and prints their minimum and median ns per operation and the ratio of medians (b / a).
fn compare(
    what: &str,
    (a_name, mut a): (&str, impl FnMut(u64)),
    (b_name, mut b): (&str, impl FnMut(u64)),
    rounds: u64,
    budget: Duration,
    batch: u64,
) {
    // One untimed round each, so caches and allocator pools are warm for both.
    a(batch);
    b(batch);
    let (mut a_ns, mut b_ns) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        a_ns.push(per_op(budget, batch, &mut a));
        b_ns.push(per_op(budget, batch, &mut b));
    }
    let rounds_a = a_ns.iter().map(|n| format!("{n:.1}")).collect::<Vec<_>>();
    let rounds_b = b_ns.iter().map(|n| format!("{n:.1}")).collect::<Vec<_>>();
    let (a_min, a_med) = min_median(&mut a_ns);
    let (b_min, b_med) = min_median(&mut b_ns);
    println!(
        "{what}:\n  {a_name:<24} min {a_min:>10.1} ns  median {a_med:>10.1} ns  rounds {}\n  {b_name:<24} min {b_min:>10.1} ns  median {b_med:>10.1} ns  rounds {}\n  ratio {b_name} / {a_name} (medians): {:.2}",
        rounds_a.join(" "),
        rounds_b.join(" "),
        b_med / a_med
    );
}

/// Decodes `body` for validation (with the scanner or without), decides it against `store` and
/// encodes the answer: the server's own cost of one review.
async fn one_review(store: &SnapshotStore, deps: &Deps, body: &[u8], scanner: bool) -> Vec<u8> {
    let review = if scanner {
        review::decode(body, review::ObjectRead::Tape)
    } else {
        review::decode_without_scanner(body)
    }
    .unwrap();
    let decided = dispatch::validate(store, deps, review, Call::now(), None)
        .await
        .unwrap();
    assert!(decided.outcome.allowed());
    review::response(&decided.uid, &decided.outcome)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter naming another bench means "not me".
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && a != "hand_written")
    {
        return;
    }
    let rounds = env_or("HAND_WRITTEN_ROUNDS", 11).max(1);
    let budget = Duration::from_millis(env_or("HAND_WRITTEN_MS", 300));
    let loadavg = || {
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    println!(
        "hand_written: {rounds} rounds, A B alternately; loadavg {}",
        loadavg()
    );

    // 1. The scanner against serde_json, on the realistic review and fixture snapshot.
    let (total, matching) = (1000, 20);
    let store = fixture_store(PolicySet::new(
        fixture_validating(&fixture::validating(total, matching)),
        fixture_mutating(&fixture::mutating(total, matching)),
    ));
    let body = fixture::pod_review().to_string().into_bytes();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap();
    let deps = Deps::default();
    // Both ways give the same answer, from the same checks.
    let (with, without) = runtime.block_on(async {
        (
            one_review(&store, &deps, &body, true).await,
            one_review(&store, &deps, &body, false).await,
        )
    });
    assert_eq!(with, without);
    // Checks observed per review: validating ones only fail or deny (as upstream counts them),
    // mutation ones one per mutation evaluated.
    let (checks, mutation_checks) = runtime.block_on(async {
        let review = review::decode(&body, review::ObjectRead::Tape).unwrap();
        let decided = dispatch::validate(&store, &deps, review, Call::now(), None)
            .await
            .unwrap();
        let review = review::decode(&body, review::ObjectRead::TapeToMutate).unwrap();
        let mutated = dispatch::mutate(&store, &deps, review, Call::now(), None)
            .await
            .unwrap();
        (decided.outcome.checks.len(), mutated.outcome.checks.len())
    });
    println!(
        "fixture: {} byte Pod create review, {matching} of {total} validating and of {total} mutating policies match; checks observed per review: {checks} validating (none fails), {mutation_checks} mutation",
        body.len()
    );
    let decode = |scanner: bool| {
        let body = &body;
        move |n: u64| {
            for _ in 0..n {
                let review = if scanner {
                    review::decode(black_box(body), review::ObjectRead::Tape)
                } else {
                    review::decode_without_scanner(black_box(body))
                };
                drop(black_box(review.unwrap()));
            }
        }
    };
    compare(
        "decode the review for validation (ns per review)",
        ("scanner", decode(true)),
        ("serde_json", decode(false)),
        rounds,
        budget,
        100,
    );
    let review = |scanner: bool| {
        let (runtime, store, deps, body) = (&runtime, &store, &deps, &body);
        move |n: u64| {
            runtime.block_on(async {
                for _ in 0..n {
                    black_box(one_review(store, deps, body, scanner).await);
                }
            })
        }
    };
    compare(
        "decode, decide, encode one review in process (ns per review)",
        ("scanner", review(true)),
        ("serde_json", review(false)),
        rounds,
        budget * 3,
        20,
    );

    let one = Histogram::new(FINE_CHECK_BUCKETS);

    // 2. What a fine family adds per check: its own label lookup and observation, here among
    // a series per matching policy.
    let labels: Vec<CheckLabels> = (0..matching)
        .map(|i| CheckLabels {
            policy: Arc::from(format!("policy-{i}.example.com")),
            policy_binding: Arc::from(format!("policy-{i}.example.com-binding")),
            error_type: "no_error",
            enforcement_action: "allow",
        })
        .collect();
    let family = Family::<CheckLabels, Histogram, fn() -> Histogram>::new_with_constructor(|| {
        Histogram::new(FINE_CHECK_BUCKETS)
    });
    let lookup_and_observe = |n: u64| {
        for i in 0..n as usize {
            family
                .get_or_create(black_box(&labels[i % labels.len()]))
                .observe(black_box(DURATIONS[i % 8]));
        }
    };
    let observe_only = |n: u64| {
        for i in 0..n as usize {
            one.observe(black_box(DURATIONS[i % 8]));
        }
    };
    compare(
        "one more check duration family (ns per check)",
        ("observe only", observe_only),
        ("lookup + observe", lookup_and_observe),
        rounds,
        budget,
        10_000,
    );

    // 3. Weighing a review before decoding it, as the server's extractor does.
    let budget_of_reviews = celgate_webhook::limits::Budget::new(&celgate_webhook::Limits::DEFAULT);
    let weighed = |n: u64| {
        for _ in 0..n {
            let footprint = Footprint::of(black_box(&body));
            let cost = review::decode_cost(body.len(), &footprint, review::ObjectRead::Tape);
            let charge = budget_of_reviews.charge(cost).unwrap();
            let review = review::decode(black_box(&body), review::ObjectRead::Tape);
            drop(black_box(review.unwrap()));
            drop(charge);
        }
    };
    compare(
        "weigh the review, then decode it for validation (ns per review)",
        ("decode", decode(true)),
        ("weigh + decode", weighed),
        rounds,
        budget,
        100,
    );
    let weighed_review = |weigh: bool| {
        let (runtime, store, deps, body, budget) =
            (&runtime, &store, &deps, &body, &budget_of_reviews);
        move |n: u64| {
            runtime.block_on(async {
                for _ in 0..n {
                    let charge = weigh.then(|| {
                        let footprint = Footprint::of(black_box(body));
                        let read = review::ObjectRead::Tape;
                        let cost = review::decode_cost(body.len(), &footprint, read);
                        budget.charge(cost).unwrap()
                    });
                    black_box(one_review(store, deps, body, true).await);
                    drop(charge);
                }
            })
        }
    };
    compare(
        "weigh, decode, decide, encode one review in process (ns per review)",
        ("unweighed", weighed_review(false)),
        ("weighed", weighed_review(true)),
        rounds,
        budget * 3,
        20,
    );
    println!("loadavg at the end {}", loadavg());
}
