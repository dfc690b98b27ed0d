//! celgate's CEL implementation with Kubernetes semantics.
//!
//! The `cel` crate parses (cel-go's grammar and syntax errors); everything after that is ours:
//! [`ast`] conversion with macro recognition, the type checker ([`check`]), the planner
//! ([`plan`]) that builds a [`program`], the evaluator ([`eval`]) that walks it with cel-go's
//! runtime cost model ([`cost`]), and the function libraries ([`libs`]), which declare each
//! function once, in the [`registry`] all three read.
//!
//! ```
//! use celgate_cel::{Activation, Budget, Env, Type, Value};
//! let env = Env::kubernetes().variable("object", Type::Dyn).build();
//! let program = env.compile("object.spec.replicas <= 5").unwrap();
//! let object = serde_json::json!({"spec": {"replicas": 3}});
//! let mut act = Activation::new();
//! act.bind_json("object", &object);
//! let mut budget = Budget::new(1_000_000, 10_000_000);
//! assert_eq!(program.eval(&act, &mut budget).unwrap(), Value::Bool(true));
//! ```

mod activation;
mod ast;
mod check;
mod cost;
mod env;
mod error;
mod eval;
pub mod json_tape;
mod libs;
mod literal;
mod parse;
mod plan;
mod program;
mod registry;
mod relocate;
pub mod structs;
pub mod types;
mod unparse;
pub mod value;
mod variables;
mod version;

pub use activation::{Activation, EvaluatedVariable};
pub use cost::{
    Budget, MATCH_CONDITIONS_BUDGET, PER_CALL_LIMIT, RUNTIME_BUDGET, STRING_GROWTH_LIMIT,
};
pub use env::{Env, EnvBuilder, Program};
pub use error::{CompileError, EvalError, Issue, NoSuchOverload, OverloadShown};
pub use json_tape::JsonTape;
pub use libs::authz;
pub use libs::authz::{Authorizer, AuthzDecision, AuthzRequest};
pub use libs::mutation::ObjectSchemas;
pub use literal::Literal;
pub use relocate::{Relocation, RelocationError};
pub use structs::{StructType, StructValue, TypeProvider};
pub use types::{ObjectType, Type};
pub use value::Value;
pub use variables::{CheckedVariables, Variables};
pub use version::{Compatibility, Expressions, VersionError};
