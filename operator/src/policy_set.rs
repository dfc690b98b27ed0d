//! The bound validating policy set, built from the reflector stores of policies and bindings.
//! A policy is compiled once per uid and generation and a binding converted once per uid and
//! generation, so building the set again after any change costs a sort and `Arc` clones.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use celgate_crds::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use celgate_engine::model::{ParamKind, ValidatingBindingSpec};
use celgate_engine::{BoundPolicy, PolicySet, ValidatingPolicy, compile_validating};
use celgate_snapshot::PolicyParamKinds;
use kube::ResourceExt;
use tracing::{debug, warn};

use crate::convert;

/// A policy compiled at one uid and generation.
struct Compiled {
    uid: String,
    generation: i64,
    policy: Arc<ValidatingPolicy>,
}

/// A binding converted at one uid and generation.
struct Converted {
    uid: String,
    generation: i64,
    binding: Arc<ValidatingBindingSpec>,
}

/// A policy set built from the stores.
pub struct Built {
    /// The policies with at least one binding, by name, with their bindings by name.
    pub set: PolicySet,
    /// Stored policies not compiled yet (their reconcile has not run).
    pub pending: usize,
}

/// What was compiled and converted, by object name.
#[derive(Default)]
pub struct PolicyCache {
    policies: HashMap<String, Compiled>,
    bindings: HashMap<String, Converted>,
    param_kinds: Arc<PolicyParamKinds>,
    /// Bindings already reported as naming a missing policy.
    orphans: HashSet<String>,
}

fn uid_and_generation<K: kube::Resource>(object: &K) -> (String, i64) {
    (
        object.uid().unwrap_or_default(),
        object.meta().generation.unwrap_or_default(),
    )
}

/// Compiles a policy; expressions that do not compile are logged, and the policy keeps them as
/// errors so its failurePolicy decides matching requests.
pub fn compile(policy: &ValidatingAdmissionPolicy) -> Arc<ValidatingPolicy> {
    let compiled = Arc::new(compile_validating(convert::validating_policy(policy)));
    for (field, error) in compiled.compile_errors() {
        warn!(policy = %compiled.name, %field, %error, "expression does not compile; the policy's failurePolicy decides matching requests");
    }
    compiled
}

impl PolicyCache {
    /// Whether `policy` is compiled at its current uid and generation.
    pub fn is_current(&self, policy: &ValidatingAdmissionPolicy) -> bool {
        let (uid, generation) = uid_and_generation(policy);
        self.policies
            .get(&policy.name_any())
            .is_some_and(|c| c.uid == uid && c.generation == generation)
    }

    /// Keeps `compiled` as the compiled form of `policy` at its current uid and generation.
    pub fn insert(&mut self, policy: &ValidatingAdmissionPolicy, compiled: Arc<ValidatingPolicy>) {
        let name = policy.name_any();
        let (uid, generation) = uid_and_generation(policy);
        let kind = compiled.spec.param_kind.clone();
        if self.param_kinds.validating.get(&name) != Some(&kind) {
            Arc::make_mut(&mut self.param_kinds)
                .validating
                .insert(name.clone(), kind);
        }
        self.policies.insert(
            name,
            Compiled {
                uid,
                generation,
                policy: compiled,
            },
        );
    }

    /// Every policy's paramKind (validating ones as compiled, mutating ones as last set).
    pub fn param_kinds(&self) -> Arc<PolicyParamKinds> {
        self.param_kinds.clone()
    }

    /// Replaces the MutatingAdmissionPolicies' paramKinds.
    pub fn set_mutating_param_kinds(&mut self, kinds: HashMap<String, Option<ParamKind>>) {
        if self.param_kinds.mutating != kinds {
            Arc::make_mut(&mut self.param_kinds).mutating = kinds;
        }
    }

    /// The bound policy set for these stored objects: each policy as last compiled (a stored
    /// policy not compiled yet is left out and counted as pending) with the bindings that name
    /// it. Bindings naming a missing policy are ignored, as upstream. What left the stores is
    /// forgotten.
    pub fn build(
        &mut self,
        mut policies: Vec<Arc<ValidatingAdmissionPolicy>>,
        mut bindings: Vec<Arc<ValidatingAdmissionPolicyBinding>>,
    ) -> Built {
        let stored: HashMap<String, String> = policies
            .iter()
            .map(|p| (p.name_any(), p.uid().unwrap_or_default()))
            .collect();
        self.forget_policies(&stored);

        bindings.sort_by_key(|b| b.name_any());
        let mut by_policy: HashMap<String, Vec<Arc<ValidatingBindingSpec>>> = HashMap::new();
        let mut orphans = HashSet::new();
        for binding in &bindings {
            let spec = self.converted(binding);
            if stored.contains_key(&spec.policy_name) {
                by_policy
                    .entry(spec.policy_name.clone())
                    .or_default()
                    .push(spec);
            } else {
                if !self.orphans.contains(&spec.name) {
                    debug!(binding = %spec.name, policy = %spec.policy_name, "binding names a policy that does not exist; it is ignored until the policy does");
                }
                orphans.insert(spec.name.clone());
            }
        }
        self.orphans = orphans;
        let names: HashSet<String> = bindings.iter().map(|b| b.name_any()).collect();
        self.bindings.retain(|name, _| names.contains(name));

        policies.sort_by_key(|p| p.name_any());
        let mut validating = Vec::new();
        let mut pending = 0;
        for policy in &policies {
            let name = policy.name_any();
            match self.policies.get(&name) {
                Some(compiled) => {
                    if let Some(bindings) = by_policy.remove(&name) {
                        validating.push(BoundPolicy {
                            policy: compiled.policy.clone(),
                            bindings,
                        });
                    }
                }
                None => pending += 1,
            }
        }
        Built {
            set: PolicySet { validating },
            pending,
        }
    }

    /// Forgets compiled policies that are no longer stored under the same uid.
    fn forget_policies(&mut self, stored: &HashMap<String, String>) {
        let gone: Vec<String> = self
            .policies
            .iter()
            .filter(|(name, c)| stored.get(*name) != Some(&c.uid))
            .map(|(name, _)| name.clone())
            .collect();
        if gone.is_empty() {
            return;
        }
        let kinds = Arc::make_mut(&mut self.param_kinds);
        for name in gone {
            self.policies.remove(&name);
            kinds.validating.remove(&name);
        }
    }

    /// A binding as the engine sees it, converted again only when its uid or generation changed.
    fn converted(
        &mut self,
        binding: &ValidatingAdmissionPolicyBinding,
    ) -> Arc<ValidatingBindingSpec> {
        let name = binding.name_any();
        let (uid, generation) = uid_and_generation(binding);
        if let Some(c) = self.bindings.get(&name)
            && c.uid == uid
            && c.generation == generation
        {
            return c.binding.clone();
        }
        let converted = Arc::new(convert::validating_binding(binding));
        self.bindings.insert(
            name,
            Converted {
                uid,
                generation,
                binding: converted.clone(),
            },
        );
        converted
    }
}
