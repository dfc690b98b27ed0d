//! The cel-spec conformance suite (`tests/cel-spec/json`, vendored from `google/cel-spec`; see
//! `tests/cel-spec/README.md`), run against celgate's CEL. Prints `cel-spec: N passed, N failed,
//! N skipped`, writes a JSON report, and fails if a test listed as passing in
//! `conformance-baseline.json` no longer passes or left the suite (a ratchet). When the directory
//! does not exist (a `CEL_SPEC_DIR` that names none) the test says so and skips; a suite or
//! baseline that is present but does not read as expected fails the test.
//!
//! Environment:
//! - `CEL_SPEC_DIR`: the JSON directory (default `tests/cel-spec/json` relative to this crate).
//! - `CEL_CONFORMANCE_REPORT`: where to write the report (default: cargo's test tmp dir).
//! - `CEL_CONFORMANCE_UPDATE=1`: rewrite the baseline from this run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;

use celgate_cel::value::{Key, List, Map, OwnedMap, TypeName};
use celgate_cel::{Activation, Budget, Env, Type, Value};
use serde_json::{Value as Json, json};

/// Files of libraries or features Kubernetes does not use, with the reason.
const SKIPPED_FILES: [(&str, &str); 11] = [
    (
        "proto2.json",
        "protobuf message types (Kubernetes uses none)",
    ),
    (
        "proto2_ext.json",
        "protobuf message types (Kubernetes uses none)",
    ),
    (
        "proto3.json",
        "protobuf message types (Kubernetes uses none)",
    ),
    ("enums.json", "protobuf enums (Kubernetes uses none)"),
    (
        "wrappers.json",
        "protobuf wrapper types (Kubernetes uses none)",
    ),
    (
        "bindings_ext.json",
        "library Kubernetes does not enable: cel.bind (ext.Bindings)",
    ),
    (
        "block_ext.json",
        "library Kubernetes does not enable: cel.block",
    ),
    (
        "encoders_ext.json",
        "library Kubernetes does not enable: base64 (ext.Encoders)",
    ),
    (
        "math_ext.json",
        "library Kubernetes does not enable: math (ext.Math)",
    ),
    (
        "network_ext.json",
        "library Kubernetes does not enable: cel-go's network extension (Kubernetes has its own ip/cidr library)",
    ),
    (
        "unknowns.json",
        "unknown values (partial evaluation), which Kubernetes does not use",
    ),
];

/// Sections of a file that exercise functions Kubernetes does not enable.
const SKIPPED_SECTIONS: [(&str, &str, &str); 3] = [
    (
        "string_ext.json",
        "reverse",
        "library Kubernetes does not enable: strings extension v3 (`reverse`); Kubernetes enables v2",
    ),
    (
        "string_ext.json",
        "format",
        "library Kubernetes does not enable: strings extension v4 `format` semantics; Kubernetes enables v2, whose `format` differs",
    ),
    (
        "string_ext.json",
        "format_errors",
        "library Kubernetes does not enable: strings extension v4 `format` semantics; Kubernetes enables v2, whose `format` differs",
    ),
];

/// Tests where cel-go, and therefore Kubernetes, deviates from the spec; celgate keeps
/// Kubernetes' behaviour. cel-go's own conformance run skips the same tests.
const DEVIATIONS: [(&str, &str); 7] = [
    (
        "fields/qualified_identifier_resolution/map_key_float",
        "cel-go (Kubernetes) accepts any value but bytes as a map key; the spec rejects a double key",
    ),
    (
        "fields/qualified_identifier_resolution/map_value_repeat_key",
        "cel-go (Kubernetes) keeps the last value of a repeated map literal key; the spec expects an error",
    ),
    (
        "fields/qualified_identifier_resolution/map_value_repeat_key_heterogeneous",
        "cel-go (Kubernetes) keys `0` and `0u` apart and finds `0.0` as the int key; the spec expects an error",
    ),
    (
        "string_ext/value_errors/indexof_out_of_range",
        "cel-go v0.26 (Kubernetes 1.36) returns -1 for an offset past the end; the spec expects an error",
    ),
    (
        "string_ext/value_errors/lastindexof_out_of_range",
        "cel-go v0.26 (Kubernetes 1.36) returns -1 for an offset past the end; the spec expects an error",
    ),
    (
        "timestamps/duration_converters/get_milliseconds",
        "cel-go (Kubernetes) returns the whole duration in milliseconds; the spec expects the milliseconds component",
    ),
    (
        "type_deduction/legacy_nullable_types/null_assignable_to_abstract_parameter_candidate",
        "cel-go (Kubernetes) deduces null_type here; the spec expects optional_type(int)",
    ),
];

/// Tests whose expected value was garbled by the textproto-to-JSON conversion: the textproto
/// escape `\?` means `?`, but the JSON kept the backslash. The textproto's meaning is used.
const ERRATA: [(&str, &[u8]); 2] = [
    (
        "parse/bytes_literals/triple_single_quoted_unescaped_punctuation",
        b" ? \" ' ` ",
    ),
    (
        "parse/bytes_literals/triple_double_quoted_unescaped_punctuation",
        b" ? \" ' ` ",
    ),
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pass,
    Fail,
    Skip,
}

struct Record {
    file: String,
    section: String,
    name: String,
    outcome: Outcome,
    reason: String,
}

impl Record {
    fn id(&self) -> String {
        format!(
            "{}/{}/{}",
            self.file.trim_end_matches(".json"),
            self.section,
            self.name
        )
    }
}

fn spec_dir() -> PathBuf {
    match std::env::var_os("CEL_SPEC_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/cel-spec/json"),
    }
}

#[test]
fn cel_spec_conformance() {
    let dir = spec_dir();
    if !dir.exists() {
        println!(
            "cel-spec: SKIPPED, the suite is not at {} (set CEL_SPEC_DIR to its JSON directory)",
            dir.display()
        );
        return;
    }
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect(),
        Err(e) => panic!("cannot read {}: {e}", dir.display()),
    };
    files.sort();
    assert_eq!(
        files.len(),
        30,
        "expected the 30 cel-spec files in {}",
        dir.display()
    );

    let mut records = Vec::new();
    for path in &files {
        let file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => panic!("cannot read {}: {e}", path.display()),
        };
        let doc: Json = match serde_json::from_str(&text) {
            Ok(d) => d,
            Err(e) => panic!("cannot parse {}: {e}", path.display()),
        };
        let file_skip = SKIPPED_FILES
            .iter()
            .find(|(f, _)| *f == file)
            .map(|(_, r)| *r);
        let corrupt = |what: &str| -> ! { panic!("{}: {what}", path.display()) };
        if !doc["name"].is_string() {
            corrupt("not a cel-spec test file (no `name`)");
        }
        // A file may have no sections (cel-spec's `unknowns` has none).
        let sections = match &doc["section"] {
            Json::Null => &Vec::new(),
            Json::Array(s) => s,
            _ => corrupt("`section` is not a list"),
        };
        for section in sections {
            let Some(sname) = section["name"].as_str().map(str::to_string) else {
                corrupt("a section without a name");
            };
            let section_skip = SKIPPED_SECTIONS
                .iter()
                .find(|(f, s, _)| *f == file && *s == sname)
                .map(|(_, _, r)| *r);
            let Some(tests) = section["test"].as_array() else {
                corrupt(&format!("section {sname} has no test list"));
            };
            for test in tests {
                let Some(name) = test["name"].as_str().map(str::to_string) else {
                    corrupt(&format!("a test of section {sname} has no name"));
                };
                let id = format!("{}/{sname}/{name}", file.trim_end_matches(".json"));
                let deviation = DEVIATIONS
                    .iter()
                    .find(|(d, _)| *d == id)
                    .map(|(_, r)| format!("Kubernetes behaviour kept: {r}"));
                let skip = file_skip
                    .or(section_skip)
                    .map(String::from)
                    .or(deviation)
                    .or_else(|| skip_reason(test));
                let (outcome, reason) = match skip {
                    Some(r) => (Outcome::Skip, r),
                    None => {
                        let t = test.clone();
                        match std::panic::catch_unwind(move || run_test(&id, &t)) {
                            Ok(Ok(())) => (Outcome::Pass, String::new()),
                            Ok(Err(why)) => (Outcome::Fail, why),
                            Err(_) => (Outcome::Fail, "panicked".into()),
                        }
                    }
                };
                records.push(Record {
                    file: file.clone(),
                    section: sname.clone(),
                    name,
                    outcome,
                    reason,
                });
            }
        }
    }

    assert!(!records.is_empty(), "{}: no tests", dir.display());
    let count = |o: Outcome| records.iter().filter(|r| r.outcome == o).count();
    let (passed, failed, skipped) = (
        count(Outcome::Pass),
        count(Outcome::Fail),
        count(Outcome::Skip),
    );

    let mut per_file: BTreeMap<&str, [usize; 3]> = BTreeMap::new();
    for r in &records {
        let e = per_file.entry(&r.file).or_default();
        e[r.outcome as usize] += 1;
    }
    for (f, [p, fl, s]) in &per_file {
        println!("  {f:<20} {p:>4} passed {fl:>4} failed {s:>4} skipped");
    }
    for r in records.iter().filter(|r| r.outcome == Outcome::Fail) {
        println!("  FAIL {}: {}", r.id(), r.reason);
    }
    println!("cel-spec: {passed} passed, {failed} failed, {skipped} skipped");

    let report = json!({
        "summary": {"passed": passed, "failed": failed, "skipped": skipped},
        "tests": records.iter().map(|r| json!({
            "file": r.file,
            "section": r.section,
            "name": r.name,
            "result": match r.outcome { Outcome::Pass => "pass", Outcome::Fail => "fail", Outcome::Skip => "skip" },
            "reason": r.reason,
        })).collect::<Vec<_>>(),
    });
    let report_path = std::env::var_os("CEL_CONFORMANCE_REPORT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cel-conformance-report.json")
        });
    if let Err(e) = std::fs::write(
        &report_path,
        serde_json::to_string_pretty(&report).unwrap_or_default(),
    ) {
        panic!("cannot write {}: {e}", report_path.display());
    }
    println!("report: {}", report_path.display());

    let passing: BTreeSet<String> = records
        .iter()
        .filter(|r| r.outcome == Outcome::Pass)
        .map(Record::id)
        .collect();
    let baseline_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("conformance-baseline.json");
    if std::env::var("CEL_CONFORMANCE_UPDATE").is_ok_and(|v| v == "1") {
        let baseline = json!({
            "passed": passed,
            "failed": failed,
            "skipped": skipped,
            "passing": passing,
        });
        let text = serde_json::to_string_pretty(&baseline).unwrap_or_default() + "\n";
        if let Err(e) = std::fs::write(&baseline_path, text) {
            panic!("cannot write {}: {e}", baseline_path.display());
        }
        println!("baseline updated: {}", baseline_path.display());
        return;
    }
    let was = read_baseline(&baseline_path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (rewrite it with CEL_CONFORMANCE_UPDATE=1)",
            baseline_path.display()
        )
    });
    let present: BTreeSet<String> = records.iter().map(Record::id).collect();
    let mut lost = Vec::new();
    for id in &was {
        if !present.contains(id) {
            lost.push(format!("{id} left the suite"));
        } else if !passing.contains(id) {
            lost.push(format!("{id} fails or is skipped now"));
        }
    }
    assert!(
        lost.is_empty(),
        "{} cel-spec tests the baseline lists as passing do not pass now:\n  {}",
        lost.len(),
        lost.join("\n  ")
    );
}

/// The ids of the tests `conformance-baseline.json` lists as passing; `Err` when it does not
/// parse, misses its keys or lists none.
fn read_baseline(path: &std::path::Path) -> Result<BTreeSet<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let baseline: Json = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    let (Some(_), Some(_), Some(_), Some(list)) = (
        baseline["passed"].as_u64(),
        baseline["failed"].as_u64(),
        baseline["skipped"].as_u64(),
        baseline["passing"].as_array(),
    ) else {
        return Err("expected the keys `passed`, `failed`, `skipped` and `passing`".into());
    };
    let mut ids = BTreeSet::new();
    for v in list {
        let Some(id) = v.as_str() else {
            return Err(format!("`passing` holds a non-string: {v}"));
        };
        ids.insert(id.to_string());
    }
    if ids.is_empty() {
        return Err("`passing` is empty".into());
    }
    Ok(ids)
}

/// Why a test is skipped, for tests that need what Kubernetes does not have.
fn skip_reason(test: &Json) -> Option<String> {
    let text = test.to_string();
    for marker in [
        "TestAllTypes",
        "cel.expr.conformance.proto",
        "NestedMessage",
        "GlobalEnum",
    ] {
        if text.contains(marker) {
            return Some("protobuf message types (Kubernetes uses none)".into());
        }
    }
    for message in [
        "google.protobuf.Value{",
        "google.protobuf.Struct{",
        "google.protobuf.ListValue{",
        "Value{",
    ] {
        if test["expr"].as_str().is_some_and(|e| e.contains(message)) {
            return Some("protobuf message literals (Kubernetes uses none)".into());
        }
    }
    for wrapper in [
        "google.protobuf.Int32Value",
        "google.protobuf.Int64Value",
        "google.protobuf.UInt32Value",
        "google.protobuf.UInt64Value",
        "google.protobuf.FloatValue",
        "google.protobuf.DoubleValue",
        "google.protobuf.BoolValue",
        "google.protobuf.StringValue",
        "google.protobuf.BytesValue",
        "google.protobuf.Any",
        "\"wrapper\"",
    ] {
        if text.contains(wrapper) {
            return Some("protobuf wrapper types (Kubernetes uses none)".into());
        }
    }
    if test.get("unknown").is_some() || test.get("any_unknowns").is_some() {
        return Some("unknown values (partial evaluation), which Kubernetes does not use".into());
    }
    None
}

fn run_test(id: &str, test: &Json) -> Result<(), String> {
    let expr = test["expr"].as_str().unwrap_or_default();
    let mut builder = Env::standard();
    if let Some(c) = test["container"].as_str() {
        builder = builder.container(c);
    }
    for decl in test["type_env"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let name = decl["name"].as_str().unwrap_or_default();
        if let Some(ident) = decl.get("ident") {
            builder = builder.variable(name, proto_type(&ident["type"])?);
        } else if let Some(f) = decl.get("function") {
            for o in f["overloads"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                let params = o["params"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(proto_type)
                    .collect::<Result<Vec<_>, _>>()?;
                let result = proto_type(&o["result_type"])?;
                let member = o["is_instance_function"].as_bool().unwrap_or(false);
                builder = builder.declare_function(name, member, params, result);
            }
        }
    }
    let env = builder.build();
    let checked = !test["disable_check"].as_bool().unwrap_or(false);
    let program = if checked {
        env.compile(expr)
    } else {
        env.compile_unchecked(expr)
    };
    // Kubernetes plans with cel-go's OptOptimize, which evaluates constant conversions when
    // building the program: an evaluation error the suite expects then fails the program.
    let expects_error = test.get("eval_error").is_some() || test.get("any_eval_errors").is_some();
    if expects_error && matches!(&program, Err(e) if e.is_program()) {
        return Ok(());
    }
    let program = program.map_err(|e| format!("compile error: {e}"))?;

    let typed = test.get("typed_result");
    if let Some(tr) = typed
        && let Some(dt) = tr.get("deduced_type")
    {
        let want = proto_type(dt)?;
        if *program.output_type() != want {
            return Err(format!(
                "deduced type {} , want {want}",
                program.output_type()
            ));
        }
    }
    if test["check_only"].as_bool().unwrap_or(false) {
        return Ok(());
    }

    let mut act = Activation::new();
    for (name, b) in test["bindings"].as_object().into_iter().flatten() {
        act.bind(name, proto_value(&b["value"])?);
    }
    let mut budget = Budget::new(u64::MAX, u64::MAX);
    let result = program.eval(&act, &mut budget);

    if test.get("eval_error").is_some() || test.get("any_eval_errors").is_some() {
        return match result {
            Err(_) => Ok(()),
            Ok(v) => Err(format!("expected an error, got {v:?}")),
        };
    }
    let expected = match (typed.and_then(|t| t.get("result")), test.get("value")) {
        _ if ERRATA.iter().any(|(e, _)| *e == id) => {
            let bytes = ERRATA
                .iter()
                .find(|(e, _)| *e == id)
                .map(|(_, b)| *b)
                .unwrap_or_default();
            Value::Bytes(Arc::from(bytes))
        }
        (Some(r), _) => proto_value(r)?,
        (None, Some(v)) => proto_value(v)?,
        (None, None) => Value::Bool(true),
    };
    match result {
        Ok(v) if same(&v, &expected) => Ok(()),
        Ok(v) => Err(format!("got {v:?}, want {expected:?}")),
        Err(e) => Err(format!("error: {e}")),
    }
}

/// Strict equality for test results: same types, NaN equal to NaN.
fn same(a: &Value<'_>, b: &Value<'_>) -> bool {
    match (a, b) {
        (Value::Double(x), Value::Double(y)) => (x.is_nan() && y.is_nan()) || x == y,
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| same(&p, &q))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.entries().iter().all(|(k, v)| {
                    y.entries().iter().any(|(k2, v2)| {
                        std::mem::discriminant(k) == std::mem::discriminant(k2)
                            && k.equals(k2)
                            && same(v, v2)
                    })
                })
        }
        (Value::Optional(Some(x)), Value::Optional(Some(y))) => same(x, y),
        _ => std::mem::discriminant(a) == std::mem::discriminant(b) && a.equals(b),
    }
}

fn proto_type(t: &Json) -> Result<Type, String> {
    if let Some(p) = t.get("primitive").and_then(Json::as_str) {
        return Ok(match p {
            "BOOL" => Type::Bool,
            "INT64" => Type::Int,
            "UINT64" => Type::Uint,
            "DOUBLE" => Type::Double,
            "STRING" => Type::String,
            "BYTES" => Type::Bytes,
            other => return Err(format!("unsupported primitive {other}")),
        });
    }
    if let Some(l) = t.get("list_type") {
        return Ok(Type::list(proto_type(&l["elem_type"])?));
    }
    if let Some(m) = t.get("map_type") {
        return Ok(Type::map(
            proto_type(&m["key_type"])?,
            proto_type(&m["value_type"])?,
        ));
    }
    if t.get("dyn").is_some() {
        return Ok(Type::Dyn);
    }
    if t.get("null").is_some() {
        return Ok(Type::Null);
    }
    if let Some(p) = t.get("type_param").and_then(Json::as_str) {
        return Ok(Type::param(p));
    }
    if let Some(inner) = t.get("type") {
        return Ok(Type::type_of(proto_type(inner)?));
    }
    if let Some(w) = t.get("well_known").and_then(Json::as_str) {
        return Ok(match w {
            "DURATION" => Type::Duration,
            "TIMESTAMP" => Type::Timestamp,
            _ => Type::Dyn,
        });
    }
    if let Some(m) = t.get("message_type").and_then(Json::as_str) {
        return Ok(match m {
            "google.protobuf.Duration" => Type::Duration,
            "google.protobuf.Timestamp" => Type::Timestamp,
            "google.protobuf.Struct" => Type::map(Type::String, Type::Dyn),
            "google.protobuf.ListValue" => Type::list(Type::Dyn),
            "google.protobuf.Value" => Type::Dyn,
            other => return Err(format!("unsupported message type {other}")),
        });
    }
    if let Some(a) = t.get("abstract_type") {
        let params = a["parameter_types"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(proto_type)
            .collect::<Result<Vec<_>, _>>()?;
        let name = a["name"].as_str().unwrap_or_default();
        if name == "optional_type"
            && let [p] = params.as_slice()
        {
            return Ok(Type::optional(p.clone()));
        }
        return Ok(Type::abstract_type(name, params));
    }
    Err(format!("unsupported type {t}"))
}

fn proto_value(v: &Json) -> Result<Value<'static>, String> {
    let Some((kind, x)) = v.as_object().and_then(|o| o.iter().next()) else {
        return Err(format!("unsupported value {v}"));
    };
    Ok(match kind.as_str() {
        "null_value" => Value::Null,
        "bool_value" => Value::Bool(x.as_bool().unwrap_or(false)),
        "int64_value" => Value::Int(num(x)?.parse().map_err(|e| format!("{e}"))?),
        "uint64_value" => Value::Uint(num(x)?.parse().map_err(|e| format!("{e}"))?),
        "double_value" => Value::Double(match x {
            Json::Number(n) => n.as_f64().unwrap_or(f64::NAN),
            Json::String(s) => match s.as_str() {
                "NaN" => f64::NAN,
                "Infinity" => f64::INFINITY,
                "-Infinity" => f64::NEG_INFINITY,
                other => other.parse().map_err(|e| format!("{e}"))?,
            },
            _ => return Err(format!("bad double {x}")),
        }),
        "string_value" => Value::string(x.as_str().unwrap_or_default()),
        "bytes_value" => Value::Bytes(Arc::from(base64(x.as_str().unwrap_or_default())?)),
        "list_value" => Value::List(List::from_vec(
            x["values"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(proto_value)
                .collect::<Result<_, _>>()?,
        )),
        "map_value" => {
            let mut m = OwnedMap::default();
            for e in x["entries"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
            {
                let k = proto_value(&e["key"])?;
                let key = Key::from_value(&k).map_err(|e| e.to_string())?;
                m.insert(key, proto_value(&e["value"])?);
            }
            Value::Map(Map::Owned(Arc::new(m)))
        }
        "type_value" => Value::Type(TypeName(x.as_str().unwrap_or_default().to_string().into())),
        "object_value" => object_value(x)?,
        other => return Err(format!("unsupported value kind {other}")),
    })
}

fn object_value(x: &Json) -> Result<Value<'static>, String> {
    let ty = x["@type"].as_str().unwrap_or_default();
    let inner = &x["value"];
    match ty.trim_start_matches("type.googleapis.com/") {
        "google.protobuf.Duration" => {
            let program = Env::standard()
                .build()
                .compile(&format!(
                    "duration('{}')",
                    inner.as_str().unwrap_or_default()
                ))
                .map_err(|e| e.to_string())?;
            program
                .eval(&Activation::new(), &mut Budget::new(u64::MAX, u64::MAX))
                .map_err(|e| e.to_string())?
                .into_static()
                .ok_or_else(|| "a constant".to_string())
        }
        "google.protobuf.Timestamp" => {
            let program = Env::standard()
                .build()
                .compile(&format!(
                    "timestamp('{}')",
                    inner.as_str().unwrap_or_default()
                ))
                .map_err(|e| e.to_string())?;
            program
                .eval(&Activation::new(), &mut Budget::new(u64::MAX, u64::MAX))
                .map_err(|e| e.to_string())?
                .into_static()
                .ok_or_else(|| "a constant".to_string())
        }
        "google.protobuf.Value" | "google.protobuf.Struct" | "google.protobuf.ListValue" => {
            Ok(json_value(inner))
        }
        other => Err(format!("unsupported object type {other}")),
    }
}

/// An owned CEL value for a JSON value (as google.protobuf.Value: numbers are doubles).
fn json_value(j: &Json) -> Value<'static> {
    match j {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
        Json::String(s) => Value::string(s.as_str()),
        Json::Array(a) => Value::List(List::from_vec(a.iter().map(json_value).collect())),
        Json::Object(o) => {
            let mut m = OwnedMap::default();
            for (k, v) in o {
                m.insert(Key::String(k.as_str().into()), json_value(v));
            }
            Value::Map(Map::Owned(Arc::new(m)))
        }
    }
}

fn num(x: &Json) -> Result<String, String> {
    match x {
        Json::String(s) => Ok(s.clone()),
        Json::Number(n) => Ok(n.to_string()),
        other => Err(format!("bad number {other}")),
    }
}

fn base64(s: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            b'=' => break,
            _ => return Err(format!("bad base64 {s}")),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Ok(out)
}
