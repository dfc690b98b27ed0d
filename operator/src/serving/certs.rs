//! The webhook's CA and serving certificate, kept in a Secret: created when absent, reused when
//! present, and the serving certificate re-issued from the same CA before it expires or when the
//! hosts it must cover change (so the caBundle in the webhook configurations stays valid).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use thiserror::Error;
use time::{Duration, OffsetDateTime};

/// Lifetime of the CA.
const CA_DAYS: i64 = 3650;
/// Lifetime of a serving certificate.
const SERVING_DAYS: i64 = 365;
/// A serving certificate is re-issued when it has less than this left.
pub const RENEW_BEFORE_DAYS: i64 = 30;
const HOSTS_ANNOTATION: &str = "celgate.io/serving-hosts";
const NOT_AFTER_ANNOTATION: &str = "celgate.io/serving-not-after";

/// Errors managing the certificate Secret.
#[derive(Debug, Error)]
pub enum CertError {
    /// Generating or signing failed.
    #[error("cannot generate the webhook certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// The Secret could not be read or written.
    #[error("cannot read or write Secret {namespace}/{name}: {source}")]
    Secret {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The API error.
        source: kube::Error,
    },
    /// cert-manager has not written the Secret yet.
    #[error(
        "Secret {0} does not exist yet: with --cert-source=cert-manager, a Certificate must write it (see config/cert-manager)"
    )]
    NotIssued(String),
    /// The Secret exists but misses a key.
    #[error(
        "Secret {0} exists but has no {1}; with --cert-source=self delete it and celgate creates a new one, with cert-manager check its Certificate"
    )]
    Incomplete(String, &'static str),
}

/// The PEM material the webhook serves with and the CA the API server trusts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificates {
    /// CA certificate (the caBundle).
    pub ca_pem: String,
    /// Serving certificate.
    pub cert_pem: String,
    /// Serving key.
    pub key_pem: String,
}

fn ca_params() -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "celgate-webhook-ca");
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

fn new_ca() -> Result<(String, String), rcgen::Error> {
    let mut params = ca_params()?;
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(CA_DAYS);
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn new_serving(
    ca_key_pem: &str,
    hosts: &[String],
) -> Result<(String, String, OffsetDateTime), rcgen::Error> {
    let ca_key = KeyPair::from_pem(ca_key_pem)?;
    let issuer = Issuer::new(ca_params()?, ca_key);
    let mut params = CertificateParams::new(hosts.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        hosts.first().map_or("celgate", String::as_str),
    );
    params.distinguished_name = dn;
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::hours(1);
    params.not_after = now + Duration::days(SERVING_DAYS);
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), params.not_after))
}

fn data(secret: &Secret, key: &'static str) -> Result<String, CertError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .ok_or(CertError::Incomplete(name, key))
}

fn has(secret: &Secret, key: &str) -> bool {
    secret.data.as_ref().is_some_and(|d| d.contains_key(key))
}

fn needs_new_serving(secret: &Secret, hosts: &[String]) -> bool {
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    let same_hosts =
        annotations.get(HOSTS_ANNOTATION).map(String::as_str) == Some(hosts.join(",").as_str());
    let fresh = annotations
        .get(NOT_AFTER_ANNOTATION)
        .and_then(|t| t.parse::<i64>().ok())
        .and_then(|t| OffsetDateTime::from_unix_timestamp(t).ok())
        .is_some_and(|t| t - OffsetDateTime::now_utc() > Duration::days(RENEW_BEFORE_DAYS));
    !(same_hosts && fresh)
}

/// Where the serving certificate comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CertSource {
    /// celgate keeps its own CA and serving certificate in the Secret: created when absent,
    /// renewed before expiry, re-created when the Secret is deleted.
    #[value(name = "self")]
    SelfManaged,
    /// cert-manager (or anything else) writes `tls.crt`, `tls.key` and `ca.crt` into the Secret;
    /// celgate only reads and follows it.
    CertManager,
}

/// Most tries of one [`load`] when other replicas write the Secret at the same time.
const WRITE_TRIES: usize = 3;

/// The certificates in the Secret: in self-managed mode created or renewed as needed (a
/// replica that loses a race with another re-reads what the other wrote), with cert-manager
/// read only.
pub async fn load(
    client: &Client,
    namespace: &str,
    name: &str,
    hosts: &[String],
    source: CertSource,
) -> Result<Certificates, CertError> {
    if source == CertSource::CertManager {
        return read_issued(client, namespace, name).await;
    }
    let mut tries = 0;
    loop {
        tries += 1;
        match ensure(client, namespace, name, hosts).await {
            Err(CertError::Secret {
                source: kube::Error::Api(status),
                ..
            }) if status.code == 409 && tries < WRITE_TRIES => continue,
            other => return other,
        }
    }
}

/// The certificates an issuer (cert-manager) wrote into the Secret.
async fn read_issued(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Certificates, CertError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = api
        .get_opt(name)
        .await
        .map_err(|source| CertError::Secret {
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        })?
        .ok_or_else(|| CertError::NotIssued(format!("{namespace}/{name}")))?;
    Ok(Certificates {
        ca_pem: data(&secret, "ca.crt")?,
        cert_pem: data(&secret, "tls.crt")?,
        key_pem: data(&secret, "tls.key")?,
    })
}

/// Returns the certificates in the Secret, creating or renewing them as needed. A Secret the
/// user filled without the CA's key is used as it is: celgate cannot renew it.
async fn ensure(
    client: &Client,
    namespace: &str,
    name: &str,
    hosts: &[String],
) -> Result<Certificates, CertError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let api_err = |source| CertError::Secret {
        namespace: namespace.to_string(),
        name: name.to_string(),
        source,
    };
    let existing = api.get_opt(name).await.map_err(api_err)?;
    let (ca_pem, ca_key_pem) = match &existing {
        Some(s) if !has(s, "ca.key") => {
            return Ok(Certificates {
                ca_pem: data(s, "ca.crt")?,
                cert_pem: data(s, "tls.crt")?,
                key_pem: data(s, "tls.key")?,
            });
        }
        Some(s) => (data(s, "ca.crt")?, data(s, "ca.key")?),
        None => new_ca()?,
    };
    if let Some(s) = existing.as_ref().filter(|s| !needs_new_serving(s, hosts)) {
        return Ok(Certificates {
            ca_pem,
            cert_pem: data(s, "tls.crt")?,
            key_pem: data(s, "tls.key")?,
        });
    }
    let (cert_pem, key_pem, not_after) = new_serving(&ca_key_pem, hosts)?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            annotations: Some(BTreeMap::from([
                (HOSTS_ANNOTATION.to_string(), hosts.join(",")),
                (
                    NOT_AFTER_ANNOTATION.to_string(),
                    not_after.unix_timestamp().to_string(),
                ),
            ])),
            resource_version: existing
                .as_ref()
                .and_then(|s| s.metadata.resource_version.clone()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(BTreeMap::from([
            (
                "ca.crt".to_string(),
                ByteString(ca_pem.clone().into_bytes()),
            ),
            ("ca.key".to_string(), ByteString(ca_key_pem.into_bytes())),
            (
                "tls.crt".to_string(),
                ByteString(cert_pem.clone().into_bytes()),
            ),
            (
                "tls.key".to_string(),
                ByteString(key_pem.clone().into_bytes()),
            ),
        ])),
        ..Default::default()
    };
    // Create, or replace with the read resourceVersion: a concurrent writer makes this fail
    // rather than silently overwrite another replica's CA.
    match existing {
        None => api
            .create(&PostParams::default(), &secret)
            .await
            .map_err(api_err)?,
        Some(_) => api
            .replace(name, &PostParams::default(), &secret)
            .await
            .map_err(api_err)?,
    };
    Ok(Certificates {
        ca_pem,
        cert_pem,
        key_pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_certificate_is_signed_for_its_hosts() {
        let (ca, ca_key) = new_ca().expect("CA");
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"));
        let hosts = vec![
            "127.0.0.1".to_string(),
            "celgate.celgate-system.svc".to_string(),
        ];
        let (cert, key, not_after) = new_serving(&ca_key, &hosts).expect("serving certificate");
        assert!(cert.contains("BEGIN CERTIFICATE") && key.contains("PRIVATE KEY"));
        assert!(not_after - OffsetDateTime::now_utc() > Duration::days(SERVING_DAYS - 1));
    }

    #[test]
    fn renews_when_hosts_change_or_expiry_nears() {
        let secret = |hosts: &str, days: i64| Secret {
            metadata: ObjectMeta {
                annotations: Some(BTreeMap::from([
                    (HOSTS_ANNOTATION.to_string(), hosts.to_string()),
                    (
                        NOT_AFTER_ANNOTATION.to_string(),
                        (OffsetDateTime::now_utc() + Duration::days(days))
                            .unix_timestamp()
                            .to_string(),
                    ),
                ])),
                ..Default::default()
            },
            ..Default::default()
        };
        let hosts = vec!["a".to_string(), "b".to_string()];
        assert!(!needs_new_serving(&secret("a,b", 200), &hosts));
        assert!(needs_new_serving(&secret("a", 200), &hosts));
        assert!(needs_new_serving(&secret("a,b", 10), &hosts));
        assert!(needs_new_serving(&Secret::default(), &hosts));
    }
}
