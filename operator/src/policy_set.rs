//! The bound policy set (validating and mutating), built from the reflector stores of the four
//! kinds. A policy is compiled once per uid and generation (and, for a mutating policy, apply
//! semantics annotation) and a binding converted once per uid and generation, so building the
//! set again after any change costs a sort and `Arc` clones.
//!
//! Order: policies by name, each policy's bindings by binding name. For mutating policies this
//! is the order they run in (within each of celgate's mutating webhooks).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use celgate_crds::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use celgate_engine::model::{MutatingBindingSpec, ValidatingBindingSpec};
use celgate_engine::mutate::{ApplySemantics, compile_mutating};
use celgate_engine::{
    BoundMutatingPolicy, BoundPolicy, MutatingPolicy, PolicySet, Unbound, ValidatingPolicy,
    compile_validating,
};
use celgate_snapshot::PolicyParamKinds;
use kube::ResourceExt;
use tracing::{debug, warn};

use crate::convert;

/// A policy compiled at one uid and generation.
struct Compiled {
    uid: String,
    generation: i64,
    policy: Arc<ValidatingPolicy>,
    /// Whether some expression does not compile.
    failing: bool,
}

/// A mutating policy compiled at one uid, generation and apply semantics.
struct CompiledMutating {
    uid: String,
    generation: i64,
    semantics: ApplySemantics,
    policy: Arc<MutatingPolicy>,
    /// Whether some expression does not compile.
    failing: bool,
}

/// A binding converted at one uid and generation.
struct Converted<B> {
    uid: String,
    generation: i64,
    binding: Arc<B>,
}

/// The stored objects of the four kinds, as the reflector stores hold them.
#[derive(Clone)]
pub struct Stored {
    /// ValidatingAdmissionPolicies.
    pub validating: Vec<Arc<ValidatingAdmissionPolicy>>,
    /// ValidatingAdmissionPolicyBindings.
    pub validating_bindings: Vec<Arc<ValidatingAdmissionPolicyBinding>>,
    /// MutatingAdmissionPolicies.
    pub mutating: Vec<Arc<MutatingAdmissionPolicy>>,
    /// MutatingAdmissionPolicyBindings.
    pub mutating_bindings: Vec<Arc<MutatingAdmissionPolicyBinding>>,
}

/// What was compiled and converted, by object name.
#[derive(Default)]
pub struct PolicyCache {
    policies: HashMap<String, Compiled>,
    bindings: HashMap<String, Converted<ValidatingBindingSpec>>,
    mutating: HashMap<String, CompiledMutating>,
    mutating_bindings: HashMap<String, Converted<MutatingBindingSpec>>,
    param_kinds: Arc<PolicyParamKinds>,
    /// Bindings already reported as naming a missing policy.
    orphans: HashSet<String>,
}

fn uid_and_generation<K: kube::Resource>(object: &K) -> (&str, i64) {
    (
        object.meta().uid.as_deref().unwrap_or_default(),
        object.meta().generation.unwrap_or_default(),
    )
}

/// A stored object's name, borrowed (objects the API server stores always have one).
pub fn name_of<K: kube::Resource>(object: &K) -> &str {
    object.meta().name.as_deref().unwrap_or_default()
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

/// Compiles a mutating policy with the apply semantics its annotation selects; expressions
/// that do not compile are logged, and the policy keeps them as errors.
pub fn compile_mutating_policy(policy: &MutatingAdmissionPolicy) -> Arc<MutatingPolicy> {
    let semantics = convert::apply_semantics(policy);
    let compiled = Arc::new(compile_mutating(
        convert::mutating_policy(policy),
        semantics,
    ));
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
            .get(name_of(policy))
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
                uid: uid.to_string(),
                generation,
                failing: !compiled.compile_errors().is_empty(),
                policy: compiled,
            },
        );
    }

    /// Whether the mutating `policy` is compiled at its current uid, generation and apply
    /// semantics.
    pub fn is_current_mutating(&self, policy: &MutatingAdmissionPolicy) -> bool {
        let (uid, generation) = uid_and_generation(policy);
        let semantics = convert::apply_semantics(policy);
        self.mutating
            .get(name_of(policy))
            .is_some_and(|c| c.uid == uid && c.generation == generation && c.semantics == semantics)
    }

    /// Keeps `compiled` as the compiled form of the mutating `policy` at its current uid,
    /// generation and apply semantics.
    pub fn insert_mutating(
        &mut self,
        policy: &MutatingAdmissionPolicy,
        compiled: Arc<MutatingPolicy>,
    ) {
        let name = policy.name_any();
        let (uid, generation) = uid_and_generation(policy);
        let kind = compiled.spec.param_kind.clone();
        if self.param_kinds.mutating.get(&name) != Some(&kind) {
            Arc::make_mut(&mut self.param_kinds)
                .mutating
                .insert(name.clone(), kind);
        }
        self.mutating.insert(
            name,
            CompiledMutating {
                uid: uid.to_string(),
                generation,
                semantics: compiled.apply_semantics,
                failing: !compiled.compile_errors().is_empty(),
                policy: compiled,
            },
        );
    }

    /// How many compiled validating and mutating policies have expressions that do not compile.
    pub fn failing(&self) -> (usize, usize) {
        (
            self.policies.values().filter(|c| c.failing).count(),
            self.mutating.values().filter(|c| c.failing).count(),
        )
    }

    /// Every stored policy's paramKind, as compiled.
    pub fn param_kinds(&self) -> Arc<PolicyParamKinds> {
        self.param_kinds.clone()
    }

    /// How many stored policies are not compiled at their uid (their reconcile has not run
    /// yet): the first publish waits for them. Nothing is built or copied to count them.
    pub fn pending(&self, stored: &Stored) -> usize {
        let validating = stored.validating.iter().filter(|p| {
            let (uid, _) = uid_and_generation(p.as_ref());
            self.policies
                .get(name_of(p.as_ref()))
                .is_none_or(|c| c.uid != uid)
        });
        let mutating = stored.mutating.iter().filter(|p| {
            let (uid, _) = uid_and_generation(p.as_ref());
            self.mutating
                .get(name_of(p.as_ref()))
                .is_none_or(|c| c.uid != uid)
        });
        validating.count() + mutating.count()
    }

    /// The bound policy set for these stored objects: each policy as last compiled (a stored
    /// policy not compiled yet is left out) with the bindings that name it, policies by name
    /// and each policy's bindings by name; compiled policies no binding names are kept apart
    /// (for the webhook rules). Bindings naming a missing policy are ignored, as upstream.
    /// What left the stores is forgotten.
    pub fn build(&mut self, stored: Stored) -> PolicySet {
        let Stored {
            validating: mut policies,
            validating_bindings: mut bindings,
            mutating: mut mutating_policies,
            mutating_bindings,
        } = stored;
        // Names and uids are borrowed from the stored objects: this runs on every publish.
        let names: HashMap<&str, &str> = policies
            .iter()
            .map(|p| (name_of(p.as_ref()), uid_and_generation(p.as_ref()).0))
            .collect();
        let mutating_names: HashMap<&str, &str> = mutating_policies
            .iter()
            .map(|p| (name_of(p.as_ref()), uid_and_generation(p.as_ref()).0))
            .collect();
        self.forget_policies(&names, &mutating_names);

        bindings.sort_unstable_by(|a, b| name_of(a.as_ref()).cmp(name_of(b.as_ref())));
        let mut orphans = HashSet::new();
        let mut by_policy = group_bindings(
            &bindings,
            |b| self_converted(&mut self.bindings, b, convert::validating_binding),
            |b: &ValidatingBindingSpec| (&b.name, &b.policy_name),
            &names,
            &mut orphans,
            &self.orphans,
        );
        let mut mutating_bindings = mutating_bindings;
        mutating_bindings.sort_unstable_by(|a, b| name_of(a.as_ref()).cmp(name_of(b.as_ref())));
        let mut mutating_by_policy = group_bindings(
            &mutating_bindings,
            |b| self_converted(&mut self.mutating_bindings, b, convert::mutating_binding),
            |b: &MutatingBindingSpec| (&b.name, &b.policy_name),
            &mutating_names,
            &mut orphans,
            &self.orphans,
        );
        self.orphans = orphans;
        let kept: HashSet<&str> = bindings.iter().map(|b| name_of(b.as_ref())).collect();
        self.bindings.retain(|name, _| kept.contains(name.as_str()));
        let kept: HashSet<&str> = mutating_bindings
            .iter()
            .map(|b| name_of(b.as_ref()))
            .collect();
        self.mutating_bindings
            .retain(|name, _| kept.contains(name.as_str()));

        policies.sort_unstable_by(|a, b| name_of(a.as_ref()).cmp(name_of(b.as_ref())));
        let mut validating = Vec::new();
        let mut unbound = Unbound::default();
        for policy in &policies {
            let name = name_of(policy.as_ref());
            if let Some(compiled) = self.policies.get(name) {
                match by_policy.remove(name) {
                    Some(bindings) => validating.push(BoundPolicy {
                        policy: compiled.policy.clone(),
                        bindings,
                    }),
                    None => unbound.validating.push(compiled.policy.clone()),
                }
            }
        }
        mutating_policies.sort_unstable_by(|a, b| name_of(a.as_ref()).cmp(name_of(b.as_ref())));
        let mut mutating = Vec::new();
        for policy in &mutating_policies {
            let name = name_of(policy.as_ref());
            if let Some(compiled) = self.mutating.get(name) {
                match mutating_by_policy.remove(name) {
                    Some(bindings) => mutating.push(BoundMutatingPolicy {
                        policy: compiled.policy.clone(),
                        bindings,
                    }),
                    None => unbound.mutating.push(compiled.policy.clone()),
                }
            }
        }
        PolicySet::new(validating, mutating).with_unbound(unbound)
    }

    /// Forgets compiled policies that are no longer stored under the same uid.
    fn forget_policies(
        &mut self,
        validating: &HashMap<&str, &str>,
        mutating: &HashMap<&str, &str>,
    ) {
        let gone: Vec<String> = self
            .policies
            .iter()
            .filter(|(name, c)| validating.get(name.as_str()) != Some(&c.uid.as_str()))
            .map(|(name, _)| name.clone())
            .collect();
        let gone_mutating: Vec<String> = self
            .mutating
            .iter()
            .filter(|(name, c)| mutating.get(name.as_str()) != Some(&c.uid.as_str()))
            .map(|(name, _)| name.clone())
            .collect();
        if gone.is_empty() && gone_mutating.is_empty() {
            return;
        }
        let kinds = Arc::make_mut(&mut self.param_kinds);
        for name in gone {
            self.policies.remove(&name);
            kinds.validating.remove(&name);
        }
        for name in gone_mutating {
            self.mutating.remove(&name);
            kinds.mutating.remove(&name);
        }
    }
}

/// A binding as the engine sees it, converted again only when its uid or generation changed.
fn self_converted<K: kube::Resource, B>(
    cache: &mut HashMap<String, Converted<B>>,
    binding: &K,
    convert: impl Fn(&K) -> B,
) -> Arc<B> {
    let name = name_of(binding);
    let (uid, generation) = uid_and_generation(binding);
    if let Some(c) = cache.get(name)
        && c.uid == uid
        && c.generation == generation
    {
        return c.binding.clone();
    }
    let converted = Arc::new(convert(binding));
    cache.insert(
        name.to_string(),
        Converted {
            uid: uid.to_string(),
            generation,
            binding: converted.clone(),
        },
    );
    converted
}

/// Bindings (sorted by name) converted and grouped by the stored policy they name; the names
/// of bindings naming a missing policy go to `orphans` (logged once, `reported` holds those
/// logged before).
fn group_bindings<K, B>(
    bindings: &[Arc<K>],
    mut convert: impl FnMut(&K) -> Arc<B>,
    names: impl Fn(&B) -> (&String, &String),
    policies: &HashMap<&str, &str>,
    orphans: &mut HashSet<String>,
    reported: &HashSet<String>,
) -> HashMap<String, Vec<Arc<B>>> {
    let mut by_policy: HashMap<String, Vec<Arc<B>>> = HashMap::new();
    for binding in bindings {
        let spec = convert(binding);
        let (name, policy) = names(&spec);
        if policies.contains_key(policy.as_str()) {
            by_policy.entry(policy.clone()).or_default().push(spec);
        } else {
            if !reported.contains(name) {
                debug!(binding = %name, %policy, "binding names a policy that does not exist; it is ignored until the policy does");
            }
            orphans.insert(name.clone());
        }
    }
    by_policy
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::fixtures;

    fn stored(policies: Vec<ValidatingAdmissionPolicy>) -> Stored {
        Stored {
            validating: policies.into_iter().map(Arc::new).collect(),
            validating_bindings: Vec::new(),
            mutating: Vec::new(),
            mutating_bindings: Vec::new(),
        }
    }

    #[test]
    fn a_policy_is_pending_until_compiled_at_its_stored_uid() {
        let a = fixtures::policy("a", 1, "true", None);
        let b = fixtures::policy("b", 1, "true", None);
        let mut cache = PolicyCache::default();
        assert_eq!(cache.pending(&stored(vec![a.clone(), b.clone()])), 2);
        cache.insert(&a, compile(&a));
        assert_eq!(cache.pending(&stored(vec![a.clone(), b.clone()])), 1);
        // `a` deleted and created again under the same name: its compiled form is stale.
        let mut again = fixtures::policy_json("a", 1, "true", None);
        again["metadata"]["uid"] = "uid-a-again".into();
        let again: ValidatingAdmissionPolicy = serde_json::from_value(again).unwrap();
        assert_eq!(cache.pending(&stored(vec![again.clone(), b.clone()])), 2);
        cache.insert(&again, compile(&again));
        cache.insert(&b, compile(&b));
        assert_eq!(cache.pending(&stored(vec![again, b])), 0);
    }
}
