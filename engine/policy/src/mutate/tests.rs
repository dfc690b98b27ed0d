//! The mutation loop end to end: policies, bindings and mutations in order, failurePolicy,
//! upstream's messages and codes, the response patch and idempotence.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::apply::tests::{pod, pod_schema};
use super::{
    ApplySemantics, BoundMutatingPolicy, KindSchema, KindSchemas, MutationOutcome,
    compile_mutating, mutate,
};
use crate::Context;
use crate::matching::Namespaces;
use crate::model::{
    FailurePolicy, MatchResources, MutatingBindingSpec, MutatingPolicySpec, Mutation,
    NamedExpression, PatchType, ResourceRule,
};
use crate::request::Request;
use crate::schema::Gvk;
use crate::validate::ErrorType;

struct Cache(HashMap<String, Value>);

impl Namespaces for Cache {
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }
}

/// The Pod schema for `/v1, Kind=Pod`, or no schema at all.
struct Schemas(Option<KindSchema>);

impl KindSchemas for Schemas {
    fn schema(&self, gvk: &Gvk) -> Option<&KindSchema> {
        self.0
            .as_ref()
            .filter(|_| *gvk == Gvk::new("", "v1", "Pod"))
    }
}

fn apply_config(expr: &str) -> Mutation {
    Mutation {
        patch_type: PatchType::ApplyConfiguration,
        apply_configuration: Some(expr.into()),
        json_patch: None,
    }
}

fn json_patch(expr: &str) -> Mutation {
    Mutation {
        patch_type: PatchType::JsonPatch,
        apply_configuration: None,
        json_patch: Some(expr.into()),
    }
}

/// Policy `name` matching pod creation and update, bound by `<name>-b`.
fn policy(name: &str, mutations: Vec<Mutation>) -> MutatingPolicySpec {
    MutatingPolicySpec {
        name: name.into(),
        match_constraints: Some(MatchResources {
            resource_rules: vec![ResourceRule {
                operations: vec!["CREATE".into(), "UPDATE".into()],
                api_groups: vec!["".into()],
                api_versions: vec!["v1".into()],
                resources: vec!["pods".into()],
                scope: "*".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        mutations,
        ..Default::default()
    }
}

fn bound(spec: MutatingPolicySpec, semantics: ApplySemantics) -> BoundMutatingPolicy {
    BoundMutatingPolicy {
        bindings: vec![Arc::new(MutatingBindingSpec {
            name: format!("{}-b", spec.name).into(),
            policy_name: spec.name.clone(),
            ..Default::default()
        })]
        .into(),
        policy: Arc::new(compile_mutating(spec, semantics)),
    }
}

/// A Pod create in namespace `ns` as an AdmissionReview's `request`.
fn pod_create(object: &Value) -> Value {
    json!({"uid": "u", "operation": "CREATE", "namespace": "ns", "name": "web",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "object": object})
}

/// Mutates `req` in a context whose only namespace is `ns` (labelled `team: a`).
fn mutate_in_ns<'p>(
    policies: impl IntoIterator<Item = &'p BoundMutatingPolicy>,
    req: &Request<'_>,
    schemas: &Schemas,
) -> MutationOutcome {
    let namespaces = Cache(HashMap::from([(
        "ns".to_string(),
        json!({"metadata": {"name": "ns", "labels": {"team": "a"}}}),
    )]));
    let ctx = Context {
        namespaces: &namespaces,
        params: &crate::params::NoParams,
        authorizer: None,
        deadline: None,
        trace: None,
        exceptions: None,
    };
    mutate(policies, req, &ctx, schemas)
}

fn run_on(policies: &[BoundMutatingPolicy], object: &Value, schemas: &Schemas) -> MutationOutcome {
    let raw = pod_create(object);
    let req = Request::from_json(&raw).expect("valid request");
    mutate_in_ns(policies, &req, schemas)
}

fn run(policies: &[BoundMutatingPolicy]) -> MutationOutcome {
    let schemas = Schemas(Some(KindSchema {
        schema: pod_schema(),
        built_in: true,
    }));
    run_on(policies, &pod(), &schemas)
}

fn upstream(spec: MutatingPolicySpec) -> BoundMutatingPolicy {
    bound(spec, ApplySemantics::Upstream)
}

#[test]
fn mutations_apply_in_order_each_seeing_the_last() {
    let mut p = policy(
        "p",
        vec![
            apply_config(
                "Object{metadata: Object.metadata{labels: {'team': namespaceObject.metadata.labels.team}}}",
            ),
            json_patch(
                "[JSONPatch{op: 'add', path: '/metadata/labels/copy', value: object.metadata.labels.team + '!'}]",
            ),
        ],
    );
    p.variables = vec![NamedExpression {
        name: "unused".into(),
        expression: "object.metadata.name".into(),
    }];
    let second = policy(
        "q",
        vec![apply_config(
            "Object{spec: Object.spec{replicas: size(object.metadata.labels)}}",
        )],
    );
    let out = run(&[upstream(p), upstream(second)]);
    assert!(out.allowed(), "{:?}", out.denial);
    let object = out.object(&pod()).expect("mutated");
    assert_eq!(
        object["metadata"]["labels"],
        json!({"app": "web", "team": "a", "copy": "a!"})
    );
    assert_eq!(object["spec"]["replicas"], json!(3));
    let patch = out.patch.ops();
    let ops: Vec<(&str, &str)> = patch
        .iter()
        .map(|o| {
            (
                o["op"].as_str().unwrap_or(""),
                o["path"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        ops,
        vec![
            ("add", "/metadata/labels/copy"),
            ("add", "/metadata/labels/team"),
            ("replace", "/spec/replicas"),
        ]
    );
    let errors: Vec<ErrorType> = out.checks.iter().map(|c| c.error_type).collect();
    assert_eq!(errors, vec![ErrorType::NoError; 3]);
    assert_eq!(out.invocations.len(), 2);
    assert!(out.invocations.iter().all(|i| i.changed));
}

#[test]
fn errors_deny_with_upstreams_messages_under_fail_only() {
    /// A case: its name, the mutation, and the denial's reason and message (none: allowed).
    type Case = (&'static str, Mutation, Option<(&'static str, &'static str)>);
    let cases: Vec<Case> = vec![
        (
            "the docs' sidecar with args",
            apply_config(
                "Object{spec: Object.spec{initContainers: [Object.spec.initContainers{name: 'mesh-proxy', args: ['proxy']}]}}",
            ),
            Some((
                "Invalid",
                "policy 'p' with binding 'p-b' denied request: error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.initContainers[0].args",
            )),
        ),
        (
            "a misnamed nested type",
            apply_config("Object{spec: Object.spec{selector: Object.spec.wrong{}}}"),
            Some((
                "Invalid",
                "policy 'p' with binding 'p-b' denied request: type mismatch: unexpected type name \"Object.spec.wrong\", expected \"Object.spec.selector\", which matches field name path from root Object type",
            )),
        ),
        (
            "a runtime error",
            apply_config("Object{spec: Object.spec{replicas: object.spec.missing}}"),
            Some((
                "Invalid",
                "policy 'p' with binding 'p-b' denied request: expression 'Object{spec: Object.spec{replicas: object.spec.missing}}' resulted in error: no such key: missing",
            )),
        ),
        (
            "a failed JSON patch",
            json_patch("[JSONPatch{op: 'replace', path: '/spec/containers/-', value: {}}]"),
            Some((
                "Invalid",
                "policy 'p' with binding 'p-b' denied request: JSON Patch: replace operation does not apply: doc is missing key: /spec/containers/-: missing value",
            )),
        ),
        (
            "copies doubling an object stop at kube-apiserver's 3 MiB of copies",
            json_patch(&format!(
                "[JSONPatch{{op: 'add', path: '/spec/d', value: {{'a': '0123456789'}}}}] + [{}]",
                (0..25)
                    .map(|i| format!(
                        "JSONPatch{{op: 'copy', from: '/spec/d', path: '/spec/d/c{i}'}}"
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            Some((
                "Invalid",
                "policy 'p' with binding 'p-b' denied request: JSON Patch: Unable to complete the copy, the accumulated size increase of copy is 6291571, exceeding the limit 3145728",
            )),
        ),
        (
            "a test under a missing parent",
            json_patch("[JSONPatch{op: 'test', path: '/data/color', value: 'red'}]"),
            Some((
                "Invalid",
                "policy 'p' with binding 'p-b' denied request: JSON Patch: test operation does not apply: is missing path: /data/color: missing value",
            )),
        ),
        (
            "a compile error",
            json_patch("Object{}"),
            Some((
                "Invalid",
                "policy 'p' with binding 'p-b' denied request: must evaluate to list(JSONPatch) but got Object",
            )),
        ),
        (
            "a false test skips the whole patch",
            json_patch(
                "[JSONPatch{op: 'add', path: '/spec/replicas', value: 9}, JSONPatch{op: 'test', path: '/metadata/name', value: 'other'}]",
            ),
            None,
        ),
    ];
    for (name, mutation, want) in cases {
        let mut spec = policy("p", vec![mutation]);
        let out = run(&[upstream(spec.clone())]);
        let got = out
            .denial
            .as_ref()
            .map(|d| (d.reason.as_str(), d.message.as_str()));
        assert_eq!(got, want, "{name}");
        assert!(out.object(&pod()).is_none(), "{name}: nothing changes");
        if let Some(d) = &out.denial {
            assert_eq!(d.code, 403, "{name}");
        }
        spec.failure_policy = FailurePolicy::Ignore;
        let ignored = run(&[upstream(spec)]);
        assert!(ignored.allowed(), "{name} under Ignore");
        assert!(
            ignored.object(&pod()).is_none(),
            "{name} under Ignore: nothing changes"
        );
    }
    // A patch failing half-way, its earlier operations put back, under Ignore.
    let mut spec = policy(
        "p",
        vec![json_patch(
            "[JSONPatch{op: 'add', path: '/metadata/labels/x', value: 'y'}, JSONPatch{op: 'remove', path: '/spec/nothing'}]",
        )],
    );
    spec.failure_policy = FailurePolicy::Ignore;
    let out = run(&[upstream(spec)]);
    assert!(out.allowed() && out.object(&pod()).is_none(), "{out:?}");
    assert_eq!(out.checks[0].error_type, ErrorType::InvalidError);
}

/// kube-apiserver decodes a built-in kind's patched object into its Go type and encodes it for
/// the next mutation: an optional map emptied (or nulled) by a patch is left out, so the next
/// patch finds no parent (found by the generated differential: `sb-489`).
#[test]
fn the_next_mutation_sees_a_built_in_object_as_go_encodes_it() {
    let out = run(&[upstream(policy(
        "p",
        vec![
            json_patch("[JSONPatch{op: 'remove', path: '/metadata/labels/app'}]"),
            json_patch("[JSONPatch{op: 'remove', path: '/metadata/labels/new'}]"),
        ],
    ))]);
    assert_eq!(
        out.denial.as_ref().map(|d| d.message.as_str()),
        Some(
            "policy 'p' with binding 'p-b' denied request: JSON Patch: remove operation does not apply: doc is missing path: \"/metadata/labels/new\": missing value"
        )
    );
    // A null or an empty list in an optional field is left out too.
    let out = run(&[upstream(policy(
        "p",
        vec![
            json_patch(
                "[JSONPatch{op: 'replace', path: '/metadata/finalizers', value: []}, JSONPatch{op: 'add', path: '/metadata/labels', value: null}]",
            ),
            json_patch(
                "[JSONPatch{op: 'add', path: '/metadata/labels', value: {'seen': string(has(object.metadata.labels)) + string(has(object.metadata.finalizers))}}]",
            ),
        ],
    ))]);
    assert!(out.allowed(), "{:?}", out.denial);
    let object = out.object(&pod()).expect("mutated");
    assert_eq!(object["metadata"]["labels"], json!({"seen": "falsefalse"}));
    assert!(object["metadata"].get("finalizers").is_none(), "{object}");
}

/// What upstream's conversion of an apply configuration to Go leaves of CEL values the typed
/// conversion refuses wherever they stand (a null, a uint, a list or map literal inside
/// another, an `Object` that failed to convert), refused before the atomic rule; JSON data
/// from the object converts, its nulls included.
#[test]
fn go_values_the_typed_conversion_refuses_are_refused_first() {
    let prefix = "policy 'p' with binding 'p-b' denied request: error applying patch: failed to convert patch object to typed object: ";
    let cases: Vec<(&str, &str, String)> = vec![
        (
            "a null in a granular map of strings",
            "Object{metadata: Object.metadata{labels: {'gone': null}}}",
            ".metadata.labels.gone: expected string, got &value.valueUnstructured{Value:0}".into(),
        ),
        (
            "a null in an atomic map: the conversion refuses it before the atomic rule",
            "Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {'zone': null}}}}",
            ".spec.selector.matchLabels.zone: expected string, got &value.valueUnstructured{Value:0}"
                .into(),
        ),
        (
            "a null where a map may go",
            "Object{spec: Object.spec{config: {'drop': null}}}",
            ".spec.config.drop: expected map, got &{NULL_VALUE}".into(),
        ),
        (
            "a map literal inside a map literal",
            "Object{spec: Object.spec{config: {'nested': {'y': dyn(2), 'x': dyn(null)}}}}",
            ".spec.config.nested: expected map, got &{map[x:0 y:2]}".into(),
        ),
        (
            "a list literal inside a list literal",
            "Object{spec: Object.spec{config: {'list': [[dyn(1), dyn('a')]]}}}",
            ".spec.config.list: expected map, got &{[[1, a]]}".into(),
        ),
        (
            "a null field of an Object",
            "Object{spec: Object.spec{replicas: null}}",
            ".spec.replicas: expected numeric (int or float), got structpb.NullValue".into(),
        ),
        (
            "a uint",
            "Object{spec: Object.spec{replicas: 2u}}",
            ".spec.replicas: expected numeric (int or float), got uint64".into(),
        ),
        (
            "a uint where a string goes",
            "Object{metadata: Object.metadata{name: 26u}}",
            ".metadata.name: expected string, got &value.valueUnstructured{Value:0x1a}".into(),
        ),
        (
            "a uint where any scalar goes",
            "Object{spec: Object.spec{surge: 26u}}",
            ".spec.surge: expected any scalar, got &{26}".into(),
        ),
        (
            "a null in a set",
            "Object{metadata: Object.metadata{finalizers: [dyn('a'), dyn(null)]}}",
            ".metadata.finalizers[={{undefined}}]: expected string, got &value.valueUnstructured{Value:0}"
                .into(),
        ),
        (
            "Go values inside a map where a list goes",
            "Object{spec: Object.spec{containers: {'k': {'a': 'b'}, 'key': {}}}}",
            ".spec.containers: expected list, got &{map[k:map[a:b] key:map[]]}".into(),
        ),
        (
            "two Go values in a set are the same item",
            "Object{metadata: Object.metadata{finalizers: [dyn(null), dyn(2u)]}}",
            "errors:\n  .metadata.finalizers[={{undefined}}]: expected string, got &value.valueUnstructured{Value:0}\n  .metadata.finalizers: duplicate entries for key [={{undefined}}]\n  .metadata.finalizers[={{undefined}}]: expected string, got &value.valueUnstructured{Value:0x2}"
                .into(),
        ),
        (
            "a null in a list map",
            "Object{spec: Object.spec{containers: [null]}}",
            ".spec.containers: element 0: associative list with keys may not have non-map elements"
                .into(),
        ),
        (
            "a null map key in a nested Object",
            "Object{spec: Object.spec{selector: Object.spec.selector{matchLabels: {null: 'a'}}}}",
            ".spec.selector: expected map, got &{fail to convert field \"matchLabels\": map key '\\x00' is of type types.Null, not string}"
                .into(),
        ),
    ];
    for (name, expression, want) in cases {
        let out = run(&[upstream(policy("p", vec![apply_config(expression)]))]);
        let got = out.denial.as_ref().map(|d| d.message.as_str());
        assert_eq!(got, Some(format!("{prefix}{want}").as_str()), "{name}");
        assert!(out.object(&pod()).is_none(), "{name}: nothing changes");
    }
    // At the root, upstream's conversion fails whole.
    let out = run(&[upstream(policy(
        "p",
        vec![apply_config("Object{metadata: {1: 'a'}}")],
    ))]);
    assert_eq!(
        out.denial.as_ref().map(|d| d.message.as_str()),
        Some(
            "policy 'p' with binding 'p-b' denied request: invalid return type: *dynamic.ObjectVal"
        )
    );
    // Data of the object converts as it is, and so do optionals.
    let out = run(&[upstream(policy(
        "p",
        vec![apply_config(
            "Object{metadata: Object.metadata{labels: object.metadata.labels}, spec: Object.spec{config: {'copy': object.spec.containers, 'none': dyn(optional.none()), 'some': dyn(optional.of(1))}}}",
        )],
    ))]);
    assert!(out.allowed(), "{:?}", out.denial);
    let object = out.object(&pod()).expect("mutated");
    assert_eq!(object["spec"]["config"]["some"], json!(1));
    assert_eq!(object["spec"]["config"]["none"], json!(null));
}

#[test]
fn an_invocation_whose_mutations_undo_each_other_leaves_the_object_unchanged() {
    let undoing = policy(
        "p",
        vec![
            apply_config("Object{metadata: Object.metadata{labels: {'tmp': 'x'}}}"),
            json_patch("[JSONPatch{op: 'remove', path: '/metadata/labels/tmp'}]"),
        ],
    );
    let out = run(&[upstream(undoing)]);
    assert!(out.allowed(), "{:?}", out.denial);
    assert_eq!(out.invocations.len(), 1);
    assert!(!out.invocations[0].changed, "{:?}", out.invocations);
    assert!(
        out.object(&pod()).is_none() && out.patch.is_empty(),
        "{out:?}"
    );
    // Writing other members between them: the invocation changed the object.
    let changing = policy(
        "p",
        vec![
            apply_config("Object{metadata: Object.metadata{labels: {'tmp': 'x'}}}"),
            json_patch("[JSONPatch{op: 'add', path: '/spec/replicas', value: 7}]"),
            json_patch("[JSONPatch{op: 'remove', path: '/metadata/labels/tmp'}]"),
        ],
    );
    let out = run(&[upstream(changing)]);
    assert!(out.invocations[0].changed, "{:?}", out.invocations);
    assert_eq!(
        out.patch.ops(),
        [json!({"op": "replace", "path": "/spec/replicas", "value": 7})]
    );
}

#[test]
fn configuration_errors_and_immediate_errors() {
    let mut spec = policy("p", vec![apply_config("Object{}")]);
    spec.match_constraints = None;
    let out = run(&[upstream(spec)]);
    let d = out.denial.expect("denied");
    assert_eq!(
        (d.code, d.reason.as_str(), d.message.as_str()),
        (
            403,
            "Forbidden",
            "policy \"p\" denied request: failed to configure policy: policy contained no match constraints, a required field"
        )
    );
    let p = upstream(policy("p", vec![json_patch("[]")]));
    let none = Schemas(None);
    let d = run_on(&[p], &pod(), &none).denial.expect("denied");
    assert_eq!(
        (d.code, d.message.as_str()),
        (
            503,
            "Resource kind /v1, Kind=Pod not found. There can be a delay between when CustomResourceDefinitions are created and when they are available."
        )
    );
    let p = upstream(policy(
        "p",
        vec![json_patch(
            "[JSONPatch{op: 'add', path: '/spec/containers/0/portz', value: 1}]",
        )],
    ));
    let d = run(&[p]).denial.expect("denied");
    assert_eq!(
        (d.code, d.message.as_str()),
        (
            500,
            "Internal error occurred: strict decoding error: unknown field \"spec.containers[0].portz\""
        )
    );
    // After a first patch (or an apply configuration) the object is known to declare every
    // member, and a later patch's unknown field is still found where it wrote it.
    for first in [
        json_patch("[JSONPatch{op: 'add', path: '/metadata/labels/a', value: 'b'}]"),
        apply_config("Object{metadata: Object.metadata{labels: {'c': 'd'}}}"),
    ] {
        let p = upstream(policy(
            "p",
            vec![
                first,
                json_patch(
                    "[JSONPatch{op: 'test', path: '/metadata/name', value: 'web'}, JSONPatch{op: 'copy', from: '/spec/containers/0', path: '/spec/containers/1'}, JSONPatch{op: 'add', path: '/spec/containers/1/portz', value: 1}]",
                ),
            ],
        ));
        let d = run(&[p]).denial.expect("denied");
        assert_eq!(
            (d.code, d.message.as_str()),
            (
                500,
                "Internal error occurred: strict decoding error: unknown field \"spec.containers[1].portz\""
            )
        );
    }
}

#[test]
fn what_a_patch_breaks_is_found_by_the_next_apply_configuration() {
    // The first apply configuration shows the object fits; the patch then removes a list-map
    // item's key; the next apply configuration checks where the patch wrote and fails.
    let label = |k: &str| {
        apply_config(&format!(
            "Object{{metadata: Object.metadata{{labels: {{'{k}': 'x'}}}}}}"
        ))
    };
    let p = upstream(policy(
        "p",
        vec![
            label("a"),
            json_patch("[JSONPatch{op: 'remove', path: '/spec/containers/0/name'}]"),
            label("b"),
        ],
    ));
    let d = run(&[p]).denial.expect("denied");
    assert_eq!(
        d.message,
        "policy 'p' with binding 'p-b' denied request: error applying patch: failed to convert original object to typed object: .spec.containers: element 0: associative list with keys has an element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)"
    );
}

#[test]
fn the_go_type_checks_after_a_mutation_see_every_place_written_since_they_last_looked() {
    // An apply configuration writes a number the Go type of an `int` field cannot hold (the
    // configuration's check only asks for a number); the next patch writes elsewhere, and the
    // check after it still finds it.
    let label = |k: &str| {
        json_patch(&format!(
            "[JSONPatch{{op: 'add', path: '/metadata/labels/{k}', value: 'x'}}]"
        ))
    };
    let p = upstream(policy(
        "p",
        vec![
            label("a"),
            apply_config("Object{spec: Object.spec{replicas: 1.5}}"),
            label("b"),
        ],
    ));
    let d = run(&[p]).denial.expect("denied");
    assert_eq!(
        (d.code, d.message.as_str()),
        (
            500,
            "Internal error occurred: json: cannot unmarshal number 1.5 into Go struct field Pod.spec.replicas of type int"
        )
    );
    // A later apply configuration's integer too wide for its int32 field (2^32 + 81) is cut
    // where it wrote it.
    let p = upstream(policy(
        "p",
        vec![
            apply_config("Object{metadata: Object.metadata{labels: {'c': 'd'}}}"),
            apply_config(
                "Object{spec: Object.spec{containers: [Object.spec.containers{name: 'main', ports: [Object.spec.containers.ports{containerPort: 4294967377, protocol: 'TCP'}]}]}}",
            ),
        ],
    ));
    let out = run(&[p]);
    assert!(out.allowed(), "{:?}", out.denial);
    assert_eq!(
        out.object(&pod()).expect("mutated")["spec"]["containers"][0]["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 81, "protocol": "TCP"}])
    );
}

#[test]
fn the_request_object_is_taken_as_its_go_type_encoded_it() {
    // kube-apiserver encodes the object it sends from the kind's Go type: it decodes, its
    // int32 fields fit, it has no undeclared field and no empty optional one, and it fits the
    // kind's schema but for list items that cannot be keyed. Only what the mutations write is
    // checked, so a hand-made object that breaks this is mutated as given.
    let mut object = pod();
    object["spec"]["replicas"] = json!(1.5);
    object["spec"]["undeclared"] = json!(true);
    object["spec"]["volumes"] = json!([]);
    object["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(4_294_967_377_i64);
    let p = upstream(policy(
        "p",
        vec![
            json_patch("[JSONPatch{op: 'add', path: '/metadata/labels/a', value: 'x'}]"),
            apply_config("Object{metadata: Object.metadata{labels: {'b': 'y'}}}"),
        ],
    ));
    let schemas = Schemas(Some(KindSchema {
        schema: pod_schema(),
        built_in: true,
    }));
    let out = run_on(&[p], &object, &schemas);
    assert!(out.allowed(), "{:?}", out.denial);
    let mut want = object.clone();
    want["metadata"]["labels"]["a"] = json!("x");
    want["metadata"]["labels"]["b"] = json!("y");
    assert_eq!(out.object(&object), Some(want));
    assert_eq!(
        out.patch.ops(),
        [
            json!({"op": "add", "path": "/metadata/labels/a", "value": "x"}),
            json!({"op": "add", "path": "/metadata/labels/b", "value": "y"})
        ]
    );
    // A list item that cannot be keyed (a container without a name) fails the apply
    // configuration's typed conversion, as in-tree, wherever it stands.
    let mut unnamed = object.clone();
    unnamed["spec"]["containers"]
        .as_array_mut()
        .expect("containers")
        .push(json!({"image": "sidecar"}));
    let p = upstream(policy(
        "p",
        vec![apply_config(
            "Object{metadata: Object.metadata{labels: {'b': 'y'}}}",
        )],
    ));
    let d = run_on(&[p], &unnamed, &schemas).denial.expect("denied");
    assert_eq!(
        (d.code, d.message.as_str()),
        (
            403,
            "policy 'p' with binding 'p-b' denied request: error applying patch: failed to convert original object to typed object: .spec.containers: element 1: associative list with keys has an element that omits all key fields [\"name\"] (and doesn't have default values for any key fields)"
        )
    );
    // What a patch writes is checked all the same.
    let p = upstream(policy(
        "p",
        vec![json_patch(
            "[JSONPatch{op: 'add', path: '/spec/undeclared2', value: 1}]",
        )],
    ));
    let d = run_on(&[p], &object, &schemas).denial.expect("denied");
    assert_eq!(
        (d.code, d.message.as_str()),
        (
            500,
            "Internal error occurred: strict decoding error: unknown field \"spec.undeclared2\""
        )
    );
}

#[test]
fn mutating_twice_gives_the_same_object() {
    let sidecar = "Object{spec: Object.spec{initContainers: [Object.spec.initContainers{name: 'mesh-proxy', image: 'proxy:1', args: ['--in']}]}}";
    let policies = [
        bound(
            policy("p", vec![apply_config(sidecar)]),
            ApplySemantics::ServerSide,
        ),
        upstream(policy(
            "q",
            vec![json_patch(
                "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('example.com/x'), value: 'y'}]",
            )],
        )),
    ];
    let once = run(&policies);
    assert!(once.allowed(), "{:?}", once.denial);
    let object = once.object(&pod()).expect("mutated");
    assert_eq!(
        object["spec"]["initContainers"],
        json!([{"name": "mesh-proxy", "image": "proxy:1", "args": ["--in"]}])
    );
    assert_eq!(object["metadata"]["labels"]["example.com/x"], json!("y"));
    let schemas = Schemas(Some(KindSchema {
        schema: pod_schema(),
        built_in: true,
    }));
    let twice = run_on(&policies, &object, &schemas);
    assert!(twice.allowed());
    assert_eq!(
        twice.object(&object),
        None,
        "the second pass changes nothing"
    );
    assert!(twice.patch.is_empty());
}

#[test]
fn an_if_needed_policy_runs_again_when_the_object_changed_after_it_was_invoked() {
    use crate::model::ReinvocationPolicy;
    // A policy of one apply configuration.
    let applying = |name: &str, config: &str, reinvocation| {
        let mut p = policy(name, vec![apply_config(config)]);
        p.reinvocation_policy = reinvocation;
        p
    };
    // Appends "x" to a label: not idempotent, so every run shows.
    let append = |name: &str, reinvocation| {
        applying(
            name,
            "Object{metadata: Object.metadata{labels: {'count': ('count' in object.metadata.labels ? object.metadata.labels['count'] : '') + 'x'}}}",
            reinvocation,
        )
    };
    let count = |out: &MutationOutcome| {
        out.object(&pod())
            .map(|o| o["metadata"]["labels"]["count"].clone())
    };

    // Never: once. IfNeeded: it changed the object itself, so once more (kube-apiserver 1.36.3
    // gives `xx` for this policy alone).
    assert_eq!(
        count(&run(&[upstream(append("p", ReinvocationPolicy::Never))])),
        Some(json!("x"))
    );
    let twice = run(&[upstream(append("p", ReinvocationPolicy::IfNeeded))]);
    assert_eq!(count(&twice), Some(json!("xx")));
    assert_eq!(twice.invocations.len(), 2);

    // An IfNeeded policy that changes nothing, followed by one that changes the object: the
    // first runs again (and sees the change); the second, Never, does not.
    let reader = applying(
        "a",
        "Object{metadata: Object.metadata{labels: {'seen': 'count' in object.metadata.labels ? 'yes' : 'no'}}}",
        ReinvocationPolicy::IfNeeded,
    );
    let out = run(&[
        upstream(reader),
        upstream(append("b", ReinvocationPolicy::Never)),
    ]);
    let object = out.object(&pod()).expect("mutated");
    assert_eq!(object["metadata"]["labels"]["seen"], json!("yes"));
    assert_eq!(object["metadata"]["labels"]["count"], json!("x"));
    let order: Vec<&str> = out.invocations.iter().map(|i| &*i.policy).collect();
    assert_eq!(order, ["a", "b", "a"]);

    // Nothing changed after the IfNeeded policy was given the object (a later policy wrote a
    // label back as it was): it does not run again.
    let same = |name: &str, reinvocation| {
        applying(
            name,
            "Object{metadata: Object.metadata{labels: {'app': object.metadata.labels.app}}}",
            reinvocation,
        )
    };
    let out = run(&[
        upstream(same("a", ReinvocationPolicy::IfNeeded)),
        upstream(same("b", ReinvocationPolicy::Never)),
    ]);
    assert!(out.object(&pod()).is_none(), "{out:?}");
    let order: Vec<&str> = out.invocations.iter().map(|i| &*i.policy).collect();
    assert_eq!(order, ["a", "b"]);
}

#[test]
fn the_request_object_is_decoded_only_where_matching_reads_it() {
    let text = pod_create(&pod()).to_string();
    let labelled = apply_config("Object{metadata: Object.metadata{labels: {'seen': 'yes'}}}");
    let plain = upstream(policy("p", vec![labelled.clone()]));
    let mut selecting = policy("p", vec![labelled]);
    if let Some(c) = &mut selecting.match_constraints {
        c.object_selector.match_labels = [("app".to_string(), "web".to_string())].into();
    }
    let schemas = Schemas(Some(KindSchema {
        schema: pod_schema(),
        built_in: true,
    }));
    let mut patches = Vec::new();
    for (bound, reads) in [(plain, false), (upstream(selecting), true)] {
        let received: crate::received::ReceivedRequest =
            serde_json::from_str(&text).expect("a request");
        let req = received.request().expect("valid");
        let out = mutate_in_ns([&bound], &req, &schemas);
        assert_eq!(received.object_tree_built(), reads);
        assert_eq!(
            out.object(&pod()).expect("mutated")["metadata"]["labels"]["seen"],
            "yes"
        );
        patches.push(out.patch);
    }
    assert_eq!(patches[0], patches[1]);
    assert_eq!(
        patches[0].ops(),
        [json!({"op": "add", "path": "/metadata/labels/seen", "value": "yes"})]
    );
}

#[test]
fn a_mutation_errors_metric_type_is_its_variants_not_its_texts() {
    use super::MutationError;
    use crate::compile::ExprError;
    use crate::validate::CheckError;
    let cases = [
        (
            MutationError::Compile(ExprError::Compile("x".into())),
            ErrorType::CompileError,
        ),
        (
            MutationError::Compile(ExprError::Program("x".into())),
            ErrorType::InvalidError,
        ),
        (
            MutationError::Eval(CheckError::OutOfBudget),
            ErrorType::OutOfBudget,
        ),
        (MutationError::Missing, ErrorType::InvalidError),
        (
            MutationError::JsonPatch(super::json_patch::PatchError::Failed("compilation".into())),
            ErrorType::InvalidError,
        ),
    ];
    for (error, want) in cases {
        assert_eq!(error.error_type(), want, "{error}");
    }
}

/// An IfNeeded policy of failurePolicy Ignore whose JSON patch removed a label, invoked again
/// (it changed the object) and failing then (the label is gone): the object keeps the
/// removal (found by the generated differential, seed 12, case 294: the ConfigMap's data
/// came back).
#[test]
fn a_failed_patch_of_a_reinvocation_keeps_what_the_first_invocation_did() {
    use crate::model::ReinvocationPolicy;
    let mut p = policy(
        "p",
        vec![
            apply_config("Object{metadata: Object.metadata{labels: {'a': string([1][5])}}}"),
            json_patch("[JSONPatch{op: 'remove', path: '/metadata/labels/app'}]"),
        ],
    );
    p.reinvocation_policy = ReinvocationPolicy::IfNeeded;
    p.failure_policy = FailurePolicy::Ignore;
    let out = run(&[upstream(p)]);
    assert!(out.allowed(), "{:?}", out.denial);
    assert_eq!(out.invocations.len(), 2);
    let object = out.object(&pod()).expect("mutated");
    assert!(object["metadata"].get("labels").is_none(), "{object}");
}

/// Once a mutation applied, kube-apiserver runs its policies a second time and evaluates every
/// policy's match conditions again, `Never` ones too, on the object as it now is: an error
/// there fails the request under failurePolicy Fail (found by the generated differential,
/// seed 13, case 839: a policy removing the labels its match condition reads).
#[test]
fn the_second_pass_evaluates_every_policys_match_conditions_again() {
    let mut p = policy(
        "p",
        vec![json_patch(
            "[JSONPatch{op: 'remove', path: '/metadata/labels'}]",
        )],
    );
    p.match_conditions = vec![NamedExpression {
        name: "labelled".into(),
        expression: "object.metadata.labels.exists(x, true)".into(),
    }];
    let out = run(&[upstream(p.clone())]);
    let denial = out.denial.expect("denied in the second pass");
    assert_eq!(
        denial.message,
        "policy 'p' with binding 'p-b' denied request: expression 'object.metadata.labels.exists(x, true)' resulted in error: no such key: labels"
    );
    assert_eq!((denial.code, denial.reason.as_str()), (403, "Invalid"));
    // Under Ignore the error is dropped and the mutation kept; the policy ran once.
    p.failure_policy = FailurePolicy::Ignore;
    let out = run(&[upstream(p)]);
    assert!(out.allowed());
    assert_eq!(out.invocations.len(), 1);
    assert!(
        out.object(&pod()).expect("mutated")["metadata"]
            .get("labels")
            .is_none()
    );
}

/// A patch emptying a built-in kind's optional map, which the Go encoding then leaves out:
/// the response's patch removes the map (found by the generated differential, seed 14, case
/// 634: a ConfigMap's `data` emptied by `remove /data/k` was sent back unchanged).
#[test]
fn a_map_emptied_and_left_out_is_removed_by_the_response() {
    let out = run(&[upstream(policy(
        "p",
        vec![json_patch(
            "[JSONPatch{op: 'remove', path: '/metadata/labels/app'}]",
        )],
    ))]);
    assert!(out.allowed(), "{:?}", out.denial);
    assert!(
        out.patch
            .ops()
            .contains(&json!({"op": "remove", "path": "/metadata/labels"})),
        "{:?}",
        out.patch
    );
    let object = out.object(&pod()).expect("mutated");
    assert!(object["metadata"].get("labels").is_none(), "{object}");
}

/// `kubectl exec p -c a -- ls` in `ns`, as kube-apiserver sends the CONNECT.
fn exec_connect() -> Value {
    json!({"uid": "u", "operation": "CONNECT", "namespace": "ns", "name": "p",
        "kind": {"group": "", "version": "v1", "kind": "PodExecOptions"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "subResource": "exec",
        "object": {"kind": "PodExecOptions", "apiVersion": "v1", "stdout": true,
            "container": "a", "command": ["ls"]},
        "oldObject": null})
}

/// A policy `name` for CONNECT on `pods/exec`, failing closed, with this one mutation.
fn on_exec(name: &str, mutation: Mutation) -> BoundMutatingPolicy {
    let mut spec = policy(name, vec![mutation]);
    if let Some(c) = spec.match_constraints.as_mut() {
        c.resource_rules[0].operations = vec!["CONNECT".into()];
        c.resource_rules[0].resources = vec!["pods/exec".into()];
    }
    spec.failure_policy = FailurePolicy::Fail;
    upstream(spec)
}

/// As in-tree (seen on kube-apiserver 1.36.3): a JSON patch changes a connection's options,
/// decoded strictly into their Go type though the cluster publishes no schema of them; an
/// apply configuration fails, as server-side apply has no typed model of them.
#[test]
fn a_connections_options_take_json_patches_and_refuse_apply_configurations() {
    let raw = exec_connect();
    let req = Request::from_json(&raw).expect("valid request");
    let no_schemas = Schemas(None);
    let command = on_exec(
        "command",
        json_patch(
            "[JSONPatch{op: 'replace', path: '/command', value: ['echo', object.kind + '/' + object.apiVersion + ' ' + string(oldObject == null) + ' ' + string(has(object.tty))]}, JSONPatch{op: 'add', path: '/tty', value: true}]",
        ),
    );
    let out = mutate_in_ns([&command], &req, &no_schemas);
    assert_eq!(out.denial, None);
    assert_eq!(
        out.object(&raw["object"]),
        Some(
            json!({"kind": "PodExecOptions", "apiVersion": "v1", "stdout": true,
            "container": "a", "command": ["echo", "PodExecOptions/v1 true false"], "tty": true})
        )
    );
    assert!(!out.patch.is_empty());

    let apply = on_exec("apply", apply_config("Object{container: 'b'}"));
    let d = mutate_in_ns([&apply], &req, &no_schemas)
        .denial
        .expect("denied");
    assert_eq!(
        (d.code, d.reason.as_str(), d.message.as_str()),
        (
            403,
            "Invalid",
            "policy 'apply' with binding 'apply-b' denied request: error applying patch: failed to convert patch object to typed object: no corresponding type for /v1, Kind=PodExecOptions"
        )
    );

    let unknown = on_exec(
        "unknown",
        json_patch("[JSONPatch{op: 'add', path: '/bogus', value: 'x'}]"),
    );
    let d = mutate_in_ns([&unknown], &req, &no_schemas)
        .denial
        .expect("denied");
    assert_eq!(
        (d.code, d.message.as_str()),
        (
            500,
            "Internal error occurred: strict decoding error: unknown field \"bogus\""
        )
    );
    let mismatch = on_exec(
        "mismatch",
        json_patch("[JSONPatch{op: 'replace', path: '/stdout', value: 'x'}]"),
    );
    let d = mutate_in_ns([&mismatch], &req, &no_schemas)
        .denial
        .expect("denied");
    assert_eq!(
        (d.code, d.message.as_str()),
        (
            500,
            "Internal error occurred: json: cannot unmarshal string into Go struct field PodExecOptions.stdout of type bool"
        )
    );
}

#[test]
fn a_patch_of_one_string_decides_as_the_general_patch_does() {
    // Each operation, whether it changes the Pod, and the code of its denial; a leading
    // `test` that holds sends the same operation the general way.
    let cases = [
        (
            "JSONPatch{op: 'add', path: '/metadata/labels/team', value: 'a'}",
            true,
            None,
        ),
        (
            "JSONPatch{op: 'add', path: '/metadata/labels/app', value: 'web'}",
            false,
            None,
        ),
        (
            "JSONPatch{op: 'replace', path: '/metadata/labels/app', value: 'api'}",
            true,
            None,
        ),
        (
            "JSONPatch{op: 'replace', path: '/metadata/labels/absent', value: 'x'}",
            true,
            None,
        ),
        (
            "JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b~c'), value: ''}",
            true,
            None,
        ),
        (
            "JSONPatch{op: 'add', path: '/metadata/name', value: 'other'}",
            true,
            None,
        ),
        (
            "JSONPatch{op: 'add', path: '/metadata/annotations/a', value: 'x'}",
            false,
            Some(403),
        ),
        (
            "JSONPatch{op: 'add', path: '/spec/replicas', value: '3'}",
            false,
            Some(500),
        ),
        (
            "JSONPatch{op: 'add', path: '/spec/undeclared', value: 'x'}",
            false,
            Some(500),
        ),
        (
            "JSONPatch{op: 'add', path: '/spec/surge', value: '10%'}",
            true,
            None,
        ),
        (
            "JSONPatch{op: 'add', path: '/spec/config/extra', value: 'x'}",
            false,
            Some(403),
        ),
        (
            "JSONPatch{op: 'add', path: '/metadata/finalizers/0', value: 'b'}",
            true,
            None,
        ),
        (
            "JSONPatch{op: 'add', path: 'metadata', value: 'x'}",
            false,
            Some(403),
        ),
    ];
    for (op, changes, code) in cases {
        let patch = |ops: &str| upstream(policy("p", vec![json_patch(&format!("[{ops}]"))]));
        let one = run(&[patch(op)]);
        let general = run(&[patch(&format!(
            "JSONPatch{{op: 'test', path: '/kind', value: 'Pod'}}, {op}"
        ))]);
        assert_eq!(one.patch, general.patch, "{op}");
        assert_eq!(one.denial, general.denial, "{op}");
        assert_eq!(one.invocations, general.invocations, "{op}");
        assert_eq!(!one.patch.is_empty(), changes, "{op}");
        assert_eq!(one.denial.map(|d| d.code), code, "{op}");
    }
    // After an apply configuration's number an `int` field cannot hold, the one string's
    // look at what was written since still finds it.
    let p = upstream(policy(
        "p",
        vec![
            apply_config("Object{spec: Object.spec{replicas: 1.5}}"),
            json_patch("[JSONPatch{op: 'add', path: '/metadata/labels/a', value: 'x'}]"),
        ],
    ));
    let denial = run(&[p]).denial.expect("denied");
    assert_eq!(denial.code, 500, "{}", denial.message);
}
