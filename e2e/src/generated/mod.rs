//! The generated admission differential's cases: made from a seed (policies of both kinds
//! with bindings and params, the objects that exist before, and requests), shrunk to a small
//! reproducer when the engines differ, and kept as YAML files (`e2e/testdata/generated/`)
//! that every run of `tests/generated_differential.rs` plays again.
//!
//! Placeholders in every string: `{{api}}` (the engine's apiVersion), `{{ns}}` and `{{ns2}}`
//! (the case's two namespaces, `g-<name>` and `g-<name>-2`).

pub mod crd;
pub mod expressions;
pub mod policies;
pub mod requests;
pub mod tree;

use std::collections::BTreeMap;

use fastrand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::differential::Engine;
use crd::Crd;
use policies::Params;
use requests::Target;

/// One generated case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Case {
    /// A DNS label, unique within a run; it names the case's namespaces and policies.
    pub name: String,
    /// CustomResourceDefinitions the case needs (applied and waited for before it runs).
    #[serde(default)]
    pub crds: Vec<Value>,
    /// Labels of both namespaces.
    #[serde(default)]
    pub namespace_labels: BTreeMap<String, String>,
    /// Objects created before the phases.
    #[serde(default)]
    pub setup: Vec<Value>,
    /// Policies and bindings.
    pub policies: Vec<Value>,
    /// The requests, each a server-side dry run.
    pub requests: Vec<Request>,
}

/// One request of a case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// What it does, for reports.
    pub label: String,
    /// `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: String,
    /// The URL path, maybe with a query.
    pub path: String,
    /// The body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// The body's content type, when not JSON (a JSON merge patch for `PATCH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// Who sends it (impersonated; the admin otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<User>,
}

/// An impersonated user.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct User {
    /// The user name.
    pub name: String,
    /// Its groups (`system:masters` is added when sent, so authorization passes).
    #[serde(default)]
    pub groups: Vec<String>,
}

impl Request {
    fn new(label: &str, method: &str, path: String, body: Option<Value>) -> Self {
        Request {
            label: label.into(),
            method: method.into(),
            path,
            body,
            content_type: None,
            user: None,
        }
    }
}

/// The generator of one run: its seed and its CRD.
pub struct Generator {
    seed: u64,
    crd: Crd,
}

impl Generator {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Self {
        let crd = Crd::new(&mut Rng::with_seed(seed), seed);
        Generator { seed, crd }
    }

    /// The run's CRD object.
    pub fn crd(&self) -> Value {
        self.crd.object()
    }

    /// Case number `index` of the run: each case has a seed of its own, so any case can be
    /// made again alone.
    pub fn case(&self, index: u64) -> Case {
        let mut rng = Rng::with_seed(self.seed ^ index.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let name = format!("s{:x}-{index}", self.seed);
        // The first cases of a run take every target in turn, so a short run covers them all.
        let target = match Target::ALL.get(index as usize) {
            Some(&t) => t,
            None => Target::any(&mut rng),
        };
        let params = Params::any(&mut rng);
        let crd = &self.crd;
        let mut setup = target.setup(&mut rng, crd);
        if params.cluster_scoped() {
            setup.push(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "{{ns}}-params",
                    "labels": {"param": "yes", (requests::CASE_LABEL): "{{ns}}"}},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                    "verbs": (["get", "list", "watch"][..1 + rng.usize(..3)])}]}),
            );
        } else if params != Params::None {
            for ns in ["{{ns}}", "{{ns2}}"] {
                setup.push(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "params", "namespace": ns, "labels": {"param": "yes"}},
                    "data": {"limit": (["3", "", "x"][rng.usize(..3)]), "k": "v"}}));
            }
        }
        // At most one mutating policy: in-tree runs several in an order that varies from run
        // to run (docs/limitations.md, "Order of mutating policies").
        let mut policies = Vec::new();
        let mut mutating = false;
        for i in 0..1 + rng.usize(..2) {
            let policy = format!("{name}-{i}");
            let pair = if mutating || rng.bool() {
                policies::validating(&mut rng, &policy, target, crd, params)
            } else {
                mutating = true;
                policies::mutating(&mut rng, &policy, target, crd, params)
            };
            policies.extend(pair);
        }
        let mut namespace_labels = BTreeMap::new();
        if rng.bool() {
            namespace_labels.insert("env".into(), ["prod", "dev"][rng.usize(..2)].into());
        }
        let count = 3 + rng.usize(..4);
        Case {
            name,
            crds: crd.objects_for(target),
            namespace_labels,
            setup,
            policies,
            requests: target.requests(&mut rng, crd, count),
        }
    }
}

impl Case {
    /// The case's first namespace.
    pub fn ns(&self) -> String {
        format!("g-{}", self.name)
    }

    /// The case's second namespace.
    pub fn ns2(&self) -> String {
        format!("g-{}-2", self.name)
    }

    /// `value` with the placeholders filled in (`{{api}}` only with an engine).
    pub fn render(&self, value: &Value, engine: Option<Engine>) -> Value {
        let mut text = value
            .to_string()
            .replace("{{ns2}}", &self.ns2())
            .replace("{{ns}}", &self.ns());
        if let Some(e) = engine {
            text = text.replace("{{api}}", e.api());
        }
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("case {}: {e}", self.name))
    }

    /// Whether the case has policies of `kind`.
    pub fn has(&self, kind: &str) -> bool {
        self.policies.iter().any(|p| p["kind"] == kind)
    }

    /// Smaller cases, each one step from this one: a request, a policy (with its binding), a
    /// validation, a mutation, a condition, an audit annotation or a message left out.
    pub fn shrunk(&self) -> Vec<Case> {
        let mut out = Vec::new();
        if self.requests.len() > 1 {
            for i in 0..self.requests.len() {
                let mut c = self.clone();
                c.requests.remove(i);
                out.push(c);
            }
        }
        let policies: Vec<usize> = (0..self.policies.len())
            .filter(|&i| !kind_of(&self.policies[i]).ends_with("Binding"))
            .collect();
        if policies.len() > 1 {
            for &i in &policies {
                let name = self.policies[i]["metadata"]["name"].clone();
                let mut c = self.clone();
                c.policies
                    .retain(|p| p["metadata"]["name"] != name && p["spec"]["policyName"] != name);
                out.push(c);
            }
        }
        for &i in &policies {
            for list in [
                "validations",
                "mutations",
                "matchConditions",
                "auditAnnotations",
            ] {
                let len = self.policies[i]["spec"][list]
                    .as_array()
                    .map_or(0, Vec::len);
                let keep = usize::from(matches!(list, "validations" | "mutations"));
                for j in 0..len {
                    if len <= keep {
                        break;
                    }
                    let mut c = self.clone();
                    if let Some(items) = c.policies[i]["spec"][list].as_array_mut() {
                        items.remove(j);
                        if items.is_empty() {
                            c.policies[i]["spec"]
                                .as_object_mut()
                                .map(|s| s.remove(list));
                        }
                    }
                    out.push(c);
                }
            }
            let len = self.policies[i]["spec"]["validations"]
                .as_array()
                .map_or(0, Vec::len);
            for j in 0..len {
                for field in ["message", "messageExpression", "reason"] {
                    if self.policies[i]["spec"]["validations"][j]
                        .get(field)
                        .is_some()
                    {
                        let mut c = self.clone();
                        c.policies[i]["spec"]["validations"][j]
                            .as_object_mut()
                            .map(|v| v.remove(field));
                        out.push(c);
                    }
                }
            }
        }
        out
    }

    /// The case as a reproducer file: YAML with a comment saying where it came from.
    pub fn to_file(&self, differences: &str) -> String {
        let yaml = serde_saphyr::to_string(self)
            .unwrap_or_else(|e| panic!("case {} as YAML: {e}", self.name));
        let mut out = String::from(
            "# Found by the generated admission differential; in-tree and celgate differed:\n",
        );
        for line in differences.lines() {
            out.push_str(&format!("#   {line}\n"));
        }
        out + &yaml
    }

    /// A case read from a reproducer file.
    pub fn from_file(text: &str) -> Result<Case, String> {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }
}

fn kind_of(doc: &Value) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_reproducible_from_the_seed_and_survive_a_file() {
        let a = Generator::new(42);
        let b = Generator::new(42);
        for i in 0..30 {
            let case = a.case(i);
            assert_eq!(case, b.case(i));
            let again = Case::from_file(&case.to_file("a difference"))
                .unwrap_or_else(|e| panic!("case {i}: {e}"));
            assert_eq!(again, case);
        }
        assert_ne!(a.case(0), Generator::new(43).case(0));
    }

    #[test]
    fn every_shrunk_case_is_smaller_and_keeps_a_request_and_a_policy() {
        let g = Generator::new(7);
        for i in 0..30 {
            let case = g.case(i);
            let size = |c: &Case| c.to_file("").len();
            for smaller in case.shrunk() {
                assert!(size(&smaller) < size(&case), "case {i}");
                assert!(!smaller.requests.is_empty());
                assert!(
                    smaller
                        .policies
                        .iter()
                        .any(|p| p["spec"]["policyName"].is_string())
                );
            }
        }
    }

    #[test]
    fn every_binding_is_scoped_to_its_case_and_no_case_has_two_mutating_policies() {
        let g = Generator::new(9);
        for i in 0..50 {
            let case = g.case(i);
            let mutating = case
                .policies
                .iter()
                .filter(|p| p["kind"] == "MutatingAdmissionPolicy");
            assert!(mutating.count() <= 1, "case {i}");
            for b in case
                .policies
                .iter()
                .filter(|p| kind_of(p).ends_with("Binding"))
            {
                let rendered = case.render(b, Some(Engine::InTree));
                let matched = &rendered["spec"]["matchResources"];
                let first = &matched["namespaceSelector"]["matchExpressions"][0];
                let label = &matched["objectSelector"]["matchLabels"][requests::CASE_LABEL];
                assert!(
                    first["values"] == json!([case.ns(), case.ns2()]) || *label == json!(case.ns()),
                    "case {i}: {matched}"
                );
            }
        }
    }

    /// What the CI run (seed 1's first 48 cases) must play: every kind of case.
    #[test]
    fn the_ci_sample_has_every_kind_of_case() {
        let g = Generator::new(1);
        let cases: Vec<Case> = (0..48).map(|i| g.case(i)).collect();
        let text: Vec<String> = cases.iter().map(|c| c.to_file("")).collect();
        let all = text.join("\n");
        for wanted in [
            "resources:\n        - configmaps",
            "- deployments\n",
            "- deployments/scale",
            "- gadgets\n",
            "- gadgets/status",
            "- gadgets/scale",
            "- namespaces\n",
            "- clusterroles\n",
            "- pods/ephemeralcontainers",
            "- pods/resize",
            "- gizmos\n",
            "- widgets\n",
            "- widgets/status",
            "scope: Cluster",
            "scope: Namespaced",
            "kind: ClusterRole\n",
            "name: \"{{ns}}-params\"",
            "x-kubernetes-list-type: map",
            "x-kubernetes-list-type: set",
            "x-kubernetes-list-type: atomic",
            "x-kubernetes-map-type: atomic",
            "x-kubernetes-map-type: granular",
            "x-kubernetes-int-or-string: true",
            "x-kubernetes-preserve-unknown-fields: true",
            "nullable: true",
            "default:",
            "application/json-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
            "method: PUT",
            "label: deletecollection",
            "label: delete with options",
            "label: add an ephemeral container",
            "label: resize",
            "label: update status",
            "label: update scale",
        ] {
            assert!(
                all.contains(wanted),
                "no case of seed 1's first 48 has {wanted:?}"
            );
        }
        // Apply configurations and JSON patches of the tree CRDs reach depth 3 and put nulls.
        let deep_apply = cases.iter().flat_map(|c| &c.policies).any(|p| {
            let e = p["spec"]["mutations"].to_string();
            e.contains("ApplyConfiguration") && e.matches("Object.spec.").count() >= 2
        });
        assert!(deep_apply, "no apply configuration reaches depth");
        let deep_patch = cases.iter().flat_map(|c| &c.requests).any(|r| {
            r.content_type.as_deref() == Some(requests::JSON_PATCH)
                && r.body.as_ref().is_some_and(|b| {
                    b.as_array().is_some_and(|ops| {
                        ops.iter().any(|o| {
                            o["path"]
                                .as_str()
                                .is_some_and(|p| p.matches('/').count() >= 4)
                                && o["value"].is_null()
                        })
                    })
                })
        });
        assert!(deep_patch, "no JSON patch puts a null at depth");
        // A DELETE's options in the body replace the query's `dryRun=All`: they ask for it too.
        for r in cases.iter().flat_map(|c| &c.requests) {
            if let (Some(body), "DELETE") = (&r.body, r.method.as_str()) {
                assert_eq!(body["dryRun"], json!(["All"]), "{r:?}");
            }
        }
    }
}
