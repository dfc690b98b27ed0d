//! What the audit knows between writes: each object's violations, and the bindings that allowed
//! it when passes are reported (only objects with at least one of either are held, at most
//! [`MAX_BYTES`] of them; objects themselves are never kept), how many
//! objects each binding matched at its resources' last completed scan, and which reports and
//! statuses changed since they were last written. What is held per object is kept small, since
//! a cluster may have a hundred thousand violating objects: its uid and name, a binding key and
//! message per result, and shared references for the rest (its resource, apiVersion, kind and
//! namespace): 479 bytes of heap for an object with one violation (counted with a counting
//! allocator over 20,000 objects), where the maps and strings of each took 1,403; the index of
//! the violating objects by binding adds 28 to 37 bytes an object (20,000 objects violating one
//! binding, or one of 1,000).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use celgate_snapshot::audit::{StoredAs, Verdict, Violation};

/// The most the objects with violations may take (their names, uids and messages, and a
/// fixed cost each): past it, objects found violating are not kept (no report) and every
/// binding's status says so, until the next plan.
pub const MAX_BYTES: usize = 32 * 1024 * 1024;
/// What an object with violations takes besides its strings and results.
const OBJECT_BYTES: usize = 256;
/// What one result (a violation or pass) of an object takes besides its message.
const RESULT_BYTES: usize = 64;

/// A binding, by policy then binding name.
pub type UnitKey = (Arc<str>, Arc<str>);

/// The object a report is about (apiVersion, kind and namespace shared among the objects of a
/// resource).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Subject {
    /// apiVersion.
    pub api_version: Arc<str>,
    /// Kind.
    pub kind: Arc<str>,
    /// Namespace; empty for a cluster-scoped object.
    pub namespace: Arc<str>,
    /// Name.
    pub name: Box<str>,
    /// The object's uid (the report's key).
    pub uid: Arc<str>,
}

/// One object's violations, by binding.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectFindings {
    /// The object.
    pub subject: Subject,
    /// The resource it was listed as.
    pub resource: Arc<StoredAs>,
    /// Its violations, in binding order (a slice: a map allocates room for 11).
    pub violations: Box<[(UnitKey, Violation)]>,
    /// The bindings that evaluated it and allowed it, in order (empty unless passes are
    /// reported).
    pub passes: Box<[UnitKey]>,
}

impl ObjectFindings {
    /// `subject`'s findings, listed as `resource`.
    pub fn new(
        subject: Subject,
        resource: Arc<StoredAs>,
        violations: BTreeMap<UnitKey, Violation>,
        passes: BTreeSet<UnitKey>,
    ) -> Self {
        Self {
            subject,
            resource,
            violations: violations.into_iter().collect(),
            passes: passes.into_iter().collect(),
        }
    }

    /// Its violation of `unit`, if any.
    pub fn violation(&self, unit: &UnitKey) -> Option<&Violation> {
        (self.violations.binary_search_by(|(k, _)| k.cmp(unit)).ok()).map(|i| &self.violations[i].1)
    }
}

/// Matched-object counts of one completed scan of one resource.
#[derive(Clone, Debug, Default)]
pub struct Pass {
    /// Objects each binding applied to.
    pub matched: HashMap<UnitKey, i64>,
    /// The objects with violations before the pass that it has not seen again.
    unseen: HashSet<Arc<str>>,
}

/// The audit's state.
#[derive(Debug)]
pub struct Findings {
    /// By uid (the subject's own).
    objects: HashMap<Arc<str>, ObjectFindings>,
    /// The uids of the objects in `objects` with a violation of each binding, so a binding's
    /// audit reads its own objects and not every object (the writer asks every binding each
    /// second: bindings × objects held otherwise).
    by_unit: HashMap<UnitKey, HashSet<Arc<str>>>,
    /// What `objects` take ([`size`]), and the most they may.
    bytes: usize,
    max_bytes: usize,
    /// Whether an object with violations was not kept (past `max_bytes`) since the last plan.
    overflowed: bool,
    /// Per resource, at its last completed scan: the objects each binding matched (a binding
    /// that matched none is left out). Keyed by resource first, so a resource is held once and
    /// not once for each of its bindings (~570 bytes per binding at 20,000, `make
    /// bench-footprint`).
    scanned: HashMap<StoredAs, HashMap<UnitKey, i64>>,
    /// Per binding: the resources it may not read, with why.
    errors: HashMap<UnitKey, BTreeMap<StoredAs, String>>,
    /// Reports to write again: object uid → its namespace.
    dirty_reports: HashMap<Arc<str>, Arc<str>>,
    /// The bindings whose status may have changed.
    dirty_status: Dirty,
    /// When each resource's last scan completed.
    completed: HashMap<StoredAs, SystemTime>,
}

impl Default for Findings {
    fn default() -> Self {
        Self::with_max_bytes(MAX_BYTES)
    }
}

/// What an object with violations takes, about (its binding keys are shared).
fn size(object: &ObjectFindings) -> usize {
    let subject = &object.subject;
    OBJECT_BYTES
        + subject.name.len()
        + subject.uid.len()
        + (object.violations.iter())
            .map(|(_, v)| RESULT_BYTES + v.message.len())
            .sum::<usize>()
        + object.passes.len() * RESULT_BYTES
}

impl Findings {
    /// Findings that keep at most `max_bytes` of objects with violations.
    pub fn with_max_bytes(max_bytes: usize) -> Self {
        Self {
            objects: HashMap::new(),
            by_unit: HashMap::new(),
            bytes: 0,
            max_bytes,
            overflowed: false,
            scanned: HashMap::new(),
            errors: HashMap::new(),
            dirty_reports: HashMap::new(),
            dirty_status: Dirty::default(),
            completed: HashMap::new(),
        }
    }

    /// Records the violations and passes of one object (none of either: it has no report).
    pub fn set(
        &mut self,
        subject: Subject,
        resource: &Arc<StoredAs>,
        violations: BTreeMap<UnitKey, Violation>,
        passes: BTreeSet<UnitKey>,
    ) {
        let uid = subject.uid.clone();
        let namespace = subject.namespace.clone();
        let next = (!violations.is_empty() || !passes.is_empty())
            .then(|| ObjectFindings::new(subject, resource.clone(), violations, passes));
        let changed = match next {
            Some(next) => {
                let held = self.objects.get(&uid).map_or(0, size);
                let bytes = self.bytes - held + size(&next);
                if held == 0 && bytes > self.max_bytes {
                    if !self.overflowed {
                        self.overflowed = true;
                        self.dirty_status = Dirty::All;
                    }
                    return;
                }
                self.bytes = bytes;
                self.index(&uid, &next);
                let held = self.objects.insert(uid.clone(), next.clone());
                if let Some(held) = &held {
                    self.unindex(&uid, held, Some(&next));
                }
                let changed = held.as_ref() != Some(&next);
                if changed {
                    self.dirty_status.add(violated(held.as_ref()));
                    self.dirty_status.add(violated(Some(&next)));
                }
                changed
            }
            None => {
                let gone = self.forget(&uid);
                self.dirty_status.add(violated(gone.as_ref()));
                gone.is_some()
            }
        };
        if changed {
            self.dirty_reports.insert(uid, namespace);
        }
    }

    /// Removes one object's findings, keeping count of what they took.
    fn forget(&mut self, uid: &str) -> Option<ObjectFindings> {
        let gone = self.objects.remove(uid)?;
        self.bytes -= size(&gone);
        self.unindex(uid, &gone, None);
        Some(gone)
    }

    /// Enters `object`'s violations in [`by_unit`](Self::by_unit).
    fn index(&mut self, uid: &Arc<str>, object: &ObjectFindings) {
        for (unit, _) in &object.violations {
            self.by_unit
                .entry(unit.clone())
                .or_default()
                .insert(uid.clone());
        }
    }

    /// Takes out of [`by_unit`](Self::by_unit) the violations `held` had and `next` (what the
    /// object has now, if it is still held) has not.
    fn unindex(&mut self, uid: &str, held: &ObjectFindings, next: Option<&ObjectFindings>) {
        for (unit, _) in &held.violations {
            if next.is_some_and(|n| n.violation(unit).is_some()) {
                continue;
            }
            if let Some(uids) = self.by_unit.get_mut(unit) {
                uids.remove(uid);
                if uids.is_empty() {
                    self.by_unit.remove(unit);
                }
            }
        }
    }

    /// Forgets one object (deleted).
    pub fn remove(&mut self, uid: &str) {
        if let Some(gone) = self.forget(uid) {
            self.dirty_status.add(violated(Some(&gone)));
            self.dirty_reports
                .insert(gone.subject.uid, gone.subject.namespace);
        }
    }

    /// Starts a scan of one resource: the objects with violations it holds now are forgotten
    /// at [`finish`](Self::finish) unless the scan sees them again.
    pub fn start(&self, resource: &StoredAs) -> Pass {
        Pass {
            matched: HashMap::new(),
            unseen: self
                .objects
                .iter()
                .filter(|(_, o)| *o.resource == *resource)
                .map(|(uid, _)| uid.clone())
                .collect(),
        }
    }

    /// Notes that a scan saw an object.
    pub fn seen(pass: &mut Pass, uid: &str) {
        pass.unseen.remove(uid);
    }

    /// Completes a scan of one resource.
    pub fn finish(&mut self, resource: &StoredAs, pass: Pass, units: &[UnitKey]) {
        for uid in &pass.unseen {
            self.remove(uid);
        }
        for unit in units {
            if let Some(errors) = self.errors.get_mut(unit) {
                errors.remove(resource);
            }
        }
        // A pass counts only the bindings that matched, and only those of `units`.
        let before = self.scanned.insert(resource.clone(), pass.matched);
        self.completed.insert(resource.clone(), SystemTime::now());
        // Their counts and last scan time changed (and those of any binding counted before).
        self.dirty_status.add(units.iter());
        self.dirty_status.add(before.iter().flat_map(|m| m.keys()));
    }

    /// Records that a resource cannot be read, for the bindings that select it.
    pub fn failed(&mut self, resource: &StoredAs, units: &[UnitKey], why: &str) {
        for unit in units {
            self.errors
                .entry(unit.clone())
                .or_default()
                .insert(resource.clone(), why.to_string());
        }
        self.dirty_status.add(units.iter());
    }

    /// Keeps only what belongs to `units` (a new plan): the others' violations, counts and
    /// errors go, and the reports they were in are written again.
    pub fn retain_units(&mut self, units: &HashSet<UnitKey>) {
        for (uid, object) in &mut self.objects {
            let before = object.violations.len() + object.passes.len();
            if object.violations.iter().any(|(k, _)| !units.contains(k)) {
                object.violations = (object.violations.iter())
                    .filter(|(k, _)| units.contains(k))
                    .cloned()
                    .collect();
            }
            if object.passes.iter().any(|k| !units.contains(k)) {
                object.passes = (object.passes.iter())
                    .filter(|k| units.contains(*k))
                    .cloned()
                    .collect();
            }
            if object.violations.len() + object.passes.len() != before {
                self.dirty_reports
                    .insert(uid.clone(), object.subject.namespace.clone());
            }
        }
        self.objects
            .retain(|_, o| !o.violations.is_empty() || !o.passes.is_empty());
        self.bytes = self.objects.values().map(size).sum();
        self.overflowed = false;
        for matched in self.scanned.values_mut() {
            matched.retain(|k, _| units.contains(k));
        }
        self.errors.retain(|k, _| units.contains(k));
        // The kept bindings' objects kept every violation of theirs.
        self.by_unit.retain(|k, _| units.contains(k));
        self.dirty_status = Dirty::All;
    }

    /// Up to `limit` of the reports to write since the last call (the rest stay for the next):
    /// each object's uid and namespace with its findings, or `None` when its report should go.
    pub fn take_reports(&mut self, limit: usize) -> Vec<ReportChange> {
        let taken: Vec<(Arc<str>, Arc<str>)> = if limit >= self.dirty_reports.len() {
            std::mem::take(&mut self.dirty_reports)
                .into_iter()
                .collect()
        } else {
            let uids: Vec<Arc<str>> = self.dirty_reports.keys().take(limit).cloned().collect();
            uids.into_iter()
                .filter_map(|uid| self.dirty_reports.remove_entry(&uid))
                .collect()
        };
        taken
            .into_iter()
            .map(|(uid, namespace)| ReportChange {
                findings: self.objects.get(&uid).cloned(),
                uid,
                namespace,
            })
            .collect()
    }

    /// Marks every object's report to be written (the reports became served).
    pub fn rewrite_all(&mut self) {
        for (uid, object) in &self.objects {
            self.dirty_reports
                .insert(uid.clone(), object.subject.namespace.clone());
        }
    }

    /// Puts a report back to be written again (its write failed).
    pub fn retry_report(&mut self, change: ReportChange) {
        self.dirty_reports.insert(change.uid, change.namespace);
    }

    /// The bindings whose status may have changed since the last call.
    pub fn take_status(&mut self) -> Dirty {
        std::mem::take(&mut self.dirty_status)
    }

    /// Marks every binding's status to be worked out and written again.
    pub fn retry_status(&mut self) {
        self.dirty_status = Dirty::All;
    }

    /// Marks for deletion those of `reports` (uid, namespace) whose object has no violation
    /// now: called once every resource of a plan completed a scan, so a report is deleted only
    /// after a completed scan no longer found its violations. The deletes are written (paced)
    /// with the other changes; returns how many.
    pub fn delete_stale(
        &mut self,
        reports: impl IntoIterator<Item = (Arc<str>, Arc<str>)>,
    ) -> usize {
        let mut stale = 0;
        for (uid, namespace) in reports {
            if !self.objects.contains_key(&uid) {
                self.dirty_reports.insert(uid, namespace);
                stale += 1;
            }
        }
        stale
    }

    /// Whether every one of `resources` completed a scan since its time `since` says.
    pub fn completed_since(
        &self,
        resources: &[StoredAs],
        since: impl Fn(&StoredAs) -> SystemTime,
    ) -> bool {
        resources
            .iter()
            .all(|r| self.completed.get(r).is_some_and(|at| *at >= since(r)))
    }

    /// One binding's audit: matched objects, its violations (how many, and the first `listed` by
    /// namespace and name), the resources it cannot read, and when the last of its resources
    /// completed a scan (none until each has).
    pub fn of_unit(&self, unit: &UnitKey, resources: &[StoredAs], listed: usize) -> UnitAudit {
        let scanned = resources
            .iter()
            .filter_map(|r| self.scanned.get(r)?.get(unit))
            .sum();
        let mut violations: Vec<(&Subject, &Violation)> = (self.by_unit.get(unit).into_iter())
            .flatten()
            .filter_map(|uid| self.objects.get(uid))
            .filter_map(|o| o.violation(unit).map(|v| (&o.subject, v)))
            .filter(|(_, v)| v.verdict != Verdict::Skip)
            .collect();
        let violating = violations.len();
        let order = |a: &(&Subject, &Violation), b: &(&Subject, &Violation)| {
            (&a.0.namespace, &a.0.name).cmp(&(&b.0.namespace, &b.0.name))
        };
        if listed < violations.len() {
            violations.select_nth_unstable_by(listed, order);
            violations.truncate(listed);
        }
        violations.sort_by(order);
        let mut errors: Vec<String> = self
            .errors
            .get(unit)
            .map(|by| by.values().cloned().collect())
            .unwrap_or_default();
        if self.overflowed {
            errors.push(format!(
                "the audit keeps at most {} MiB of findings and more objects violate: some violations are not counted and have no report",
                self.max_bytes / (1024 * 1024)
            ));
        }
        let last_scan = resources
            .iter()
            .map(|r| self.completed.get(r).copied())
            .collect::<Option<Vec<_>>>()
            .and_then(|times| times.into_iter().max());
        UnitAudit {
            scanned,
            violating,
            violations: violations
                .into_iter()
                .map(|(s, v)| (s.clone(), v.clone()))
                .collect(),
            errors,
            last_scan,
        }
    }
}

/// The bindings whose audit may have changed: the writer works out the status of these only,
/// so a tick's work follows what changed and not how many bindings there are.
#[derive(Debug, PartialEq)]
pub enum Dirty {
    /// These.
    Units(HashSet<UnitKey>),
    /// Every binding (a new plan, the findings' bound reached or left, a failed write).
    All,
}

impl Default for Dirty {
    fn default() -> Self {
        Dirty::Units(HashSet::new())
    }
}

impl Dirty {
    /// Adds `units`.
    fn add<'u>(&mut self, units: impl IntoIterator<Item = &'u UnitKey>) {
        if let Dirty::Units(dirty) = self {
            dirty.extend(units.into_iter().cloned());
        }
    }

    /// Whether no binding is.
    pub fn is_empty(&self) -> bool {
        matches!(self, Dirty::Units(units) if units.is_empty())
    }
}

/// The bindings `object` (if any) violates.
fn violated(object: Option<&ObjectFindings>) -> impl Iterator<Item = &UnitKey> {
    object
        .into_iter()
        .flat_map(|o| o.violations.iter().map(|(k, _)| k))
}

/// A report to write: the object's uid and namespace, and its findings (`None`: delete it).
#[derive(Debug, PartialEq)]
pub struct ReportChange {
    /// The object's uid.
    pub uid: Arc<str>,
    /// The object's namespace; empty for a cluster-scoped object.
    pub namespace: Arc<str>,
    /// Its findings, or `None` when it has none left.
    pub findings: Option<ObjectFindings>,
}

/// One binding's audit, for its status and metrics.
#[derive(Debug, Default)]
pub struct UnitAudit {
    /// Objects matched at the last completed scans.
    pub scanned: i64,
    /// How many objects violate.
    pub violating: usize,
    /// The first violations by namespace and name, as many as asked.
    pub violations: Vec<(Subject, Violation)>,
    /// Resources it cannot read, with why.
    pub errors: Vec<String>,
    /// When the last of its resources completed a scan.
    pub last_scan: Option<SystemTime>,
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::fixtures;

    fn subject(name: &str) -> Subject {
        Subject {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}").into(),
        }
    }

    fn maps() -> Arc<StoredAs> {
        Arc::new(fixtures::config_maps())
    }

    fn unit() -> UnitKey {
        (Arc::from("p"), Arc::from("b"))
    }

    fn failing() -> BTreeMap<UnitKey, Violation> {
        BTreeMap::from([(
            unit(),
            Violation {
                verdict: Verdict::Fail,
                message: "no".into(),
            },
        )])
    }

    #[test]
    fn a_report_is_written_when_an_objects_violations_change_and_only_then() {
        let mut f = Findings::default();
        f.set(subject("a"), &maps(), failing(), BTreeSet::new());
        assert_eq!(f.take_reports(usize::MAX).len(), 1);
        f.set(subject("a"), &maps(), failing(), BTreeSet::new());
        assert!(
            f.take_reports(usize::MAX).is_empty(),
            "unchanged: nothing to write"
        );
        f.set(subject("a"), &maps(), BTreeMap::new(), BTreeSet::new());
        assert_eq!(gone(&mut f), vec!["uid-a".to_string()]);
    }

    #[test]
    fn a_bindings_audit_counts_every_violation_and_lists_only_the_first_by_namespace_and_name() {
        let mut f = Findings::default();
        for name in ["d", "b", "e", "a", "c"] {
            f.set(subject(name), &maps(), failing(), BTreeSet::new());
        }
        let audit = f.of_unit(&unit(), &[fixtures::config_maps()], 2);
        assert_eq!(audit.violating, 5);
        let listed: Vec<&str> = audit.violations.iter().map(|(s, _)| &*s.name).collect();
        assert_eq!(listed, ["a", "b"]);
    }

    #[test]
    fn an_excepted_object_has_a_report_but_is_no_violation_of_the_binding() {
        let mut f = Findings::default();
        let skipped = BTreeMap::from([(
            unit(),
            Violation {
                verdict: Verdict::Skip,
                message: "excepted by PolicyException ns/x".into(),
            },
        )]);
        f.set(subject("a"), &maps(), skipped, BTreeSet::new());
        assert_eq!(f.take_reports(usize::MAX).len(), 1, "its report says skip");
        let audit = f.of_unit(&unit(), &[fixtures::config_maps()], usize::MAX);
        assert!(audit.violations.is_empty());
    }

    #[test]
    fn reports_are_taken_at_most_limit_at_a_time_and_the_rest_kept() {
        let mut f = Findings::default();
        for name in ["a", "b", "c"] {
            f.set(subject(name), &maps(), failing(), BTreeSet::new());
        }
        let mut uids: Vec<String> = (f.take_reports(2).into_iter())
            .map(|c| c.uid.to_string())
            .collect();
        assert_eq!(uids.len(), 2);
        uids.extend(f.take_reports(2).into_iter().map(|c| c.uid.to_string()));
        uids.sort();
        assert_eq!(uids, ["uid-a", "uid-b", "uid-c"]);
        assert!(f.take_reports(2).is_empty());
    }

    #[test]
    fn every_report_is_written_again_when_asked() {
        let mut f = Findings::default();
        f.set(subject("a"), &maps(), failing(), BTreeSet::new());
        f.take_reports(usize::MAX);
        f.rewrite_all();
        let again = f.take_reports(usize::MAX);
        assert_eq!(again.len(), 1);
        assert!(again[0].findings.is_some());
    }

    fn gone(f: &mut Findings) -> Vec<String> {
        f.take_reports(usize::MAX)
            .into_iter()
            .filter(|c| c.findings.is_none())
            .map(|c| c.uid.to_string())
            .collect()
    }

    #[test]
    fn a_scan_forgets_objects_it_does_not_see_again_and_counts_what_it_matched() {
        let mut f = Findings::default();
        f.set(subject("gone"), &maps(), failing(), BTreeSet::new());
        f.set(subject("kept"), &maps(), failing(), BTreeSet::new());
        f.take_reports(usize::MAX);
        let mut pass = f.start(&fixtures::config_maps());
        Findings::seen(&mut pass, "uid-kept");
        pass.matched.insert(unit(), 5);
        f.finish(&fixtures::config_maps(), pass, &[unit()]);
        assert_eq!(gone(&mut f), vec!["uid-gone".to_string()]);
        let audit = f.of_unit(&unit(), &[fixtures::config_maps()], usize::MAX);
        assert_eq!(audit.scanned, 5);
        assert_eq!(audit.violations.len(), 1);
        assert!(audit.last_scan.is_some());
    }

    #[test]
    fn counts_are_held_per_resource_once_and_only_for_bindings_that_matched() {
        let mut f = Findings::default();
        let keys: Vec<UnitKey> = (0..100)
            .map(|i| (Arc::from("p"), Arc::from(format!("b{i}").as_str())))
            .collect();
        let secrets = StoredAs {
            resource: "secrets".into(),
            kind: "Secret".into(),
            ..fixtures::config_maps()
        };
        for (resource, matched) in [(fixtures::config_maps(), 7), (secrets.clone(), 2)] {
            let mut pass = f.start(&resource);
            pass.matched.insert(keys[0].clone(), matched);
            f.finish(&resource, pass, &keys);
        }
        assert_eq!(f.scanned.len(), 2, "one entry per resource");
        assert!(f.scanned.values().all(|by| by.len() == 1));
        let both = [fixtures::config_maps(), secrets];
        assert_eq!(f.of_unit(&keys[0], &both, usize::MAX).scanned, 9);
        assert_eq!(f.of_unit(&keys[0], &both[..1], usize::MAX).scanned, 7);
        assert_eq!(f.of_unit(&keys[1], &both, usize::MAX).scanned, 0);
        assert!(f.of_unit(&keys[1], &both, usize::MAX).last_scan.is_some());

        // A later scan in which it matched nothing leaves it out again.
        let pass = f.start(&fixtures::config_maps());
        f.finish(&fixtures::config_maps(), pass, &keys);
        assert_eq!(f.of_unit(&keys[0], &both, usize::MAX).scanned, 2);
    }

    #[test]
    fn a_new_plan_drops_bindings_that_left_it() {
        let mut f = Findings::default();
        f.set(subject("a"), &maps(), failing(), BTreeSet::new());
        f.take_reports(usize::MAX);
        f.retain_units(&HashSet::new());
        assert_eq!(gone(&mut f), vec!["uid-a".to_string()]);
        assert_eq!(
            f.of_unit(&unit(), &[fixtures::config_maps()], usize::MAX)
                .violations
                .len(),
            0
        );
    }

    #[test]
    fn only_reports_of_objects_without_violations_are_deleted_as_stale() {
        let mut f = Findings::default();
        f.set(subject("a"), &maps(), failing(), BTreeSet::new());
        f.take_reports(usize::MAX);
        let stale = f.delete_stale([
            (Arc::from("uid-a"), Arc::from("ns")),
            (Arc::from("uid-old"), Arc::from("ns")),
        ]);
        assert_eq!(stale, 1);
        assert_eq!(gone(&mut f), vec!["uid-old".to_string()]);
    }

    #[test]
    fn findings_past_their_bound_are_not_kept_and_every_binding_is_told() {
        let mut f = Findings::with_max_bytes(2 * (OBJECT_BYTES + RESULT_BYTES) + 100);
        for name in ["a", "b", "c"] {
            f.set(subject(name), &maps(), failing(), BTreeSet::new());
        }
        let audit = f.of_unit(&unit(), &[fixtures::config_maps()], usize::MAX);
        assert_eq!(audit.violations.len(), 2);
        assert!(audit.errors[0].contains("at most"), "{:?}", audit.errors);
        f.set(subject("a"), &maps(), BTreeMap::new(), BTreeSet::new());
        f.set(subject("c"), &maps(), failing(), BTreeSet::new());
        assert_eq!(
            f.of_unit(&unit(), &[fixtures::config_maps()], usize::MAX)
                .violations
                .len(),
            2,
            "room again once one is fixed"
        );
        f.retain_units(&HashSet::from([unit()]));
        assert!(
            f.of_unit(&unit(), &[fixtures::config_maps()], usize::MAX)
                .errors
                .is_empty()
        );
    }

    #[test]
    fn a_bindings_audit_follows_its_objects_as_their_violations_move_between_bindings() {
        let mut f = Findings::default();
        let other: UnitKey = (Arc::from("p"), Arc::from("other"));
        let violates = |units: &[&UnitKey]| -> BTreeMap<UnitKey, Violation> {
            (units.iter())
                .map(|u| {
                    let v = Violation {
                        verdict: Verdict::Fail,
                        message: "no".into(),
                    };
                    ((*u).clone(), v)
                })
                .collect()
        };
        // Its violating objects, checking that only they are indexed under it.
        let names = |f: &Findings, unit: &UnitKey| -> Vec<String> {
            let names: Vec<String> = (f
                .of_unit(unit, &[fixtures::config_maps()], usize::MAX)
                .violations)
                .iter()
                .map(|(s, _)| s.name.to_string())
                .collect();
            let mut indexed: Vec<String> = (f.by_unit.get(unit).into_iter().flatten())
                .map(|uid| uid.trim_start_matches("uid-").to_string())
                .collect();
            indexed.sort();
            assert_eq!(indexed, names, "indexed under {unit:?}");
            names
        };
        f.set(
            subject("a"),
            &maps(),
            violates(&[&unit(), &other]),
            BTreeSet::new(),
        );
        f.set(subject("b"), &maps(), violates(&[&unit()]), BTreeSet::new());
        assert_eq!(names(&f, &unit()), ["a", "b"]);
        assert_eq!(names(&f, &other), ["a"]);

        // a now violates only the other binding; b is fixed; c is new.
        f.set(subject("a"), &maps(), violates(&[&other]), BTreeSet::new());
        f.set(subject("b"), &maps(), BTreeMap::new(), BTreeSet::new());
        f.set(subject("c"), &maps(), violates(&[&unit()]), BTreeSet::new());
        assert_eq!(names(&f, &unit()), ["c"]);
        assert_eq!(names(&f, &other), ["a"]);

        // c is deleted; a scan that no longer sees a forgets it.
        f.remove("uid-c");
        assert!(names(&f, &unit()).is_empty());
        let pass = f.start(&fixtures::config_maps());
        f.finish(&fixtures::config_maps(), pass, &[unit(), other.clone()]);
        assert!(names(&f, &other).is_empty());

        // A plan without the other binding: its violations go, the kept binding's stay.
        f.set(
            subject("d"),
            &maps(),
            violates(&[&unit(), &other]),
            BTreeSet::new(),
        );
        f.retain_units(&HashSet::from([unit()]));
        assert_eq!(names(&f, &unit()), ["d"]);
        assert!(names(&f, &other).is_empty());
        assert!(!f.by_unit.contains_key(&other), "nothing held for it");
    }

    #[test]
    fn only_the_bindings_whose_audit_changed_are_worked_out_again() {
        let mut f = Findings::default();
        let other: UnitKey = (Arc::from("p"), Arc::from("other"));
        let units = |list: &[&UnitKey]| Dirty::Units(list.iter().map(|u| (*u).clone()).collect());
        assert!(f.take_status().is_empty());

        // An object found violating, its violation moved to another binding, then fixed.
        f.set(subject("a"), &maps(), failing(), BTreeSet::new());
        assert_eq!(f.take_status(), units(&[&unit()]));
        f.set(subject("a"), &maps(), failing(), BTreeSet::new());
        assert!(f.take_status().is_empty(), "unchanged");
        let moved = BTreeMap::from([(
            other.clone(),
            Violation {
                verdict: Verdict::Fail,
                message: "no".into(),
            },
        )]);
        f.set(subject("a"), &maps(), moved, BTreeSet::new());
        assert_eq!(f.take_status(), units(&[&unit(), &other]));
        f.remove("uid-a");
        assert_eq!(f.take_status(), units(&[&other]));

        // A scan completed or failed: the bindings selecting its resource, and those it
        // counted before.
        let mut pass = f.start(&fixtures::config_maps());
        pass.matched.insert(other.clone(), 1);
        f.finish(&fixtures::config_maps(), pass, std::slice::from_ref(&other));
        assert_eq!(f.take_status(), units(&[&other]));
        let pass = f.start(&fixtures::config_maps());
        f.finish(&fixtures::config_maps(), pass, &[unit()]);
        assert_eq!(f.take_status(), units(&[&unit(), &other]));
        f.failed(&fixtures::config_maps(), &[unit()], "forbidden");
        assert_eq!(f.take_status(), units(&[&unit()]));

        // A new plan or a retry: every binding.
        f.retain_units(&HashSet::from([unit()]));
        assert_eq!(f.take_status(), Dirty::All);
        f.retry_status();
        assert_eq!(f.take_status(), Dirty::All);
        let mut small = Findings::with_max_bytes(0);
        small.set(subject("a"), &maps(), failing(), BTreeSet::new());
        assert_eq!(
            small.take_status(),
            Dirty::All,
            "past the bound: every binding is told"
        );
    }

    #[test]
    fn an_object_with_passes_only_has_a_report_until_its_bindings_leave_the_plan() {
        let mut f = Findings::default();
        f.set(
            subject("a"),
            &maps(),
            BTreeMap::new(),
            BTreeSet::from([unit()]),
        );
        let taken = f.take_reports(10);
        assert_eq!(taken.len(), 1);
        let held = taken[0].findings.as_ref().map(|o| o.passes.clone());
        assert_eq!(held.as_deref(), Some(&[unit()][..]));
        assert!(
            f.of_unit(&unit(), &[], usize::MAX).violations.is_empty(),
            "a pass is no violation"
        );
        f.retain_units(&HashSet::new());
        let taken = f.take_reports(10);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].findings, None, "its report goes");
    }
}
