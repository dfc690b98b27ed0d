//! The snapshot of the built-in kinds' API discovery and OpenAPI v3 documents that the offline
//! `celgate check` types policies with (`make schemas` regenerates it; a drift test compares it
//! with a fresh control plane of the pinned version).
//!
//! The file is one minified JSON object:
//! `{"kubernetesVersion": "v1.36.3", "discovery": [<answer of /api>, <answer of /apis>],
//! "openapi": {"api/v1": <document>, "apis/apps/v1": <document>, …}}` — the API server's own
//! aggregated discovery answers (`APIGroupDiscoveryList`) and `/openapi/v3/<path>` documents
//! (their `openapi` version and `components`, without the operations under `paths`), limited to the group versions kube-apiserver serves itself: those of
//! CustomResourceDefinitions and of aggregated API servers (APIServices with a service) are left
//! out, so that the snapshot depends only on the Kubernetes version.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::ListParams;
use kube::core::discovery::v2::ACCEPT_AGGREGATED_DISCOVERY_V2;
use kube::{Api, Client};
use serde_json::{Value, json};
use thiserror::Error;

use crate::workspace;

/// Why the snapshot could not be taken.
#[derive(Debug, Error)]
pub enum SnapshotError {
    /// A request to the API server failed.
    #[error("cannot read {what} from the API server: {source}")]
    Request {
        /// What was asked for.
        what: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// An answer did not have the expected shape.
    #[error("unexpected answer for {what}: {message}")]
    Answer {
        /// What was asked for.
        what: String,
        /// What is wrong with it.
        message: String,
    },
    /// `e2e/cluster/versions.env` does not pin `K8S_VERSION=<major>.<minor>.<patch>`.
    #[error("e2e/cluster/versions.env pins no K8S_VERSION=<major>.<minor>.<patch>: {0}")]
    Version(String),
}

/// Where the snapshot of the pinned Kubernetes version is committed:
/// `kinds/schemas/builtin-<major>.<minor>.json`.
pub fn builtin_schemas_path() -> Result<PathBuf, SnapshotError> {
    let pins = std::fs::read_to_string(workspace().join("e2e/cluster/versions.env"))
        .map_err(|e| SnapshotError::Version(e.to_string()))?;
    let version = pins
        .lines()
        .find_map(|l| l.trim().strip_prefix("K8S_VERSION="))
        .ok_or_else(|| SnapshotError::Version("no K8S_VERSION line".into()))?;
    let minor: Vec<&str> = version.trim().split('.').take(2).collect();
    if minor.len() != 2 || minor.iter().any(|p| p.parse::<u32>().is_err()) {
        return Err(SnapshotError::Version(version.to_string()));
    }
    Ok(workspace().join(format!("kinds/schemas/builtin-{}.json", minor.join("."))))
}

async fn get(client: &Client, path: &str, accept: &str) -> Result<Value, SnapshotError> {
    let request = http::Request::get(path)
        .header(http::header::ACCEPT, accept)
        .body(Vec::new())
        .map_err(|e| SnapshotError::Request {
            what: path.to_string(),
            source: kube::Error::HttpError(e),
        })?;
    client
        .request(request)
        .await
        .map_err(|source| SnapshotError::Request {
            what: path.to_string(),
            source,
        })
}

/// The `<group>/<version>`s (`v1` for the core group) not served by kube-apiserver itself.
async fn foreign_group_versions(client: &Client) -> Result<BTreeSet<String>, SnapshotError> {
    let mut foreign = BTreeSet::new();
    let crds = Api::<CustomResourceDefinition>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| SnapshotError::Request {
            what: "CustomResourceDefinitions".into(),
            source,
        })?;
    for crd in crds {
        for version in &crd.spec.versions {
            foreign.insert(format!("{}/{}", crd.spec.group, version.name));
        }
    }
    let services = Api::<APIService>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| SnapshotError::Request {
            what: "APIServices".into(),
            source,
        })?;
    for service in services {
        let spec = service.spec.unwrap_or_default();
        if spec.service.is_some() {
            let group = spec.group.unwrap_or_default();
            let version = spec.version.unwrap_or_default();
            foreign.insert(if group.is_empty() {
                version
            } else {
                format!("{group}/{version}")
            });
        }
    }
    Ok(foreign)
}

/// An aggregated discovery answer without the `foreign` group versions (and without groups
/// left with no version).
fn builtin_discovery(
    mut list: Value,
    foreign: &BTreeSet<String>,
    what: &str,
) -> Result<Value, SnapshotError> {
    if list["kind"] != "APIGroupDiscoveryList" {
        return Err(SnapshotError::Answer {
            what: what.into(),
            message: format!("kind {} instead of APIGroupDiscoveryList", list["kind"]),
        });
    }
    if let Some(groups) = list["items"].as_array_mut() {
        for group in groups.iter_mut() {
            let name = group["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if let Some(versions) = group["versions"].as_array_mut() {
                versions.retain(|v| {
                    let version = v["version"].as_str().unwrap_or_default();
                    let gv = if name.is_empty() {
                        version.to_string()
                    } else {
                        format!("{name}/{version}")
                    };
                    !foreign.contains(&gv)
                });
            }
        }
        groups.retain(|g| g["versions"].as_array().is_some_and(|v| !v.is_empty()));
    }
    Ok(list)
}

/// The group version a `/openapi/v3` index path holds a document of (`api/v1` → `v1`,
/// `apis/apps/v1` → `apps/v1`); `None` for the other paths (`api`, `apis/apps`, `version`, …).
fn document_group_version(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["api", version] => Some((*version).to_string()),
        ["apis", group, version] => Some(format!("{group}/{version}")),
        _ => None,
    }
}

/// The snapshot of the built-in kinds of the cluster `client` talks to, as the minified JSON
/// text committed at [`builtin_schemas_path`]. Two control planes of one version give the same
/// text.
pub async fn builtin_snapshot(client: &Client) -> Result<String, SnapshotError> {
    let foreign = foreign_group_versions(client).await?;
    let version = get(client, "/version", "application/json").await?;
    let mut discovery = Vec::new();
    for path in ["/api", "/apis"] {
        let list = get(client, path, ACCEPT_AGGREGATED_DISCOVERY_V2).await?;
        discovery.push(builtin_discovery(list, &foreign, path)?);
    }
    let index = get(client, "/openapi/v3", "application/json").await?;
    let paths = index["paths"]
        .as_object()
        .ok_or_else(|| SnapshotError::Answer {
            what: "/openapi/v3".into(),
            message: "no paths".into(),
        })?;
    let mut documents = BTreeMap::new();
    for (path, entry) in paths {
        let Some(gv) = document_group_version(path) else {
            continue;
        };
        if foreign.contains(&gv) {
            continue;
        }
        let url = entry["serverRelativeURL"]
            .as_str()
            .ok_or_else(|| SnapshotError::Answer {
                what: format!("/openapi/v3 path {path}"),
                message: "no serverRelativeURL".into(),
            })?;
        let document = get(client, url, "application/json").await?;
        // The schemas only: the operations under `paths` are two thirds of the bytes and
        // nothing types a policy with them.
        let schemas = json!({"openapi": document["openapi"], "components": document["components"]});
        documents.insert(path.clone(), schemas);
    }
    let snapshot = json!({
        "kubernetesVersion": version["gitVersion"],
        "discovery": discovery,
        "openapi": documents,
    });
    serde_json::to_string(&snapshot).map_err(|e| SnapshotError::Answer {
        what: "the snapshot".into(),
        message: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_group_version_documents_are_taken() {
        assert_eq!(document_group_version("api/v1").as_deref(), Some("v1"));
        assert_eq!(
            document_group_version("apis/apps/v1").as_deref(),
            Some("apps/v1")
        );
        for other in [
            "api",
            "apis",
            "apis/apps",
            "version",
            ".well-known/openid-configuration",
            "openid/v1/jwks",
        ] {
            assert_eq!(document_group_version(other), None, "{other}");
        }
    }

    #[test]
    fn foreign_group_versions_leave_discovery() {
        let list = json!({"kind": "APIGroupDiscoveryList", "items": [
            {"metadata": {"name": "apps"}, "versions": [{"version": "v1"}]},
            {"metadata": {"name": "example.com"}, "versions": [{"version": "v1"}, {"version": "v2"}]},
            {"metadata": {"name": "metrics.k8s.io"}, "versions": [{"version": "v1beta1"}]},
        ]});
        let foreign: BTreeSet<String> = ["example.com/v2", "metrics.k8s.io/v1beta1"]
            .map(String::from)
            .into();
        let kept = builtin_discovery(list, &foreign, "/apis").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            kept["items"],
            json!([
                {"metadata": {"name": "apps"}, "versions": [{"version": "v1"}]},
                {"metadata": {"name": "example.com"}, "versions": [{"version": "v1"}]},
            ])
        );
        let legacy = json!({"kind": "APIGroupList", "groups": []});
        assert!(builtin_discovery(legacy, &foreign, "/apis").is_err());
    }
}
