//! celgate-cel vs cel-go on the differential corpus' benchmark cases (one-line policies over a
//! Deployment), timed the same way on both sides: a batch size calibrated to about 20 ms, the
//! median ns/op of 11 batches; each iteration binds the variables and evaluates. Prints per
//! case ns/op for both, the ratio celgate/cel-go and the geometric mean of the ratios, and
//! writes a JSON report. Run by `make bench-cel`, which produces the inputs:
//! - `CEL_BENCH_CORPUS`: the corpus (`differential gen`);
//! - `CEL_BENCH_CEL_GO`: cel-go's timings (`differential bench`), one file or several joined by
//!   `:` (runs taken before and after celgate's); each case takes cel-go's best run;
//! - `CEL_BENCH_PREVIOUS`: a report of an earlier run of this bench; each case takes celgate's
//!   best of that run and this one. `make bench-cel` alternates cel-go, celgate, cel-go,
//!   celgate, so that the machine's drift favours neither side;
//! - `CEL_BENCH_REPORT`: where to write the report (default `target/bench-cel.json`).

#[path = "../tests/support/corpus.rs"]
mod corpus;

use std::collections::HashMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use celgate_cel::{Budget, PER_CALL_LIMIT};
use corpus::{Corpus, read_json};
use serde_json::json;

const BATCH_TARGET: Duration = Duration::from_millis(20);
const BATCHES: usize = 11;

/// Calibrates a batch size and returns the median ns/op over the batches.
fn measure(mut run: impl FnMut(u64) -> Duration) -> f64 {
    let mut n = 1u64;
    loop {
        let d = run(n);
        if d >= BATCH_TARGET / 4 {
            n = ((n as f64) * BATCH_TARGET.as_secs_f64() / d.as_secs_f64()).max(1.0) as u64;
            break;
        }
        n *= 4;
    }
    let mut samples: Vec<f64> = (0..BATCHES)
        .map(|_| run(n).as_nanos() as f64 / n as f64)
        .collect();
    samples.sort_by(f64::total_cmp);
    samples[BATCHES / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter on the case id.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let (Some(corpus_path), Some(go_path)) = (
        std::env::var_os("CEL_BENCH_CORPUS"),
        std::env::var_os("CEL_BENCH_CEL_GO"),
    ) else {
        println!(
            "versus: skipped (CEL_BENCH_CORPUS / CEL_BENCH_CEL_GO not set; run `make bench-cel`)"
        );
        return;
    };
    let corpus =
        Corpus::read(PathBuf::from(corpus_path).as_path()).unwrap_or_else(|e| panic!("{e}"));
    let go_runs: Vec<serde_json::Value> = std::env::split_paths(&go_path)
        .map(|path| read_json(&path).unwrap_or_else(|e| panic!("{e}")))
        .collect();
    let go = best_of(go_runs.iter().map(|run| timings(run, "results", "ns_op")));
    let previous = std::env::var_os("CEL_BENCH_PREVIOUS")
        .map(|path| read_json(PathBuf::from(path).as_path()).unwrap_or_else(|e| panic!("{e}")));
    let previous = previous
        .as_ref()
        .map(|report| timings(report, "cases", "celgate_ns"))
        .unwrap_or_default();
    let env = corpus.env();

    println!(
        "{:<60} {:>12} {:>12} {:>8}",
        "case", "celgate ns", "cel-go ns", "ratio"
    );
    let mut rows = Vec::new();
    let mut log_sum = 0.0;
    let mut compared = 0u32;
    for case in corpus.cases.iter().filter(|c| c.bench) {
        if !filter.is_empty() && !filter.iter().any(|f| case.id.contains(f.as_str())) {
            continue;
        }
        let name: String = case.expr.chars().take(60).collect();
        let cel_go = go.get(case.id.as_str()).copied();
        let program = match env.compile(&case.expr) {
            Ok(p) => p,
            Err(e) => {
                let first = e.to_string().lines().next().unwrap_or_default().to_string();
                println!(
                    "{name:<60} {:>12} {:>12} {:>8}  ({first})",
                    "-",
                    fmt_ns(cel_go),
                    "-"
                );
                rows.push(json!({"id": case.id, "celgate_ns": null, "cel_go_ns": cel_go, "ratio": null, "celgate_error": first}));
                continue;
            }
        };
        let ns = measure(|n| {
            let start = Instant::now();
            for _ in 0..n {
                let act = corpus.activation(case);
                let mut budget = Budget::new(PER_CALL_LIMIT, u64::MAX);
                let _ = black_box(program.eval(black_box(&act), &mut budget));
            }
            start.elapsed()
        });
        let measured = ns;
        let ns = previous
            .get(case.id.as_str())
            .map_or(ns, |&earlier| ns.min(earlier));
        let ratio = cel_go.map(|g| ns / g);
        if let Some(r) = ratio {
            log_sum += r.ln();
            compared += 1;
        }
        println!(
            "{name:<60} {:>12} {:>12} {:>8}",
            fmt_ns(Some(ns)),
            fmt_ns(cel_go),
            ratio
                .map(|r| format!("{r:.3}"))
                .unwrap_or_else(|| "-".into())
        );
        rows.push(json!({"id": case.id, "group": case.group, "celgate_ns": ns,
            "celgate_ns_this_run": measured, "cel_go_ns": cel_go, "ratio": ratio}));
    }
    let geomean = (compared > 0).then(|| (log_sum / f64::from(compared)).exp());
    match geomean {
        Some(g) => println!(
            "bench-cel: geometric mean of celgate/cel-go ratios over {compared} cases: {g:.3} (< 1: celgate faster)"
        ),
        None => println!("bench-cel: no case compared"),
    }
    let report = json!({"geomean_ratio": geomean, "compared": compared,
        "cel_go_runs": go_runs.len(), "celgate_runs": 1 + usize::from(!previous.is_empty()),
        "cases": rows});
    let path = std::env::var_os("CEL_BENCH_REPORT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-cel.json")
        });
    let text = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
    if let Err(e) = std::fs::write(&path, text) {
        panic!("cannot write {}: {e}", path.display());
    }
    println!("report: {}", path.display());
}

/// The ns/op by case id of one run's report: `list` holds the cases, `field` the time.
fn timings<'r>(report: &'r serde_json::Value, list: &str, field: &str) -> HashMap<&'r str, f64> {
    report[list]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| Some((r["id"].as_str()?, r[field].as_f64()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Each case's best (lowest) time over several runs.
fn best_of<'r>(runs: impl Iterator<Item = HashMap<&'r str, f64>>) -> HashMap<&'r str, f64> {
    let mut best: HashMap<&str, f64> = HashMap::new();
    for run in runs {
        for (id, ns) in run {
            best.entry(id).and_modify(|b| *b = b.min(ns)).or_insert(ns);
        }
    }
    best
}

fn fmt_ns(ns: Option<f64>) -> String {
    ns.map(|n| format!("{n:.0}")).unwrap_or_else(|| "-".into())
}
