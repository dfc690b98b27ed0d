//! The expansion against hand-written equivalents: for each sample Pod policy with the autogen
//! annotation and each Pod controller, a policy written by hand for that controller (its
//! template paths spelled out) decides every generated workload as the expanded policy does,
//! creates and updates alike; mutating samples patch the template as hand-written mutations do.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::Context;
use crate::matching::Namespaces;
use crate::model::{
    MutatingBindingSpec, Mutation, PatchType, ValidatingBindingSpec, Validation, ValidationAction,
};
use crate::mutate::{ApplySemantics, BoundMutatingPolicy, KindSchema, KindSchemas};
use crate::request::Request;
use crate::schema::{Gvk, schemas_from_openapi};
use crate::validate::BoundPolicy;
use crate::{PolicySet, compile_validating, mutate::compile_mutating};

struct Cache(HashMap<String, Value>);

impl Namespaces for Cache {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }
}

fn namespaces() -> Cache {
    Cache(HashMap::from([(
        "ns".to_string(),
        json!({"metadata": {"name": "ns", "labels": {"team": "a"}}}),
    )]))
}

fn rule(group: &str, resource: &str) -> ResourceRule {
    ResourceRule {
        operations: vec!["CREATE".into(), "UPDATE".into()],
        api_groups: vec![group.into()],
        api_versions: vec!["v1".into()],
        resources: vec![resource.into()],
        scope: "*".into(),
        ..Default::default()
    }
}

fn matching(rule: ResourceRule) -> Option<MatchResources> {
    Some(MatchResources {
        resource_rules: vec![rule],
        ..Default::default()
    })
}

/// A sample Pod policy as written, and the same policy written by hand for a controller whose
/// Pod template is at `t` (`spec.template`, `spec.jobTemplate.spec.template`).
struct Sample {
    name: &'static str,
    pod: fn() -> ValidatingPolicySpec,
    by_hand: fn(&str) -> ValidatingPolicySpec,
}

fn validation(expression: String, message_expression: Option<String>) -> Validation {
    Validation {
        expression,
        message: Some("not allowed".into()),
        message_expression,
        ..Default::default()
    }
}

fn named(name: &str, expression: String) -> NamedExpression {
    NamedExpression {
        name: name.into(),
        expression,
    }
}

fn samples() -> Vec<Sample> {
    vec![
        Sample {
            name: "non-root",
            pod: || {
                ValidatingPolicySpec {
                validations: vec![validation(
                    "object.spec.containers.all(c, c.?securityContext.?runAsNonRoot.orValue(false))".into(),
                    Some("'must run as non-root: ' + object.spec.containers.filter(c, !c.?securityContext.?runAsNonRoot.orValue(false)).map(c, c.name).join(', ')".into()),
                )],
                ..Default::default()
            }
            },
            by_hand: |t| ValidatingPolicySpec {
                validations: vec![validation(
                    format!(
                        "object.{t}.spec.containers.all(c, c.?securityContext.?runAsNonRoot.orValue(false))"
                    ),
                    Some(format!(
                        "'must run as non-root: ' + object.{t}.spec.containers.filter(c, !c.?securityContext.?runAsNonRoot.orValue(false)).map(c, c.name).join(', ')"
                    )),
                )],
                ..Default::default()
            },
        },
        Sample {
            name: "registry",
            pod: || {
                ValidatingPolicySpec {
                variables: vec![named("images", "object.spec.containers.map(c, c.image)".into())],
                match_conditions: vec![named(
                    "not-exempt",
                    "!('exempt' in object.metadata.?labels.orValue({})) && object.metadata.namespace == 'ns'".into(),
                )],
                validations: vec![validation(
                    "variables.images.all(i, i.startsWith('registry.example.com/'))".into(),
                    None,
                )],
                ..Default::default()
            }
            },
            by_hand: |t| ValidatingPolicySpec {
                variables: vec![named(
                    "images",
                    format!("object.{t}.spec.containers.map(c, c.image)"),
                )],
                match_conditions: vec![named(
                    "not-exempt",
                    format!(
                        "!('exempt' in object.{t}.metadata.?labels.orValue({{}})) && object.metadata.namespace == 'ns'"
                    ),
                )],
                validations: vec![validation(
                    "variables.images.all(i, i.startsWith('registry.example.com/'))".into(),
                    None,
                )],
                ..Default::default()
            },
        },
        Sample {
            name: "host-network",
            pod: || {
                ValidatingPolicySpec {
                validations: vec![
                    validation(
                        "oldObject == null || object.spec.?hostNetwork.orValue(false) == oldObject.spec.?hostNetwork.orValue(false)".into(),
                        None,
                    ),
                    validation(
                        "!has(object.spec.hostNetwork) || !object.spec.hostNetwork || object.metadata.?labels.?team.orValue('') == 'infra'".into(),
                        Some("'hostNetwork is for team infra, not ' + object.metadata.?labels.?team.orValue('nobody')".into()),
                    ),
                ],
                ..Default::default()
            }
            },
            by_hand: |t| ValidatingPolicySpec {
                validations: vec![
                    validation(
                        format!(
                            "oldObject == null || object.{t}.spec.?hostNetwork.orValue(false) == oldObject.{t}.spec.?hostNetwork.orValue(false)"
                        ),
                        None,
                    ),
                    validation(
                        format!(
                            "!has(object.{t}.spec.hostNetwork) || !object.{t}.spec.hostNetwork || object.{t}.metadata.?labels.?team.orValue('') == 'infra'"
                        ),
                        Some(format!(
                            "'hostNetwork is for team infra, not ' + object.{t}.metadata.?labels.?team.orValue('nobody')"
                        )),
                    ),
                ],
                ..Default::default()
            },
        },
    ]
}

/// Deterministic generated Pods: (metadata, spec) pairs over images, non-root settings,
/// hostNetwork and labels.
fn pods() -> Vec<(Value, Value)> {
    let images = [
        "registry.example.com/app:1",
        "docker.io/nginx",
        "registry.example.com/db@sha256:00",
    ];
    let non_root = [json!(null), json!(true), json!(false)];
    let labels = [
        json!(null),
        json!({"team": "infra"}),
        json!({"team": "web", "exempt": "yes"}),
        json!({}),
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 33) as usize % n
    };
    (0..60)
        .map(|i| {
            let containers: Vec<Value> = (0..1 + next(3))
                .map(|c| {
                    let mut container = json!({"name": format!("c{c}"), "image": images[next(3)]});
                    let nr = &non_root[next(3)];
                    if !nr.is_null() {
                        container["securityContext"] = json!({"runAsNonRoot": nr});
                    }
                    container
                })
                .collect();
            let mut spec = json!({"containers": containers});
            match next(3) {
                0 => {}
                n => spec["hostNetwork"] = json!(n == 1),
            }
            let mut metadata = json!({});
            let l = &labels[(i + next(4)) % 4];
            if !l.is_null() {
                metadata["labels"] = l.clone();
            }
            (metadata, spec)
        })
        .collect()
}

/// The controller's object holding this Pod template.
fn controller_object(c: PodController, (metadata, spec): &(Value, Value)) -> Value {
    let template = json!({"metadata": metadata, "spec": spec});
    let spec = match c {
        PodController::CronJob => {
            json!({"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template}}})
        }
        _ => json!({"selector": {"matchLabels": {"app": "w"}}, "template": template}),
    };
    json!({"apiVersion": format!("{}/v1", c.group()), "kind": c.kind(),
        "metadata": {"name": "w", "namespace": "ns", "labels": {"owner": "x"}}, "spec": spec})
}

fn request(c: PodController, object: &Value, old: Option<&Value>) -> Value {
    let operation = if old.is_some() { "UPDATE" } else { "CREATE" };
    json!({"uid": "u", "operation": operation, "namespace": "ns", "name": "w",
        "kind": {"group": c.group(), "version": "v1", "kind": c.kind()},
        "resource": {"group": c.group(), "version": "v1", "resource": c.resource()},
        "object": object, "oldObject": old})
}

fn bound_validating(spec: ValidatingPolicySpec) -> PolicySet {
    let binding = Arc::new(ValidatingBindingSpec {
        name: format!("{}-b", spec.name).into(),
        policy_name: spec.name.clone(),
        validation_actions: vec![ValidationAction::Deny],
        ..Default::default()
    });
    let policy = Arc::new(compile_validating(spec));
    assert_eq!(policy.compile_errors(), Vec::new(), "{}", policy.name);
    PolicySet::new(
        vec![BoundPolicy {
            policy,
            bindings: vec![binding].into(),
        }],
        Vec::new(),
    )
}

/// A decision's context over `ns`: no params, authorizer, deadline, trace or exceptions.
fn context(ns: &Cache) -> Context<'_> {
    Context {
        namespaces: ns,
        params: &crate::params::NoParams,
        authorizer: None,
        deadline: None,
        trace: None,
        exceptions: None,
    }
}

/// Whether admitted, and the message after the policy's name.
fn decide(set: &PolicySet, raw: &Value) -> (bool, Option<String>) {
    let req = Request::from_json(raw).expect("valid request");
    let ns = namespaces();
    let ctx = context(&ns);
    let out = set.validate(&req, &ctx, None);
    let message = out.denial.map(|d| d.message);
    (message.is_none(), message)
}

fn after_denied(message: &Option<String>) -> Option<&str> {
    message
        .as_deref()
        .and_then(|m| m.split_once(" denied request: "))
        .map(|(_, m)| m)
}

#[test]
fn expanded_policies_decide_as_hand_written_ones_for_every_controller() {
    let pods = pods();
    for sample in samples() {
        let mut pod = (sample.pod)();
        pod.name = sample.name.into();
        pod.match_constraints = matching(rule("", "pods"));
        pod.autogen = Some("all".into());
        let expanded = bound_validating(pod);
        let mut outcomes = (0, 0);
        for c in PodController::ALL {
            let t = c.template_path().join(".");
            let mut hand = (sample.by_hand)(&t);
            hand.name = sample.name.into();
            hand.match_constraints = matching(rule(c.group(), c.resource()));
            let hand = bound_validating(hand);
            for (i, p) in pods.iter().enumerate() {
                let object = controller_object(c, p);
                let old = controller_object(c, &pods[(i + 7) % pods.len()]);
                for raw in [request(c, &object, None), request(c, &object, Some(&old))] {
                    let (got, want) = (decide(&expanded, &raw), decide(&hand, &raw));
                    let case = format!("{} on {} #{i}: {raw}", sample.name, c.kind());
                    assert_eq!(got.0, want.0, "{case}: {got:?} {want:?}");
                    assert_eq!(after_denied(&got.1), after_denied(&want.1), "{case}");
                    if let Some(m) = &got.1 {
                        let named = format!(
                            "'{}' (Pod template of {}) with binding",
                            sample.name,
                            c.kind()
                        );
                        assert!(m.contains(&named), "{case}: {m}");
                        outcomes.1 += 1;
                    } else {
                        outcomes.0 += 1;
                    }
                }
            }
        }
        assert!(
            outcomes.0 > 0 && outcomes.1 > 0,
            "{}: {outcomes:?}",
            sample.name
        );
    }
}

#[test]
fn the_pod_itself_is_decided_as_without_the_annotation() {
    for sample in samples() {
        let mut pod = (sample.pod)();
        pod.name = sample.name.into();
        pod.match_constraints = matching(rule("", "pods"));
        let plain = bound_validating(pod.clone());
        pod.autogen = Some("Deployment, cronjobs".into());
        let expanded = bound_validating(pod);
        for (metadata, spec) in pods() {
            let object =
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec});
            let raw = json!({"uid": "u", "operation": "CREATE", "namespace": "ns", "name": "p",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"}, "object": object});
            assert_eq!(decide(&expanded, &raw), decide(&plain, &raw), "{raw}");
        }
        // Narrowed to two controllers: a StatefulSet is not decided.
        let sts = controller_object(PodController::StatefulSet, &pods()[0]);
        let raw = request(PodController::StatefulSet, &sts, None);
        assert_eq!(decide(&expanded, &raw), (true, None));
    }
}

#[test]
fn the_annotation_names_controllers_or_all() {
    use PodController::*;
    assert_eq!(parse_annotation("all"), Ok(PodController::ALL.to_vec()));
    assert_eq!(
        parse_annotation(" CronJob, deployments ,Deployment"),
        Ok(vec![Deployment, CronJob])
    );
    assert_eq!(parse_annotation("none"), Ok(vec![]));
    assert_eq!(parse_annotation(""), Ok(vec![]));
    assert_eq!(
        parse_annotation("Deployment,Pod"),
        Err(AutogenError::UnknownController("Pod".into()))
    );
    // A policy that matches no Pods cannot be expanded: its compile errors say so.
    let spec = ValidatingPolicySpec {
        name: "p".into(),
        match_constraints: matching(rule("apps", "deployments")),
        autogen: Some("all".into()),
        ..Default::default()
    };
    let errors = compile_validating(spec).compile_errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0].0,
        "metadata.annotations[admission.celgate.io/autogen]"
    );
}

/// Pod and the controllers' schemas, their Pod templates sharing one PodTemplateSpec.
fn schemas() -> HashMap<Gvk, KindSchema> {
    let gvk = |g: &str, k: &str| json!([{"group": g, "version": "v1", "kind": k}]);
    let meta = json!({"type": "object", "properties": {
        "name": {"type": "string"}, "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}}}});
    let controller = |g: &str, k: &str| {
        json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"},
        "metadata": {"$ref": "#/components/schemas/Meta"},
        "spec": {"type": "object", "properties": {
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
                "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "template": {"$ref": "#/components/schemas/PodTemplateSpec"}}}},
        "x-kubernetes-group-version-kind": gvk(g, k)})
    };
    let doc = json!({"components": {"schemas": {
        "Meta": meta,
        "PodSpec": {"type": "object", "properties": {
            "hostNetwork": {"type": "boolean"},
            "terminationGracePeriodSeconds": {"type": "integer"},
            "securityContext": {"type": "object", "properties": {"runAsNonRoot": {"type": "boolean"}}},
            "containers": {"type": "array", "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "image": {"type": "string"},
                    "securityContext": {"type": "object", "properties": {
                        "runAsNonRoot": {"type": "boolean"}}}}}}}},
        "PodTemplateSpec": {"type": "object", "properties": {
            "metadata": {"$ref": "#/components/schemas/Meta"},
            "spec": {"$ref": "#/components/schemas/PodSpec"}}},
        "Pod": {"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"$ref": "#/components/schemas/Meta"},
            "spec": {"$ref": "#/components/schemas/PodSpec"}},
            "x-kubernetes-group-version-kind": gvk("", "Pod")},
        "Deployment": controller("apps", "Deployment"),
        "ReplicaSet": controller("apps", "ReplicaSet"),
        "StatefulSet": controller("apps", "StatefulSet"),
        "DaemonSet": controller("apps", "DaemonSet"),
        "Job": controller("batch", "Job"),
        "CronJob": {"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"$ref": "#/components/schemas/Meta"},
            "spec": {"type": "object", "properties": {
                "schedule": {"type": "string"},
                "jobTemplate": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "template": {"$ref": "#/components/schemas/PodTemplateSpec"}}}}}}}},
            "x-kubernetes-group-version-kind": gvk("batch", "CronJob")},
    }}});
    let parsed = schemas_from_openapi(&doc).expect("schemas");
    parsed
        .into_iter()
        .map(|(gvk, schema)| {
            (
                gvk,
                KindSchema {
                    schema,
                    built_in: false,
                },
            )
        })
        .collect()
}

struct Schemas(HashMap<Gvk, KindSchema>);

impl KindSchemas for Schemas {
    fn schema(&self, gvk: &Gvk) -> Option<&KindSchema> {
        self.0.get(gvk)
    }
}

fn mutating_set(spec: MutatingPolicySpec) -> PolicySet {
    let binding = Arc::new(MutatingBindingSpec {
        name: "b".into(),
        policy_name: spec.name.clone(),
        ..Default::default()
    });
    let policy = Arc::new(compile_mutating(spec, ApplySemantics::Upstream));
    assert_eq!(policy.compile_errors(), Vec::new(), "{}", policy.name);
    PolicySet::new(
        Vec::new(),
        vec![BoundMutatingPolicy {
            policy,
            bindings: vec![binding].into(),
        }],
    )
}

fn mutations(apply: String, patch: String) -> Vec<Mutation> {
    vec![
        Mutation {
            patch_type: PatchType::ApplyConfiguration,
            apply_configuration: Some(apply),
            json_patch: None,
        },
        Mutation {
            patch_type: PatchType::JsonPatch,
            apply_configuration: None,
            json_patch: Some(patch),
        },
    ]
}

#[test]
fn expanded_mutations_patch_the_template_as_hand_written_ones() {
    let pod = MutatingPolicySpec {
        name: "defaults".into(),
        match_constraints: matching(rule("", "pods")),
        autogen: Some("all".into()),
        mutations: mutations(
            "Object{metadata: Object.metadata{labels: {'checked': 'yes'}}, spec: Object.spec{securityContext: Object.spec.securityContext{runAsNonRoot: !object.spec.?hostNetwork.orValue(false)}}}".into(),
            "object.spec.containers.exists(c, c.image.startsWith('docker.io/')) ? [JSONPatch{op: 'add', path: '/spec/terminationGracePeriodSeconds', value: size(object.spec.containers)}] : []".into(),
        ),
        ..Default::default()
    };
    let expanded = mutating_set(pod);
    let schemas = Schemas(schemas());
    let ns = namespaces();
    let ctx = context(&ns);
    let mut patched = 0;
    for c in PodController::ALL {
        let t = c.template_path().join(".");
        let tp = c.template_path().join("/");
        let nest = |inner: String| -> String {
            // Object{spec: Object.spec{template: …}} (CronJob: through jobTemplate.spec).
            let mut out = inner;
            let path = c.template_path();
            for depth in (0..path.len()).rev() {
                let type_name = std::iter::once("Object")
                    .chain(path[..depth].iter().copied())
                    .collect::<Vec<_>>()
                    .join(".");
                out = format!("{type_name}{{{}: {out}}}", path[depth]);
            }
            out
        };
        let hand = MutatingPolicySpec {
            name: "defaults".into(),
            match_constraints: matching(rule(c.group(), c.resource())),
            mutations: mutations(
                nest(format!(
                    "Object.{t}{{metadata: Object.{t}.metadata{{labels: {{'checked': 'yes'}}}}, spec: Object.{t}.spec{{securityContext: Object.{t}.spec.securityContext{{runAsNonRoot: !object.{t}.spec.?hostNetwork.orValue(false)}}}}}}"
                )),
                format!(
                    "object.{t}.spec.containers.exists(c, c.image.startsWith('docker.io/')) ? [JSONPatch{{op: 'add', path: '/{tp}/spec/terminationGracePeriodSeconds', value: size(object.{t}.spec.containers)}}] : []"
                ),
            ),
            ..Default::default()
        };
        let hand = mutating_set(hand);
        for p in pods() {
            let raw = request(c, &controller_object(c, &p), None);
            let req = Request::from_json(&raw).expect("valid request");
            let got = expanded.mutate(&req, &ctx, &schemas, None);
            let want = hand.mutate(&req, &ctx, &schemas, None);
            assert!(want.allowed(), "{:?}", want.denial);
            assert_eq!(got.denial.as_ref().map(|d| &*d.message), None, "{raw}");
            let object = &raw["object"];
            assert_eq!(
                got.object(object),
                want.object(object),
                "{} {raw}",
                c.kind()
            );
            assert_eq!(got.patch, want.patch, "{} {raw}", c.kind());
            patched += usize::from(got.object(object).is_some());
        }
    }
    assert!(patched > 0);
}

#[test]
fn a_binding_whose_rules_name_pods_takes_the_controllers_too() {
    let spec = ValidatingPolicySpec {
        name: "p".into(),
        match_constraints: matching(rule("", "pods")),
        autogen: Some("Deployment".into()),
        validations: vec![validation("object.spec.containers.size() < 2".into(), None)],
        ..Default::default()
    };
    let policy = Arc::new(compile_validating(spec));
    let set = |rules: Vec<ResourceRule>| {
        let binding = Arc::new(ValidatingBindingSpec {
            name: "b".into(),
            policy_name: "p".into(),
            validation_actions: vec![ValidationAction::Deny],
            match_resources: Some(MatchResources {
                resource_rules: rules,
                ..Default::default()
            }),
            ..Default::default()
        });
        let bound = BoundPolicy {
            policy: policy.clone(),
            bindings: vec![binding].into(),
        };
        PolicySet::new(vec![bound], Vec::new())
    };
    let two = (
        json!({}),
        json!({"containers": [{"name": "a"}, {"name": "b"}]}),
    );
    let raw = request(
        PodController::Deployment,
        &controller_object(PodController::Deployment, &two),
        None,
    );
    assert!(
        !decide(&set(vec![rule("", "pods")]), &raw).0,
        "pods name the Deployment"
    );
    assert!(
        !decide(&set(vec![]), &raw).0,
        "no rules: what the policy matches"
    );
    assert!(
        decide(&set(vec![rule("", "configmaps")]), &raw).0,
        "not for configmaps"
    );
}
