//! The status differential: every policy of the table is applied twice to ONE control plane, as an
//! in-tree `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy (kube-controller-manager's
//! `validatingadmissionpolicy-status-controller` writes its status) and as an
//! `admission.celgate.io/v1` one (celgate writes its status). Once both statuses describe the
//! policy's generation, `status.typeChecking.expressionWarnings` must agree entry for entry: the
//! same fieldRefs in the same order and the same text, after upstream's generated type names
//! (`<Kind><nanoseconds>`, e.g. `Deployment123456789.spec`) are normalised to celgate's `<Kind>`.
//!
//! Upstream is the oracle, and each case also states which fieldRefs upstream warns on, so a case
//! that stops exercising what it is named for fails instead of comparing two empty lists. celgate's
//! checks beyond upstream (`additionalExpressionWarnings`) and its `Ready` and `TypeChecked`
//! conditions are asserted on the celgate side only. A second generation of some policies proves
//! that both re-check on every generation change.
//!
//! Prints a per-policy table of differences; the test requires 0.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use celgate_e2e::demo::{CELGATE_API, IN_TREE_API};
use celgate_e2e::{
    Celgate, Cluster, create_namespace, policies_api, version, wait_denied, wait_for,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

/// How long both status writers may take to describe every policy's generation.
const STATUS_WAIT: Duration = Duration::from_secs(120);

/// One policy of the table.
struct Case {
    /// The policy is `st-<name>` in both groups.
    name: &'static str,
    /// What the case is about.
    topic: &'static str,
    /// The policy's `spec`, YAML at column 0.
    spec: String,
    /// The fieldRefs of upstream's `expressionWarnings`, in order (facts read from
    /// kube-controller-manager 1.36).
    upstream: &'static [&'static str],
    /// Warnings celgate must report beyond upstream: `(fieldRef, a text the warning contains)`.
    additional: &'static [(&'static str, &'static str)],
    /// Text celgate's `TypeChecked` condition message must contain.
    type_checked: &'static [&'static str],
    /// Where an older kube-controller-manager warns otherwise (an upstream change that
    /// docs/limitations.md names; celgate keeps 1.36's warnings): before `1.<minor>`, upstream
    /// warns on these fieldRefs.
    before: Option<(u32, &'static [&'static str])>,
}

impl Case {
    fn new(name: &'static str, topic: &'static str, spec: String) -> Self {
        Case {
            name,
            topic,
            spec,
            upstream: &[],
            additional: &[],
            type_checked: &[],
            before: None,
        }
    }

    /// Before `1.<minor>`, upstream warns on `refs` instead.
    fn upstream_before(mut self, minor: u32, refs: &'static [&'static str]) -> Self {
        self.before = Some((minor, refs));
        self
    }

    /// What upstream warns on at the control plane's minor; whether that is an older
    /// minor's known difference from 1.36 (then celgate must still warn as 1.36 does).
    fn upstream_here(&self) -> (&'static [&'static str], bool) {
        match self.before {
            Some((minor, refs)) if version::minor() < minor => (refs, true),
            _ => (self.upstream, false),
        }
    }

    fn upstream(mut self, refs: &'static [&'static str]) -> Self {
        self.upstream = refs;
        self
    }

    fn additional(mut self, expected: &'static [(&'static str, &'static str)]) -> Self {
        self.additional = expected;
        self
    }

    fn type_checked(mut self, texts: &'static [&'static str]) -> Self {
        self.type_checked = texts;
        self
    }

    fn policy_name(&self) -> String {
        format!("st-{}", self.name)
    }

    fn yaml(&self, api: &str) -> String {
        policy_yaml(api, &self.policy_name(), &self.spec)
    }
}

fn policy_yaml(api: &str, name: &str, spec: &str) -> String {
    let spec: String = spec
        .trim_start_matches('\n')
        .lines()
        .map(|l| {
            if l.is_empty() {
                "\n".to_string()
            } else {
                format!("  {l}\n")
            }
        })
        .collect();
    format!(
        "apiVersion: {api}\nkind: ValidatingAdmissionPolicy\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

/// `matchConstraints` with one rule on CREATE and UPDATE.
fn rule(groups: &str, versions: &str, resources: &str) -> String {
    rules(&[(groups, versions, resources)])
}

/// `matchConstraints` with one rule per `(groups, versions, resources)`.
fn rules(list: &[(&str, &str, &str)]) -> String {
    let mut out = "matchConstraints:\n  resourceRules:\n".to_string();
    for (groups, versions, resources) in list {
        let _ = writeln!(
            out,
            "  - {{apiGroups: [{groups}], apiVersions: [{versions}], operations: [CREATE, UPDATE], resources: [{resources}]}}"
        );
    }
    out
}

fn deployments() -> String {
    rule("apps", "v1", "deployments")
}

/// `validations` from `(expression, messageExpression)`; expressions are YAML single-quoted.
fn validations(list: &[(&str, Option<&str>)]) -> String {
    let mut out = "validations:\n".to_string();
    for (expression, message) in list {
        let _ = writeln!(out, "- expression: {}", quote(expression));
        if let Some(m) = message {
            let _ = writeln!(out, "  messageExpression: {}", quote(m));
        }
    }
    out
}

fn v(expression: &str) -> String {
    validations(&[(expression, None)])
}

/// A YAML double-quoted scalar (JSON string syntax is valid YAML).
fn quote(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

const V0: &str = "spec.validations[0].expression";
const V0M: &str = "spec.validations[0].messageExpression";
const V1: &str = "spec.validations[1].expression";
const V1M: &str = "spec.validations[1].messageExpression";
const V2: &str = "spec.validations[2].expression";
const V3: &str = "spec.validations[3].expression";

/// Twelve core resources, more than upstream's limit of 10 kinds.
const TWELVE_CORE: &str = "configmaps, endpoints, events, limitranges, persistentvolumeclaims, podtemplates, pods, replicationcontrollers, resourcequotas, secrets, serviceaccounts, services";

/// CustomResourceDefinitions the table uses: `Limit` (cluster-scoped, a paramKind) and `Widget`
/// (namespaced, matched by policies).
const CRDS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: limits.status.example.com
spec:
  group: status.example.com
  scope: Cluster
  names: {plural: limits, singular: limit, kind: Limit, listKind: LimitList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              maxReplicas: {type: integer}
              image: {type: string}
              allowed: {type: array, items: {type: string}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.status.example.com
spec:
  group: status.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
              colour: {type: string, enum: [red, blue]}
              ports:
                type: array
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [name]
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    port: {type: integer}
              labels: {type: object, additionalProperties: {type: string}}
              extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
              amount: {x-kubernetes-int-or-string: true}
"#;

fn cases() -> Vec<Case> {
    vec![
        // ------------------------------------------------------------ undefined fields, overloads
        Case::new(
            "undefined-field",
            "an undefined field",
            deployments() + &v("object.replicas > 1"),
        )
        .upstream(&[V0])
        .type_checked(&["apps/v1, Kind=Deployment"]),
        Case::new(
            "wrong-overload",
            "int + string",
            deployments() + &v("object.spec.replicas + 'a' == 'b'"),
        )
        .upstream(&[V0]),
        Case::new(
            "two-errors",
            "two errors in one expression, sorted by position",
            deployments()
                + &v(
                    "object.spec.replicas.startsWith('a') || object.spec.selector.matchLabel == {}",
                ),
        )
        .upstream(&[V0]),
        Case::new(
            "macros",
            "errors inside comprehensions and optionals",
            deployments()
                + &validations(&[
                    (
                        "object.spec.template.spec.containers.exists(c, c.image == 1)",
                        None,
                    ),
                    ("object.?spec.?replicas.orValue(0) > 'x'", None),
                    (
                        "object.spec.template.spec.containers.all(c, c.name.size() < 64)",
                        None,
                    ),
                ]),
        )
        .upstream(&[V0, V1]),
        Case::new(
            "old-object",
            "oldObject has the object's type",
            deployments()
                + &v("oldObject == null || oldObject.spec.replicas == object.spec.replica"),
        )
        .upstream(&[V0]),
        Case::new(
            "multiline-unicode",
            "carets under a second line after wide characters and a tab",
            deployments()
                + &v("object.metadata.name != '名前' &&\n\t'名前' == object.spec.replicas"),
        )
        .upstream(&[V0]),

        // ------------------------------------------------------------ several kinds
        Case::new(
            "several-kinds",
            "one rule, four kinds of apps/v1",
            rule(
                "apps",
                "v1",
                "deployments, replicasets, statefulsets, daemonsets",
            ) + &validations(&[
                ("object.spec.replicas > 1", None),
                ("object.spec.paused == true", None),
            ]),
        )
        .upstream(&[V0, V1]),
        Case::new(
            "groups-cross-product",
            "groups × resources, kinds sorted by group",
            rule("\"\", apps", "v1", "pods, deployments") + &v("object.spec.containers.size() > 0"),
        )
        .upstream(&[V0]),
        Case::new(
            "type-names",
            "object types named in messages",
            "paramKind: {apiVersion: status.example.com/v1, kind: Limit}\n".to_string()
                + &deployments()
                + &validations(&[
                    ("object.spec.template == 'x'", None),
                    ("object.metadata.labels == 1", None),
                    ("params.spec == object.spec", None),
                    ("object.spec.selector == object.spec.template", None),
                ]),
        )
        .upstream(&[V0, V1, V2, V3]),
        Case::new(
            "two-versions",
            "autoscaling v1 and v2 differ",
            rule("autoscaling", "v1, v2", "horizontalpodautoscalers")
                + &v("object.spec.targetCPUUtilizationPercentage > 50"),
        )
        .upstream(&[V0]),
        Case::new(
            "cluster-scoped",
            "Namespace and ClusterRole",
            rules(&[
                ("\"\"", "v1", "namespaces"),
                ("rbac.authorization.k8s.io", "v1", "clusterroles"),
            ]) + &v("object.status.phase == 1"),
        )
        .upstream(&[V0]),
        Case::new(
            "more-than-10-kinds",
            "12 resources, 13 kinds in one rule (core `events` also resolves to events.k8s.io): upstream checks the first 10",
            rule("\"\"", "v1", TWELVE_CORE) + &v("object.metadata.nam == 'x'"),
        )
        .upstream(&[V0])
        .additional(&[(V0, "/v1, Kind=Secret:"), (V0, "/v1, Kind=ServiceAccount:")])
        .type_checked(&["/v1, Kind=Secret", "/v1, Kind=ServiceAccount"]),
        Case::new(
            "more-than-10-kinds-two-rules",
            "12 kinds in two rules: the limit counts per rule",
            rules(&[
                (
                    "\"\"",
                    "v1",
                    "configmaps, endpoints, events, limitranges, persistentvolumeclaims, podtemplates",
                ),
                (
                    "\"\"",
                    "v1",
                    "pods, replicationcontrollers, resourcequotas, secrets, serviceaccounts, services",
                ),
            ]) + &v("object.metadata.nam == 'x'"),
        )
        .upstream(&[V0]),

        // ------------------------------------------------------------ wildcards, subresources
        Case::new(
            "wildcard-group",
            "a wildcard group: upstream skips the rule",
            rule("\"*\"", "v1", "deployments") + &v("object.spec.replica > 1"),
        )
        .additional(&[(V0, "apps/v1, Kind=Deployment:")]),
        Case::new(
            "wildcard-resource",
            "a wildcard resource: upstream drops it",
            rule("apps", "v1", "\"*\"") + &v("object.spec.replica > 1"),
        )
        .additional(&[(V0, "apps/v1, Kind=Deployment:")]),
        Case::new(
            "subresource",
            "deployments/scale: upstream drops it; the kind is autoscaling/v1 Scale",
            rule("apps", "v1", "deployments/scale")
                + &validations(&[
                    ("object.spec.replicas > 1", None),
                    ("object.spec.paused == true", None),
                ]),
        )
        .additional(&[(V1, "Kind=Scale:")]),
        Case::new(
            "unknown-resource",
            "a resource nobody serves is skipped",
            rule("apps", "v1", "nonexistents") + &v("object.foo == 1"),
        )
        .type_checked(&["resourceRules[0]"]),

        // ------------------------------------------------------------ messageExpression
        Case::new(
            "message-expressions",
            "messageExpression is checked after its expression",
            deployments()
                + &validations(&[
                    (
                        "object.spec.replicas < 10",
                        Some("'replicas: ' + object.spec.replicas"),
                    ),
                    (
                        "object.spec.replica < 3",
                        Some("'name: ' + object.metadata.nme"),
                    ),
                    (
                        "object.spec.replicas < 20",
                        Some("'replicas: ' + string(object.spec.replicas)"),
                    ),
                ]),
        )
        .upstream(&[V0M, V1, V1M]),

        // ------------------------------------------------------------ params
        Case::new(
            "params-configmap",
            "params typed as a ConfigMap",
            "paramKind: {apiVersion: v1, kind: ConfigMap}\n".to_string()
                + &deployments()
                + &validations(&[
                    ("object.spec.replicas <= params.data.max", None),
                    ("object.spec.replicas <= int(params.data.max)", None),
                    ("params.spec.max > 0", None),
                ]),
        )
        .upstream(&[V0, V2]),
        Case::new(
            "params-crd",
            "params typed from a CRD's schema",
            "paramKind: {apiVersion: status.example.com/v1, kind: Limit}\n".to_string()
                + &deployments()
                + &validations(&[
                    ("object.spec.replicas <= params.spec.maxReplicas", None),
                    ("object.spec.replicas <= params.spec.max", None),
                    ("params.spec.image > 1", None),
                    (
                        "object.spec.template.spec.containers.all(c, c.image in params.spec.allowed)",
                        None,
                    ),
                ]),
        )
        .upstream(&[V1, V2]),
        Case::new(
            "params-not-served",
            "an unserved paramKind types params as dyn",
            "paramKind: {apiVersion: status.example.com/v9, kind: Nope}\n".to_string()
                + &deployments()
                + &validations(&[
                    ("object.spec.replicas <= params.spec.whatever", None),
                    ("object.spec.replica <= params.spec.whatever", None),
                ]),
        )
        .upstream(&[V1])
        // kube-controller-manager declares params (dyn) for an unresolved paramKind from 1.36
        // on; before, `params` is undeclared in every expression.
        .upstream_before(36, &[V0, V1]),

        // ------------------------------------------------------------ variables
        Case::new(
            "variables",
            "variables typed from the object",
            deployments()
                + "variables:\n- name: replicas\n  expression: object.spec.replicas\n- name: image0\n  expression: object.spec.template.spec.containers[0].image\n"
                + &validations(&[
                    ("variables.replicas > 'three'", None),
                    ("variables.image0.startsWith('r')", None),
                    ("variables.image0 == 1", None),
                ]),
        )
        .upstream(&[V0, V2]),
        Case::new(
            "beyond-upstream",
            "a bad matchCondition, variable and auditAnnotation: only celgate reports them",
            deployments()
                + "matchConditions:\n- name: mc\n  expression: object.spec.replica > 1\n"
                + "variables:\n- name: bad\n  expression: object.spec.replic\n"
                + "auditAnnotations:\n- key: a\n  valueExpression: \"'r' + object.spec.replicas\"\n"
                + &v("object.spec.replicas >= 0"),
        )
        .additional(&[
            (
                "spec.matchConditions[0].expression",
                "undefined field 'replica'",
            ),
            ("spec.variables[0].expression", "undefined field 'replic'"),
            (
                "spec.auditAnnotations[0].valueExpression",
                "found no matching overload for '_+_'",
            ),
        ]),
        Case::new(
            "bad-variable-used",
            "a validation using a variable that does not type check",
            deployments()
                + "variables:\n- name: bad\n  expression: object.spec.replic\n"
                + &validations(&[
                    ("variables.bad == 1", None),
                    ("object.spec.paused == 1", None),
                ]),
        )
        .upstream(&[V1])
        .additional(&[("spec.variables[0].expression", "undefined field 'replic'")]),

        // ------------------------------------------------------------ request, namespace, authorizer
        Case::new(
            "request-namespace",
            "request and namespaceObject are typed",
            deployments()
                + &validations(&[
                    (
                        "request.userInfo.username == 'admin' || namespaceObject.metadata.labels['x'] == 'y'",
                        None,
                    ),
                    ("request.userInfo.username == object.spec.replicas", None),
                    ("namespaceObject.metadata.name == object.spec.template.spec.replicas", None),
                ]),
        )
        .upstream(&[V1, V2]),
        Case::new(
            "authorizer",
            "authorizer is declared, authorizer.requestResource is not",
            deployments()
                + &validations(&[
                    (
                        "authorizer.group('apps').resource('deployments').check('create').allowed()",
                        None,
                    ),
                    ("authorizer.requestResource.check('create').allowed()", None),
                ]),
        )
        .upstream(&[V1]),

        // ------------------------------------------------------------ schemas
        Case::new(
            "crd-kind",
            "a CRD's kind: lists with map keys, maps, preserve-unknown-fields, int-or-string",
            rule("status.example.com", "v1", "widgets")
                + &validations(&[
                    ("object.spec.size > 'big'", None),
                    ("object.spec.color == 'red'", None),
                    ("object.spec.extra.anything == 1", None),
                    ("object.spec.ports.all(p, p.port < 'x')", None),
                    (
                        "object.spec.labels.all(k, object.spec.labels[k] == 1)",
                        None,
                    ),
                    ("object.spec.amount == 1 || object.spec.amount == '1'", None),
                ]),
        )
        .upstream(&[V0, V1, V2, V3, "spec.validations[4].expression"]),
        Case::new(
            "int-or-string-quantity",
            "int-or-string and quantities in built-in kinds",
            rules(&[("apps", "v1", "deployments"), ("\"\"", "v1", "pods")])
                + &validations(&[
                    (
                        "!has(object.spec.strategy) || object.spec.strategy.rollingUpdate.maxSurge == 1",
                        None,
                    ),
                    (
                        "!has(object.spec.containers) || object.spec.containers.all(c, !has(c.resources.limits) || c.resources.limits['cpu'] == '1')",
                        None,
                    ),
                    (
                        "!has(object.spec.containers) || object.spec.containers.all(c, c.resources.limits['cpu'] > 1)",
                        None,
                    ),
                ]),
        )
        .upstream(&[V0, V1, V2]),

        // ------------------------------------------------------------ clean
        Case::new(
        "clean-deployment",
        "a clean policy with a message expression",
        deployments()
            + &validations(&[(
                "object.spec.replicas <= 5",
                Some("'too many replicas: ' + string(object.spec.replicas)"),
            )]),
    ),
        Case::new(
        "clean-configmap",
        "a clean policy on ConfigMaps",
        rule("\"\"", "v1", "configmaps")
            + &validations(&[
                ("!has(object.data) || object.data.size() < 100", None),
                ("object.metadata.name.startsWith('a') || true", None),
            ]),
    ),
    ]
}

// ------------------------------------------------------------------------------------------
// Reading status
// ------------------------------------------------------------------------------------------

/// One expression warning.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Warning {
    field_ref: String,
    text: String,
}

fn warnings(status: &Value, list: &str) -> Vec<Warning> {
    status
        .pointer(&format!("/typeChecking/{list}"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|w| Warning {
                    field_ref: w["fieldRef"].as_str().unwrap_or_default().to_string(),
                    text: w["warning"].as_str().unwrap_or_default().to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The status of `name` once it describes the object's generation (`None` before).
fn current_status(object: &DynamicObject) -> Option<Value> {
    let generation = object.metadata.generation?;
    let status = object.data.get("status")?;
    (status.get("observedGeneration")?.as_i64()? == generation).then(|| status.clone())
}

fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits until every named policy's status describes its generation; their statuses in order.
async fn wait_statuses(api: &Api<DynamicObject>, names: &[String], who: &str) -> Vec<Value> {
    wait_for(
        &format!("{who} to write the status of {} policies", names.len()),
        STATUS_WAIT,
        || async {
            let mut out = Vec::with_capacity(names.len());
            for name in names {
                let object = api.get(name).await.ok()?;
                out.push(current_status(&object)?);
            }
            Some(out)
        },
    )
    .await
}

// ------------------------------------------------------------------------------------------
// Normalising upstream's type names
// ------------------------------------------------------------------------------------------

/// The kinds named in a warning's `Kind=<Kind>:` headers.
fn header_kinds(text: &str) -> BTreeSet<String> {
    text.split("Kind=")
        .skip(1)
        .filter_map(|rest| rest.split_once(':').map(|(kind, _)| kind.to_string()))
        .collect()
}

/// Replaces `<Kind><digits>` by `<Kind>` for each of `kinds`, where the digits end a word:
/// upstream names the types of a policy's kinds and of its paramKind `<Kind><nanoseconds>`.
fn normalise(text: &str, kinds: &BTreeSet<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while !rest.is_empty() {
        let at_word_start = out
            .chars()
            .last()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if at_word_start {
            for kind in kinds {
                let Some(after) = rest.strip_prefix(kind.as_str()) else {
                    continue;
                };
                let digits =
                    after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
                let ends_word = after[digits..]
                    .chars()
                    .next()
                    .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
                if digits > 0 && ends_word {
                    out.push_str(kind);
                    rest = &after[digits..];
                    continue 'scan;
                }
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

// ------------------------------------------------------------------------------------------
// The differential
// ------------------------------------------------------------------------------------------

/// The differences of one policy: `(fieldRef or position, upstream, celgate)`.
fn differences(upstream: &[Warning], celgate: &[Warning]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for i in 0..upstream.len().max(celgate.len()) {
        let (u, c) = (upstream.get(i), celgate.get(i));
        if u != c {
            let at = u.or(c).map_or(String::new(), |w| w.field_ref.clone());
            let show = |w: Option<&Warning>| {
                w.map_or("(none)".to_string(), |w| {
                    format!("{}: {}", w.field_ref, w.text)
                })
            };
            out.push((format!("#{i} {at}"), show(u), show(c)));
        }
    }
    out
}

fn param_kind(spec: &str) -> Option<String> {
    spec.lines()
        .find_map(|l| l.strip_prefix("paramKind: "))
        .and_then(|p| p.split("kind: ").nth(1))
        .map(|k| k.trim_end_matches('}').trim().to_string())
}

/// Upstream's warnings with its generated type names normalised.
fn normalised_upstream(case: &Case, status: &Value) -> Vec<Warning> {
    warnings(status, "expressionWarnings")
        .into_iter()
        .map(|w| {
            let mut kinds = header_kinds(&w.text);
            kinds.extend(param_kind(&case.spec));
            Warning {
                text: normalise(&w.text, &kinds),
                field_ref: w.field_ref,
            }
        })
        .collect()
}

/// Asserts celgate's own parts of a status: conditions at the generation, the warning count,
/// the case's beyond-upstream warnings and TypeChecked texts. Returns the failures.
fn celgate_only_failures(case: &Case, status: &Value, generation: i64) -> Vec<String> {
    let mut failures = Vec::new();
    let name = case.policy_name();
    for type_ in ["Ready", "TypeChecked"] {
        match condition(status, type_) {
            None => failures.push(format!("{name}: no {type_} condition")),
            Some(c) => {
                if c["observedGeneration"].as_i64() != Some(generation) {
                    failures.push(format!("{name}: {type_} describes another generation: {c}"));
                }
                if c["reason"].as_str().is_none_or(str::is_empty) {
                    failures.push(format!("{name}: {type_} has no reason: {c}"));
                }
            }
        }
    }
    if let Some(c) = condition(status, "TypeChecked") {
        if c["status"] != "True" {
            failures.push(format!("{name}: TypeChecked is not True: {c}"));
        }
        let message = c["message"].as_str().unwrap_or_default();
        for text in case.type_checked {
            if !message.contains(text) {
                failures.push(format!(
                    "{name}: TypeChecked message lacks {text:?}: {message:?}"
                ));
            }
        }
    }
    let upstream = warnings(status, "expressionWarnings");
    let additional = warnings(status, "additionalExpressionWarnings");
    let count = status
        .pointer("/typeChecking/warningCount")
        .and_then(Value::as_u64);
    if count != Some((upstream.len() + additional.len()) as u64) {
        failures.push(format!(
            "{name}: warningCount {count:?}, but the lists hold {} + {}",
            upstream.len(),
            additional.len()
        ));
    }
    for (field_ref, text) in case.additional {
        if !additional
            .iter()
            .any(|w| w.field_ref == *field_ref && w.text.contains(text))
        {
            let checked =
                condition(status, "TypeChecked").map_or(Value::Null, |c| c["message"].clone());
            failures.push(format!(
                "{name}: no additional warning at {field_ref} containing {text:?}; got {additional:?} (TypeChecked: {checked})"
            ));
        }
    }
    failures
}

/// Compares every case; prints the table and returns (differences, other failures).
fn compare(
    cases: &[&Case],
    upstream: &[Value],
    celgate: &[Value],
    generations: &[i64],
) -> (usize, Vec<String>) {
    let mut table = String::new();
    let mut total = 0;
    let mut failures = Vec::new();
    let _ = writeln!(
        table,
        "{:<32} {:>8} {:>8} {:>10} {:>6}  topic",
        "policy", "upstream", "celgate", "additional", "diffs"
    );
    for (i, case) in cases.iter().enumerate() {
        let up = normalised_upstream(case, &upstream[i]);
        let ours = warnings(&celgate[i], "expressionWarnings");
        let additional = warnings(&celgate[i], "additionalExpressionWarnings");
        let diffs = differences(&up, &ours);
        let (expected, older) = case.upstream_here();
        if older {
            // A known difference of this minor: celgate warns as 1.36 does.
            let ours_refs: Vec<&str> = ours.iter().map(|w| w.field_ref.as_str()).collect();
            if ours_refs != case.upstream {
                failures.push(format!(
                    "{}: celgate warns on {ours_refs:?}, 1.36 on {:?}",
                    case.policy_name(),
                    case.upstream
                ));
            }
        } else {
            total += diffs.len();
        }
        let _ = writeln!(
            table,
            "{:<32} {:>8} {:>8} {:>10} {:>6}  {}",
            case.policy_name(),
            up.len(),
            ours.len(),
            additional.len(),
            diffs.len(),
            case.topic
        );
        for (at, u, c) in &diffs {
            let _ = writeln!(
                table,
                "    {at}\n      upstream: {u:?}\n      celgate:  {c:?}"
            );
        }
        let refs: Vec<&str> = up.iter().map(|w| w.field_ref.as_str()).collect();
        if refs != expected {
            failures.push(format!(
                "{}: upstream warns on {refs:?}, the case expects {expected:?} (the case no longer tests what it says)",
                case.policy_name(),
            ));
        }
        failures.extend(celgate_only_failures(case, &celgate[i], generations[i]));
    }
    println!("{table}");
    println!("differences: {total}");
    (total, failures)
}

async fn generations(api: &Api<DynamicObject>, names: &[String]) -> Vec<i64> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let object = api
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("cannot read {name}: {e}"));
        out.push(object.metadata.generation.unwrap_or_default());
    }
    out
}

/// Applies the CRDs and waits until kube-apiserver publishes their OpenAPI v3 schemas (both status
/// writers resolve CRD kinds through `/openapi/v3`; a kind without a schema there is skipped).
async fn install_test_crds(cluster: &Cluster) {
    cluster.apply(CRDS);
    cluster.wait_established(&[
        "crd/limits.status.example.com",
        "crd/widgets.status.example.com",
    ]);
    wait_for(
        "the test CRDs' schemas in /openapi/v3",
        Duration::from_secs(60),
        || async {
            let out = cluster.kubectl(
                &["get", "--raw", "/openapi/v3/apis/status.example.com/v1"],
                "",
            );
            let text = String::from_utf8_lossy(&out.stdout);
            (out.status.success()
                && text.contains("\"kind\":\"Limit\"")
                && text.contains("\"kind\":\"Widget\""))
            .then_some(())
        },
    )
    .await;
}

/// A binding of `policy` for celgate selecting the namespace labelled `engine=status`.
fn celgate_binding(policy: &str) -> String {
    format!(
        "apiVersion: {CELGATE_API}\nkind: ValidatingAdmissionPolicyBinding\nmetadata:\n  name: {policy}-binding\nspec:\n  policyName: {policy}\n  validationActions: [Deny]\n  matchResources:\n    namespaceSelector:\n      matchLabels: {{engine: status}}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn celgate_type_checks_like_kube_controller_manager() {
    let cases = cases();
    assert!(cases.len() >= 20, "the table needs at least 20 policies");
    let mut seen = BTreeSet::new();
    for case in &cases {
        assert!(seen.insert(case.name), "duplicate case {}", case.name);
    }
    let cluster = Cluster::start();
    cluster.install_crds();
    install_test_crds(&cluster).await;
    let client = cluster.client().await;
    let in_tree = policies_api(&client, IN_TREE_API);
    let ours = policies_api(&client, CELGATE_API);
    let names: Vec<String> = cases.iter().map(Case::policy_name).collect();

    // The in-tree half first: its texts are the oracle, printed even when celgate fails.
    let all_in_tree: Vec<String> = cases.iter().map(|c| c.yaml(IN_TREE_API)).collect();
    cluster.apply(&all_in_tree.join("---\n"));
    let upstream = wait_statuses(&in_tree, &names, "kube-controller-manager").await;
    for (case, status) in cases.iter().zip(&upstream) {
        println!(
            "upstream {}: {}",
            case.policy_name(),
            serde_json::to_string_pretty(&status["typeChecking"]).unwrap_or_default()
        );
    }

    let celgate = Celgate::start(&cluster).await;
    let all_ours: Vec<String> = cases.iter().map(|c| c.yaml(CELGATE_API)).collect();
    cluster.apply(&all_ours.join("---\n"));
    let statuses = wait_statuses(&ours, &names, "celgate").await;
    let case_refs: Vec<&Case> = cases.iter().collect();
    let (diffs, mut failures) = compare(
        &case_refs,
        &upstream,
        &statuses,
        &generations(&ours, &names).await,
    );

    // An unbound policy is not Ready; a bound one becomes Ready once it is enforced.
    for (case, status) in cases.iter().zip(&statuses) {
        if condition(status, "Ready").is_some_and(|c| c["status"] != "False") {
            failures.push(format!(
                "{}: Ready is not False without a binding",
                case.name
            ));
        }
    }
    create_namespace(&client, "status-bound", "status").await;
    cluster.apply(&celgate_binding("st-clean-deployment"));
    wait_denied(&client, "status-bound", 6).await;
    wait_for(
        "st-clean-deployment to become Ready",
        STATUS_WAIT,
        || async {
            let object = ours.get("st-clean-deployment").await.ok()?;
            let status = current_status(&object)?;
            condition(&status, "Ready")
                .is_some_and(|c| c["status"] == "True")
                .then_some(())
        },
    )
    .await;

    // A second generation: both re-check. The undefined field is fixed, the clean policy breaks.
    let second: Vec<Case> = vec![
        Case::new(
            "undefined-field",
            "generation 2: fixed",
            deployments() + &v("object.spec.replicas > 1"),
        ),
        Case::new(
            "clean-configmap",
            "generation 2: broken",
            rule("\"\"", "v1", "configmaps") + &v("object.data == 1"),
        )
        .upstream(&[V0]),
    ];
    let second_names: Vec<String> = second.iter().map(Case::policy_name).collect();
    for (api, group) in [(&in_tree, IN_TREE_API), (&ours, CELGATE_API)] {
        for case in &second {
            let body: Value = serde_saphyr::from_str(&case.yaml(group))
                .unwrap_or_else(|e| panic!("policy fixture {}: {e}", case.name));
            api.patch(
                &case.policy_name(),
                &PatchParams::apply("status-e2e").force(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap_or_else(|e| panic!("cannot update {}: {e}", case.name));
        }
    }
    let upstream2 = wait_statuses(&in_tree, &second_names, "kube-controller-manager").await;
    let statuses2 = wait_statuses(&ours, &second_names, "celgate").await;
    let generations2 = generations(&ours, &second_names).await;
    assert!(
        generations2.iter().all(|g| *g == 2),
        "the updates made no second generation: {generations2:?}"
    );
    let second_refs: Vec<&Case> = second.iter().collect();
    let (diffs2, failures2) = compare(&second_refs, &upstream2, &statuses2, &generations2);
    failures.extend(failures2);

    drop(celgate);
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        diffs + diffs2,
        0,
        "celgate's expressionWarnings differ from upstream's"
    );
}

#[test]
fn upstream_type_names_are_normalised_to_kinds() {
    let kinds: BTreeSet<String> = ["Deployment", "ConfigMap"].map(String::from).into();
    assert_eq!(
        normalise(
            "applied to '(Deployment123456789.spec, ConfigMap7.data)' Deployment DeploymentX1 MyDeployment12",
            &kinds
        ),
        "applied to '(Deployment.spec, ConfigMap.data)' Deployment DeploymentX1 MyDeployment12"
    );
    assert_eq!(
        header_kinds("apps/v1, Kind=Deployment: ERROR: x\n\n/v1, Kind=Pod: ERROR: y"),
        ["Deployment", "Pod"].map(String::from).into()
    );
    assert_eq!(
        param_kind("paramKind: {apiVersion: v1, kind: ConfigMap}\nx"),
        Some("ConfigMap".to_string())
    );
}
