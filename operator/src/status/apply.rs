//! The status write: server-side apply of the whole status on the status subresource, by the
//! field manager `celgate`, forced (celgate owns every status field it writes; a field it no
//! longer sets is removed by the apply).

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde_json::{Value, json};

use super::FIELD_MANAGER;

/// The apply configuration of `object`'s status: apiVersion, kind, name and the status.
pub fn body<K, S>(object: &K, status: &S) -> Result<Value, serde_json::Error>
where
    K: Resource<DynamicType = ()>,
    S: Serialize,
{
    Ok(json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": {"name": object.name_any()},
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

/// Applies `status` to `object`.
pub async fn status<K: Object, S: Serialize>(
    client: &Client,
    object: &K,
    status: &S,
) -> Result<(), kube::Error> {
    let body = body(object, status).map_err(kube::Error::SerdeError)?;
    Api::<K>::all(client.clone())
        .patch_status(
            &object.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await?;
    Ok(())
}
