//! RE2-compatible regular expressions: the `regex` crate with RE2's ASCII-only `\d`, `\w`, `\s`
//! and `\b`, and `\Q…\E` quoting. Literal patterns are compiled once, by the planner.

use regex::Regex;

use super::str_arg;
use crate::error::EvalError;
use crate::value::Value;

/// Compiles an RE2 pattern.
pub(crate) fn compile(pattern: &str) -> Result<Regex, EvalError> {
    let translated = translate(pattern);
    regex::RegexBuilder::new(&translated)
        .size_limit(1 << 22)
        .build()
        .map_err(|e| {
            EvalError::msg(format!(
                "error parsing regexp: {}",
                first_line(&e.to_string())
            ))
        })
}

fn first_line(s: &str) -> String {
    s.lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or(s)
        .to_string()
}

/// Rewrites RE2 syntax whose meaning differs in the `regex` crate.
fn translate(p: &str) -> String {
    let mut out = String::with_capacity(p.len() + 8);
    let mut chars = p.chars().peekable();
    let mut in_class = false;
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let Some(n) = chars.next() else {
                    out.push('\\');
                    break;
                };
                match (n, in_class) {
                    ('d', false) => out.push_str("[0-9]"),
                    ('d', true) => out.push_str("0-9"),
                    ('D', false) => out.push_str("[^0-9]"),
                    ('w', false) => out.push_str("[0-9A-Za-z_]"),
                    ('w', true) => out.push_str("0-9A-Za-z_"),
                    ('W', false) => out.push_str("[^0-9A-Za-z_]"),
                    ('s', false) => out.push_str("[\\t\\n\\f\\r ]"),
                    ('s', true) => out.push_str("\\t\\n\\f\\r "),
                    ('S', false) => out.push_str("[^\\t\\n\\f\\r ]"),
                    ('b', false) => out.push_str("(?-u:\\b)"),
                    ('B', false) => out.push_str("(?-u:\\B)"),
                    ('Q', _) => {
                        let mut lit = String::new();
                        while let Some(q) = chars.next() {
                            if q == '\\' && chars.peek() == Some(&'E') {
                                chars.next();
                                break;
                            }
                            lit.push(q);
                        }
                        out.push_str(&regex::escape(&lit));
                    }
                    _ => {
                        out.push('\\');
                        out.push(n);
                    }
                }
            }
            '[' if !in_class => {
                in_class = true;
                out.push('[');
                // A leading `^` and a leading `]` are part of the class syntax.
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
                if chars.peek() == Some(&']') {
                    out.push_str("\\]");
                    chars.next();
                }
            }
            '[' if in_class => {
                // POSIX classes like [:alpha:] pass through; a bare '[' is literal in RE2.
                if chars.peek() == Some(&':') {
                    out.push('[');
                } else {
                    out.push_str("\\[");
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            other => out.push(other),
        }
    }
    out
}

/// `matches` with a pattern compiled for this call.
pub(crate) fn matches<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let re = compile(str_arg(args, 1)?)?;
    Ok(Value::Bool(re.is_match(str_arg(args, 0)?)))
}

/// `matches` with a precompiled pattern.
pub(crate) fn matches_compiled<'a>(re: &Regex, target: &Value<'a>) -> Result<Value<'a>, EvalError> {
    match target {
        Value::String(s) => Ok(Value::Bool(re.is_match(s))),
        _ => Err(EvalError::NoSuchOverload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ascii_classes_like_re2() {
        let re = compile("^\\d+$").ok();
        assert_eq!(re.as_ref().map(|r| r.is_match("123")), Some(true));
        assert_eq!(re.as_ref().map(|r| r.is_match("٣")), Some(false));
        let re = compile("^[\\w-]+$").ok();
        assert_eq!(re.as_ref().map(|r| r.is_match("a-b_c")), Some(true));
        assert_eq!(re.as_ref().map(|r| r.is_match("é")), Some(false));
        let re = compile("\\Qa.b\\E").ok();
        assert_eq!(re.as_ref().map(|r| r.is_match("a.b")), Some(true));
        assert_eq!(re.as_ref().map(|r| r.is_match("axb")), Some(false));
    }

    #[test]
    fn invalid_patterns_are_errors() {
        assert!(compile("(").is_err());
    }
}
