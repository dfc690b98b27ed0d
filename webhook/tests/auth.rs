//! Authentication of the API servers, through the real TLS server and a real rustls client:
//! a client certificate signed by the CA of `--client-ca-file` (and carrying an allowed name),
//! or a bearer token of `--token-file`. An unauthenticated review is answered 401 and never
//! decided; the probes never ask for credentials.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

mod common;

use std::path::PathBuf;

use celgate_webhook::{AuthConfig, Authenticator, Limits};
use common::{
    Client, allowed, client_ca, client_cert, connect, connector, get_plain, post, review,
};

/// Writes `text` to a file of this test process.
fn file(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("celgate-auth-{}-{name}", std::process::id()));
    std::fs::write(&path, text).unwrap();
    path
}

fn decided(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with("celgate_admission_decisions_total{kind=\"validating\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn a_bearer_token_authenticates_and_nothing_else_is_decided() {
    let tokens = file("tokens", "\nfirst-token\n  second-token  \n");
    let auth = Authenticator::load(&AuthConfig {
        token_file: Some(tokens),
        ..AuthConfig::default()
    })
    .unwrap();
    let served = common::serve(Limits::DEFAULT, auth).await;
    let tls = connector(&served.roots, None, true);
    let body = review(1, 0);
    for token in [None, Some("wrong-token"), Some("second-tokenX"), Some("")] {
        // A connection that fails authentication is closed after its answer: a new one each.
        let mut client = connect(served.addr, &tls, true).await;
        let (status, _, text) = post(&mut client, "/validate/fail", &body, token)
            .await
            .unwrap();
        assert_eq!(status, 401, "{token:?}: {}", String::from_utf8_lossy(&text));
    }
    let mut client = connect(served.addr, &tls, true).await;
    let (status, _, text) = post(&mut client, "/validate/fail", &body, Some("second-token"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(allowed(&text));
    // The probes need no credentials.
    assert_eq!(get_plain(served.probes, "/readyz").await, 200);
    assert_eq!(get_plain(served.probes, "/healthz").await, 200);
    let metrics = common::scrape(&served.registry);
    assert!(
        metrics.contains(
            "celgate_webhook_errors_total{path=\"/validate/fail\",reason=\"unauthenticated\"} 4"
        ),
        "{metrics}"
    );
    assert_eq!(
        decided(&metrics),
        1,
        "only the authenticated review is decided"
    );
}

#[tokio::test]
async fn a_client_certificate_of_the_ca_with_an_allowed_name_authenticates() {
    let (ca_pem, issuer) = client_ca();
    let auth = Authenticator::load(&AuthConfig {
        client_ca_file: Some(file("ca.pem", &ca_pem)),
        client_names: vec!["kube-apiserver".into()],
        token_file: None,
    })
    .unwrap();
    let served = common::serve(Limits::DEFAULT, auth).await;
    let body = review(1, 0);
    let answer = |client_identity, http2| {
        let tls = connector(&served.roots, client_identity, http2);
        let body = body.clone();
        async move {
            let mut client: Client = connect(served.addr, &tls, http2).await;
            post(&mut client, "/validate/fail", &body, None)
                .await
                .unwrap()
        }
    };
    for http2 in [false, true] {
        let (status, _, text) = answer(Some(client_cert(&issuer, "kube-apiserver")), http2).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&text));
        assert!(allowed(&text));
        assert_eq!(answer(None, http2).await.0, 401, "no certificate");
        assert_eq!(
            answer(Some(client_cert(&issuer, "someone-else")), http2)
                .await
                .0,
            401,
            "a name not allowed"
        );
    }
    // A certificate of another CA fails the handshake itself.
    let (_, other) = client_ca();
    let tls = connector(
        &served.roots,
        Some(client_cert(&other, "kube-apiserver")),
        true,
    );
    let tcp = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let handshake = tls
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").unwrap(),
            tcp,
        )
        .await;
    // TLS 1.3 reports the server's rejection on the first read.
    if let Ok(mut stream) = handshake {
        use tokio::io::AsyncReadExt as _;
        let mut byte = [0u8; 1];
        assert!(
            !matches!(stream.read(&mut byte).await, Ok(1)),
            "an unknown CA's certificate is refused"
        );
    }
    assert_eq!(get_plain(served.probes, "/healthz").await, 200);
}

#[test]
fn credentials_that_cannot_work_are_refused_at_start_with_what_to_change() {
    let empty = file("empty-tokens", "\n  \n");
    let e = Authenticator::load(&AuthConfig {
        token_file: Some(empty),
        ..AuthConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("one token a line"), "{e}");
    let e = Authenticator::load(&AuthConfig {
        client_ca_file: Some(file("not-a-ca", "hello")),
        ..AuthConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("--client-ca-file"), "{e}");
    let e = Authenticator::load(&AuthConfig {
        token_file: Some(PathBuf::from("/nonexistent/celgate-tokens")),
        ..AuthConfig::default()
    })
    .unwrap_err();
    assert!(e.to_string().contains("cannot read --token-file"), "{e}");
}
