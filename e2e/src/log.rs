//! Reading celgate's JSON log (`celgate run --log-json`): when it compiled which policy, for
//! benchmarks that split a delay into its parts.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

/// Seconds since the Unix epoch of an RFC 3339 UTC timestamp as `tracing`'s JSON log writes it
/// (`2026-11-26T09:00:00.123456Z`).
pub fn parse_utc(text: &str) -> Option<f64> {
    let (date, time) = text.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let (h, min) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    let sec = t.next()?.parse::<f64>().ok()?;
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + h * 3600.0 + min * 60.0 + sec)
}

/// Seconds since the Unix epoch of `t`.
pub fn epoch_seconds(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// The times (Unix seconds) of celgate's `compiled policy` log lines, with the policy and its
/// generation.
pub fn compiled_lines(log: &str) -> Vec<(f64, String, i64)> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v["fields"]["message"] == "compiled policy")
        .filter_map(|v| {
            Some((
                parse_utc(v["timestamp"].as_str()?)?,
                v["fields"]["policy"].as_str()?.to_string(),
                v["fields"]["generation"].as_i64()?,
            ))
        })
        .collect()
}

/// The times (Unix seconds) of celgate's log lines whose message is `message`.
pub fn message_times(log: &str, message: &str) -> Vec<f64> {
    log.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v["fields"]["message"] == message)
        .filter_map(|v| parse_utc(v["timestamp"].as_str()?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tracing_timestamps_as_unix_seconds() {
        assert_eq!(parse_utc("1970-01-02T00:00:01.5Z"), Some(86_401.5));
        assert_eq!(
            parse_utc("2026-11-26T09:00:00.000000Z"),
            Some(1_795_683_600.0)
        );
        assert_eq!(parse_utc("2024-02-29T23:59:59Z"), Some(1_709_251_199.0));
        assert_eq!(parse_utc("2026-11-26 09:00:00"), None);
    }

    #[test]
    fn finds_compiled_policy_lines_only() {
        let log = concat!(
            r#"{"timestamp":"1970-01-01T00:00:10Z","level":"INFO","fields":{"message":"compiled policy","policy":"p","generation":2}}"#,
            "\n",
            r#"{"timestamp":"1970-01-01T00:00:11Z","level":"INFO","fields":{"message":"webhook listening"}}"#,
            "\nnot json\n"
        );
        assert_eq!(compiled_lines(log), vec![(10.0, "p".to_string(), 2)]);
        assert_eq!(message_times(log, "webhook listening"), vec![11.0]);
        assert!(message_times(log, "webhook").is_empty());
    }
}
