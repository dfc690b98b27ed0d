//! The compilation check of each expression of a write: compiled in the environment its field
//! and its library set give it, with a failure reported as kube-apiserver reports it (a program
//! that cannot be built is an internal error, without the value).

use celgate_cel::{Env, Expressions, Type};

use super::environments::Environments;
use super::field_error::{Errors, FieldErrorType, quote};
use crate::compile::{ExprError, compile_checked};
use crate::environment::base_environment;

/// `env` (built on the StoredExpressions libraries) with the libraries of `expressions`.
pub(super) fn with_libraries(env: &Env, expressions: Expressions) -> Env {
    match expressions {
        Expressions::Stored => env.clone(),
        Expressions::New(_) => env.extend().expressions(expressions).build(),
    }
}

/// Compiles `source` in `env` and checks it evaluates to one of `want`; a failure is an error
/// at `field` that shows `shown` (the expression as written) as the value.
pub(super) fn check_expression(
    errs: &mut Errors,
    field: &str,
    env: &Env,
    source: &str,
    want: &[Type],
    shown: &str,
) {
    match compile_checked(env, source, want) {
        Ok(_) => {}
        Err(e @ ExprError::Program(_)) => {
            errs.push(field, FieldErrorType::Internal, None, &e.to_string());
        }
        Err(e) => errs.invalid(field, quote(shown), &e.to_string()),
    }
}

/// Compiles a policy's variables (name, expression) in order, later expressions seeing the
/// earlier ones; a variable without an expression is left out. Returns the environment the
/// policy's other expressions compile in.
pub(super) fn compile_variables(
    variables: &[(&str, &str)],
    has_params: bool,
    envs: &Environments<'_>,
    errs: &mut Errors,
) -> Env {
    let declared = variables
        .iter()
        .enumerate()
        .filter(|(_, (_, e))| !e.trim().is_empty());
    let compiled = base_environment(has_params, true)
        .compile_variables_in(declared.clone().map(|(_, v)| *v), |expr| {
            envs.validation(expr)
        });
    for ((i, (_, expr)), (_, result)) in declared.zip(compiled.iter()) {
        if let Err(e) = result {
            let field = format!("spec.variables[{i}].expression");
            if e.is_program() {
                let detail = format!("program instantiation failed: {e}");
                errs.push(&field, FieldErrorType::Internal, None, &detail);
            } else {
                errs.invalid(&field, quote(expr), &format!("compilation failed: {e}"));
            }
        }
    }
    compiled.env().clone()
}
