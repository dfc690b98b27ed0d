//! Kubernetes' quantity library (`kubernetes.Quantity`): `quantity`, `isQuantity`, `sign`,
//! `isInteger`, `asInteger`, `asApproximateFloat`, `add`, `sub`, `isLessThan`,
//! `isGreaterThan`, `compareTo` and `==`, with apimachinery's `resource.ParseQuantity`
//! semantics: the small-integer fast path (`int64Amount`) versus arbitrary-precision decimals
//! (`inf.Dec`) is modelled because `isInteger`/`asInteger` depend on it.

use std::any::Any;
use std::cmp::Ordering;

use num_bigint::{BigInt, Sign};
use num_traits::{ToPrimitive, Zero};

use super::opaque::{opaque, opaque_arg, same_type};
use super::{int_arg, str_arg};
use crate::cost::{actual_size, traversal_cost};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{Opaque, Value};

/// The CEL type name.
pub(crate) const QUANTITY: &str = "kubernetes.Quantity";

const ERR_FORMAT: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const ERR_NUMERIC: &str = "unable to parse numeric part of quantity";
const ERR_SUFFIX: &str = "unable to parse quantity's suffix";

/// Exponent differences past this are refused instead of materialising huge integers.
const MAX_RESCALE: i64 = 4096;

pub(crate) fn register(r: &mut Registry) {
    use Type::{Bool, Double, Int, String};
    let q = || Type::opaque(QUANTITY);
    r.def("quantity")
        .global(&[String], q())
        .imp(to_quantity)
        .cost(cost_parse)
        .done();
    r.def("isQuantity")
        .global(&[String], Bool)
        .imp(is_quantity)
        .cost(cost_parse)
        .done();
    // Declared as a global function upstream (`sign(q)`), not a member.
    r.def("sign").global(&[q()], Int).imp(sign).done();
    r.def("isGreaterThan")
        .member(&[q(), q()], Bool)
        .imp(is_greater)
        .done();
    r.def("isLessThan")
        .member(&[q(), q()], Bool)
        .imp(is_less)
        .done();
    r.def("compareTo")
        .member(&[q(), q()], Int)
        .imp(compare_to)
        .done();
    r.def("asApproximateFloat")
        .member(&[q()], Double)
        .imp(as_float)
        .done();
    r.def("asInteger")
        .member(&[q()], Int)
        .imp(as_integer)
        .done();
    r.def("isInteger")
        .member(&[q()], Bool)
        .imp(is_integer)
        .done();
    r.def("add").member(&[q(), q()], q()).imp(add).done();
    r.def("add").member(&[q(), Int], q()).imp(add).done();
    r.def("sub").member(&[q(), q()], q()).imp(sub).done();
    r.def("sub").member(&[q(), Int], q()).imp(sub).done();
}

fn cost_parse(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    traversal_cost(args.first().map(actual_size).unwrap_or(0))
}

/// A quantity's amount: `value × 10^exp`, either the int64 fast path or a big decimal.
#[derive(Clone, Debug, PartialEq)]
enum Amount {
    /// apimachinery's `int64Amount`.
    Small { value: i64, exp: i32 },
    /// apimachinery's `inf.Dec` (`exp` is minus its scale).
    Big { unscaled: BigInt, exp: i64 },
}

/// A parsed `resource.Quantity`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Quantity {
    amount: Amount,
}

impl Opaque for Quantity {
    fn type_name(&self) -> &'static str {
        QUANTITY
    }
    fn go_type_name(&self) -> &'static str {
        "cel.Quantity"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn equals(&self, other: &dyn Opaque) -> bool {
        same_type::<Quantity>(other).is_some_and(|o| self.cmp(o) == Ok(Ordering::Equal))
    }
}

/// Number of decimal digits of `|m|` (1 for zero).
fn digits(m: &BigInt) -> i64 {
    m.magnitude().to_str_radix(10).len() as i64
}

fn pow10(n: i64) -> BigInt {
    num_traits::pow(BigInt::from(10u8), usize::try_from(n).unwrap_or(0))
}

/// Compares `a × 10^ea` with `b × 10^eb` exactly.
fn cmp_scaled(a: &BigInt, ea: i64, b: &BigInt, eb: i64) -> Ordering {
    let (sa, sb) = (a.sign(), b.sign());
    if sa != sb || sa == Sign::NoSign {
        return sa.cmp(&sb);
    }
    // Same non-zero sign: compare orders of magnitude first (estimated from the bit lengths,
    // exactly only when close), then digits.
    let estimate = |m: &BigInt, e: i64| (m.bits() as f64 * std::f64::consts::LOG10_2) as i64 + e;
    let (ea_est, eb_est) = (estimate(a, ea), estimate(b, eb));
    if ea_est.abs_diff(eb_est) > 2 {
        let mag = ea_est.cmp(&eb_est);
        return if sa == Sign::Minus {
            mag.reverse()
        } else {
            mag
        };
    }
    let (ma, mb) = (digits(a) + ea, digits(b) + eb);
    let mag = if ma != mb {
        ma.cmp(&mb)
    } else {
        let e = ea.min(eb);
        (a.magnitude() * pow10(ea - e).magnitude())
            .cmp(&(b.magnitude() * pow10(eb - e).magnitude()))
    };
    if sa == Sign::Minus {
        mag.reverse()
    } else {
        mag
    }
}

impl Amount {
    fn parts(&self) -> (BigInt, i64) {
        match self {
            Amount::Small { value, exp } => (BigInt::from(*value), i64::from(*exp)),
            Amount::Big { unscaled, exp } => (unscaled.clone(), *exp),
        }
    }
}

/// `value × 10^scale` if it fits an int64 (zero for any scale: the loop ends at the first
/// overflow, which zero never reaches).
fn scale_i64(value: i64, scale: i64) -> Option<i64> {
    if value == 0 {
        return Some(0);
    }
    let mut v = value;
    for _ in 0..scale {
        v = v.checked_mul(10)?;
    }
    Some(v)
}

/// `int64Amount.Add`: `None` when the result leaves the int64 fast path.
fn small_add(a: (i64, i32), b: (i64, i32)) -> Option<(i64, i32)> {
    if b.0 == 0 {
        return Some(a);
    }
    if a.0 == 0 {
        return Some(b);
    }
    if a.1 == b.1 {
        return Some((a.0.checked_add(b.0)?, a.1));
    }
    // The scales' difference may pass the range of either scale.
    let (ea, eb) = (i64::from(a.1), i64::from(b.1));
    if ea > eb {
        let c = scale_i64(a.0, ea - eb)?;
        Some((c.checked_add(b.0)?, b.1))
    } else {
        let c = scale_i64(b.0, eb - ea)?;
        Some((a.0.checked_add(c)?, a.1))
    }
}

impl Quantity {
    fn cmp(&self, other: &Quantity) -> Result<Ordering, EvalError> {
        let (a, ea) = self.amount.parts();
        let (b, eb) = other.amount.parts();
        Ok(cmp_scaled(&a, ea, &b, eb))
    }

    fn sign(&self) -> i64 {
        match &self.amount {
            Amount::Small { value, .. } => value.signum(),
            Amount::Big { unscaled, .. } => match unscaled.sign() {
                Sign::Minus => -1,
                Sign::NoSign => 0,
                Sign::Plus => 1,
            },
        }
    }

    /// `Quantity.AsInt64`: only fast-path amounts convert.
    fn as_i64(&self) -> Option<i64> {
        match &self.amount {
            Amount::Small { value, exp } if *exp >= 0 => scale_i64(*value, i64::from(*exp)),
            _ => None,
        }
    }

    fn as_f64(&self) -> f64 {
        let (base, exp) = match &self.amount {
            Amount::Small { value, exp } => (*value as f64, i64::from(*exp)),
            Amount::Big { unscaled, exp } => (unscaled.to_f64().unwrap_or(f64::NAN), *exp),
        };
        if exp == 0 {
            return base;
        }
        // Go's math.Pow10: exact powers, +Inf above 308, 0 below -323.
        let p = if exp > 308 {
            f64::INFINITY
        } else if exp < -323 {
            0.0
        } else {
            format!("1e{exp}").parse().unwrap_or(f64::NAN)
        };
        base * p
    }

    /// `Quantity.Add` (`negate` for `Sub`).
    fn plus(&self, y: &Quantity, negate: bool) -> Result<Quantity, EvalError> {
        if let (Amount::Small { value: a, exp: ea }, Amount::Small { value: b, exp: eb }) =
            (&self.amount, &y.amount)
        {
            // Go negates with wrap-around.
            let b = if negate { b.wrapping_neg() } else { *b };
            if let Some((value, exp)) = small_add((*a, *ea), (b, *eb)) {
                return Ok(Quantity {
                    amount: Amount::Small { value, exp },
                });
            }
        }
        let (a, ea) = self.amount.parts();
        let (mut b, eb) = y.amount.parts();
        if negate {
            b = -b;
        }
        let e = ea.min(eb);
        if ea - e > MAX_RESCALE || eb - e > MAX_RESCALE {
            return Err(EvalError::msg("quantity arithmetic out of range"));
        }
        let sum = a * pow10(ea - e) + b * pow10(eb - e);
        Ok(Quantity {
            amount: Amount::Big {
                unscaled: sum,
                exp: e,
            },
        })
    }
}

/// The parts of a quantity string (apimachinery's `parseQuantityString`).
struct Parts<'s> {
    positive: bool,
    value: &'s str,
    num: &'s str,
    denom: &'s str,
    suffix: &'s str,
}

fn split(s: &str) -> Result<Parts<'_>, EvalError> {
    let b = s.as_bytes();
    let end = b.len();
    let mut pos = 0;
    let mut positive = true;
    match b.first() {
        Some(b'-') => {
            positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    let zero = |value| Parts {
        positive,
        value,
        num: "0",
        denom: "",
        suffix: "",
    };
    while pos < end && b[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        return Ok(zero("0"));
    }
    let num_start = pos;
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    let mut num = &s[num_start..pos];
    if pos >= end {
        return Ok(Parts {
            positive,
            value: s,
            num,
            denom: "",
            suffix: "",
        });
    }
    if num.is_empty() {
        num = "0";
    }
    let mut denom = "";
    if b[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && b[pos].is_ascii_digit() {
            pos += 1;
        }
        denom = &s[start..pos];
        if pos >= end {
            return Ok(Parts {
                positive,
                value: s,
                num,
                denom,
                suffix: "",
            });
        }
    }
    let value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < end && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    while pos < end && b[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(EvalError::msg(ERR_FORMAT));
    }
    Ok(Parts {
        positive,
        value,
        num,
        denom,
        suffix: &s[suffix_start..],
    })
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Decimal,
    Binary,
}

/// `(base, exponent, format)` of a suffix.
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let dec = match suffix {
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "" => Some(0),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = dec {
        return Some((10, e, Format::Decimal));
    }
    let bin = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(e) = bin {
        return Some((2, e, Format::Binary));
    }
    let rest = suffix.strip_prefix(['e', 'E'])?;
    if rest.is_empty() {
        return None;
    }
    // Go parses an int64 and truncates it to int32.
    let e = go_parse_i64(rest)?;
    Some((10, e as i32, Format::Decimal))
}

/// `strconv.ParseInt(s, 10, 64)`: optional sign, decimal digits.
fn go_parse_i64(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.strip_prefix('+').unwrap_or(s).parse().ok()
}

/// `resource.ParseQuantity`.
pub(crate) fn parse(s: &str) -> Result<Quantity, EvalError> {
    if s.is_empty() {
        return Err(EvalError::msg(ERR_FORMAT));
    }
    let p = split(s)?;
    let (base, exponent, format) = interpret(p.suffix).ok_or_else(|| EvalError::msg(ERR_SUFFIX))?;
    let digits_len = (p.num.len() + p.denom.len()) as i64;
    let (mut scale, precision, mantissa) = match format {
        Format::Decimal => (i64::from(exponent), 18 - digits_len, 1i64),
        Format::Binary if p.denom.is_empty() => (
            0,
            15 - p.num.len() as i64 - i64::from(exponent) * 3 / 10 - 1,
            1i64 << exponent,
        ),
        Format::Binary => (0, -1, 1),
    };
    if precision >= 0 {
        scale -= p.denom.len() as i64;
        if scale >= -9 {
            let shifted = format!("{}{}", p.num, p.denom);
            let v: i64 = shifted.parse().map_err(|_| EvalError::msg(ERR_NUMERIC))?;
            if let Some(r) = v.checked_mul(mantissa) {
                let value = if p.positive { r } else { -r };
                return Ok(Quantity {
                    amount: Amount::Small {
                        value,
                        exp: scale as i32,
                    },
                });
            }
        }
    }
    // The general path: an exact decimal, rounded up (away from zero) to nano units; binary
    // amounts are capped at 2^63-1.
    let (mut unscaled, mut dec_scale) = parse_decimal(p.value)?;
    if base == 10 {
        dec_scale -= i64::from(exponent);
    } else {
        unscaled *= BigInt::from(1u64 << exponent);
    }
    let negative = unscaled.sign() == Sign::Minus;
    let mut mag = BigInt::from(unscaled.magnitude().clone());
    if !mag.is_zero() {
        if dec_scale > 9 {
            // A divisor of at least as many digits as the amount leaves a fraction below 1,
            // which rounds up to 1: worked out without writing out the divisor, which for an
            // exponent near -2^31 would take gigabytes and minutes.
            let shift = dec_scale - 9;
            mag = if shift >= digits(&mag) {
                BigInt::from(1u8)
            } else {
                let d = pow10(shift);
                let (q, r) = (&mag / &d, &mag % &d);
                if r.is_zero() { q } else { q + 1 }
            };
            dec_scale = 9;
        } else if 9 - dec_scale <= MAX_RESCALE {
            // Same value at scale 9, as inf.Dec keeps it; a larger exponent is kept unexpanded
            // (equal value, without materialising the digits).
            mag *= pow10(9 - dec_scale);
            dec_scale = 9;
        }
    }
    let max = BigInt::from(i64::MAX);
    if format == Format::Binary && cmp_scaled(&mag, -dec_scale, &max, 0) == Ordering::Greater {
        mag = max;
        dec_scale = 0;
    }
    let unscaled = if negative { -mag } else { mag };
    Ok(Quantity {
        amount: Amount::Big {
            unscaled,
            exp: -dec_scale,
        },
    })
}

/// `inf.Dec.SetString`: `[+-]digits[.digits]` as (unscaled, scale).
fn parse_decimal(s: &str) -> Result<(BigInt, i64), EvalError> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    let all = format!("{int}{frac}");
    if all.is_empty() || !all.bytes().all(|c| c.is_ascii_digit()) {
        return Err(EvalError::msg(ERR_NUMERIC));
    }
    let mut v: BigInt = all.parse().map_err(|_| EvalError::msg(ERR_NUMERIC))?;
    if neg {
        v = -v;
    }
    Ok((v, frac.len() as i64))
}

fn to_quantity<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(opaque(parse(str_arg(args, 0)?)?))
}

fn is_quantity<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(parse(str_arg(args, 0)?).is_ok()))
}

fn q<'v>(args: &'v [Value<'_>], i: usize) -> Result<&'v Quantity, EvalError> {
    opaque_arg::<Quantity>(args, i)
}

fn sign<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(q(args, 0)?.sign()))
}

fn compare(args: &[Value<'_>]) -> Result<Ordering, EvalError> {
    q(args, 0)?.cmp(q(args, 1)?)
}

fn is_greater<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(compare(args)? == Ordering::Greater))
}

fn is_less<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(compare(args)? == Ordering::Less))
}

fn compare_to<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(compare(args)? as i64))
}

fn as_float<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Double(q(args, 0)?.as_f64()))
}

fn as_integer<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    q(args, 0)?
        .as_i64()
        .map(Value::Int)
        .ok_or_else(|| EvalError::msg("cannot convert value to integer"))
}

fn is_integer<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(q(args, 0)?.as_i64().is_some()))
}

/// The right operand of `add`/`sub`: a quantity, or an int as `NewQuantity(i, DecimalExponent)`.
fn operand(args: &[Value<'_>]) -> Result<Quantity, EvalError> {
    match args.get(1) {
        Some(Value::Int(_)) => Ok(Quantity {
            amount: Amount::Small {
                value: int_arg(args, 1)?,
                exp: 0,
            },
        }),
        _ => q(args, 1).cloned(),
    }
}

fn add<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(opaque(q(args, 0)?.plus(&operand(args)?, false)?))
}

fn sub<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(opaque(q(args, 0)?.plus(&operand(args)?, true)?))
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::{eval, eval_cost};

    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            ("isQuantity('20')", "true"),
            ("isQuantity('20M')", "true"),
            ("isQuantity('20Mi')", "true"),
            ("isQuantity('20Mo')", "false"),
            ("isQuantity('10Mm')", "false"),
            ("isQuantity('1,3G')", "false"),
            ("isQuantity('200K')", "false"),
            // apimachinery reads a bare suffix as zero (despite the library's doc comment).
            ("isQuantity('Mi')", "true"),
            ("isQuantity('aoeu')", "false"),
            ("isQuantity('.5i')", "false"),
            ("isQuantity('1.1.M')", "false"),
            ("isQuantity('1e3')", "true"),
            ("isQuantity('1E')", "true"),
            ("isQuantity('1e')", "false"),
            ("isQuantity('')", "false"),
            ("isQuantity('.5')", "true"),
            (
                "quantity('10Mo')",
                "error: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            ),
            (
                "quantity('10Mm')",
                "error: unable to parse quantity's suffix",
            ),
            ("quantity('200M') == quantity('200M')", "true"),
            ("quantity('200M') == quantity('0.2G')", "true"),
            ("quantity('2000k') == quantity('2M')", "true"),
            ("quantity('200M') == quantity('0.3G')", "false"),
            ("quantity('1Ki') == quantity('1024')", "true"),
            ("quantity('50M').isLessThan(quantity('50Mi'))", "true"),
            ("quantity('100M').isLessThan(quantity('50M'))", "false"),
            ("quantity('50Mi').isGreaterThan(quantity('50M'))", "true"),
            ("quantity('200M').compareTo(quantity('0.2G'))", "0"),
            ("quantity('50M').compareTo(quantity('50Mi'))", "-1"),
            ("quantity('50Mi').compareTo(quantity('50M'))", "1"),
            (
                "quantity('50k').add(quantity('20')) == quantity('50.02k')",
                "true",
            ),
            (
                "quantity('50k').add(20).isLessThan(quantity('50020'))",
                "false",
            ),
            (
                "quantity('50k').sub(quantity('20')) == quantity('49.98k')",
                "true",
            ),
            ("quantity('50k').sub(20) == quantity('49980')", "true"),
            (
                "quantity('50k').add(20).sub(quantity('100k')).asInteger()",
                "-49980",
            ),
            (
                "quantity('50k').add(20).sub(quantity('100k')).sub(-50000).asInteger()",
                "20",
            ),
            ("quantity('50k').asInteger()", "50000"),
            (
                "quantity('9999999999999999999999999999999999999G').asInteger()",
                "error: cannot convert value to integer",
            ),
            (
                "quantity('9999999999999999999999999999999999999G').isInteger()",
                "false",
            ),
            (
                "quantity('9999999999999999999999999999999999999G').isGreaterThan(quantity('9223372036854775807'))",
                "true",
            ),
            // Binary amounts are capped at 2^63-1.
            (
                "quantity('99999999999Ei') == quantity('9223372036854775807')",
                "true",
            ),
            ("quantity('1e100000') == quantity('1e100000')", "true"),
            (
                "quantity('12345678901234567890e100000').isGreaterThan(quantity('1e100000'))",
                "true",
            ),
            ("quantity('50').isInteger()", "true"),
            ("quantity('50000000G').isInteger()", "true"),
            // Fractional fast-path amounts are not integers, even when integral.
            ("quantity('1.0').isInteger()", "false"),
            ("quantity('1000m').isInteger()", "false"),
            ("quantity('50.703k').asApproximateFloat()", "50703.0"),
            ("quantity('1.5Gi').asApproximateFloat()", "1610612736.0"),
            ("quantity('1.5n') == quantity('2n')", "true"),
            ("quantity('-1.5n') == quantity('-2n')", "true"),
            ("sign(quantity('-1Mi'))", "-1"),
            ("sign(quantity('0'))", "0"),
            ("sign(quantity('+3'))", "1"),
            (
                "quantity('9223372036854775807').add(1).isInteger()",
                "false",
            ),
            (
                "quantity('9223372036854775807').add(1) == quantity('9223372036854775807').add(quantity('1'))",
                "true",
            ),
            ("quantity('1e3') == quantity('1k')", "true"),
            ("quantity('-0') == quantity('0')", "true"),
            (
                "quantity('1e2000000000').add(quantity('1e2000000000')) == quantity('2e2000000000')",
                "true",
            ),
            (
                "quantity('1e2000000000').add(1)",
                "error: quantity arithmetic out of range",
            ),
            // Exponents near the int32 limits (found by the fuzzer, where the first took
            // minutes): a positive amount far below a nano unit rounds up to one.
            (
                "quantity('5223372031e30868477580875808') == quantity('1n')",
                "true",
            ),
            ("quantity('-7e-2000000000') == quantity('-1n')", "true"),
            ("quantity('12e-19') == quantity('1n')", "true"),
            ("quantity('1500e-12') == quantity('2n')", "true"),
            ("quantity('1000e-13') == quantity('1n')", "true"),
            ("quantity('0e2147483647').asInteger()", "0"),
            ("quantity('0e2147483647').isInteger()", "true"),
            // Scales 2^31 apart: their difference does not fit a scale.
            (
                "quantity('1e2147483647').add(quantity('1n'))",
                "error: quantity arithmetic out of range",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }

    #[test]
    fn parse_cost_is_a_traversal() {
        // ceil(4 * 0.1) for quantity('12Mi') plus 1 for asInteger.
        assert_eq!(eval_cost("quantity('12Mi').asInteger()"), 2);
    }
}
