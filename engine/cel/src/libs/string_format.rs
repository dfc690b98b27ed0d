//! `<string>.format(list)` of cel-go's strings extension as version 2 (Kubernetes' version)
//! defines it: clauses `%s %d %f %e %b %o %x %X %%`, with `%f`/`%e` localised for `en_US` as
//! cel-go's `golang.org/x/text` printer does (digit grouping, `∞`, `× 10ⁿ` exponents), and
//! cel-go's error texts.

use std::fmt::Write;

use super::ip::go_quote;
use super::std_lib::format_double;
use super::time::{format_duration, format_timestamp};
use super::{Registry, actual_size, arg, str_arg, traversal_cost};
use crate::error::EvalError;
use crate::types::Type;
use crate::value::{List, Value};

pub(crate) fn register(r: &mut Registry) {
    r.def("format")
        .member(&[Type::String, Type::list(Type::Dyn)], Type::String)
        .imp(format)
        .cost(|args, _| traversal_cost(args.first().map(actual_size).unwrap_or(0)))
        .done();
}

const DEFAULT_PRECISION: usize = 6;

/// A clause error: `error during formatting: …` once wrapped.
fn clause_error(what: &str, v: &Value<'_>) -> String {
    format!("{what}, was given {}", v.type_name())
}

fn string_clause_error(v: &Value<'_>) -> String {
    clause_error(
        "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, durations, and timestamps",
        v,
    )
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
    let items = l
        .iter()
        .map(|v| format_member(&v))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format!("[{}]", items.join(", ")))
}

fn format_map(v: &Value<'_>) -> Result<String, String> {
    let Value::Map(m) = v else {
        return Err(string_clause_error(v));
    };
    let mut pairs = Vec::with_capacity(m.len());
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
        pairs.push((key, format_member(&val)?));
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

/// `%.Nf` through the `en_US` printer.
fn localized_fixed(d: f64, precision: usize) -> String {
    if let Some(s) = localized_special(d) {
        return s;
    }
    let s = format!("{:.precision$}", d.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let sign = if d.is_sign_negative() && s.bytes().any(|c| c.is_ascii_digit() && c != b'0') {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{}", group(int))
    } else {
        format!("{sign}{}.{frac}", group(int))
    }
}

/// `%.Ne` through the `en_US` printer: `1.052033 × 10⁰³` (narrow no-break spaces).
fn localized_scientific(d: f64, precision: usize) -> String {
    if let Some(s) = localized_special(d) {
        return s;
    }
    let s = format!("{d:.precision$e}");
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    const SUPER: [char; 10] = ['⁰', '¹', '²', '³', '⁴', '⁵', '⁶', '⁷', '⁸', '⁹'];
    let mut out = format!("{mantissa}\u{202f}×\u{202f}10");
    if exp < 0 {
        out.push('⁻');
    }
    for c in format!("{:02}", exp.unsigned_abs()).bytes() {
        out.push(SUPER[usize::from(c - b'0')]);
    }
    out
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
        b'f' => clause_double(v, "fixed-point clause can only be used on doubles")
            .map(|d| localized_fixed(d, p)),
        b'e' => clause_double(v, "scientific clause can only be used on doubles")
            .map(|d| localized_scientific(d, p)),
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
        // Clause: optional `.digits` precision, then the verb.
        let mut j = i + 1;
        let mut precision = None;
        if b[j] == b'.' {
            j += 1;
            let start = j;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j >= b.len() {
                return Err("could not parse formatting clause: error while parsing precision: could not find end of precision specifier".into());
            }
            let digits = &fmt[start..j];
            precision = Some(digits.parse::<usize>().map_err(|_| {
                format!(
                    "could not parse formatting clause: error while parsing precision: error while converting precision to integer: strconv.Atoi: parsing {}: {}",
                    go_quote(digits),
                    if digits.is_empty() { "invalid syntax" } else { "value out of range" }
                )
            })?);
        }
        let verb = b[j];
        if !b"sdfebxXo".contains(&verb) {
            return Err(unrecognized(verb));
        }
        let s = apply(verb, precision, &v).map_err(|e| format!("error during formatting: {e}"))?;
        out.extend_from_slice(s.as_bytes());
        i = j + 1;
        arg_index += 1;
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn format<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let fmt = str_arg(args, 0)?;
    let Value::List(l) = arg(args, 1)? else {
        return Err(EvalError::NoSuchOverload);
    };
    interpolate(fmt, l)
        .map(Value::string)
        .map_err(EvalError::msg)
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::eval;

    #[test]
    fn table() {
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
            (
                "'%.6e'.format([1052.032911275])",
                "\"1.052033\\u{202f}×\\u{202f}10⁰³\"",
            ),
            (
                "'%e'.format([2.71828])",
                "\"2.718280\\u{202f}×\\u{202f}10⁰⁰\"",
            ),
            (
                "'%.1e'.format([0.00012])",
                "\"1.2\\u{202f}×\\u{202f}10⁻⁰⁴\"",
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
                "'%a'.format([1])",
                "error: could not parse formatting clause: unrecognized formatting clause \"a\"",
            ),
            ("'%d %d %d'.format([0, 1])", "error: index 2 out of range"),
            (
                "'string is %b'.format(['abc'])",
                "error: error during formatting: only integers and bools can be formatted as binary, was given string",
            ),
            (
                "'%d'.format([duration('30m2s')])",
                "error: error during formatting: decimal clause can only be used on integers, was given google.protobuf.Duration",
            ),
            (
                "'null: %f'.format([null])",
                "error: error during formatting: fixed-point clause can only be used on doubles, was given null_type",
            ),
            ("'filler %'.format([1])", "error: unexpected end of string"),
            (
                "'double is %.34'.format([5.0])",
                "error: could not parse formatting clause: error while parsing precision: could not find end of precision specifier",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }
}
