//! `celgate scan --cluster`: the objects to scan read from the cluster in `KUBECONFIG`, read-only,
//! as the background audit reads them: every resource a CREATE rule of the policies selects
//! (by the built-in kinds and the CRDs given), listed page by page, with the Namespaces (for
//! namespace selectors) and, unless `--params` gives them, the objects of the policies'
//! param kinds.

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

/// Lists `wanted` (each once) and the Namespaces from the cluster in `KUBECONFIG`.
pub fn read(kinds: &OfflineKinds, wanted: &[Wanted<'_>]) -> Result<Read, CliError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::Cluster(format!("cannot start the client's runtime: {e}")))?;
    runtime.block_on(async {
        let client = Client::try_default().await.map_err(|e| {
            CliError::Cluster(format!("{e} (set KUBECONFIG to the cluster's kubeconfig)"))
        })?;
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
            let name = object.name_any();
            let mut value = serde_json::to_value(&object)
                .map_err(|e| CliError::Internal(format!("{name} as JSON: {e}")))?;
            if let Some(map) = value.as_object_mut() {
                // List items carry no apiVersion or kind: the resource gives them.
                map.insert("apiVersion".into(), Value::String(api_version.clone()));
                map.insert("kind".into(), Value::String(resource.kind.kind.clone()));
            }
            into.push(Document {
                file: SOURCE.to_string(),
                position: into.len() + 1,
                object: value,
            });
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(()),
        }
    }
}
