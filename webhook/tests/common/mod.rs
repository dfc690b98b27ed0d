//! What the in-process TLS tests share: certificates, a served `Server` on loopback, and a
//! real rustls client (HTTP/1.1 or HTTP/2, with or without a client certificate).

#![allow(clippy::expect_used, clippy::unwrap_used, dead_code)] // Test helpers; not every test file uses all.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use celgate_engine::model::{
    FailurePolicy, MatchResources, ResourceRule, ValidatingBindingSpec, ValidatingPolicySpec,
    Validation, ValidationAction,
};
use celgate_engine::{BoundPolicy, PolicySet, compile_validating};
use celgate_snapshot::{Deps, NamespaceView, SnapshotStore};
use celgate_webhook::metrics::Metrics;
use celgate_webhook::{AppState, Authenticator, Limits, ProbeServer, Server, TlsMaterial};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::registry::Registry;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

/// The serving certificate (for `localhost`) and the roots a client trusts it with.
pub fn serving() -> (TlsMaterial, rustls::RootCertStore) {
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    (
        TlsMaterial {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        },
        roots,
    )
}

/// A client CA: its PEM, and what signs client certificates with it.
pub fn client_ca() -> (String, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
        .distinguished_name
        .push(DnType::CommonName, "celgate test client CA");
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(params, key))
}

/// A client certificate named `cn`, signed by `issuer`.
pub fn client_cert(
    issuer: &Issuer<'static, KeyPair>,
    cn: &str,
) -> (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let cert = params.signed_by(&key, issuer).unwrap();
    (
        vec![cert.der().clone()],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
}

/// A client trusting `roots`, presenting `identity` if given, offering HTTP/2 or HTTP/1.1.
pub fn connector(
    roots: &rustls::RootCertStore,
    identity: Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>,
    http2: bool,
) -> TlsConnector {
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots.clone());
    let mut config = match identity {
        Some((chain, key)) => builder.with_client_auth_cert(chain, key).unwrap(),
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![if http2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    TlsConnector::from(Arc::new(config))
}

/// The demo policy: deployments may have at most 5 replicas.
pub fn policies() -> PolicySet {
    PolicySet::new(vec![bound(5, FailurePolicy::Fail)], Vec::new())
}

/// The demo policy over deployments allowing at most `limit` replicas, with its binding.
pub fn bound(limit: i64, failure_policy: FailurePolicy) -> BoundPolicy {
    let spec = ValidatingPolicySpec {
        name: "demo-policy.example.com".into(),
        match_constraints: Some(MatchResources {
            resource_rules: vec![ResourceRule {
                operations: vec!["CREATE".into(), "UPDATE".into()],
                api_groups: vec!["apps".into()],
                api_versions: vec!["v1".into()],
                resources: vec!["deployments".into()],
                scope: "*".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        validations: vec![Validation {
            expression: format!("object.spec.replicas <= {limit}"),
            ..Default::default()
        }],
        failure_policy,
        ..Default::default()
    };
    BoundPolicy {
        policy: Arc::new(compile_validating(spec)),
        bindings: vec![Arc::new(ValidatingBindingSpec {
            name: "demo-binding-test.example.com".into(),
            policy_name: "demo-policy.example.com".into(),
            match_resources: None,
            param_ref: None,
            validation_actions: vec![ValidationAction::Deny],
        })]
        .into(),
    }
}

/// A Deployment review with `replicas`; with `padding` bytes, an UPDATE whose object and old
/// object each carry an annotation that long.
pub fn review(replicas: i64, padding: usize) -> Bytes {
    let object = |pad: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "annotations": {"pad": pad}},
            "spec": {"replicas": replicas}})
    };
    let pad = "x".repeat(padding);
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "operation": "CREATE",
        "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
        "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
        "name": "web", "namespace": "default",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": object(&pad)});
    if padding > 0 {
        request["operation"] = Value::from("UPDATE");
        request["oldObject"] = object(&pad);
    }
    Bytes::from(
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
            .to_string(),
    )
}

/// A served webhook on a free loopback port, with its probe port and the registry of its
/// metrics.
pub struct Served {
    pub server: Server,
    pub addr: SocketAddr,
    pub probes: SocketAddr,
    pub registry: Arc<Registry>,
    pub roots: rustls::RootCertStore,
}

/// Serves the demo policy under `limits`, accepting only what `auth` authenticates.
pub async fn serve(limits: Limits, auth: Option<Authenticator>) -> Served {
    let store = SnapshotStore::new();
    store.publish_namespaces(NamespaceView::new([(
        "default".to_string(),
        json!({"metadata": {"name": "default"}}),
    )]));
    store.publish_policies(Arc::new(policies()), Arc::default(), Arc::default());
    let mut registry = Registry::with_prefix("celgate");
    let metrics = Metrics::register(&mut registry, 10);
    let state = AppState::configured(store, Deps::default(), metrics, limits, auth).unwrap();
    let probes = ProbeServer::start(SocketAddr::from(([127, 0, 0, 1], 0)), state.clone())
        .unwrap()
        .local_addr();
    let (material, roots) = serving();
    let server = Server::new(SocketAddr::from(([127, 0, 0, 1], 0)), state, material)
        .await
        .unwrap();
    let addr = server.local_addr();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve().await });
    Served {
        server,
        addr,
        probes,
        registry: Arc::new(registry),
        roots,
    }
}

/// One client connection.
pub enum Client {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

/// Connects to `addr` through `tls` (HTTP/2 when it offers only `h2`).
pub async fn connect(addr: SocketAddr, tls: &TlsConnector, http2: bool) -> Client {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let stream = tls
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    if http2 {
        let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        Client::H2(sender)
    } else {
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        Client::H1(sender)
    }
}

/// Posts `body` to `path` with an optional bearer token; the status, `Retry-After` and body,
/// or the client's error.
pub async fn post(
    client: &mut Client,
    path: &str,
    body: &Bytes,
    token: Option<&str>,
) -> Result<(u16, Option<String>, Bytes), hyper::Error> {
    let mut req = hyper::Request::post(format!("https://localhost{path}?timeout=10s"))
        .header("content-type", "application/json")
        .header("host", "localhost");
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    let req = req.body(Full::new(body.clone())).unwrap();
    let resp = match client {
        Client::H1(s) => {
            s.ready().await?;
            s.send_request(req).await?
        }
        Client::H2(s) => {
            s.ready().await?;
            s.send_request(req).await?
        }
    };
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = resp.into_body().collect().await?.to_bytes();
    Ok((status, retry_after, bytes))
}

/// Whether `body` is an AdmissionReview answer that allows.
pub fn allowed(body: &Bytes) -> bool {
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|v| v["response"]["allowed"] == Value::Bool(true))
}

/// A plain-HTTP GET of `path` on `addr`: the status code.
pub async fn get_plain(addr: SocketAddr, path: &str) -> u16 {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header("host", "localhost")
        .body(Full::new(Bytes::new()))
        .unwrap();
    sender.send_request(req).await.unwrap().status().as_u16()
}

/// The OpenMetrics text of `registry`.
pub fn scrape(registry: &Registry) -> String {
    celgate_webhook::metrics::encode(registry).unwrap()
}
