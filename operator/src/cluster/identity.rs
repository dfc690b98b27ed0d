//! Who celgate is to the API server, as RBAC names a subject to grant to: asked once, with a
//! SelfSubjectReview (which every authenticated user may make), the first time a message
//! needs it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::OnceCell;
use tracing::warn;

/// How long the API server may take to say who celgate is.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// The subject named when the API server cannot say who celgate is.
const UNKNOWN: &str = "the user celgate runs as";

/// The prefix of a ServiceAccount's user name.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// celgate's own identity, asked of the API server at most once per process (a failed ask
/// is tried again the next time).
#[derive(Clone)]
pub struct Identity {
    client: Client,
    subject: Arc<OnceCell<String>>,
}

impl Identity {
    /// Not asked yet.
    pub fn new(client: Client) -> Self {
        Self {
            client,
            subject: Arc::new(OnceCell::new()),
        }
    }

    /// The subject celgate runs as, as an admin would grant to it: `ServiceAccount <ns>/<name>`
    /// or `user "<name>"`; `the user celgate runs as` when the API server cannot say (within
    /// ten seconds).
    pub async fn subject(&self) -> String {
        let asked = self
            .subject
            .get_or_try_init(|| async {
                let api = Api::<SelfSubjectReview>::all(self.client.clone());
                let (params, review) = (PostParams::default(), SelfSubjectReview::default());
                let create = api.create(&params, &review);
                let review = tokio::time::timeout(ASK_TIMEOUT, create)
                    .await
                    .map_err(|_| "the API server did not answer in time".to_string())?
                    .map_err(|e| e.to_string())?;
                let user = review
                    .status
                    .and_then(|s| s.user_info)
                    .and_then(|u| u.username)
                    .unwrap_or_default();
                Ok::<_, String>(subject_of(&user))
            })
            .await;
        match asked {
            Ok(subject) => subject.clone(),
            Err(error) => {
                warn!(%error, "cannot ask the API server who celgate is (SelfSubjectReview)");
                UNKNOWN.into()
            }
        }
    }
}

/// How RBAC names the subject of a user name: a ServiceAccount's as `ServiceAccount <ns>/<name>`.
fn subject_of(user: &str) -> String {
    match user
        .strip_prefix(SERVICE_ACCOUNT_PREFIX)
        .and_then(|rest| rest.split_once(':'))
    {
        Some((namespace, name)) => format!("ServiceAccount {namespace}/{name}"),
        None if user.is_empty() => UNKNOWN.into(),
        None => format!("user {user:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_accounts_and_users_are_named_as_rbac_subjects() {
        assert_eq!(
            subject_of("system:serviceaccount:celgate-system:celgate"),
            "ServiceAccount celgate-system/celgate"
        );
        assert_eq!(subject_of("celgate-admin"), "user \"celgate-admin\"");
        assert_eq!(subject_of(""), "the user celgate runs as");
    }
}
