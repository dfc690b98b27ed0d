//! Differential test against cel-go: runs the generated corpus through celgate-cel and compares
//! each case with cel-go's result (`engine/cel/differential`, `make differential`): checker
//! verdict and message, output type, value or error text (Kubernetes puts the text into its
//! messages), and actual cost. Prints `differential: N same, N different`, writes a JSON report
//! listing every difference, and ratchets against `differential-baseline.json`: it fails if a
//! case the baseline lists as same differs now, is excluded now or left the corpus.
//! Cases on which cel-go itself crashed are excluded (listed in the report's `excluded`, with
//! cel-go's panic, and counted on a summary line of their own): a panic, or a Go runtime panic
//! cel-go recovered as an internal error when celgate gives the same error.
//!
//! It needs the cel-go oracle, so it is ignored by a plain `cargo test`; `make differential`
//! builds the oracle and runs it with `--ignored`. Run without its variables, it fails.
//!
//! Environment:
//! - `CEL_DIFFERENTIAL_CORPUS`: the corpus (`differential gen`), required.
//! - `CEL_DIFFERENTIAL_ORACLE`: cel-go's results (`differential oracle`), required.
//! - `CEL_DIFFERENTIAL_REPORT`: where to write the report (default: cargo's test tmp dir).
//! - `CEL_DIFFERENTIAL_UPDATE=1`: rewrite the baseline from this run.

#[path = "support/corpus.rs"]
mod corpus;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use celgate_cel::{Budget, PER_CALL_LIMIT, Value};
use corpus::{Case, Corpus, read_json};
use serde_json::{Value as Json, json};

/// What one engine did with one case, in the oracle's JSON shape.
#[derive(Debug, Default)]
struct Outcome {
    compile_error: Option<String>,
    ty: Option<String>,
    value: Option<Json>,
    error: Option<String>,
    cost: Option<u64>,
}

impl Outcome {
    fn from_oracle(r: &Json) -> Self {
        let s = |k: &str| r.get(k).and_then(Json::as_str).map(str::to_string);
        Outcome {
            compile_error: s("compile_error"),
            ty: s("type").filter(|t| !t.is_empty()),
            value: r.get("value").map(normalize),
            error: s("error"),
            cost: r.get("cost").and_then(Json::as_u64),
        }
    }

    fn to_json(&self) -> Json {
        let mut m = serde_json::Map::new();
        if let Some(e) = &self.compile_error {
            m.insert("compile_error".into(), json!(e));
        }
        if let Some(t) = &self.ty {
            m.insert("type".into(), json!(t));
        }
        if let Some(v) = &self.value {
            m.insert("value".into(), v.clone());
        }
        if let Some(e) = &self.error {
            m.insert("error".into(), json!(e));
        }
        if let Some(c) = self.cost {
            m.insert("cost".into(), json!(c));
        }
        Json::Object(m)
    }
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name).map(PathBuf::from)
}

#[test]
#[ignore = "needs the cel-go oracle: run make differential"]
fn differential_against_cel_go() {
    let (Some(corpus_path), Some(oracle_path)) = (
        env_path("CEL_DIFFERENTIAL_CORPUS"),
        env_path("CEL_DIFFERENTIAL_ORACLE"),
    ) else {
        panic!(
            "the differential test needs CEL_DIFFERENTIAL_CORPUS and CEL_DIFFERENTIAL_ORACLE \
             (the corpus and cel-go's results): run `make differential`"
        );
    };
    let corpus = Corpus::read(&corpus_path).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        !corpus.cases.is_empty(),
        "{} has no cases",
        corpus_path.display()
    );
    let oracle = read_json(&oracle_path).unwrap_or_else(|e| panic!("{e}"));
    let Some(results) = oracle["results"].as_array() else {
        panic!("{}: no `results` list", oracle_path.display());
    };
    let mut go: HashMap<&str, &Json> = HashMap::with_capacity(results.len());
    for r in results {
        let Some(id) = r["id"].as_str() else {
            panic!("{}: a result without an id: {r}", oracle_path.display());
        };
        go.insert(id, r);
    }

    // A thread with the main thread's usual stack, so deep expressions behave as they would
    // on a server thread rather than on the test harness' smaller one.
    let (report, same_ids) = std::thread::scope(|s| {
        std::thread::Builder::new()
            .stack_size(8 << 20)
            .spawn_scoped(s, || run(&corpus, &go))
            .and_then(|h| h.join().map_err(|_| std::io::Error::other("panicked")))
            .unwrap_or_else(|e| panic!("differential run: {e}"))
    });

    let report_path = env_path("CEL_DIFFERENTIAL_REPORT").unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("differential-report.json")
    });
    let text = serde_json::to_string_pretty(&report).unwrap_or_default() + "\n";
    if let Err(e) = std::fs::write(&report_path, text) {
        panic!("cannot write {}: {e}", report_path.display());
    }
    println!("report: {}", report_path.display());
    let corpus_ids: BTreeSet<&str> = corpus.cases.iter().map(|c| c.id.as_str()).collect();
    ratchet(&same_ids, &corpus_ids, &report);
}

/// Runs every case; returns the report and the ids of the cases that were the same.
fn run(corpus: &Corpus, go: &HashMap<&str, &Json>) -> (Json, BTreeSet<String>) {
    let env = corpus.env();
    let mutation_env = corpus.mutation_env();
    let mut same_ids = BTreeSet::new();
    let mut differences = Vec::new();
    let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_group: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut excluded = Vec::new();
    // Silence the default hook while catching engine panics; they are reported as results.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for case in &corpus.cases {
        let Some(theirs) = go.get(case.id.as_str()) else {
            panic!("cel-go has no result for {}", case.id);
        };
        if let Some(panic) = theirs.get("panic").and_then(Json::as_str) {
            excluded.push(json!({
                "id": case.id,
                "group": case.group,
                "expr": case.expr,
                "reason": format!("cel-go crashed: {panic}"),
            }));
            continue;
        }
        let theirs = Outcome::from_oracle(theirs);
        let env = if case.mutation { &mutation_env } else { &env };
        let ours = evaluate(env, corpus, case);
        // cel-go recovers a Go runtime panic inside evaluation as an internal error; the cost it
        // counted up to the panic says nothing. When celgate gives the same error, the case is
        // a crash of cel-go's, not a difference.
        if let (Some(go_err), Some(our_err)) = (&theirs.error, &ours.error)
            && go_err.starts_with("internal error: runtime error:")
            && go_err == our_err
        {
            excluded.push(json!({
                "id": case.id,
                "group": case.group,
                "expr": case.expr,
                "reason": format!("cel-go crashed (recovered): {go_err}; celgate gives the same error, costs after a crash are not compared"),
            }));
            continue;
        }
        let kinds = compare(&ours, &theirs, case.unordered);
        let group = by_group.entry(case.group.clone()).or_default();
        if kinds.is_empty() {
            group.0 += 1;
            same_ids.insert(case.id.clone());
            continue;
        }
        group.1 += 1;
        for k in &kinds {
            *by_kind.entry(k).or_default() += 1;
        }
        differences.push(json!({
            "id": case.id,
            "group": case.group,
            "expr": case.expr,
            "bind": case.bind,
            "bench": case.bench,
            "kinds": kinds,
            "celgate": ours.to_json(),
            "cel_go": theirs.to_json(),
        }));
    }
    std::panic::set_hook(hook);
    let same = same_ids.len();
    println!("differential: {same} same, {} different", differences.len());
    for (k, n) in &by_kind {
        println!("  {k}: {n}");
    }
    println!(
        "excluded: {} cases cel-go crashed on (see the report's `excluded`)",
        excluded.len()
    );
    let groups: BTreeMap<String, Json> = by_group
        .into_iter()
        .map(|(g, (s, d))| (g, json!({"same": s, "different": d})))
        .collect();
    let report = json!({
        "same": same,
        "different": differences.len(),
        "by_kind": by_kind,
        "by_group": groups,
        "differences": differences,
        "excluded": excluded,
    });
    (report, same_ids)
}

/// Compiles and evaluates `case` with celgate-cel.
fn evaluate(env: &celgate_cel::Env, corpus: &Corpus, case: &Case) -> Outcome {
    let r = catch_unwind(AssertUnwindSafe(|| {
        let program = match env.compile(&case.expr) {
            Ok(p) => p,
            Err(e) => {
                // The oracle prefixes cel-go's `Program()` errors with `program: `.
                let text = if e.is_program() {
                    format!("program: {e}")
                } else {
                    e.to_string()
                };
                return Outcome {
                    compile_error: Some(text),
                    ..Outcome::default()
                };
            }
        };
        let act = corpus.activation(case);
        // The per-call cost limit bounds every evaluation; no deadline, so the outcome never
        // depends on the machine's speed.
        let mut budget = Budget::new(PER_CALL_LIMIT, u64::MAX);
        let (result, cost) = program.eval_with_cost(&act, &mut budget);
        let mut out = Outcome {
            // cel-go's nil type (an untyped field) prints empty, which the oracle omits.
            ty: Some(program.output_type().to_string()).filter(|t| !t.is_empty()),
            cost: Some(cost),
            ..Outcome::default()
        };
        match result {
            Ok(v) => out.value = Some(encode(&v)),
            Err(e) => out.error = Some(e.to_string()),
        }
        out
    }));
    r.unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        Outcome {
            error: Some(format!("panic: {msg}")),
            ..Outcome::default()
        }
    })
}

/// The kinds of difference between two outcomes (empty: the same). `unordered`: lists compare
/// as multisets and cost is not compared.
fn compare(ours: &Outcome, theirs: &Outcome, unordered: bool) -> Vec<&'static str> {
    let mut kinds = Vec::new();
    match (&ours.compile_error, &theirs.compile_error) {
        (Some(a), Some(b)) => {
            if a != b {
                kinds.push("compile-message");
            }
            return kinds;
        }
        (Some(_), None) => {
            kinds.push("compile-rejected-by-celgate-only");
            return kinds;
        }
        (None, Some(_)) => {
            kinds.push("compile-rejected-by-cel-go-only");
            return kinds;
        }
        (None, None) => {}
    }
    if ours.ty != theirs.ty {
        kinds.push("output-type");
    }
    match (&ours.error, &theirs.error) {
        (None, None) => {
            let differ = if unordered {
                ours.value.as_ref().map(sort_lists) != theirs.value.as_ref().map(sort_lists)
            } else {
                ours.value != theirs.value
            };
            if differ {
                kinds.push("value");
            }
        }
        (Some(a), Some(b)) => {
            if error_class(a) != error_class(b) {
                kinds.push("error-class");
            } else if a != b {
                kinds.push("error-text");
            }
        }
        (Some(_), None) => kinds.push("error-in-celgate-only"),
        (None, Some(_)) => kinds.push("error-in-cel-go-only"),
    }
    if ours.cost != theirs.cost && !unordered {
        kinds.push("cost");
    }
    kinds
}

/// `v` with every list's elements sorted (by their JSON text).
fn sort_lists(v: &Json) -> Json {
    match v {
        Json::Array(a) => Json::Array(a.iter().map(sort_lists).collect()),
        Json::Object(o) => Json::Object(
            o.iter()
                .map(|(k, x)| {
                    let mut x = sort_lists(x);
                    if k == "list"
                        && let Json::Array(items) = &mut x
                    {
                        items.sort_by_cached_key(Json::to_string);
                    }
                    (k.clone(), x)
                })
                .collect(),
        ),
        _ => v.clone(),
    }
}

/// An error's class: its text up to the first `:` (`no such key: x` → `no such key`).
fn error_class(msg: &str) -> &str {
    msg.split(':').next().unwrap_or(msg).trim()
}

/// How deep [`encode`] descends (the oracle's `maxDepth`).
const MAX_DEPTH: usize = 40;

/// A celgate value in the oracle's tagged JSON form.
fn encode(v: &Value<'_>) -> Json {
    encode_at(v, 0)
}

fn encode_at(v: &Value<'_>, depth: usize) -> Json {
    if depth >= MAX_DEPTH {
        return json!({"depth": MAX_DEPTH});
    }
    let encode = |v: &Value<'_>| encode_at(v, depth + 1);
    match v {
        Value::Null => json!({"null": null}),
        Value::Bool(b) => json!({"bool": b}),
        Value::Int(i) => json!({"int": i}),
        Value::Uint(u) => json!({"uint": u}),
        Value::Double(d) => json!({"double": double(*d)}),
        Value::String(s) => json!({"string": &**s}),
        Value::Bytes(b) => json!({"bytes": base64(b)}),
        Value::List(l) => json!({"list": l.iter().map(|x| encode(&x)).collect::<Vec<_>>()}),
        Value::Map(m) => {
            let mut entries: Vec<(String, Json)> = m
                .entries()
                .iter()
                .map(|(k, v)| {
                    let k = encode(k);
                    (k.to_string(), json!([k, encode(v)]))
                })
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            json!({"map": entries.into_iter().map(|(_, e)| e).collect::<Vec<_>>()})
        }
        Value::Timestamp(t) => json!({"timestamp": [t.timestamp(), t.timestamp_subsec_nanos()]}),
        Value::Duration(d) => json!({"duration": d.num_nanoseconds()}),
        Value::Type(t) => json!({"type": t.to_string()}),
        Value::Optional(o) => json!({"optional": o.as_deref().map(encode)}),
        Value::Opaque(o) => json!({"opaque": o.type_name()}),
        Value::Struct(s) => json!({"opaque": s.type_name()}),
    }
}

/// The oracle's value JSON in the form [`encode`] produces: doubles spelled by Rust, map
/// entries sorted, opaque values compared by type only (celgate exposes no representation).
fn normalize(v: &Json) -> Json {
    let Some((tag, inner)) = v.as_object().and_then(|o| o.iter().next()) else {
        return v.clone();
    };
    match tag.as_str() {
        "double" => {
            let s = inner.as_str().unwrap_or_default();
            let d = match s {
                "NaN" => f64::NAN,
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                _ => s.parse().unwrap_or(f64::NAN),
            };
            json!({"double": double(d)})
        }
        "list" => {
            json!({"list": inner.as_array().map(|a| a.iter().map(normalize).collect::<Vec<_>>())})
        }
        "map" => {
            let mut entries: Vec<(String, Json)> = inner
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| {
                            let k = normalize(&e[0]);
                            (k.to_string(), json!([k, normalize(&e[1])]))
                        })
                        .collect()
                })
                .unwrap_or_default();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            json!({"map": entries.into_iter().map(|(_, e)| e).collect::<Vec<_>>()})
        }
        "optional" if !inner.is_null() => json!({"optional": normalize(inner)}),
        "opaque" => json!({"opaque": inner}),
        _ => v.clone(),
    }
}

fn double(d: f64) -> String {
    if d.is_nan() {
        "NaN".into()
    } else {
        format!("{d:?}")
    }
}

fn base64(b: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for chunk in b.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &x)| n | (u32::from(x) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Fails if a case the baseline lists as same is not the same now (it differs, is excluded or
/// left the corpus) or if the baseline is unreadable; or rewrites the baseline.
fn ratchet(same_ids: &BTreeSet<String>, corpus_ids: &BTreeSet<&str>, report: &Json) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("differential-baseline.json");
    if std::env::var("CEL_DIFFERENTIAL_UPDATE").is_ok_and(|v| v == "1") {
        let baseline = json!({
            "same": same_ids.len(),
            "different": report["different"],
            "same_ids": same_ids,
        });
        let text = serde_json::to_string_pretty(&baseline).unwrap_or_default() + "\n";
        if let Err(e) = std::fs::write(&path, text) {
            panic!("cannot write {}: {e}", path.display());
        }
        println!("baseline updated: {}", path.display());
        return;
    }
    let baseline = read_json(&path)
        .unwrap_or_else(|e| panic!("{e} (run with CEL_DIFFERENTIAL_UPDATE=1 to create it)"));
    let was = baseline_same_ids(&baseline).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (rewrite it with CEL_DIFFERENTIAL_UPDATE=1)",
            path.display()
        )
    });
    let excluded: BTreeSet<&str> = ids(&report["excluded"]);
    let differ: BTreeSet<&str> = ids(&report["differences"]);
    let mut lost = Vec::new();
    for id in &was {
        let why = if differ.contains(id) {
            "differs from cel-go"
        } else if excluded.contains(id) {
            "is excluded (cel-go crashed)"
        } else if !corpus_ids.contains(id) {
            "left the corpus"
        } else if same_ids.contains(*id) {
            continue;
        } else {
            "has no result"
        };
        lost.push(format!("{id} {why}"));
    }
    assert!(
        lost.is_empty(),
        "{} cases the baseline lists as the same as cel-go are not now (see the report; \
         if a case left the corpus on purpose, rewrite the baseline with \
         CEL_DIFFERENTIAL_UPDATE=1):\n  {}",
        lost.len(),
        lost.join("\n  ")
    );
    if same_ids.len() > was.len() {
        println!(
            "{} more cases same than the baseline: update it with CEL_DIFFERENTIAL_UPDATE=1",
            same_ids.len() - was.len()
        );
    }
}

/// The ids of the cases `baseline` lists as same; `Err` when a key is missing, the list is
/// empty or its count disagrees with `same`.
fn baseline_same_ids(baseline: &Json) -> Result<BTreeSet<&str>, String> {
    let (Some(same), Some(_), Some(list)) = (
        baseline["same"].as_u64(),
        baseline["different"].as_u64(),
        baseline["same_ids"].as_array(),
    ) else {
        return Err("expected the keys `same`, `different` and `same_ids`".into());
    };
    let mut ids = BTreeSet::new();
    for v in list {
        let Some(id) = v.as_str() else {
            return Err(format!("`same_ids` holds a non-string: {v}"));
        };
        ids.insert(id);
    }
    if ids.is_empty() {
        return Err("`same_ids` is empty".into());
    }
    if ids.len() as u64 != same {
        return Err(format!(
            "`same` is {same} but `same_ids` lists {} distinct cases",
            ids.len()
        ));
    }
    Ok(ids)
}

/// The `id`s of a report list.
fn ids(list: &Json) -> BTreeSet<&str> {
    list.as_array()
        .map(|a| a.iter().filter_map(|d| d["id"].as_str()).collect())
        .unwrap_or_default()
}
