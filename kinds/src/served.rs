//! The resources a cluster serves and the kind of each, read from aggregated discovery
//! answers (`/api` and `/apis`), mapped as client-go's discovery RESTMapper maps them. The
//! running operator fills it from the cluster; the offline commands from the embedded
//! snapshot of the built-in kinds and CRD files.

use std::collections::HashMap;

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
                    });
                    for sub in &resource.subresources {
                        if let Some(sub_name) = sub.subresource.as_deref() {
                            served.resources.push(ServedResource {
                                group: group_name.clone(),
                                version: version_name.clone(),
                                resource: format!("{name}/{sub_name}"),
                                kind: kind_of(sub.response_kind.as_ref()),
                                namespaced,
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
}

/// A discovered kind as the type checker names it.
fn checker_gvk(kind: &GroupVersionKind) -> Gvk {
    Gvk::new(&kind.group, &kind.version, &kind.kind)
}
