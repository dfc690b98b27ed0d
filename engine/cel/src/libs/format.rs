//! Kubernetes' named formats library (`kubernetes.NamedFormat`): `format.named(name)`,
//! `format.dns1123Label()` and the other constant formats, and `<Format>.validate(s)`, which is
//! `optional.none()` for a valid string and otherwise the list of apimachinery's (or
//! kube-openapi strfmt's) error messages.

use std::any::Any;
use std::sync::Arc;

use chrono::NaiveDate;

use super::opaque::{opaque, opaque_arg, same_type};
use super::str_arg;
use super::urls::parse_request_uri;
use crate::cost::{actual_size, traversal_cost};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{List, Opaque, Value};

/// The CEL type name.
pub(crate) const FORMAT: &str = "kubernetes.NamedFormat";

/// Declares the formats: the table `format.named` reads, and one `format.<name>()` function
/// each.
/// Each format has Kubernetes' `MaxRegexSize`, the regex length its validation is charged as.
macro_rules! formats {
    ($(($name:literal, $ctor:ident, $regex:expr, $check:expr)),* $(,)?) => {
        /// The formats, by name.
        const FORMATS: &[(&str, Validator, crate::registry::ImplFn, u64)] =
            &[$(($name, $check, $ctor, $regex)),*];
        $(
            fn $ctor<'a>(_: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
                Ok(opaque(Format { name: $name, check: $check, max_regex: $regex }))
            }
        )*
    };
}

formats![
    ("dns1123Label", dns1123_label_fn, 30, |s| dns1123_label(
        s, false
    )),
    ("dns1123Subdomain", dns1123_subdomain_fn, 60, |s| {
        dns1123_subdomain(s, false)
    }),
    ("dns1035Label", dns1035_label_fn, 30, |s| dns1035_label(
        s, false
    )),
    ("qualifiedName", qualified_name_fn, 60, qualified_name),
    ("dns1123LabelPrefix", dns1123_label_prefix_fn, 30, |s| {
        dns1123_label(s, true)
    }),
    (
        "dns1123SubdomainPrefix",
        dns1123_subdomain_prefix_fn,
        60,
        |s| { dns1123_subdomain(s, true) }
    ),
    ("dns1035LabelPrefix", dns1035_label_prefix_fn, 30, |s| {
        dns1035_label(s, true)
    }),
    ("labelValue", label_value_fn, 40, label_value),
    ("uri", uri_fn, 1103, uri),
    ("uuid", uuid_fn, 70, uuid),
    ("byte", byte_fn, 84, byte),
    ("date", date_fn, 71, date),
    ("datetime", datetime_fn, 71, datetime),
];

type Validator = fn(&str) -> Vec<String>;

pub(crate) fn register(r: &mut Registry) {
    let f = || Type::opaque(FORMAT);
    r.def("format.named")
        .global(&[Type::String], Type::optional(f()))
        .imp(named)
        .done();
    for (name, _, ctor, _) in FORMATS {
        r.def(&format!("format.{name}"))
            .global(&[], f())
            .imp(*ctor)
            .done();
    }
    r.def("validate")
        .member(
            &[f(), Type::String],
            Type::optional(Type::list(Type::String)),
        )
        .imp(validate)
        .cost(cost_validate)
        .done();
}

/// Kubernetes charges a validation as a regex match of the format's `MaxRegexSize`:
/// `ceil((1 + len) * 0.1) * ceil(regex * 0.25)`.
fn cost_validate(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    let Ok(f) = opaque_arg::<Format>(args, 0) else {
        return 1;
    };
    let s = args.get(1).map(actual_size).unwrap_or(1);
    traversal_cost(1 + s).saturating_mul(f.max_regex.div_ceil(4))
}

/// A named format.
#[derive(Clone, Copy)]
pub(crate) struct Format {
    name: &'static str,
    check: Validator,
    max_regex: u64,
}

impl std::fmt::Debug for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "format.{}", self.name)
    }
}

impl Opaque for Format {
    fn type_name(&self) -> &'static str {
        FORMAT
    }
    fn go_type_name(&self) -> &'static str {
        "cel.Format"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn equals(&self, other: &dyn Opaque) -> bool {
        same_type::<Format>(other).is_some_and(|o| o.name == self.name)
    }
}

fn lookup(name: &str) -> Option<Format> {
    FORMATS
        .iter()
        .find(|(n, ..)| *n == name)
        .map(|(name, check, _, max_regex)| Format {
            name,
            check: *check,
            max_regex: *max_regex,
        })
}

fn named<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Optional(
        lookup(str_arg(args, 0)?).map(|f| Arc::new(opaque(f))),
    ))
}

fn validate<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let f = opaque_arg::<Format>(args, 0)?;
    let errs = (f.check)(str_arg(args, 1)?);
    if errs.is_empty() {
        return Ok(Value::Optional(None));
    }
    Ok(Value::Optional(Some(Arc::new(Value::List(
        List::from_vec(errs.into_iter().map(Value::string).collect()),
    )))))
}

/// apimachinery's `RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{e}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

/// The `content` package's `MaxLenError`, which label keys and values use since
/// apimachinery moved them there (bytes, not characters).
fn content_max_len_error(n: usize) -> String {
    format!("must be no more than {n} bytes")
}

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

/// `first` then `middle*` then `last`, or the single `first` that is also a `last`.
fn shaped(s: &str, first: fn(u8) -> bool, middle: fn(u8) -> bool, last: fn(u8) -> bool) -> bool {
    let b = s.as_bytes();
    match b {
        [] => false,
        [only] => first(*only) && last(*only),
        [f, mid @ .., l] => first(*f) && last(*l) && mid.iter().all(|c| middle(*c)),
    }
}

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn is_label(s: &str) -> bool {
    shaped(s, lower_alnum, |c| lower_alnum(c) || c == b'-', lower_alnum)
}

fn is_subdomain(s: &str) -> bool {
    s.split('.').all(is_label)
}

fn is_qualified_part(s: &str) -> bool {
    shaped(
        s,
        |c| c.is_ascii_alphanumeric(),
        |c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'),
        |c| c.is_ascii_alphanumeric(),
    )
}

/// apimachinery's `maskTrailingDash` for the `…Prefix` formats.
fn mask_trailing_dash(s: &str, prefix: bool) -> String {
    if prefix && s.len() > 1 && s.ends_with('-') {
        format!("{}a", &s[..s.len() - 1])
    } else {
        s.to_string()
    }
}

pub(crate) fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !is_label(s) {
        if is_subdomain(s) {
            errs.push("must not contain dots".into());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

pub(crate) fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    subdomain_errors(s, max_len_error)
}

/// `IsDNS1123Subdomain` with the length message of `util/validation` or of `content`.
fn subdomain_errors(s: &str, max_len: fn(usize) -> String) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len(253));
    }
    if !is_subdomain(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

fn dns1123_label(s: &str, prefix: bool) -> Vec<String> {
    dns1123_label_errors(&mask_trailing_dash(s, prefix))
}

fn dns1123_subdomain(s: &str, prefix: bool) -> Vec<String> {
    dns1123_subdomain_errors(&mask_trailing_dash(s, prefix))
}

fn dns1035_label(s: &str, prefix: bool) -> Vec<String> {
    let s = mask_trailing_dash(s, prefix);
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(max_len_error(63));
    }
    let ok = shaped(
        &s,
        |c| c.is_ascii_lowercase(),
        |c| lower_alnum(c) || c == b'-',
        lower_alnum,
    );
    if !ok {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// apimachinery's `content.IsLabelKey` (what `IsQualifiedName` now is).
fn qualified_name(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = s.split('/').collect();
    let name = match parts[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".into());
            } else {
                errs.extend(
                    subdomain_errors(prefix, content_max_len_error)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            name
        }
        _ => {
            return vec![format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", content_max_len_error(63)));
    }
    if !is_qualified_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// apimachinery's `content.IsLabelValue`.
fn label_value(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push(content_max_len_error(63));
    }
    if !s.is_empty() && !is_qualified_part(s) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn uri(s: &str) -> Vec<String> {
    match parse_request_uri(s) {
        Ok(_) => Vec::new(),
        Err(e) => vec![e],
    }
}

/// kube-openapi strfmt's UUID pattern: 32 hex digits, optionally dashed 8-4-4-4-12.
fn uuid(s: &str) -> Vec<String> {
    let groups = [8usize, 4, 4, 4, 12];
    let b = s.as_bytes();
    let mut i = 0;
    let mut ok = true;
    for (n, len) in groups.iter().enumerate() {
        if n > 0 && b.get(i) == Some(&b'-') {
            i += 1;
        }
        match b.get(i..i + len) {
            Some(g) if g.iter().all(u8::is_ascii_hexdigit) => i += len,
            _ => {
                ok = false;
                break;
            }
        }
    }
    if ok && i == b.len() {
        Vec::new()
    } else {
        vec!["does not match the UUID format".into()]
    }
}

/// Go's `base64.StdEncoding.DecodeString` succeeds (padding required; CR and LF ignored).
/// govalidator's `IsBase64` (what kube-openapi's `byte` format checks): standard alphabet
/// groups of four, the last one possibly padded, and at least one group.
fn byte(s: &str) -> Vec<String> {
    let data = s.as_bytes();
    let alphabet = |c: &u8| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/';
    let pad = data.iter().rev().take_while(|c| **c == b'=').count();
    let body = &data[..data.len() - pad];
    let ok =
        !data.is_empty() && data.len().is_multiple_of(4) && pad <= 2 && body.iter().all(alphabet);
    if ok {
        Vec::new()
    } else {
        vec!["invalid base64".into()]
    }
}

/// Go's `time.Parse("2006-01-02", s)`.
fn is_full_date(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return false;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let part = s.get(r)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    match (num(0..4), num(5..7), num(8..10)) {
        (Some(y), Some(m), Some(d)) => NaiveDate::from_ymd_opt(y as i32, m, d).is_some(),
        _ => false,
    }
}

fn date(s: &str) -> Vec<String> {
    if is_full_date(s) {
        Vec::new()
    } else {
        vec!["invalid date".into()]
    }
}

/// kube-openapi strfmt's `IsDateTime`.
fn is_date_time(s: &str) -> bool {
    if s.len() < 4 {
        return false;
    }
    let lower = s.to_lowercase();
    let parts: Vec<&str> = lower.split('t').collect();
    if parts.len() < 2 || !is_full_date(parts[0]) {
        return false;
    }
    // ^([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))$
    let t = parts[1];
    let b = t.as_bytes();
    let two = |i: usize| {
        b.get(i..i + 2)
            .is_some_and(|d| d.iter().all(u8::is_ascii_digit))
    };
    if !(two(0) && b.get(2) == Some(&b':') && two(3) && b.get(5) == Some(&b':') && two(6)) {
        return false;
    }
    let mut rest = &t[8..];
    let mut chars = rest.char_indices();
    if let Some((_, c)) = chars.next()
        && c != 'z'
        && c != '+'
        && c != '-'
    {
        let after = &rest[c.len_utf8()..];
        let n = after.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &after[n..];
    }
    let zone_ok = rest == "z" || {
        let z = rest.as_bytes();
        z.len() == 6
            && matches!(z[0], b'+' | b'-')
            && z[1..3].iter().all(u8::is_ascii_digit)
            && z[3] == b':'
            && z[4..6].iter().all(u8::is_ascii_digit)
    };
    zone_ok && &t[0..2] <= "23" && &t[3..5] <= "59" && &t[6..8] <= "59"
}

fn datetime(s: &str) -> Vec<String> {
    if is_date_time(s) {
        Vec::new()
    } else {
        vec!["invalid datetime".into()]
    }
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::eval;

    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            (
                "format.dns1123Label().validate('my-name')",
                "optional.none()",
            ),
            (
                "format.dns1123Label().validate('My-Name')",
                "optional([\"a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')\"])",
            ),
            (
                "format.dns1123Label().validate('a.b')",
                "optional([\"must not contain dots\"])",
            ),
            (
                "format.dns1123LabelPrefix().validate('my-')",
                "optional.none()",
            ),
            (
                "format.dns1123Subdomain().validate('example.com')",
                "optional.none()",
            ),
            ("format.dns1035Label().validate('1abc').hasValue()", "true"),
            (
                "format.qualifiedName().validate('example.com/MyName')",
                "optional.none()",
            ),
            (
                "format.qualifiedName().validate('/x')",
                "optional([\"prefix part must be non-empty\"])",
            ),
            ("format.labelValue().validate('')", "optional.none()"),
            ("format.labelValue().validate('-a').hasValue()", "true"),
            (
                "format.uri().validate('https://example.com')",
                "optional.none()",
            ),
            (
                "format.uri().validate('example')",
                "optional([\"parse \\\"example\\\": invalid URI for request\"])",
            ),
            (
                "format.uuid().validate('123e4567-e89b-12d3-a456-426614174000')",
                "optional.none()",
            ),
            (
                "format.uuid().validate('123e4567e89b12d3a456426614174000')",
                "optional.none()",
            ),
            (
                "format.uuid().validate('123e4567')",
                "optional([\"does not match the UUID format\"])",
            ),
            ("format.byte().validate('aGVsbG8=')", "optional.none()"),
            (
                "format.byte().validate('aGVsbG8')",
                "optional([\"invalid base64\"])",
            ),
            ("format.date().validate('2021-01-01')", "optional.none()"),
            (
                "format.date().validate('2021-02-30')",
                "optional([\"invalid date\"])",
            ),
            (
                "format.datetime().validate('2021-01-01T00:00:00Z')",
                "optional.none()",
            ),
            (
                "format.datetime().validate('2021-01-01T00:00:00.123+01:00')",
                "optional.none()",
            ),
            (
                "format.datetime().validate('2021-01-01T24:00:00Z')",
                "optional([\"invalid datetime\"])",
            ),
            ("format.named('dns1123Label').hasValue()", "true"),
            ("format.named('nope').hasValue()", "false"),
            (
                "format.named('labelValue').value().validate('ok')",
                "optional.none()",
            ),
            ("format.named('uuid').value() == format.uuid()", "true"),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }
}
