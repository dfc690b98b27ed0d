//! What decoding a review builds stays within what it is charged (`review::decode_cost`):
//! reviews of every shape an attacker may send (numbers, empty objects and arrays, deep
//! nesting, short strings, escaped strings, distinct keys), the shape in the object, the old
//! object or another member of the request, decoded for validation and for mutation and then
//! read every way a decision reads them. The heap is counted by a counting allocator.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

use celgate_cel::json_tape::Footprint;
use celgate_webhook::review::{MAX_REVIEW_DEPTH, ObjectRead, decode, decode_cost};
use peak_alloc::PeakAlloc;

/// The system allocator, counting the bytes held and their peak (a reallocation holds the
/// old block and the new while it copies). This file's one test is the only thing allocating.
#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

/// Body bytes of each shape's review.
const BODY_BYTES: usize = 160 * 1024;

/// `n` values of `item` joined in an array.
fn array_of(item: &str, n: usize) -> String {
    let mut out = String::with_capacity(n * (item.len() + 1) + 2);
    out.push('[');
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item);
    }
    out.push(']');
    out
}

/// The shapes, each about `bytes` long.
fn shapes(bytes: usize) -> Vec<(&'static str, String)> {
    let deep = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let nests = deep(MAX_REVIEW_DEPTH - 12);
    let keys: String = (0..bytes / 12)
        .map(|i| format!("\"k{i:07}\":0"))
        .collect::<Vec<_>>()
        .join(",");
    vec![
        ("numbers", array_of("0", bytes / 2)),
        ("decimals", array_of("0.5", bytes / 4)),
        ("empty objects", array_of("{}", bytes / 3)),
        ("empty arrays", array_of("[]", bytes / 3)),
        ("nesting", array_of(&nests, bytes / nests.len())),
        ("strings", array_of("\"\"", bytes / 3)),
        ("escaped strings", array_of("\"\\n\"", bytes / 5)),
        ("keys", format!("{{{keys}}}")),
        ("nested keys", array_of(r#"{"a":{"b":{}}}"#, bytes / 15)),
    ]
}

/// A review whose `member` of the request is `value`.
fn review_with(member: &str, value: &str) -> String {
    let object = if member == "object" { value } else { "{}" };
    let old = if member == "oldObject" { value } else { "{}" };
    let options = if member == "options" { value } else { "{}" };
    format!(
        r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","operation":"UPDATE","kind":{{"group":"","version":"v1","kind":"ConfigMap"}},"resource":{{"group":"","version":"v1","resource":"configmaps"}},"options":{options},"object":{object},"oldObject":{old}}}}}"#
    )
}

/// The peak heap of decoding `body` as `read` says and reading its objects as a decision
/// may (as CEL reads them, decoded, and for mutation a copy of its own), beyond what was
/// held before.
fn peak_of_decoding(body: &[u8], read: ObjectRead) -> usize {
    let before = ALLOCATOR.current_usage();
    ALLOCATOR.reset_peak_usage();
    {
        let review = decode(body, read).expect("a review");
        let request = review.request().expect("valid");
        let _ = request.cel_object();
        let _ = request.cel_old_object();
        let _ = request.object();
        let _ = request.old_object();
        if read != ObjectRead::Tape {
            let owned = request.object_owned();
            drop(owned);
        }
        assert!(review.decode_error().is_none());
    }
    ALLOCATOR.peak_usage().saturating_sub(before)
}

#[test]
fn what_decoding_builds_stays_within_its_charge() {
    let mut report = Vec::new();
    // On the stack celgate's threads have: deep values are read and dropped recursively.
    std::thread::Builder::new()
        .stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
        .spawn(move || {
            for bytes in [BODY_BYTES / 3, BODY_BYTES] {
                for (shape, value) in shapes(bytes) {
                    for member in ["object", "oldObject", "options"] {
                        let body = review_with(member, &value);
                        let footprint = Footprint::of(body.as_bytes());
                        for read in [ObjectRead::Tape, ObjectRead::TapeToMutate, ObjectRead::Text] {
                            let peak = peak_of_decoding(body.as_bytes(), read);
                            let charged = decode_cost(body.len(), &footprint, read);
                            report.push(format!(
                                "{shape} in {member}, {read:?}, {} bytes: peak {peak}, charged {charged} ({:.2})",
                                body.len(),
                                peak as f64 / charged as f64
                            ));
                            assert!(
                                peak <= charged,
                                "{shape} in {member} read as {read:?}: decoding took {peak} bytes, \
                                 charged {charged}\n{}",
                                report.join("\n")
                            );
                        }
                    }
                }
            }
            println!("{}", report.join("\n"));
        })
        .unwrap()
        .join()
        .unwrap();
}
