//! A binding as the reflector stores keep it: only what celgate reads of a stored binding. Its
//! spec in the engine's form (converted once per uid and generation, and the very `Arc` every
//! policy set built from it holds), its uid and generation, the annotations celgate reads of a
//! binding, the status the status writer compares with (without `status.audit`, of which only
//! whether it is set is read). Held whole, with its metadata, the API's types (a label
//! selector's map takes a 544-byte node for one label) and a second, converted copy of its
//! spec, a binding took ~2,700 heap bytes (`make bench-footprint`, 1,000 policies × 20).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, OnceLock, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use celgate_crds::BindingStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource;
use kube::runtime::watcher::Event;

use crate::policy_kind::PolicyKind;

/// A binding annotation: `"false"` leaves the binding out of the audit.
pub const SCAN_ANNOTATION: &str = "audit.celgate.io/scan";

/// The annotations celgate reads of a binding; no other is stored.
const READ_ANNOTATIONS: [&str; 1] = [SCAN_ANNOTATION];

/// What celgate keeps of a stored binding of kind `P`.
#[derive(Debug)]
pub struct StoredBinding<P: PolicyKind> {
    /// The binding as the engine takes it (its name and its policy's name are in it).
    pub spec: Arc<P::BindingSpec>,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.generation`.
    pub generation: i64,
    /// The annotations of [`READ_ANNOTATIONS`] it carries, in that order.
    annotations: Box<[(&'static str, String)]>,
    /// Its status without `audit` (the audit's own field).
    status: Option<Box<Status>>,
    /// Whether its `status.audit` is set.
    pub audited: bool,
}

/// A binding's status without `audit`: a `BindingStatus` holds room for one inline (~100
/// bytes).
#[derive(Clone, Debug)]
struct Status {
    observed_generation: Option<i64>,
    resolved_params: Option<i32>,
    conditions: Option<Box<[StoredCondition]>>,
}

/// A condition of a stored binding's status, its strings shared with the other stored
/// bindings' ([`Strings`]): every binding's `Ready` condition has the same type, status and
/// reason, and the bindings of one policy the same message. Each binding's own copies took
/// ~200 heap bytes a binding (`make bench-footprint`).
#[derive(Clone, Debug)]
struct StoredCondition {
    type_: Arc<str>,
    status: Arc<str>,
    reason: Arc<str>,
    message: Arc<str>,
    last_transition_time: Time,
    observed_generation: Option<i64>,
}

impl StoredCondition {
    fn of(condition: &Condition, strings: &mut Strings) -> Self {
        Self {
            type_: strings.get(&condition.type_),
            status: strings.get(&condition.status),
            reason: strings.get(&condition.reason),
            message: strings.get(&condition.message),
            last_transition_time: condition.last_transition_time.clone(),
            observed_generation: condition.observed_generation,
        }
    }

    fn condition(&self) -> Condition {
        Condition {
            type_: self.type_.to_string(),
            status: self.status.to_string(),
            reason: self.reason.to_string(),
            message: self.message.to_string(),
            last_transition_time: self.last_transition_time.clone(),
            observed_generation: self.observed_generation,
        }
    }
}

/// The strings the stored bindings' conditions share, one of each. Those no stored binding
/// holds any more are dropped whenever the table has doubled since it was last pruned.
#[derive(Default)]
pub struct Strings {
    shared: HashSet<Arc<str>>,
    pruned_at: usize,
}

impl Strings {
    /// The fewest strings the table holds before it is pruned.
    const KEPT: usize = 64;

    /// `text`, shared.
    fn get(&mut self, text: &str) -> Arc<str> {
        if let Some(shared) = self.shared.get(text) {
            return shared.clone();
        }
        if self.shared.len() >= 2 * self.pruned_at.max(Self::KEPT) {
            self.shared.retain(|s| Arc::strong_count(s) > 1);
            self.pruned_at = self.shared.len();
        }
        let shared: Arc<str> = Arc::from(text);
        self.shared.insert(shared.clone());
        shared
    }
}

impl<P: PolicyKind> Clone for StoredBinding<P> {
    fn clone(&self) -> Self {
        Self {
            spec: self.spec.clone(),
            uid: self.uid.clone(),
            generation: self.generation,
            annotations: self.annotations.clone(),
            status: self.status.clone(),
            audited: self.audited,
        }
    }
}

/// The annotations of [`READ_ANNOTATIONS`] `binding` carries.
fn read_annotations<K: Resource>(binding: &K) -> Box<[(&'static str, String)]> {
    let Some(annotations) = &binding.meta().annotations else {
        return Box::default();
    };
    (READ_ANNOTATIONS.iter())
        .filter_map(|key| annotations.get(*key).map(|v| (*key, v.clone())))
        .collect()
}

impl<P: PolicyKind> StoredBinding<P> {
    /// `binding` as stored; its spec is `kept`'s when that is the same binding at the same
    /// generation (a status write), else converted; its conditions' strings from `strings`.
    pub fn of(binding: &P::Binding, kept: Option<&Self>, strings: &mut Strings) -> Self {
        let meta = binding.meta();
        let uid = meta.uid.clone().unwrap_or_default();
        let generation = meta.generation.unwrap_or_default();
        let spec = match kept {
            Some(kept) if kept.uid == uid && kept.generation == generation => kept.spec.clone(),
            _ => Arc::new(P::convert_binding(binding)),
        };
        let status = P::binding_status(binding);
        Self {
            spec,
            uid,
            generation,
            annotations: read_annotations(binding),
            audited: status.is_some_and(|s| s.audit.is_some()),
            status: status.map(|s| {
                Box::new(Status {
                    observed_generation: s.observed_generation,
                    resolved_params: s.resolved_params,
                    conditions: (s.conditions.as_ref()).map(|conditions| {
                        (conditions.iter())
                            .map(|c| StoredCondition::of(c, strings))
                            .collect()
                    }),
                })
            }),
        }
    }

    /// Its status without `audit` (the audit's own field, of which only whether it is set is
    /// kept: [`StoredBinding::audited`]).
    pub fn status(&self) -> Option<BindingStatus> {
        self.status.as_deref().map(|s| BindingStatus {
            observed_generation: s.observed_generation,
            resolved_params: s.resolved_params,
            conditions: (s.conditions.as_ref())
                .map(|conditions| conditions.iter().map(StoredCondition::condition).collect()),
            audit: None,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        P::binding_names(&self.spec).0
    }

    /// The name of the policy it binds.
    pub fn policy_name(&self) -> &str {
        P::binding_names(&self.spec).1
    }

    /// The value of `key`, one of the annotations celgate reads.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        (self.annotations.iter())
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether `binding` is this stored binding with its uid, generation and the annotations
    /// celgate reads unchanged (its spec is then this one's).
    pub fn same_as(&self, binding: &P::Binding) -> bool {
        let meta = binding.meta();
        meta.uid.as_deref() == Some(self.uid.as_str())
            && meta.generation.unwrap_or_default() == self.generation
            && read_annotations(binding) == self.annotations
    }
}

/// A stored binding, ordered and compared by its name, so a set of them is a map by name that
/// keeps no key of its own.
struct ByName<P: PolicyKind>(Arc<StoredBinding<P>>);

impl<P: PolicyKind> PartialEq for ByName<P> {
    fn eq(&self, other: &Self) -> bool {
        self.0.name() == other.0.name()
    }
}

impl<P: PolicyKind> Eq for ByName<P> {}

impl<P: PolicyKind> PartialOrd for ByName<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<P: PolicyKind> Ord for ByName<P> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.name().cmp(other.0.name())
    }
}

impl<P: PolicyKind> Borrow<str> for ByName<P> {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

/// A stored binding's converted spec, ordered and compared by the binding's name.
struct SpecByName<P: PolicyKind>(Arc<P::BindingSpec>);

impl<P: PolicyKind> SpecByName<P> {
    fn name(&self) -> &str {
        P::binding_names(&self.0).0
    }
}

impl<P: PolicyKind> PartialEq for SpecByName<P> {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl<P: PolicyKind> Eq for SpecByName<P> {}

impl<P: PolicyKind> PartialOrd for SpecByName<P> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<P: PolicyKind> Ord for SpecByName<P> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.name().cmp(other.name())
    }
}

impl<P: PolicyKind> Borrow<str> for SpecByName<P> {
    fn borrow(&self) -> &str {
        self.name()
    }
}

/// The bindings that name one policy: their specs by binding name, and the list a policy set
/// binds (made when first asked for after a change, then shared by every set until the next).
struct Group<P: PolicyKind> {
    specs: BTreeSet<SpecByName<P>>,
    bound: OnceLock<Arc<[Arc<P::BindingSpec>]>>,
}

impl<P: PolicyKind> Default for Group<P> {
    fn default() -> Self {
        Self {
            specs: BTreeSet::new(),
            bound: OnceLock::new(),
        }
    }
}

/// The stored bindings, by name and grouped by the policy each names.
struct Bindings<P: PolicyKind> {
    by_name: BTreeSet<ByName<P>>,
    by_policy: HashMap<String, Group<P>>,
}

impl<P: PolicyKind> Default for Bindings<P> {
    fn default() -> Self {
        Self {
            by_name: BTreeSet::new(),
            by_policy: HashMap::new(),
        }
    }
}

impl<P: PolicyKind> Bindings<P> {
    /// These bindings, grouped.
    fn of(by_name: BTreeSet<ByName<P>>) -> Self {
        let mut bindings = Self {
            by_name: BTreeSet::new(),
            by_policy: HashMap::new(),
        };
        for binding in &by_name {
            bindings.group(binding.0.spec.clone());
        }
        bindings.by_name = by_name;
        bindings
    }

    /// Stores `binding` in place of the one of its name. A binding whose spec is the stored
    /// one's (a status write: [`StoredBinding::of`] keeps it) leaves the groups as they are.
    fn insert(&mut self, binding: ByName<P>) {
        let spec = binding.0.spec.clone();
        match self.by_name.replace(binding) {
            Some(old) if Arc::ptr_eq(&old.0.spec, &spec) => {}
            Some(old) => {
                self.ungroup(&old.0.spec);
                self.group(spec);
            }
            None => self.group(spec),
        }
    }

    /// Removes the binding named `name`.
    fn remove(&mut self, name: &str) {
        if let Some(old) = self.by_name.take(name) {
            self.ungroup(&old.0.spec);
        }
    }

    fn group(&mut self, spec: Arc<P::BindingSpec>) {
        let policy = P::binding_names(&spec).1;
        let group = match self.by_policy.get_mut(policy) {
            Some(group) => group,
            None => self.by_policy.entry(policy.to_string()).or_default(),
        };
        group.specs.replace(SpecByName(spec));
        group.bound = OnceLock::new();
    }

    fn ungroup(&mut self, spec: &P::BindingSpec) {
        let (name, policy) = P::binding_names(spec);
        if let Some(group) = self.by_policy.get_mut(policy) {
            group.specs.remove(name);
            group.bound = OnceLock::new();
            if group.specs.is_empty() {
                self.by_policy.remove(policy);
            }
        }
    }
}

/// The stored bindings of kind `P`, in the order of their names and grouped by the policy each
/// names. Not kube's reflector store: that one keys each object by a kube `ObjectRef` of its
/// own (name, namespace, resourceVersion, uid), and its map took ~200 heap bytes a binding.
/// Kept in order and grouped, a publish of the policy set reads each policy's bindings as one
/// shared list, made again only for a policy whose bindings changed: building the set from
/// every binding took 50 to 130 ms at 100,000 bindings (`make bench-footprint`), almost all
/// of it reaching each binding in memory.
pub struct BindingStore<P: PolicyKind> {
    bindings: Arc<RwLock<Bindings<P>>>,
}

impl<P: PolicyKind> Clone for BindingStore<P> {
    fn clone(&self) -> Self {
        Self {
            bindings: self.bindings.clone(),
        }
    }
}

impl<P: PolicyKind> Default for BindingStore<P> {
    /// An empty store.
    fn default() -> Self {
        Self {
            bindings: Arc::default(),
        }
    }
}

impl<P: PolicyKind> BindingStore<P> {
    fn read(&self) -> RwLockReadGuard<'_, Bindings<P>> {
        self.bindings.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Bindings<P>> {
        self.bindings
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Every stored binding, by name.
    pub fn state(&self) -> Vec<Arc<StoredBinding<P>>> {
        self.read().by_name.iter().map(|b| b.0.clone()).collect()
    }

    /// Every stored binding, by name, and the names of the policies they name, read at once:
    /// the policies from the grouping the store keeps (one name a policy, not one a binding).
    pub fn state_and_policies(&self) -> (Vec<Arc<StoredBinding<P>>>, HashSet<String>) {
        let bindings = self.read();
        let state = bindings.by_name.iter().map(|b| b.0.clone()).collect();
        (state, bindings.by_policy.keys().cloned().collect())
    }

    /// The binding named `name`.
    pub fn get(&self, name: &str) -> Option<Arc<StoredBinding<P>>> {
        self.read().by_name.get(name).map(|b| b.0.clone())
    }

    /// Whether no binding is stored.
    pub fn is_empty(&self) -> bool {
        self.read().by_name.is_empty()
    }

    /// Whether some stored binding names `policy`.
    pub fn binds(&self, policy: &str) -> bool {
        self.read().by_policy.contains_key(policy)
    }

    /// The specs of the bindings that name `policy`, by binding name, as a policy set binds
    /// them; `None` when no stored binding names it.
    pub fn bound_to(&self, policy: &str) -> Option<Arc<[Arc<P::BindingSpec>]>> {
        let bindings = self.read();
        let group = bindings.by_policy.get(policy)?;
        let bound = group
            .bound
            .get_or_init(|| group.specs.iter().map(|s| s.0.clone()).collect());
        Some(bound.clone())
    }

    /// The names of the first `at_most` stored bindings that name `policy`, in name order.
    pub fn naming(&self, policy: &str, at_most: usize) -> Vec<String> {
        let bindings = self.read();
        (bindings.by_policy.get(policy).into_iter())
            .flat_map(|group| group.specs.iter().map(|s| s.name().to_string()))
            .take(at_most)
            .collect()
    }

    /// The names of the stored bindings whose policy `stored` says is not stored, each with
    /// that policy's name.
    pub fn naming_missing(&self, stored: impl Fn(&str) -> bool) -> Vec<(String, String)> {
        let bindings = self.read();
        (bindings.by_policy.iter())
            .filter(|(policy, _)| !stored(policy))
            .flat_map(|(policy, group)| {
                (group.specs.iter()).map(|s| (s.name().to_string(), policy.clone()))
            })
            .collect()
    }
}

/// A store holding these bindings, for tests that build policy sets without watch events.
#[cfg(test)]
impl<P: PolicyKind> FromIterator<Arc<StoredBinding<P>>> for BindingStore<P> {
    fn from_iter<I: IntoIterator<Item = Arc<StoredBinding<P>>>>(bindings: I) -> Self {
        let by_name = bindings.into_iter().map(ByName).collect();
        Self {
            bindings: Arc::new(RwLock::new(Bindings::of(by_name))),
        }
    }
}

/// Takes the watch events of a binding kind into its store, each binding as a
/// [`StoredBinding`]: as kube's reflector does, a list replaces the store whole once it
/// completes, and an update or a deletion changes it at once.
pub struct BindingWriter<P: PolicyKind> {
    store: BindingStore<P>,
    /// What the list in progress delivered so far.
    listing: BTreeSet<ByName<P>>,
    /// The strings the stored conditions share.
    strings: Strings,
}

/// An empty store of bindings of kind `P` with its writer.
pub fn store<P: PolicyKind>() -> (BindingStore<P>, BindingWriter<P>) {
    let store = BindingStore::default();
    let writer = BindingWriter {
        store: store.clone(),
        listing: BTreeSet::new(),
        strings: Strings::default(),
    };
    (store, writer)
}

impl<P: PolicyKind> BindingWriter<P> {
    /// The store it writes.
    pub fn as_reader(&self) -> BindingStore<P> {
        self.store.clone()
    }

    /// `binding` as stored (see [`StoredBinding::of`]; the store's binding of that name is
    /// the one kept).
    fn stored(&mut self, binding: &P::Binding) -> ByName<P> {
        let name = binding.meta().name.as_deref().unwrap_or_default();
        let kept = self.store.get(name);
        ByName(Arc::new(StoredBinding::of(
            binding,
            kept.as_deref(),
            &mut self.strings,
        )))
    }

    /// Takes in one watch event.
    pub fn apply_watcher_event(&mut self, event: &Event<P::Binding>) {
        match event {
            Event::Apply(binding) => {
                let stored = self.stored(binding);
                self.store.write().insert(stored);
            }
            Event::Delete(binding) => {
                let name = binding.meta().name.as_deref().unwrap_or_default();
                self.store.write().remove(name);
            }
            Event::Init => self.listing = BTreeSet::new(),
            Event::InitApply(binding) => {
                let stored = self.stored(binding);
                self.listing.replace(stored);
            }
            Event::InitDone => {
                let listed = Bindings::of(std::mem::take(&mut self.listing));
                *self.store.write() = listed;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use celgate_crds::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
    use serde_json::json;

    use super::*;
    use crate::fixtures::binding_json;

    fn binding(object: serde_json::Value) -> ValidatingAdmissionPolicyBinding {
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn a_status_write_keeps_the_converted_spec_and_a_new_generation_converts_it_again() {
        let (store, mut writer) = store::<ValidatingAdmissionPolicy>();
        let mut object = binding_json("b", "p");
        object["metadata"]["uid"] = json!("u1");
        object["metadata"]["generation"] = json!(1);
        writer.apply_watcher_event(&Event::Apply(binding(object.clone())));
        let first = store.get("b").unwrap();
        assert_eq!((first.name(), first.policy_name()), ("b", "p"));

        object["status"] =
            json!({"observedGeneration": 1, "audit": {"scanned": 1, "violations": 0}});
        writer.apply_watcher_event(&Event::Apply(binding(object.clone())));
        let written = store.get("b").unwrap();
        assert!(Arc::ptr_eq(&first.spec, &written.spec));
        assert!(written.audited);
        let status = written.status().unwrap();
        assert_eq!(
            (status.observed_generation, &status.audit),
            (Some(1), &None)
        );

        object["metadata"]["generation"] = json!(2);
        object["spec"]["policyName"] = json!("q");
        writer.apply_watcher_event(&Event::Apply(binding(object)));
        let changed = store.get("b").unwrap();
        assert!(!Arc::ptr_eq(&first.spec, &changed.spec));
        assert_eq!(changed.policy_name(), "q");
    }

    /// The names of the bindings bound to `policy`, as a policy set binds them.
    fn bound_names(store: &BindingStore<ValidatingAdmissionPolicy>, policy: &str) -> Vec<String> {
        (store.bound_to(policy).iter())
            .flat_map(|bound| bound.iter().map(|b| b.name.to_string()))
            .collect()
    }

    #[test]
    fn each_policys_bindings_are_one_shared_list_made_again_only_when_they_change() {
        let (store, mut writer) = store::<ValidatingAdmissionPolicy>();
        let apply = |writer: &mut BindingWriter<_>, object: serde_json::Value| {
            writer.apply_watcher_event(&Event::Apply(binding(object)));
        };
        for (name, policy) in [("b3", "p"), ("b1", "p"), ("c1", "q"), ("b2", "p")] {
            apply(&mut writer, binding_json(name, policy));
        }
        assert_eq!(bound_names(&store, "p"), ["b1", "b2", "b3"]);
        assert_eq!(bound_names(&store, "q"), ["c1"]);
        assert!(store.binds("q") && !store.binds("r") && store.bound_to("r").is_none());
        assert_eq!(store.naming("p", 5), ["b1", "b2", "b3"]);
        assert_eq!(store.naming("p", 2), ["b1", "b2"]);
        assert!(store.naming("r", 5).is_empty());
        let (state, policies) = store.state_and_policies();
        let names: Vec<&str> = state.iter().map(|b| b.name()).collect();
        assert_eq!(names, ["b1", "b2", "b3", "c1"]);
        assert_eq!(policies, HashSet::from(["p".to_string(), "q".to_string()]));

        // A status write keeps the spec, and so the list every set shares.
        let before = store.bound_to("p").unwrap();
        let mut written = binding_json("b2", "p");
        written["status"] = json!({"observedGeneration": 1});
        apply(&mut writer, written);
        assert!(Arc::ptr_eq(&before, &store.bound_to("p").unwrap()));

        // A binding moved to another policy leaves the first list and joins the other; a
        // policy whose last binding goes binds nothing.
        let mut moved = binding_json("b1", "q");
        moved["metadata"]["generation"] = json!(2);
        apply(&mut writer, moved);
        assert_eq!(bound_names(&store, "p"), ["b2", "b3"]);
        assert_eq!(bound_names(&store, "q"), ["b1", "c1"]);
        writer.apply_watcher_event(&Event::Delete(binding(binding_json("c1", "q"))));
        writer.apply_watcher_event(&Event::Delete(binding(binding_json("b1", "q"))));
        assert!(!store.binds("q") && store.bound_to("q").is_none());
        assert_eq!(
            store.state_and_policies().1,
            HashSet::from(["p".to_string()])
        );

        // A binding of a policy not stored is named with it.
        apply(&mut writer, binding_json("lost", "gone"));
        let missing = store.naming_missing(|policy| policy == "p");
        assert_eq!(missing, [("lost".to_string(), "gone".to_string())]);

        // A list replaces every group.
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(binding(binding_json("d1", "q"))));
        writer.apply_watcher_event(&Event::InitDone);
        assert!(!store.binds("p") && !store.binds("gone"));
        assert_eq!(bound_names(&store, "q"), ["d1"]);
        let names: Vec<String> = (store.state().iter())
            .map(|b| b.name().to_string())
            .collect();
        assert_eq!(names, ["d1"]);
    }

    #[test]
    fn the_conditions_of_bindings_share_their_strings_and_read_back_as_written() {
        let (store, mut writer) = store::<ValidatingAdmissionPolicy>();
        let ready = json!({"type": "Ready", "status": "True", "reason": "Enforced",
            "message": "enforced with policy 'p' generation 1",
            "lastTransitionTime": "2026-12-05T23:00:05Z", "observedGeneration": 1});
        for name in ["b1", "b2"] {
            let mut object = binding_json(name, "p");
            object["status"] = json!({"observedGeneration": 1, "conditions": [ready]});
            writer.apply_watcher_event(&Event::Apply(binding(object)));
        }
        let (b1, b2) = (store.get("b1").unwrap(), store.get("b2").unwrap());
        let condition = |b: &StoredBinding<ValidatingAdmissionPolicy>| {
            b.status.as_ref().unwrap().conditions.as_ref().unwrap()[0].clone()
        };
        let (c1, c2) = (condition(&b1), condition(&b2));
        assert!(Arc::ptr_eq(&c1.message, &c2.message));
        assert!(Arc::ptr_eq(&c1.reason, &c2.reason));
        let read_back = serde_json::to_value(b2.status().unwrap().conditions).unwrap();
        assert_eq!(read_back, json!([ready]));
    }

    #[test]
    fn strings_no_binding_holds_are_dropped_when_the_table_doubles() {
        let mut strings = Strings::default();
        let held = strings.get("held");
        for i in 0..Strings::KEPT * 2 {
            strings.get(&format!("gone {i}"));
        }
        let again = strings.get("held");
        assert!(Arc::ptr_eq(&held, &again));
        assert!(strings.shared.len() <= 2, "{}", strings.shared.len());
    }

    #[test]
    fn only_the_annotations_celgate_reads_are_kept() {
        let (store, mut writer) = store::<ValidatingAdmissionPolicy>();
        let mut object = binding_json("b", "p");
        object["metadata"]["annotations"] = json!({SCAN_ANNOTATION: "false", "team": "payments"});
        let full = binding(object);
        writer.apply_watcher_event(&Event::Apply(full.clone()));
        let stored = store.get("b").unwrap();
        assert_eq!(stored.annotation(SCAN_ANNOTATION), Some("false"));
        assert_eq!(stored.annotation("team"), None);
        assert!(stored.same_as(&full));
    }
}
