//! The CEL standard library: operators, `size`, conversions, string predicates, `matches`.

use std::sync::Arc;

use super::{arg, str_arg};
use crate::cost::{actual_size, traversal_cost};
use crate::error::EvalError;
use crate::libs::regex;
use crate::libs::time;
use crate::registry::{Dispatch, Registry, Trait};
use crate::types::Type;
use crate::value::{List, Str, TypeName, Value, format_double};

fn list_a() -> Type {
    Type::list(Type::param("A"))
}
fn map_ab() -> Type {
    Type::map(Type::param("A"), Type::param("B"))
}
fn a() -> Type {
    Type::param("A")
}

/// Registers the standard library.
pub(crate) fn register(r: &mut Registry) {
    use Type::{Bool, Bytes, Double, Duration, Dyn, Int, Null, String, Timestamp, Uint};

    // Logic and special forms, implemented by the evaluator.
    r.def("!_").global(&[Bool], Bool).imp(not).done();
    r.def("_&&_").global(&[Bool, Bool], Bool).done();
    r.def("_||_").global(&[Bool, Bool], Bool).done();
    r.def("_?_:_").global(&[Bool, a(), a()], a()).done();
    r.def("_==_")
        .global(&[a(), a()], Bool)
        .cost(cost_compare)
        .done();
    r.def("_!=_")
        .global(&[a(), a()], Bool)
        .cost(cost_compare)
        .done();
    r.def("@in")
        .global(&[a(), list_a()], Bool)
        .cost(cost_in_list)
        .done();
    r.def("@in").global(&[a(), map_ab()], Bool).done();
    r.def("_[_]").global(&[list_a(), Int], a()).done();
    r.def("_[_]")
        .global(&[map_ab(), a()], Type::param("B"))
        .done();

    // Arithmetic, each operator's overloads in cel-go's declaration order: the checker binds a
    // free type variable to the first overload that accepts it (`[].map(x, x + x)` is a
    // `list(bytes)`).
    r.def("-_").global(&[Double], Double).imp(negate).done();
    r.def("-_").global(&[Int], Int).imp(negate).done();
    r.def("_+_")
        .global(&[Bytes, Bytes], Bytes)
        .imp(add)
        .cost(cost_concat)
        .done();
    r.def("_+_")
        .global(&[Double, Double], Double)
        .imp(add)
        .done();
    r.def("_+_")
        .global(&[Duration, Duration], Duration)
        .imp(add)
        .done();
    r.def("_+_")
        .global(&[Duration, Timestamp], Timestamp)
        .imp(add)
        .done();
    r.def("_+_")
        .global(&[Timestamp, Duration], Timestamp)
        .imp(add)
        .done();
    r.def("_+_").global(&[Int, Int], Int).imp(add).done();
    r.def("_+_")
        .global(&[list_a(), list_a()], list_a())
        .imp(add)
        .done();
    r.def("_+_")
        .global(&[String, String], String)
        .imp(add)
        .cost(cost_concat)
        .done();
    r.def("_+_").global(&[Uint, Uint], Uint).imp(add).done();
    for (l, rt, res) in [
        (Double, Double, Double),
        (Duration, Duration, Duration),
        (Int, Int, Int),
        (Timestamp, Duration, Timestamp),
        (Timestamp, Timestamp, Duration),
        (Uint, Uint, Uint),
    ] {
        r.def("_-_").global(&[l, rt], res).imp(sub).done();
    }
    for t in [Double, Int, Uint] {
        r.def("_*_")
            .global(&[t.clone(), t.clone()], t)
            .imp(mul)
            .done();
    }
    for t in [Double, Int, Uint] {
        r.def("_/_")
            .global(&[t.clone(), t.clone()], t)
            .imp(div)
            .done();
    }
    for t in [Int, Uint] {
        r.def("_%_")
            .global(&[t.clone(), t.clone()], t)
            .imp(rem)
            .done();
    }

    // Ordering.
    let orderable: [(&str, Type, Type); 14] = [
        ("bool", Bool, Bool),
        ("int64", Int, Int),
        ("int64_double", Int, Double),
        ("int64_uint64", Int, Uint),
        ("uint64", Uint, Uint),
        ("uint64_double", Uint, Double),
        ("uint64_int64", Uint, Int),
        ("double", Double, Double),
        ("double_int64", Double, Int),
        ("double_uint64", Double, Uint),
        ("string", String, String),
        ("bytes", Bytes, Bytes),
        ("timestamp", Timestamp, Timestamp),
        ("duration", Duration, Duration),
    ];
    for (suffix, l, rt) in orderable {
        let cost: crate::registry::CostFn = if matches!(suffix, "string" | "bytes") {
            cost_compare
        } else {
            crate::registry::cost_one
        };
        r.def("_<_")
            .global(&[l.clone(), rt.clone()], Bool)
            .imp(lt)
            .cost(cost)
            .done();
        r.def("_<=_")
            .global(&[l.clone(), rt.clone()], Bool)
            .imp(le)
            .cost(cost)
            .done();
        r.def("_>_")
            .global(&[l.clone(), rt.clone()], Bool)
            .imp(gt)
            .cost(cost)
            .done();
        r.def("_>=_")
            .global(&[l, rt], Bool)
            .imp(ge)
            .cost(cost)
            .done();
    }

    // size, in cel-go's declaration order.
    for t in [Bytes, list_a(), map_ab(), String] {
        r.def("size")
            .global(std::slice::from_ref(&t), Int)
            .imp(size)
            .done();
        r.def("size").member(&[t], Int).imp(size).done();
    }

    // Strings.
    r.def("contains")
        .member(&[String, String], Bool)
        .imp(contains)
        .cost(cost_contains)
        .done();
    r.def("startsWith")
        .member(&[String, String], Bool)
        .imp(starts_with)
        .cost(cost_traverse_first)
        .done();
    r.def("endsWith")
        .member(&[String, String], Bool)
        .imp(ends_with)
        .cost(cost_traverse_first)
        .done();
    // The global form's overload id (`matches`) is not in cel-go's cost table: it costs 1.
    r.def("matches")
        .global(&[String, String], Bool)
        .imp(regex::matches)
        .done();
    r.def("matches")
        .member(&[String, String], Bool)
        .imp(regex::matches)
        .cost(cost_matches)
        .done();

    // Conversions.
    r.def("dyn").global(&[a()], Dyn).imp(identity).done();
    r.def("type")
        .global(&[a()], Type::type_of(a()))
        .imp(type_of)
        .done();
    for t in [Int, Uint, Double, String, Timestamp, Duration] {
        r.def("int").global(&[t], Int).imp(to_int).done();
    }
    for t in [Uint, Int, Double, String] {
        r.def("uint").global(&[t], Uint).imp(to_uint).done();
    }
    for t in [Double, Int, Uint, String] {
        r.def("double").global(&[t], Double).imp(to_double).done();
    }
    for t in [String, Int, Uint, Double, Bool, Timestamp, Duration] {
        r.def("string").global(&[t], String).imp(to_string).done();
    }
    r.def("string")
        .global(&[Bytes], String)
        .imp(to_string)
        .cost(cost_traverse_first)
        .done();
    r.def("bytes").global(&[Bytes], Bytes).imp(to_bytes).done();
    r.def("bytes")
        .global(&[String], Bytes)
        .imp(to_bytes)
        .cost(cost_traverse_first)
        .done();
    r.def("bool").global(&[Bool], Bool).imp(to_bool).done();
    r.def("bool").global(&[String], Bool).imp(to_bool).done();
    let _ = Null;

    // cel-go binds these with one implementation for all overloads, gated by a trait of the
    // first argument, and the string predicates without runtime type guards.
    for (name, t) in [
        ("!_", None),
        ("-_", Some(Trait::Negater)),
        ("_+_", Some(Trait::Adder)),
        ("_-_", Some(Trait::Subtractor)),
        ("_*_", Some(Trait::Multiplier)),
        ("_/_", Some(Trait::Divider)),
        ("_%_", Some(Trait::Modder)),
        ("_<_", Some(Trait::Comparer)),
        ("_<=_", Some(Trait::Comparer)),
        ("_>_", Some(Trait::Comparer)),
        ("_>=_", Some(Trait::Comparer)),
        ("size", Some(Trait::Sizer)),
        ("matches", Some(Trait::Matcher)),
        ("dyn", None),
        ("type", None),
    ] {
        r.dispatch(name, Dispatch::Singleton(t));
    }
    for name in ["contains", "startsWith", "endsWith"] {
        r.dispatch(name, Dispatch::Unguarded);
    }
    time::register(r);
}

fn cost_compare(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    let a = args.first().map(actual_size).unwrap_or(1);
    let b = args.get(1).map(actual_size).unwrap_or(1);
    traversal_cost(a.min(b))
}

fn cost_in_list(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    args.get(1).map(actual_size).unwrap_or(1)
}

fn cost_concat(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    traversal_cost(args.iter().map(actual_size).sum())
}

fn cost_traverse_first(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    traversal_cost(args.first().map(actual_size).unwrap_or(1))
}

fn cost_contains(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    let a = traversal_cost(args.first().map(actual_size).unwrap_or(1));
    let b = traversal_cost(args.get(1).map(actual_size).unwrap_or(1));
    a.saturating_mul(b)
}

pub(crate) fn cost_matches(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    let s = traversal_cost(1 + args.first().map(actual_size).unwrap_or(1));
    let re = args.get(1).map(actual_size).unwrap_or(1).div_ceil(4);
    s.saturating_mul(re)
}

fn not<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match arg(args, 0)? {
        Value::Bool(b) => Ok(Value::Bool(!b)),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn negate<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match arg(args, 0)? {
        Value::Int(i) => i
            .checked_neg()
            .map(Value::Int)
            .ok_or(EvalError::IntOverflow),
        Value::Double(d) => Ok(Value::Double(-d)),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn add<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(match (arg(args, 0)?, arg(args, 1)?) {
        (Value::Int(a), Value::Int(b)) => {
            Value::Int(a.checked_add(*b).ok_or(EvalError::IntOverflow)?)
        }
        (Value::Uint(a), Value::Uint(b)) => {
            Value::Uint(a.checked_add(*b).ok_or(EvalError::UintOverflow)?)
        }
        (Value::Double(a), Value::Double(b)) => Value::Double(a + b),
        (Value::String(a), Value::String(b)) => {
            let mut s = std::string::String::with_capacity(a.len() + b.len());
            s.push_str(a);
            s.push_str(b);
            Value::String(Str::from(s))
        }
        (Value::Bytes(a), Value::Bytes(b)) => {
            let mut v = Vec::with_capacity(a.len() + b.len());
            v.extend_from_slice(a);
            v.extend_from_slice(b);
            Value::Bytes(Arc::from(v))
        }
        (Value::List(a), Value::List(b)) => {
            if b.is_empty() {
                return Ok(Value::List(a.clone()));
            }
            if a.is_empty() {
                return Ok(Value::List(b.clone()));
            }
            let mut v = Vec::with_capacity(a.len() + b.len());
            v.extend(a.iter());
            v.extend(b.iter());
            Value::List(List::from_vec(v))
        }
        (Value::Timestamp(t), Value::Duration(d)) | (Value::Duration(d), Value::Timestamp(t)) => {
            time::timestamp_add(*t, *d)?
        }
        (Value::Duration(a), Value::Duration(b)) => time::duration_add(*a, *b)?,
        _ => return Err(EvalError::no_such_overload()),
    })
}

fn sub<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(match (arg(args, 0)?, arg(args, 1)?) {
        (Value::Int(a), Value::Int(b)) => {
            Value::Int(a.checked_sub(*b).ok_or(EvalError::IntOverflow)?)
        }
        (Value::Uint(a), Value::Uint(b)) => {
            Value::Uint(a.checked_sub(*b).ok_or(EvalError::UintOverflow)?)
        }
        (Value::Double(a), Value::Double(b)) => Value::Double(a - b),
        (Value::Timestamp(a), Value::Timestamp(b)) => time::timestamp_diff(*a, *b)?,
        (Value::Timestamp(t), Value::Duration(d)) => time::timestamp_sub(*t, *d)?,
        (Value::Duration(a), Value::Duration(b)) => time::duration_sub(*a, *b)?,
        _ => return Err(EvalError::no_such_overload()),
    })
}

fn mul<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(match (arg(args, 0)?, arg(args, 1)?) {
        (Value::Int(a), Value::Int(b)) => {
            Value::Int(a.checked_mul(*b).ok_or(EvalError::IntOverflow)?)
        }
        (Value::Uint(a), Value::Uint(b)) => {
            Value::Uint(a.checked_mul(*b).ok_or(EvalError::UintOverflow)?)
        }
        (Value::Double(a), Value::Double(b)) => Value::Double(a * b),
        _ => return Err(EvalError::no_such_overload()),
    })
}

fn div<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(match (arg(args, 0)?, arg(args, 1)?) {
        (Value::Int(_), Value::Int(0)) | (Value::Uint(_), Value::Uint(0)) => {
            return Err(EvalError::DivisionByZero);
        }
        (Value::Int(a), Value::Int(b)) => {
            Value::Int(a.checked_div(*b).ok_or(EvalError::IntOverflow)?)
        }
        (Value::Uint(a), Value::Uint(b)) => Value::Uint(a / b),
        (Value::Double(a), Value::Double(b)) => Value::Double(a / b),
        _ => return Err(EvalError::no_such_overload()),
    })
}

fn rem<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(match (arg(args, 0)?, arg(args, 1)?) {
        (Value::Int(_), Value::Int(0)) | (Value::Uint(_), Value::Uint(0)) => {
            return Err(EvalError::ModulusByZero);
        }
        (Value::Int(a), Value::Int(b)) => {
            Value::Int(a.checked_rem(*b).ok_or(EvalError::IntOverflow)?)
        }
        (Value::Uint(a), Value::Uint(b)) => Value::Uint(a % b),
        _ => return Err(EvalError::no_such_overload()),
    })
}

fn ordering(args: &[Value<'_>]) -> Result<std::cmp::Ordering, EvalError> {
    arg(args, 0)?.compare(arg(args, 1)?)
}

fn lt<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(ordering(args)?.is_lt()))
}
fn le<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(ordering(args)?.is_le()))
}
fn gt<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(ordering(args)?.is_gt()))
}
fn ge<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(ordering(args)?.is_ge()))
}

fn size<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let n = match arg(args, 0)? {
        Value::String(s) => s.chars().count(),
        Value::Bytes(b) => b.len(),
        Value::List(l) => l.len(),
        Value::Map(m) => m.len(),
        _ => return Err(EvalError::no_such_overload()),
    };
    Ok(Value::Int(n as i64))
}

fn contains<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(str_arg(args, 0)?.contains(str_arg(args, 1)?)))
}
fn starts_with<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(
        str_arg(args, 0)?.starts_with(str_arg(args, 1)?),
    ))
}
fn ends_with<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(str_arg(args, 0)?.ends_with(str_arg(args, 1)?)))
}

fn identity<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    arg(args, 0).cloned()
}

fn type_of<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Type(match arg(args, 0)? {
        Value::Struct(s) => TypeName(s.struct_type().type_value_name().to_string().into()),
        v => TypeName::new(v.static_type_name().unwrap_or_default()),
    }))
}

fn conversion_error(from: &str, to: &str) -> EvalError {
    EvalError::msg(format!("type conversion error from '{from}' to '{to}'"))
}

const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

fn to_int<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(match arg(args, 0)? {
        Value::Int(i) => *i,
        Value::Uint(u) => i64::try_from(*u).map_err(|_| EvalError::IntOverflow)?,
        Value::Double(d) => {
            // cel-go rejects the boundary values themselves.
            if d.is_nan() || *d <= -TWO_POW_63 || *d >= TWO_POW_63 {
                return Err(EvalError::IntOverflow);
            }
            *d as i64
        }
        Value::String(s) => s
            .parse::<i64>()
            .map_err(|_| conversion_error("string", "int"))?,
        Value::Timestamp(t) => t.timestamp(),
        Value::Duration(d) => d.num_nanoseconds().ok_or(EvalError::IntOverflow)?,
        _ => return Err(EvalError::no_such_overload()),
    }))
}

fn to_uint<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Uint(match arg(args, 0)? {
        Value::Uint(u) => *u,
        Value::Int(i) => u64::try_from(*i).map_err(|_| EvalError::UintOverflow)?,
        Value::Double(d) => {
            if d.is_nan() || *d < 0.0 || *d >= TWO_POW_64 {
                return Err(EvalError::UintOverflow);
            }
            *d as u64
        }
        // Go's `ParseUint` takes no sign, not even `+`.
        Value::String(s) if s.starts_with('+') => {
            return Err(conversion_error("string", "uint"));
        }
        Value::String(s) => s
            .parse::<u64>()
            .map_err(|_| conversion_error("string", "uint"))?,
        _ => return Err(EvalError::no_such_overload()),
    }))
}

fn to_double<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Double(match arg(args, 0)? {
        Value::Double(d) => *d,
        Value::Int(i) => *i as f64,
        Value::Uint(u) => *u as f64,
        Value::String(s) => {
            parse_go_float(s).ok_or_else(|| conversion_error("string", "double"))?
        }
        _ => return Err(EvalError::no_such_overload()),
    }))
}

/// Parses a float as Go's `strconv.ParseFloat` does: `Inf`/`Infinity`/`NaN` in any case,
/// decimal and hexadecimal (`0x1p-2`) forms, `_` between digits; out of range is an error.
fn parse_go_float(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        return lower.parse::<f64>().ok();
    }
    if s.is_empty() {
        return None;
    }
    let cleaned;
    let s = if s.contains('_') {
        if !underscores_ok(s) {
            return None;
        }
        cleaned = s.replace('_', "");
        cleaned.as_str()
    } else {
        s
    };
    let (negative, unsigned) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let value = match unsigned
        .strip_prefix("0x")
        .or_else(|| unsigned.strip_prefix("0X"))
    {
        Some(hex) => parse_hex_float(hex)?,
        None if unsigned.starts_with(['+', '-']) => return None,
        None => unsigned.parse::<f64>().ok()?,
    };
    // Go reports a value past the largest double as out of range.
    value
        .is_finite()
        .then_some(if negative { -value } else { value })
}

/// Go's `underscoreOK`: underscores only between digits (or after a base prefix).
fn underscores_ok(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let b = s.as_bytes();
    let hex = b.len() >= 2 && b[0] == b'0' && matches!(b[1], b'x' | b'X');
    let prefixed = b.len() >= 2 && b[0] == b'0' && matches!(b[1] | 0x20, b'b' | b'o' | b'x');
    // The last class seen: '^' start, '0' digit or prefix, '_' underscore, '!' other.
    let (mut saw, start) = if prefixed { (b'0', 2) } else { (b'^', 0) };
    for &c in &b[start..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else if saw == b'_' {
            return false;
        } else {
            saw = b'!';
        }
    }
    saw != b'_'
}

/// A hexadecimal float after its `0x`: hex digits with an optional point, then a required
/// binary exponent `p±n`.
fn parse_hex_float(s: &str) -> Option<f64> {
    let (mantissa, exp) = s.split_once(['p', 'P'])?;
    let exp: i32 = if exp.is_empty() || exp.starts_with("+-") || exp.starts_with("-+") {
        return None;
    } else {
        exp.parse().ok()?
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let mut m: u128 = 0;
    let mut shift: i32 = 0;
    for (i, c) in int_part.chars().chain(frac_part.chars()).enumerate() {
        let d = c.to_digit(16)?;
        let fractional = i >= int_part.len();
        if m >> 120 == 0 {
            m = (m << 4) | u128::from(d);
            if fractional {
                shift -= 4;
            }
        } else if !fractional {
            // Digits past u128's precision only scale the value.
            shift += 4;
        }
    }
    Some(m as f64 * 2f64.powi(exp.saturating_add(shift)))
}

fn to_string<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(match arg(args, 0)? {
        Value::String(s) => Value::String(s.clone()),
        Value::Int(i) => Value::string(i.to_string()),
        Value::Uint(u) => Value::string(u.to_string()),
        Value::Double(d) => Value::string(format_double(*d)),
        Value::Bool(b) => Value::string(if *b { "true" } else { "false" }),
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => Value::string(s),
            Err(_) => {
                return Err(EvalError::msg(
                    "invalid UTF-8 in bytes, cannot convert to string",
                ));
            }
        },
        Value::Timestamp(t) => Value::string(time::format_timestamp(t)),
        Value::Duration(d) => Value::string(time::format_duration(d)),
        _ => return Err(EvalError::no_such_overload()),
    })
}

fn to_bytes<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(match arg(args, 0)? {
        Value::Bytes(b) => Value::Bytes(b.clone()),
        Value::String(s) => Value::Bytes(Arc::from(s.as_bytes())),
        _ => return Err(EvalError::no_such_overload()),
    })
}

fn to_bool<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(match arg(args, 0)? {
        Value::Bool(b) => *b,
        Value::String(s) => match &**s {
            "1" | "t" | "T" | "TRUE" | "true" | "True" => true,
            "0" | "f" | "F" | "FALSE" | "false" | "False" => false,
            _ => return Err(conversion_error("string", "bool")),
        },
        _ => return Err(EvalError::no_such_overload()),
    }))
}

#[cfg(test)]
mod tests {
    use super::parse_go_float;

    #[test]
    fn doubles_parse_like_go() {
        let cases: [(&str, Option<f64>); 16] = [
            ("1_000", Some(1000.0)),
            ("1_000.5_5", Some(1000.55)),
            ("_1", None),
            ("1__0", None),
            ("1_", None),
            ("0x1p-2", Some(0.25)),
            ("-0x1.8p1", Some(-3.0)),
            ("0x_1p4", Some(16.0)),
            ("0x1", None),
            ("0xp1", None),
            ("1e400", None),
            ("1e-400", Some(0.0)),
            ("+.5", Some(0.5)),
            ("-Infinity", Some(f64::NEG_INFINITY)),
            ("--1", None),
            ("", None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_go_float(s), want, "{s}");
        }
    }
}
