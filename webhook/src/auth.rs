//! Authentication of the API servers that call the webhook, as kube-apiserver offers it through
//! an `AdmissionConfiguration` whose `kubeConfigFile` names a client certificate or a bearer
//! token per webhook host. Either is checked before a review is read, so an unauthenticated
//! call is answered 401 and causes no evaluation and no SubjectAccessReview. The probes are
//! served on their own port and never ask for credentials (the kubelet has none).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::http::{HeaderMap, header};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;
use thiserror::Error;
use x509_parser::extensions::GeneralName;

/// Where the credentials celgate accepts come from (the flags of `celgate run`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// PEM bundle of the CAs whose client certificates are accepted.
    pub client_ca_file: Option<PathBuf>,
    /// Names (subject common name or DNS subject alternative name) a client certificate must
    /// carry one of; empty accepts every certificate the CAs signed.
    pub client_names: Vec<String>,
    /// File of the bearer tokens accepted, one a line.
    pub token_file: Option<PathBuf>,
}

/// Errors loading the credentials to accept.
#[derive(Debug, Error)]
pub enum AuthError {
    /// A file cannot be read.
    #[error("cannot read {flag} {path}: {source}")]
    Read {
        /// The flag that names the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The CA file holds no usable certificate.
    #[error(
        "--client-ca-file {0} holds no PEM certificate rustls accepts as a CA: give the PEM bundle of the CA that signed the API server's client certificate"
    )]
    NoCa(PathBuf),
    /// The CA file cannot make a verifier.
    #[error("--client-ca-file {0}: {1}")]
    Verifier(PathBuf, String),
    /// The token file holds no token.
    #[error("--token-file {0} holds no token: write one token a line (empty lines are ignored)")]
    NoToken(PathBuf),
    /// Names were given without a CA to verify certificates with.
    #[error("--client-names needs --client-ca-file: names are checked on verified certificates")]
    NamesWithoutCa,
}

/// The credentials accepted, loaded once at start.
#[derive(Debug)]
pub struct Authenticator {
    verifier: Option<Arc<dyn ClientCertVerifier>>,
    names: BTreeSet<String>,
    tokens: Vec<Vec<u8>>,
}

/// What a connection's TLS handshake proved about its client.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peer {
    /// The client presented a certificate the CAs signed, carrying an allowed name.
    pub certified: bool,
}

impl Authenticator {
    /// Loads what `config` names; `None` when it names nothing (every call is accepted).
    pub fn load(config: &AuthConfig) -> Result<Option<Self>, AuthError> {
        if config.client_ca_file.is_none() && !config.client_names.is_empty() {
            return Err(AuthError::NamesWithoutCa);
        }
        if config.client_ca_file.is_none() && config.token_file.is_none() {
            return Ok(None);
        }
        let verifier = config.client_ca_file.as_deref().map(verifier).transpose()?;
        let tokens = match &config.token_file {
            Some(path) => {
                let text = read("--token-file", path)?;
                let tokens: Vec<Vec<u8>> = String::from_utf8_lossy(&text)
                    .lines()
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(|t| t.as_bytes().to_vec())
                    .collect();
                if tokens.is_empty() {
                    return Err(AuthError::NoToken(path.clone()));
                }
                tokens
            }
            None => Vec::new(),
        };
        Ok(Some(Self {
            verifier,
            names: config.client_names.iter().cloned().collect(),
            tokens,
        }))
    }

    /// The verifier of client certificates the TLS configuration needs, if certificates are
    /// accepted. A client without one still completes the handshake (and is then answered 401,
    /// unless it has a token).
    pub fn client_verifier(&self) -> Option<Arc<dyn ClientCertVerifier>> {
        self.verifier.clone()
    }

    /// What the verified certificate chain of a connection (if any) proves.
    pub fn peer(&self, chain: Option<&[CertificateDer<'_>]>) -> Peer {
        let certified = match chain.and_then(<[_]>::first) {
            // rustls verified the chain during the handshake; only the names are left.
            Some(leaf) if self.verifier.is_some() => {
                self.names.is_empty() || names(leaf).iter().any(|n| self.names.contains(n))
            }
            _ => false,
        };
        Peer { certified }
    }

    /// Whether a request on a connection with `peer`, with `headers`, is authenticated.
    pub fn allows(&self, peer: Option<Peer>, headers: &HeaderMap) -> bool {
        if peer.is_some_and(|p| p.certified) {
            return true;
        }
        let Some(token) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        else {
            return false;
        };
        // Every accepted token is compared, each in time independent of where it differs.
        self.tokens
            .iter()
            .fold(false, |found, t| found | constant_time_eq(t, token))
    }
}

/// Whether `a` and `b` are equal, in time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, AuthError> {
    std::fs::read(path).map_err(|source| AuthError::Read {
        flag,
        path: path.to_path_buf(),
        source,
    })
}

fn verifier(path: &Path) -> Result<Arc<dyn ClientCertVerifier>, AuthError> {
    let pem = read("--client-ca-file", path)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem).flatten() {
        // A certificate rustls cannot use as a trust anchor is skipped; none at all is an error.
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(AuthError::NoCa(path.to_path_buf()));
    }
    WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| AuthError::Verifier(path.to_path_buf(), e.to_string()))
}

/// The subject common names and DNS subject alternative names of a certificate.
fn names(cert: &CertificateDer<'_>) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        names.extend(san.value.general_names.iter().filter_map(|n| match n {
            GeneralName::DNSName(d) => Some((*d).to_string()),
            _ => None,
        }));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn names_need_a_ca() {
        let config = AuthConfig {
            client_names: vec!["kube-apiserver".into()],
            ..AuthConfig::default()
        };
        assert!(matches!(
            Authenticator::load(&config),
            Err(AuthError::NamesWithoutCa)
        ));
        assert!(matches!(
            Authenticator::load(&AuthConfig::default()),
            Ok(None)
        ));
    }
}
