//! The resources a cluster serves and the kind of each, read from aggregated discovery
//! answers (`/api` and `/apis`), mapped as client-go's discovery RESTMapper maps them. The
//! running operator fills it from the cluster; the offline commands from the embedded
//! snapshot of the built-in kinds and CRD files.

use std::collections::HashMap;

use celgate_engine::matching::resource_listed;
use celgate_engine::model::{MatchPolicy, MatchResources, ResourceRule};
use celgate_engine::schema::Gvk;
use celgate_engine::typecheck::ApiResource;
use kube::core::GroupVersionKind;
use kube::core::discovery::v2::APIGroupDiscoveryList;

/// One served resource or subresource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServedResource {
    /// API group, empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// `deployments`, or `deployments/scale` for a subresource.
    pub resource: String,
    /// The kind discovery reports for it (a subresource's may be in another group, as
    /// `autoscaling/v1` Scale for `deployments/scale`).
    pub kind: GroupVersionKind,
    /// Whether its objects live in a namespace (a subresource's are its resource's).
    pub namespaced: bool,
    /// Whether it can be listed and watched (discovery's verbs name both): what has stored
    /// objects to read. Review kinds and `bindings` are only created; `componentstatuses` are
    /// listed but not watched (each list probes the control plane's components).
    pub watchable: bool,
}

/// The resource names of one group version and the kind each maps to, as client-go's
/// `DefaultRESTMapper` of that group version holds them.
#[derive(Debug, Clone, Default)]
struct VersionMapper {
    group: String,
    version: String,
    /// Lower-case resource name (plural or singular) → kind.
    kinds: HashMap<String, String>,
}

impl VersionMapper {
    /// Maps the plural and singular resource names to `kind` (client-go's `AddSpecific`).
    fn add_specific(&mut self, plural: &str, singular: &str, kind: &str) {
        self.kinds.insert(plural.to_string(), kind.to_string());
        self.kinds.insert(singular.to_string(), kind.to_string());
    }

    /// Maps the resource names guessed from `kind` to it (client-go's `Add`, with
    /// `UnsafeGuessKindToResource`).
    fn add_guessed(&mut self, kind: &str) {
        let singular = kind.to_lowercase();
        let plural = if singular.ends_with("endpoints") {
            singular.clone()
        } else if singular.ends_with('s') {
            format!("{singular}es")
        } else if let Some(stem) = singular.strip_suffix('y') {
            format!("{stem}ies")
        } else {
            format!("{singular}s")
        };
        self.add_specific(&plural, &singular, kind);
    }
}

/// The served resources at one discovery.
#[derive(Debug, Clone, Default)]
pub struct ServedResources {
    /// Every resource and subresource, in discovery order (the core group first, then the
    /// groups and their versions in the API server's order of preference).
    resources: Vec<ServedResource>,
    /// One mapper per group version, in the same order.
    mappers: Vec<VersionMapper>,
}

impl ServedResources {
    /// The served resources listed by aggregated discovery answers (`/api` first, then
    /// `/apis`). Versions whose discovery is stale (an aggregated API server that does not
    /// answer) are left out, as client-go's RESTMapper leaves them out.
    pub fn from_discovery<'a>(lists: impl IntoIterator<Item = &'a APIGroupDiscoveryList>) -> Self {
        let mut served = Self::default();
        for group in lists.into_iter().flat_map(|list| &list.items) {
            let group_name = group
                .metadata
                .as_ref()
                .and_then(|m| m.name.clone())
                .unwrap_or_default();
            for version in &group.versions {
                if version.freshness.as_deref() == Some("Stale") {
                    continue;
                }
                let Some(version_name) = version.version.clone() else {
                    continue;
                };
                let mut mapper = VersionMapper {
                    group: group_name.clone(),
                    version: version_name.clone(),
                    kinds: HashMap::new(),
                };
                let kind_of = |reported: Option<&kube::core::discovery::v2::GroupVersionKind>| {
                    let reported = reported.cloned().unwrap_or_default();
                    let nonempty = |s: Option<String>, default: &str| {
                        s.filter(|s| !s.is_empty())
                            .unwrap_or_else(|| default.to_string())
                    };
                    GroupVersionKind {
                        group: nonempty(reported.group, &group_name),
                        version: nonempty(reported.version, &version_name),
                        kind: reported.kind.unwrap_or_default(),
                    }
                };
                for resource in &version.resources {
                    let Some(name) = resource.resource.as_deref() else {
                        continue;
                    };
                    let kind = kind_of(resource.response_kind.as_ref());
                    let namespaced = resource.scope.as_deref() == Some("Namespaced");
                    // As client-go's NewDiscoveryRESTMapper: the plural and the singular name
                    // (guessed from the kind when discovery gives none) map to the kind in
                    // this group version, and the guessed names of `<Kind>List` to that.
                    let singular = resource
                        .singular_resource
                        .clone()
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| kind.kind.to_lowercase());
                    mapper.add_specific(name, &singular, &kind.kind);
                    mapper.add_guessed(&format!("{}List", kind.kind));
                    served.resources.push(ServedResource {
                        group: group_name.clone(),
                        version: version_name.clone(),
                        resource: name.to_string(),
                        kind,
                        namespaced,
                        watchable: watchable(&resource.verbs),
                    });
                    for sub in &resource.subresources {
                        if let Some(sub_name) = sub.subresource.as_deref() {
                            served.resources.push(ServedResource {
                                group: group_name.clone(),
                                version: version_name.clone(),
                                resource: format!("{name}/{sub_name}"),
                                kind: kind_of(sub.response_kind.as_ref()),
                                namespaced,
                                watchable: watchable(&sub.verbs),
                            });
                        }
                    }
                }
                mapper.add_guessed("List");
                served.mappers.push(mapper);
            }
        }
        served
    }

    /// Every served resource and subresource, in discovery order.
    pub fn resources(&self) -> &[ServedResource] {
        &self.resources
    }

    /// [`kinds_for`](Self::kinds_for) as the type checker names kinds.
    pub fn checker_kinds_for(&self, group: &str, version: &str, resource: &str) -> Vec<Gvk> {
        self.kinds_for(group, version, resource)
            .iter()
            .map(checker_gvk)
            .collect()
    }

    /// Every served resource and subresource as the type checker describes them.
    pub fn checker_resources(&self) -> Vec<ApiResource> {
        self.resources
            .iter()
            .map(|r| ApiResource {
                group: r.group.clone(),
                version: r.version.clone(),
                resource: r.resource.clone(),
                kind: checker_gvk(&r.kind),
            })
            .collect()
    }

    /// The kinds of `resource` (no subresource) as client-go's discovery RESTMapper `KindsFor`
    /// answers: the resource name matches plural or singular names, case-insensitively; an
    /// empty group or version matches any (so the core group's `v1` `events` also finds
    /// `events.k8s.io/v1` Event, as upstream's type checking does); the result is in the
    /// order of the API server's group and version preference, without duplicates. Empty when
    /// nothing matches.
    pub fn kinds_for(&self, group: &str, version: &str, resource: &str) -> Vec<GroupVersionKind> {
        let resource = resource.to_lowercase();
        let mut kinds: Vec<GroupVersionKind> = Vec::new();
        if resource.is_empty() {
            return kinds;
        }
        for mapper in &self.mappers {
            if (!group.is_empty() && mapper.group != group)
                || (!version.is_empty() && mapper.version != version)
            {
                continue;
            }
            if let Some(kind) = mapper.kinds.get(&resource) {
                let gvk = GroupVersionKind::gvk(&mapper.group, &mapper.version, kind);
                if !kinds.contains(&gvk) {
                    kinds.push(gvk);
                }
            }
        }
        kinds
    }

    /// The resource (not a subresource) of kind `kind` in group version `group`/`version`, as
    /// client-go's discovery RESTMapper `RESTMapping` finds it: the first in discovery order
    /// whose group version is the kind's and whose kind has that name. `None` when no served
    /// resource has the kind.
    pub fn resource_for_kind(
        &self,
        group: &str,
        version: &str,
        kind: &str,
    ) -> Option<&ServedResource> {
        self.resources.iter().find(|r| {
            r.group == group
                && r.version == version
                && r.kind.kind == kind
                && !r.resource.contains('/')
        })
    }
    /// The resources (no subresources) whose stored objects a rule of `constraints` that
    /// matches CREATE may select, as the audit lists them: for each group and resource, the
    /// first served version the rule names (any served version under matchPolicy Equivalent,
    /// which matches the others as equivalents), in the API server's order of preference.
    /// Rules limited to resourceNames are left out: names are checked on the request; so are
    /// resources that cannot be listed and watched (they have no stored objects to read, and
    /// listing `componentstatuses` probes every control-plane component).
    pub fn created_by(&self, constraints: &MatchResources) -> Vec<&ServedResource> {
        let equivalent = constraints.match_policy == MatchPolicy::Equivalent;
        let mut out: Vec<&ServedResource> = Vec::new();
        let rules = constraints
            .resource_rules
            .iter()
            .filter(|r| creates(r) && r.resource_names.is_empty());
        for rule in rules {
            for r in &self.resources {
                let selected = !r.resource.contains('/')
                    && r.watchable
                    && names(&rule.api_groups, &r.group)
                    && (equivalent || names(&rule.api_versions, &r.version))
                    && resource_listed(&rule.resources, &r.resource, "")
                    && in_scope(&rule.scope, r.namespaced);
                let listed = out
                    .iter()
                    .any(|o| o.group == r.group && o.resource == r.resource);
                if selected && !listed {
                    out.push(r);
                }
            }
        }
        out
    }
}

/// Whether the rule's operations include CREATE.
fn creates(rule: &ResourceRule) -> bool {
    rule.operations.iter().any(|o| o == "CREATE" || o == "*")
}

/// Whether discovery's `verbs` for a resource name both `list` and `watch`.
fn watchable(verbs: &[String]) -> bool {
    ["list", "watch"]
        .iter()
        .all(|v| verbs.iter().any(|x| x == v))
}

/// Whether `names` holds `name` or `*`.
fn names(names: &[String], name: &str) -> bool {
    names.iter().any(|n| n == "*" || n == name)
}

/// Whether a rule's scope admits a resource that is (or is not) namespaced.
fn in_scope(scope: &str, namespaced: bool) -> bool {
    match scope {
        "Cluster" => !namespaced,
        "Namespaced" => namespaced,
        _ => true,
    }
}

/// A discovered kind as the type checker names it.
fn checker_gvk(kind: &GroupVersionKind) -> Gvk {
    Gvk::new(&kind.group, &kind.version, &kind.kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(ops: &[&str]) -> ResourceRule {
        ResourceRule {
            resource_names: Vec::new(),
            operations: ops.iter().map(|s| s.to_string()).collect(),
            api_groups: vec![String::new()],
            api_versions: vec!["v1".into()],
            resources: vec!["pods".into()],
            scope: "*".into(),
        }
    }

    #[test]
    fn a_rule_selects_resources_it_names_or_wildcards_for_creates_only() {
        assert!(creates(&rule(&["CREATE", "UPDATE"])));
        assert!(creates(&rule(&["*"])));
        assert!(!creates(&rule(&["UPDATE", "DELETE"])));
        assert!(in_scope("Cluster", false) && !in_scope("Cluster", true));
        assert!(in_scope("Namespaced", true) && in_scope("*", false));
        assert!(names(&["*".into()], "apps") && !names(&[String::new()], "apps"));
    }

    /// As kube-apiserver matches a rule's resource entries against a create of the resource
    /// itself: `x/*` names `x` too (every subresource, the empty one included).
    #[test]
    fn a_rule_selects_the_stored_objects_of_the_resources_its_entries_name() {
        let builtin = crate::builtin::BuiltinDiscovery::load().unwrap();
        let served = ServedResources::from_discovery(&builtin.discovery);
        let selected = |entries: &[&str]| {
            let mut pods = rule(&["CREATE"]);
            pods.resources = entries.iter().map(|e| e.to_string()).collect();
            let constraints = MatchResources {
                resource_rules: vec![pods],
                ..Default::default()
            };
            let resources = served.created_by(&constraints);
            resources.iter().any(|r| r.resource == "pods")
        };
        for entries in [
            &["pods"][..],
            &["*"],
            &["*/*"],
            &["pods/*"],
            &["pods/status", "pods"],
        ] {
            assert!(selected(entries), "{entries:?}");
        }
        for entries in [
            &["pods/status"][..],
            &["*/status"],
            &["configmaps"],
            &["pod"],
        ] {
            assert!(!selected(entries), "{entries:?}");
        }
    }

    #[test]
    fn only_resources_that_are_listed_and_watched_have_stored_objects_to_read() {
        let builtin = crate::builtin::BuiltinDiscovery::load().unwrap();
        let served = ServedResources::from_discovery(&builtin.discovery);
        let created_by = |group: &str| {
            let mut core = rule(&["CREATE"]);
            core.api_groups = vec![group.into()];
            core.api_versions = vec!["*".into()];
            core.resources = vec!["*".into()];
            let constraints = MatchResources {
                resource_rules: vec![core],
                ..Default::default()
            };
            served
                .created_by(&constraints)
                .into_iter()
                .map(|r| r.resource.clone())
                .collect::<Vec<_>>()
        };
        let core = created_by("");
        for stored in ["pods", "configmaps", "namespaces", "events"] {
            assert!(core.iter().any(|r| r == stored), "{stored}: {core:?}");
        }
        // Created only (bindings), listed but not watched (componentstatuses).
        for unread in ["bindings", "componentstatuses"] {
            assert!(!core.iter().any(|r| r == unread), "{unread}: {core:?}");
        }
        // Every resource of the review groups is only created.
        assert_eq!(created_by("authorization.k8s.io"), Vec::<String>::new());
        assert_eq!(created_by("authentication.k8s.io"), Vec::<String>::new());
    }
}
