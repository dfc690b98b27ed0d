//! The built-in kinds of the pinned Kubernetes version without a cluster: their aggregated
//! discovery and OpenAPI v3 documents, from the snapshot `make schemas` takes of a local
//! control plane (`schemas/builtin-<minor>.json`), embedded gzip-compressed by the build
//! script. The offline commands serve and type kinds with it; the running operator reads from
//! it only which API groups Kubernetes itself serves.

use std::collections::{HashMap, HashSet};
use std::io::Read as _;

use kube::core::discovery::v2::APIGroupDiscoveryList;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use thiserror::Error;

/// The snapshot, gzip-compressed.
const SNAPSHOT_GZ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/builtin-schemas.json.gz"));

/// The embedded snapshot cannot be read: the binary was built from a damaged file.
#[derive(Debug, Error)]
#[error(
    "the embedded snapshot of the built-in kinds cannot be read ({0}); rebuild celgate from a checkout whose kinds/schemas holds the file `make schemas` writes"
)]
pub struct BuiltinError(String);

/// The snapshot's discovery part (`e2e/src/schemas.rs` writes the file).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuiltinDiscovery {
    /// The Kubernetes version the snapshot was taken of.
    pub kubernetes_version: String,
    /// The answers of `/api` and `/apis`.
    pub discovery: Vec<APIGroupDiscoveryList>,
}

/// The whole snapshot: discovery and the OpenAPI v3 document of each group version.
#[derive(Deserialize)]
pub struct BuiltinSchemas {
    /// The discovery part.
    #[serde(flatten)]
    pub discovery: BuiltinDiscovery,
    /// The OpenAPI v3 document of each group version, by its path (`api/v1`, `apis/apps/v1`).
    pub openapi: HashMap<String, Value>,
}

impl BuiltinDiscovery {
    /// The snapshot's discovery part.
    pub fn load() -> Result<Self, BuiltinError> {
        read()
    }

    /// The API groups Kubernetes itself serves, with the core group (`""`); any other group
    /// is a custom resource's or an aggregated API's.
    pub fn groups(&self) -> HashSet<String> {
        self.discovery
            .iter()
            .flat_map(|list| &list.items)
            .filter_map(|group| group.metadata.as_ref().and_then(|m| m.name.clone()))
            // The core group (its discovery may carry no name).
            .chain(std::iter::once(String::new()))
            .collect()
    }
}

impl BuiltinSchemas {
    /// The whole snapshot.
    pub fn load() -> Result<Self, BuiltinError> {
        read()
    }
}

fn read<T: DeserializeOwned>() -> Result<T, BuiltinError> {
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(SNAPSHOT_GZ)
        .read_to_end(&mut text)
        .map_err(|e| BuiltinError(e.to_string()))?;
    serde_json::from_slice(&text).map_err(|e| BuiltinError(e.to_string()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_snapshot_names_its_version_and_the_built_in_groups() {
        let discovery = BuiltinDiscovery::load().unwrap();
        assert!(
            discovery.kubernetes_version.starts_with("v1.36"),
            "{}",
            discovery.kubernetes_version
        );
        let groups = discovery.groups();
        assert!(groups.contains("") && groups.contains("apps") && groups.contains("batch"));
        assert!(!groups.contains("admission.celgate.io"));
        let schemas = BuiltinSchemas::load().unwrap();
        assert!(
            schemas.openapi.contains_key("api/v1"),
            "{:?}",
            schemas.openapi.keys()
        );
    }
}
