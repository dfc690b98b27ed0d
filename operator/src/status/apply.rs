//! The status write: server-side apply of the whole status on the status subresource, by the
//! field manager `celgate`, forced (celgate owns every status field it writes; a field it no
//! longer sets is removed by the apply).

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde_json::{Value, json};

use super::FIELD_MANAGER;

/// The apply configuration of the status of the object of kind `K` named `name`: apiVersion,
/// kind, name and the status.
pub fn body<K, S>(name: &str, status: &S) -> Result<Value, serde_json::Error>
where
    K: Resource<DynamicType = ()>,
    S: Serialize,
{
    Ok(json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": name},
        "status": serde_json::to_value(status)?,
    }))
}

/// One of celgate's kinds: cluster-scoped, with a static type.
pub trait Object:
    Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + std::fmt::Debug
{
}

impl<K> Object for K where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
{
}

/// Applies `status` to the object of kind `K` named `name`.
pub async fn status<K: Object, S: Serialize>(
    client: &Client,
    name: &str,
    status: &S,
) -> Result<(), kube::Error> {
    let body = body::<K, S>(name, status).map_err(kube::Error::SerdeError)?;
    Api::<K>::all(client.clone())
        .patch_status(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    Ok(())
}
