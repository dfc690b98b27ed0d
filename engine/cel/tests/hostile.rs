//! Hostile expressions: every one must end in a cost, budget or interruption error (or a compile
//! error), never hang, exhaust memory or overflow the stack.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use celgate_cel::{Activation, Budget, Env, EvalError, Type, Value};

fn env() -> Env {
    Env::kubernetes().variable("object", Type::Dyn).build()
}

fn eval_with(src: &str, object: &serde_json::Value, mut budget: Budget) -> Result<bool, EvalError> {
    let program = match env().compile(src) {
        Ok(p) => p,
        Err(e) => panic!("{src}: {e}"),
    };
    let mut act = Activation::new();
    act.bind_json("object", object);
    program
        .eval(&act, &mut budget)
        .map(|v| matches!(v, Value::Bool(true)))
}

fn kubernetes_budget() -> Budget {
    Budget::new(celgate_cel::PER_CALL_LIMIT, celgate_cel::RUNTIME_BUDGET)
}

fn hundred() -> String {
    let items: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    format!("[{}]", items.join(", "))
}

#[test]
fn nested_comprehensions_stop_at_the_cost_limit() {
    let l = hundred();
    let src = format!("{l}.all(x, {l}.all(y, {l}.all(z, x + y + z >= 0)))");
    let program = match env().compile(&src) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let mut budget = kubernetes_budget();
    let (r, cost) = program.eval_with_cost(&Activation::new(), &mut budget);
    assert_eq!(r, Err(EvalError::CostLimitExceeded));
    // Evaluation stopped at the charge that crossed the limit (one step of the innermost
    // loop costs a few units), not after the million iterations the expression asks for.
    let limit = celgate_cel::PER_CALL_LIMIT;
    assert!(cost > limit && cost <= limit + 10, "charged {cost}");
}

#[test]
fn growing_lists_hit_the_cost_limit() {
    let l = hundred();
    let src = format!("{l}.map(a, {l}.map(b, {l}.map(c, [a, b, c]))).size() > 0");
    assert_eq!(
        eval_with(&src, &serde_json::Value::Null, kubernetes_budget()),
        Err(EvalError::CostLimitExceeded)
    );
}

#[test]
fn string_doubling_hits_the_cost_limit_before_allocating_much() {
    // Each variable doubles the previous one: 2^40 bytes if nothing stopped it.
    let env = env();
    let mut defs = vec![("v0".to_string(), "'0123456789abcdef'".to_string())];
    for i in 1..=40 {
        defs.push((
            format!("v{i}"),
            format!("variables.v{} + variables.v{}", i - 1, i - 1),
        ));
    }
    let vars = env.compile_variables(defs.iter().map(|(n, s)| (n.as_str(), s.as_str())));
    let program = match vars.env().compile("size(variables.v40) > 0") {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let mut act = Activation::new();
    act.bind_variables(&vars);
    let mut budget = kubernetes_budget();
    // The first variable past the per-call limit fails (v20, 16 MiB); as in Kubernetes, each
    // later one fails with the error of the one it reads.
    let err = program
        .eval(&act, &mut budget)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.starts_with("composited variable \"v40\" fails to evaluate: composited variable \"v39\"")
            && err.ends_with(
                "composited variable \"v20\" fails to evaluate: operation cancelled: actual cost limit exceeded"
            ),
        "{err}"
    );
}

#[test]
fn the_shared_budget_runs_out_across_expressions() {
    let l = hundred();
    let src = format!("{l}.all(x, {l}.all(y, x + y >= 0))");
    let program = match env().compile(&src) {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let act = Activation::new();
    let mut budget = Budget::new(celgate_cel::PER_CALL_LIMIT, 200_000);
    let mut last = Ok(Value::Null);
    for _ in 0..10 {
        last = program.eval(&act, &mut budget);
        if last.is_err() {
            break;
        }
    }
    assert_eq!(last.err(), Some(EvalError::BudgetExhausted));
    assert_eq!(budget.remaining(), 0);
}

#[test]
fn a_cancel_flag_interrupts_loops() {
    let items: Vec<serde_json::Value> = (0..200_000).map(serde_json::Value::from).collect();
    let object = serde_json::json!({ "items": items });
    let cancel = Arc::new(AtomicBool::new(false));
    let budget = Budget::new(u64::MAX, u64::MAX).with_cancel_flag(cancel.clone());
    assert_eq!(
        eval_with("object.items.all(x, x >= 0)", &object, budget.clone()),
        Ok(true)
    );
    cancel.store(true, Ordering::Relaxed);
    assert_eq!(
        eval_with("object.items.all(x, x >= 0)", &object, budget),
        Err(EvalError::Interrupted)
    );
}

#[test]
fn deadlines_interrupt_loops() {
    let items: Vec<serde_json::Value> = (0..200_000).map(serde_json::Value::from).collect();
    let object = serde_json::json!({ "items": items });
    let budget = Budget::new(u64::MAX, u64::MAX).with_deadline(Instant::now());
    let r = eval_with("object.items.all(x, x >= 0)", &object, budget);
    assert_eq!(r, Err(EvalError::Interrupted));
}

#[test]
fn deep_nesting_is_rejected_or_evaluated_without_overflow() {
    // Run on a default-sized (2 MiB) thread, as tokio workers and tests do.
    let handle = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
        let env = env();
        for depth in [10usize, 50, 100, 200, 240] {
            let src = format!("{}1{}", "(".repeat(depth), ")".repeat(depth));
            if let Ok(p) = env.compile(&src) {
                let mut budget = Budget::default();
                let _ = p.eval(&Activation::new(), &mut budget);
            }
            let src = format!("{}true{}", "!(".repeat(depth), ")".repeat(depth));
            if let Ok(p) = env.compile(&src) {
                let mut budget = Budget::default();
                let _ = p.eval(&Activation::new(), &mut budget);
            }
            let src = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            if let Ok(p) = env.compile(&src) {
                let mut budget = Budget::default();
                let _ = p.eval(&Activation::new(), &mut budget);
            }
            let src = format!("object{}", ".a".repeat(depth));
            if let Ok(p) = env.compile(&src) {
                let mut budget = Budget::default();
                let mut act = Activation::new();
                let v = serde_json::Value::Null;
                act.bind_json("object", &v);
                let _ = p.eval(&act, &mut budget);
            }
        }
        for depth in [300usize, 5_000, 40_000] {
            let src = format!("{}1{}", "(".repeat(depth), ")".repeat(depth));
            assert!(env.compile(&src).is_err());
            let src = format!("a{}", ".b".repeat(depth));
            assert!(env.compile(&src).is_err());
        }
    });
    match handle {
        Ok(h) => assert!(h.join().is_ok(), "deep nesting crashed the thread"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn huge_literals_are_bounded() {
    // Over cel-go's 100,000 code point limit: a compile error.
    let src = format!("'{}' == ''", "a".repeat(100_001));
    assert!(env().compile(&src).is_err());
    // Just under it: a big but bounded evaluation.
    let items: Vec<String> = (0..15_000).map(|i| i.to_string()).collect();
    let src = format!("[{}].exists(x, x == 14999)", items.join(","));
    assert_eq!(
        eval_with(&src, &serde_json::Value::Null, kubernetes_budget()),
        Ok(true)
    );
}

/// The error of `function` passing celgate's bound on what `replace` and `format` build.
fn grown(function: &str) -> Result<bool, EvalError> {
    Err(EvalError::StringGrowthExceeded {
        function: function.into(),
        limit: celgate_cel::STRING_GROWTH_LIMIT,
    })
}

#[test]
fn replace_and_format_stop_at_celgates_bound_on_what_they_build() {
    // Kubernetes charges `replace` for its input alone: a 1 MB string with a 1,000-character
    // replacement would cost 200,000 and build a gigabyte. One call past the bound fails
    // before building anything.
    let object = serde_json::json!({"s": "a".repeat(1_000_000), "r": "b".repeat(1_000)});
    assert_eq!(
        eval_with(
            "object.s.replace('a', object.r).size() > 0",
            &object,
            kubernetes_budget()
        ),
        grown("replace")
    );
    assert_eq!(
        EvalError::StringGrowthExceeded {
            function: "replace".into(),
            limit: celgate_cel::STRING_GROWTH_LIMIT,
        }
        .to_string(),
        "operation cancelled: replace would grow strings by more than 12582912 bytes, celgate's bound on what replace and format build"
    );
    // Within the bound, as upstream (the first 5,000 only: 5 MB).
    assert_eq!(
        eval_with(
            "object.s.replace('a', object.r, 5000).size() == 995000 + 5000 * 1000",
            &object,
            kubernetes_budget()
        ),
        Ok(true)
    );
    // Many calls, each within the bound, are bounded together: 1,000 characters to 1 MB
    // for 200 each.
    let small = serde_json::json!({"s": "a".repeat(1_000), "r": "b".repeat(1_000)});
    assert_eq!(
        eval_with(
            "[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12].map(i, object.s.replace('a', object.r)).size() > 0",
            &small,
            kubernetes_budget()
        ),
        grown("replace")
    );
    // `format` is charged for its format string alone: a list of the same megabyte string
    // formatted once.
    let refs = ["object.s"; 13].join(", ");
    assert_eq!(
        eval_with(
            &format!("'%s'.format([[{refs}]]).size() > 0"),
            &object,
            kubernetes_budget()
        ),
        grown("format")
    );
    let refs = ["object.s"; 10].join(", ");
    assert_eq!(
        eval_with(
            &format!("'%s'.format([[{refs}]]).size() > 0"),
            &object,
            kubernetes_budget()
        ),
        Ok(true)
    );
}
