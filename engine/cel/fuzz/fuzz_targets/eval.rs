//! Parse + check + evaluate arbitrary UTF-8 as a CEL expression in Kubernetes' environment,
//! over a fixed Deployment-like object: `object` decoded, `oldObject` the same object read in
//! place from its text (a `JsonTape`, as the webhook reads requests). Any panic (or stack
//! overflow) is a bug.

#![no_main]

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use celgate_cel::{Activation, Budget, Env, JsonTape, PER_CALL_LIMIT, Type};
use libfuzzer_sys::fuzz_target;

static OBJECT: LazyLock<serde_json::Value> = LazyLock::new(|| {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web", "a-b": "x"}, "annotations": {}},
        "spec": {
            "replicas": 3,
            "ratio": 1.5,
            "paused": false,
            "nothing": null,
            "template": {"spec": {"containers": [
                {"name": "app", "image": "nginx:1.25", "ports": [{"containerPort": 80}],
                 "resources": {"limits": {"memory": "128Mi", "cpu": "500m"}}},
                {"name": "sidecar", "image": "envoy:v1", "args": ["--v", "héllo 世界"]}
            ]}}
        }
    })
});

static TEXT: LazyLock<String> = LazyLock::new(|| OBJECT.to_string());

static TAPE: LazyLock<JsonTape> = LazyLock::new(|| {
    let mut de = serde_json::Deserializer::from_str(&TEXT);
    JsonTape::read(&TEXT, &mut de).expect("the object's own text")
});

static ENV: LazyLock<Env> = LazyLock::new(|| {
    ["object", "oldObject", "params", "request"]
        .iter()
        .fold(Env::kubernetes(), |b, v| b.variable(v, Type::Dyn))
        .build()
});

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else {
        return;
    };
    let env = &*ENV;
    let program = match env.compile(src) {
        Ok(p) => p,
        Err(e) => {
            let _ = e.to_string();
            // The unchecked path plans what the checker would reject.
            let Ok(p) = env.compile_unchecked(src) else {
                return;
            };
            p
        }
    };
    let _ = program.output_type().to_string();
    let mut act = Activation::new();
    act.bind_json("object", &OBJECT);
    act.bind("oldObject", TAPE.root());
    act.bind_json("params", &serde_json::Value::Null);
    let mut budget = Budget::new(PER_CALL_LIMIT, 10 * PER_CALL_LIMIT)
        .with_deadline(Instant::now() + Duration::from_secs(2));
    let (result, _cost) = program.eval_with_cost(&act, &mut budget);
    match result {
        Ok(v) => {
            let _ = format!("{v:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
