//! Why a check of a policy's expressions could not decide ([`CheckError`], worded as
//! kube-apiserver words it) and how a check ended for the metrics ([`ErrorType`]); shared by
//! validating and mutating policies.

use celgate_cel::EvalError;

use crate::compile::ExprError;

/// How one policy check ended, for the `check_total`/`check_duration_seconds` metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// The policy evaluated without error and admitted.
    NoError,
    /// An expression did not compile.
    CompileError,
    /// The cost budget ran out.
    OutOfBudget,
    /// A validation failed or errored.
    InvalidError,
}

impl ErrorType {
    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::NoError => "no_error",
            ErrorType::CompileError => "compile_error",
            ErrorType::OutOfBudget => "out_of_budget",
            ErrorType::InvalidError => "invalid_error",
        }
    }
}

/// Why a check could not decide, worded as kube-apiserver words it in its messages. The
/// metric's `error_type` is read from the variant ([`CheckError::error_type`]), never from
/// the text.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckError {
    /// The expression did not compile.
    #[error("compilation error: {0}")]
    Compile(ExprError),
    /// Evaluating the expression failed.
    #[error("expression '{expression}' resulted in error: {error}")]
    Eval {
        /// The expression's source.
        expression: String,
        /// The evaluation error (cel-go's text).
        error: EvalError,
    },
    /// A validation evaluated to something other than a bool.
    #[error(
        "expression '{expression}' resulted in error: no such overload: validation result is {type_name}"
    )]
    NotBool {
        /// The expression's source.
        expression: String,
        /// The CEL type of the result.
        type_name: String,
    },
    /// A match condition evaluated to something other than a bool.
    #[error("matchCondition '{name}' resulted in non-bool value {type_name}")]
    ConditionNotBool {
        /// The condition's name.
        name: String,
        /// The CEL type of the result.
        type_name: String,
    },
    /// An audit annotation's value expression gave neither a string nor null.
    #[error(
        "valueExpression '{expression}' resulted in unsupported return type: {type_name}. Return type must be either string or null."
    )]
    AnnotationType {
        /// The expression's source.
        expression: String,
        /// The CEL type of the result.
        type_name: String,
    },
    /// The validations' shared cost budget ran out.
    #[error(
        "validation failed due to running out of cost budget, no further validation rules will be run"
    )]
    OutOfBudget,
    /// The shared cost budget ran out in a message expression.
    #[error(
        "failed messageExpression: validation failed due to running out of cost budget, no further validation rules will be run"
    )]
    MessageOutOfBudget,
    /// celgate failed inside this policy's evaluation (a defect in celgate, not in the
    /// policy); the policy's failurePolicy decides, and other policies are unaffected.
    #[error("internal error in celgate while evaluating the policy: {0}")]
    Internal(String),
}

impl CheckError {
    /// The `error_type` metric label of this failure.
    pub fn error_type(&self) -> ErrorType {
        match self {
            CheckError::Compile(_) => ErrorType::CompileError,
            CheckError::OutOfBudget => ErrorType::OutOfBudget,
            CheckError::Eval { .. }
            | CheckError::NotBool { .. }
            | CheckError::ConditionNotBool { .. }
            | CheckError::AnnotationType { .. }
            | CheckError::MessageOutOfBudget
            | CheckError::Internal(_) => ErrorType::InvalidError,
        }
    }
}
