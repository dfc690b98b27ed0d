//! Kubernetes' IP and CIDR libraries (`net.IP`, `net.CIDR`): `ip`, `isIP`, `ip.isCanonical`,
//! `family`, the `is…` address classes, `cidr`, `isCIDR`, `containsIP`, `containsCIDR`, `ip()`
//! of a CIDR, `masked`, `prefixLength`, `string` and `==`. Addresses are parsed as Go's
//! `netip.ParseAddr`/`ParsePrefix` do (with their error texts); zones and IPv4-mapped IPv6
//! addresses are rejected as Kubernetes does.

use std::any::Any;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::opaque::{opaque, opaque_arg, same_type};
use super::{arg, str_arg};
use crate::cost::{actual_size, traversal_cost};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{Opaque, Value};

/// The CEL type name of IP addresses.
pub(crate) const IP: &str = "net.IP";
/// The CEL type name of CIDRs.
pub(crate) const CIDR: &str = "net.CIDR";

pub(crate) fn register(r: &mut Registry) {
    use Type::{Bool, Int, String};
    let ip = || Type::opaque(IP);
    let cidr = || Type::opaque(CIDR);
    r.def("ip")
        .global(&[String], ip())
        .imp(to_ip)
        .cost(cost_parse)
        .done();
    r.def("isIP")
        .global(&[String], Bool)
        .imp(is_ip)
        .cost(cost_parse)
        .done();
    r.def("ip.isCanonical")
        .global(&[String], Bool)
        .imp(is_canonical)
        .cost(cost_parse_twice)
        .done();
    r.def("family").member(&[ip()], Int).imp(family).done();
    let classes: [(&str, crate::registry::ImplFn); 5] = [
        ("isUnspecified", is_unspecified),
        ("isLoopback", is_loopback),
        ("isLinkLocalMulticast", is_link_local_multicast),
        ("isLinkLocalUnicast", is_link_local_unicast),
        ("isGlobalUnicast", is_global_unicast),
    ];
    for (name, f) in classes {
        r.def(name).member(&[ip()], Bool).imp(f).done();
    }
    r.def("string")
        .global(&[ip()], String)
        .imp(to_string)
        .done();

    r.def("cidr")
        .global(&[String], cidr())
        .imp(to_cidr)
        .cost(cost_parse)
        .done();
    r.def("isCIDR")
        .global(&[String], Bool)
        .imp(is_cidr)
        .cost(cost_parse)
        .done();
    r.def("containsIP")
        .member(&[cidr(), ip()], Bool)
        .imp(contains_ip)
        .cost(cost_contains_ip)
        .done();
    r.def("containsIP")
        .member(&[cidr(), String], Bool)
        .imp(contains_ip)
        .cost(cost_contains_ip)
        .done();
    r.def("containsCIDR")
        .member(&[cidr(), cidr()], Bool)
        .imp(contains_cidr)
        .cost(cost_contains_cidr)
        .done();
    r.def("containsCIDR")
        .member(&[cidr(), String], Bool)
        .imp(contains_cidr)
        .cost(cost_contains_cidr)
        .done();
    r.def("ip").member(&[cidr()], ip()).imp(cidr_ip).done();
    r.def("masked").member(&[cidr()], cidr()).imp(masked).done();
    r.def("prefixLength")
        .member(&[cidr()], Int)
        .imp(prefix_length)
        .done();
    r.def("string")
        .global(&[cidr()], String)
        .imp(to_string)
        .done();
}

/// An IP address (`netip.Addr` without a zone).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ip(IpAddr);

/// A CIDR: an address and a prefix length (host bits are kept; `masked` clears them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    bits: u8,
}

impl Opaque for Ip {
    fn type_name(&self) -> &'static str {
        IP
    }
    fn go_type_name(&self) -> &'static str {
        "cel.IP"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn equals(&self, other: &dyn Opaque) -> bool {
        same_type::<Ip>(other) == Some(self)
    }
}

impl Opaque for Cidr {
    fn type_name(&self) -> &'static str {
        CIDR
    }
    fn go_type_name(&self) -> &'static str {
        "cel.CIDR"
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn equals(&self, other: &dyn Opaque) -> bool {
        same_type::<Cidr>(other) == Some(self)
    }
}

/// Go's `strconv.Quote` for the strings these errors show.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A `netip.ParseAddr` error.
struct AddrError {
    input: String,
    msg: &'static str,
    at: Option<String>,
}

impl AddrError {
    fn new(input: &str, msg: &'static str, at: Option<&str>) -> Self {
        Self {
            input: input.to_string(),
            msg,
            at: at.map(str::to_string),
        }
    }

    fn text(&self) -> String {
        match &self.at {
            Some(at) => format!(
                "ParseAddr({}): {} (at {})",
                go_quote(&self.input),
                self.msg,
                go_quote(at)
            ),
            None => format!("ParseAddr({}): {}", go_quote(&self.input), self.msg),
        }
    }
}

/// Go's `parseIPv4Fields` over `input[off..]`.
fn parse_v4_fields(input: &str, off: usize) -> Result<[u8; 4], AddrError> {
    let s = input.get(off..).unwrap_or_default().as_bytes();
    let mut fields = [0u8; 4];
    let (mut val, mut pos, mut dig_len) = (0u32, 0usize, 0usize);
    for (i, &c) in s.iter().enumerate() {
        let rest = || input.get(off + i..);
        if c.is_ascii_digit() {
            if dig_len == 1 && val == 0 {
                return Err(AddrError::new(
                    input,
                    "IPv4 field has octet with leading zero",
                    None,
                ));
            }
            val = val * 10 + u32::from(c - b'0');
            dig_len += 1;
            if val > 255 {
                return Err(AddrError::new(input, "IPv4 field has value >255", None));
            }
        } else if c == b'.' {
            if i == 0 || i == s.len() - 1 || s.get(i - 1) == Some(&b'.') {
                return Err(AddrError::new(
                    input,
                    "IPv4 field must have at least one digit",
                    rest(),
                ));
            }
            if pos == 3 {
                return Err(AddrError::new(input, "IPv4 address too long", None));
            }
            fields[pos] = val as u8;
            pos += 1;
            val = 0;
            dig_len = 0;
        } else {
            return Err(AddrError::new(input, "unexpected character", rest()));
        }
    }
    if pos < 3 {
        return Err(AddrError::new(input, "IPv4 address too short", None));
    }
    fields[3] = val as u8;
    Ok(fields)
}

/// Go's `parseIPv6`; returns the address and whether a zone was given.
fn parse_v6(input: &str) -> Result<(Ipv6Addr, bool), AddrError> {
    let (s, zone) = match input.split_once('%') {
        Some((_, "")) => {
            return Err(AddrError::new(
                input,
                "zone must be a non-empty string",
                None,
            ));
        }
        Some((a, z)) => (a, Some(z)),
        None => (input, None),
    };
    let mut ip = [0u8; 16];
    let mut ellipsis: Option<usize> = None;
    let mut s = s;
    if s.starts_with("::") {
        ellipsis = Some(0);
        s = &s[2..];
        if s.is_empty() {
            return Ok((Ipv6Addr::UNSPECIFIED, zone.is_some()));
        }
    }
    let mut i = 0usize;
    while i < 16 {
        let b = s.as_bytes();
        let mut off = 0usize;
        let mut acc = 0u32;
        while off < b.len() {
            let Some(d) = (b[off] as char).to_digit(16) else {
                break;
            };
            acc = (acc << 4) + d;
            if off > 3 {
                return Err(AddrError::new(
                    input,
                    "each group must have 4 or less digits",
                    Some(s),
                ));
            }
            if acc > 0xffff {
                return Err(AddrError::new(
                    input,
                    "IPv6 field has value >=2^16",
                    Some(s),
                ));
            }
            off += 1;
        }
        if off == 0 {
            return Err(AddrError::new(
                input,
                "each colon-separated field must have at least one digit",
                Some(s),
            ));
        }
        if b.get(off) == Some(&b'.') {
            if ellipsis.is_none() && i != 12 {
                return Err(AddrError::new(
                    input,
                    "embedded IPv4 address must replace the final 2 fields of the address",
                    Some(s),
                ));
            }
            if i + 4 > 16 {
                return Err(AddrError::new(
                    input,
                    "too many hex fields to fit an embedded IPv4 at the end of the address",
                    Some(s),
                ));
            }
            let end = input.len() - zone.map_or(0, |z| z.len() + 1);
            let v4 = parse_v4_fields(input.get(..end).unwrap_or_default(), end - s.len()).map_err(
                |e| AddrError {
                    input: input.to_string(),
                    ..e
                },
            )?;
            ip[i..i + 4].copy_from_slice(&v4);
            s = "";
            i += 4;
            break;
        }
        ip[i] = (acc >> 8) as u8;
        ip[i + 1] = acc as u8;
        i += 2;
        s = &s[off..];
        if s.is_empty() {
            break;
        }
        if !s.starts_with(':') {
            return Err(AddrError::new(
                input,
                "unexpected character, want colon",
                Some(s),
            ));
        } else if s.len() == 1 {
            return Err(AddrError::new(
                input,
                "colon must be followed by more characters",
                Some(s),
            ));
        }
        s = &s[1..];
        if s.starts_with(':') {
            if ellipsis.is_some() {
                return Err(AddrError::new(input, "multiple :: in address", Some(s)));
            }
            ellipsis = Some(i);
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return Err(AddrError::new(
            input,
            "trailing garbage after address",
            Some(s),
        ));
    }
    if i < 16 {
        let Some(e) = ellipsis else {
            return Err(AddrError::new(input, "address string too short", None));
        };
        let n = 16 - i;
        ip.copy_within(e..i, e + n);
        ip[e..e + n].fill(0);
    } else if ellipsis.is_some() {
        return Err(AddrError::new(
            input,
            "the :: must expand to at least one field of zeros",
            None,
        ));
    }
    Ok((Ipv6Addr::from(ip), zone.is_some()))
}

/// Go's `netip.ParseAddr`; returns the address and whether it had a zone.
fn parse_addr(s: &str) -> Result<(IpAddr, bool), AddrError> {
    for c in s.bytes() {
        match c {
            b'.' => return parse_v4_fields(s, 0).map(|f| (IpAddr::V4(Ipv4Addr::from(f)), false)),
            b':' => return parse_v6(s).map(|(a, z)| (IpAddr::V6(a), z)),
            b'%' => return Err(AddrError::new(s, "missing IPv6 address", None)),
            _ => {}
        }
    }
    Err(AddrError::new(s, "unable to parse IP", None))
}

fn is_4in6(a: &IpAddr) -> bool {
    matches!(a, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// Kubernetes' `parseIPAddr`.
fn parse_ip(raw: &str) -> Result<IpAddr, String> {
    let (addr, zoned) = parse_addr(raw).map_err(|e| {
        format!(
            "IP Address {} parse error during conversion from string: {}",
            go_quote(raw),
            e.text()
        )
    })?;
    if zoned {
        return Err(format!(
            "IP address {} with zone value is not allowed",
            go_quote(raw)
        ));
    }
    if is_4in6(&addr) {
        return Err(format!(
            "IPv4-mapped IPv6 address {} is not allowed",
            go_quote(raw)
        ));
    }
    Ok(addr)
}

/// Go's `netip.ParsePrefix`.
fn parse_prefix(s: &str) -> Result<Cidr, String> {
    let fail = |msg: String| format!("netip.ParsePrefix({}): {msg}", go_quote(s));
    let Some(slash) = s.rfind('/') else {
        return Err(fail("no '/'".into()));
    };
    let (addr, zoned) = parse_addr(&s[..slash]).map_err(|e| fail(e.text()))?;
    if addr.is_ipv6() && zoned {
        return Err(fail("IPv6 zones cannot be present in a prefix".into()));
    }
    let bits_str = &s[slash + 1..];
    let bad = || fail(format!("bad bits after slash: {}", go_quote(bits_str)));
    let lead_ok = bits_str.len() <= 1 || matches!(bits_str.as_bytes()[0], b'1'..=b'9');
    if !lead_ok || bits_str.is_empty() || !bits_str.bytes().all(|c| c.is_ascii_digit()) {
        // (Go's Atoi also takes a sign, which the leading-digit rule already refused.)
        return Err(bad());
    }
    let bits: u64 = bits_str.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv6() { 128 } else { 32 };
    if bits > max {
        return Err(fail("prefix length out of range".into()));
    }
    Ok(Cidr {
        addr,
        bits: bits as u8,
    })
}

/// Kubernetes' `parseCIDR`.
fn parse_cidr(raw: &str) -> Result<Cidr, String> {
    let c = parse_prefix(raw)
        .map_err(|e| format!("network address parse error during conversion from string: {e}"))?;
    if is_4in6(&c.addr) {
        return Err(format!(
            "IPv4-mapped IPv6 address {} is not allowed",
            go_quote(raw)
        ));
    }
    Ok(c)
}

fn ip_err(raw: &str) -> Result<Ip, EvalError> {
    parse_ip(raw).map(Ip).map_err(EvalError::msg)
}

fn cidr_err(raw: &str) -> Result<Cidr, EvalError> {
    parse_cidr(raw).map_err(|e| {
        EvalError::msg(format!(
            "network address parse error during conversion from string: {e}"
        ))
    })
}

fn masked_addr(addr: IpAddr, bits: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
        }
        IpAddr::V6(a) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
        }
    }
}

impl Cidr {
    fn masked(&self) -> Cidr {
        Cidr {
            addr: masked_addr(self.addr, self.bits),
            bits: self.bits,
        }
    }

    /// `netip.Prefix.Contains`: same family and the same leading `bits`.
    fn contains(&self, ip: &IpAddr) -> bool {
        self.addr.is_ipv4() == ip.is_ipv4()
            && masked_addr(*ip, self.bits) == masked_addr(self.addr, self.bits)
    }

    /// Size for cost purposes: the prefix in bytes.
    fn size(&self) -> u64 {
        u64::from(self.bits).div_ceil(8)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.bits)
    }
}

fn cost_parse(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    traversal_cost(args.first().map(actual_size).unwrap_or(0))
}

fn cost_parse_twice(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    traversal_cost(2 * args.first().map(actual_size).unwrap_or(0))
}

/// Size of an IP, CIDR or string argument for cost purposes.
fn net_size(v: Option<&Value<'_>>) -> u64 {
    match v {
        Some(Value::Opaque(o)) => {
            if let Some(c) = o.as_any().downcast_ref::<Cidr>() {
                c.size()
            } else if let Some(ip) = o.as_any().downcast_ref::<Ip>() {
                if ip.0.is_ipv4() { 4 } else { 16 }
            } else {
                1
            }
        }
        Some(v) => actual_size(v),
        None => 0,
    }
}

/// Extra parsing cost when the other operand is a string.
fn string_operand_cost(args: &[Value<'_>]) -> u64 {
    match args.get(1) {
        Some(s @ Value::String(_)) => traversal_cost(actual_size(s)),
        _ => 0,
    }
}

fn cost_contains_ip(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    let c = net_size(args.first());
    traversal_cost(2 * c) + string_operand_cost(args)
}

fn cost_contains_cidr(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    let c = net_size(args.first());
    traversal_cost(2 * c) + traversal_cost(c) + 1 + string_operand_cost(args)
}

fn to_ip<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(opaque(ip_err(str_arg(args, 0)?)?))
}

fn is_ip<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(parse_ip(str_arg(args, 0)?).is_ok()))
}

fn is_canonical<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let s = str_arg(args, 0)?;
    let ip = ip_err(s)?;
    Ok(Value::Bool(ip.0.to_string() == s))
}

fn ip<'v>(args: &'v [Value<'_>]) -> Result<&'v IpAddr, EvalError> {
    opaque_arg::<Ip>(args, 0).map(|i| &i.0)
}

fn family<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(if ip(args)?.is_ipv4() { 4 } else { 6 }))
}

fn is_unspecified<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(ip(args)?.is_unspecified()))
}

fn is_loopback<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(ip(args)?.is_loopback()))
}

fn is_link_local_multicast<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(match ip(args)? {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => {
            let o = a.octets();
            o[0] == 0xff && o[1] & 0x0f == 0x02
        }
    }))
}

fn link_local_unicast(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(a) => a.octets()[..2] == [169, 254],
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_unicast<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(link_local_unicast(ip(args)?)))
}

/// Go's `Addr.IsGlobalUnicast` (private ranges count as global).
fn is_global_unicast<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let a = ip(args)?;
    let broadcast = matches!(a, IpAddr::V4(v4) if *v4 == Ipv4Addr::BROADCAST);
    Ok(Value::Bool(
        !broadcast
            && !a.is_unspecified()
            && !a.is_loopback()
            && !a.is_multicast()
            && !link_local_unicast(a),
    ))
}

fn to_string<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    match arg(args, 0)? {
        Value::Opaque(o) => {
            if let Some(c) = o.as_any().downcast_ref::<Cidr>() {
                Ok(Value::string(c.to_string()))
            } else if let Some(i) = o.as_any().downcast_ref::<Ip>() {
                Ok(Value::string(i.0.to_string()))
            } else {
                Err(EvalError::no_such_overload())
            }
        }
        _ => Err(EvalError::no_such_overload()),
    }
}

fn to_cidr<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(opaque(cidr_err(str_arg(args, 0)?)?))
}

fn is_cidr<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Bool(parse_cidr(str_arg(args, 0)?).is_ok()))
}

fn cidr(args: &[Value<'_>]) -> Result<Cidr, EvalError> {
    opaque_arg::<Cidr>(args, 0).copied()
}

fn contains_ip<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let c = cidr(args)?;
    let other = match arg(args, 1)? {
        // Upstream passes the parse error where an IP is expected, which reports no overload.
        Value::String(s) => ip_err(s).map_err(|_| EvalError::no_such_overload())?,
        _ => *opaque_arg::<Ip>(args, 1)?,
    };
    Ok(Value::Bool(c.contains(&other.0)))
}

fn contains_cidr<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let c = cidr(args)?;
    let other = match arg(args, 1)? {
        Value::String(s) => cidr_err(s)?,
        _ => *opaque_arg::<Cidr>(args, 1)?,
    };
    // As upstream (`Overlaps` and a prefix at least as long): both addresses masked to the
    // receiver's length are the same.
    let overlaps = c.addr.is_ipv4() == other.addr.is_ipv4()
        && c.masked()
            == Cidr {
                addr: other.addr,
                bits: c.bits,
            }
            .masked();
    Ok(Value::Bool(overlaps && c.bits <= other.bits))
}

fn cidr_ip<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(opaque(Ip(cidr(args)?.addr)))
}

fn masked<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(opaque(cidr(args)?.masked()))
}

fn prefix_length<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::Int(i64::from(cidr(args)?.bits)))
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::{eval, eval_cost};

    #[test]
    fn ip_table() {
        let cases: &[(&str, &str)] = &[
            ("isIP('1.2.3.4')", "true"),
            ("isIP('::1')", "true"),
            ("isIP('1.2.3')", "false"),
            ("isIP('01.2.3.4')", "false"),
            ("isIP('::ffff:1.2.3.4')", "false"),
            ("isIP('fe80::1%eth0')", "false"),
            ("isIP('2001:db8::1.2.3.4')", "true"),
            (
                "ip('1.2.3')",
                "error: IP Address \"1.2.3\" parse error during conversion from string: ParseAddr(\"1.2.3\"): IPv4 address too short",
            ),
            (
                "ip('1.2.3.256')",
                "error: IP Address \"1.2.3.256\" parse error during conversion from string: ParseAddr(\"1.2.3.256\"): IPv4 field has value >255",
            ),
            (
                "ip('1..2.3')",
                "error: IP Address \"1..2.3\" parse error during conversion from string: ParseAddr(\"1..2.3\"): IPv4 field must have at least one digit (at \".2.3\")",
            ),
            (
                "ip('1.2.3.04')",
                "error: IP Address \"1.2.3.04\" parse error during conversion from string: ParseAddr(\"1.2.3.04\"): IPv4 field has octet with leading zero",
            ),
            (
                "ip('foo')",
                "error: IP Address \"foo\" parse error during conversion from string: ParseAddr(\"foo\"): unable to parse IP",
            ),
            (
                "ip('1:2::3::4')",
                "error: IP Address \"1:2::3::4\" parse error during conversion from string: ParseAddr(\"1:2::3::4\"): multiple :: in address (at \":4\")",
            ),
            (
                "ip('12345::')",
                "error: IP Address \"12345::\" parse error during conversion from string: ParseAddr(\"12345::\"): each group must have 4 or less digits (at \"12345::\")",
            ),
            (
                "ip('fe80::1%eth0')",
                "error: IP address \"fe80::1%eth0\" with zone value is not allowed",
            ),
            (
                "ip('::ffff:1.2.3.4')",
                "error: IPv4-mapped IPv6 address \"::ffff:1.2.3.4\" is not allowed",
            ),
            ("ip('1.2.3.4') == ip('1.2.3.4')", "true"),
            ("ip('::1') == ip('0:0::1')", "true"),
            ("ip('1.2.3.4') == ip('1.2.3.5')", "false"),
            ("string(ip('2001:DB8:0:0:0:0:0:1'))", "\"2001:db8::1\""),
            ("ip.isCanonical('2001:db8::1')", "true"),
            ("ip.isCanonical('2001:DB8::1')", "false"),
            ("ip.isCanonical('2001:db8:0:0:0:0:0:1')", "false"),
            ("ip('1.2.3.4').family()", "4"),
            ("ip('::1').family()", "6"),
            ("ip('0.0.0.0').isUnspecified()", "true"),
            ("ip('::').isUnspecified()", "true"),
            ("ip('127.0.0.2').isLoopback()", "true"),
            ("ip('::1').isLoopback()", "true"),
            ("ip('224.0.0.1').isLinkLocalMulticast()", "true"),
            ("ip('ff02::1').isLinkLocalMulticast()", "true"),
            ("ip('224.0.1.1').isLinkLocalMulticast()", "false"),
            ("ip('169.254.1.1').isLinkLocalUnicast()", "true"),
            ("ip('fe80::1').isLinkLocalUnicast()", "true"),
            ("ip('10.0.0.1').isGlobalUnicast()", "true"),
            ("ip('255.255.255.255').isGlobalUnicast()", "false"),
            ("ip('ff00::1').isGlobalUnicast()", "false"),
            ("ip('2001:db8::1').isGlobalUnicast()", "true"),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }

    #[test]
    fn cidr_table() {
        let cases: &[(&str, &str)] = &[
            ("isCIDR('192.168.0.0/24')", "true"),
            ("isCIDR('192.168.0.1/24')", "true"),
            ("isCIDR('192.168.0.0/33')", "false"),
            ("isCIDR('192.168.0.0/024')", "false"),
            ("isCIDR('::ffff:1.2.3.4/120')", "false"),
            (
                "cidr('192.168.0.0/')",
                "error: network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"192.168.0.0/\"): bad bits after slash: \"\"",
            ),
            (
                "cidr('192.168.0.0')",
                "error: network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"192.168.0.0\"): no '/'",
            ),
            (
                "cidr('1.2.3.4/33')",
                "error: network address parse error during conversion from string: network address parse error during conversion from string: netip.ParsePrefix(\"1.2.3.4/33\"): prefix length out of range",
            ),
            (
                "cidr('192.168.0.0/24').containsIP(ip('192.168.0.1'))",
                "true",
            ),
            (
                "cidr('192.168.0.0/24').containsIP(ip('192.168.1.1'))",
                "false",
            ),
            ("cidr('192.168.0.0/24').containsIP('192.168.0.1')", "true"),
            ("cidr('192.168.0.0/24').containsIP('::1')", "false"),
            (
                "cidr('192.168.0.0/24').containsIP('x')",
                "error: no such overload",
            ),
            (
                "cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/25'))",
                "true",
            ),
            (
                "cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/23'))",
                "false",
            ),
            (
                "cidr('192.168.0.0/24').containsCIDR('192.168.0.0/25')",
                "true",
            ),
            // `netip.Prefix.Overlaps`: both addresses masked to the shorter length.
            ("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')", "true"),
            ("cidr('10.0.0.0/8').containsCIDR('11.0.0.0/16')", "false"),
            ("cidr('::/64').containsCIDR('10.0.0.0/8')", "false"),
            ("cidr('10.0.0.0/8').containsCIDR('::/64')", "false"),
            (
                "cidr('2001:db8::/32').containsCIDR('2001:db8::/33')",
                "true",
            ),
            ("cidr('2001:db8::/32').containsIP('2001:dc8::1')", "false"),
            ("cidr('192.168.0.0/24').ip() == ip('192.168.0.0')", "true"),
            (
                "cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')",
                "true",
            ),
            ("cidr('192.168.0.1/24') == cidr('192.168.0.0/24')", "false"),
            (
                "cidr('2001:db8:1::/32').masked() == cidr('2001:db8::/32')",
                "true",
            ),
            ("cidr('192.168.0.0/24').prefixLength()", "24"),
            ("cidr('0.0.0.0/0').containsIP('1.2.3.4')", "true"),
            ("string(cidr('192.168.0.0/24'))", "\"192.168.0.0/24\""),
            ("string(cidr('2001:DB8::/32'))", "\"2001:db8::/32\""),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }

    #[test]
    fn costs() {
        // cidr(): ceil(14 * 0.1) = 2; containsIP(string): ceil(2 * 3 * 0.1) + ceil(11 * 0.1) = 3.
        assert_eq!(
            eval_cost("cidr('192.168.0.0/24').containsIP('192.168.0.1')"),
            5
        );
    }
}
