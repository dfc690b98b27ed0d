//! The kinds and types the offline commands know without a cluster: the built-in kinds'
//! discovery and OpenAPI v3 documents from the snapshot `make schemas` takes of a control
//! plane of the pinned Kubernetes version (embedded in the binary, gzip-compressed by the
//! build script), and CustomResourceDefinitions given as files, served as kube-apiserver would
//! serve them. `celgate eval` maps an object's kind to its resource with them, `celgate check`
//! types policies with them.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use celgate_engine::schema::{Gvk, Schema, schemas_from_crd, schemas_from_openapi};
use celgate_engine::typecheck::{ApiResource, TypeSource};
use kube::core::discovery::v2::APIGroupDiscoveryList;
use serde_json::{Value, json};

use crate::CliError;
use crate::documents::{Document, read_files};
use celgate_kinds::builtin::{BuiltinDiscovery, BuiltinSchemas};
use celgate_kinds::served::{ServedResource, ServedResources};

/// Whether a document is a CustomResourceDefinition.
pub fn is_crd(doc: &Document) -> bool {
    doc.api_version() == "apiextensions.k8s.io/v1" && doc.kind() == "CustomResourceDefinition"
}

/// The documents of the `--crd` files, each a CustomResourceDefinition.
pub fn read_crds(paths: &[PathBuf]) -> Result<Vec<Document>, CliError> {
    let crds = read_files(paths)?;
    if let Some(not_crd) = crds.iter().find(|d| !is_crd(d)) {
        return Err(not_crd
            .error(format!(
                "--crd takes CustomResourceDefinitions (apiextensions.k8s.io/v1), not {} {}",
                not_crd.api_version(),
                not_crd.kind()
            ))
            .into());
    }
    Ok(crds)
}

/// Splits an `apiVersion` into group and version (`v1` → `("", "v1")`).
pub fn group_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// The served resources: the built-in kinds' and those of the CustomResourceDefinitions.
pub struct OfflineKinds {
    /// The Kubernetes version the built-in kinds are of.
    pub kubernetes_version: String,
    served: ServedResources,
}

impl OfflineKinds {
    /// The built-in kinds and the kinds of these CustomResourceDefinitions.
    pub fn load(crds: &[Document]) -> Result<Self, CliError> {
        Self::serve(BuiltinDiscovery::load()?, crds)
    }

    fn serve(snapshot: BuiltinDiscovery, crds: &[Document]) -> Result<Self, CliError> {
        let crd_discovery = crds
            .iter()
            .map(discovery_of)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(OfflineKinds {
            kubernetes_version: snapshot.kubernetes_version,
            served: ServedResources::from_discovery(
                snapshot.discovery.iter().chain(&crd_discovery),
            ),
        })
    }

    /// The served resources.
    pub fn served(&self) -> &ServedResources {
        &self.served
    }

    /// The resource (plural, no subresource) of objects of `kind` in `api_version`, with its
    /// scope; `None` when neither the built-in kinds nor the CRDs serve it.
    pub fn resource_of(&self, api_version: &str, kind: &str) -> Option<&ServedResource> {
        let (group, version) = group_version(api_version);
        self.served.resource_for_kind(group, version, kind)
    }
}

/// The served resources and the schemas of their kinds.
pub struct OfflineTypes {
    /// The served resources.
    pub kinds: OfflineKinds,
    schemas: HashMap<Gvk, Arc<Schema>>,
    builtin_groups: HashSet<String>,
}

impl OfflineTypes {
    /// The built-in kinds and the kinds of these CustomResourceDefinitions (which replace a
    /// built-in kind of the same group, version and kind).
    pub fn load(crds: &[Document]) -> Result<Self, CliError> {
        let snapshot = BuiltinSchemas::load()?;
        let mut schemas = HashMap::new();
        for (path, doc) in &snapshot.openapi {
            let found = schemas_from_openapi(doc).map_err(|e| {
                CliError::Internal(format!("the built-in schema of {path} cannot be read: {e}"))
            })?;
            schemas.extend(found);
        }
        // A CRD's published schema references the built-in ObjectMeta.
        let object_meta = schemas
            .get(&Gvk::new("", "v1", "ConfigMap"))
            .and_then(|s: &Arc<Schema>| s.property("metadata"));
        for crd in crds {
            let found = schemas_from_crd(&crd.object, object_meta.as_ref())
                .map_err(|e| crd.error(e.to_string()))?;
            schemas.extend(found);
        }
        Ok(OfflineTypes {
            builtin_groups: snapshot.discovery.groups(),
            kinds: OfflineKinds::serve(snapshot.discovery, crds)?,
            schemas,
        })
    }

    /// Whether Kubernetes itself serves `group` (see [`BuiltinDiscovery::groups`]).
    pub fn is_builtin_group(&self, group: &str) -> bool {
        self.builtin_groups.contains(group)
    }
}

/// What kube-apiserver's aggregated discovery lists for a CustomResourceDefinition: its group
/// with each served version, the resource, its kind and its status and scale subresources.
fn discovery_of(crd: &Document) -> Result<APIGroupDiscoveryList, CliError> {
    let spec = crd.object.get("spec").unwrap_or(&Value::Null);
    let str_at = |v: &Value, path: &[&str]| {
        path.iter()
            .try_fold(v, |v, k| v.get(*k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let group = str_at(spec, &["group"]);
    let plural = str_at(spec, &["names", "plural"]);
    let kind = str_at(spec, &["names", "kind"]);
    if group.is_empty() || plural.is_empty() || kind.is_empty() {
        return Err(crd
            .error("a CustomResourceDefinition needs spec.group, spec.names.plural and spec.names.kind")
            .into());
    }
    let singular = match str_at(spec, &["names", "singular"]) {
        s if s.is_empty() => kind.to_lowercase(),
        s => s,
    };
    let scope = str_at(spec, &["scope"]);
    let versions: Vec<Value> = spec
        .get("versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .map(|v| {
            let version = str_at(v, &["name"]);
            let own = json!({"group": group, "version": version, "kind": kind});
            let mut subresources = Vec::new();
            if v.pointer("/subresources/status").is_some() {
                subresources.push(json!({"subresource": "status", "responseKind": own}));
            }
            if v.pointer("/subresources/scale").is_some() {
                subresources.push(json!({"subresource": "scale",
                    "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}}));
            }
            json!({"version": version, "freshness": "Current", "resources": [{
                "resource": plural, "singularResource": singular, "scope": scope,
                "responseKind": own, "subresources": subresources,
            }]})
        })
        .collect();
    let list = json!({"apiVersion": "apidiscovery.k8s.io/v2", "kind": "APIGroupDiscoveryList",
        "metadata": {}, "items": [{"metadata": {"name": group}, "versions": versions}]});
    serde_json::from_value(list).map_err(|e| crd.error(e.to_string()).into())
}

impl TypeSource for OfflineTypes {
    fn kinds_for(&self, group: &str, version: &str, resource: &str) -> Vec<Gvk> {
        self.kinds
            .served
            .checker_kinds_for(group, version, resource)
    }

    fn resources(&self) -> Vec<ApiResource> {
        self.kinds.served.checker_resources()
    }

    fn schema(&self, gvk: &Gvk) -> Option<Arc<Schema>> {
        self.schemas.get(gvk).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::parse;

    const CRD: &str = r"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
";

    #[test]
    fn built_in_kinds_and_crds_are_served_with_their_schemas() {
        let crds = parse("crd.yaml", CRD).expect("parses");
        let types = OfflineTypes::load(&crds).expect("loads");
        assert!(
            types.kinds.kubernetes_version.starts_with("v1."),
            "{}",
            types.kinds.kubernetes_version
        );
        let deployment = Gvk::new("apps", "v1", "Deployment");
        assert_eq!(
            types.kinds_for("apps", "v1", "deployments"),
            vec![deployment.clone()]
        );
        assert!(types.schema(&deployment).is_some());
        let scale = types
            .resources()
            .into_iter()
            .find(|r| r.group == "apps" && r.resource == "deployments/scale")
            .map(|r| r.kind);
        assert_eq!(scale, Some(Gvk::new("autoscaling", "v1", "Scale")));

        let widget = Gvk::new("example.com", "v1", "Widget");
        assert_eq!(
            types.kinds_for("example.com", "v1", "widgets"),
            vec![widget.clone()]
        );
        assert!(types.schema(&widget).is_some());
        assert!(types.is_builtin_group("apps") && types.is_builtin_group(""));
        assert!(!types.is_builtin_group("example.com"));
        assert!(
            types
                .resources()
                .iter()
                .any(|r| r.resource == "widgets/status" && r.kind == widget)
        );
    }

    #[test]
    fn kinds_resolve_to_their_resource_and_scope() {
        let cluster_crd = CRD.replace("scope: Namespaced", "scope: Cluster");
        for (crd, namespaced) in [(CRD, true), (cluster_crd.as_str(), false)] {
            let crds = parse("crd.yaml", crd).expect("parses");
            let kinds = OfflineKinds::load(&crds).expect("loads");
            let found = |api_version, kind| {
                kinds
                    .resource_of(api_version, kind)
                    .map(|r| (r.resource.as_str(), r.namespaced))
            };
            assert_eq!(found("apps/v1", "Deployment"), Some(("deployments", true)));
            assert_eq!(found("v1", "Namespace"), Some(("namespaces", false)));
            assert_eq!(found("v1", "Endpoints"), Some(("endpoints", true)));
            assert_eq!(found("events.k8s.io/v1", "Event"), Some(("events", true)));
            assert_eq!(
                found("rbac.authorization.k8s.io/v1", "ClusterRole"),
                Some(("clusterroles", false))
            );
            assert_eq!(
                found("example.com/v1", "Widget"),
                Some(("widgets", namespaced))
            );
            // Versions kube-apiserver does not serve, and a CRD's unserved kinds.
            assert_eq!(found("apps/v1beta1", "Deployment"), None);
            assert_eq!(found("example.com/v2", "Widget"), None);
            assert_eq!(found("v1", "Deployment"), None);
        }
        let kinds = OfflineKinds::load(&[]).expect("loads");
        assert!(kinds.resource_of("example.com/v1", "Widget").is_none());
        assert_eq!(group_version("apps/v1"), ("apps", "v1"));
        assert_eq!(group_version("v1"), ("", "v1"));
    }
}
