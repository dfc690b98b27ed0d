//! Parsing: the `cel` crate's ANTLR parser (cel-go's grammar and syntax errors), then conversion
//! into celgate's [`ast`](crate::ast), recognising macros. Runs on a big stack of its own (on the
//! calling thread), because the ANTLR parser and the trees it builds recurse deeply.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::ast::{self as cast, EntryExpr, IdedExpr, LiteralValue};
use cel::parser::{ParseError, Parser};

use crate::ast::{Comprehension, Expr, ExprKind, Literal, MacroKind, MapEntry, StructField};
use crate::error::{CompileError, Issue};
use crate::registry::Macros;

/// cel-go's default (and Kubernetes') limit on nesting.
pub(crate) const MAX_RECURSION_DEPTH: u16 = 250;
/// cel-go's default (and Kubernetes') limit on expression size, in code points.
pub(crate) const MAX_CODE_POINTS: usize = 100_000;
/// Stack for a compilation: the ANTLR runtime uses tens of KiB per nesting level.
const COMPILE_STACK: usize = 256 << 20;
/// The accumulator variable of parser-expanded macros.
const ACCU: &str = "@result";

/// A parsed expression and the source positions of its nodes.
pub(crate) struct Parsed {
    pub expr: Expr,
    pub positions: Positions,
}

/// Maps node ids to source positions (reported as cel-go does: line, code-point column).
pub(crate) struct Positions {
    source: Arc<str>,
    /// Byte offset of each node.
    offsets: HashMap<u64, u32>,
}

impl Positions {
    /// (1-based line, 0-based code-point column) of node `id`; (-1, -1) when unknown.
    pub fn location(&self, id: u64) -> (i64, i64) {
        match self.offsets.get(&id) {
            Some(&off) => byte_offset_location(&self.source, off as usize),
            None => (-1, -1),
        }
    }

    /// An issue at node `id`.
    pub fn issue(&self, id: u64, message: impl Into<String>) -> Issue {
        let (line, column) = self.location(id);
        Issue {
            line,
            column,
            message: message.into(),
        }
    }
}

fn byte_offset_location(source: &str, off: usize) -> (i64, i64) {
    let mut line = 1i64;
    let mut line_start = 0usize;
    for (i, c) in source.char_indices() {
        if i >= off {
            break;
        }
        if c == '\n' {
            line += 1;
            line_start = i + 1;
        }
    }
    let col = source
        .get(line_start..)
        .map(|rest| {
            rest.char_indices()
                .take_while(|(i, _)| line_start + i < off)
                .count()
        })
        .unwrap_or(0);
    (line, col as i64)
}

/// Parses `src`. Call within [`on_compile_stack`]: the ANTLR runtime
/// recurses deeply. `ident_escape` enables backtick-quoted field names (``a.`b-c` ``);
/// `macros` are the library macros expanded beside the standard ones.
pub(crate) fn parse(src: &str, ident_escape: bool, macros: Macros) -> Result<Parsed, CompileError> {
    let size = src.chars().count();
    if size > MAX_CODE_POINTS {
        return Err(CompileError::new(
            src,
            vec![Issue {
                line: -1,
                column: -1,
                message: format!(
                    "expression code point size exceeds limit: size: {size}, limit {MAX_CODE_POINTS}"
                ),
            }],
        ));
    }
    let parsed = Parser::new()
        .enable_optional_syntax(true)
        .enable_ident_escape_syntax(ident_escape)
        .max_recursion_depth(MAX_RECURSION_DEPTH)
        .parse_with_source_info(src);
    let (root, info) = match parsed {
        Ok(p) => p,
        Err(errs) => return Err(convert_parse_errors(src, errs.errors)),
    };
    let mut conv = Converter {
        info: &info,
        offsets: HashMap::new(),
        issues: Vec::new(),
        depth: 0,
        source: src,
        macros,
    };
    let expr = conv.convert(&root);
    let Converter {
        offsets, issues, ..
    } = conv;
    if !issues.is_empty() {
        return Err(CompileError::new(src, issues));
    }
    Ok(Parsed {
        expr,
        positions: Positions {
            source: Arc::from(src),
            offsets,
        },
    })
}

/// Runs `f` (a compilation) on a big stack, for the parser's deep recursion: a fresh stack
/// segment on the calling thread, so what the compilation allocates stays with that thread.
pub(crate) fn on_compile_stack<T>(
    src: &str,
    f: impl FnOnce() -> Result<T, CompileError>,
) -> Result<T, CompileError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stacker::grow(COMPILE_STACK, f)
    })) {
        Ok(r) => r,
        Err(_) => Err(internal(
            src,
            "the compiler failed unexpectedly".to_string(),
        )),
    }
}

fn internal(src: &str, message: String) -> CompileError {
    CompileError::new(
        src,
        vec![Issue {
            line: -1,
            column: -1,
            message,
        }],
    )
}

fn convert_parse_errors(src: &str, errors: Vec<ParseError>) -> CompileError {
    // The recursion limit aborts the parse; cel-go reports it alone.
    let over_limit = errors.iter().any(|e| {
        e.msg.contains("Recursion limit of")
            || e.source
                .as_ref()
                .is_some_and(|s| s.to_string().contains("Recursion limit"))
    });
    if over_limit {
        return CompileError::new(
            src,
            vec![Issue {
                line: -1,
                column: -1,
                message: format!("expression recursion limit exceeded: {MAX_RECURSION_DEPTH}"),
            }],
        );
    }
    let is_literal = |e: &ParseError| NUMBER_LITERAL_ERRORS.contains(&e.msg.as_str());
    let has_positioned = errors.iter().any(|e| e.source.is_none() || is_literal(e));
    // The `cel` crate's visitor reports an incomplete context after a syntax error the
    // parser recovered from; cel-go reports the syntax error alone.
    let only_incomplete = errors.iter().all(|e| e.msg.starts_with("Incomplete "));
    let mut issues = Vec::new();
    for e in errors {
        if e.msg.starts_with("Incomplete ") && !only_incomplete {
            continue;
        }
        let (line, col1) = e.pos;
        if let Some(inner) = &e.source {
            if is_literal(&e) {
                // An out-of-range number: cel-go positions it at the literal, its sign
                // included (only a negative literal can be too small).
                let mut column = (col1 - 1) as i64;
                if inner.to_string().contains("too small") {
                    column = sign_column(src, line, column);
                }
                issues.push(Issue {
                    line: line as i64,
                    column,
                    message: e.msg,
                });
                continue;
            }
            // An aborted parse: the recursion limit, or the recovery limit (already reported).
            let text = inner.to_string();
            if !has_positioned {
                issues.push(Issue {
                    line: -1,
                    column: -1,
                    message: text,
                });
            }
            continue;
        }
        // Token positions are in characters already; macro expansion errors are positioned
        // from byte offsets.
        let mut column = if MACRO_ERRORS.contains(&e.msg.as_str()) {
            code_point_column(src, line, col1)
        } else {
            (col1 - 1) as i64
        };
        let message = if e.msg == "unsupported ident kind" {
            // cel-go positions it at the missing identifier, after the `.` or `.?`.
            column = after_select_operator(src, line, column);
            e.msg
        } else if src.is_empty() {
            // The end of an empty input has no column in cel-go.
            column = -1;
            e.msg
        } else if let Some(m) = literal_message(&e.msg) {
            m.to_string()
        } else {
            expected_as_cel_go(e.msg)
        };
        issues.push(Issue {
            line: line as i64,
            column,
            message,
        });
    }
    // cel-go's parser reports syntax errors before its visitor's; issues at the same position
    // keep that order.
    let (mut syntax, others): (Vec<Issue>, Vec<Issue>) = issues
        .into_iter()
        .partition(|i| i.message.starts_with("Syntax error:"));
    syntax.extend(others);
    CompileError::new(src, syntax)
}

/// The `cel` crate's messages for out-of-range numbers (the same as cel-go's).
const NUMBER_LITERAL_ERRORS: [&str; 2] = ["invalid int literal", "invalid uint literal"];

/// The characters of line `line` (1-based).
fn line_chars(src: &str, line: isize) -> Vec<char> {
    usize::try_from(line - 1)
        .ok()
        .and_then(|l| src.split('\n').nth(l))
        .map(|t| t.chars().collect())
        .unwrap_or_default()
}

/// The column of the `-` before the number at `column` (skipping blanks), or `column`.
fn sign_column(src: &str, line: isize, column: i64) -> i64 {
    let chars = line_chars(src, line);
    let mut i = column;
    while i > 0 {
        i -= 1;
        match usize::try_from(i).ok().and_then(|i| chars.get(i)) {
            Some(c) if c.is_whitespace() => continue,
            Some('-') => return i,
            _ => break,
        }
    }
    column
}

/// The column after the `.` or `.?` at `column` and the blanks that follow it.
fn after_select_operator(src: &str, line: isize, column: i64) -> i64 {
    let chars = line_chars(src, line);
    let mut i = usize::try_from(column).unwrap_or_default();
    if chars.get(i) == Some(&'.') {
        i += 1;
        if chars.get(i) == Some(&'?') {
            i += 1;
        }
    }
    while chars.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i as i64
}

/// cel-go's message for a string or bytes literal the `cel` crate could not unescape (its
/// message carries the `Debug` form of the crate's error).
fn literal_message(msg: &str) -> Option<&'static str> {
    let detail = msg
        .strip_prefix("invalid string literal: ")
        .or_else(|| msg.strip_prefix("invalid bytes literal: "))?;
    Some(
        if detail.starts_with("InvalidUnicode { source: Unicode { value: 0 }") {
            // Too few hex digits.
            "unable to unescape string"
        } else if detail.starts_with("InvalidUnicode { source: Unicode")
            || detail.starts_with("Invalid(\"invalid unicode code point\")")
        {
            "invalid unicode code point"
        } else if detail.starts_with("InvalidEscape { escape: \"\\\\\", ") {
            "unable to unescape string, found '\\' as last character"
        } else if ["0", "1", "2", "3"]
            .iter()
            .any(|d| detail.starts_with(&format!("InvalidEscape {{ escape: \"\\\\{d}")))
        {
            "unable to unescape octal sequence in string"
        } else {
            "unable to unescape string"
        },
    )
}

/// The tokens that can continue an expression: the `cel` crate's ANTLR runtime lists them in
/// a syntax error's expected set where cel-go's (Go) runtime, which has left those loops,
/// lists only what must follow (`expecting ':'`, `expecting <EOF>`).
const CONTINUATIONS: [&str; 17] = [
    "'=='", "'!='", "'in'", "'<'", "'<='", "'>='", "'>'", "'&&'", "'||'", "'['", "'.'", "'-'",
    "'?'", "'+'", "'*'", "'/'", "'%'",
];

/// Rewrites `… expecting {<EOF>, '==', …}` as cel-go words it.
fn expected_as_cel_go(msg: String) -> String {
    let Some((head, set)) = msg.split_once(" expecting {") else {
        return msg;
    };
    let Some(set) = set.strip_suffix('}') else {
        return msg;
    };
    let tokens: Vec<&str> = set.split(", ").collect();
    if !tokens.contains(&"'=='") || !tokens.contains(&"'%'") {
        return msg;
    }
    let rest: Vec<&str> = tokens
        .into_iter()
        .filter(|t| !CONTINUATIONS.contains(t))
        .collect();
    match rest.as_slice() {
        [] => msg,
        [one] => format!("{head} expecting {one}"),
        many => format!("{head} expecting {{{}}}", many.join(", ")),
    }
}

/// Errors the `cel` crate's macro expanders report (positioned by byte offset).
const MACRO_ERRORS: [&str; 2] = [
    "invalid argument to has() macro",
    "argument must be a simple name",
];

/// Converts the parser's 1-based byte column on `line` into a 0-based code-point column.
fn code_point_column(src: &str, line: isize, col1: isize) -> i64 {
    let byte_col = (col1 - 1).max(0) as usize;
    let Some(text) = usize::try_from(line - 1)
        .ok()
        .and_then(|l| src.split('\n').nth(l))
    else {
        return byte_col as i64;
    };
    text.char_indices()
        .take_while(|(i, _)| *i < byte_col)
        .count() as i64
}

struct Converter<'s> {
    info: &'s cast::SourceInfo,
    offsets: HashMap<u64, u32>,
    issues: Vec<Issue>,
    depth: usize,
    source: &'s str,
    macros: Macros,
}

impl Converter<'_> {
    fn record(&mut self, id: u64) {
        if let Some((start, _)) = self.info.offset_for(id) {
            self.offsets.insert(id, start);
        }
    }

    /// cel-go positions a negative number literal at its `-` sign; the `cel` crate at its
    /// digits. Moves the recorded offset back to the sign (which may be followed by spaces).
    fn include_sign(&mut self, id: u64, l: &Literal) {
        let negative = match l {
            Literal::Int(i) => *i < 0,
            Literal::Double(d) => d.is_sign_negative(),
            _ => false,
        };
        let Some(off) = self.offsets.get_mut(&id).filter(|_| negative) else {
            return;
        };
        let before = self.source.get(..*off as usize).unwrap_or_default();
        let trimmed = before.trim_end_matches([' ', '\t', '\n', '\r', '\u{c}']);
        if let Some(sign) = trimmed.strip_suffix('-') {
            *off = sign.len() as u32;
        }
    }

    fn error(&mut self, id: u64, msg: &str) {
        let (line, column) = match self.info.offset_for(id) {
            Some((start, _)) => byte_offset_location(self.source, start as usize),
            None => (-1, -1),
        };
        self.issues.push(Issue {
            line,
            column,
            message: msg.to_string(),
        });
    }

    /// Reports `msg` at the first `word` from the position of `id` on (where a macro's
    /// expansion no longer holds the argument's own position).
    fn error_at_word(&mut self, id: u64, word: &str, msg: &str) {
        let (line, column) = match self.info.offset_for(id) {
            Some((start, _)) => {
                let start = start as usize;
                let at = self
                    .source
                    .get(start..)
                    .and_then(|rest| rest.find(word))
                    .map_or(start, |i| start + i);
                byte_offset_location(self.source, at)
            }
            None => (-1, -1),
        };
        self.issues.push(Issue {
            line,
            column,
            message: msg.to_string(),
        });
    }

    fn convert(&mut self, e: &IdedExpr) -> Expr {
        self.depth += 1;
        let out = if usize::from(MAX_RECURSION_DEPTH) < self.depth {
            if self.issues.is_empty() {
                self.issues.push(Issue {
                    line: -1,
                    column: -1,
                    message: "max recursion depth exceeded".into(),
                });
            }
            Expr {
                id: e.id,
                kind: ExprKind::Literal(Literal::Null),
            }
        } else {
            self.record(e.id);
            let kind = self.convert_kind(e);
            if let ExprKind::Literal(l) = &kind {
                self.include_sign(e.id, l);
            }
            Expr { id: e.id, kind }
        };
        self.depth -= 1;
        out
    }

    fn convert_kind(&mut self, e: &IdedExpr) -> ExprKind {
        match &e.expr {
            cast::Expr::Unspecified => ExprKind::Literal(Literal::Null),
            cast::Expr::Literal(l) => ExprKind::Literal(convert_literal(l)),
            cast::Expr::Ident(n) => ExprKind::Ident(n.clone()),
            cast::Expr::Select(s) => ExprKind::Select {
                operand: Box::new(self.convert(&s.operand)),
                field: s.field.clone(),
                test: s.test,
                optional: false,
            },
            cast::Expr::Call(c) => self.convert_call(e.id, c),
            cast::Expr::List(l) => {
                let elements: Vec<Expr> = l.elements.iter().map(|x| self.convert(x)).collect();
                let mut optional = vec![false; elements.len()];
                for &i in &l.optional_indices {
                    if let Some(o) = optional.get_mut(i) {
                        *o = true;
                    }
                }
                ExprKind::List { elements, optional }
            }
            cast::Expr::Map(m) => ExprKind::Map {
                entries: m
                    .entries
                    .iter()
                    .filter_map(|entry| match &entry.expr {
                        EntryExpr::MapEntry(me) => Some(MapEntry {
                            key: self.convert(&me.key),
                            value: self.convert(&me.value),
                            optional: me.optional,
                        }),
                        EntryExpr::StructField(_) => None,
                    })
                    .collect(),
            },
            cast::Expr::Struct(s) => ExprKind::Struct {
                type_name: s.type_name.clone(),
                fields: s
                    .entries
                    .iter()
                    .filter_map(|entry| match &entry.expr {
                        EntryExpr::StructField(f) => {
                            self.record(entry.id);
                            Some(StructField {
                                id: entry.id,
                                name: f.field.clone(),
                                value: self.convert(&f.value),
                                optional: f.optional,
                            })
                        }
                        EntryExpr::MapEntry(_) => None,
                    })
                    .collect(),
            },
            cast::Expr::Comprehension(c) => self.convert_comprehension(e.id, c),
        }
    }

    fn convert_call(&mut self, id: u64, c: &cast::CallExpr) -> ExprKind {
        // `a.?b` arrives as `_?._(a, "b")`.
        if c.func_name == cast::operators::OPT_SELECT
            && c.target.is_none()
            && c.args.len() == 2
            && let (Some(operand), Some(cast::Expr::Literal(LiteralValue::String(f)))) =
                (c.args.first(), c.args.get(1).map(|a| &a.expr))
        {
            return ExprKind::Select {
                operand: Box::new(self.convert(operand)),
                field: f.inner().to_string(),
                test: false,
                optional: true,
            };
        }
        if let Some(target) = &c.target
            && let Some(kind) = self.try_macro(id, target, &c.func_name, &c.args)
        {
            return kind;
        }
        ExprKind::Call {
            target: c.target.as_ref().map(|t| Box::new(self.convert(t))),
            function: c.func_name.clone(),
            args: c.args.iter().map(|a| self.convert(a)).collect(),
        }
    }

    /// The receiver macros the `cel` parser does not expand: two-variable comprehensions,
    /// `optMap`/`optFlatMap` and `sortBy`.
    fn try_macro(
        &mut self,
        id: u64,
        target: &IdedExpr,
        function: &str,
        args: &[IdedExpr],
    ) -> Option<ExprKind> {
        let two_var = self.macros.two_var
            && matches!(
                (function, args.len()),
                ("all" | "exists" | "existsOne" | "exists_one", 3)
                    | (
                        "transformList" | "transformMap" | "transformMapEntry",
                        3 | 4
                    )
            );
        let one_var = matches!((function, args.len()), ("optMap" | "optFlatMap", 2))
            || (self.macros.sort_by && (function, args.len()) == ("sortBy", 2));
        if !two_var && !one_var {
            return None;
        }
        let var = self.iter_var(args.first()?)?;
        let (var2, rest) = if two_var {
            let second = args.get(1)?;
            let v2 = self.iter_var(second)?;
            if v2 == var {
                self.error(second.id, &format!("duplicate variable name: {var}"));
                return None;
            }
            (Some(v2), args.get(2..)?)
        } else {
            (None, args.get(1..)?)
        };
        let range = self.convert(target);
        let mut bodies: Vec<Expr> = rest.iter().map(|a| self.convert(a)).collect();
        let last = bodies.pop()?;
        let filter = bodies.pop();
        let kind = match function {
            "all" => MacroKind::All(last),
            "exists" => MacroKind::Exists(last),
            "existsOne" | "exists_one" => MacroKind::ExistsOne(last),
            "transformList" => MacroKind::MapList {
                filter,
                transform: last,
            },
            "transformMap" => MacroKind::TransformMap {
                filter,
                transform: last,
            },
            "transformMapEntry" => MacroKind::TransformMapEntry {
                filter,
                transform: last,
            },
            "optMap" => MacroKind::OptMap(last),
            "optFlatMap" => MacroKind::OptFlatMap(last),
            _ => MacroKind::SortBy(last),
        };
        self.record(id);
        Some(ExprKind::Comprehension(Box::new(Comprehension {
            range,
            var,
            var2,
            kind,
        })))
    }

    fn iter_var(&mut self, e: &IdedExpr) -> Option<String> {
        match &e.expr {
            cast::Expr::Ident(n) if n == ACCU || n == "__result__" => {
                self.error(e.id, "iteration variable overwrites accumulator variable");
                None
            }
            cast::Expr::Ident(n) => Some(n.clone()),
            _ => {
                self.error(e.id, "argument must be a simple name");
                None
            }
        }
    }

    /// Recognises the comprehensions the parser builds for `all`, `exists`, `exists_one`,
    /// `map` and `filter`.
    fn convert_comprehension(&mut self, id: u64, c: &cast::ComprehensionExpr) -> ExprKind {
        if c.iter_var == "__result__" {
            // cel-go's macros refuse the traditional accumulator name, at the variable.
            self.error_at_word(
                id,
                "__result__",
                "iteration variable overwrites accumulator variable",
            );
            return ExprKind::Literal(Literal::Null);
        }
        let kind = match self.macro_kind(c) {
            Some(k) => k,
            None => {
                self.error(id, "unsupported comprehension");
                return ExprKind::Literal(Literal::Null);
            }
        };
        ExprKind::Comprehension(Box::new(Comprehension {
            range: self.convert(&c.iter_range),
            var: c.iter_var.clone(),
            var2: c.iter_var2.clone(),
            kind,
        }))
    }

    fn macro_kind(&mut self, c: &cast::ComprehensionExpr) -> Option<MacroKind> {
        if c.accu_var != ACCU {
            return None;
        }
        let step = as_call(&c.loop_step)?;
        match &c.accu_init.expr {
            cast::Expr::Literal(LiteralValue::Boolean(b)) => {
                let pred = step.args.get(1)?;
                match (*b.inner(), step.func_name.as_str()) {
                    (true, cast::operators::LOGICAL_AND) => {
                        Some(MacroKind::All(self.convert(pred)))
                    }
                    (false, cast::operators::LOGICAL_OR) => {
                        Some(MacroKind::Exists(self.convert(pred)))
                    }
                    _ => None,
                }
            }
            cast::Expr::Literal(LiteralValue::Int(_)) => {
                if step.func_name != cast::operators::CONDITIONAL {
                    return None;
                }
                Some(MacroKind::ExistsOne(self.convert(step.args.first()?)))
            }
            cast::Expr::List(_) => {
                if step.func_name == cast::operators::ADD {
                    let transform = single_list_element(step.args.get(1)?)?;
                    return Some(MacroKind::MapList {
                        filter: None,
                        transform: self.convert(transform),
                    });
                }
                if step.func_name != cast::operators::CONDITIONAL {
                    return None;
                }
                let filter = step.args.first()?;
                let add = as_call(step.args.get(1)?)?;
                let transform = single_list_element(add.args.get(1)?)?;
                if matches!(&transform.expr, cast::Expr::Ident(n) if *n == c.iter_var) {
                    return Some(MacroKind::Filter(self.convert(filter)));
                }
                Some(MacroKind::MapList {
                    filter: Some(self.convert(filter)),
                    transform: self.convert(transform),
                })
            }
            _ => None,
        }
    }
}

fn as_call(e: &IdedExpr) -> Option<&cast::CallExpr> {
    match &e.expr {
        cast::Expr::Call(c) => Some(c),
        _ => None,
    }
}

fn single_list_element(e: &IdedExpr) -> Option<&IdedExpr> {
    match &e.expr {
        cast::Expr::List(l) if l.elements.len() == 1 => l.elements.first(),
        _ => None,
    }
}

fn convert_literal(l: &LiteralValue) -> Literal {
    match l {
        LiteralValue::Boolean(b) => Literal::Bool(*b.inner()),
        LiteralValue::Bytes(b) => Literal::Bytes(Arc::from(b.inner())),
        LiteralValue::Double(d) => Literal::Double(*d.inner()),
        LiteralValue::Int(i) => Literal::Int(*i.inner()),
        LiteralValue::Null => Literal::Null,
        LiteralValue::String(s) => Literal::String(Arc::from(s.inner())),
        LiteralValue::UInt(u) => Literal::Uint(*u.inner()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_test(src: &str) -> Result<Parsed, CompileError> {
        let src = src.to_string();
        on_compile_stack(&src, || parse(&src, false, Macros::ALL))
    }

    #[test]
    fn syntax_error_is_cel_go_style() {
        let err = parse_test("object.spec.replicas <")
            .err()
            .map(|e| e.to_string());
        let text = err.unwrap_or_default();
        assert!(
            text.starts_with("ERROR: <input>:1:23: Syntax error: mismatched input '<EOF>'"),
            "{text}"
        );
        assert!(
            text.ends_with("\n | object.spec.replicas <\n | ......................^"),
            "{text}"
        );
    }

    #[test]
    fn parse_errors_are_worded_as_cel_go() {
        let first = |src: &str| {
            parse_test(src)
                .err()
                .and_then(|e| e.issues().first().cloned())
                .map(|i| (i.column, i.message))
        };
        let cases: [(&str, i64, &str); 9] = [
            ("9223372036854775808", 0, "invalid int literal"),
            ("-9223372036854775809", 0, "invalid int literal"),
            ("1 + - 9223372036854775809", 4, "invalid int literal"),
            ("18446744073709551616u", 0, "invalid uint literal"),
            ("'\\uD800'", 0, "invalid unicode code point"),
            ("b'\\u00e9'", 0, "unable to unescape string"),
            (
                "a b c",
                2,
                "Syntax error: mismatched input 'b' expecting <EOF>",
            ),
            (
                "a ? b",
                5,
                "Syntax error: mismatched input '<EOF>' expecting ':'",
            ),
            (
                "",
                -1,
                "Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}",
            ),
        ];
        for (src, column, message) in cases {
            assert_eq!(first(src), Some((column, message.to_string())), "{src}");
        }
        let text = parse_test("x.?").err().map(|e| e.to_string());
        assert_eq!(
            text.as_deref(),
            Some(
                "ERROR: <input>:1:4: Syntax error: mismatched input '<EOF>' expecting {IDENTIFIER, ESC_IDENTIFIER}\n | x.?\n | ...^\nERROR: <input>:1:4: unsupported ident kind\n | x.?\n | ...^"
            )
        );
    }

    #[test]
    fn columns_count_code_points() {
        let err = parse_test("'héllo' + ").err().map(|e| e.issues().to_vec());
        let issues = err.unwrap_or_default();
        assert_eq!(issues.first().map(|i| i.column), Some(10));
        let err = parse_test("['é'].all(1, true)")
            .err()
            .map(|e| e.issues().to_vec());
        let issues = err.unwrap_or_default();
        assert_eq!(issues.first().map(|i| i.column), Some(10));
    }

    #[test]
    fn recognises_macros() {
        let p = parse_test("[1, 2].all(x, x > 0)").ok().map(|p| p.expr.kind);
        assert!(matches!(
            p,
            Some(ExprKind::Comprehension(c)) if matches!(c.kind, MacroKind::All(_))
        ));
        let p = parse_test("{'a': 1}.transformMap(k, v, v + 1)")
            .ok()
            .map(|p| p.expr.kind);
        assert!(matches!(
            p,
            Some(ExprKind::Comprehension(c)) if matches!(c.kind, MacroKind::TransformMap { .. })
        ));
        let p = parse_test("[1].filter(x, x > 0)").ok().map(|p| p.expr.kind);
        assert!(matches!(
            p,
            Some(ExprKind::Comprehension(c)) if matches!(c.kind, MacroKind::Filter(_))
        ));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let src = format!("{}1{}", "(".repeat(400), ")".repeat(400));
        let err = parse_test(&src)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("recursion"), "{err}");
        let src = format!("a{}", ".b".repeat(20_000));
        let err = parse_test(&src)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("recursion depth"), "{err}");
    }
}
