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
    /// `POST`, `PATCH` (a JSON merge patch) or `DELETE`.
    pub method: String,
    /// The URL path.
    pub path: String,
    /// The body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
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
        let target = Target::any(&mut rng);
        let params = Params::any(&mut rng);
        let crd = &self.crd;
        let mut setup = target.setup(&mut rng, crd);
        if params != Params::None {
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
        let uses_crd = matches!(
            target,
            Target::Gadget | Target::GadgetStatus | Target::GadgetScale
        );
        Case {
            name,
            crds: if uses_crd {
                vec![crd.object()]
            } else {
                Vec::new()
            },
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
                let first =
                    &rendered["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0];
                assert_eq!(first["values"], json!([case.ns(), case.ns2()]));
            }
        }
    }
}
