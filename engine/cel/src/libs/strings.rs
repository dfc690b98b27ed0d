//! cel-go's strings extension (`ext.Strings`, version 2 as Kubernetes enables it): indices are
//! in code points.

use super::{arg, int_arg, kube_lists, str_arg};
use crate::cost::{STRING_GROWTH_LIMIT, actual_size, string_growth_exceeded, traversal_cost};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{List, Str, Value};

pub(crate) fn register(r: &mut Registry) {
    use Type::{Int, String};
    let ls = Type::list(String);
    r.def("charAt")
        .member(&[String, Int], String)
        .imp(char_at)
        .done();
    r.def("indexOf")
        .member(&[String, String], Int)
        .imp(index_of)
        .cost(kube_lists::cost_traversal)
        .done();
    r.def("indexOf")
        .member(&[String, String, Int], Int)
        .imp(index_of)
        .cost(kube_lists::cost_traversal)
        .done();
    r.def("lastIndexOf")
        .member(&[String, String], Int)
        .imp(last_index_of)
        .cost(kube_lists::cost_traversal)
        .done();
    r.def("lastIndexOf")
        .member(&[String, String, Int], Int)
        .imp(last_index_of)
        .cost(kube_lists::cost_traversal)
        .done();
    r.def("lowerAscii")
        .member(&[String], String)
        .imp(lower_ascii)
        .cost(cost_traverse)
        .done();
    r.def("upperAscii")
        .member(&[String], String)
        .imp(upper_ascii)
        .cost(cost_traverse)
        .done();
    r.def("replace")
        .member(&[String, String, String], String)
        .imp(replace)
        .cost(cost_traverse_twice)
        .grows()
        .done();
    r.def("replace")
        .member(&[String, String, String, Int], String)
        .imp(replace)
        .cost(cost_traverse_twice)
        .grows()
        .done();
    r.def("split")
        .member(&[String, String], ls.clone())
        .imp(split)
        .cost(cost_traverse_twice)
        .done();
    r.def("split")
        .member(&[String, String, Int], ls.clone())
        .imp(split)
        .cost(cost_traverse_twice)
        .done();
    r.def("substring")
        .member(&[String, Int], String)
        .imp(substring)
        .cost(cost_traverse)
        .done();
    r.def("substring")
        .member(&[String, Int, Int], String)
        .imp(substring)
        .cost(cost_traverse)
        .done();
    r.def("trim")
        .member(&[String], String)
        .imp(trim)
        .cost(cost_traverse)
        .done();
    r.def("join")
        .member(std::slice::from_ref(&ls), String)
        .imp(join)
        .cost_of_result(cost_join)
        .done();
    r.def("join")
        .member(&[ls, String], String)
        .imp(join)
        .cost_of_result(cost_join)
        .done();
    r.def("strings.quote")
        .global(&[String], String)
        .imp(quote)
        .cost(cost_traverse)
        .done();
}

/// Kubernetes' cost: one traversal of the receiver.
fn cost_traverse(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    traversal_cost(args.first().map(actual_size).unwrap_or(1))
}

/// Kubernetes' cost: a traversal plus building the result.
fn cost_traverse_twice(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    traversal_cost(2 * args.first().map(actual_size).unwrap_or(1))
}

/// Kubernetes' cost for `join`: twice the result's traversal.
fn cost_join(_: &[Value<'_>], result: &Value<'_>) -> u64 {
    traversal_cost(2 * actual_size(result))
}

fn out_of_range(i: i64) -> EvalError {
    EvalError::msg(format!("index out of range: {i}"))
}

fn char_at<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let s = str_arg(args, 0)?;
    let i = int_arg(args, 1)?;
    let n = s.chars().count() as i64;
    if i < 0 || i > n {
        return Err(out_of_range(i));
    }
    Ok(Value::string(
        s.chars()
            .nth(i as usize)
            .map(String::from)
            .unwrap_or_default(),
    ))
}

fn index_of<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let (s, sub) = (str_arg(args, 0)?, str_arg(args, 1)?);
    let off = if args.len() > 2 { int_arg(args, 2)? } else { 0 };
    // As cel-go v0.26 (Kubernetes 1.36): an empty substring is found at the offset as given.
    if sub.is_empty() {
        return Ok(Value::Int(off));
    }
    if off < 0 {
        return Err(out_of_range(off));
    }
    let off = off as usize;
    if s.is_ascii() && sub.is_ascii() {
        // Code points are bytes: search the text itself.
        return Ok(index_in(s.as_bytes(), sub.as_bytes(), off, |rest| {
            std::str::from_utf8(rest).ok().and_then(|r| r.find(sub))
        }));
    }
    let s: Vec<char> = s.chars().collect();
    let sub: Vec<char> = sub.chars().collect();
    Ok(index_in(&s, &sub, off, |rest| {
        (0..=rest.len().saturating_sub(sub.len()))
            .find(|&i| rest.get(i..i + sub.len()) == Some(&sub[..]))
    }))
}

/// `indexOf` from `off` over `s` and `sub` in code points (or bytes, for ASCII text): `find`
/// finds the first occurrence of `sub` in a suffix of `s`.
fn index_in<T>(
    s: &[T],
    sub: &[T],
    off: usize,
    find: impl Fn(&[T]) -> Option<usize>,
) -> Value<'static> {
    if off >= s.len() || sub.len() > s.len() {
        return Value::Int(-1);
    }
    let found = s.get(off..).and_then(find);
    Value::Int(found.map_or(-1, |i| (off + i) as i64))
}

fn last_index_of<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let (s, sub) = (str_arg(args, 0)?, str_arg(args, 1)?);
    if s.is_ascii() && sub.is_ascii() {
        // Code points are bytes: search the text itself.
        return last_index_in(s.as_bytes(), sub.as_bytes(), args, |prefix| {
            std::str::from_utf8(prefix).ok().and_then(|p| p.rfind(sub))
        });
    }
    let s: Vec<char> = s.chars().collect();
    let sub: Vec<char> = sub.chars().collect();
    last_index_in(&s, &sub, args, |prefix| {
        (0..=prefix.len().saturating_sub(sub.len()))
            .rev()
            .find(|&i| prefix.get(i..i + sub.len()) == Some(&sub[..]))
    })
}

/// `lastIndexOf` over `s` and `sub` in code points (or bytes, for ASCII text): `rfind` finds
/// the last occurrence of `sub` in a prefix of `s` at least as long as `sub`.
fn last_index_in<'a, T>(
    s: &[T],
    sub: &[T],
    args: &[Value<'a>],
    rfind: impl Fn(&[T]) -> Option<usize>,
) -> Result<Value<'a>, EvalError> {
    let off = if args.len() > 2 {
        int_arg(args, 2)?
    } else {
        if sub.is_empty() {
            return Ok(Value::Int(s.len() as i64));
        }
        if sub.len() > s.len() {
            return Ok(Value::Int(-1));
        }
        s.len() as i64 - 1
    };
    if sub.is_empty() {
        return Ok(Value::Int(off));
    }
    if off < 0 {
        return Err(out_of_range(off));
    }
    let off = off as usize;
    if off >= s.len() || sub.len() > s.len() {
        return Ok(Value::Int(-1));
    }
    let off = off.min(s.len() - sub.len());
    let found = s.get(..off + sub.len()).and_then(rfind);
    Ok(Value::Int(found.map_or(-1, |i| i as i64)))
}

fn lower_ascii<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let s = str_arg(args, 0)?;
    if !s.bytes().any(|c| c.is_ascii_uppercase()) {
        return arg(args, 0).cloned();
    }
    Ok(Value::string(s.to_ascii_lowercase()))
}

fn upper_ascii<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let s = str_arg(args, 0)?;
    if !s.bytes().any(|c| c.is_ascii_lowercase()) {
        return arg(args, 0).cloned();
    }
    Ok(Value::string(s.to_ascii_uppercase()))
}

fn replace<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let s = str_arg(args, 0)?;
    let old = str_arg(args, 1)?;
    let new = str_arg(args, 2)?;
    let n = if args.len() > 3 {
        int_arg(args, 3)?
    } else {
        -1
    };
    // Bounded before anything is built: the evaluator counts the growth against the batch's
    // bound afterwards (see `STRING_GROWTH_LIMIT`).
    if new.len() > old.len() {
        let most = usize::try_from(n).unwrap_or(usize::MAX);
        let count = s.matches(old).take(most).count() as u64;
        if count.saturating_mul((new.len() - old.len()) as u64) > STRING_GROWTH_LIMIT {
            return Err(string_growth_exceeded("replace"));
        }
    }
    Ok(Value::string(if n < 0 {
        s.replace(old, new)
    } else {
        s.replacen(old, new, n as usize)
    }))
}

fn split<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let s = str_arg(args, 0)?;
    let sep = str_arg(args, 1)?;
    let n = if args.len() > 2 {
        int_arg(args, 2)?
    } else {
        -1
    };
    if n == 0 {
        return Ok(Value::List(List::from_vec(Vec::new())));
    }
    if sep.is_empty() {
        // Go splits into UTF-8 sequences; with a limit the last part keeps the rest.
        let chars: Vec<char> = s.chars().collect();
        let limit = if n < 0 {
            chars.len()
        } else {
            (n as usize).min(chars.len())
        };
        let mut out: Vec<Value<'a>> = chars
            .iter()
            .take(limit.saturating_sub(1))
            .map(|c| Value::string(c.to_string()))
            .collect();
        if limit > 0 {
            out.push(Value::string(
                chars
                    .get(limit - 1..)
                    .map(|r| r.iter().collect::<String>())
                    .unwrap_or_default(),
            ));
        }
        return Ok(Value::List(List::from_vec(out)));
    }
    // At most `n` parts (any number when `n` is negative), the last keeping the rest; each
    // part borrows the text when it is borrowed.
    let whole = string_arg(args, 0)?;
    let limit = usize::try_from(n).unwrap_or(usize::MAX);
    // A one-character separator is searched for as a character (a byte scan), not a string.
    let mut sep_chars = sep.chars();
    let parts = match (sep_chars.next(), sep_chars.next()) {
        (Some(c), None) => split_parts(whole, sep.len(), limit, s.match_indices(c)),
        _ => split_parts(whole, sep.len(), limit, s.match_indices(sep)),
    };
    Ok(Value::List(List::from_vec(parts)))
}

/// The parts of `whole` between the separators (each `sep_len` bytes long) found at the
/// offsets `found` gives: at most `limit`, the last keeping the rest.
fn split_parts<'a, 's>(
    whole: &Str<'a>,
    sep_len: usize,
    limit: usize,
    found: impl Iterator<Item = (usize, &'s str)>,
) -> Vec<Value<'a>> {
    let mut parts = Vec::new();
    let mut start = 0;
    for (i, _) in found {
        if parts.len() + 1 >= limit {
            break;
        }
        parts.push(Value::String(whole.slice(start..i)));
        start = i + sep_len;
    }
    parts.push(Value::String(whole.slice(start..whole.len())));
    parts
}

/// The string argument at `i`, as the value holds it (borrowed or shared).
fn string_arg<'v, 'a>(args: &'v [Value<'a>], i: usize) -> Result<&'v Str<'a>, EvalError> {
    match args.get(i) {
        Some(Value::String(s)) => Ok(s),
        _ => Err(EvalError::no_such_overload()),
    }
}

fn substring<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let s = string_arg(args, 0)?;
    let start = int_arg(args, 1)?;
    let len = s.chars().count() as i64;
    let end = if args.len() > 2 {
        let end = int_arg(args, 2)?;
        if start > end {
            return Err(EvalError::msg(format!(
                "invalid substring range. start: {start}, end: {end}"
            )));
        }
        if end < 0 || end > len {
            if start < 0 || start > len {
                return Err(out_of_range(start));
            }
            return Err(out_of_range(end));
        }
        end
    } else {
        len
    };
    if start < 0 || start > len {
        return Err(out_of_range(start));
    }
    // The byte offset of code point `i` (`0 <= i <= len`); ASCII text is its own index.
    let ascii = len as usize == s.len();
    let byte = |i: i64| {
        if ascii {
            i as usize
        } else {
            s.char_indices().nth(i as usize).map_or(s.len(), |(b, _)| b)
        }
    };
    Ok(Value::String(s.slice(byte(start)..byte(end))))
}

fn trim<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    Ok(Value::string(str_arg(args, 0)?.trim()))
}

fn join<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let Value::List(l) = arg(args, 0)? else {
        return Err(EvalError::no_such_overload());
    };
    let sep = if args.len() > 1 {
        str_arg(args, 1)?
    } else {
        ""
    };
    let mut out = String::new();
    for (i, v) in l.iter().enumerate() {
        if i > 0 {
            out.push_str(sep);
        }
        match &v {
            Value::String(s) => out.push_str(s),
            other => {
                return Err(EvalError::msg(format!(
                    "join: invalid input: {}",
                    other.type_name()
                )));
            }
        }
    }
    Ok(Value::string(out))
}

fn quote<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let s = str_arg(args, 0)?;
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out.push('"');
    Ok(Value::string(out))
}

#[cfg(test)]
mod tests {
    use crate::libs::testing::eval;

    /// ASCII text is searched and sliced as bytes, other text in code points: both agree.
    #[test]
    fn ascii_and_other_text_index_alike() {
        let cases: &[(&str, &str)] = &[
            ("'a:b:c'.lastIndexOf(':')", "3"),
            ("'é:b:c'.lastIndexOf(':')", "3"),
            ("'a:b:c'.lastIndexOf(':', 2)", "1"),
            ("'é:b:c'.lastIndexOf(':', 2)", "1"),
            ("'a:b:c'.indexOf(':', 2)", "3"),
            ("'é:b:c'.indexOf(':', 2)", "3"),
            ("'a:b:c'.substring(2, 3)", "\"b\""),
            ("'é:b:c'.substring(2, 3)", "\"b\""),
            ("'é:b:c'.substring(4)", "\"c\""),
            ("'a/b/c'.split('/', 2)", "[\"a\", \"b/c\"]"),
            ("'a/b/c'.split('/', 1)", "[\"a/b/c\"]"),
            ("'a/b/c'.split('/')", "[\"a\", \"b\", \"c\"]"),
            ("'AbC'.lowerAscii()", "\"abc\""),
            ("'abc'.upperAscii()", "\"ABC\""),
            ("'ABC'.upperAscii()", "\"ABC\""),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
    }
}
