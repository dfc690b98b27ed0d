//! Table tests over hand-written OpenAPI fragments shaped like kube-apiserver's
//! `/openapi/v3` documents.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::model::{
    AuditAnnotation, MatchResources, Mutation, NamedExpression, PatchType, ResourceRule, Validation,
};
use crate::schema::{schemas_from_crd, schemas_from_openapi};

fn r(name: &str) -> String {
    format!("#/components/schemas/{name}")
}

fn object_meta() -> Value {
    json!({
        "description": "ObjectMeta is metadata that all persisted resources must have.",
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "generateName": {"type": "string"},
            "namespace": {"type": "string"},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
            "creationTimestamp": {"allOf": [{"$ref": r("io.k8s.apimachinery.pkg.apis.meta.v1.Time")}]}
        }
    })
}

/// `/openapi/v3/apis/apps/v1`, trimmed.
fn apps_v1() -> Value {
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.36.3"}, "paths": {},
    "components": {"schemas": {
        "io.k8s.api.apps.v1.Deployment": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"default": {}, "allOf": [{"$ref": r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}]},
                "spec": {"default": {}, "allOf": [{"$ref": r("io.k8s.api.apps.v1.DeploymentSpec")}]}
            },
            "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "Deployment", "version": "v1"}]
        },
        "io.k8s.api.apps.v1.DeploymentSpec": {
            "type": "object",
            "required": ["selector", "template"],
            "properties": {
                "replicas": {"type": "integer", "format": "int32"},
                "paused": {"type": "boolean"},
                "strategy": {"default": {}, "allOf": [{"$ref": r("io.k8s.api.apps.v1.DeploymentStrategy")}]},
                "template": {"default": {}, "allOf": [{"$ref": r("io.k8s.api.core.v1.PodTemplateSpec")}]}
            }
        },
        "io.k8s.api.apps.v1.DeploymentStrategy": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "enum": ["Recreate", "RollingUpdate"]},
                "rollingUpdate": {"type": "object", "properties": {
                    "maxSurge": {"allOf": [{"$ref": r("io.k8s.apimachinery.pkg.util.intstr.IntOrString")}]}
                }}
            }
        },
        "io.k8s.api.apps.v1.ReplicaSet": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"default": {}, "allOf": [{"$ref": r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}]},
                "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "format": "int32"}}}
            },
            "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "ReplicaSet", "version": "v1"}]
        },
        "io.k8s.api.core.v1.PodTemplateSpec": {
            "type": "object",
            "properties": {
                "metadata": {"default": {}, "allOf": [{"$ref": r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}]},
                "spec": {"type": "object", "properties": {
                    "containers": {
                        "type": "array",
                        "items": {"default": {}, "allOf": [{"$ref": r("io.k8s.api.core.v1.Container")}]},
                        "x-kubernetes-list-map-keys": ["name"],
                        "x-kubernetes-list-type": "map"
                    }
                }}
            }
        },
        "io.k8s.api.core.v1.Container": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "default": ""},
                "image": {"type": "string"},
                "args": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "atomic"},
                "resources": {"type": "object", "properties": {
                    "limits": {"type": "object", "additionalProperties": {"$ref": r("io.k8s.apimachinery.pkg.api.resource.Quantity")}}
                }}
            }
        },
        "io.k8s.apimachinery.pkg.api.resource.Quantity": {
            "description": "Quantity is a fixed-point representation of a number.",
            "oneOf": [{"type": "string"}, {"type": "number"}]
        },
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
            "description": "IntOrString is a type that can hold an int32 or a string.",
            "format": "int-or-string",
            "oneOf": [{"type": "integer"}, {"type": "string"}]
        },
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": object_meta(),
        "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"}
    }}})
}

/// `/openapi/v3/api/v1`, trimmed.
fn core_v1() -> Value {
    json!({"components": {"schemas": {
        "io.k8s.api.core.v1.ConfigMap": {
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"default": {}, "allOf": [{"$ref": r("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta")}]},
                "data": {"type": "object", "additionalProperties": {"type": "string", "default": ""}}
            },
            "x-kubernetes-group-version-kind": [{"group": "", "kind": "ConfigMap", "version": "v1"}]
        },
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": object_meta(),
        "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"}
    }}})
}

/// A CustomResourceDefinition with preserved unknown fields and an embedded resource.
fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {"spec": {"type": "object", "properties": {
                    "size": {"x-kubernetes-int-or-string": true},
                    "anything": {"x-kubernetes-preserve-unknown-fields": true},
                    "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"known": {"type": "string"}}},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                        "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }}}]
        }
    })
}

/// A cluster: served resources, kinds and schemas.
struct Cluster {
    resources: Vec<ApiResource>,
    schemas: BTreeMap<Gvk, Arc<Schema>>,
}

impl Cluster {
    fn new() -> Self {
        let mut schemas: BTreeMap<Gvk, Arc<Schema>> = BTreeMap::new();
        for doc in [apps_v1(), core_v1()] {
            schemas.extend(schemas_from_openapi(&doc).unwrap());
        }
        let meta = schemas[&Gvk::new("", "v1", "ConfigMap")]
            .property("metadata")
            .unwrap();
        schemas.extend(schemas_from_crd(&widget_crd(), Some(&meta)).unwrap());
        let res = |g: &str, v: &str, resource: &str, kind: Gvk| ApiResource {
            group: g.into(),
            version: v.into(),
            resource: resource.into(),
            kind,
        };
        let mut resources = vec![
            res("", "v1", "configmaps", Gvk::new("", "v1", "ConfigMap")),
            res("", "v1", "pods", Gvk::new("", "v1", "Pod")),
            res(
                "apps",
                "v1",
                "deployments",
                Gvk::new("apps", "v1", "Deployment"),
            ),
            res(
                "apps",
                "v1",
                "deployments/scale",
                Gvk::new("autoscaling", "v1", "Scale"),
            ),
            res(
                "apps",
                "v1",
                "replicasets",
                Gvk::new("apps", "v1", "ReplicaSet"),
            ),
            res(
                "example.com",
                "v1",
                "widgets",
                Gvk::new("example.com", "v1", "Widget"),
            ),
        ];
        for i in 0..12 {
            let kind = Gvk::new("many.io", "v1", &format!("K{i:02}"));
            resources.push(res("many.io", "v1", &format!("r{i:02}"), kind));
        }
        Cluster { resources, schemas }
    }
}

impl TypeSource for Cluster {
    fn kinds_for(&self, group: &str, version: &str, resource: &str) -> Vec<Gvk> {
        self.resources
            .iter()
            .filter(|r| r.group == group && r.version == version && r.resource == resource)
            .map(|r| r.kind.clone())
            .collect()
    }

    fn resources(&self) -> Vec<ApiResource> {
        self.resources.clone()
    }

    fn schema(&self, gvk: &Gvk) -> Option<Arc<Schema>> {
        self.schemas.get(gvk).cloned()
    }
}

fn rule(groups: &[&str], versions: &[&str], resources: &[&str]) -> ResourceRule {
    let strings = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
    ResourceRule {
        operations: vec!["*".into()],
        api_groups: strings(groups),
        api_versions: strings(versions),
        resources: strings(resources),
        scope: "*".into(),
        ..ResourceRule::default()
    }
}

fn constraints(rules: Vec<ResourceRule>) -> Option<MatchResources> {
    Some(MatchResources {
        resource_rules: rules,
        ..MatchResources::default()
    })
}

fn deployments() -> Option<MatchResources> {
    constraints(vec![rule(&["apps"], &["v1"], &["deployments"])])
}

fn policy(validations: &[(&str, Option<&str>)]) -> ValidatingPolicySpec {
    ValidatingPolicySpec {
        name: "p".into(),
        match_constraints: deployments(),
        validations: validations
            .iter()
            .map(|(e, m)| Validation {
                expression: e.to_string(),
                message_expression: m.map(String::from),
                ..Validation::default()
            })
            .collect(),
        ..ValidatingPolicySpec::default()
    }
}

/// `field_ref => warning` lines.
fn shown(warnings: &[ExpressionWarning]) -> Vec<String> {
    warnings
        .iter()
        .map(|w| format!("{} => {}", w.field_ref, w.warning))
        .collect()
}

fn kinds(list: &[Gvk]) -> Vec<String> {
    list.iter().map(ToString::to_string).collect()
}

#[test]
fn an_undefined_field_is_reported_as_upstream_reports_it() {
    let report = check_validating(&policy(&[("object.replicas > 1", None)]), &Cluster::new());
    assert_eq!(
        report.expression_warnings,
        [ExpressionWarning {
            field_ref: "spec.validations[0].expression".into(),
            warning: "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas > 1\n | ......^\n".into(),
        }]
    );
    assert_eq!(kinds(&report.checked), ["apps/v1, Kind=Deployment"]);
    assert!(report.additional_warnings.is_empty());
}

#[test]
fn validations_and_messages_are_checked_against_the_schema() {
    let cases: &[(&str, Option<&str>, &[&str])] = &[
        ("object.spec.replicas > 1", None, &[]),
        ("object.metadata.namespace == 'x'", None, &[]),
        ("object.metadata.labels['app'] == 'web'", None, &[]),
        (
            "object.spec.template.spec.containers.all(c, c.image.startsWith('r/'))",
            None,
            &[],
        ),
        (
            "object.spec.replicas == 'one'",
            None,
            &[
                "spec.validations[0].expression => apps/v1, Kind=Deployment: ERROR: <input>:1:22: found no matching overload for '_==_' applied to '(int, string)'\n | object.spec.replicas == 'one'\n | .....................^\n",
            ],
        ),
        // Upstream does not enforce result types, so a string messageExpression and an int
        // one pass alike; an ill-typed one does not.
        ("true", Some("object.spec.replicas"), &[]),
        (
            "true",
            Some("'replicas: ' + object.spec.replicas"),
            &[
                "spec.validations[0].messageExpression => apps/v1, Kind=Deployment: ERROR: <input>:1:14: found no matching overload for '_+_' applied to '(string, int)'\n | 'replicas: ' + object.spec.replicas\n | .............^\n",
            ],
        ),
        // int-or-string is dyn; quantities are not exposed; timestamps are typed.
        ("object.spec.strategy.rollingUpdate.maxSurge > 1", None, &[]),
        (
            "object.spec.template.spec.containers[0].resources.limits.cpu == '1'",
            None,
            &[
                "spec.validations[0].expression => apps/v1, Kind=Deployment: ERROR: <input>:1:50: undefined field 'limits'\n | object.spec.template.spec.containers[0].resources.limits.cpu == '1'\n | .................................................^\n",
            ],
        ),
        (
            "object.metadata.creationTimestamp < now",
            None,
            &[
                "spec.validations[0].expression => apps/v1, Kind=Deployment: ERROR: <input>:1:37: undeclared reference to 'now' (in container '')\n | object.metadata.creationTimestamp < now\n | ....................................^\n",
            ],
        ),
        (
            "object.metadata.creationTimestamp < timestamp('2024-01-01T00:00:00Z')",
            None,
            &[],
        ),
        // Upstream declares authorizer without requestResource.
        (
            "authorizer.group('apps').resource('deployments').check('get').allowed()",
            None,
            &[],
        ),
    ];
    let cluster = Cluster::new();
    for (expression, message, want) in cases {
        let report = check_validating(&policy(&[(expression, *message)]), &cluster);
        assert_eq!(shown(&report.expression_warnings), *want, "{expression}");
    }
    let report = check_validating(
        &policy(&[("authorizer.requestResource.check('get').allowed()", None)]),
        &cluster,
    );
    assert_eq!(report.expression_warnings.len(), 1);
}

#[test]
fn each_failing_kind_is_one_paragraph() {
    let mut spec = policy(&[("object.spec.paused", None), ("object.spec.nope", None)]);
    spec.match_constraints = constraints(vec![rule(
        &["apps"],
        &["v1"],
        &["replicasets", "deployments"],
    )]);
    let report = check_validating(&spec, &Cluster::new());
    assert_eq!(
        shown(&report.expression_warnings),
        [
            "spec.validations[0].expression => apps/v1, Kind=ReplicaSet: ERROR: <input>:1:12: undefined field 'paused'\n | object.spec.paused\n | ...........^\n",
            "spec.validations[1].expression => apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'nope'\n | object.spec.nope\n | ...........^\n\n\
             apps/v1, Kind=ReplicaSet: ERROR: <input>:1:12: undefined field 'nope'\n | object.spec.nope\n | ...........^\n",
        ]
    );
    assert_eq!(
        kinds(&report.checked),
        ["apps/v1, Kind=Deployment", "apps/v1, Kind=ReplicaSet"]
    );
}

#[test]
fn params_are_typed_by_the_param_kind() {
    let mut spec = policy(&[
        ("object.spec.replicas <= int(params.data.max)", None),
        ("object.spec.replicas <= params.data.max", None),
        ("params.spec.x == 1", None),
    ]);
    spec.param_kind = Some(ParamKind {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
    });
    let cluster = Cluster::new();
    let report = check_validating(&spec, &cluster);
    assert_eq!(
        shown(&report.expression_warnings),
        [
            "spec.validations[1].expression => apps/v1, Kind=Deployment: ERROR: <input>:1:22: found no matching overload for '_<=_' applied to '(int, string)'\n | object.spec.replicas <= params.data.max\n | .....................^\n",
            "spec.validations[2].expression => apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'spec'\n | params.spec.x == 1\n | ......^\n",
        ]
    );
    // An unknown paramKind is dyn; no paramKind leaves params undeclared.
    spec.param_kind = Some(ParamKind {
        api_version: "example.com/v9".into(),
        kind: "Missing".into(),
    });
    assert!(
        check_validating(&spec, &cluster)
            .expression_warnings
            .is_empty()
    );
    spec.param_kind = None;
    let report = check_validating(&spec, &cluster);
    assert_eq!(report.expression_warnings.len(), 3);
    assert!(
        report.expression_warnings[0]
            .warning
            .contains("undeclared reference to 'params'")
    );
}

#[test]
fn variables_are_typed_and_their_own_issues_reported_beyond_upstream() {
    let mut spec = policy(&[
        ("variables.replicas > 'a'", None),
        ("variables.broken == 1", None),
    ]);
    spec.variables = vec![
        NamedExpression {
            name: "replicas".into(),
            expression: "object.spec.replicas".into(),
        },
        NamedExpression {
            name: "broken".into(),
            expression: "object.spec.nope".into(),
        },
    ];
    let report = check_validating(&spec, &Cluster::new());
    assert_eq!(
        shown(&report.expression_warnings),
        [
            "spec.validations[0].expression => apps/v1, Kind=Deployment: ERROR: <input>:1:20: found no matching overload for '_>_' applied to '(int, string)'\n | variables.replicas > 'a'\n | ...................^\n"
        ]
    );
    assert_eq!(
        shown(&report.additional_warnings),
        [
            "spec.variables[1].expression => apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'nope'\n | object.spec.nope\n | ...........^\n"
        ]
    );
}

#[test]
fn match_conditions_audit_annotations_and_skipped_kinds_are_checked_beyond_upstream() {
    let mut spec = policy(&[("object.spec.paused", None)]);
    spec.match_constraints = constraints(vec![
        rule(&["apps"], &["v1"], &["deployments"]),
        rule(&["*"], &["v1"], &["replicasets"]),
    ]);
    spec.match_conditions = vec![
        NamedExpression {
            name: "requestResource".into(),
            expression: "authorizer.requestResource.check('get').allowed()".into(),
        },
        NamedExpression {
            name: "typo".into(),
            expression: "object.metadata.lables.size() > 0".into(),
        },
    ];
    spec.audit_annotations = vec![AuditAnnotation {
        key: "k".into(),
        value_expression: "object.spec.replicas".into(),
    }];
    let report = check_validating(&spec, &Cluster::new());
    assert!(report.expression_warnings.is_empty());
    assert_eq!(
        kinds(&report.checked),
        ["apps/v1, Kind=Deployment", "apps/v1, Kind=ReplicaSet"]
    );
    assert_eq!(
        shown(&report.additional_warnings),
        [
            "spec.matchConditions[1].expression => apps/v1, Kind=Deployment: ERROR: <input>:1:16: undefined field 'lables'\n | object.metadata.lables.size() > 0\n | ...............^\n\n\
             apps/v1, Kind=ReplicaSet: ERROR: <input>:1:16: undefined field 'lables'\n | object.metadata.lables.size() > 0\n | ...............^\n",
            "spec.validations[0].expression => apps/v1, Kind=ReplicaSet: ERROR: <input>:1:12: undefined field 'paused'\n | object.spec.paused\n | ...........^\n",
        ]
    );
}

#[test]
fn kind_selection_follows_upstream_and_extends_it() {
    let cluster = Cluster::new();
    let many: Vec<String> = (0..12).map(|i| format!("r{i:02}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let k = |i: usize| format!("many.io/v1, Kind=K{i:02}");
    /// Name, rules, upstream's kinds, celgate's further kinds.
    type Case = (&'static str, Vec<ResourceRule>, Vec<String>, Vec<String>);
    let cases: Vec<Case> = vec![
        (
            "specific",
            vec![rule(&["apps"], &["v1"], &["deployments"])],
            vec!["apps/v1, Kind=Deployment".into()],
            vec![],
        ),
        (
            "multiple",
            vec![rule(
                &["", "apps"],
                &["v1"],
                &["replicasets", "deployments", "pods"],
            )],
            vec![
                "/v1, Kind=Pod".into(),
                "apps/v1, Kind=Deployment".into(),
                "apps/v1, Kind=ReplicaSet".into(),
            ],
            vec![],
        ),
        (
            "all resources",
            vec![rule(&["apps"], &["v1"], &["*"])],
            vec![],
            vec![
                "apps/v1, Kind=Deployment".into(),
                "apps/v1, Kind=ReplicaSet".into(),
            ],
        ),
        (
            "sub resources",
            vec![rule(&["apps"], &["v1"], &["deployments/scale"])],
            vec![],
            vec!["autoscaling/v1, Kind=Scale".into()],
        ),
        (
            "mixtures",
            vec![
                rule(
                    &["apps"],
                    &["v1"],
                    &["deployments", "*/scale", "replicasets"],
                ),
                rule(&["*"], &["v1"], &["configmaps"]),
            ],
            vec![
                "apps/v1, Kind=Deployment".into(),
                "apps/v1, Kind=ReplicaSet".into(),
            ],
            vec![
                "/v1, Kind=ConfigMap".into(),
                "autoscaling/v1, Kind=Scale".into(),
            ],
        ),
        (
            "more than ten kinds in a rule end the selection",
            vec![
                rule(&["many.io"], &["v1"], &many),
                rule(&["apps"], &["v1"], &["deployments"]),
            ],
            (0..10).map(k).collect(),
            vec!["apps/v1, Kind=Deployment".into(), k(10), k(11)],
        ),
    ];
    for (name, rules, upstream, additional) in cases {
        let selection = kinds_to_check(constraints(rules).as_ref(), &cluster);
        assert_eq!(kinds(&selection.upstream), upstream, "{name}");
        assert_eq!(kinds(&selection.additional), additional, "{name}");
        assert!(
            selection.skipped.is_empty(),
            "{name}: {:?}",
            selection.skipped
        );
    }

    let selection = kinds_to_check(None, &cluster);
    assert_eq!(selection.all().count(), 0);
    assert_eq!(selection.skipped[0].what, "spec.matchConstraints");
    let selection = kinds_to_check(
        constraints(vec![
            rule(&["apps"], &["v1"], &["deployments"]),
            rule(&["nowhere.io"], &["v1"], &["things"]),
        ])
        .as_ref(),
        &cluster,
    );
    assert_eq!(
        selection.skipped,
        [SkippedKind {
            what: "spec.matchConstraints.resourceRules[1]".into(),
            reason: "it matches no resource the cluster serves".into(),
        }]
    );
}

#[test]
fn celgate_checks_at_most_fifty_kinds_and_says_which_it_skipped() {
    let mut cluster = Cluster::new();
    for i in 0..60 {
        cluster.resources.push(ApiResource {
            group: "wide.io".into(),
            version: "v1".into(),
            resource: format!("w{i:02}"),
            kind: Gvk::new("wide.io", "v1", &format!("W{i:02}")),
        });
    }
    let mut spec = policy(&[("true", None)]);
    spec.match_constraints = constraints(vec![
        rule(&["apps"], &["v1"], &["deployments"]),
        rule(&["*"], &["*"], &["*"]),
    ]);
    let selection = kinds_to_check(spec.match_constraints.as_ref(), &cluster);
    assert_eq!(selection.all().count(), MAX_KINDS);
    let past_cap: Vec<&SkippedKind> = selection
        .skipped
        .iter()
        .filter(|s| s.reason == "celgate checks a policy against at most 50 kinds")
        .collect();
    // 1 + 4 served elsewhere + 12 + 60 kinds; 50 are checked.
    assert_eq!(past_cap.len(), 77 - MAX_KINDS);
    let report = check_validating(&spec, &cluster);
    // Only the built-in kinds and the CRD have schemas.
    assert_eq!(
        kinds(&report.checked),
        [
            "apps/v1, Kind=Deployment",
            "/v1, Kind=ConfigMap",
            "apps/v1, Kind=ReplicaSet",
            "example.com/v1, Kind=Widget",
        ]
    );
    assert!(report.skipped.iter().any(|s| s.what == "/v1, Kind=Pod"
        && s.reason == "the cluster publishes no OpenAPI schema for this kind"));
}

#[test]
fn custom_resources_preserve_unknown_fields_and_embed_resources() {
    let mut spec = policy(&[]);
    spec.match_constraints = constraints(vec![rule(&["example.com"], &["v1"], &["widgets"])]);
    let cases: &[(&str, &str)] = &[
        ("object.spec.size == 1 || object.spec.size == 'one'", ""),
        ("object.metadata.labels.size() > 0", ""),
        ("object.spec.open.known == 'x'", ""),
        (
            "object.spec.open.unknown == 'x'",
            "undefined field 'unknown'",
        ),
        ("object.spec.anything.x == 1", "undefined field 'anything'"),
        ("object.spec.template.metadata.name == 'x'", ""),
        ("object.spec.template.kind == 'Pod'", ""),
        ("object.spec.template.spec == 1", "undefined field 'spec'"),
    ];
    let cluster = Cluster::new();
    for (expression, want) in cases {
        spec.validations = vec![Validation {
            expression: expression.to_string(),
            ..Validation::default()
        }];
        let report = check_validating(&spec, &cluster);
        let got = report
            .expression_warnings
            .first()
            .map(|w| w.warning.clone())
            .unwrap_or_default();
        if want.is_empty() {
            assert_eq!(got, "", "{expression}");
        } else {
            assert!(got.contains(want), "{expression}: {got}");
        }
    }
}

#[test]
fn mutations_are_checked_against_the_kind_schema() {
    let mutation = |apply: Option<&str>, patch: Option<&str>| Mutation {
        patch_type: if apply.is_some() {
            PatchType::ApplyConfiguration
        } else {
            PatchType::JsonPatch
        },
        apply_configuration: apply.map(String::from),
        json_patch: patch.map(String::from),
    };
    let spec = MutatingPolicySpec {
        name: "m".into(),
        match_constraints: deployments(),
        mutations: vec![
            mutation(
                Some("Object{spec: Object.spec{replicas: object.spec.replicas + 1}}"),
                None,
            ),
            mutation(Some("Object{spec: Object.spec{replicsa: 2}}"), None),
            mutation(
                Some(
                    "Object{spec: Object.spec{template: Object.spec.template{spec: Object.spec.template.spec{containers: [Object.spec.template.spec.containers{name: 'a', imag: 'b'}]}}}}",
                ),
                None,
            ),
            mutation(
                None,
                Some(
                    "[JSONPatch{op: 'add', path: '/spec/replicas', value: object.spec.replicas + 'x'}]",
                ),
            ),
            mutation(
                None,
                Some(
                    "[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b'), value: 'c'}]",
                ),
            ),
        ],
        ..MutatingPolicySpec::default()
    };
    let report = check_mutating(&spec, &Cluster::new());
    assert!(report.expression_warnings.is_empty());
    let refs: Vec<&str> = report
        .additional_warnings
        .iter()
        .map(|w| w.field_ref.as_str())
        .collect();
    assert_eq!(
        refs,
        [
            "spec.mutations[1].applyConfiguration.expression",
            "spec.mutations[2].applyConfiguration.expression",
            "spec.mutations[3].jsonPatch.expression",
        ]
    );
    assert_eq!(
        report.additional_warnings[0].warning,
        "apps/v1, Kind=Deployment: ERROR: <input>:1:34: undefined field 'replicsa'\n | Object{spec: Object.spec{replicsa: 2}}\n | .................................^\n"
    );
    assert!(
        report.additional_warnings[1]
            .warning
            .contains("undefined field 'imag'")
    );
    assert!(
        report.additional_warnings[2]
            .warning
            .contains("found no matching overload for '_+_' applied to '(int, string)'")
    );
}

#[test]
fn matched_kinds_are_every_kind_the_resource_rules_can_match() {
    let cluster = Cluster::new();
    let deployment = "apps/v1, Kind=Deployment";
    let replica_set = "apps/v1, Kind=ReplicaSet";
    let scale = "autoscaling/v1, Kind=Scale";
    /// A case: its name, the resource rules and the kinds matched (sorted as `Gvk` sorts).
    type Case = (&'static str, Vec<ResourceRule>, Vec<&'static str>);
    let cases: Vec<Case> = vec![
        (
            "an exact rule",
            vec![rule(&["apps"], &["v1"], &["deployments"])],
            vec![deployment],
        ),
        (
            "several resources of the core group",
            vec![rule(&[""], &["v1"], &["configmaps", "pods"])],
            vec!["/v1, Kind=ConfigMap", "/v1, Kind=Pod"],
        ),
        (
            "a subresource is its discovery kind, not its resource's",
            vec![rule(&["apps"], &["v1"], &["deployments/scale"])],
            vec![scale],
        ),
        (
            "res/* is the resource and each of its subresources",
            vec![rule(&["apps"], &["v1"], &["deployments/*"])],
            vec![deployment, scale],
        ),
        (
            "* is every resource of the group, without subresources",
            vec![rule(&["apps"], &["v1"], &["*"])],
            vec![deployment, replica_set],
        ),
        (
            "*/* is every resource and subresource",
            vec![rule(&["apps"], &["v1"], &["*/*"])],
            vec![deployment, replica_set, scale],
        ),
        (
            "*/sub is that subresource of any resource, in any group",
            vec![rule(&["*"], &["*"], &["*/scale"])],
            vec![scale],
        ),
        (
            "wildcard groups and versions",
            vec![rule(&["*"], &["*"], &["deployments", "widgets"])],
            vec![deployment, "example.com/v1, Kind=Widget"],
        ),
        (
            "the rules' kinds together, each once",
            vec![
                rule(&["apps"], &["v1"], &["deployments"]),
                rule(&["apps"], &["v1"], &["deployments", "replicasets"]),
            ],
            vec![deployment, replica_set],
        ),
        (
            "a version the group does not serve",
            vec![rule(&["apps"], &["v2"], &["deployments"])],
            vec![],
        ),
        (
            "a resource no group serves",
            vec![rule(&["nowhere.io"], &["v1"], &["things"])],
            vec![],
        ),
        ("no resource rule", vec![], vec![]),
    ];
    for (name, rules, want) in cases {
        let found: Vec<String> = matched_kinds(constraints(rules).as_ref(), &cluster)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found, want, "{name}");
    }
    assert!(
        matched_kinds(None, &cluster).is_empty(),
        "no matchConstraints"
    );

    // excludeResourceRules do not narrow the set: a kind excluded for some requests (one
    // name, one operation) may still be mutated in others, and an extra schema costs nothing.
    let mut excluding = constraints(vec![rule(&["apps"], &["v1"], &["*"])]);
    if let Some(m) = excluding.as_mut() {
        m.exclude_resource_rules = vec![rule(&["apps"], &["v1"], &["replicasets"])];
    }
    let found: Vec<String> = matched_kinds(excluding.as_ref(), &cluster)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(found, [deployment, replica_set]);
}

#[test]
fn a_star_that_would_take_connections_in_tree_is_warned_about() {
    let mut spec = policy(&[("true", None)]);
    let mut connect = rule(&[""], &["v1"], &["pods/exec", "pods/attach"]);
    connect.operations = vec!["CONNECT".into()];
    spec.match_constraints = constraints(vec![
        rule(&[""], &["v1"], &["pods", "pods/status"]),
        rule(&["*"], &["*"], &["*/*"]),
        connect,
        rule(&[""], &["v1"], &["pods/portforward", "configmaps"]),
    ]);
    let report = check_validating(&spec, &Cluster::new());
    let fields: Vec<&str> = report
        .additional_warnings
        .iter()
        .filter(|w| w.warning.contains("includes CONNECT in-tree"))
        .map(|w| w.field_ref.as_str())
        .collect();
    // Not for `pods/status` (no connection), nor for a rule that names CONNECT.
    assert_eq!(
        fields,
        [
            "spec.matchConstraints.resourceRules[1].operations",
            "spec.matchConstraints.resourceRules[3].operations"
        ]
    );
    assert!(
        shown(&report.additional_warnings)
            .iter()
            .any(|w| w.contains(
                "connections (kubectl exec, attach, port-forward, proxy) to pods/portforward;"
            )),
        "{:?}",
        shown(&report.additional_warnings)
    );
}

#[test]
fn a_mutating_star_that_would_take_connections_in_tree_is_warned_about() {
    let mut connect = rule(&[""], &["v1"], &["pods/exec"]);
    connect.operations = vec!["CONNECT".into()];
    let spec = MutatingPolicySpec {
        match_constraints: constraints(vec![rule(&[""], &["v1"], &["pods/*"]), connect]),
        ..MutatingPolicySpec::default()
    };
    let report = check_mutating(&spec, &Cluster::new());
    let fields: Vec<&str> = report
        .additional_warnings
        .iter()
        .filter(|w| w.warning.contains("includes CONNECT in-tree"))
        .map(|w| w.field_ref.as_str())
        .collect();
    assert_eq!(
        fields,
        ["spec.matchConstraints.resourceRules[0].operations"]
    );
}

#[test]
fn autogen_variants_are_checked_against_their_controllers_schemas() {
    let mut spec = policy(&[("object.spec.containers.all(c, c.imagez != '')", None)]);
    spec.match_constraints = constraints(vec![rule(&[""], &["v1"], &["pods"])]);
    spec.autogen = Some("Deployment".into());
    let report = check_validating(&spec, &Cluster::new());
    assert_eq!(
        kinds(&report.checked),
        ["apps/v1, Kind=Deployment"],
        "the Pod has no schema here; the Deployment variant is checked"
    );
    assert_eq!(
        shown(&report.additional_warnings),
        [
            "spec.validations[0].expression (Pod template of Deployment) => apps/v1, Kind=Deployment: ERROR: <input>:1:47: undefined field 'imagez'\n | object.spec.template.spec.containers.all(c, (c.imagez != \"\"))\n | ..............................................^\n"
        ]
    );
    spec.autogen = Some("Deployment, Pods".into());
    let report = check_validating(&spec, &Cluster::new());
    assert_eq!(
        shown(&report.additional_warnings),
        [
            "metadata.annotations[admission.celgate.io/autogen] => annotation admission.celgate.io/autogen: unknown controller \"Pods\"; write all, none, or a comma-separated list of Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, CronJob"
        ]
    );
}
