//! Environments (declarations) and programs (compiled expressions).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, OnceLock};

use crate::activation::Activation;
use crate::check::{self, Decls};
use crate::cost::Budget;
use crate::error::{CompileError, EvalError, Issue};
use crate::eval::Evaluation;
use crate::libs::mutation::ObjectSchemas;
use crate::libs::{self as libs, Library};
use crate::literal::{self, Literal};
use crate::parse;
use crate::plan::{self, PlanEnv};
use crate::program::Node;
use crate::registry::Registry;
use crate::relocate::{self, Relocation, RelocationError};
use crate::structs::TypeProvider;
use crate::types::Type;
use crate::unparse;
use crate::value::Value;
use crate::version::{Compatibility, Expressions};

/// Every library Kubernetes 1.36 enables, in registration order.
const KUBERNETES_LIBRARIES: [Library; 15] = [
    Library::Standard,
    Library::Strings,
    Library::Optional,
    Library::KubeLists,
    Library::Lists,
    Library::Sets,
    Library::Regex,
    Library::Quantity,
    Library::Ip,
    Library::Urls,
    Library::Semver,
    Library::Format,
    Library::Authz,
    Library::TwoVarComprehensions,
    Library::StringFormat,
];

/// The StoredExpressions registry: every library.
static KUBERNETES: LazyLock<Arc<Registry>> =
    LazyLock::new(|| Arc::new(libs::build(&KUBERNETES_LIBRARIES)));

/// The NewExpressions registries, one per compatibility version from [`Compatibility::MIN`].
static NEW_EXPRESSIONS: [OnceLock<Arc<Registry>>; VERSIONS] = [const { OnceLock::new() }; VERSIONS];

/// How many compatibility versions there are.
const VERSIONS: usize = (Compatibility::MAX.minor() - Compatibility::MIN.minor() + 1) as usize;

/// The registry of `expressions`' environment.
fn kubernetes_registry(expressions: Expressions) -> Arc<Registry> {
    let Expressions::New(compat) = expressions else {
        return KUBERNETES.clone();
    };
    let fits = |l: &Library| l.introduced() <= compat.minor();
    if KUBERNETES_LIBRARIES.iter().all(fits) {
        return KUBERNETES.clone();
    }
    let slot = (compat.minor() - Compatibility::MIN.minor()) as usize;
    NEW_EXPRESSIONS[slot.min(VERSIONS - 1)]
        .get_or_init(|| {
            let libs: Vec<Library> = KUBERNETES_LIBRARIES.into_iter().filter(fits).collect();
            Arc::new(libs::build(&libs))
        })
        .clone()
}

/// Declarations expressions are compiled against. Cheap to clone.
#[derive(Clone)]
pub struct Env {
    inner: Arc<EnvInner>,
}

struct EnvInner {
    registry: Arc<Registry>,
    variables: HashMap<String, Type>,
    composited: HashMap<String, usize>,
    container: String,
    /// Whether Kubernetes' AST validators (mixed-type literals, literal arguments, format
    /// strings) run after type checking.
    ast_validators: bool,
    ident_escape: bool,
    types: Option<Arc<dyn TypeProvider>>,
}

/// Builds an [`Env`].
#[derive(Clone)]
pub struct EnvBuilder {
    registry: Arc<Registry>,
    variables: HashMap<String, Type>,
    composited: HashMap<String, usize>,
    container: String,
    ast_validators: bool,
    ident_escape: bool,
    types: Option<Arc<dyn TypeProvider>>,
}

impl EnvBuilder {
    /// Declares a variable.
    pub fn variable(mut self, name: &str, ty: Type) -> Self {
        self.variables.insert(name.to_string(), ty);
        self
    }

    /// Declares a function overload for type checking only (no implementation: calling it
    /// fails at evaluation). `member` makes it receiver-style, with `params[0]` the receiver.
    pub fn declare_function(
        mut self,
        name: &str,
        member: bool,
        params: Vec<Type>,
        result: Type,
    ) -> Self {
        let registry = Arc::make_mut(&mut self.registry);
        let def = registry.def(name);
        let def = if member {
            def.member(&params, result)
        } else {
            def.global(&params, result)
        };
        def.done();
        self
    }

    /// Uses the Kubernetes libraries of `expressions` (this replaces the builder's functions,
    /// so call it before [`EnvBuilder::mutation_library`] or [`EnvBuilder::declare_function`]).
    pub fn expressions(mut self, expressions: Expressions) -> Self {
        self.registry = kubernetes_registry(expressions);
        self
    }

    /// Adds what only mutation expressions get: the message types `Object`, `Object.<path>`
    /// and `JSONPatch`, and the function `jsonpatch.escapeKey`.
    pub fn mutation_library(mut self) -> Self {
        libs::jsonpatch::register(Arc::make_mut(&mut self.registry));
        self.types(Arc::new(libs::mutation::MutationTypes::default()))
    }

    /// [`EnvBuilder::mutation_library`] for type checking against a kind's schema: `Object`
    /// and `Object.<path>` resolve through `schemas`, so a literal's fields are checked
    /// (evaluation is unchanged).
    pub fn typed_mutation_library(mut self, schemas: Arc<dyn ObjectSchemas>) -> Self {
        libs::jsonpatch::register(Arc::make_mut(&mut self.registry));
        self.types(Arc::new(libs::mutation::MutationTypes {
            schemas: Some(schemas),
        }))
    }

    /// Resolves message literals (`Name{field: value}`) with `provider`; without one, every
    /// message literal is an undeclared reference.
    pub fn types(mut self, provider: Arc<dyn TypeProvider>) -> Self {
        self.types = Some(provider);
        self
    }

    /// Sets the container (namespace) used to resolve names.
    pub fn container(mut self, name: &str) -> Self {
        self.container = name.to_string();
        self
    }

    /// Declares `variables` as the object type `kubernetes.variables` with the given fields;
    /// `variables.<name>` then reads composited variable `index`.
    pub(crate) fn composited(mut self, fields: Vec<(String, Type)>) -> Self {
        self.composited = fields
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
        self.variables.insert(
            "variables".into(),
            Type::object("kubernetes.variables", fields),
        );
        self
    }

    /// The environment.
    pub fn build(self) -> Env {
        Env {
            inner: Arc::new(EnvInner {
                registry: self.registry,
                variables: self.variables,
                composited: self.composited,
                container: self.container,
                ast_validators: self.ast_validators,
                ident_escape: self.ident_escape,
                types: self.types,
            }),
        }
    }
}

impl Env {
    /// The Kubernetes base environment for stored expressions and evaluation (stdlib + every
    /// library Kubernetes enables). Kubernetes' AST validators run: mixed-type list and map
    /// literals, invalid literal arguments and invalid format strings are compile errors.
    pub fn kubernetes() -> EnvBuilder {
        Self::kubernetes_for(Expressions::Stored)
    }

    /// The Kubernetes base environment of `expressions`: NewExpressions leaves out the
    /// libraries introduced after its compatibility version.
    pub fn kubernetes_for(expressions: Expressions) -> EnvBuilder {
        EnvBuilder {
            registry: kubernetes_registry(expressions),
            variables: HashMap::new(),
            composited: HashMap::new(),
            container: String::new(),
            ast_validators: true,
            ident_escape: false,
            types: None,
        }
    }

    /// The same libraries without Kubernetes' AST validators (mixed-type literals are `dyn`)
    /// and with backtick-quoted field names, as the cel-spec conformance suite expects.
    pub fn standard() -> EnvBuilder {
        EnvBuilder {
            ast_validators: false,
            ident_escape: true,
            ..Self::kubernetes()
        }
    }

    /// A builder that extends this environment.
    pub fn extend(&self) -> EnvBuilder {
        EnvBuilder {
            registry: self.inner.registry.clone(),
            variables: self.inner.variables.clone(),
            composited: self.inner.composited.clone(),
            container: self.inner.container.clone(),
            ast_validators: self.inner.ast_validators,
            ident_escape: self.inner.ident_escape,
            types: self.inner.types.clone(),
        }
    }

    /// The declared type of variable `name`.
    pub fn variable_type(&self, name: &str) -> Option<&Type> {
        self.inner.variables.get(name)
    }

    /// Parses, type-checks and plans `src`. The error displays as cel-go's issues.
    pub fn compile(&self, src: &str) -> Result<Program, CompileError> {
        self.compile_inner(src, true)
    }

    /// Parses and type-checks `src` (with the AST validators) without building a program, as
    /// Kubernetes' type checker does: the checked result type, or cel-go's issues.
    pub fn check(&self, src: &str) -> Result<Type, CompileError> {
        parse::on_compile_stack(src, || {
            let parsed = parse::parse(src, self.inner.ident_escape, self.inner.registry.macros())?;
            self.check_parsed(src, &parsed).map(|(_, output)| output)
        })
    }

    /// `src` rewritten on its checked tree so that it reads (and in mutations writes) fields
    /// where `relocation` moves them, written back as source.
    pub fn relocate(&self, src: &str, relocation: &Relocation) -> Result<String, RelocationError> {
        let out = parse::on_compile_stack(src, || {
            let mut parsed =
                parse::parse(src, self.inner.ident_escape, self.inner.registry.macros())?;
            let (checked, _) = self.check_parsed(src, &parsed)?;
            Ok(
                relocate::relocate(&mut parsed.expr, &checked.refs, relocation)
                    .map(|()| unparse::unparse(&parsed.expr)),
            )
        });
        match out {
            Ok(result) => result,
            Err(e) => Err(RelocationError::Compile(e.to_string())),
        }
    }

    /// Parses and plans `src` without type checking (functions dispatch on runtime types only).
    pub fn compile_unchecked(&self, src: &str) -> Result<Program, CompileError> {
        self.compile_inner(src, false)
    }

    fn compile_inner(&self, src: &str, check: bool) -> Result<Program, CompileError> {
        parse::on_compile_stack(src, || self.compile_here(src, check))
    }

    fn compile_here(&self, src: &str, check: bool) -> Result<Program, CompileError> {
        let parsed = parse::parse(src, self.inner.ident_escape, self.inner.registry.macros())?;
        let inner = &self.inner;
        let (checked, output) = if check {
            let (checked, output) = self.check_parsed(src, &parsed)?;
            (Some(checked), output)
        } else {
            (None, Type::Dyn)
        };
        let env = PlanEnv {
            registry: &inner.registry,
            variables: &inner.variables,
            composited: &inner.composited,
            container: &inner.container,
            types: inner.types.as_deref(),
        };
        let planned = plan::plan(&parsed.expr, checked.as_ref(), &env).map_err(|e| match e {
            plan::PlanError::Program(m) => {
                CompileError::program(src, m).with_output_type(output.clone())
            }
            e @ plan::PlanError::Malformed(_) => CompileError::new(
                src,
                vec![Issue {
                    line: -1,
                    column: -1,
                    message: e.to_string(),
                }],
            ),
        })?;
        Ok(Program {
            source: src.to_string(),
            root: planned.root,
            slots: planned.slots,
            globals: planned.globals,
            reads_composited: planned.reads_composited,
            output,
        })
    }
}

impl Env {
    /// Type-checks a parsed expression, then runs Kubernetes' AST validators on it if it
    /// checked: the checker's results and the result type, or the issues.
    fn check_parsed(
        &self,
        src: &str,
        parsed: &parse::Parsed,
    ) -> Result<(check::Checked, Type), CompileError> {
        let inner = &self.inner;
        let decls = Decls {
            variables: &inner.variables,
            registry: &inner.registry,
            container: &inner.container,
            types: inner.types.as_deref(),
        };
        let (checked, mut issues) = check::check(&parsed.expr, &decls, &parsed.positions);
        if issues.is_empty() && inner.ast_validators {
            issues = libs::validators::validate(&parsed.expr, &checked, &parsed.positions);
        }
        if !issues.is_empty() {
            return Err(CompileError::new(src, issues));
        }
        let output = checked
            .types
            .get(&parsed.expr.id)
            .cloned()
            .unwrap_or(Type::Dyn);
        Ok((checked, output))
    }
}

/// A compiled expression: immutable, `Send + Sync`, shareable through an `Arc`.
#[derive(Debug)]
pub struct Program {
    source: String,
    root: Node,
    slots: usize,
    globals: Box<[Arc<str>]>,
    reads_composited: bool,
    output: Type,
}

impl Program {
    /// Whether evaluating may read the activation variable `name` (a qualified name such as
    /// `authorizer.requestResource` counts as itself). Composited variables (`variables.x`)
    /// are programs of their own and are not followed.
    pub fn reads(&self, name: &str) -> bool {
        self.globals.iter().any(|g| &**g == name)
    }

    /// Whether evaluating may read the activation at all (a variable or a composited
    /// variable): when not, every evaluation gives the same result at the same cost.
    pub fn reads_activation(&self) -> bool {
        !self.globals.is_empty() || self.reads_composited
    }

    /// The checked type of the expression's result (`dyn` when compiled unchecked).
    pub fn output_type(&self) -> &Type {
        &self.output
    }

    /// The expression's source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates against `act`, charging `budget`. Stops with
    /// [`EvalError::CostLimitExceeded`] past the per-call limit and with
    /// [`EvalError::BudgetExhausted`] when the shared budget runs out. The program must
    /// outlive the activation: a result may borrow the program's constants (see
    /// [`Value::into_static`] for one that outlives both).
    pub fn eval<'a>(
        &'a self,
        act: &Activation<'a>,
        budget: &mut Budget,
    ) -> Result<Value<'a>, EvalError> {
        self.eval_with_cost(act, budget).0
    }

    /// The shape of the result: the literals it is built of, around the expressions inside
    /// them ([`Literal::Leaf`] when it is not a literal).
    pub fn literal(&self) -> Literal {
        Literal::of(&self.root)
    }

    /// Evaluates the leaves of `shape`, this program's [`literal`](Self::literal) or one with
    /// some of its literals taken as leaves (evaluated whole), in the order written, against
    /// `act`: charged what evaluating the whole program is charged, and failing as it fails,
    /// without building the literals. Where `shape` does not fit the program, the part it
    /// does not fit is a leaf.
    pub fn eval_leaves<'a>(
        &'a self,
        shape: &Literal,
        act: &Activation<'a>,
        budget: &mut Budget,
    ) -> Result<Vec<Value<'a>>, EvalError> {
        let mut evaluation = Evaluation::new(act, budget, self.slots);
        let mut leaves = Vec::with_capacity(shape.leaves());
        evaluation.leaves(&self.root, shape, &mut leaves)?;
        Ok(leaves)
    }

    /// The value evaluating the whole program gives, built from the `leaves`
    /// [`eval_leaves`](Self::eval_leaves) gave for `shape`: its literals around them, as an
    /// evaluation builds them. `None` when they are not the leaves of `shape`.
    pub fn assemble<'a>(&'a self, shape: &Literal, leaves: Vec<Value<'a>>) -> Option<Value<'a>> {
        let mut leaves = leaves.into_iter();
        let value = literal::assemble(&self.root, shape, &mut leaves)?;
        leaves.next().is_none().then_some(value)
    }

    /// Evaluates and also returns the cost this evaluation was charged (excluding composited
    /// variables it evaluated, which are charged to `budget` separately).
    pub fn eval_with_cost<'a>(
        &'a self,
        act: &Activation<'a>,
        budget: &mut Budget,
    ) -> (Result<Value<'a>, EvalError>, u64) {
        let mut evaluation = Evaluation::new(act, budget, self.slots);
        let r = evaluation.eval(&self.root);
        (r, evaluation.cost())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_knows_the_variables_it_reads() {
        let env = Env::kubernetes()
            .variable("object", Type::Dyn)
            .variable("oldObject", Type::Dyn)
            .variable("request", Type::Dyn)
            .build();
        let program = |src: &str| env.compile(src).expect("compiles");
        let p = program("object.spec.replicas > 1 && [1].all(oldObject, oldObject > 0)");
        assert!(p.reads("object"));
        // A comprehension variable that shadows a declared one is not a read of it.
        assert!(!p.reads("oldObject"));
        assert!(!p.reads("request"));
        let p = program("has(oldObject.spec) ? oldObject.spec == object.spec : request.uid != ''");
        assert!(p.reads("object") && p.reads("oldObject") && p.reads("request"));
        // Unchecked programs record their reads too.
        let p = env
            .compile_unchecked("oldObject == null")
            .expect("compiles");
        assert!(p.reads("oldObject") && !p.reads("object"));
        assert!(p.reads_activation());
        assert!(!program("[1, 2].map(x, x * 2)").reads_activation());
    }

    #[test]
    fn new_expressions_leave_out_libraries_newer_than_the_compatibility_version() {
        let compile = |expressions, src: &str| {
            Env::kubernetes_for(expressions)
                .build()
                .compile(src)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let at = |minor| Expressions::New(Compatibility::new(minor).expect("in range"));
        // ext.Lists v3 arrived in 1.34; semver in 1.33.
        let lists = "[2, 1].sort() == [1, 2]";
        assert_eq!(compile(at(34), lists), Ok(()));
        assert_eq!(compile(Expressions::Stored, lists), Ok(()));
        let err = compile(at(33), lists).expect_err("no lists library at 1.33");
        assert!(err.contains("undeclared reference to 'sort'"), "{err}");
        assert_eq!(compile(at(33), "isSemver('1.2.3')"), Ok(()));
        assert_eq!(compile(at(35), lists), Ok(()));
    }

    /// Each library and macro set from the oldest compatibility version (1.29) on, rejected
    /// one version before it arrived with kube-apiserver 1.36's message (its base environment
    /// at that compatibility version gives exactly these issues), accepted from then on.
    #[test]
    fn every_compatibility_version_rejects_what_came_later_as_upstream_does() {
        let compile = |minor, src: &str| {
            Env::kubernetes_for(Expressions::New(
                Compatibility::new(minor).expect("in range"),
            ))
            .build()
            .compile(src)
            .map(|_| ())
            .map_err(|e| e.to_string())
        };
        // (name, code-point column from 0) of each undeclared reference.
        let undeclared = |src: &str, refs: &[(&str, usize)]| {
            refs.iter()
                .map(|(name, col)| {
                    format!(
                        "ERROR: <input>:1:{}: undeclared reference to '{name}' (in container '')\n | {src}\n | {}^",
                        col + 1,
                        ".".repeat(*col)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        // (the version before the arrival, the expression, its undeclared references)
        type Case<'a> = (u32, &'a str, &'a [(&'a str, usize)]);
        let cases: [Case; 5] = [
            (
                29,
                "ip('1.2.3.4').family() == 4",
                &[("ip", 2), ("family", 20)],
            ),
            (
                30,
                "format.dns1123Label().validate('a').hasValue()",
                &[("format", 0), ("dns1123Label", 19), ("validate", 30)],
            ),
            (
                31,
                "[1].all(i, v, v > 0)",
                &[("all", 7), ("i", 8), ("v", 11), ("v", 14)],
            ),
            (32, "isSemver('1.2.3')", &[("isSemver", 8)]),
            (
                33,
                "[2, 1].sortBy(x, x) == [1, 2]",
                &[("sortBy", 13), ("x", 14), ("x", 17)],
            ),
        ];
        for (before, src, refs) in cases {
            assert_eq!(
                compile(before, src),
                Err(undeclared(src, refs)),
                "1.{before}"
            );
            assert_eq!(compile(before + 1, src), Ok(()), "1.{}", before + 1);
            assert_eq!(compile(Compatibility::MAX.minor(), src), Ok(()));
        }
        // Field and label selectors of the authorizer: 1.36 has them at every version.
        let authz = Env::kubernetes_for(Expressions::New(Compatibility::MIN))
            .variable(
                crate::libs::authz::AUTHORIZER_VARIABLE,
                Type::opaque("kubernetes.authorization.Authorizer"),
            )
            .build();
        assert!(
            authz
                .compile("authorizer.group('').resource('pods').fieldSelector('a=b').check('get').allowed()")
                .is_ok()
        );
    }

    #[test]
    fn selecting_a_field_of_a_library_type_fails_as_a_provider_lookup() {
        let env = Env::kubernetes().build();
        let err = |src: &str| env.check(src).expect_err("does not check").to_string();
        assert_eq!(
            err("quantity('1').value"),
            "ERROR: <input>:1:14: unexpected failed resolution of 'kubernetes.Quantity'\n | quantity('1').value\n | .............^"
        );
        assert!(err("ip('1.2.3.4').family").contains("unexpected failed resolution of 'net.IP'"));
        // A type that is not an object type keeps cel-go's field selection error.
        assert!(err("'s'.x").contains("type 'string' does not support field selection"));
    }

    fn deployment() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 3,
                "template": {"spec": {"containers": [
                    {"name": "app", "image": "nginx:1.25"},
                    {"name": "sidecar", "image": "envoy:v1"}
                ]}}
            }
        })
    }

    fn run(src: &str) -> Result<Value<'static>, String> {
        let env = Env::kubernetes().variable("object", Type::Dyn).build();
        let p = env.compile(src).map_err(|e| e.to_string())?;
        let obj = deployment();
        let mut act = Activation::new();
        act.bind_json("object", &obj);
        let mut budget = Budget::default();
        let v = p.eval(&act, &mut budget).map_err(|e| e.to_string())?;
        // Detach from the borrowed JSON for the test's convenience.
        Ok(match v {
            Value::Bool(b) => Value::Bool(b),
            Value::Int(i) => Value::Int(i),
            Value::String(s) => Value::string(s.to_string()),
            Value::List(l) => Value::List(crate::value::List::from_vec(
                l.iter()
                    .map(|x| match x {
                        Value::String(s) => Value::string(s.to_string()),
                        Value::Int(i) => Value::Int(i),
                        Value::Bool(b) => Value::Bool(b),
                        _ => Value::Null,
                    })
                    .collect(),
            )),
            _ => Value::Null,
        })
    }

    #[test]
    fn the_slice_works() {
        assert_eq!(run("object.spec.replicas <= 5"), Ok(Value::Bool(true)));
        assert_eq!(run("object.spec.replicas > 5"), Ok(Value::Bool(false)));
        assert_eq!(run("object.spec.replicas + 1"), Ok(Value::Int(4)));
        assert_eq!(
            run(
                "object.spec.template.spec.containers.all(c, c.image.contains(':') && size(c.name) < 64)"
            ),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("object.metadata.labels.app == 'web'"),
            Ok(Value::Bool(true))
        );
        assert_eq!(run("has(object.spec.paused)"), Ok(Value::Bool(false)));
        assert_eq!(
            run("'app' in object.metadata.labels"),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("object.spec.template.spec.containers.map(c, c.name)"),
            Ok(Value::List(crate::value::List::from_vec(vec![
                Value::string("app"),
                Value::string("sidecar")
            ])))
        );
        assert_eq!(
            run("object.spec.template.spec.containers.exists_one(c, c.name.startsWith('side'))"),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("object.spec.replicas > 1 ? 'many' : 'one'"),
            Ok(Value::string("many"))
        );
        assert_eq!(run("[1, 2, 3].filter(x, x > 1).size()"), Ok(Value::Int(2)));
        assert_eq!(run("{'a': 1}['a']"), Ok(Value::Int(1)));
    }

    #[test]
    fn runtime_errors_are_worded_like_cel_go() {
        assert_eq!(
            run("object.spec.missing == 1"),
            Err("no such key: missing".into())
        );
        assert_eq!(
            run("1 / (object.spec.replicas - 3)"),
            Err("division by zero".into())
        );
        assert_eq!(
            run("9223372036854775807 + object.spec.replicas"),
            Err("integer overflow".into())
        );
        // Errors are absorbed by && and || when the other side decides.
        assert_eq!(
            run("object.spec.missing == 1 || true"),
            Ok(Value::Bool(true))
        );
        assert_eq!(
            run("false && object.spec.missing == 1"),
            Ok(Value::Bool(false))
        );
        assert_eq!(
            run("object.spec.missing == 1 && false"),
            Ok(Value::Bool(false))
        );
    }

    #[test]
    fn compile_errors_are_worded_like_cel_go() {
        let env = Env::kubernetes().variable("object", Type::Dyn).build();
        let e = env
            .compile("object.spec.replicas <")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.starts_with("ERROR: <input>:1:23: Syntax error:"), "{e}");
        let e = env
            .compile("x + 1")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            e,
            "ERROR: <input>:1:1: undeclared reference to 'x' (in container '')\n | x + 1\n | ^"
        );
        let e = env
            .compile("1 + 'a'")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert_eq!(
            e,
            "ERROR: <input>:1:3: found no matching overload for '_+_' applied to '(int, string)'\n | 1 + 'a'\n | ..^"
        );
        let e = env
            .compile("[1, 'a']")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("expected type 'int' but found 'string'"), "{e}");
    }

    #[test]
    fn output_types() {
        let env = Env::kubernetes().variable("object", Type::Dyn).build();
        let t = |s: &str| {
            env.compile(s)
                .map(|p| p.output_type().to_string())
                .unwrap_or_default()
        };
        assert_eq!(t("object.spec.replicas <= 5"), "bool");
        assert_eq!(t("object.spec"), "dyn");
        assert_eq!(t("['a'].map(x, x + 'b')"), "list(string)");
        assert_eq!(t("{'a': 1}"), "map(string, int)");
        assert_eq!(t("null"), "null_type");
        assert_eq!(t("[]"), "list(dyn)");
    }

    #[test]
    fn programs_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Program>();
        assert_send_sync::<Env>();
    }
}
