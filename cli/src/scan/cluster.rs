//! `celgate scan --cluster`: the objects to scan read from the cluster in `KUBECONFIG`, read-only,
//! as the background audit reads them: every resource a CREATE rule of the policies selects
//! (by the built-in kinds and the cluster's CRDs, or those given), listed page by page, with the
//! Namespaces (for namespace selectors) and, unless `--params` gives them, the objects of the
//! policies' param kinds.

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::CliError;
use crate::documents::Document;
use crate::types::OfflineKinds;

/// The `file` of every object read from the cluster, in reports.
pub const SOURCE: &str = "<cluster>";

/// Objects per list page.
const PAGE: u32 = 500;

/// What a scan of the cluster reads.
pub struct Read {
    /// The objects the policies select, and the cluster's Namespaces.
    pub objects: Vec<Document>,
    /// The objects of the param kinds asked for.
    pub params: Vec<Document>,
}

/// A resource to list, by the kind served.
pub struct Wanted<'k> {
    /// The resource.
    pub resource: &'k celgate_kinds::served::ServedResource,
    /// Whether its objects are params (else objects to scan).
    pub params: bool,
}

/// Runs `read` with a client of the cluster in `KUBECONFIG`.
fn with_client<T>(read: impl AsyncFnOnce(Client) -> Result<T, CliError>) -> Result<T, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Cluster(format!("cannot start the client's runtime: {e}")))?;
    runtime.block_on(async {
        let client = Client::try_default().await.map_err(|e| {
            CliError::Cluster(format!("{e} (set KUBECONFIG to the cluster's kubeconfig)"))
        })?;
        read(client).await
    })
}

/// The cluster's CustomResourceDefinitions, as documents (an error when they cannot be read:
/// the kubeconfig's user may not list them, say).
pub fn crds() -> Result<Vec<Document>, CliError> {
    with_client(async |client| {
        let resource = ApiResource {
            group: "apiextensions.k8s.io".into(),
            version: "v1".into(),
            api_version: "apiextensions.k8s.io/v1".into(),
            kind: "CustomResourceDefinition".into(),
            plural: "customresourcedefinitions".into(),
        };
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        let mut crds = Vec::new();
        let mut params = ListParams::default().limit(PAGE);
        loop {
            let page = api.list(&params).await.map_err(|e| {
                CliError::Cluster(format!("cannot list customresourcedefinitions: {e}"))
            })?;
            for crd in page.items {
                crds.push(document(
                    crd,
                    &resource.api_version,
                    &resource.kind,
                    crds.len(),
                )?);
            }
            match page.metadata.continue_ {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => return Ok(crds),
            }
        }
    })
}

/// A listed object as a document (list items carry no apiVersion or kind: the resource gives
/// them), the `index`th read.
fn document(
    object: DynamicObject,
    api_version: &str,
    kind: &str,
    index: usize,
) -> Result<Document, CliError> {
    let name = object.name_any();
    let mut value = serde_json::to_value(&object)
        .map_err(|e| CliError::Internal(format!("{name} as JSON: {e}")))?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(api_version.to_string()));
        map.insert("kind".into(), Value::String(kind.to_string()));
    }
    Ok(Document {
        file: SOURCE.to_string(),
        position: index + 1,
        object: value,
        converted_from: None,
    })
}

/// Lists `wanted` (each once) and the Namespaces from the cluster in `KUBECONFIG`.
pub fn read(kinds: &OfflineKinds, wanted: &[Wanted<'_>]) -> Result<Read, CliError> {
    with_client(async |client| {
        let mut read = Read {
            objects: Vec::new(),
            params: Vec::new(),
        };
        let namespaces = kinds
            .resource_of("v1", "Namespace")
            .ok_or_else(|| CliError::Internal("the built-in kinds have no Namespace".into()))?;
        let mut listed: Vec<(&str, &str, bool)> = Vec::new();
        let all = std::iter::once(Wanted {
            resource: namespaces,
            params: false,
        })
        .chain(wanted.iter().map(|w| Wanted {
            resource: w.resource,
            params: w.params,
        }));
        for w in all {
            let key = (
                w.resource.group.as_str(),
                w.resource.resource.as_str(),
                w.params,
            );
            if listed.contains(&key) {
                continue;
            }
            listed.push(key);
            let into = if w.params {
                &mut read.params
            } else {
                &mut read.objects
            };
            list(&client, w.resource, into).await?;
        }
        Ok(read)
    })
}

/// Appends every object of `resource` to `into`, page by page.
async fn list(
    client: &Client,
    resource: &celgate_kinds::served::ServedResource,
    into: &mut Vec<Document>,
) -> Result<(), CliError> {
    let api_version = if resource.group.is_empty() {
        resource.version.clone()
    } else {
        format!("{}/{}", resource.group, resource.version)
    };
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource {
            group: resource.group.clone(),
            version: resource.version.clone(),
            api_version: api_version.clone(),
            kind: resource.kind.kind.clone(),
            plural: resource.resource.clone(),
        },
    );
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await.map_err(|e| {
            CliError::Cluster(format!(
                "cannot list {} ({api_version}): {e}",
                resource.resource
            ))
        })?;
        for object in page.items {
            let index = into.len();
            into.push(document(object, &api_version, &resource.kind.kind, index)?);
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}
