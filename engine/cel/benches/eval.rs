//! Evaluation speed of one-line policy expressions over a Deployment (ns/eval). Programs are
//! compiled once; each iteration builds an activation over the borrowed JSON and evaluates.

use std::hint::black_box;

use celgate_cel::{Activation, Budget, Env, Type};
use criterion::{Criterion, criterion_group, criterion_main};

const CORPUS: &[(&str, &str)] = &[
    ("replicas", "object.spec.replicas <= 5"),
    ("label_eq", "object.metadata.labels.app == 'web'"),
    (
        "has_label",
        "has(object.metadata.labels) && 'app' in object.metadata.labels",
    ),
    (
        "images_tagged",
        "object.spec.template.spec.containers.all(c, c.image.contains(':') && size(c.name) < 64)",
    ),
    (
        "no_latest",
        "!object.spec.template.spec.containers.exists(c, c.image.endsWith(':latest'))",
    ),
    (
        "image_registry",
        "object.spec.template.spec.containers.all(c, c.image.matches('^[a-z0-9.-]+(/[a-z0-9._-]+)+:[a-zA-Z0-9._-]+$'))",
    ),
    (
        "resources_set",
        "object.spec.template.spec.containers.all(c, has(c.resources) && has(c.resources.limits) && 'memory' in c.resources.limits)",
    ),
    (
        "optional_annotation",
        "object.metadata.?annotations['owner'].orValue('') != ''",
    ),
    (
        "names",
        "object.spec.template.spec.containers.map(c, c.name).size() == 2",
    ),
    (
        "message",
        "'deployment ' + object.metadata.name + ' has ' + string(object.spec.replicas) + ' replicas'",
    ),
];

fn deployment() -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web",
            "namespace": "default",
            "labels": {"app": "web", "tier": "frontend"},
            "annotations": {"owner": "team-a"}
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "app", "image": "registry.example.com/team/web:1.25.3",
                     "resources": {"limits": {"memory": "256Mi", "cpu": "500m"}}},
                    {"name": "sidecar", "image": "registry.example.com/proxy/envoy:v1.30",
                     "resources": {"limits": {"memory": "128Mi"}}}
                ]}
            }
        }
    })
}

fn bench(c: &mut Criterion) {
    let env = Env::kubernetes().variable("object", Type::Dyn).build();
    let object = deployment();
    let mut group = c.benchmark_group("eval");
    for (name, src) in CORPUS {
        let program = match env.compile(src) {
            Ok(p) => p,
            Err(e) => panic!("{name}: {e}"),
        };
        group.bench_function(*name, |b| {
            b.iter(|| {
                let mut act = Activation::new();
                act.bind_json("object", black_box(&object));
                let mut budget = Budget::new(1_000_000, 10_000_000);
                black_box(program.eval(&act, &mut budget)).is_ok()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
