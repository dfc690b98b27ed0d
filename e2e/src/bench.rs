//! What the cluster benchmarks (`e2e/benches`) share: their settings from the environment,
//! percentiles and milliseconds as the reports give them, the machine's load, and the report.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// The value at fraction `p` of `sorted` (nearest rank), or zero when it is empty.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len().saturating_sub(1)) as f64 * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

/// `d` in milliseconds, to two decimals.
pub fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 100_000.0).round() / 100.0
}

/// The positive integer in the environment variable `name`, or `default` when it is unset.
pub fn env_usize(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .ok()
            .filter(|&n| n > 0)
            .unwrap_or_else(|| panic!("{name}={v:?}: expected a positive integer")),
        Err(_) => default,
    }
}

/// The integer (zero allowed: "none of it") in the environment variable `name`, or `default`
/// when it is unset.
pub fn env_count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?}: expected an integer, 0 or more")),
        Err(_) => default,
    }
}

/// The machine's load averages, as `/proc/loadavg` gives them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Writes `report` as pretty JSON to `path` (making its directory) and says where.
pub fn write_report(path: &Path, report: &Value) {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    }
    let text = serde_json::to_string_pretty(report)
        .unwrap_or_else(|e| panic!("cannot serialise the report: {e}"));
    std::fs::write(path, text + "\n")
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    println!("report: {}", path.display());
}
