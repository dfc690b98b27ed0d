//! Kubernetes' URL library (`kubernetes.URL`): `url`, `isURL`, `getScheme`, `getHost`,
//! `getHostname`, `getPort`, `getEscapedPath` and `getQuery`, with Go's `net/url` semantics
//! (`url.ParseRequestURI` decides validity, `url.Parse` builds the value).

use std::any::Any;
use std::sync::Arc;

use super::ip::go_quote;
use super::opaque::{opaque, opaque_arg, same_type};
use super::str_arg;
use crate::cost::{actual_size, traversal_cost};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{Key, List, Map, Opaque, OwnedMap, Str, Value};

/// The CEL type name.
pub(crate) const URL: &str = "kubernetes.URL";

pub(crate) fn register(r: &mut Registry) {
    use Type::{Bool, String};
    let u = || Type::opaque(URL);
    r.def("url")
        .global(&[String], u())
        .imp(to_url)
        .cost(cost_parse)
        .done();
    r.def("isURL").global(&[String], Bool).imp(is_url).done();
    let getters: [(&str, crate::registry::ImplFn); 5] = [
        ("getScheme", get_scheme),
        ("getHost", get_host),
        ("getHostname", get_hostname),
        ("getPort", get_port),
        ("getEscapedPath", get_escaped_path),
    ];
    for (name, f) in getters {
        r.def(name).member(&[u()], String).imp(f).done();
    }
    r.def("getQuery")
        .member(&[u()], Type::map(String, Type::list(String)))
        .imp(get_query)
        .done();
}

fn cost_parse(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    traversal_cost(args.first().map(actual_size).unwrap_or(0))
}

/// A parsed URL (the fields of Go's `url.URL` the library reads).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) struct Url {
    scheme: String,
    opaque: String,
    userinfo: Option<String>,
    host: String,
    path: String,
    raw_path: String,
    raw_query: String,
    fragment: String,
}

impl Opaque for Url {
    fn type_name(&self) -> &'static str {
        URL
    }
    fn go_type_name(&self) -> &'static str {
        "cel.URL"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn equals(&self, other: &dyn Opaque) -> bool {
        same_type::<Url>(other) == Some(self)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Path,
    Host,
    QueryComponent,
    UserPassword,
    Fragment,
}

/// Go's `shouldEscape` for the modes used here.
#[inline]
fn should_escape(c: u8, mode: Mode) -> bool {
    ESCAPES[mode as usize][c as usize]
}

/// [`should_escape`] for every byte, by mode.
const ESCAPES: [[bool; 256]; 5] = {
    let modes = [
        Mode::Path,
        Mode::Host,
        Mode::QueryComponent,
        Mode::UserPassword,
        Mode::Fragment,
    ];
    let mut tables = [[false; 256]; 5];
    let mut m = 0;
    while m < modes.len() {
        let mut c = 0;
        while c < 256 {
            tables[modes[m] as usize][c] = escapes(c as u8, modes[m]);
            c += 1;
        }
        m += 1;
    }
    tables
};

/// Go's `shouldEscape`, computed (for [`ESCAPES`]).
const fn escapes(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if matches!(mode, Mode::Host)
        && matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
    {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => match mode {
            Mode::Path => c == b'?',
            Mode::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
            Mode::QueryComponent => true,
            Mode::Fragment => false,
            Mode::Host => true,
        },
        _ => {
            if matches!(mode, Mode::Fragment) {
                return !matches!(c, b'!' | b'(' | b')' | b'*');
            }
            true
        }
    }
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Go's `url.unescape`; the error is the text of Go's error.
fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    // Without escapes (nor `+` in a query, nor host validation) the text is its own value.
    if mode != Mode::Host
        && !s
            .bytes()
            .any(|c| c == b'%' || c == b'+' && mode == Mode::QueryComponent)
    {
        return Ok(s.to_string());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let (Some(h), Some(l)) = (
                    b.get(i + 1).copied().and_then(hex),
                    b.get(i + 2).copied().and_then(hex),
                ) else {
                    let end = (i + 3).min(b.len());
                    return Err(format!(
                        "invalid URL escape {}",
                        go_quote(&String::from_utf8_lossy(&b[i..end]))
                    ));
                };
                if mode == Mode::Host && h < 8 && &b[i..i + 3] != b"%25" {
                    return Err(format!(
                        "invalid URL escape {}",
                        go_quote(&String::from_utf8_lossy(&b[i..i + 3]))
                    ));
                }
                out.push(h << 4 | l);
                i += 3;
            }
            b'+' if mode == Mode::QueryComponent => {
                out.push(b' ');
                i += 1;
            }
            c => {
                if mode == Mode::Host && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {} in host name",
                        go_quote(&(c as char).to_string())
                    ));
                }
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(String::from_utf8(out)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// Go's `url.escape` in path mode.
fn escape_path(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if should_escape(c, Mode::Path) {
            out.push('%');
            out.push(char::from(HEX[usize::from(c >> 4)]));
            out.push(char::from(HEX[usize::from(c & 0xf)]));
        } else {
            out.push(c as char);
        }
    }
    out
}

/// Whether `escaped` is Go's `url.escape` of `path` in path mode, without building it.
fn is_escaped_path(path: &str, escaped: &str) -> bool {
    if path.bytes().any(|c| should_escape(c, Mode::Path)) {
        return escape_path(path) == escaped;
    }
    path == escaped
}

/// Go's `validEncoded` in path mode.
fn valid_encoded_path(s: &str) -> bool {
    s.bytes()
        .all(|c| b"!$&'()*+,;=:@[]%".contains(&c) || !should_escape(c, Mode::Path))
}

fn valid_optional_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        Some(digits) => digits.bytes().all(|c| c.is_ascii_digit()),
        None => port.is_empty(),
    }
}

fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let Some(i) = host.rfind(']') else {
            return Err("missing ']' in host".into());
        };
        let colon_port = &host[i + 1..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    } else if let Some(i) = host.rfind(':') {
        let colon_port = &host[i..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", go_quote(colon_port)));
        }
    }
    unescape(host, Mode::Host)
}

fn valid_userinfo(s: &str) -> bool {
    s.bytes()
        .all(|c| c.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&c))
}

/// Go's `url.parse(raw, viaRequest)`.
fn parse(raw: &str, via_request: bool) -> Result<Url, String> {
    if raw.bytes().any(|c| c < 0x20 || c == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    if raw.is_empty() && via_request {
        return Err("empty url".into());
    }
    let mut u = Url::default();
    if raw == "*" {
        u.path = "*".into();
        return Ok(u);
    }
    let (scheme, mut rest) = split_scheme(raw)?;
    u.scheme = scheme.to_ascii_lowercase();
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        rest = &rest[..rest.len() - 1];
    } else if let Some((r, q)) = rest.split_once('?') {
        rest = r;
        u.raw_query = q.to_string();
    }
    if !rest.starts_with('/') {
        if !u.scheme.is_empty() {
            u.opaque = rest.to_string();
            return Ok(u);
        }
        if via_request {
            return Err("invalid URI for request".into());
        }
        let segment = rest.split('/').next().unwrap_or_default();
        if segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".into());
        }
    }
    if (!u.scheme.is_empty() || !via_request && !rest.starts_with("///")) && rest.starts_with("//")
    {
        let authority_and_path = &rest[2..];
        let (authority, path) = match authority_and_path.find('/') {
            Some(i) => (&authority_and_path[..i], &authority_and_path[i..]),
            None => (authority_and_path, ""),
        };
        let (user, host) = match authority.rfind('@') {
            Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
            None => (None, authority),
        };
        u.host = parse_host(host)?;
        if let Some(user) = user {
            if !valid_userinfo(user) {
                return Err("net/url: invalid userinfo".into());
            }
            for part in user.splitn(2, ':') {
                unescape(part, Mode::UserPassword)?;
            }
            u.userinfo = Some(user.to_string());
        }
        rest = path;
    }
    u.path = unescape(rest, Mode::Path)?;
    if !is_escaped_path(&u.path, rest) {
        u.raw_path = rest.to_string();
    }
    Ok(u)
}

fn split_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b':' if i == 0 => return Err("missing protocol scheme".into()),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// `url.ParseRequestURI`, with Go's error text.
pub(crate) fn parse_request_uri(raw: &str) -> Result<Url, String> {
    parse(raw, true).map_err(|e| format!("parse {}: {e}", go_quote(raw)))
}

/// `url.Parse`, with Go's error text.
fn parse_url(raw: &str) -> Result<Url, String> {
    let (u, frag) = raw.split_once('#').unwrap_or((raw, ""));
    let mut url = parse(u, false).map_err(|e| format!("parse {}: {e}", go_quote(u)))?;
    url.fragment =
        unescape(frag, Mode::Fragment).map_err(|e| format!("parse {}: {e}", go_quote(raw)))?;
    Ok(url)
}

fn url_error(e: String) -> EvalError {
    EvalError::msg(format!(
        "URL parse error during conversion from string: {e}"
    ))
}

fn to_url<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let s = str_arg(args, 0)?;
    let request = parse_request_uri(s).map_err(url_error)?;
    // With a scheme and no fragment, `url.Parse` reads the text as `url.ParseRequestURI` did.
    if !request.scheme.is_empty() && !s.contains('#') {
        return Ok(opaque(request));
    }
    Ok(opaque(parse_url(s).map_err(url_error)?))
}

fn is_url<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(parse_request_uri(str_arg(args, 0)?).is_ok()))
}

fn url<'v>(args: &'v [Value<'_>]) -> Result<&'v Url, EvalError> {
    opaque_arg::<Url>(args, 0)
}

/// Go's `splitHostPort` on `Url.Host`.
fn split_host_port(host_port: &str) -> (&str, &str) {
    let (mut host, mut port) = (host_port, "");
    if let Some(i) = host.rfind(':')
        && valid_optional_port(&host[i..])
    {
        (host, port) = (&host_port[..i], &host_port[i + 1..]);
    }
    if host.len() >= 2 && host.starts_with('[') && host.ends_with(']') {
        host = &host[1..host.len() - 1];
    }
    (host, port)
}

fn get_scheme<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(url(args)?.scheme.as_str()))
}

fn get_host<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(url(args)?.host.as_str()))
}

fn get_hostname<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(split_host_port(&url(args)?.host).0))
}

fn get_port<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(split_host_port(&url(args)?.host).1))
}

fn get_escaped_path<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let u = url(args)?;
    if !u.raw_path.is_empty()
        && valid_encoded_path(&u.raw_path)
        && unescape(&u.raw_path, Mode::Path).as_deref() == Ok(u.path.as_str())
    {
        return Ok(Value::string(u.raw_path.as_str()));
    }
    if u.path == "*" {
        return Ok(Value::string("*"));
    }
    Ok(Value::string(escape_path(&u.path)))
}

fn get_query<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let u = url(args)?;
    let mut pairs: Vec<(String, Vec<Value<'a>>)> = Vec::new();
    for key in u.raw_query.split('&') {
        if key.contains(';') || key.is_empty() {
            continue;
        }
        let (k, v) = key.split_once('=').unwrap_or((key, ""));
        let (Ok(k), Ok(v)) = (
            unescape(k, Mode::QueryComponent),
            unescape(v, Mode::QueryComponent),
        ) else {
            continue;
        };
        match pairs.iter_mut().find(|(pk, _)| *pk == k) {
            Some((_, vs)) => vs.push(Value::string(v)),
            None => pairs.push((k, vec![Value::string(v)])),
        }
    }
    let mut m = OwnedMap::with_capacity(pairs.len());
    for (k, vs) in pairs {
        m.insert(Key::String(Str::from(k)), Value::List(List::from_vec(vs)));
    }
    Ok(Value::Map(Map::Owned(Arc::new(m))))
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::eval;

    #[test]
    fn table() {
        let cases: &[(&str, &str)] = &[
            ("isURL('https://example.com')", "true"),
            ("isURL('/absolute-path')", "true"),
            (
                "isURL('https://example.com:80/path?query=val#fragment')",
                "true",
            ),
            ("isURL('../relative-path')", "false"),
            ("isURL('example.com')", "false"),
            ("isURL('')", "false"),
            ("isURL('https://exa mple.com')", "false"),
            ("isURL('https://example.com:8a/')", "false"),
            ("isURL('mailto:someone@example.com')", "true"),
            (
                "url('../relative-path')",
                "error: URL parse error during conversion from string: parse \"../relative-path\": invalid URI for request",
            ),
            (
                "url('https://example.com:port/')",
                "error: URL parse error during conversion from string: parse \"https://example.com:port/\": invalid port \":port\" after host",
            ),
            (
                "url(':foo')",
                "error: URL parse error during conversion from string: parse \":foo\": missing protocol scheme",
            ),
            ("url('https://example.com/').getScheme()", "\"https\""),
            ("url('HTTPS://example.com/').getScheme()", "\"https\""),
            ("url('https://example.com/').getHost()", "\"example.com\""),
            (
                "url('https://example.com:80/').getHost()",
                "\"example.com:80\"",
            ),
            ("url('https://[::1]:80/').getHost()", "\"[::1]:80\""),
            ("url('https://[::1]/').getHost()", "\"[::1]\""),
            ("url('/path').getHost()", "\"\""),
            (
                "url('https://example.com:80/').getHostname()",
                "\"example.com\"",
            ),
            (
                "url('https://127.0.0.1:80/').getHostname()",
                "\"127.0.0.1\"",
            ),
            ("url('https://[::1]:80/').getHostname()", "\"::1\""),
            ("url('/path').getHostname()", "\"\""),
            ("url('https://example.com:80/').getPort()", "\"80\""),
            ("url('https://example.com/').getPort()", "\"\""),
            (
                "url('https://example.com/path').getEscapedPath()",
                "\"/path\"",
            ),
            (
                "url('https://example.com/path with spaces/').getEscapedPath()",
                "\"/path%20with%20spaces/\"",
            ),
            (
                "url('https://example.com/a%2Fb').getEscapedPath()",
                "\"/a%2Fb\"",
            ),
            ("url('https://example.com').getEscapedPath()", "\"\""),
            (
                "url('https://example.com/p#frag').getEscapedPath()",
                "\"/p\"",
            ),
            (
                "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery()",
                "{\"k1\": [\"a\"], \"k2\": [\"b\", \"c\"]}",
            ),
            (
                "url('https://example.com/path?key with spaces=value with spaces').getQuery()",
                "{\"key with spaces\": [\"value with spaces\"]}",
            ),
            (
                "url('https://example.com/path?a=%41+b&bad=%zz').getQuery()",
                "{\"a\": [\"A b\"]}",
            ),
            ("url('https://example.com/path?').getQuery()", "{}"),
            ("url('https://example.com/path').getQuery()", "{}"),
            (
                "url('https://user:pw@example.com/').getHost()",
                "\"example.com\"",
            ),
            ("url('https://a.com/x') == url('https://a.com/x')", "true"),
            ("url('https://a.com/x') == url('https://a.com/y')", "false"),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }
}
