//! RE2-compatible regular expressions: the `regex` crate with RE2's ASCII-only `\d`, `\w`, `\s`
//! and `\b`, and `\Q…\E` quoting. Literal patterns (`matches`, and Kubernetes' `find`/`findAll`)
//! are compiled once, by the planner; `find`/`findAll` with a computed pattern compile it once
//! per process through a small shared cache.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use regex::Regex;

use super::{int_arg, re2_syntax, str_arg};
use crate::cost::{actual_size, traversal_cost};
use crate::error::EvalError;
use crate::registry::Registry;
use crate::types::Type;
use crate::value::{List, Value};

/// Registers Kubernetes' regex library: `find` and `findAll`.
pub(crate) fn register(r: &mut Registry) {
    use Type::{Int, String};
    r.def("find")
        .member(&[String, String], String)
        .imp(find)
        .cost(cost_find)
        .done();
    r.def("findAll")
        .member(&[String, String], Type::list(String))
        .imp(find_all)
        .cost(cost_find)
        .done();
    r.def("findAll")
        .member(&[String, String, Int], Type::list(String))
        .imp(find_all)
        .cost(cost_find)
        .done();
}

/// Kubernetes' cost: `ceil((1 + len(s)) * 0.1) * ceil(len(pattern) * 0.25)`.
fn cost_find(args: &[Value<'_>], _: &Value<'_>) -> u64 {
    let s = traversal_cost(1 + args.first().map(actual_size).unwrap_or(0));
    let re = args.get(1).map(actual_size).unwrap_or(0).div_ceil(4);
    s.saturating_mul(re)
}

/// Patterns compiled so far, shared by all programs; cleared when it grows past this size.
const CACHE_LIMIT: usize = 512;
/// Longer patterns are compiled for each call rather than kept.
const CACHEABLE_LEN: usize = 4096;
static CACHE: LazyLock<RwLock<HashMap<Box<str>, Arc<Regex>>>> =
    LazyLock::new(|| RwLock::new(HashMap::new()));

/// Compiles `pattern` once and shares the result.
pub(crate) fn cached(pattern: &str) -> Result<Arc<Regex>, EvalError> {
    if let Ok(cache) = CACHE.read()
        && let Some(re) = cache.get(pattern)
    {
        return Ok(re.clone());
    }
    let re = Arc::new(compile(pattern)?);
    if pattern.len() > CACHEABLE_LEN {
        return Ok(re);
    }
    if let Ok(mut cache) = CACHE.write() {
        if cache.len() >= CACHE_LIMIT {
            cache.clear();
        }
        cache.insert(Box::from(pattern), re.clone());
    }
    Ok(re)
}

fn illegal(e: EvalError) -> EvalError {
    EvalError::msg(format!("Illegal regex: {e}"))
}

/// A `find` or `findAll` call whose literal pattern the planner compiled.
#[derive(Debug)]
pub(crate) struct Planned {
    regex: Regex,
    imp: fn(&Regex, &[Value<'_>]) -> Result<Value<'static>, EvalError>,
}

impl Planned {
    /// The planned form of member function `name` with `regex`, if it has one.
    pub(crate) fn new(name: &str, regex: Regex) -> Option<Self> {
        let imp = match name {
            "find" => find_in,
            "findAll" => find_all_in,
            _ => return None,
        };
        Some(Self { regex, imp })
    }

    /// Calls the function with `args` (target, the literal pattern, then the rest), which the
    /// overload dispatch has checked as for any call.
    pub(crate) fn call<'a>(&self, args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
        (self.imp)(&self.regex, args)
    }
}

fn find<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let re = cached(str_arg(args, 1)?).map_err(illegal)?;
    find_in(&re, args)
}

fn find_in(re: &Regex, args: &[Value<'_>]) -> Result<Value<'static>, EvalError> {
    let s = str_arg(args, 0)?;
    Ok(Value::string(re.find(s).map_or("", |m| m.as_str())))
}

fn find_all<'a>(args: &[Value<'a>]) -> Result<Value<'a>, EvalError> {
    let re = cached(str_arg(args, 1)?).map_err(illegal)?;
    find_all_in(&re, args)
}

fn find_all_in(re: &Regex, args: &[Value<'_>]) -> Result<Value<'static>, EvalError> {
    let s = str_arg(args, 0)?;
    let limit = if args.len() > 2 {
        int_arg(args, 2)?
    } else {
        -1
    };
    let found = re.find_iter(s).map(|m| Value::string(m.as_str()));
    let out: Vec<Value<'static>> = match usize::try_from(limit) {
        Ok(n) => found.take(n).collect(),
        Err(_) => found.collect(),
    };
    Ok(Value::List(List::from_vec(out)))
}

/// Compiles an RE2 pattern; rejections are worded as Go's `regexp.Compile` words them.
pub(crate) fn compile(pattern: &str) -> Result<Regex, EvalError> {
    re2_syntax::check(pattern).map_err(|e| EvalError::msg(e.to_string()))?;
    let translated = translate(pattern);
    regex::RegexBuilder::new(&translated)
        .size_limit(1 << 22)
        .nest_limit(1000)
        .build()
        .map_err(|e| {
            let msg = match &e {
                regex::Error::CompiledTooBig(_) => {
                    re2_syntax::whole(re2_syntax::TOO_LARGE, pattern).to_string()
                }
                regex::Error::Syntax(s) if s.contains("nest limit") => {
                    re2_syntax::whole(re2_syntax::NESTING_DEPTH, pattern).to_string()
                }
                _ => format!("error parsing regexp: {}", first_line(&e.to_string())),
            };
            EvalError::msg(msg)
        })
}

/// The last non-empty line of a `regex` crate error (its summary).
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
        _ => Err(EvalError::no_such_overload()),
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

    #[test]
    fn find_table() {
        use crate::libs::testing::{eval, eval_cost};
        let cases: &[(&str, &str)] = &[
            ("'abc 123'.find('[0-9]+')", "\"123\""),
            ("'abc'.find('[0-9]+')", "\"\""),
            ("'123 abc 456'.findAll('[0-9]+')", "[\"123\", \"456\"]"),
            ("'123 abc 456'.findAll('[0-9]+', 1)", "[\"123\"]"),
            ("'123 abc 456'.findAll('[0-9]+', 0)", "[]"),
            ("'123 abc 456'.findAll('[0-9]+', -1)", "[\"123\", \"456\"]"),
            ("'abc'.findAll('x*')", "[\"\", \"\", \"\", \"\"]"),
            ("'ab'.find(x)", "error: no such attribute(s): x"),
        ];
        for (src, want) in cases {
            assert_eq!(eval(src), *want, "{src}");
        }
        // A constant invalid pattern fails the program; another fails the call.
        assert_eq!(
            eval("'a'.find('(')"),
            "compile: error parsing regexp: missing closing ): `(`"
        );
        assert_eq!(
            eval("'a'.find(['('][0])"),
            "error: Illegal regex: error parsing regexp: missing closing ): `(`"
        );
        assert_eq!(
            eval("'a'.matches(['a**'][0])"),
            "error: error parsing regexp: invalid nested repetition operator: `**`"
        );
        // ceil(8 * 0.1) * ceil(6 / 4) = 1 * 2.
        assert_eq!(eval_cost("'abc 123'.find('[0-9]+')"), 2);
    }
}
