//! What `celgate eval` prints for a MutatingAdmissionPolicy: the decision, the JSON patch and
//! the object after the mutations, and each invocation's mutations with their result, as text
//! for people or as JSON.

use std::fmt::Write as _;

use celgate_engine::MutationOutcome;
use serde::Serialize;
use serde_json::Value;

use super::report::{DenialRecord, verdict};

/// One invocation of the policy: a binding with one param, and its mutations' results.
#[derive(Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InvocationRecord {
    /// The policy.
    pub policy: String,
    /// The binding.
    pub binding: String,
    /// The param's `namespace/name` (`name` for a cluster-scoped one), when it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// Each mutation's result in order: `no_error`, `compile_error`, `out_of_budget` or
    /// `invalid_error` (the metric's error types).
    pub mutations: Vec<&'static str>,
    /// Whether the invocation changed the object.
    pub changed: bool,
}

/// The whole result of `celgate eval` for a mutating policy.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MutationReport {
    /// Whether the request is admitted.
    pub allowed: bool,
    /// The denial, if any.
    pub denial: Option<DenialRecord>,
    /// The request decided: `OPERATION group/version Kind namespace/name`.
    pub request: String,
    /// What the input left to assumption, and what kube-apiserver would reject in it.
    pub notes: Vec<String>,
    /// The JSON patch (RFC 6902 operations) from the request's object to `object`.
    pub patch: Vec<Value>,
    /// The object after the mutations (the request's when they changed nothing).
    pub object: Value,
    /// The invocations that ran to their end, in order.
    pub invocations: Vec<InvocationRecord>,
}

impl MutationReport {
    /// The report of an outcome for a request whose object is `object`; `mutations` is how
    /// many mutations the policy has (each complete invocation ran them all).
    pub fn new(
        outcome: MutationOutcome,
        object: &Value,
        mutations: usize,
        request: String,
        notes: Vec<String>,
    ) -> Self {
        let results: Vec<&'static str> = outcome
            .checks
            .iter()
            .map(|c| c.error_type.as_str())
            .collect();
        let invocations = outcome
            .invocations
            .iter()
            .zip(results.chunks(mutations.max(1)))
            .map(|(i, results)| InvocationRecord {
                policy: i.policy.to_string(),
                binding: i.binding.to_string(),
                param: i.param.as_ref().map(|(ns, name)| match ns.as_str() {
                    "" => name.clone(),
                    ns => format!("{ns}/{name}"),
                }),
                mutations: results.to_vec(),
                changed: i.changed,
            })
            .collect();
        let mutated = outcome.object(object);
        MutationReport {
            allowed: outcome.allowed(),
            denial: outcome.denial.map(DenialRecord::from),
            request,
            notes,
            patch: outcome.patch.ops(),
            object: mutated.unwrap_or_else(|| object.clone()),
            invocations,
        }
    }

    /// The report as text for people, the object as YAML.
    pub fn human(&self) -> String {
        let mut out = verdict(&self.request, &self.notes, self.denial.as_ref());
        out.push_str("\npatch:\n");
        if self.patch.is_empty() {
            out.push_str("  none: the mutations leave the object as it is\n");
        }
        for op in &self.patch {
            let _ = writeln!(out, "  {op}");
        }
        out.push_str("\nobject:\n");
        let yaml = serde_saphyr::to_string(&self.object)
            .unwrap_or_else(|e| format!("(cannot be written as YAML: {e})\n"));
        for line in yaml.lines() {
            let _ = writeln!(out, "  {line}");
        }
        out.push_str("\ninvocations:\n");
        if self.invocations.is_empty() {
            out.push_str("  none: no binding of the policy applies to the request\n");
        }
        for i in &self.invocations {
            let _ = write!(out, "  policy {}, binding {}", i.policy, i.binding);
            if let Some(p) = &i.param {
                let _ = write!(out, ", param {p}");
            }
            let _ = writeln!(
                out,
                ": {}",
                if i.changed {
                    "changed the object"
                } else {
                    "left the object as it was"
                }
            );
            for (index, result) in i.mutations.iter().enumerate() {
                let _ = writeln!(out, "    mutations[{index}] → {result}");
            }
        }
        out
    }
}
