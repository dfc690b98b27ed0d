//! Errors: compile-time issues (formatted as cel-go's `Issues.String()`) and evaluation errors
//! (worded as cel-go's runtime errors).

use std::fmt;

/// One compile-time issue at a position of the source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issue {
    /// 1-based line; 0 or less when the position is unknown.
    pub line: i64,
    /// 0-based column in code points.
    pub column: i64,
    /// The message, e.g. `undeclared reference to 'x' (in container '')`.
    pub message: String,
}

/// A failed compilation: the parser's or checker's issues, or (see
/// [`is_program`](Self::is_program)) a failure to plan the checked expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileError {
    source: String,
    issues: Vec<Issue>,
    program: Option<String>,
    /// The checked result type, for an expression that checked but could not be planned.
    output: Option<crate::types::Type>,
}

impl CompileError {
    pub(crate) fn new(source: &str, mut issues: Vec<Issue>) -> Self {
        issues.sort_by_key(|i| (i.line, i.column));
        issues.truncate(100);
        Self {
            source: source.to_string(),
            issues,
            program: None,
            output: None,
        }
    }

    /// The expression checked but cannot be planned: a constant sub-expression cel-go folds
    /// when building the program failed (e.g. `uint('1.5')`). Kubernetes reports these as
    /// `program instantiation failed: <message>`.
    pub(crate) fn program(source: &str, message: String) -> Self {
        Self {
            source: source.to_string(),
            issues: Vec::new(),
            program: Some(message),
            output: None,
        }
    }

    /// Records the checked result type of an expression that failed planning.
    pub(crate) fn with_output_type(mut self, t: crate::types::Type) -> Self {
        self.output = Some(t);
        self
    }

    /// The checked result type when the expression type-checked but planning failed
    /// ([`CompileError::is_program`]): callers that check the result type first, as
    /// Kubernetes does before `Program()`, need it.
    pub fn checked_output_type(&self) -> Option<&crate::types::Type> {
        self.output.as_ref()
    }

    /// True when checking passed but building the program failed; the error then displays
    /// as cel-go's `Program()` error text alone.
    pub fn is_program(&self) -> bool {
        self.program.is_some()
    }

    /// The failure as Kubernetes' CEL compiler details it: `compilation failed: <issues>`, or
    /// `program instantiation failed: <error>` for a checked expression that cannot be planned
    /// (an error of type Internal there).
    pub fn kubernetes_detail(&self) -> String {
        if self.program.is_some() {
            format!("program instantiation failed: {self}")
        } else {
            format!("compilation failed: {self}")
        }
    }

    /// The issues, sorted by position.
    pub fn issues(&self) -> &[Issue] {
        &self.issues
    }
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(m) = &self.program {
            return f.write_str(m);
        }
        for (n, issue) in self.issues.iter().enumerate() {
            if n > 0 {
                f.write_str("\n")?;
            }
            write!(
                f,
                "ERROR: <input>:{}:{}: {}",
                issue.line,
                issue.column + 1,
                issue.message
            )?;
            // cel-go shows no snippet of an empty source.
            if issue.line < 1 || self.source.is_empty() {
                continue;
            }
            let Some(line) = usize::try_from(issue.line - 1)
                .ok()
                .and_then(|l| self.source.split('\n').nth(l))
            else {
                continue;
            };
            if line.len() > 16_384 {
                continue;
            }
            let line = line.replace('\t', " ");
            write!(f, "\n | {line}\n | ")?;
            // cel-go marks the column with dots, full-width ones for multi-byte characters.
            let mut chars = line.chars();
            for _ in 0..issue.column {
                match chars.next() {
                    Some(c) => f.write_str(if c.len_utf8() > 1 { "．" } else { "." })?,
                    None => break,
                }
            }
            let wide = chars.next().is_some_and(|c| c.len_utf8() > 1);
            f.write_str(if wide { "＾" } else { "^" })?;
        }
        Ok(())
    }
}

impl std::error::Error for CompileError {}

/// An evaluation error. `Display` is worded as cel-go's runtime errors, which Kubernetes
/// embeds in its messages (`expression '…' resulted in error: <this>`).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// A map lookup or field selection on a missing key.
    #[error("no such key: {0}")]
    NoSuchKey(String),
    /// A function applied to arguments of runtime types none of its overloads accepts.
    #[error("{0}")]
    NoSuchOverload(NoSuchOverload),
    /// A function name that no library declares (only possible without type checking).
    #[error("unbound function: {0}")]
    UnboundFunction(String),
    /// A variable that the activation does not bind.
    #[error("no such attribute(s): {0}")]
    NoSuchAttribute(String),
    /// Integer division by zero.
    #[error("division by zero")]
    DivisionByZero,
    /// Integer modulus by zero.
    #[error("modulus by zero")]
    ModulusByZero,
    /// int64 overflow.
    #[error("integer overflow")]
    IntOverflow,
    /// uint64 overflow.
    #[error("unsigned integer overflow")]
    UintOverflow,
    /// Duration out of range.
    #[error("duration overflow")]
    DurationOverflow,
    /// Timestamp out of range.
    #[error("timestamp overflow")]
    TimestampOverflow,
    /// List index out of range.
    #[error("index out of bounds: {0}")]
    IndexOutOfBounds(String),
    /// A map with a key that JSON cannot represent (any key but a string).
    #[error("unsupported key type: {0}")]
    UnsupportedKeyType(String),
    /// An index of a type that cannot qualify a value (only strings, numbers and bools can),
    /// named by the Go type of cel-go's value (`types.Null`, `*types.baseList`).
    #[error("invalid qualifier type: {0}")]
    InvalidQualifier(String),
    /// A bytes map key: cel-go's runtime cannot hash one and reports its panic this way.
    #[error("internal error: runtime error: hash of unhashable type types.Bytes")]
    UnhashableKey,
    /// Ordering comparison involving NaN.
    #[error("NaN values cannot be ordered")]
    NaNOrdering,
    /// The per-call cost limit was exceeded.
    #[error("operation cancelled: actual cost limit exceeded")]
    CostLimitExceeded,
    /// The budget shared by several expressions ran out (distinct from the per-call limit, so
    /// callers can produce Kubernetes' `running out of cost budget` message).
    #[error("operation cancelled: cost budget exhausted")]
    BudgetExhausted,
    /// The deadline passed or the evaluation was cancelled.
    #[error("operation interrupted")]
    Interrupted,
    /// `replace` or `format` would make strings grow past celgate's bound
    /// ([`STRING_GROWTH_LIMIT`](crate::STRING_GROWTH_LIMIT)), which upstream does not have:
    /// their cost ignores what they build.
    #[error(
        "operation cancelled: {function} would grow strings by more than {limit} bytes, celgate's bound on what replace and format build"
    )]
    StringGrowthExceeded {
        /// The function.
        function: String,
        /// The bound, in bytes.
        limit: u64,
    },
    /// A composited variable failed to compile.
    #[error("composited variable \"{name}\" fails to compile: {error}")]
    VariableCompile {
        /// The variable's name.
        name: String,
        /// The compile error text.
        error: String,
    },
    /// A composited variable failed to evaluate.
    #[error("composited variable \"{name}\" fails to evaluate: {error}")]
    VariableEval {
        /// The variable's name.
        name: String,
        /// The underlying error.
        error: Box<EvalError>,
    },
    /// A panic cel-go recovers from and reports for the whole evaluation (`internal error:
    /// <panic>`): no `||`, `&&` or loop absorbs it. The text is Go's panic message.
    #[error("internal error: {0}")]
    Internal(String),
    /// Any other error, worded by the function that raised it.
    #[error("{0}")]
    Message(String),
}

impl EvalError {
    /// A free-form error message.
    pub fn msg(m: impl Into<String>) -> Self {
        EvalError::Message(m.into())
    }

    /// `no such overload`: an implementation rejecting its arguments (the evaluator records
    /// which call it was, for [`EvalError::detail`]).
    pub(crate) const fn no_such_overload() -> Self {
        EvalError::NoSuchOverload(NoSuchOverload {
            call: None,
            shown: OverloadShown::Nothing,
        })
    }

    /// The error as a log line or a trace wants it: the text cel-go prints (this error's
    /// `Display`, which Kubernetes puts into its messages), completed with what cel-go leaves
    /// out, such as the function and the runtime argument types of a call no overload
    /// accepted (`no such overload: _+_(uint, int)`).
    pub fn detail(&self) -> String {
        match self {
            EvalError::NoSuchOverload(o) => o.detail(),
            EvalError::VariableEval { name, error } => {
                format!(
                    "composited variable \"{name}\" fails to evaluate: {}",
                    error.detail()
                )
            }
            other => other.to_string(),
        }
    }

    /// True for errors that must stop evaluation even where CEL would otherwise absorb an
    /// error (`&&`, `||`, comprehension loops): cost, cancellation and cel-go's panics. A composited variable's
    /// error is a value to the expression reading it, even when the variable's own evaluation
    /// passed its per-call limit (Kubernetes evaluates it as a program of its own).
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            EvalError::CostLimitExceeded
                | EvalError::BudgetExhausted
                | EvalError::Interrupted
                | EvalError::StringGrowthExceeded { .. }
                | EvalError::Internal(_)
        )
    }
}

/// How much of a call no overload accepted cel-go names in its message, which depends on
/// where its dispatch noticed (see the function registry's dispatch kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverloadShown {
    /// `no such overload`: an implementation rejected the arguments.
    Nothing,
    /// `no such overload: _+_`: the first argument lacks the trait the operator needs.
    Function,
    /// `no such overload: sum(list)`: no overload's runtime type guard accepted the arguments.
    Signature,
}

/// A call no overload accepted: what cel-go shows of it, and the call itself when known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoSuchOverload {
    /// The function and its arguments' runtime type names.
    call: Option<Box<(String, Vec<String>)>>,
    shown: OverloadShown,
}

impl NoSuchOverload {
    /// A call of `function` with arguments of the runtime types `args`, of which cel-go's
    /// message shows `shown`.
    pub(crate) fn new(function: &str, args: Vec<String>, shown: OverloadShown) -> Self {
        Self {
            call: Some(Box::new((function.to_string(), args))),
            shown,
        }
    }

    /// Records the call when the error does not name it yet.
    pub(crate) fn or_call(self, function: &str, args: impl FnOnce() -> Vec<String>) -> Self {
        match self.call {
            Some(_) => self,
            None => Self::new(function, args(), self.shown),
        }
    }

    /// How much of the call cel-go's message shows.
    pub fn shown(&self) -> OverloadShown {
        self.shown
    }

    /// The function called, when known.
    pub fn function(&self) -> Option<&str> {
        self.call.as_ref().map(|c| c.0.as_str())
    }

    /// The runtime type names of the arguments, when known.
    pub fn arg_types(&self) -> &[String] {
        self.call
            .as_ref()
            .map(|c| c.1.as_slice())
            .unwrap_or_default()
    }

    /// `no such overload: f(t1, t2)` when the call is known, else the message.
    fn detail(&self) -> String {
        match &self.call {
            Some(c) => format!("no such overload: {}({})", c.0, c.1.join(", ")),
            None => self.to_string(),
        }
    }
}

impl fmt::Display for NoSuchOverload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("no such overload")?;
        let Some(c) = &self.call else {
            return Ok(());
        };
        match self.shown {
            OverloadShown::Nothing => Ok(()),
            OverloadShown::Function => write!(f, ": {}", c.0),
            OverloadShown::Signature => write!(f, ": {}({})", c.0, c.1.join(", ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issues_format_like_cel_go() {
        let e = CompileError::new(
            "object.replicas > 1",
            vec![Issue {
                line: 1,
                column: 6,
                message: "undefined field 'replicas'".into(),
            }],
        );
        assert_eq!(
            e.to_string(),
            "ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas > 1\n | ......^"
        );
    }

    #[test]
    fn detail_keeps_the_call_out_of_the_text() {
        let call = |shown| {
            EvalError::NoSuchOverload(NoSuchOverload::new(
                "_+_",
                vec!["uint".into(), "int".into()],
                shown,
            ))
        };
        assert_eq!(call(OverloadShown::Nothing).to_string(), "no such overload");
        assert_eq!(
            call(OverloadShown::Function).to_string(),
            "no such overload: _+_"
        );
        assert_eq!(
            call(OverloadShown::Signature).to_string(),
            "no such overload: _+_(uint, int)"
        );
        let e = EvalError::VariableEval {
            name: "v".into(),
            error: Box::new(call(OverloadShown::Nothing)),
        };
        assert_eq!(
            e.to_string(),
            "composited variable \"v\" fails to evaluate: no such overload"
        );
        assert_eq!(
            e.detail(),
            "composited variable \"v\" fails to evaluate: no such overload: _+_(uint, int)"
        );
        assert_eq!(EvalError::no_such_overload().detail(), "no such overload");
    }

    #[test]
    fn wide_characters_use_full_width_markers() {
        let e = CompileError::new(
            "'é' + x",
            vec![Issue {
                line: 1,
                column: 6,
                message: "m".into(),
            }],
        );
        assert_eq!(
            e.to_string(),
            "ERROR: <input>:1:7: m\n | 'é' + x\n | .．....^"
        );
    }
}
