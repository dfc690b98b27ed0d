//! Every path but the probes is authenticated, capped and timed before it is routed, through
//! the real TLS server: a review sent to a spelling of an admission route (percent-encoded
//! segments, double or trailing slashes, other case, dot segments) is never decided, with or
//! without credentials, and an unknown path is answered 404 without its body being read.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use celgate_webhook::{AuthConfig, Authenticator, Limits};
use common::{Client, connect, connector, review};
use http_body_util::{BodyExt, Full};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsConnector;

const TOKEN: &str = "the-api-servers-token";

/// Spellings of the admission routes that are not the routes: none may be decided.
const NOT_ROUTES: [&str; 22] = [
    "/validate/%66ail",
    "/validate/fai%6c",
    "/validate/fai%6C",
    "/mutate/%66ail/never",
    "/mutate/fail/%6eever",
    "/validate%2ffail",
    "/%76alidate",
    "//validate/fail",
    "/validate//fail",
    "/validate/fail/",
    "/validate/",
    "/mutate/fail/never/",
    "/Validate/fail",
    "/VALIDATE/FAIL",
    "/validate/Fail",
    "/validate/./fail",
    "/validate/x/../fail",
    "/./validate",
    "/validate/fail;x",
    "/validate/x",
    "/mutate/fail/sometimes",
    "/metrics",
];

/// The routes, with query strings: decided when authenticated.
const ROUTES: [&str; 4] = [
    "/validate/fail?timeout=10s&x=%2F",
    "/validate?timeout=10s",
    "/mutate/ignore/ifneeded?timeout=10s",
    "/validate/ignore?",
];

fn token_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!("celgate-paths-{}-tokens", std::process::id()));
    std::fs::write(&path, TOKEN).unwrap();
    path
}

/// Sends one HTTP/1.1 request head with `target` (and `Content-Length` of `body`) on a new
/// connection, then the body only if `send_body`; the status code answered within 5 s.
async fn raw_http1(
    addr: std::net::SocketAddr,
    tls: &TlsConnector,
    target: &str,
    body: &[u8],
    token: Option<&str>,
    send_body: bool,
) -> u16 {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut stream = tls
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    let head = format!(
        "POST {target} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n{auth}content-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    if send_body {
        stream.write_all(body).await.unwrap();
    }
    stream.flush().await.unwrap();
    let mut answer = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read).await;
    let text = String::from_utf8_lossy(&answer);
    text.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("{target}: no answer within 5 s (got {text:?})"))
}

/// Sends one HTTP/2 request whose `:path` is `path` on `client`; the status code.
async fn h2(client: &mut Client, path: &str, body: &Bytes, token: Option<&str>) -> u16 {
    let Client::H2(sender) = client else {
        unreachable!("an HTTP/2 client")
    };
    let uri = hyper::Uri::builder()
        .scheme("https")
        .authority("localhost")
        .path_and_query(path)
        .build()
        .unwrap();
    let mut req = hyper::Request::post(uri).header("content-type", "application/json");
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    sender.ready().await.unwrap();
    let resp = sender
        .send_request(req.body(Full::new(body.clone())).unwrap())
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let status = resp.status().as_u16();
    let _ = resp.into_body().collect().await;
    status
}

/// Admission decisions made so far.
fn decided(served: &common::Served) -> u64 {
    common::scrape(&served.registry)
        .lines()
        .filter(|l| l.starts_with("celgate_admission_decisions_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test]
async fn every_path_but_the_probes_is_authenticated_before_it_is_routed() {
    let auth = Authenticator::load(&AuthConfig {
        token_file: Some(token_file()),
        ..AuthConfig::default()
    })
    .unwrap();
    let served = common::serve(Limits::DEFAULT, auth).await;
    let h1 = connector(&served.roots, None, false);
    let body = review(9, 0); // denied by the demo policy wherever it is decided
    for path in NOT_ROUTES.iter().chain(&ROUTES) {
        assert_eq!(
            raw_http1(served.addr, &h1, path, &body, None, true).await,
            401,
            "HTTP/1.1 {path} without credentials"
        );
    }
    let h2_tls = connector(&served.roots, None, true);
    for path in NOT_ROUTES.iter().chain(&ROUTES) {
        let mut client = connect(served.addr, &h2_tls, true).await;
        assert_eq!(
            h2(&mut client, path, &body, None).await,
            401,
            "HTTP/2 :path {path} without credentials"
        );
    }
    assert_eq!(decided(&served), 0, "an unauthenticated review was decided");

    // Authenticated: the spellings are not the routes, and their body is never read.
    for path in NOT_ROUTES {
        assert_eq!(
            raw_http1(served.addr, &h1, path, &body, Some(TOKEN), false).await,
            404,
            "HTTP/1.1 {path} with credentials, body unsent"
        );
    }
    let mut client = connect(served.addr, &h2_tls, true).await;
    for path in NOT_ROUTES {
        assert_eq!(
            h2(&mut client, path, &body, Some(TOKEN)).await,
            404,
            "HTTP/2 :path {path} with credentials"
        );
    }
    assert_eq!(
        decided(&served),
        0,
        "a review to an unknown path was decided"
    );
    for path in ROUTES {
        assert_eq!(
            raw_http1(served.addr, &h1, path, &body, Some(TOKEN), true).await,
            200,
            "HTTP/1.1 {path}"
        );
        assert_eq!(
            h2(&mut client, path, &body, Some(TOKEN)).await,
            200,
            "HTTP/2 {path}"
        );
    }
    assert_eq!(decided(&served), 2 * ROUTES.len() as u64);
    let metrics = common::scrape(&served.registry);
    let unauthenticated = NOT_ROUTES.len() * 2;
    assert!(
        metrics.contains(
            "celgate_webhook_errors_total{path=\"/validate/fail\",reason=\"unauthenticated\"} 2"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains(&format!(
            "celgate_webhook_errors_total{{path=\"other\",reason=\"unauthenticated\"}} {}",
            unauthenticated
        )),
        "every unauthenticated request is counted: {metrics}"
    );
    // The probes answer without credentials, here and on their port.
    assert_eq!(common::get_plain(served.probes, "/readyz").await, 200);
}
