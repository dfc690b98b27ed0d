//! Composited variables, as Kubernetes' `spec.variables`: compiled in order, each seeing the
//! earlier ones as `variables.<name>` (fields of the object type `kubernetes.variables`),
//! evaluated lazily and memoised per [`Activation`].

use std::sync::Arc;

use crate::activation::{Activation, LazyVariables};
use crate::cost::Budget;
use crate::env::{Env, Program};
use crate::error::{CompileError, EvalError};
use crate::types::Type;
use crate::value::Value;
use crate::version::Expressions;

/// A compiled list of composited variables.
pub struct Variables {
    defs: Vec<Definition>,
    env: Env,
}

struct Definition {
    name: String,
    program: Result<Program, CompileError>,
}

impl Env {
    /// Compiles `vars` (name, expression) in order. Each expression may use the variables
    /// before it as `variables.<name>`; a later or unknown name is a compile error
    /// (`undefined field '<name>'`). A variable that fails to compile stays in the list: using
    /// it fails with `composited variable "<name>" fails to compile: <err>`.
    pub fn compile_variables<'s>(
        &self,
        vars: impl IntoIterator<Item = (&'s str, &'s str)>,
    ) -> Arc<Variables> {
        self.compile_variables_with(vars, None)
    }

    /// [`Env::compile_variables`] for Kubernetes environments where each variable's expression
    /// compiles with the libraries of the environment `expressions_of(expression)` picks (new
    /// expressions get fewer than stored ones; see [`Expressions`]). The returned environment
    /// keeps this environment's libraries.
    pub fn compile_variables_in<'s>(
        &self,
        vars: impl IntoIterator<Item = (&'s str, &'s str)>,
        expressions_of: impl Fn(&str) -> Expressions,
    ) -> Arc<Variables> {
        self.compile_variables_with(vars, Some(&expressions_of))
    }

    fn compile_variables_with<'s>(
        &self,
        vars: impl IntoIterator<Item = (&'s str, &'s str)>,
        expressions_of: Option<&dyn Fn(&str) -> Expressions>,
    ) -> Arc<Variables> {
        let mut fields: Vec<(String, Type)> = Vec::new();
        let mut defs = Vec::new();
        for (name, src) in vars {
            let mut builder = self.extend();
            if let Some(pick) = expressions_of {
                builder = builder.expressions(pick(src));
            }
            let env = builder.composited(fields.clone()).build();
            let program = env.compile(src);
            let ty = match &program {
                Ok(p) => variable_type(p.output_type()),
                Err(_) => Type::Dyn,
            };
            fields.push((name.to_string(), ty));
            defs.push(Definition {
                name: name.to_string(),
                program,
            });
        }
        let env = self.extend().composited(fields).build();
        Arc::new(Variables { defs, env })
    }
}

/// Composited variables checked without building programs (type checking only): the
/// environment that declares them and each one's check result, in order.
pub struct CheckedVariables {
    env: Env,
    results: Vec<(String, Result<Type, CompileError>)>,
}

impl CheckedVariables {
    /// The environment for expressions that use these variables.
    pub fn env(&self) -> &Env {
        &self.env
    }

    /// Each variable's name and checked type (or issues), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Result<&Type, &CompileError>)> {
        self.results.iter().map(|(n, r)| (n.as_str(), r.as_ref()))
    }
}

impl Env {
    /// [`Env::compile_variables`] for type checking: each variable is parsed and checked (see
    /// [`Env::check`]) in order, seeing the earlier ones with the types they checked to; a
    /// variable that fails to check is `dyn` to the ones after it.
    pub fn check_variables<'s>(
        &self,
        vars: impl IntoIterator<Item = (&'s str, &'s str)>,
    ) -> CheckedVariables {
        let mut fields: Vec<(String, Type)> = Vec::new();
        let mut results = Vec::new();
        for (name, src) in vars {
            let result = self.extend().composited(fields.clone()).build().check(src);
            let ty = result.as_ref().map_or(Type::Dyn, variable_type);
            fields.push((name.to_string(), ty));
            results.push((name.to_string(), result));
        }
        let env = self.extend().composited(fields).build();
        CheckedVariables { env, results }
    }
}

/// The type a variable has as a field of `kubernetes.variables`: primitive types are kept,
/// lists and maps are converted element-wise, anything else is `dyn`.
fn variable_type(t: &Type) -> Type {
    match t {
        Type::Bool
        | Type::Bytes
        | Type::Double
        | Type::Duration
        | Type::Int
        | Type::Null
        | Type::String
        | Type::Timestamp
        | Type::Uint => t.clone(),
        Type::List(e) => Type::list(variable_type(e)),
        Type::Map(k, v) => Type::map(variable_type(k), variable_type(v)),
        _ => Type::Dyn,
    }
}

impl<'a> Activation<'a> {
    /// Binds composited variables: `variables.<name>` is evaluated on first use and memoised
    /// for the life of this activation. Its cost is charged to the budget of the evaluation
    /// that first uses it. They are borrowed: an activation shares no reference count with
    /// the others evaluating the same policy at once.
    pub fn bind_variables(&mut self, vars: &'a Variables) {
        self.bind_lazy(vars);
    }
}

impl Variables {
    /// The environment for expressions that use these variables.
    pub fn env(&self) -> &Env {
        &self.env
    }

    /// The number of variables.
    pub fn len(&self) -> usize {
        self.defs.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// Each variable's name and compile result, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, Result<&Program, &CompileError>)> {
        self.defs
            .iter()
            .map(|d| (d.name.as_str(), d.program.as_ref()))
    }
}

impl LazyVariables for Variables {
    fn len(&self) -> usize {
        self.defs.len()
    }

    fn name(&self, index: usize) -> &str {
        self.defs.get(index).map_or("", |d| d.name.as_str())
    }

    fn evaluate<'a>(
        &'a self,
        index: usize,
        act: &Activation<'a>,
        budget: &mut Budget,
    ) -> (Result<Value<'a>, EvalError>, u64) {
        let Some(def) = self.defs.get(index) else {
            return (Err(EvalError::NoSuchAttribute("variables".into())), 0);
        };
        match &def.program {
            Err(e) => (
                Err(EvalError::VariableCompile {
                    name: def.name.clone(),
                    error: e.kubernetes_detail(),
                }),
                0,
            ),
            Ok(p) => {
                let (r, cost) = p.eval_with_cost(act, budget);
                // The shared budget and cancellation end the batch, not the variable; anything
                // else, its own per-call limit included, is the variable's error (Kubernetes'
                // `variableAccessor.Callback`).
                let r = r.map_err(|e| match e {
                    EvalError::BudgetExhausted | EvalError::Interrupted => e,
                    e => EvalError::VariableEval {
                        name: def.name.clone(),
                        error: Box::new(e),
                    },
                });
                (r, cost)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{PER_CALL_LIMIT, RUNTIME_BUDGET};

    #[test]
    fn variables_are_lazy_memoised_and_typed() {
        let env = Env::kubernetes().variable("object", Type::Dyn).build();
        let vars = env.compile_variables([
            ("replicas", "object.spec.replicas"),
            ("many", "variables.replicas > 2"),
            ("broken", "object.spec.nope"),
            ("bad", "1 +"),
        ]);
        let p = vars.env().compile("variables.many && variables.many");
        let p = match p {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(p.output_type(), &Type::Bool);
        let obj = serde_json::json!({"spec": {"replicas": 3}});
        // Programs outlive the activations they evaluate in.
        let later = vars.env().compile("variables.broken == 1");
        let bad = vars.env().compile("variables.bad == 1");
        let mut act = Activation::new();
        act.bind_json("object", &obj);
        act.bind_variables(&vars);
        let mut budget = Budget::default();
        let before = budget.remaining();
        let (result, own_cost) = p.eval_with_cost(&act, &mut budget);
        assert!(matches!(result, Ok(Value::Bool(true))));
        let seen: Vec<(usize, &str, bool)> = act
            .evaluated_variables()
            .map(|v| (v.index, v.name, v.result.is_ok()))
            .collect();
        assert_eq!(seen, vec![(0, "replicas", true), (1, "many", true)]);
        // Each evaluated variable's own cost plus the expression's is what the budget paid.
        let variables_cost: u64 = act.evaluated_variables().map(|v| v.cost).sum();
        assert!(act.evaluated_variables().all(|v| v.cost > 0));
        assert_eq!(own_cost + variables_cost, before - budget.remaining());

        let err = later
            .as_ref()
            .ok()
            .map(|p| p.eval(&act, &mut budget).err().map(|e| e.to_string()));
        assert_eq!(
            err.flatten().as_deref(),
            Some("composited variable \"broken\" fails to evaluate: no such key: nope")
        );
        let err = bad
            .as_ref()
            .ok()
            .map(|p| p.eval(&act, &mut budget).err().map(|e| e.to_string()));
        assert!(err.flatten().unwrap_or_default().starts_with(
            "composited variable \"bad\" fails to compile: compilation failed: ERROR"
        ));
    }

    /// A variable's error passed to `distinct()` makes cel-go's cost tracker panic: the
    /// expression fails with the panic, not the variable's error, whatever absorbs errors
    /// around it; a variable whose own evaluation panics fails as a value.
    #[test]
    fn a_failed_variable_given_to_a_tracked_list_function_panics() {
        let env = Env::kubernetes().variable("object", Type::Dyn).build();
        let vars = env.compile_variables([
            ("nums", "object.spec.missing"),
            ("distinct", "[1 / 0].distinct()"),
        ]);
        let obj = serde_json::json!({"spec": {}});
        let sources = [
            "variables.nums.distinct()",
            "variables.nums.distinct() == [] || true",
            "variables.nums == [] || true",
            "variables.distinct",
            "variables.distinct == [] || true",
        ];
        let programs: Vec<_> = sources
            .iter()
            .map(|src| vars.env().compile(src).map_err(|e| e.to_string()))
            .collect();
        let mut act = Activation::new();
        act.bind_json("object", &obj);
        act.bind_variables(&vars);
        let mut budget = Budget::default();
        let got: Vec<String> = programs
            .iter()
            .map(|p| match p {
                Ok(p) => match p.eval(&act, &mut budget) {
                    Ok(v) => format!("{v:?}"),
                    Err(e) => e.to_string(),
                },
                Err(e) => e.clone(),
            })
            .collect();
        let panic = "internal error: interface conversion: *types.Err is not traits.Lister: missing method Add";
        let t = format!("{:?}", Value::Bool(true));
        let want = [
            panic.to_string(),
            panic.to_string(),
            t.clone(),
            format!("composited variable \"distinct\" fails to evaluate: {panic}"),
            t,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn a_variable_past_its_per_call_limit_fails_once_as_a_value() {
        let env = Env::kubernetes().build();
        let hundred = (0..100)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let scan =
            format!("[{hundred}].all(a, [{hundred}].all(b, [{hundred}].all(c, a + b + c >= 0)))");
        let vars = env.compile_variables([("scan", scan.as_str())]);
        let compile = |src| vars.env().compile(src).map_err(|e| e.to_string());
        let (Ok(read), Ok(absorbed)) =
            (compile("variables.scan"), compile("variables.scan || true"))
        else {
            panic!("compiles");
        };
        let mut act = Activation::new();
        act.bind_variables(&vars);
        let mut budget = Budget::default();
        let err = read.eval(&act, &mut budget).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some(
                "composited variable \"scan\" fails to evaluate: operation cancelled: actual cost limit exceeded"
            )
        );
        // Charged once, at the per-call limit; then memoised, and absorbed like any error.
        let spent = RUNTIME_BUDGET - budget.remaining();
        assert!(
            spent > PER_CALL_LIMIT && spent < PER_CALL_LIMIT + 100,
            "{spent}"
        );
        assert!(matches!(
            absorbed.eval(&act, &mut budget),
            Ok(Value::Bool(true))
        ));
        // The second expression pays only for its own reading of `variables.scan`.
        assert_eq!(RUNTIME_BUDGET - budget.remaining(), spent + 2);
    }

    #[test]
    fn checked_variables_keep_their_types_without_programs() {
        let env = Env::kubernetes().variable("object", Type::Dyn).build();
        // `uint('1.5')` checks (as `uint`) but has no program: type checking keeps its type.
        let vars = env.check_variables([
            ("n", "uint('1.5')"),
            ("bad", "1 +"),
            ("names", "['a'].map(x, x)"),
        ]);
        let types: Vec<String> = vars
            .iter()
            .map(|(n, r)| format!("{n}: {}", r.map_or("error".into(), |t| t.to_string())))
            .collect();
        assert_eq!(types, ["n: uint", "bad: error", "names: list(string)"]);
        let t = |src: &str| {
            vars.env()
                .check(src)
                .map(|t| t.to_string())
                .map_err(|e| e.to_string())
        };
        assert_eq!(t("variables.n"), Ok("uint".into()));
        assert_eq!(t("variables.bad"), Ok("dyn".into()));
        assert_eq!(t("variables.names"), Ok("list(string)".into()));
        assert!(t("variables.nope").is_err_and(|e| e.contains("undefined field 'nope'")));
    }

    #[test]
    fn later_variables_are_undefined() {
        let env = Env::kubernetes().build();
        let vars = env.compile_variables([("a", "variables.b"), ("b", "1")]);
        let first = vars
            .iter()
            .next()
            .and_then(|(_, p)| p.err().map(|e| e.to_string()));
        assert!(first.unwrap_or_default().contains("undefined field 'b'"));
    }
}
