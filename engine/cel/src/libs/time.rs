//! Timestamps and durations: conversions, arithmetic with cel-go's range checks, and the
//! `get*` accessors with optional time zones (IANA names or `±hh:mm` offsets).

use chrono::{
    DateTime, Datelike, FixedOffset, NaiveDateTime, Offset, TimeDelta, TimeZone, Timelike, Utc,
};

use super::{arg, str_arg};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::Value;

/// Seconds of 0001-01-01T00:00:00Z.
const MIN_UNIX: i64 = -62_135_596_800;
/// Seconds of 9999-12-31T23:59:59Z.
const MAX_UNIX: i64 = 253_402_300_799;

pub(crate) fn register(r: &mut Registry) {
    use Type::{Duration, Int, String, Timestamp};
    r.def("timestamp")
        .global(&[Timestamp], Timestamp)
        .imp(to_timestamp)
        .done();
    r.def("timestamp")
        .global(&[String], Timestamp)
        .imp(to_timestamp)
        .done();
    r.def("timestamp")
        .global(&[Int], Timestamp)
        .imp(to_timestamp)
        .done();
    r.def("duration")
        .global(&[Duration], Duration)
        .imp(to_duration)
        .done();
    r.def("duration")
        .global(&[String], Duration)
        .imp(to_duration)
        .done();
    // Declared by cel-go, but no int converts to a duration.
    r.def("duration")
        .global(&[Int], Duration)
        .imp(to_duration)
        .done();

    type Getter = for<'a> fn(&[Value<'a>]) -> Result<Value<'a>, EvalError>;
    let ts: [(&str, Getter); 10] = [
        ("getFullYear", get_full_year),
        ("getMonth", get_month),
        ("getDayOfYear", get_day_of_year),
        ("getDayOfMonth", get_day_of_month),
        ("getDate", get_date),
        ("getDayOfWeek", get_day_of_week),
        ("getHours", get_hours),
        ("getMinutes", get_minutes),
        ("getSeconds", get_seconds),
        ("getMilliseconds", get_milliseconds),
    ];
    for (name, f) in ts {
        r.def(name).member(&[Timestamp], Int).imp(f).done();
        r.def(name).member(&[Timestamp, String], Int).imp(f).done();
    }
    r.def("getHours")
        .member(&[Duration], Int)
        .imp(get_hours)
        .done();
    r.def("getMinutes")
        .member(&[Duration], Int)
        .imp(get_minutes)
        .done();
    r.def("getSeconds")
        .member(&[Duration], Int)
        .imp(get_seconds)
        .done();
    r.def("getMilliseconds")
        .member(&[Duration], Int)
        .imp(get_milliseconds)
        .done();
}

fn check_ts<'a>(t: DateTime<FixedOffset>) -> Result<Value<'a>, EvalError> {
    let s = t.timestamp();
    if !(MIN_UNIX..=MAX_UNIX).contains(&s) {
        return Err(EvalError::TimestampOverflow);
    }
    Ok(Value::Timestamp(t))
}

fn nanos(d: TimeDelta) -> Result<i64, EvalError> {
    d.num_nanoseconds().ok_or(EvalError::IntOverflow)
}

pub(crate) fn timestamp_add<'a>(
    t: DateTime<FixedOffset>,
    d: TimeDelta,
) -> Result<Value<'a>, EvalError> {
    nanos(d)?;
    check_ts(
        t.checked_add_signed(d)
            .ok_or(EvalError::TimestampOverflow)?,
    )
}

pub(crate) fn timestamp_sub<'a>(
    t: DateTime<FixedOffset>,
    d: TimeDelta,
) -> Result<Value<'a>, EvalError> {
    nanos(d)?;
    check_ts(
        t.checked_sub_signed(d)
            .ok_or(EvalError::TimestampOverflow)?,
    )
}

pub(crate) fn timestamp_diff<'a>(
    a: DateTime<FixedOffset>,
    b: DateTime<FixedOffset>,
) -> Result<Value<'a>, EvalError> {
    let d = a.signed_duration_since(b);
    d.num_nanoseconds().ok_or(EvalError::IntOverflow)?;
    Ok(Value::Duration(d))
}

pub(crate) fn duration_add<'a>(a: TimeDelta, b: TimeDelta) -> Result<Value<'a>, EvalError> {
    let n = nanos(a)?
        .checked_add(nanos(b)?)
        .ok_or(EvalError::IntOverflow)?;
    Ok(Value::Duration(TimeDelta::nanoseconds(n)))
}

pub(crate) fn duration_sub<'a>(a: TimeDelta, b: TimeDelta) -> Result<Value<'a>, EvalError> {
    let n = nanos(a)?
        .checked_sub(nanos(b)?)
        .ok_or(EvalError::IntOverflow)?;
    Ok(Value::Duration(TimeDelta::nanoseconds(n)))
}

/// Parses an RFC 3339 timestamp as Go's `time.Parse(time.RFC3339, s)`, keeping the zone
/// offset (an offset of zero, or one of a day or more, which Go keeps but a fixed offset
/// cannot hold, is UTC).
pub(crate) fn parse_timestamp(s: &str) -> Result<DateTime<FixedOffset>, EvalError> {
    let bad = || {
        EvalError::msg(
            "type conversion error from 'string' to 'google.protobuf.Timestamp'".to_string(),
        )
    };
    let b = s.as_bytes();
    // Go requires the upper-case 'T' separator and a 'Z' or ±hh:mm zone.
    if b.get(10) != Some(&b'T') {
        return Err(bad());
    }
    // Go takes no leap seconds, and zone offsets up to `24:60` (chrono stops below 24 hours).
    if s.get(17..19) == Some("60") {
        return Err(bad());
    }
    let (local, offset) = split_offset(s).ok_or_else(bad)?;
    let t = DateTime::parse_from_rfc3339(&format!("{local}Z")).map_err(|_| bad())?;
    let t = t
        .with_timezone(&Utc)
        .checked_sub_signed(offset)
        .ok_or(EvalError::TimestampOverflow)?;
    if !(MIN_UNIX..=MAX_UNIX).contains(&t.timestamp()) {
        return Err(EvalError::TimestampOverflow);
    }
    let zone = i32::try_from(offset.num_seconds())
        .ok()
        .and_then(FixedOffset::east_opt)
        .unwrap_or(Utc.fix());
    Ok(t.with_timezone(&zone))
}

/// The timestamp `secs` seconds after the Unix epoch (in UTC), within CEL's years 1 to 9999.
pub(crate) fn timestamp_from_unix(secs: i64) -> Result<DateTime<FixedOffset>, EvalError> {
    if !(MIN_UNIX..=MAX_UNIX).contains(&secs) {
        return Err(EvalError::TimestampOverflow);
    }
    Utc.fix()
        .timestamp_opt(secs, 0)
        .single()
        .ok_or(EvalError::TimestampOverflow)
}

/// An RFC 3339 text's local part and its zone offset (`Z`, or `±hh:mm` with hours up to 24
/// and minutes up to 60, as Go accepts).
fn split_offset(s: &str) -> Option<(&str, TimeDelta)> {
    if let Some(local) = s.strip_suffix(['Z', 'z']) {
        return Some((local, TimeDelta::zero()));
    }
    let (local, zone) = s.split_at_checked(s.len().checked_sub(6)?)?;
    let z = zone.as_bytes();
    let sign = match z[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    if z[3] != b':'
        || !zone[1..3]
            .bytes()
            .chain(zone[4..].bytes())
            .all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let (hours, minutes): (i64, i64) = (zone[1..3].parse().ok()?, zone[4..].parse().ok()?);
    if hours > 24 || minutes > 60 {
        return None;
    }
    Some((local, TimeDelta::minutes(sign * (hours * 60 + minutes))))
}

fn to_timestamp<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match arg(args, 0)? {
        Value::Timestamp(t) => Ok(Value::Timestamp(*t)),
        Value::String(s) => Ok(Value::Timestamp(parse_timestamp(s)?)),
        Value::Int(i) => Ok(Value::Timestamp(timestamp_from_unix(*i)?)),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn to_duration<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match arg(args, 0)? {
        Value::Duration(d) => Ok(Value::Duration(*d)),
        Value::String(s) => Ok(Value::Duration(parse_duration(s)?)),
        Value::Int(_) => Err(EvalError::msg(
            "type conversion error from 'int' to 'google.protobuf.Duration'",
        )),
        _ => Err(EvalError::no_such_overload()),
    }
}

/// Parses a duration as Go's `time.ParseDuration` (e.g. `1h30m`, `-1.5s`, `300ms`).
pub(crate) fn parse_duration(s: &str) -> Result<TimeDelta, EvalError> {
    let bad = || {
        EvalError::msg(
            "type conversion error from 'string' to 'google.protobuf.Duration'".to_string(),
        )
    };
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Ok(TimeDelta::zero());
    }
    if rest.is_empty() {
        return Err(bad());
    }
    // Go's rules: the whole part must stay within 2^63, the fraction keeps the digits that
    // fit in 63 bits and drops the rest, and is scaled to the unit in float64.
    const LIMIT: u64 = 1 << 63;
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let int_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int_part, after) = rest.split_at(int_end);
        let (frac_part, after) = match after.strip_prefix('.') {
            Some(a) => {
                let e = a.find(|c: char| !c.is_ascii_digit()).unwrap_or(a.len());
                a.split_at(e)
            }
            None => ("", after),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(bad());
        }
        let unit_end = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let scale: u64 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(bad()),
        };
        let mut value: u64 = 0;
        for d in int_part.bytes() {
            value = value
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
                .filter(|v| *v <= LIMIT)
                .ok_or_else(bad)?;
        }
        if value > LIMIT / scale {
            return Err(bad());
        }
        value *= scale;
        let (mut frac, mut div) = (0u64, 1f64);
        for d in frac_part.bytes() {
            match frac
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(d - b'0')))
            {
                Some(f) if f <= LIMIT => {
                    frac = f;
                    div *= 10.0;
                }
                _ => break,
            }
        }
        if frac > 0 {
            // Truncation toward zero, as Go's conversion of a float64 to uint64.
            value = value.saturating_add((frac as f64 * (scale as f64 / div)) as u64);
            if value > LIMIT {
                return Err(bad());
            }
        }
        total = total.checked_add(value).ok_or_else(bad)?;
        if total > LIMIT {
            return Err(bad());
        }
        rest = next;
    }
    if !neg && total == LIMIT {
        return Err(bad());
    }
    let n = if neg {
        (-(total as i128)) as i64
    } else {
        total as i64
    };
    Ok(TimeDelta::nanoseconds(n))
}

/// Formats as Go's `time.RFC3339Nano`: the wall time in the timestamp's zone, then `Z` for
/// UTC or the `±hh:mm` offset.
pub(crate) fn format_timestamp(t: &DateTime<FixedOffset>) -> String {
    let mut out = t.format("%Y-%m-%dT%H:%M:%S").to_string();
    let n = t.nanosecond();
    if n != 0 {
        let frac = format!("{n:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    let offset = t.offset().local_minus_utc();
    if offset == 0 {
        out.push('Z');
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let m = offset.unsigned_abs() / 60;
        out.push_str(&format!("{sign}{:02}:{:02}", m / 60, m % 60));
    }
    out
}

/// Formats as cel-go does: seconds with the shortest decimal form, then `s`.
pub(crate) fn format_duration(d: &TimeDelta) -> String {
    let n = d.num_nanoseconds().unwrap_or(0);
    let neg = n < 0;
    let abs = n.unsigned_abs();
    let secs = abs / 1_000_000_000;
    let frac = abs % 1_000_000_000;
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push_str(&secs.to_string());
    if frac != 0 {
        let f = format!("{frac:09}");
        s.push('.');
        s.push_str(f.trim_end_matches('0'));
    }
    s.push('s');
    s
}

/// Go's `strconv.Atoi` of a time zone offset part, with its error text.
fn atoi(s: &str) -> Result<i64, EvalError> {
    s.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        EvalError::msg(format!("strconv.Atoi: parsing {s:?}: {why}"))
    })
}

/// The wall-clock time of timestamp `args[0]` in time zone `args[1]` (UTC without one), as
/// cel-go reads the zone: an IANA name (empty, `UTC` and `Local` are UTC, as on a server
/// running in UTC), or `[+-]hours:minutes` with any numbers (`-00:30` is half an hour west).
fn in_zone(args: &[Value<'_>]) -> Result<NaiveDateTime, EvalError> {
    let Value::Timestamp(t) = arg(args, 0)? else {
        return Err(EvalError::no_such_overload());
    };
    if args.len() < 2 {
        return Ok(t.naive_utc());
    }
    let tz = str_arg(args, 1)?;
    let Some(i) = tz.find(':') else {
        if matches!(tz, "" | "UTC" | "Local") {
            return Ok(t.naive_utc());
        }
        let zone: chrono_tz::Tz = tz
            .parse()
            .map_err(|_| EvalError::msg(format!("unknown time zone {tz}")))?;
        return Ok(t.with_timezone(&zone).naive_local());
    };
    let hours = atoi(&tz[..i])?;
    let minutes = atoi(&tz[i + 1..])?;
    let offset = if tz.starts_with('-') {
        hours.checked_mul(60).and_then(|h| h.checked_sub(minutes))
    } else {
        hours.checked_mul(60).and_then(|h| h.checked_add(minutes))
    };
    offset
        .and_then(TimeDelta::try_minutes)
        .and_then(|d| t.naive_utc().checked_add_signed(d))
        .ok_or(EvalError::TimestampOverflow)
}

fn duration_of(args: &[Value<'_>]) -> Option<TimeDelta> {
    match args.first() {
        Some(Value::Duration(d)) => Some(*d),
        _ => None,
    }
}

fn get_full_year<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(in_zone(args)?.year())))
}
fn get_month<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(in_zone(args)?.month0())))
}
fn get_day_of_year<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(in_zone(args)?.ordinal0())))
}
fn get_day_of_month<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(in_zone(args)?.day0())))
}
fn get_date<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(in_zone(args)?.day())))
}
fn get_day_of_week<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(
        in_zone(args)?.weekday().num_days_from_sunday(),
    )))
}
fn get_hours<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    if let Some(d) = duration_of(args) {
        return Ok(Value::Int(d.num_hours()));
    }
    Ok(Value::Int(i64::from(in_zone(args)?.hour())))
}
fn get_minutes<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    if let Some(d) = duration_of(args) {
        return Ok(Value::Int(d.num_minutes()));
    }
    Ok(Value::Int(i64::from(in_zone(args)?.minute())))
}
fn get_seconds<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    if let Some(d) = duration_of(args) {
        return Ok(Value::Int(d.num_seconds()));
    }
    Ok(Value::Int(i64::from(in_zone(args)?.second())))
}
fn get_milliseconds<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    if let Some(d) = duration_of(args) {
        return Ok(Value::Int(d.num_milliseconds()));
    }
    Ok(Value::Int(i64::from(
        in_zone(args)?.nanosecond() / 1_000_000,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("1h30m").ok(), Some(TimeDelta::minutes(90)));
        assert_eq!(
            parse_duration("-1.5s").ok(),
            Some(TimeDelta::milliseconds(-1500))
        );
        assert!(parse_duration("1d").is_err());
        // A fraction longer than 63 bits keeps its leading digits (found by the fuzzer, where
        // the exact sum overflowed); cel-go reads this as 3723444444444 ns.
        let long = format!("1h2m3.{}5s", "4".repeat(120));
        assert_eq!(
            parse_duration(&long).ok(),
            Some(TimeDelta::nanoseconds(3_723_444_444_444))
        );
        assert_eq!(
            parse_duration("-9223372036854775808ns").ok(),
            Some(TimeDelta::nanoseconds(i64::MIN))
        );
        assert!(parse_duration("9223372036854775808ns").is_err());
        assert!(parse_duration("92233720368547758070ns").is_err());
        assert_eq!(format_duration(&TimeDelta::milliseconds(1500)), "1.5s");
    }

    #[test]
    fn timestamps_round_trip() {
        let t = parse_timestamp("2009-02-13T23:31:30.120Z").ok();
        assert_eq!(
            t.map(|t| format_timestamp(&t)).as_deref(),
            Some("2009-02-13T23:31:30.12Z")
        );
    }

    #[test]
    fn timestamps_keep_their_offset_as_go_does() {
        let cases = [
            (
                "string(timestamp('2024-01-02T03:04:05.000000001+05:30'))",
                "\"2024-01-02T03:04:05.000000001+05:30\"",
            ),
            (
                "string(timestamp('2024-01-02T03:04:05-08:00') + duration('1h'))",
                "\"2024-01-02T04:04:05-08:00\"",
            ),
            (
                "string(timestamp('2024-01-02T03:04:05+00:00'))",
                "\"2024-01-02T03:04:05Z\"",
            ),
            ("timestamp('2024-01-02T03:04:05+05:30').getHours()", "21"),
            (
                "timestamp('2024-01-02T03:04:05+05:30') == timestamp('2024-01-01T21:34:05Z')",
                "true",
            ),
            ("string(timestamp(0))", "\"1970-01-01T00:00:00Z\""),
        ];
        for (src, want) in cases {
            assert_eq!(crate::libs::testing::eval(src), want, "{src}");
        }
    }
}
