//! Which kinds a policy is type-checked against: kube-controller-manager's choice
//! (`typesToCheck`), and celgate's further kinds.
//!
//! Upstream, per resource rule in order: a rule with a `*` in any group or version is skipped;
//! resources with `*` or `/` are dropped (the rule is skipped if none is left); groups,
//! versions and resources are sorted and every combination resolved with the RESTMapper's
//! `KindsFor`; each kind found counts against a per-rule counter, and when one rule's counter
//! reaches 10 the selection ends there (later kinds and rules are ignored). The kinds are
//! sorted by group, version and kind.
//!
//! celgate also checks, after those, every further kind a rule can match: wildcards and
//! subresources expanded over the served resources (a subresource's kind is the one discovery
//! reports, e.g. `autoscaling/v1, Kind=Scale`), and the kinds past upstream's cap, up to
//! [`MAX_KINDS`] kinds in all. Every rule that yields no kind and every kind past the cap is
//! named in `skipped` with the reason.

use std::collections::BTreeSet;

use super::{SkippedKind, TypeSource};
use crate::matching::resource_listed;
use crate::model::{MatchResources, ResourceRule};
use crate::schema::Gvk;

/// Upstream's per-rule cap (`maxTypesToCheck`).
pub const UPSTREAM_MAX_KINDS: usize = 10;
/// celgate's cap on the kinds one policy is checked against, upstream's included.
pub const MAX_KINDS: usize = 50;

/// The kinds to check a policy against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KindSelection {
    /// Upstream's kinds, in upstream's order (its warnings cover exactly these).
    pub upstream: Vec<Gvk>,
    /// celgate's further kinds, sorted, none of them in `upstream`.
    pub additional: Vec<Gvk>,
    /// Rules and kinds left out, and why.
    pub skipped: Vec<SkippedKind>,
}

impl KindSelection {
    /// Every selected kind: upstream's, then celgate's.
    pub fn all(&self) -> impl Iterator<Item = &Gvk> {
        self.upstream.iter().chain(&self.additional)
    }
}

/// The kinds a policy with `match_constraints` is type-checked against, so the operator can
/// fetch their schemas (and the paramKind's) before checking.
pub fn kinds_to_check(
    match_constraints: Option<&MatchResources>,
    source: &dyn TypeSource,
) -> KindSelection {
    let rules = match_constraints.map_or(&[][..], |m| &m.resource_rules[..]);
    let mut selection = KindSelection {
        upstream: upstream_kinds(rules, source),
        ..KindSelection::default()
    };
    if rules.is_empty() {
        selection.skipped.push(SkippedKind {
            what: "spec.matchConstraints".into(),
            reason: "it has no resourceRules, so there is no kind to check against".into(),
        });
        return selection;
    }
    let served = source.resources();
    let mut further = BTreeSet::new();
    for (i, rule) in rules.iter().enumerate() {
        let kinds = rule_kinds(rule, &served, source);
        if kinds.is_empty() {
            selection.skipped.push(SkippedKind {
                what: format!("spec.matchConstraints.resourceRules[{i}]"),
                reason: "it matches no resource the cluster serves".into(),
            });
        }
        further.extend(kinds);
    }
    let room = MAX_KINDS.saturating_sub(selection.upstream.len());
    for (n, gvk) in further
        .into_iter()
        .filter(|k| !selection.upstream.contains(k))
        .enumerate()
    {
        if n < room {
            selection.additional.push(gvk);
        } else {
            selection.skipped.push(SkippedKind {
                what: gvk.to_string(),
                reason: format!("celgate checks a policy against at most {MAX_KINDS} kinds"),
            });
        }
    }
    selection
}

/// Every kind the resource rules of `match_constraints` can match in a cluster serving what
/// `source` serves (wildcards and subresources included, no limit): the kinds whose schemas a
/// mutating policy's requests need.
pub fn matched_kinds(
    match_constraints: Option<&MatchResources>,
    source: &dyn TypeSource,
) -> BTreeSet<Gvk> {
    let rules = match_constraints.map_or(&[][..], |m| &m.resource_rules[..]);
    if rules.is_empty() {
        return BTreeSet::new();
    }
    let served = source.resources();
    rules
        .iter()
        .flat_map(|rule| rule_kinds(rule, &served, source))
        .collect()
}

/// kube-controller-manager's `typesToCheck`.
fn upstream_kinds(rules: &[ResourceRule], source: &dyn TypeSource) -> Vec<Gvk> {
    let mut kinds = BTreeSet::new();
    'rules: for rule in rules {
        let wild = |list: &[String]| list.is_empty() || list.iter().any(|v| v.contains('*'));
        if wild(&rule.api_groups) || wild(&rule.api_versions) {
            continue;
        }
        let mut resources: Vec<&String> = rule
            .resources
            .iter()
            .filter(|r| !r.contains(['*', '/']))
            .collect();
        if resources.is_empty() {
            continue;
        }
        let mut groups: Vec<&String> = rule.api_groups.iter().collect();
        let mut versions: Vec<&String> = rule.api_versions.iter().collect();
        groups.sort();
        versions.sort();
        resources.sort();
        let mut count = 0;
        for group in &groups {
            for version in &versions {
                for resource in &resources {
                    for gvk in source.kinds_for(group, version, resource) {
                        if gvk == Gvk::default() {
                            continue;
                        }
                        kinds.insert(gvk);
                        count += 1;
                        if count == UPSTREAM_MAX_KINDS {
                            break 'rules;
                        }
                    }
                }
            }
        }
    }
    kinds.into_iter().collect()
}

/// Every kind `rule` can match: the served resources and subresources it names (wildcards
/// included), and the kinds of the resources it names exactly.
fn rule_kinds(
    rule: &ResourceRule,
    served: &[super::ApiResource],
    source: &dyn TypeSource,
) -> BTreeSet<Gvk> {
    let listed = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
    let mut kinds: BTreeSet<Gvk> = served
        .iter()
        .filter(|r| {
            let (name, sub) = r.resource.split_once('/').unwrap_or((&r.resource, ""));
            listed(&rule.api_groups, &r.group)
                && listed(&rule.api_versions, &r.version)
                && resource_listed(&rule.resources, name, sub)
        })
        .map(|r| r.kind.clone())
        .filter(|k| *k != Gvk::default())
        .collect();
    let exact = |v: &&String| !v.contains(['*', '/']);
    for group in rule.api_groups.iter().filter(exact) {
        for version in rule.api_versions.iter().filter(exact) {
            for resource in rule.resources.iter().filter(exact) {
                kinds.extend(
                    source
                        .kinds_for(group, version, resource)
                        .into_iter()
                        .filter(|k| *k != Gvk::default()),
                );
            }
        }
    }
    kinds
}
