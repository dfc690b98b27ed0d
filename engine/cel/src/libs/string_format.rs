//! `<string>.format(list)` of cel-go's strings extension as version 2 (Kubernetes' version)
//! defines it: clauses `%s %d %f %e %b %o %x %X %%`, with `%f`/`%e` localised for `en_US` as
//! cel-go's `golang.org/x/text` printer does (digit grouping, `∞`, `× 10ⁿ` exponents), and
//! cel-go's error texts.

use std::collections::HashMap;
use std::fmt::Write;

use super::ip::go_quote;
use super::time::{format_duration, format_timestamp};
use super::{arg, str_arg};
use crate::ast::{Expr, ExprKind};
use crate::cost::{STRING_GROWTH_LIMIT, actual_size, string_growth_exceeded, traversal_cost};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::format_double;
use crate::value::{List, Value};

pub(crate) fn register(r: &mut Registry) {
    r.def("format")
        .member(&[Type::String, Type::list(Type::Dyn)], Type::String)
        .imp(format)
        .cost(|args, _| traversal_cost(args.first().map(actual_size).unwrap_or(0)))
        .grows()
        .done();
}

/// What the formatting functions fail with once the text passes [`STRING_GROWTH_LIMIT`]
/// (celgate's bound, not a cel-go text): [`format`] turns it into its typed error.
const TOO_LARGE: &str = "\0string growth";

/// [`TOO_LARGE`] once `len` bytes pass the bound.
fn bounded(len: usize) -> Result<(), String> {
    if len as u64 > STRING_GROWTH_LIMIT {
        return Err(TOO_LARGE.into());
    }
    Ok(())
}

const DEFAULT_PRECISION: usize = 6;

/// A clause error: `error during formatting: …` once wrapped.
fn clause_error(what: &str, v: &Value<'_>) -> String {
    format!("{what}, was given {}", v.type_name())
}

const STRING_CLAUSE_REQUIREMENT: &str = "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps";

fn string_clause_error(v: &Value<'_>) -> String {
    clause_error(STRING_CLAUSE_REQUIREMENT, v)
}

/// `%s` of one value.
fn format_string(v: &Value<'_>) -> Result<String, String> {
    Ok(match v {
        Value::List(l) => format_list(l)?,
        Value::Map(_) => format_map(v)?,
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Double(d) => format_double(*d),
        Value::Bool(b) => b.to_string(),
        Value::String(s) => s.to_string(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Timestamp(t) => format_timestamp(t),
        Value::Duration(d) => format_duration(d),
        Value::Type(t) => t.to_string(),
        Value::Null => "null".into(),
        other => return Err(string_clause_error(other)),
    })
}

/// A list or map member, as a CEL literal.
fn format_member(v: &Value<'_>) -> Result<String, String> {
    Ok(match v {
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::String(s) => go_quote(s),
        Value::Bytes(b) => format!("b{}", go_quote(&String::from_utf8_lossy(b))),
        Value::Bool(_) | Value::Null | Value::Type(_) => format_string(v)?,
        Value::Timestamp(t) => format!("timestamp({})", go_quote(&format_timestamp(t))),
        Value::Duration(d) => format!("duration({})", go_quote(&format_duration(d))),
        Value::List(l) => format_list(l)?,
        Value::Map(_) => format_map(v)?,
        Value::Double(d) => {
            let s = go_fixed(*d, DEFAULT_PRECISION);
            if d.is_finite() { s } else { go_quote(&s) }
        }
        other => return Err(format!("no formatting function for {}", other.type_name())),
    })
}

fn format_list(l: &List<'_>) -> Result<String, String> {
    let mut len = 0;
    let items = l
        .iter()
        .map(|v| {
            let s = format_member(&v)?;
            len += s.len() + 2;
            bounded(len).map(|()| s)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!("[{}]", items.join(", ")))
}

fn format_map(v: &Value<'_>) -> Result<String, String> {
    let Value::Map(m) = v else {
        return Err(string_clause_error(v));
    };
    let mut pairs = Vec::with_capacity(m.len());
    let mut len = 0;
    for (k, val) in m.entries() {
        let key = match &k {
            Value::String(s) => go_quote(s),
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Uint(u) => u.to_string(),
            other => {
                return Err(format!(
                    "no formatting function for map key of type {}",
                    other.type_name()
                ));
            }
        };
        let member = format_member(&val)?;
        len += key.len() + member.len() + 3;
        bounded(len)?;
        pairs.push((key, member));
    }
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    let body: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}:{v}")).collect();
    Ok(format!("{{{}}}", body.join(", ")))
}

/// Go's `fmt.Sprintf("%.Nf", d)` (infinities as `+Inf`/`-Inf`).
fn go_fixed(d: f64, precision: usize) -> String {
    if d.is_nan() {
        "NaN".into()
    } else if d.is_infinite() {
        if d > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{d:.precision$}")
    }
}

/// The double a `%f`/`%e` clause formats: a double, or the strings `NaN`, `Infinity` and
/// `-Infinity`.
fn clause_double(v: &Value<'_>, what: &str) -> Result<f64, String> {
    match v {
        Value::Double(d) => Ok(*d),
        Value::String(s) if &**s == "NaN" => Ok(f64::NAN),
        Value::String(s) if &**s == "Infinity" => Ok(f64::INFINITY),
        Value::String(s) if &**s == "-Infinity" => Ok(f64::NEG_INFINITY),
        other => Err(clause_error(what, other)),
    }
}

/// `en_US` digit grouping of an unsigned integer part.
fn group(int: &str) -> String {
    let mut out = String::with_capacity(int.len() + int.len() / 3);
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn localized_special(d: f64) -> Option<String> {
    if d.is_nan() {
        Some("NaN".into())
    } else if d.is_infinite() {
        Some(if d > 0.0 { "∞".into() } else { "-∞".into() })
    } else {
        None
    }
}

/// Digits after which a double's exact decimal expansion is all zeros (the smallest subnormal
/// has 1074 fractional digits).
const EXACT_FRACTION_DIGITS: usize = 1100;

/// The most characters a precision or width may ask for: cel-go would build any string, but an
/// expression must not make the process allocate without bound.
const MAX_CLAUSE_WIDTH: usize = 1 << 24;

/// `|d|` with `precision` fractional digits, exactly (Rust's formatter caps precisions).
fn fixed_abs(d: f64, precision: usize) -> String {
    if precision <= EXACT_FRACTION_DIGITS {
        return format!("{:.precision$}", d.abs());
    }
    let mut s = format!("{:.EXACT_FRACTION_DIGITS$}", d.abs());
    s.extend(std::iter::repeat_n('0', precision - EXACT_FRACTION_DIGITS));
    s
}

/// `%.Nf` through the `en_US` printer (negative zero loses its sign).
fn localized_fixed(d: f64, precision: usize) -> String {
    if let Some(s) = localized_special(d) {
        return s;
    }
    let s = fixed_abs(d, precision);
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let sign = if d < 0.0 { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{}", group(int))
    } else {
        format!("{sign}{}.{frac}", group(int))
    }
}

/// cel-go's `%e` clause: it prints with `%<N>e` through the `en_US` printer, so the clause's
/// precision is a minimum width (in characters, space-padded on the left) and the precision is
/// always 6: `1.052033×10⁰³`. A width of 0 is Go's zero-padding flag, which pads nothing.
fn localized_scientific(d: f64, width: usize) -> String {
    let s = match localized_special(d) {
        Some(s) => s,
        None => {
            let s = format!("{:.6e}", d.abs());
            let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
            let exp: i32 = exp.parse().unwrap_or(0);
            const SUPER: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
            let sign = if d < 0.0 { "-" } else { "" };
            let mut out = format!("{sign}{mantissa}×10");
            if exp < 0 {
                out.push('⁻');
            }
            for c in format!("{:02}", exp.unsigned_abs()).bytes() {
                out.push(SUPER[usize::from(c - b'0')]);
            }
            out
        }
    };
    let len = s.chars().count();
    if len >= width {
        s
    } else {
        " ".repeat(width - len) + &s
    }
}

/// Go's `%b`, `%o`, `%x` and `%X` of a signed or unsigned integer.
fn radix(v: &Value<'_>, base: u32, upper: bool) -> Option<String> {
    let (neg, mag) = match v {
        Value::Int(i) => (*i < 0, i.unsigned_abs()),
        Value::Uint(u) => (false, *u),
        _ => return None,
    };
    let digits = match (base, upper) {
        (2, _) => format!("{mag:b}"),
        (8, _) => format!("{mag:o}"),
        (_, false) => format!("{mag:x}"),
        (_, true) => format!("{mag:X}"),
    };
    Some(if neg { format!("-{digits}") } else { digits })
}

fn hex_bytes(b: &[u8], upper: bool) -> String {
    let mut out = String::with_capacity(b.len() * 2);
    for byte in b {
        let _ = if upper {
            write!(out, "{byte:02X}")
        } else {
            write!(out, "{byte:02x}")
        };
    }
    out
}

/// Formats `v` with clause `verb` (and precision, for `%f`/`%e`).
fn apply(verb: u8, precision: Option<usize>, v: &Value<'_>) -> Result<String, String> {
    let p = precision.unwrap_or(DEFAULT_PRECISION);
    let too_wide = || format!("precision {p} is more than the supported {MAX_CLAUSE_WIDTH}");
    match verb {
        b's' => format_string(v),
        b'd' => match v {
            Value::Int(i) => Ok(i.to_string()),
            Value::Uint(u) => Ok(u.to_string()),
            other => Err(clause_error(
                "decimal clause can only be used on integers",
                other,
            )),
        },
        b'f' => {
            let d = clause_double(v, "fixed-point clause can only be used on doubles")?;
            if p > MAX_CLAUSE_WIDTH {
                return Err(too_wide());
            }
            Ok(localized_fixed(d, p))
        }
        b'e' => {
            let d = clause_double(v, "scientific clause can only be used on doubles")?;
            if p > MAX_CLAUSE_WIDTH {
                return Err(too_wide());
            }
            Ok(localized_scientific(d, p))
        }
        b'b' => match v {
            Value::Bool(b) => Ok(if *b { "1" } else { "0" }.into()),
            other => radix(other, 2, false).ok_or_else(|| {
                clause_error("only integers and bools can be formatted as binary", other)
            }),
        },
        b'o' => radix(v, 8, false)
            .ok_or_else(|| clause_error("octal clause can only be used on integers", v)),
        b'x' | b'X' => {
            let upper = verb == b'X';
            match v {
                Value::String(s) => Ok(hex_bytes(s.as_bytes(), upper)),
                Value::Bytes(b) => Ok(hex_bytes(b, upper)),
                other => radix(other, 16, upper).ok_or_else(|| {
                    clause_error(
                        "only integers, byte buffers, and strings can be formatted as hex",
                        other,
                    )
                }),
            }
        }
        other => Err(unrecognized(other)),
    }
}

fn unrecognized(verb: u8) -> String {
    format!(
        "could not parse formatting clause: unrecognized formatting clause \"{}\"",
        verb as char
    )
}

/// Parses the clause after a `%` at byte `start` (optional `.digits` precision, then the verb):
/// the verb, the precision and the index after the clause. Errors are cel-go's texts.
fn parse_clause(fmt: &str, start: usize) -> Result<(u8, Option<usize>, usize), String> {
    let b = fmt.as_bytes();
    let mut j = start;
    let mut precision = None;
    if b.get(j) == Some(&b'.') {
        j += 1;
        let digits_start = j;
        while j < b.len() && b[j].is_ascii_digit() {
            j += 1;
        }
        if j >= b.len() {
            return Err("could not parse formatting clause: error while parsing precision: could not find end of precision specifier".into());
        }
        let digits = &fmt[digits_start..j];
        precision = Some(digits.parse::<usize>().map_err(|_| {
            format!(
                "could not parse formatting clause: error while parsing precision: error while converting precision to integer: strconv.Atoi: parsing {}: {}",
                go_quote(digits),
                if digits.is_empty() { "invalid syntax" } else { "value out of range" }
            )
        })?);
    }
    let Some(&verb) = b.get(j) else {
        return Err("unexpected end of string".into());
    };
    if !b"sdfebxXo".contains(&verb) {
        return Err(unrecognized(verb));
    }
    Ok((verb, precision, j + 1))
}

/// cel-go's `parseFormatString` over `args`.
fn interpolate(fmt: &str, args: &List<'_>) -> Result<String, String> {
    let b = fmt.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    let mut arg_index = 0usize;
    while i < b.len() {
        if b[i] != b'%' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        if b.get(i + 1) == Some(&b'%') {
            out.push(b'%');
            i += 2;
            continue;
        }
        let Some(v) = args.get(arg_index) else {
            return Err(format!("index {arg_index} out of range"));
        };
        if i + 1 >= b.len() {
            return Err("unexpected end of string".into());
        }
        let (verb, precision, next) = parse_clause(fmt, i + 1)?;
        let s = apply(verb, precision, &v).map_err(|e| {
            if e == TOO_LARGE {
                e
            } else {
                format!("error during formatting: {e}")
            }
        })?;
        out.extend_from_slice(s.as_bytes());
        bounded(out.len().saturating_sub(b.len()))?;
        i = next;
        arg_index += 1;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// The runtime type kinds clause `verb` accepts at check time (`dyn` always passes).
fn clause_accepts(verb: u8, t: &Type) -> bool {
    match verb {
        b'd' | b'o' => matches!(t, Type::Int | Type::Uint),
        b'f' | b'e' => matches!(t, Type::Double | Type::String),
        b'b' => matches!(t, Type::Int | Type::Uint | Type::Bool),
        b'x' | b'X' => matches!(t, Type::Int | Type::Uint | Type::String | Type::Bytes),
        _ => matches!(
            t,
            Type::List(_)
                | Type::Map(..)
                | Type::Int
                | Type::Uint
                | Type::Double
                | Type::Bool
                | Type::String
                | Type::Timestamp
                | Type::Bytes
                | Type::Duration
                | Type::Type(_)
                | Type::Null
        ),
    }
}

/// The clause-specific part of a type error (`… can only be used on …`).
fn clause_requirement(verb: u8) -> &'static str {
    match verb {
        b'd' => "decimal clause can only be used on integers",
        b'o' => "octal clause can only be used on integers",
        b'f' => "fixed-point clause can only be used on doubles",
        b'e' => "scientific clause can only be used on doubles",
        b'b' => "only integers and bools can be formatted as binary",
        b'x' | b'X' => "only integers, byte buffers, and strings can be formatted as hex",
        _ => STRING_CLAUSE_REQUIREMENT,
    }
}

/// The first node under a `%s` argument whose checked type `%s` cannot format: the argument
/// itself, or an element or entry of a list or map literal.
fn unformattable<'e>(e: &'e Expr, types: &HashMap<u64, Type>) -> Option<(&'e Expr, Type)> {
    let t = types.get(&e.id).cloned().unwrap_or(Type::Dyn);
    if !t.is_dyn() && !clause_accepts(b's', &t) {
        return Some((e, t));
    }
    match &e.kind {
        ExprKind::List { elements, .. } => elements.iter().find_map(|x| unformattable(x, types)),
        ExprKind::Map { entries } => entries.iter().find_map(|en| {
            unformattable(&en.key, types).or_else(|| unformattable(&en.value, types))
        }),
        _ => None,
    }
}

/// cel-go's check-time validation of `'<literal>'.format([<list literal>])` (call node
/// `call_id`): the format string must parse, every clause must accept its argument's checked
/// type, and every argument must be used. The error's node and message, if any.
pub(crate) fn validate_call(
    call_id: u64,
    fmt: &str,
    args: &[Expr],
    types: &HashMap<u64, Type>,
) -> Option<(u64, String)> {
    let b = fmt.as_bytes();
    let mut i = 0;
    let mut requested = 0usize;
    while i < b.len() {
        if b[i] != b'%' {
            i += 1;
            continue;
        }
        if b.get(i + 1) == Some(&b'%') {
            i += 2;
            continue;
        }
        // The check-time argument list never runs out, so the end of the string is noticed
        // before a missing argument.
        let index = requested;
        requested += 1;
        if i + 1 >= b.len() {
            return Some((call_id, "unexpected end of string".into()));
        }
        let Some(arg) = args.get(index) else {
            return Some((call_id, format!("index {index} out of range")));
        };
        let (verb, _, next) = match parse_clause(fmt, i + 1) {
            Ok(c) => c,
            Err(e) => return Some((call_id, e)),
        };
        let bad = if verb == b's' {
            unformattable(arg, types)
        } else {
            let t = types.get(&arg.id).cloned().unwrap_or(Type::Dyn);
            (!t.is_dyn() && !clause_accepts(verb, &t)).then_some((arg, t))
        };
        if let Some((at, t)) = bad {
            return Some((
                at.id,
                format!(
                    "error during formatting: {}, was given {}",
                    clause_requirement(verb),
                    t.runtime_name()
                ),
            ));
        }
        i = next;
    }
    (args.len() > requested).then(|| {
        (
            call_id,
            format!(
                "too many arguments supplied to string.format (expected {requested}, got {})",
                args.len()
            ),
        )
    })
}

fn format<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let fmt = str_arg(args, 0)?;
    let Value::List(l) = arg(args, 1)? else {
        return Err(EvalError::no_such_overload());
    };
    interpolate(fmt, l).map(Value::string).map_err(|e| {
        if e == TOO_LARGE {
            string_growth_exceeded("format")
        } else {
            EvalError::msg(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::eval;

    #[test]
    fn table() {
        // Error cases pass `dyn` lists: literal lists are validated at compile time.
        let cases: &[(&str, &str)] = &[
            ("'no substitution'.format([])", "\"no substitution\""),
            (
                "'str is %s and some more'.format(['filler'])",
                "\"str is filler and some more\"",
            ),
            ("'%% and also %%'.format([])", "\"% and also %\""),
            ("'%%%s%%'.format(['text'])", "\"%text%\""),
            (
                "'%d %d %d, %s %s %s'.format([dyn(1), dyn(2), dyn(3), dyn('A'), dyn('B'), dyn('C')])",
                "\"1 2 3, A B C\"",
            ),
            ("'%.3f'.format([1.2345])", "\"1.234\""),
            ("'%f'.format([2.71828])", "\"2.718280\""),
            ("'%.2f'.format([1234567.891])", "\"1,234,567.89\""),
            ("'%f'.format(['NaN'])", "\"NaN\""),
            ("'%f'.format(['Infinity'])", "\"∞\""),
            ("'%f'.format(['-Infinity'])", "\"-∞\""),
            // `%e`'s precision is cel-go's minimum width; the precision is always 6.
            ("'%.6e'.format([1052.032911275])", "\"1.052033×10⁰³\""),
            ("'%e'.format([2.71828])", "\"2.718280×10⁰⁰\""),
            ("'%.1e'.format([0.00012])", "\"1.200000×10⁻⁰⁴\""),
            ("'%.14e'.format([1.5])", "\" 1.500000×10⁰⁰\""),
            ("'%e'.format([-0.0])", "\"0.000000×10⁰⁰\""),
            ("'%e'.format([-1e-100])", "\"-1.000000×10⁻¹⁰⁰\""),
            ("'%e'.format(['Infinity'])", "\"     ∞\""),
            ("'%.3e'.format(['NaN'])", "\"NaN\""),
            ("'%.0e'.format(['-Infinity'])", "\"-∞\""),
            ("'%.2f'.format([-0.001])", "\"-0.00\""),
            ("'%.3f'.format([-0.0])", "\"0.000\""),
            (
                "'%.30f'.format([0.1])",
                "\"0.100000000000000005551115123126\"",
            ),
            (
                "'%.99999999f'.format(dyn([0.1]))",
                "error: error during formatting: precision 99999999 is more than the supported 16777216",
            ),
            (
                "'this is 5 in binary: %b'.format([5])",
                "\"this is 5 in binary: 101\"",
            ),
            ("'%b'.format([-5])", "\"-101\""),
            ("'%b'.format([uint(64)])", "\"1000000\""),
            ("'%b'.format([true])", "\"1\""),
            ("'%o'.format([11])", "\"13\""),
            ("'%o'.format([-11])", "\"-13\""),
            ("'%x'.format([30])", "\"1e\""),
            ("'%X'.format([30])", "\"1E\""),
            ("'%x'.format([-30])", "\"-1e\""),
            (
                "'%x'.format(['Hello world!'])",
                "\"48656c6c6f20776f726c6421\"",
            ),
            (
                "'%X'.format([b'byte string'])",
                "\"6279746520737472696E67\"",
            ),
            ("'%s'.format([2.71])", "\"2.71\""),
            ("'%s'.format([[2.71]])", "\"[2.710000]\""),
            ("'%s'.format([0.000000002])", "\"2e-09\""),
            ("'%s'.format([[0.000000002]])", "\"[0.000000]\""),
            (
                "'%s'.format([[double('NaN'), double('Inf'), double('-Inf')]])",
                "\"[\\\"NaN\\\", \\\"+Inf\\\", \\\"-Inf\\\"]\"",
            ),
            ("'null: %s'.format([null])", "\"null: null\""),
            ("'some bytes: %s'.format([b'xyz'])", "\"some bytes: xyz\""),
            (
                "'type is %s'.format([type('test string')])",
                "\"type is string\"",
            ),
            (
                "'%s'.format([timestamp('2023-02-03T23:31:20+00:00')])",
                "\"2023-02-03T23:31:20Z\"",
            ),
            ("'%s'.format([duration('1h45m47s')])", "\"6347s\""),
            (
                "'%s'.format([{'key1': dyn(b'xyz'), 'key5': dyn(null), 'key2': dyn(duration('2h')), 'key4': dyn(true), 'key3': dyn(2.71828)}])",
                "\"{\\\"key1\\\":b\\\"xyz\\\", \\\"key2\\\":duration(\\\"7200s\\\"), \\\"key3\\\":2.718280, \\\"key4\\\":true, \\\"key5\\\":null}\"",
            ),
            (
                "'%a'.format(dyn([1]))",
                "error: could not parse formatting clause: unrecognized formatting clause \"a\"",
            ),
            (
                "'%d %d %d'.format(dyn([0, 1]))",
                "error: index 2 out of range",
            ),
            (
                "'string is %b'.format(dyn(['abc']))",
                "error: error during formatting: only integers and bools can be formatted as binary, was given string",
            ),
            (
                "'%d'.format(dyn([duration('30m2s')]))",
                "error: error during formatting: decimal clause can only be used on integers, was given google.protobuf.Duration",
            ),
            (
                "'null: %f'.format(dyn([null]))",
                "error: error during formatting: fixed-point clause can only be used on doubles, was given null_type",
            ),
            (
                "'filler %'.format(dyn([1]))",
                "error: unexpected end of string",
            ),
            (
                "'double is %.34'.format(dyn([5.0]))",
                "error: could not parse formatting clause: error while parsing precision: could not find end of precision specifier",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }

    #[test]
    fn precisions_past_rusts_formatter_limit_are_exact() {
        let out = eval("'%.70000f'.format([0.5])");
        assert_eq!(out.len(), "\"0.\"".len() + 70000);
        assert!(out.starts_with("\"0.5000"), "{}", &out[..10]);
    }

    #[test]
    fn literal_formats_are_validated_at_compile_time() {
        let cases: &[(&str, &str)] = &[
            (
                "'%d'.format([[1, 'a']])",
                "compile: ERROR: <input>:1:14: error during formatting: decimal clause can only be used on integers, was given list\n | '%d'.format([[1, 'a']])\n | .............^",
            ),
            (
                "'%s'.format([{1: optional.of(1)}])",
                "compile: ERROR: <input>:1:29: error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps, was given optional_type\n | '%s'.format([{1: optional.of(1)}])\n | ............................^",
            ),
            (
                "'%f'.format([-7])",
                "compile: ERROR: <input>:1:14: error during formatting: fixed-point clause can only be used on doubles, was given int\n | '%f'.format([-7])\n | .............^",
            ),
            (
                "'%%'.format([1])",
                "compile: ERROR: <input>:1:12: too many arguments supplied to string.format (expected 0, got 1)\n | '%%'.format([1])\n | ...........^",
            ),
            (
                "'%s %s'.format([1])",
                "compile: ERROR: <input>:1:15: index 1 out of range\n | '%s %s'.format([1])\n | ..............^",
            ),
            (
                "'%'.format([])",
                "compile: ERROR: <input>:1:11: unexpected end of string\n | '%'.format([])\n | ..........^",
            ),
            (
                "'%5d'.format([1])",
                "compile: ERROR: <input>:1:13: could not parse formatting clause: unrecognized formatting clause \"5\"\n | '%5d'.format([1])\n | ............^",
            ),
            // Mixed lists are fine inside format calls; `dyn` arguments are checked at runtime.
            ("'%s'.format([[1, 'a']])", "\"[1, \\\"a\\\"]\""),
            (
                "'%d'.format([dyn('a')])",
                "error: error during formatting: decimal clause can only be used on integers, was given string",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }
}
