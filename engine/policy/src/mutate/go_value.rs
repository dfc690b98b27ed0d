//! An apply configuration as kube-apiserver holds it once converted from CEL to Go
//! (`ObjectVal.ConvertToNative`): JSON-shaped data, except where a CEL value is kept as the Go
//! value cel-go gives for it (`ref.Val.Value()`), which structured-merge-diff's typed
//! conversion takes for none of its types and so always refuses: a `null` (protobuf's
//! `NullValue`), a `uint`, bytes, a timestamp, a duration, a type, a library's opaque value,
//! a list or map literal inside another list or map literal (`[]ref.Val`,
//! `map[ref.Val]ref.Val`), an `Object` that failed to convert (a `*types.Err`). Such values are
//! marked, with the text Go prints for them, where they stand; their JSON is a null that no
//! merge ever sees (the typed conversion refuses them first).

use celgate_cel::Value;
use celgate_cel::value::{List, Map, format_double};

/// How Go prints a value in structured-merge-diff's errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct GoValue {
    /// `%T`.
    pub(super) type_name: String,
    /// `%v`.
    pub(super) plain: String,
    /// `%#v`.
    pub(super) sharp: String,
}

/// Where an apply configuration holds Go values the typed conversion refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Foreign {
    /// This value is one.
    Here(GoValue),
    /// Some below: of members by name, of list items by index.
    Below(Vec<(Place, Foreign)>),
}

/// A step below a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Place {
    Member(String),
    Item(usize),
}

impl Foreign {
    /// The Go value here, if this value is one.
    pub(super) fn here(&self) -> Option<&GoValue> {
        match self {
            Foreign::Here(g) => Some(g),
            Foreign::Below(_) => None,
        }
    }

    /// What is below member `key`.
    pub(super) fn member(&self, key: &str) -> Option<&Foreign> {
        self.below(|p| matches!(p, Place::Member(k) if k == key))
    }

    /// What is below list item `index`.
    pub(super) fn item(&self, index: usize) -> Option<&Foreign> {
        self.below(|p| *p == Place::Item(index))
    }

    fn below(&self, at: impl Fn(&Place) -> bool) -> Option<&Foreign> {
        match self {
            Foreign::Here(_) => None,
            Foreign::Below(places) => places.iter().find(|(p, _)| at(p)).map(|(_, f)| f),
        }
    }

    /// Forgets what is below member `key` (a member replaced).
    pub(super) fn forget(&mut self, key: &str) {
        if let Foreign::Below(places) = self {
            places.retain(|(p, _)| !matches!(p, Place::Member(k) if k == key));
        }
    }

    /// Marks collected below a value, if any.
    pub(super) fn of(places: Vec<(Place, Foreign)>) -> Option<Foreign> {
        (!places.is_empty()).then_some(Foreign::Below(places))
    }
}

/// A converted value: its JSON and the Go values below it the typed conversion refuses.
pub(super) type Converted = (serde_json::Value, Option<Foreign>);

/// How deep a value may nest before it is refused (a guard against stack exhaustion).
const MAX_DEPTH: usize = 256;

/// The fields of an `Object` literal as upstream converts them (`ConvertToNative`); `Err` with
/// upstream's text when a map literal among them has a key other than a string.
pub(super) fn object(
    fields: &[(std::sync::Arc<str>, Value<'_>)],
    depth: usize,
) -> Result<Converted, String> {
    if depth > MAX_DEPTH {
        return Err("value nests too deeply".into());
    }
    let mut out = serde_json::Map::with_capacity(fields.len());
    let mut marks = Vec::new();
    for (name, v) in fields {
        let (json, foreign) = field(v, depth + 1)
            .map_err(|e| format!("fail to convert field {}: {e}", go_quote(name)))?;
        if let Some(f) = foreign {
            marks.push((Place::Member(String::from(&**name)), f));
        }
        out.insert(String::from(&**name), json);
    }
    Ok((serde_json::Value::Object(out), Foreign::of(marks)))
}

/// A field's value (upstream's `convertField`): a list or map literal becomes a list or map of
/// its items' Go values; anything else its own Go value.
fn field(v: &Value<'_>, depth: usize) -> Result<Converted, String> {
    match v {
        Value::Optional(Some(inner)) => field(inner, depth),
        Value::List(List::Owned(items)) => {
            let mut out = Vec::with_capacity(items.len());
            let mut marks = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let (json, foreign) = native(item, depth + 1);
                if let Some(f) = foreign {
                    marks.push((Place::Item(i), f));
                }
                out.push(json);
            }
            Ok((serde_json::Value::Array(out), Foreign::of(marks)))
        }
        Value::Map(m @ Map::Owned(_)) => {
            let mut out = serde_json::Map::with_capacity(m.len());
            let mut marks = Vec::new();
            for (key, item) in m.entries() {
                let Value::String(key) = key else {
                    return Err(format!(
                        "map key {} is of type {}, not string",
                        quoted_key(&key),
                        ref_type(&key)
                    ));
                };
                let (json, foreign) = native(&item, depth + 1);
                if let Some(f) = foreign {
                    marks.push((Place::Member(String::from(&*key)), f));
                }
                out.insert(String::from(&*key), json);
            }
            Ok((serde_json::Value::Object(out), Foreign::of(marks)))
        }
        other => Ok(native(other, depth)),
    }
}

/// A value's Go value (cel-go's `Value()`): JSON data and `Object`s convert; the rest stays a
/// Go value the typed conversion refuses.
fn native(v: &Value<'_>, depth: usize) -> Converted {
    let plain = |json| (json, None);
    match v {
        Value::Bool(b) => plain(serde_json::Value::Bool(*b)),
        Value::Int(i) => plain(serde_json::Value::from(*i)),
        Value::Double(d) => plain(
            serde_json::Number::from_f64(*d)
                .map_or(serde_json::Value::Null, serde_json::Value::Number),
        ),
        Value::String(s) => plain(serde_json::Value::String(String::from(&**s))),
        Value::List(List::Json(_) | List::Tape(_))
        | Value::Map(Map::Json(_) | Map::Tape(_) | Map::Layered(_)) => {
            plain(v.to_json().unwrap_or(serde_json::Value::Null))
        }
        Value::Optional(None) => plain(serde_json::Value::Null),
        Value::Optional(Some(inner)) => native(inner, depth),
        Value::Struct(s) => match object(s.fields(), depth + 1) {
            Ok(converted) => converted,
            Err(e) => foreign(GoValue {
                type_name: "*types.Err".into(),
                sharp: format!("&types.Err{{error:{}}}", go_quote(&e)),
                plain: e,
            }),
        },
        other => foreign(go_value(other)),
    }
}

/// The Go value of a value upstream's conversion takes as it is wherever it stands (a boolean,
/// a number, a string, or data read from the request's JSON): its JSON. `None` for any other,
/// whose conversion depends on where it stands (a list or map literal, an `Object`) or which
/// is kept as a Go value the typed conversion refuses.
pub(super) fn plain(v: &Value<'_>) -> Option<serde_json::Value> {
    match v {
        Value::Bool(_)
        | Value::Int(_)
        | Value::Double(_)
        | Value::String(_)
        | Value::List(List::Json(_) | List::Tape(_))
        | Value::Map(Map::Json(_) | Map::Tape(_) | Map::Layered(_)) => Some(native(v, 0).0),
        _ => None,
    }
}

fn foreign(g: GoValue) -> Converted {
    (serde_json::Value::Null, Some(Foreign::Here(g)))
}

/// How Go prints the Go value of a CEL value the typed conversion refuses.
fn go_value(v: &Value<'_>) -> GoValue {
    let (type_name, plain, sharp): (&str, String, String) = match v {
        Value::Null => ("structpb.NullValue", "NULL_VALUE".into(), "0".into()),
        Value::Uint(u) => ("uint64", u.to_string(), format!("0x{u:x}")),
        Value::Bytes(b) => ("[]uint8", go_bytes(b), bytes_sharp("[]byte", b)),
        Value::Timestamp(_) => ("time.Time", ref_plain(v), ref_plain(v)),
        Value::Duration(d) => (
            "time.Duration",
            go_duration(d),
            d.num_nanoseconds().unwrap_or(i64::MAX).to_string(),
        ),
        Value::List(l) => (
            "[]ref.Val",
            format!(
                "[{}]",
                l.iter()
                    .map(|e| ref_plain(&e))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            format!(
                "[]ref.Val{{{}}}",
                l.iter()
                    .map(|e| ref_sharp(&e))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Value::Map(m) => {
            let mut entries: Vec<(String, String, String, String)> = m
                .entries()
                .iter()
                .map(|(k, v)| (ref_plain(k), ref_plain(v), ref_sharp(k), ref_sharp(v)))
                .collect();
            // Go prints a map's entries sorted by key.
            entries.sort();
            let plain: Vec<String> = entries
                .iter()
                .map(|(k, v, _, _)| format!("{k}:{v}"))
                .collect();
            let sharp: Vec<String> = entries
                .iter()
                .map(|(_, _, k, v)| format!("{k}:{v}"))
                .collect();
            (
                "map[ref.Val]ref.Val",
                format!("map[{}]", plain.join(" ")),
                format!("map[ref.Val]ref.Val{{{}}}", sharp.join(", ")),
            )
        }
        Value::Type(t) => ("*types.Type", t.to_string(), t.to_string()),
        Value::Opaque(o) => (
            o.go_type_name(),
            o.type_name().to_string(),
            o.type_name().to_string(),
        ),
        other => (other.type_name(), ref_plain(other), ref_plain(other)),
    };
    GoValue {
        type_name: type_name.to_string(),
        plain,
        sharp,
    }
}

/// Go's `%v` of a CEL value itself (a `ref.Val`), as a list or map literal holds it.
fn ref_plain(v: &Value<'_>) -> String {
    match v {
        // cel-go's null type prints as the number it is.
        Value::Null => "0".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Double(d) => format_double(*d),
        Value::String(s) => s.to_string(),
        Value::Bytes(b) => go_bytes(b),
        Value::List(l) => format!(
            "[{}]",
            l.iter()
                .map(|e| ref_plain(&e))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Map(m) => format!(
            "{{{}}}",
            m.entries()
                .iter()
                .map(|(k, v)| format!("{}: {}", ref_plain(k), ref_plain(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Value::Timestamp(t) => t.format("%Y-%m-%d %H:%M:%S%.f %z").to_string(),
        Value::Duration(d) => go_duration(d),
        Value::Optional(Some(inner)) => format!("optional.of({})", ref_plain(inner)),
        Value::Optional(None) => "optional.none()".into(),
        Value::Type(t) => t.to_string(),
        Value::Opaque(o) => o.type_name().to_string(),
        // A pointer without a String method: Go prints its address.
        Value::Struct(_) => "0xc000000000".into(),
    }
}

/// Go's `%#v` of a CEL value itself, as a list or map literal holds it.
fn ref_sharp(v: &Value<'_>) -> String {
    match v {
        Value::Uint(u) => format!("0x{u:x}"),
        Value::String(s) => go_quote(s),
        Value::Bytes(b) => bytes_sharp("types.Bytes", b),
        Value::List(_) => "(*types.baseList)(0xc000000000)".into(),
        Value::Map(_) => "(*types.baseMap)(0xc000000000)".into(),
        Value::Struct(_) => "(*dynamic.ObjectVal)(0xc000000000)".into(),
        other => ref_plain(other),
    }
}

/// cel-go's Go type of a map key (`%T`).
fn ref_type(v: &Value<'_>) -> String {
    match v {
        Value::Null => "types.Null".into(),
        Value::Bool(_) => "types.Bool".into(),
        Value::Int(_) => "types.Int".into(),
        Value::Uint(_) => "types.Uint".into(),
        Value::Double(_) => "types.Double".into(),
        other => format!("types.{}", other.type_name()),
    }
}

/// Go's `%q` of a map key other than a string: integers as the character of that code.
fn quoted_key(v: &Value<'_>) -> String {
    let code = match v {
        Value::Null => 0,
        Value::Int(i) => u64::try_from(*i).unwrap_or(u64::MAX),
        Value::Uint(u) => *u,
        other => return format!("%!q({}={})", ref_type(other), ref_plain(other)),
    };
    let c = u32::try_from(code)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or(char::REPLACEMENT_CHARACTER);
    let body = match c {
        '\x07' => "\\a".to_string(),
        '\x08' => "\\b".to_string(),
        '\x0c' => "\\f".to_string(),
        '\n' => "\\n".to_string(),
        '\r' => "\\r".to_string(),
        '\t' => "\\t".to_string(),
        '\x0b' => "\\v".to_string(),
        '\\' => "\\\\".to_string(),
        '\'' => "\\'".to_string(),
        c if (c as u32) < 0x20 || c == '\x7f' => format!("\\x{:02x}", c as u32),
        c if c.is_control() && (c as u32) < 0x10000 => format!("\\u{:04x}", c as u32),
        c if c.is_control() => format!("\\U{:08x}", c as u32),
        c => c.to_string(),
    };
    format!("'{body}'")
}

/// Go's `%q` of a string (near enough: JSON's quoting).
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// Go's `%v` of a byte slice.
fn go_bytes(b: &[u8]) -> String {
    let items: Vec<String> = b.iter().map(u8::to_string).collect();
    format!("[{}]", items.join(" "))
}

/// Go's `%#v` of a byte slice of type `ty`.
fn bytes_sharp(ty: &str, b: &[u8]) -> String {
    let items: Vec<String> = b.iter().map(|x| format!("0x{x:x}")).collect();
    format!("{ty}{{{}}}", items.join(", "))
}

/// Go's `time.Duration.String()`: `1h2m3.5s`, `1.5ms`, `0s`.
fn go_duration(d: &chrono::TimeDelta) -> String {
    let n = d.num_nanoseconds().unwrap_or(i64::MAX);
    if n == 0 {
        return "0s".into();
    }
    let sign = if n < 0 { "-" } else { "" };
    let abs = n.unsigned_abs();
    // Below a second: one unit, with a fraction.
    let fraction = |value: u64, unit: u64| {
        let whole = value / unit;
        let rest = value % unit;
        if rest == 0 {
            whole.to_string()
        } else {
            let digits = unit.to_string().len() - 1;
            let text = format!("{rest:0digits$}");
            format!("{whole}.{}", text.trim_end_matches('0'))
        }
    };
    if abs < 1_000 {
        return format!("{sign}{abs}ns");
    }
    if abs < 1_000_000 {
        return format!("{sign}{}µs", fraction(abs, 1_000));
    }
    if abs < 1_000_000_000 {
        return format!("{sign}{}ms", fraction(abs, 1_000_000));
    }
    let secs = fraction(abs % 60_000_000_000, 1_000_000_000);
    let minutes = abs / 60_000_000_000;
    let (h, m) = (minutes / 60, minutes % 60);
    if h > 0 {
        format!("{sign}{h}h{m}m{secs}s")
    } else if m > 0 {
        format!("{sign}{m}m{secs}s")
    } else {
        format!("{sign}{secs}s")
    }
}
