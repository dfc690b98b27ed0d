//! The bound policy set (validating and mutating), built from the reflector stores of the four
//! kinds. A policy is compiled once per uid and generation (and, for a mutating policy, apply
//! semantics annotation), and a binding is stored converted
//! ([`StoredBinding`](super::stored_binding::StoredBinding)), so building the set again after
//! any change costs a pass over the policies: each policy's bindings come from
//! the store as one shared list ([`BindingStore::bound_to`]), made again only after they
//! changed.
//!
//! Order: policies by name, each policy's bindings by binding name. For mutating policies this
//! is the order they run in (within each of celgate's mutating webhooks).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use celgate_crds::{MutatingAdmissionPolicy, ValidatingAdmissionPolicy};
use celgate_engine::model::WildcardOperations;
use celgate_engine::{PolicySet, Unbound};
use celgate_snapshot::PolicyParamKinds;
use kube::ResourceExt;
use tracing::{debug, warn};

use crate::controllers::stored_binding::BindingStore;
use crate::policy_kind::PolicyKind;

/// A policy compiled at one uid, generation and variant.
struct Compiled<P: PolicyKind> {
    uid: String,
    generation: i64,
    variant: P::Variant,
    policy: Arc<P::Compiled>,
    /// Whether some expression does not compile.
    failing: bool,
    /// Whether kube-apiserver refuses some of its resource rules in a webhook configuration:
    /// then it is left out of the set (see [`PolicyKind::rule_errors`]).
    rules_refused: bool,
}

/// The stored policies and bindings of one kind, as the reflector stores hold them.
pub struct Stored<P: PolicyKind> {
    /// The policies.
    pub policies: Vec<Arc<P>>,
    /// The bindings' store.
    pub bindings: BindingStore<P>,
}

impl<P: PolicyKind> Clone for Stored<P> {
    fn clone(&self) -> Self {
        Self {
            policies: self.policies.clone(),
            bindings: self.bindings.clone(),
        }
    }
}

/// What was compiled of one kind, by policy name.
pub struct KindCache<P: PolicyKind> {
    policies: HashMap<String, Compiled<P>>,
}

impl<P: PolicyKind> Default for KindCache<P> {
    fn default() -> Self {
        Self {
            policies: HashMap::new(),
        }
    }
}

/// What was compiled of both kinds.
#[derive(Default)]
pub struct PolicyCache {
    validating: KindCache<ValidatingAdmissionPolicy>,
    mutating: KindCache<MutatingAdmissionPolicy>,
    param_kinds: Arc<PolicyParamKinds>,
    /// Bindings already reported as naming a missing policy.
    orphans: HashSet<String>,
    /// What `*` in validating policies' operations stands for (`--wildcard-includes-connect`),
    /// carried by every set built.
    pub wildcard: WildcardOperations,
}

/// The compile cache's part for each kind.
pub trait Cached: PolicyKind {
    /// This kind's part of `cache`.
    fn part(cache: &PolicyCache) -> &KindCache<Self>;
    /// This kind's part of `cache`, to change.
    fn part_mut(cache: &mut PolicyCache) -> &mut KindCache<Self>;
}

impl Cached for ValidatingAdmissionPolicy {
    fn part(cache: &PolicyCache) -> &KindCache<Self> {
        &cache.validating
    }
    fn part_mut(cache: &mut PolicyCache) -> &mut KindCache<Self> {
        &mut cache.validating
    }
}

impl Cached for MutatingAdmissionPolicy {
    fn part(cache: &PolicyCache) -> &KindCache<Self> {
        &cache.mutating
    }
    fn part_mut(cache: &mut PolicyCache) -> &mut KindCache<Self> {
        &mut cache.mutating
    }
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
pub fn compile<P: PolicyKind>(policy: &P) -> Arc<P::Compiled> {
    let compiled = Arc::new(policy.compile());
    for (field, error) in P::compile_errors(&compiled) {
        warn!(kind = P::KIND, policy = %name_of(policy), %field, %error, "expression does not compile; the policy's failurePolicy decides matching requests");
    }
    compiled
}

impl PolicyCache {
    /// Whether `policy` is compiled at its current uid, generation and variant.
    pub fn is_current<P: Cached>(&self, policy: &P) -> bool {
        let (uid, generation) = uid_and_generation(policy);
        let variant = policy.variant();
        P::part(self)
            .policies
            .get(name_of(policy))
            .is_some_and(|c| c.uid == uid && c.generation == generation && c.variant == variant)
    }

    /// Keeps `compiled` as the compiled form of `policy` at its current uid and generation.
    pub fn insert<P: Cached>(&mut self, policy: &P, compiled: Arc<P::Compiled>) {
        let name = policy.name_any();
        let (uid, generation) = uid_and_generation(policy);
        let rule_errors = policy.rule_errors();
        for error in &rule_errors {
            warn!(kind = P::KIND, policy = %name, %error, "kube-apiserver refuses this rule in a webhook configuration; the policy is left out until it is fixed");
        }
        let kind = P::compiled_param_kind(&compiled).cloned();
        let kinds = P::param_kinds_of(Arc::make_mut(&mut self.param_kinds));
        if kinds.get(&name) != Some(&kind) {
            kinds.insert(name.clone(), kind);
        }
        P::part_mut(self).policies.insert(
            name,
            Compiled {
                uid: uid.to_string(),
                generation,
                variant: P::compiled_variant(&compiled),
                failing: !P::compile_errors(&compiled).is_empty(),
                rules_refused: !rule_errors.is_empty(),
                policy: compiled,
            },
        );
    }

    /// How many compiled validating and mutating policies have expressions that do not compile.
    pub fn failing(&self) -> (usize, usize) {
        (self.validating.failing(), self.mutating.failing())
    }

    /// Every stored policy's paramKind, as compiled.
    pub fn param_kinds(&self) -> Arc<PolicyParamKinds> {
        self.param_kinds.clone()
    }

    /// How many stored policies are not compiled at their uid (their reconcile has not run
    /// yet): the first publish waits for them. Nothing is built or copied to count them.
    pub fn pending(
        &self,
        validating: &Stored<ValidatingAdmissionPolicy>,
        mutating: &Stored<MutatingAdmissionPolicy>,
    ) -> usize {
        self.validating.pending(validating) + self.mutating.pending(mutating)
    }

    /// The bound policy set for these stored objects: each policy as last compiled (a stored
    /// policy not compiled yet is left out) with the bindings that name it, policies by name
    /// and each policy's bindings by name; compiled policies no binding names are kept apart
    /// (for the webhook rules). A policy whose rules kube-apiserver refuses in a webhook
    /// configuration is left out, so it cannot make the configurations of all the others
    /// invalid. Bindings naming a missing policy are ignored, as upstream.
    /// What left the stores is forgotten.
    pub fn build(
        &mut self,
        validating: Stored<ValidatingAdmissionPolicy>,
        mutating: Stored<MutatingAdmissionPolicy>,
    ) -> PolicySet {
        let mut orphans = HashSet::new();
        let mut unbound = Unbound::default();
        let params = &mut self.param_kinds;
        let reported = &self.orphans;
        let validating =
            self.validating
                .build(validating, &mut unbound, params, &mut orphans, reported);
        let mutating = self
            .mutating
            .build(mutating, &mut unbound, params, &mut orphans, reported);
        self.orphans = orphans;
        PolicySet::new(validating, mutating)
            .with_unbound(unbound)
            .with_wildcard_operations(self.wildcard)
    }
}

impl<P: PolicyKind> KindCache<P> {
    fn failing(&self) -> usize {
        self.policies.values().filter(|c| c.failing).count()
    }

    fn pending(&self, stored: &Stored<P>) -> usize {
        stored
            .policies
            .iter()
            .filter(|p| {
                let (uid, _) = uid_and_generation(p.as_ref());
                self.policies
                    .get(name_of(p.as_ref()))
                    .is_none_or(|c| c.uid != uid)
            })
            .count()
    }

    /// This kind's bound policies (see [`PolicyCache::build`]); its unbound ones go to
    /// `unbound`, and the paramKinds of policies no longer stored leave `params`.
    fn build(
        &mut self,
        stored: Stored<P>,
        unbound: &mut Unbound,
        params: &mut Arc<PolicyParamKinds>,
        orphans: &mut HashSet<String>,
        reported: &HashSet<String>,
    ) -> Vec<P::Bound> {
        let Stored {
            mut policies,
            bindings,
        } = stored;
        // Names and uids are borrowed from the stored objects: this runs on every publish.
        let names: HashMap<&str, &str> = policies
            .iter()
            .map(|p| (name_of(p.as_ref()), uid_and_generation(p.as_ref()).0))
            .collect();
        self.forget_policies(&names, params);
        for (name, policy) in bindings.naming_missing(|policy| names.contains_key(policy)) {
            if !reported.contains(&name) {
                debug!(binding = %name, %policy, "binding names a policy that does not exist; it is ignored until the policy does");
            }
            orphans.insert(name);
        }

        policies.sort_unstable_by(|a, b| name_of(a.as_ref()).cmp(name_of(b.as_ref())));
        let mut bound = Vec::new();
        for policy in &policies {
            let name = name_of(policy.as_ref());
            if let Some(compiled) = self.policies.get(name).filter(|c| !c.rules_refused) {
                match bindings.bound_to(name) {
                    Some(bindings) => bound.push(P::bind(compiled.policy.clone(), bindings)),
                    None => P::unbound_of(unbound).push(compiled.policy.clone()),
                }
            }
        }
        bound
    }

    /// Forgets compiled policies that are no longer stored under the same uid.
    fn forget_policies(
        &mut self,
        stored: &HashMap<&str, &str>,
        params: &mut Arc<PolicyParamKinds>,
    ) {
        let gone: Vec<String> = self
            .policies
            .iter()
            .filter(|(name, c)| stored.get(name.as_str()) != Some(&c.uid.as_str()))
            .map(|(name, _)| name.clone())
            .collect();
        if gone.is_empty() {
            return;
        }
        let params = P::param_kinds_of(Arc::make_mut(params));
        for name in gone {
            self.policies.remove(&name);
            params.remove(&name);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn pending(cache: &PolicyCache, policies: Vec<ValidatingAdmissionPolicy>) -> usize {
        let validating = Stored {
            policies: policies.into_iter().map(Arc::new).collect(),
            bindings: BindingStore::default(),
        };
        let mutating = Stored {
            policies: Vec::new(),
            bindings: BindingStore::default(),
        };
        cache.pending(&validating, &mutating)
    }

    /// Every rule of the webhook configurations built from `set`, as kube-apiserver validates
    /// them: the errors it would refuse the configuration with.
    fn refused_rules(set: &PolicySet) -> Vec<String> {
        use crate::serving::registration::{
            DEFAULT_TIMEOUT_SECONDS, Endpoint, Exemptions, Registration, WebhookRules,
            mutating_configuration, validating_configuration,
        };
        use celgate_engine::apivalidation::validate_resource_rules;
        let registration = Registration {
            endpoint: Endpoint::Url("https://127.0.0.1:9443".into()),
            exemptions: Exemptions {
                namespaces: vec!["celgate-system".into()],
                never_sent: Vec::new(),
            },
            create_missing: true,
            rules: WebhookRules::Policies,
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
        };
        let validating = validating_configuration(set, &registration, "ca");
        let mutating = mutating_configuration(set, &registration, "ca");
        let mut rules: Vec<serde_json::Value> = Vec::new();
        for w in validating.webhooks.unwrap_or_default() {
            rules.extend(
                w.rules
                    .unwrap_or_default()
                    .iter()
                    .map(|r| serde_json::to_value(r).unwrap()),
            );
        }
        for w in mutating.webhooks.unwrap_or_default() {
            rules.extend(
                w.rules
                    .unwrap_or_default()
                    .iter()
                    .map(|r| serde_json::to_value(r).unwrap()),
            );
        }
        validate_resource_rules(&serde_json::json!({ "resourceRules": rules }), "webhooks")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Both kinds stored: `policies` and `mutating`, each bound by one binding.
    fn build_bound(
        cache: &mut PolicyCache,
        policies: Vec<ValidatingAdmissionPolicy>,
        mutating: Vec<MutatingAdmissionPolicy>,
    ) -> PolicySet {
        for p in &policies {
            cache.insert(p, compile(p));
        }
        for p in &mutating {
            cache.insert(p, compile(p));
        }
        let validating = Stored {
            bindings: policies
                .iter()
                .map(|p| {
                    fixtures::stored(&fixtures::binding(&format!("b-{}", name_of(p)), name_of(p)))
                })
                .collect(),
            policies: policies.into_iter().map(Arc::new).collect(),
        };
        let mutating = Stored {
            bindings: mutating
                .iter()
                .map(|p| {
                    fixtures::stored(&fixtures::mutating_binding(
                        &format!("b-{}", name_of(p)),
                        name_of(p),
                    ))
                })
                .collect(),
            policies: mutating.into_iter().map(Arc::new).collect(),
        };
        cache.build(validating, mutating)
    }

    #[test]
    fn a_policy_whose_rules_kube_apiserver_refuses_is_left_out_and_the_others_are_kept() {
        // Stored while celgate was down (its policy webhook fails open): rules a webhook
        // configuration may not hold, each beside a good policy.
        let bad_rules = [
            json!({"apiGroups": ["*", "apps"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["deployments"]}),
            json!({"apiGroups": [""], "apiVersions": ["*", "v1"], "operations": ["CREATE"], "resources": ["pods"]}),
            json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*", "CREATE"], "resources": ["pods"]}),
            json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["*/*", "pods"]}),
            json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["*", "pods"]}),
            json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/*", "pods/status"]}),
            json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["*/status", "pods/status"]}),
            json!({"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"], "scope": "Everywhere"}),
            json!({"apiGroups": [""], "apiVersions": [""], "operations": ["CREATE"], "resources": ["pods"]}),
        ];
        for rule in bad_rules {
            let mut bad = fixtures::policy_json("bad", 1, "false", None);
            bad["spec"]["matchConstraints"]["resourceRules"] = json!([rule.clone()]);
            let bad: ValidatingAdmissionPolicy = serde_json::from_value(bad).unwrap();
            let mut bad_mutating =
                serde_json::to_value(fixtures::mutating_policy("bad-m", "Fail", "Never", "pods"))
                    .unwrap();
            bad_mutating["spec"]["matchConstraints"]["resourceRules"] = json!([rule.clone()]);
            let bad_mutating: MutatingAdmissionPolicy =
                serde_json::from_value(bad_mutating).unwrap();
            let good = fixtures::policy("good", 1, "false", None);
            let good_mutating = fixtures::mutating_policy("good-m", "Fail", "Never", "secrets");

            let mut cache = PolicyCache::default();
            let set = build_bound(
                &mut cache,
                vec![bad, good],
                vec![bad_mutating, good_mutating],
            );
            assert_eq!(refused_rules(&set), Vec::<String>::new(), "rule {rule}");
            let names: Vec<&str> = set
                .validating()
                .iter()
                .map(|b| b.policy.spec.name.as_str())
                .collect();
            assert_eq!(names, ["good"], "rule {rule}");
            let names: Vec<&str> = set
                .mutating()
                .iter()
                .map(|b| b.policy.spec.name.as_str())
                .collect();
            assert_eq!(names, ["good-m"], "rule {rule}");
        }
    }

    #[test]
    fn a_policy_is_pending_until_compiled_at_its_stored_uid() {
        let a = fixtures::policy("a", 1, "true", None);
        let b = fixtures::policy("b", 1, "true", None);
        let mut cache = PolicyCache::default();
        assert_eq!(pending(&cache, vec![a.clone(), b.clone()]), 2);
        cache.insert(&a, compile(&a));
        assert_eq!(pending(&cache, vec![a.clone(), b.clone()]), 1);
        // `a` deleted and created again under the same name: its compiled form is stale.
        let mut again = fixtures::policy_json("a", 1, "true", None);
        again["metadata"]["uid"] = "uid-a-again".into();
        let again: ValidatingAdmissionPolicy = serde_json::from_value(again).unwrap();
        assert_eq!(pending(&cache, vec![again.clone(), b.clone()]), 2);
        cache.insert(&again, compile(&again));
        cache.insert(&b, compile(&b));
        assert_eq!(pending(&cache, vec![again, b]), 0);
    }

    #[test]
    fn bindings_stored_in_any_order_are_bound_by_name_and_orphans_are_left_out() {
        use crate::controllers::stored_binding;
        use kube::runtime::watcher::Event;
        let (p, q) = (
            fixtures::policy("p", 1, "true", None),
            fixtures::policy("q", 1, "true", None),
        );
        let mut cache = PolicyCache::default();
        cache.insert(&p, compile(&p));
        cache.insert(&q, compile(&q));
        let (store, mut writer) = stored_binding::store::<ValidatingAdmissionPolicy>();
        for (name, policy) in [
            ("p-3", "p"),
            ("q-1", "q"),
            ("p-1", "p"),
            ("none", "gone"),
            ("p-2", "p"),
        ] {
            writer.apply_watcher_event(&Event::Apply(fixtures::binding(name, policy)));
        }
        let read: Vec<String> = (store.state().iter())
            .map(|b| b.name().to_string())
            .collect();
        assert_eq!(read, ["none", "p-1", "p-2", "p-3", "q-1"]);

        let stored = Stored {
            policies: vec![Arc::new(q), Arc::new(p)],
            bindings: store.clone(),
        };
        let empty = Stored {
            policies: Vec::new(),
            bindings: BindingStore::default(),
        };
        let set = cache.build(stored, empty);
        let bound: Vec<(&str, Vec<&str>)> = (set.validating().iter())
            .map(|b| {
                let names = (b.bindings.iter()).map(|b| &*b.name).collect();
                (&*b.policy.name, names)
            })
            .collect();
        assert_eq!(
            bound,
            [("p", vec!["p-1", "p-2", "p-3"]), ("q", vec!["q-1"])]
        );
        assert!(cache.orphans.contains("none"));
    }
}
