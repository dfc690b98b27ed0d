//! Policies and bindings made at random for one target: match rules (subresources, operations,
//! versions, exclusions), selectors, match conditions, variables, validations with messages and
//! reasons, audit annotations, mutations of both patch types, params. Every binding is scoped
//! to its case's two namespaces, so cases played together never see each other's requests.

use fastrand::Rng;
use serde_json::{Value, json};

use super::crd::{Crd, NESTED_MEMBERS};
use super::expressions::{Scope, Ty, expression};
use super::requests::{CASE_LABEL, Target};

/// How deep generated expressions nest.
const DEPTH: u32 = 3;

/// Whether a case's policies take params (ConfigMaps, or cluster-scoped ClusterRoles), and
/// how the binding finds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Params {
    /// No paramKind.
    None,
    /// `paramRef.name` of the ConfigMap `params` (which exists).
    Named,
    /// `paramRef.name` of a ConfigMap that does not exist.
    Missing,
    /// `paramRef.selector` matching the labelled ConfigMaps.
    Selected,
    /// `paramRef.name` of the case's ClusterRole `{{ns}}-params`.
    ClusterNamed,
    /// `paramRef.selector` matching the case's labelled ClusterRoles.
    ClusterSelected,
}

impl Params {
    /// Any of them, no params a third of the time.
    pub fn any(rng: &mut Rng) -> Self {
        [
            Params::None,
            Params::None,
            Params::None,
            Params::Named,
            Params::Missing,
            Params::Selected,
            Params::ClusterNamed,
            Params::ClusterSelected,
            Params::None,
        ][rng.usize(..9)]
    }

    /// Whether the param kind is cluster-scoped (ClusterRoles).
    pub fn cluster_scoped(self) -> bool {
        matches!(self, Params::ClusterNamed | Params::ClusterSelected)
    }
}

/// The scope of a policy over `target`: the request, the objects, the namespace, params.
fn scope(rng: &mut Rng, target: Target, crd: &Crd, params: Params) -> Scope {
    let mut scope = Scope::default();
    target.read_object(crd, &mut scope, "object");
    if rng.u8(..3) == 0 {
        target.read_object(crd, &mut scope, "oldObject");
    }
    for (ty, e) in [
        (Ty::Str, "request.operation"),
        (Ty::Str, "request.userInfo.username"),
        (Ty::StrList, "request.userInfo.groups"),
        (Ty::Str, "request.namespace"),
        (Ty::Str, "request.name"),
        (Ty::Str, "request.subResource"),
        (Ty::Bool, "request.dryRun"),
        (Ty::StrMap, "namespaceObject.metadata.labels"),
        (Ty::Str, "namespaceObject.metadata.name"),
    ] {
        scope.add(ty, e);
    }
    if params.cluster_scoped() {
        scope.add(Ty::Str, "params.metadata.name");
        scope.add(Ty::StrMap, "params.metadata.labels");
        scope.add(Ty::StrList, "params.rules[0].verbs");
        scope.add(Ty::Bool, "params != null");
    } else if params != Params::None {
        scope.add(Ty::StrMap, "params.data");
        scope.add(Ty::Str, "params.data.limit");
        scope.add(Ty::Bool, "params != null");
    }
    if rng.u8(..6) == 0 {
        scope.add(
            Ty::Bool,
            "authorizer.group('').resource('configmaps').namespace(request.namespace).check('get').allowed()",
        );
    }
    scope
}

fn rules(rng: &mut Rng, target: Target, crd: &Crd, mutating: bool) -> Value {
    let (group, version, resource) = target.rule(crd);
    let all_ops: &[&str] = if mutating {
        &["CREATE", "UPDATE"]
    } else {
        &["CREATE", "UPDATE", "DELETE"]
    };
    let mut ops: Vec<&str> = all_ops
        .iter()
        .copied()
        .filter(|_| rng.u8(..4) < 3)
        .collect();
    if ops.is_empty() || (!mutating && rng.u8(..6) == 0) {
        ops = vec!["*"];
    }
    let version = if rng.u8(..4) == 0 { "*" } else { version };
    let mut constraints = json!({"resourceRules": [{"apiGroups": [group], "apiVersions": [version],
        "operations": ops, "resources": [resource]}]});
    if rng.u8(..5) == 0 {
        constraints["matchPolicy"] = json!(["Exact", "Equivalent"][rng.usize(..2)]);
    }
    if rng.u8(..8) == 0 {
        constraints["excludeResourceRules"] = json!([{"apiGroups": [group], "apiVersions": ["*"],
            "operations": ["DELETE"], "resources": [resource], "resourceNames": ["existing"]}]);
    }
    constraints
}

/// Variables `v0`, `v1` … (of random types), added to `scope` as they are declared.
fn variables(rng: &mut Rng, scope: &mut Scope) -> Vec<Value> {
    (0..rng.usize(..3))
        .map(|i| {
            let ty = [Ty::Bool, Ty::Int, Ty::Str, Ty::StrList, Ty::StrMap][rng.usize(..5)];
            let v =
                json!({"name": format!("v{i}"), "expression": expression(rng, scope, ty, DEPTH)});
            scope.add(ty, format!("variables.v{i}"));
            v
        })
        .collect()
}

fn match_conditions(rng: &mut Rng, scope: &Scope) -> Vec<Value> {
    (0..rng.usize(..3))
        .map(|i| json!({"name": format!("mc{i}"), "expression": expression(rng, scope, Ty::Bool, 2)}))
        .collect()
}

/// The common spec of both kinds: failure policy, params, rules, conditions, variables.
fn common(
    rng: &mut Rng,
    target: Target,
    crd: &Crd,
    params: Params,
    mutating: bool,
    scope: &mut Scope,
) -> Value {
    let mut spec = json!({"matchConstraints": rules(rng, target, crd, mutating)});
    if rng.u8(..3) > 0 {
        spec["failurePolicy"] = json!(["Fail", "Ignore"][rng.usize(..2)]);
    }
    if params.cluster_scoped() {
        spec["paramKind"] =
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"});
    } else if params != Params::None {
        spec["paramKind"] = json!({"apiVersion": "v1", "kind": "ConfigMap"});
    }
    let conditions = match_conditions(rng, scope);
    if !conditions.is_empty() {
        spec["matchConditions"] = json!(conditions);
    }
    let vars = variables(rng, scope);
    if !vars.is_empty() {
        spec["variables"] = json!(vars);
    }
    spec
}

/// A binding's `matchResources` (the case's namespaces, or its objects' label when the target
/// is cluster-scoped; maybe more selectors) and `paramRef`.
fn binding_spec(rng: &mut Rng, policy: &str, target: Target, params: Params) -> Value {
    let mut names = vec![
        json!({"key": "kubernetes.io/metadata.name", "operator": "In",
        "values": ["{{ns}}", "{{ns2}}"]}),
    ];
    if rng.u8(..4) == 0 {
        let operator = ["In", "NotIn", "Exists", "DoesNotExist"][rng.usize(..4)];
        names.push(json!({"key": "env", "operator": operator, "values": ["prod"]}));
        if names[1]["operator"] == "Exists" || names[1]["operator"] == "DoesNotExist" {
            names[1].as_object_mut().map(|m| m.remove("values"));
        }
    }
    let mut spec = json!({"policyName": policy,
        "matchResources": {"namespaceSelector": {"matchExpressions": names}}});
    if rng.u8(..4) == 0 {
        let (key, value) = (
            ["app", "tier"][rng.usize(..2)],
            ["web", "a", "b"][rng.usize(..3)],
        );
        spec["matchResources"]["objectSelector"] = json!({"matchLabels": {key: value}});
    }
    if target.cluster_scoped() {
        // A namespace selector does not scope cluster-scoped objects (and matches a Namespace
        // by its own labels): the case's label does.
        let matched = &mut spec["matchResources"];
        matched
            .as_object_mut()
            .map(|m| m.remove("namespaceSelector"));
        matched["objectSelector"]["matchLabels"][CASE_LABEL] = json!("{{ns}}");
    }
    let not_found = ["Allow", "Deny"][rng.usize(..2)];
    match params {
        Params::None => {}
        Params::Named => {
            spec["paramRef"] = json!({"name": "params", "parameterNotFoundAction": not_found});
        }
        Params::Missing => {
            spec["paramRef"] = json!({"name": "absent", "parameterNotFoundAction": not_found});
        }
        Params::Selected => {
            spec["paramRef"] = json!({"selector": {"matchLabels": {"param": "yes"}},
                "parameterNotFoundAction": not_found});
        }
        Params::ClusterNamed => {
            spec["paramRef"] =
                json!({"name": "{{ns}}-params", "parameterNotFoundAction": not_found});
        }
        Params::ClusterSelected => {
            spec["paramRef"] = json!({"selector": {"matchLabels": {"param": "yes",
                CASE_LABEL: "{{ns}}"}}, "parameterNotFoundAction": not_found});
        }
    }
    spec
}

const MESSAGES: &[&str] = &[
    "denied",
    "must be valid: é \"quoted\"",
    "x",
    "a  b",
    "   padded",
];

/// A ValidatingAdmissionPolicy `name` and its binding.
pub fn validating(
    rng: &mut Rng,
    name: &str,
    target: Target,
    crd: &Crd,
    params: Params,
) -> [Value; 2] {
    let mut scope = scope(rng, target, crd, params);
    let mut spec = common(rng, target, crd, params, false, &mut scope);
    let validations: Vec<Value> = (0..1 + rng.usize(..3))
        .map(|_| {
            let mut v = json!({"expression": expression(rng, &scope, Ty::Bool, DEPTH)});
            if rng.bool() {
                v["message"] = json!(MESSAGES[rng.usize(..MESSAGES.len())]);
            }
            if rng.u8(..3) == 0 {
                v["messageExpression"] = json!(expression(rng, &scope, Ty::Str, 2));
            }
            if rng.u8(..4) == 0 {
                v["reason"] = json!(
                    [
                        "Forbidden",
                        "Invalid",
                        "Unauthorized",
                        "RequestEntityTooLarge"
                    ][rng.usize(..4)]
                );
            }
            v
        })
        .collect();
    spec["validations"] = json!(validations);
    if rng.u8(..3) == 0 {
        let annotations: Vec<Value> = (0..1 + rng.usize(..2))
            .map(|i| {
                let value = if rng.u8(..5) == 0 {
                    format!(
                        "{} ? null : {}",
                        expression(rng, &scope, Ty::Bool, 1),
                        expression(rng, &scope, Ty::Str, 2)
                    )
                } else {
                    expression(rng, &scope, Ty::Str, DEPTH)
                };
                json!({"key": format!("a{i}"), "valueExpression": value})
            })
            .collect();
        spec["auditAnnotations"] = json!(annotations);
    }
    let mut binding = binding_spec(rng, name, target, params);
    binding["validationActions"] = json!(
        [
            vec!["Deny"],
            vec!["Warn"],
            vec!["Audit"],
            vec!["Deny", "Audit"],
            vec!["Warn", "Audit"]
        ][rng.usize(..5)]
    );
    [
        json!({"apiVersion": "{{api}}", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name}, "spec": spec}),
        json!({"apiVersion": "{{api}}", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": format!("{name}-binding")}, "spec": binding}),
    ]
}

/// A value expression of any type, for a JSON patch.
fn any_value(rng: &mut Rng, scope: &Scope) -> String {
    match rng.u8(..9) {
        0 => "null".into(),
        8 => odd_value(rng, 2),
        n => {
            let ty = [
                Ty::Bool,
                Ty::Int,
                Ty::Double,
                Ty::Str,
                Ty::Str,
                Ty::StrList,
                Ty::StrMap,
            ][usize::from(n - 1)];
            expression(rng, scope, ty, 2)
        }
    }
}

/// A CEL literal of any shape: nulls, empty maps and lists, a uint, wrong scalar types, and
/// map and list literals holding those, `depth` levels down (what kube-apiserver's conversion
/// of an apply configuration to Go and its typed conversion take or refuse).
fn odd_value(rng: &mut Rng, depth: u32) -> String {
    match rng.u8(..12) {
        0 => "null".into(),
        1 => "dyn(null)".into(),
        2 => "{}".into(),
        3 => "[]".into(),
        4 => "2u".into(),
        5 => "\"s\"".into(),
        6 => "1".into(),
        7 => "true".into(),
        8 => "1.5".into(),
        9 if depth > 0 => format!(
            "{{\"k\": dyn({}), \"key\": dyn({})}}",
            odd_value(rng, depth - 1),
            odd_value(rng, depth - 1)
        ),
        10 if depth > 0 => format!(
            "[dyn({}), dyn({})]",
            odd_value(rng, depth - 1),
            odd_value(rng, depth - 1)
        ),
        _ => "{\"a\": \"b\"}".into(),
    }
}

/// An apply configuration for the generated CRD whose value has any shape, at the top of a
/// spec field or in a member of the nested struct (as an `Object` or a map literal). No field
/// is given an empty list literal, which kube-apiserver stores as null (docs/limitations.md).
fn odd_apply(rng: &mut Rng, crd: &Crd) -> String {
    let fields = crd.field_names();
    let field = fields[rng.usize(..fields.len())];
    let odd_field = |rng: &mut Rng| match odd_value(rng, 2) {
        empty if empty == "[]" => "[1]".to_string(),
        odd => odd,
    };
    let value = if field == "nested" {
        let member = NESTED_MEMBERS[rng.usize(..NESTED_MEMBERS.len())];
        let odd = odd_field(rng);
        if rng.bool() {
            format!("Object.spec.nested{{{member}: {odd}}}")
        } else {
            format!("{{\"{member}\": dyn({odd})}}")
        }
    } else {
        odd_field(rng)
    };
    format!("Object{{spec: Object.spec{{{field}: {value}}}}}")
}

/// One mutation of `target`: an apply configuration or a JSON patch.
fn mutation(rng: &mut Rng, target: Target, crd: &Crd, scope: &Scope) -> Value {
    let s = |rng: &mut Rng| expression(rng, scope, Ty::Str, 2);
    if rng.bool() {
        let object = match target {
            Target::ConfigMap if rng.bool() => format!("Object{{data: {{\"k\": {}}}}}", s(rng)),
            Target::Deployment => format!(
                "Object{{spec: Object.spec{{replicas: {}}}}}",
                expression(rng, scope, Ty::Int, 2)
            ),
            Target::Gadget | Target::GadgetStatus if rng.bool() => odd_apply(rng, crd),
            Target::Gizmo | Target::Widget | Target::WidgetStatus => {
                let value = if rng.bool() {
                    odd_value(rng, 2)
                } else {
                    let ty = [Ty::Str, Ty::Int, Ty::Bool, Ty::StrMap][rng.usize(..4)];
                    expression(rng, scope, ty, 2)
                };
                crd.tree(target).apply(rng, &value)
            }
            Target::ClusterRole if rng.bool() => format!(
                "Object{{rules: [Object.rules{{apiGroups: [\"\"], resources: [\"configmaps\"], verbs: [{}]}}]}}",
                s(rng)
            ),
            Target::Gadget | Target::GadgetStatus => {
                let typed = crd.typed_fields();
                let (ty, field) = typed[rng.usize(..typed.len())];
                format!(
                    "Object{{spec: Object.spec{{{field}: {}}}}}",
                    expression(rng, scope, ty, 2)
                )
            }
            _ => format!(
                "Object{{metadata: Object.metadata{{labels: {{{}: {}}}}}}}",
                ["\"added\"", "\"app\""][rng.usize(..2)],
                s(rng)
            ),
        };
        return json!({"patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": object}});
    }
    let op = ["add", "add", "replace", "remove", "test", "copy", "move"][rng.usize(..7)];
    let mut paths = vec![
        "\"/metadata/labels\"".to_string(),
        "\"/metadata/labels/added\"".to_string(),
        "\"/metadata/annotations\"".to_string(),
        "\"/metadata/annotations/a~1b\"".to_string(),
        format!("\"/metadata/labels/\" + jsonpatch.escapeKey({})", s(rng)),
    ];
    match target {
        Target::ConfigMap => paths.extend([
            "\"/data\"".into(),
            "\"/data/k\"".into(),
            "\"/data/new\"".into(),
        ]),
        Target::Deployment | Target::DeploymentScale | Target::GadgetScale => {
            paths.push("\"/spec/replicas\"".into());
        }
        Target::Gadget | Target::GadgetStatus => {
            for f in crd.field_names() {
                paths.push(format!("\"/spec/{f}\""));
            }
            paths.push("\"/spec/tags/-\"".into());
            paths.push("\"/spec/args/0\"".into());
            if crd.field_names().contains(&"nested") {
                paths.push("\"/spec/nested/inner/a\"".into());
                paths.push("\"/spec/nested/counts\"".into());
                paths.push("\"/spec/nested/depth\"".into());
            }
        }
        Target::Gizmo | Target::Widget | Target::WidgetStatus => {
            paths.extend(crd.tree(target).pointers(matches!(op, "remove" | "move")));
        }
        Target::Namespace => paths.push("\"/spec/finalizers\"".into()),
        Target::ClusterRole => {
            paths.extend(["\"/rules/0/verbs/-\"".into(), "\"/rules\"".into()]);
        }
        Target::PodEphemeral | Target::PodResize => {
            paths.push("\"/spec/containers/0/image\"".into());
        }
    }
    if matches!(op, "remove" | "move") {
        // kube-apiserver fills in defaults again after each in-tree mutation, a webhook cannot
        // (docs/limitations.md, "Defaults between mutations"): no defaulted field is removed.
        let defaulted: Vec<String> = match target {
            Target::Deployment => vec!["\"/spec/replicas\"".into()],
            Target::Gadget | Target::GadgetStatus => crd
                .defaulted_fields()
                .iter()
                .map(|f| format!("\"/spec/{f}\""))
                .collect(),
            _ => Vec::new(),
        };
        paths.retain(|p| !defaulted.contains(p));
    }
    let path = paths[rng.usize(..paths.len())].clone();
    let mut patch = format!("JSONPatch{{op: \"{op}\", path: {path}");
    match op {
        "copy" | "move" => {
            let from = paths[rng.usize(..paths.len())].clone();
            patch.push_str(&format!(", from: {from}"));
        }
        "remove" => {}
        _ => patch.push_str(&format!(", value: {}", any_value(rng, scope))),
    }
    patch.push('}');
    json!({"patchType": "JSONPatch", "jsonPatch": {"expression": format!("[{patch}]")}})
}

/// A MutatingAdmissionPolicy `name` and its binding.
pub fn mutating(
    rng: &mut Rng,
    name: &str,
    target: Target,
    crd: &Crd,
    params: Params,
) -> [Value; 2] {
    let mut scope = scope(rng, target, crd, params);
    let mut spec = common(rng, target, crd, params, true, &mut scope);
    spec["reinvocationPolicy"] = json!(["Never", "IfNeeded"][rng.usize(..2)]);
    let mutations: Vec<Value> = (0..1 + rng.usize(..2))
        .map(|_| mutation(rng, target, crd, &scope))
        .collect();
    spec["mutations"] = json!(mutations);
    [
        json!({"apiVersion": "{{api}}", "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name}, "spec": spec}),
        json!({"apiVersion": "{{api}}", "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": format!("{name}-binding")},
            "spec": binding_spec(rng, name, target, params)}),
    ]
}
