//! Follows the certificate Secret: when it changes, is replaced or is deleted (and then, in
//! self-managed mode, re-created), every replica reloads its serving certificate and publishes
//! the CA the webhook configurations must trust. The trusted bundle keeps the CA it replaces,
//! so the API server trusts replicas serving either certificate while they switch.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::watch;
use tracing::{error, info, warn};

use crate::serving::certs::{self, CertSource, Certificates};

/// How often the certificates are checked for renewal when the Secret does not change.
const RENEW_CHECK: Duration = Duration::from_secs(3600);

/// The Secret followed, and how its certificates are made.
#[derive(Clone, Debug)]
pub struct SecretRef {
    /// Namespace of the Secret (celgate's own).
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// Host names and addresses the serving certificate must cover.
    pub hosts: Vec<String>,
    /// Who writes the Secret.
    pub source: CertSource,
}

impl SecretRef {
    /// The certificates in the Secret now (created or renewed in self-managed mode).
    pub async fn load(&self, client: &Client) -> Result<Certificates, certs::CertError> {
        certs::load(
            client,
            &self.namespace,
            &self.name,
            &self.hosts,
            self.source,
        )
        .await
    }
}

/// Records the certificates' expiry in the metrics (a certificate that cannot be read is
/// logged: the webhook would not serve with it anyway).
pub fn record(certificates: &Certificates) {
    if let Err(error) = crate::metrics::certificates(&certificates.ca_pem, &certificates.cert_pem) {
        error!(%error, "cannot read the expiry of the webhook certificates");
    }
}

/// The caBundle for a CA that replaces `previous` (PEM): both, the new one first.
pub fn bundle(ca_pem: &str, previous: Option<&str>) -> String {
    match previous {
        Some(old) if old.trim() != ca_pem.trim() => {
            format!("{}\n{}\n", ca_pem.trim_end(), old.trim_end())
        }
        _ => ca_pem.to_string(),
    }
}

/// Reloads the serving certificate of `server` and publishes the trusted CA bundle on `ca`
/// whenever the Secret's certificates differ from `current`, until the watch ends.
pub async fn follow(
    client: Client,
    secret: SecretRef,
    server: celgate_webhook::Server,
    mut current: Certificates,
    ca: watch::Sender<String>,
) {
    let api: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={}", secret.name));
    let events = crate::retry::watch(api, config);
    futures::pin_mut!(events);
    let mut renew = tokio::time::interval(RENEW_CHECK);
    renew.tick().await;
    loop {
        tokio::select! {
            event = events.next() => match event {
                None => return,
                Some(Err(error)) => {
                    warn!(%error, secret = %secret.name, "watching the certificate Secret failed; retrying");
                    continue;
                }
                Some(Ok(_)) => {}
            },
            _ = renew.tick() => {}
        }
        let next = match secret.load(&client).await {
            Ok(next) => next,
            Err(error) => {
                error!(%error, "cannot read the certificate Secret; serving the certificate loaded before");
                continue;
            }
        };
        if next == current {
            continue;
        }
        if let Err(error) = server
            .reload_tls(celgate_webhook::TlsMaterial {
                cert_pem: next.cert_pem.clone(),
                key_pem: next.key_pem.clone(),
            })
            .await
        {
            error!(%error, "cannot load the certificate from the Secret; serving the one loaded before");
            continue;
        }
        record(&next);
        let ca_changed = next.ca_pem != current.ca_pem;
        if ca_changed {
            ca.send_replace(bundle(&next.ca_pem, Some(&current.ca_pem)));
        }
        info!(
            secret = %secret.name,
            ca_changed,
            "serving certificate reloaded from the Secret"
        );
        current = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_ca_stays_trusted_beside_the_new_one() {
        assert_eq!(bundle("NEW\n", None), "NEW\n");
        assert_eq!(bundle("NEW\n", Some("NEW\n")), "NEW\n");
        assert_eq!(bundle("NEW\n", Some("OLD\n")), "NEW\nOLD\n");
    }
}
