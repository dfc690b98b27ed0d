//! Kubernetes' semver library (`kubernetes.Semver`, version 1 as 1.33+ enables it): `semver`,
//! `isSemver` (both with an optional normalize flag), `major`, `minor`, `patch`, `isLessThan`,
//! `isGreaterThan`, `compareTo` and `==`, parsing as `github.com/blang/semver/v4`'s `Parse`
//! (with its error texts) and normalising as Kubernetes' `normalizeAndParse`.

use std::any::Any;
use std::cmp::Ordering;

use super::ip::go_quote;
use super::opaque::{opaque, opaque_arg, same_type};
use super::str_arg;
use crate::cost::{actual_size, traversal_cost};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{Opaque, Value};

/// The CEL type name.
pub(crate) const SEMVER: &str = "kubernetes.Semver";

pub(crate) fn register(r: &mut Registry) {
    use Type::{Bool, Int, String};
    let v = || Type::opaque(SEMVER);
    r.def("semver")
        .global(&[String], v())
        .imp(to_semver)
        .cost(cost_parse)
        .done();
    r.def("semver")
        .global(&[String, Bool], v())
        .imp(to_semver)
        .cost(cost_parse)
        .done();
    r.def("isSemver")
        .global(&[String], Bool)
        .imp(is_semver)
        .cost(cost_parse)
        .done();
    r.def("isSemver")
        .global(&[String, Bool], Bool)
        .imp(is_semver)
        .cost(cost_parse)
        .done();
    r.def("isGreaterThan")
        .member(&[v(), v()], Bool)
        .imp(is_greater)
        .done();
    r.def("isLessThan")
        .member(&[v(), v()], Bool)
        .imp(is_less)
        .done();
    r.def("compareTo")
        .member(&[v(), v()], Int)
        .imp(compare_to)
        .done();
    r.def("major").member(&[v()], Int).imp(major).done();
    r.def("minor").member(&[v()], Int).imp(minor).done();
    r.def("patch").member(&[v()], Int).imp(patch).done();
}

/// Kubernetes charges parsing a version one string traversal.
fn cost_parse(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    traversal_cost(args.first().map(actual_size).unwrap_or(1))
}

/// A pre-release identifier.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pre {
    Num(u64),
    Str(String),
}

impl Pre {
    fn cmp(&self, o: &Pre) -> Ordering {
        match (self, o) {
            (Pre::Num(a), Pre::Num(b)) => a.cmp(b),
            (Pre::Num(_), Pre::Str(_)) => Ordering::Less,
            (Pre::Str(_), Pre::Num(_)) => Ordering::Greater,
            (Pre::Str(a), Pre::Str(b)) => a.cmp(b),
        }
    }
}

/// A semantic version (build metadata is kept for parsing only: it does not take part in
/// comparisons).
#[derive(Clone, Debug)]
pub(crate) struct Semver {
    major: u64,
    minor: u64,
    patch: u64,
    pre: Vec<Pre>,
}

impl Semver {
    fn cmp(&self, o: &Semver) -> Ordering {
        let core = (self.major, self.minor, self.patch).cmp(&(o.major, o.minor, o.patch));
        if core != Ordering::Equal {
            return core;
        }
        match (self.pre.is_empty(), o.pre.is_empty()) {
            (true, true) => return Ordering::Equal,
            (true, false) => return Ordering::Greater,
            (false, true) => return Ordering::Less,
            _ => {}
        }
        for (a, b) in self.pre.iter().zip(&o.pre) {
            let c = a.cmp(b);
            if c != Ordering::Equal {
                return c;
            }
        }
        self.pre.len().cmp(&o.pre.len())
    }
}

impl Opaque for Semver {
    fn type_name(&self) -> &'static str {
        SEMVER
    }
    fn go_type_name(&self) -> &'static str {
        "cel.Semver"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn equals(&self, other: &dyn Opaque) -> bool {
        same_type::<Semver>(other).is_some_and(|o| self.cmp(o) == Ordering::Equal)
    }
}

fn digits_only(s: &str) -> bool {
    s.bytes().all(|c| c.is_ascii_digit())
}

fn alphanum_only(s: &str) -> bool {
    s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
}

fn leading_zero(s: &str) -> bool {
    s.len() > 1 && s.starts_with('0')
}

/// Go's `strconv.ParseUint(s, 10, 64)` with its error text.
fn parse_uint(s: &str) -> Result<u64, String> {
    if s.is_empty() || !digits_only(s) {
        return Err(format!(
            "strconv.ParseUint: parsing {}: invalid syntax",
            go_quote(s)
        ));
    }
    s.parse().map_err(|_| {
        format!(
            "strconv.ParseUint: parsing {}: value out of range",
            go_quote(s)
        )
    })
}

fn number(s: &str, what: &str, cap: &str) -> Result<u64, String> {
    if !digits_only(s) {
        return Err(format!(
            "Invalid character(s) found in {what} number {}",
            go_quote(s)
        ));
    }
    if leading_zero(s) {
        return Err(format!(
            "{cap} number must not contain leading zeroes {}",
            go_quote(s)
        ));
    }
    parse_uint(s)
}

/// blang/semver's `Parse`.
pub(crate) fn parse(s: &str) -> Result<Semver, String> {
    if s.is_empty() {
        return Err("Version string empty".into());
    }
    let parts: Vec<&str> = s.splitn(3, '.').collect();
    let [maj, min, rest] = parts[..] else {
        return Err("No Major.Minor.Patch elements found".into());
    };
    let major = number(maj, "major", "Major")?;
    let minor = number(min, "minor", "Minor")?;
    let mut patch_str = rest;
    let mut build: Vec<&str> = Vec::new();
    if let Some(i) = patch_str.find('+') {
        build = patch_str[i + 1..].split('.').collect();
        patch_str = &patch_str[..i];
    }
    let mut pre_strs: Vec<&str> = Vec::new();
    if let Some(i) = patch_str.find('-') {
        pre_strs = patch_str[i + 1..].split('.').collect();
        patch_str = &patch_str[..i];
    }
    let patch = number(patch_str, "patch", "Patch")?;
    let mut pre = Vec::with_capacity(pre_strs.len());
    for p in pre_strs {
        if p.is_empty() {
            return Err("Prerelease is empty".into());
        }
        if digits_only(p) {
            if leading_zero(p) {
                return Err(format!(
                    "Numeric PreRelease version must not contain leading zeroes {}",
                    go_quote(p)
                ));
            }
            pre.push(Pre::Num(parse_uint(p)?));
        } else if alphanum_only(p) {
            pre.push(Pre::Str(p.to_string()));
        } else {
            return Err(format!(
                "Invalid character(s) found in prerelease {}",
                go_quote(p)
            ));
        }
    }
    for b in build {
        if b.is_empty() {
            return Err("Build meta data is empty".into());
        }
        if !alphanum_only(b) {
            return Err(format!(
                "Invalid character(s) found in build meta data {}",
                go_quote(b)
            ));
        }
    }
    Ok(Semver {
        major,
        minor,
        patch,
        pre,
    })
}

/// Kubernetes' `normalizeAndParse`: drops a leading `v`, leading zeros, and fills in a missing
/// minor or patch.
fn normalize_and_parse(s: &str) -> Result<Semver, String> {
    let s = s.strip_prefix('v').unwrap_or(s);
    let mut parts: Vec<String> = s
        .splitn(3, '.')
        .map(|p| {
            if p.len() > 1 {
                let t = p.trim_start_matches('0');
                if t.is_empty() || !t.starts_with(|c: char| c.is_ascii_digit()) {
                    format!("0{t}")
                } else {
                    t.to_string()
                }
            } else {
                p.to_string()
            }
        })
        .collect();
    if parts.len() < 3 {
        if parts.last().is_some_and(|p| p.contains(['+', '-'])) {
            return Err("short version cannot contain PreRelease/Build meta data".into());
        }
        while parts.len() < 3 {
            parts.push("0".into());
        }
    }
    parse(&parts.join("."))
}

fn parse_args(args: &[Value<'_>]) -> Result<Result<Semver, String>, EvalError> {
    let s = str_arg(args, 0)?;
    let normalize = match args.get(1) {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(EvalError::no_such_overload()),
    };
    Ok(if normalize {
        normalize_and_parse(s)
    } else {
        parse(s)
    })
}

fn to_semver<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(opaque(parse_args(args)?.map_err(EvalError::msg)?))
}

fn is_semver<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(parse_args(args)?.is_ok()))
}

fn v<'v>(args: &'v [Value<'_>], i: usize) -> Result<&'v Semver, EvalError> {
    opaque_arg::<Semver>(args, i)
}

fn compare(args: &[Value<'_>]) -> Result<Ordering, EvalError> {
    Ok(v(args, 0)?.cmp(v(args, 1)?))
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

/// A version component as a CEL int (Go converts the uint64 with wrap-around).
fn component<'a>(args: &[Value<'a>], f: fn(&Semver) -> u64) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(f(v(args, 0)?) as i64))
}

fn major<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    component(args, |s| s.major)
}

fn minor<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    component(args, |s| s.minor)
}

fn patch<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    component(args, |s| s.patch)
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::eval;

    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            ("isSemver('1.2.3')", "true"),
            ("isSemver('1.2.3-beta.1+build.5')", "true"),
            ("isSemver('v1.2.3')", "false"),
            ("isSemver('1.2')", "false"),
            ("isSemver('01.2.3')", "false"),
            ("isSemver('1.2.3-01')", "false"),
            ("isSemver('v1.2.3', true)", "true"),
            ("isSemver('1.2', true)", "true"),
            ("isSemver('01.02.03', true)", "true"),
            ("isSemver('1.2-beta', true)", "false"),
            ("isSemver('1.2.3', false)", "true"),
            ("semver('1.2.3').major()", "1"),
            ("semver('1.2.3').minor()", "2"),
            ("semver('1.2.3').patch()", "3"),
            ("semver('v01.1', true).major()", "1"),
            ("semver('v01.1', true) == semver('1.1.0')", "true"),
            ("semver('1.2.3') == semver('1.2.3+build')", "true"),
            ("semver('1.2.3').isLessThan(semver('1.2.4'))", "true"),
            ("semver('1.2.3-alpha').isLessThan(semver('1.2.3'))", "true"),
            (
                "semver('1.2.3-alpha.1').isLessThan(semver('1.2.3-alpha.beta'))",
                "true",
            ),
            (
                "semver('1.2.3-alpha').isLessThan(semver('1.2.3-alpha.1'))",
                "true",
            ),
            ("semver('1.2.3-2').isLessThan(semver('1.2.3-10'))", "true"),
            ("semver('2.0.0').isGreaterThan(semver('1.99.99'))", "true"),
            ("semver('1.2.3').compareTo(semver('1.2.3'))", "0"),
            ("semver('1.2.3').compareTo(semver('1.3.0'))", "-1"),
            ("semver('1.3.0').compareTo(semver('1.2.3'))", "1"),
            (
                "semver('1.2')",
                "error: No Major.Minor.Patch elements found",
            ),
            ("semver('')", "error: Version string empty"),
            (
                "semver('a.2.3')",
                "error: Invalid character(s) found in major number \"a\"",
            ),
            (
                "semver('1.02.3')",
                "error: Minor number must not contain leading zeroes \"02\"",
            ),
            (
                "semver('1.2.x')",
                "error: Invalid character(s) found in patch number \"x\"",
            ),
            ("semver('1.2.3-')", "error: Prerelease is empty"),
            ("semver('1.2.3+')", "error: Build meta data is empty"),
            (
                "semver('1.2.3-a_b')",
                "error: Invalid character(s) found in prerelease \"a_b\"",
            ),
            (
                "semver('1..3')",
                "error: strconv.ParseUint: parsing \"\": invalid syntax",
            ),
            (
                "semver('1.2-rc', true)",
                "error: short version cannot contain PreRelease/Build meta data",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }
}
