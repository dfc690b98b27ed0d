//! The syntax errors Go's `regexp.Compile` reports, worded as Go words them
//! (`error parsing regexp: missing closing ]: `[``). celgate matches with the `regex` crate,
//! whose syntax is close to RE2's but whose rejections differ in what they reject (`a**`,
//! `a{1001}`, `(?x)`) and in wording; patterns are checked here first. The check follows the
//! order in which Go's parser meets the problems, tracking only what decides an error: the
//! operands on the parse stack, open groups and alternations, and the nesting of counted
//! repetitions.

use std::fmt;

/// Go's largest repetition count, and the largest product of nested counted repetitions.
const MAX_REPEAT: u64 = 1000;

/// A pattern Go rejects: Go's error code text and the offending part of the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    code: &'static str,
    expr: String,
}

impl SyntaxError {
    fn new(code: &'static str, expr: &str) -> Self {
        Self {
            code,
            expr: expr.to_string(),
        }
    }
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "error parsing regexp: {}: `{}`", self.code, self.expr)
    }
}

const MISSING_BRACKET: &str = "missing closing ]";
const MISSING_PAREN: &str = "missing closing )";
const UNEXPECTED_PAREN: &str = "unexpected )";
const INVALID_ESCAPE: &str = "invalid escape sequence";
const INVALID_CHAR_RANGE: &str = "invalid character class range";
const INVALID_NAMED_CAPTURE: &str = "invalid named capture";
const INVALID_PERL_OP: &str = "invalid or unsupported Perl syntax";
const INVALID_REPEAT_OP: &str = "invalid nested repetition operator";
const INVALID_REPEAT_SIZE: &str = "invalid repeat count";
const MISSING_REPEAT_ARGUMENT: &str = "missing argument to repetition operator";
const TRAILING_BACKSLASH: &str = "trailing backslash at end of expression";

/// `regex` crate rejections worded as Go's: nesting past the limit and programs too large.
pub(crate) const NESTING_DEPTH: &str = "expression nests too deeply";
/// See [`NESTING_DEPTH`].
pub(crate) const TOO_LARGE: &str = "expression too large";

/// A Go error for the whole `pattern` with `code` (for rejections found by the `regex` crate).
pub(crate) fn whole(code: &'static str, pattern: &str) -> SyntaxError {
    SyntaxError::new(code, pattern)
}

/// An entry of the parse stack.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Item {
    /// An operand; `need` is the smallest count budget its counted repetitions fit in.
    Operand { need: u64 },
    /// An open group.
    Paren,
    /// An alternation marker.
    Bar,
}

/// Checks `pattern` as Go's parser (with Perl flags) does.
pub(crate) fn check(pattern: &str) -> Result<(), SyntaxError> {
    Parser {
        s: pattern,
        stack: Vec::new(),
    }
    .run()
}

struct Parser<'s> {
    s: &'s str,
    stack: Vec<Item>,
}

impl<'s> Parser<'s> {
    fn run(mut self) -> Result<(), SyntaxError> {
        let s = self.s;
        let b = s.as_bytes();
        let mut i = 0;
        // Where the previous token started, if it was a repetition operator.
        let mut last_repeat: Option<usize> = None;
        while i < b.len() {
            let mut repeat = None;
            match b[i] {
                b'(' if b.get(i + 1) == Some(&b'?') => i = self.perl_group(i)?,
                b'(' => {
                    self.stack.push(Item::Paren);
                    i += 1;
                }
                b'|' => {
                    self.concat();
                    let n = self.stack.len();
                    if n >= 2 && self.stack[n - 2] == Item::Bar {
                        self.stack.swap(n - 2, n - 1);
                    } else {
                        self.stack.push(Item::Bar);
                    }
                    i += 1;
                }
                b')' => {
                    self.close_alternation();
                    let n = self.stack.len();
                    if n < 2 || self.stack[n - 2] != Item::Paren {
                        return Err(SyntaxError::new(UNEXPECTED_PAREN, s));
                    }
                    let group = self.stack.pop().unwrap_or(Item::Operand { need: 0 });
                    self.stack.pop();
                    self.stack.push(group);
                    i += 1;
                }
                b'[' => {
                    i = self.class(i)?;
                    self.operand(0);
                }
                b'*' | b'+' | b'?' => {
                    let start = i;
                    i = self.repeat(None, i, i + 1, last_repeat)?;
                    repeat = Some(start);
                }
                b'{' => match parse_repeat(s, i) {
                    None => {
                        self.operand(0);
                        i += 1;
                    }
                    Some((min, max, after)) => {
                        if !(0..=1000).contains(&min) || max > 1000 || (max >= 0 && min > max) {
                            return Err(SyntaxError::new(INVALID_REPEAT_SIZE, &s[i..after]));
                        }
                        let start = i;
                        i = self.repeat(Some((min, max)), i, after, last_repeat)?;
                        repeat = Some(start);
                    }
                },
                b'\\' => i = self.escape_atom(i)?,
                _ => {
                    self.operand(0);
                    i += char_len(s, i);
                }
            }
            last_repeat = repeat;
        }
        self.close_alternation();
        if self.stack.len() != 1 {
            return Err(SyntaxError::new(MISSING_PAREN, s));
        }
        Ok(())
    }

    fn operand(&mut self, need: u64) {
        self.stack.push(Item::Operand { need });
    }

    /// Index of the topmost group or alternation marker (the bottom if none).
    fn pseudo_top(&self) -> usize {
        self.stack
            .iter()
            .rposition(|x| matches!(x, Item::Paren | Item::Bar))
            .map_or(0, |p| p + 1)
    }

    /// Replaces the operands above the topmost marker with their concatenation.
    fn concat(&mut self) {
        let from = self.pseudo_top();
        let need = self.stack.drain(from..).map(|x| need_of(&x)).max();
        self.operand(need.unwrap_or(0));
    }

    /// Ends the alternation of the innermost group (or of the pattern): one operand remains
    /// above the group's `(`.
    fn close_alternation(&mut self) {
        self.concat();
        let from = self
            .stack
            .iter()
            .rposition(|x| *x == Item::Paren)
            .map_or(0, |p| p + 1);
        let need = self.stack.drain(from..).map(|x| need_of(&x)).max();
        self.operand(need.unwrap_or(0));
    }

    /// A repetition operator at `start` whose operator text ends at `after`; `counts` are
    /// `{min,max}`'s (max -1: unbounded). Returns where parsing continues.
    fn repeat(
        &mut self,
        counts: Option<(i64, i64)>,
        start: usize,
        mut after: usize,
        last_repeat: Option<usize>,
    ) -> Result<usize, SyntaxError> {
        let s = self.s;
        if s.as_bytes().get(after) == Some(&b'?') {
            after += 1;
        }
        if let Some(last) = last_repeat {
            return Err(SyntaxError::new(INVALID_REPEAT_OP, &s[last..after]));
        }
        let Some(Item::Operand { need: sub }) = self.stack.last().copied() else {
            return Err(SyntaxError::new(MISSING_REPEAT_ARGUMENT, &s[start..after]));
        };
        let need = match counts {
            None => sub,
            Some((min, max)) => {
                // Go's limit: along any chain of nested counted repetitions, the counts
                // (the max, or the min when unbounded) multiply to at most 1000.
                let m = u64::try_from(if max < 0 { min } else { max }).unwrap_or(0);
                let need = match (max, m) {
                    (0, _) => 0,
                    (_, 0) => sub,
                    _ => m.saturating_mul(sub.max(1)),
                };
                if (min >= 2 || max >= 2) && need > MAX_REPEAT {
                    return Err(SyntaxError::new(INVALID_REPEAT_SIZE, &s[start..after]));
                }
                need
            }
        };
        self.stack.pop();
        self.operand(need);
        Ok(after)
    }

    /// `(?` at `i`: a named group, flags, or a non-capturing group with flags.
    fn perl_group(&mut self, i: usize) -> Result<usize, SyntaxError> {
        let s = self.s;
        let t = &s[i..];
        let tb = t.as_bytes();
        let with_p = tb.len() > 4 && tb[2] == b'P' && tb[3] == b'<';
        let with_name = tb.len() > 3 && tb[2] == b'<';
        if with_p || with_name {
            let name_start = if with_p { 4 } else { 3 };
            let Some(end) = t.find('>') else {
                return Err(SyntaxError::new(INVALID_NAMED_CAPTURE, t));
            };
            let name = &t[name_start..end];
            if name.is_empty() || !name.bytes().all(|c| c == b'_' || c.is_ascii_alphanumeric()) {
                return Err(SyntaxError::new(INVALID_NAMED_CAPTURE, &t[..=end]));
            }
            self.stack.push(Item::Paren);
            return Ok(i + end + 1);
        }
        let mut negated = false;
        let mut saw_flag = false;
        let mut j = 2;
        while let Some(c) = t[j..].chars().next() {
            j += c.len_utf8();
            match c {
                'i' | 'm' | 's' | 'U' => saw_flag = true,
                '-' if !negated => {
                    negated = true;
                    saw_flag = false;
                }
                ':' | ')' if !negated || saw_flag => {
                    if c == ':' {
                        self.stack.push(Item::Paren);
                    }
                    return Ok(i + j);
                }
                _ => break,
            }
        }
        Err(SyntaxError::new(INVALID_PERL_OP, &t[..j]))
    }

    /// A `\` outside a class at `i`: an assertion, `\Q…\E`, a class escape or a character.
    fn escape_atom(&mut self, i: usize) -> Result<usize, SyntaxError> {
        let s = self.s;
        match s.as_bytes().get(i + 1) {
            Some(b'A' | b'b' | b'B' | b'z') => {
                self.operand(0);
                return Ok(i + 2);
            }
            Some(b'C') => return Err(SyntaxError::new(INVALID_ESCAPE, &s[i..i + 2])),
            Some(b'Q') => {
                let rest = &s[i + 2..];
                let lit = rest.find("\\E").map_or(rest.len(), |e| e);
                for _ in rest[..lit].chars() {
                    self.operand(0);
                }
                return Ok((i + 2 + lit + 2).min(s.len()));
            }
            _ => {}
        }
        if let Some(end) = unicode_class(s, i)? {
            self.operand(0);
            return Ok(end);
        }
        if let Some(b'd' | b'D' | b's' | b'S' | b'w' | b'W') = s.as_bytes().get(i + 1) {
            self.operand(0);
            return Ok(i + 2);
        }
        let end = escape(s, i)?;
        self.operand(0);
        Ok(end)
    }

    /// A class `[…]` at `i`; returns the index after its `]`.
    fn class(&mut self, i: usize) -> Result<usize, SyntaxError> {
        let s = self.s;
        let whole = &s[i..];
        let b = s.as_bytes();
        let mut j = i + 1;
        if b.get(j) == Some(&b'^') {
            j += 1;
        }
        let mut first = true;
        while j >= b.len() || b[j] != b']' || first {
            first = false;
            if b.len() > j + 2
                && b[j] == b'['
                && b[j + 1] == b':'
                && let Some(k) = s[j + 2..].find(":]")
            {
                let name = &s[j..j + 2 + k + 2];
                if !POSIX_CLASSES.contains(&name) {
                    return Err(SyntaxError::new(INVALID_CHAR_RANGE, name));
                }
                j += name.len();
                continue;
            }
            if let Some(end) = unicode_class(s, j)? {
                j = end;
                continue;
            }
            if b.get(j) == Some(&b'\\')
                && let Some(b'd' | b'D' | b's' | b'S' | b'w' | b'W') = b.get(j + 1)
            {
                j += 2;
                continue;
            }
            let range_start = j;
            let (lo, next) = class_char(s, j, whole)?;
            j = next;
            if b.len() >= j + 2 && b[j] == b'-' && b[j + 1] != b']' {
                let (hi, next) = class_char(s, j + 1, whole)?;
                j = next;
                if hi < lo {
                    return Err(SyntaxError::new(INVALID_CHAR_RANGE, &s[range_start..j]));
                }
            }
        }
        Ok(j + 1)
    }
}

fn need_of(x: &Item) -> u64 {
    match x {
        Item::Operand { need } => *need,
        _ => 0,
    }
}

const POSIX_CLASSES: [&str; 28] = [
    "[:alnum:]",
    "[:^alnum:]",
    "[:alpha:]",
    "[:^alpha:]",
    "[:ascii:]",
    "[:^ascii:]",
    "[:blank:]",
    "[:^blank:]",
    "[:cntrl:]",
    "[:^cntrl:]",
    "[:digit:]",
    "[:^digit:]",
    "[:graph:]",
    "[:^graph:]",
    "[:lower:]",
    "[:^lower:]",
    "[:print:]",
    "[:^print:]",
    "[:punct:]",
    "[:^punct:]",
    "[:space:]",
    "[:^space:]",
    "[:upper:]",
    "[:^upper:]",
    "[:word:]",
    "[:^word:]",
    "[:xdigit:]",
    "[:^xdigit:]",
];

fn char_len(s: &str, i: usize) -> usize {
    s[i..].chars().next().map_or(1, char::len_utf8)
}

/// `\p…`/`\P…` at `i`: the index after it, `None` if there is none there, or Go's error for
/// an unknown or unterminated class name (names are those the `regex` crate knows).
fn unicode_class(s: &str, i: usize) -> Result<Option<usize>, SyntaxError> {
    let b = s.as_bytes();
    if b.get(i) != Some(&b'\\') || !matches!(b.get(i + 1), Some(b'p' | b'P')) {
        return Ok(None);
    }
    let Some(c) = s[i + 2..].chars().next() else {
        return Err(SyntaxError::new(INVALID_CHAR_RANGE, &s[i..]));
    };
    let end = if c == '{' {
        match s[i..].find('}') {
            Some(e) => i + e + 1,
            None => return Err(SyntaxError::new(INVALID_CHAR_RANGE, &s[i..])),
        }
    } else {
        i + 2 + c.len_utf8()
    };
    let seq = &s[i..end];
    let known = regex::RegexBuilder::new(seq)
        .size_limit(1 << 22)
        .build()
        .is_ok();
    if known {
        Ok(Some(end))
    } else {
        Err(SyntaxError::new(INVALID_CHAR_RANGE, seq))
    }
}

/// A character of a class at `j` (escapes allowed): its value and the index after it.
fn class_char(s: &str, j: usize, whole: &str) -> Result<(u32, usize), SyntaxError> {
    match s[j..].chars().next() {
        None => Err(SyntaxError::new(MISSING_BRACKET, whole)),
        Some('\\') => {
            let end = escape(s, j)?;
            Ok((escaped_value(&s[j..end]), end))
        }
        Some(c) => Ok((u32::from(c), j + c.len_utf8())),
    }
}

/// A single-character escape at `i` (`\n`, `\x41`, `\101`, `\.`): the index after it.
fn escape(s: &str, i: usize) -> Result<usize, SyntaxError> {
    let b = s.as_bytes();
    let Some(c) = s[i + 1..].chars().next() else {
        return Err(SyntaxError::new(TRAILING_BACKSLASH, ""));
    };
    let mut j = i + 1 + c.len_utf8();
    let invalid = |end: usize| Err(SyntaxError::new(INVALID_ESCAPE, &s[i..end.min(s.len())]));
    match c {
        '1'..='7' if !matches!(b.get(j), Some(b'0'..=b'7')) => invalid(j),
        '0'..='7' => {
            for _ in 0..2 {
                if matches!(b.get(j), Some(b'0'..=b'7')) {
                    j += 1;
                }
            }
            Ok(j)
        }
        'x' => {
            let Some(n) = s[j..].chars().next() else {
                return invalid(j);
            };
            j += n.len_utf8();
            if n == '{' {
                let mut digits = 0;
                let mut value: u32 = 0;
                loop {
                    let Some(h) = s[j..].chars().next() else {
                        return invalid(j);
                    };
                    j += h.len_utf8();
                    if h == '}' {
                        break;
                    }
                    let Some(v) = h.to_digit(16) else {
                        return invalid(j);
                    };
                    value = value.saturating_mul(16).saturating_add(v);
                    if value > 0x10FFFF {
                        return invalid(j);
                    }
                    digits += 1;
                }
                return if digits == 0 { invalid(j) } else { Ok(j) };
            }
            let second = s[j..].chars().next();
            if let Some(y) = second {
                j += y.len_utf8();
            }
            match (n.is_ascii_hexdigit(), second) {
                (true, Some(y)) if y.is_ascii_hexdigit() => Ok(j),
                _ => invalid(j),
            }
        }
        'a' | 'f' | 'n' | 'r' | 't' | 'v' => Ok(j),
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => Ok(j),
        _ => invalid(j),
    }
}

/// The character a valid escape (from [`escape`]) denotes, for range order checks.
fn escaped_value(esc: &str) -> u32 {
    let body = &esc[1..];
    let mut chars = body.chars();
    match chars.next() {
        Some('x') => {
            let hex = body[1..].trim_start_matches('{').trim_end_matches('}');
            u32::from_str_radix(hex, 16).unwrap_or(0)
        }
        Some(d @ '0'..='7') => u32::from_str_radix(body, 8).unwrap_or(u32::from(d)),
        Some('a') => 7,
        Some('f') => 12,
        Some('n') => 10,
        Some('r') => 13,
        Some('t') => 9,
        Some('v') => 11,
        Some(c) => u32::from(c),
        None => 0,
    }
}

/// `{min}`, `{min,}` or `{min,max}` at `i` (max -1: unbounded; -1 counts: too big), and the
/// index after it; `None` if it is not one (then `{` is a literal).
fn parse_repeat(s: &str, i: usize) -> Option<(i64, i64, usize)> {
    let b = s.as_bytes();
    let mut j = i + 1;
    let (mut min, next) = parse_int(b, j)?;
    j = next;
    let max;
    match b.get(j)? {
        b',' => {
            j += 1;
            if *b.get(j)? == b'}' {
                max = -1;
            } else {
                let (m, next) = parse_int(b, j)?;
                j = next;
                max = m;
                if m < 0 {
                    min = -1;
                }
            }
        }
        _ => max = min,
    }
    (b.get(j) == Some(&b'}')).then_some((min, max, j + 1))
}

/// A decimal count without leading zeros at `j`: its value (-1 past 10⁸) and the index after.
fn parse_int(b: &[u8], j: usize) -> Option<(i64, usize)> {
    if !b.get(j)?.is_ascii_digit() {
        return None;
    }
    if b[j] == b'0' && b.get(j + 1).is_some_and(u8::is_ascii_digit) {
        return None;
    }
    let mut k = j;
    let mut n: i64 = 0;
    while k < b.len() && b[k].is_ascii_digit() {
        if n >= 0 {
            n = if n >= 100_000_000 {
                -1
            } else {
                n * 10 + i64::from(b[k] - b'0')
            };
        }
        k += 1;
    }
    Some((n, k))
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn go_rejections_are_worded_as_go() {
        let cases: &[(&str, &str)] = &[
            ("[", "missing closing ]: `[`"),
            ("x[ab", "missing closing ]: `[ab`"),
            ("(", "missing closing ): `(`"),
            ("a(b|c", "missing closing ): `a(b|c`"),
            ("a)", "unexpected ): `a)`"),
            ("a**", "invalid nested repetition operator: `**`"),
            ("a*?+", "invalid nested repetition operator: `*?+`"),
            ("a{2}*", "invalid nested repetition operator: `{2}*`"),
            ("*", "missing argument to repetition operator: `*`"),
            ("(+)", "missing argument to repetition operator: `+`"),
            ("a|?", "missing argument to repetition operator: `?`"),
            ("a|*b", "missing argument to repetition operator: `*`"),
            ("(?i)*", "missing argument to repetition operator: `*`"),
            ("\\p", "invalid character class range: `\\p`"),
            ("a{1001}", "invalid repeat count: `{1001}`"),
            ("a{2,1}", "invalid repeat count: `{2,1}`"),
            ("(a{20}){60}", "invalid repeat count: `{60}`"),
            ("\\8", "invalid escape sequence: `\\8`"),
            ("\\xZ1", "invalid escape sequence: `\\xZ1`"),
            ("[\\b]", "invalid escape sequence: `\\b`"),
            ("\\C", "invalid escape sequence: `\\C`"),
            ("a\\", "trailing backslash at end of expression: ``"),
            ("[z-a]", "invalid character class range: `z-a`"),
            ("[[:foo:]]", "invalid character class range: `[:foo:]`"),
            ("\\p{Foo}", "invalid character class range: `\\p{Foo}`"),
            ("(?x)a", "invalid or unsupported Perl syntax: `(?x`"),
            ("(?=a)", "invalid or unsupported Perl syntax: `(?=`"),
            ("(?i-)", "invalid or unsupported Perl syntax: `(?i-)`"),
            ("(?P<1a-b>x)", "invalid named capture: `(?P<1a-b>`"),
            ("(?P<name", "invalid named capture: `(?P<name`"),
        ];
        for (pattern, want) in cases {
            let got = check(pattern).map_err(|e| e.to_string());
            assert_eq!(
                got,
                Err(format!("error parsing regexp: {want}")),
                "{pattern}"
            );
        }
    }

    #[test]
    fn go_accepts() {
        for pattern in [
            "a{1000}",
            "(a{10}){100}",
            "a{,5}",
            "x{",
            "^*",
            "(?i)a+?",
            "(?i:a)*",
            "()*",
            "[]a]",
            "[^]a]",
            "[a-]",
            "[\\d-z]",
            "\\Qa**\\E",
            "\\pL\\p{Greek}[\\p{Lu}]",
            "[[:alpha:][:^digit:]]",
            "\\x{10FFFF}\\101\\0",
            "(?P<name>x)(?<other>y)",
            "(a{10}){0,}",
            "(a{2}){333}b{0}",
        ] {
            assert_eq!(check(pattern), Ok(()), "{pattern}");
        }
    }
}
