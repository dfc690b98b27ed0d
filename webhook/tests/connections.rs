//! What a connection may hold, through the real servers: a connection that fails
//! authentication is closed after its answer; a stream that never sends its body gives its
//! review's permits back at the header timeout; HTTP/2 control frames past the connection's
//! budget close it; an idle HTTP/1.1 connection lives to the idle timeout; and the metrics port
//! has the webhook's connection cap and header timeout.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use celgate_webhook::{AuthConfig, Authenticator, Limits, MetricsServer};
use common::{Client, connect, connector, get_plain, post, review};
use hyper::body::Frame;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prometheus_client::registry::Registry;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

const TOKEN: &str = "connections-token";

fn token_auth() -> Option<Authenticator> {
    let path = std::env::temp_dir().join(format!("celgate-conn-{}-tokens", std::process::id()));
    std::fs::write(&path, TOKEN).unwrap();
    Authenticator::load(&AuthConfig {
        token_file: Some(path),
        ..AuthConfig::default()
    })
    .unwrap()
}

/// Whether the peer closes `stream` within `wait` (reading and dropping whatever comes first).
async fn closed_within<S: AsyncRead + Unpin>(stream: &mut S, wait: Duration) -> bool {
    let drained = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(wait, drained).await.is_ok()
}

/// Connections closed by the server for `reason`, from `registry`'s text.
fn closed_for(registry: &Registry, reason: &str) -> u64 {
    let needle = format!("celgate_webhook_connections_closed_total{{reason=\"{reason}\"}} ");
    common::scrape(registry)
        .lines()
        .find_map(|l| l.strip_prefix(&needle)?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_connection_that_fails_authentication_is_closed_after_its_answer() {
    let served = common::serve(Limits::DEFAULT, token_auth()).await;
    // HTTP/1.1: `Connection: close`, then the server closes.
    let tls = connector(&served.roots, None, false);
    let tcp = TcpStream::connect(served.addr).await.unwrap();
    let mut stream = tls
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let body = review(1, 0);
    let head = format!(
        "POST /validate/fail HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&answer[..n]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 401"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    assert!(closed_within(&mut stream, Duration::from_secs(5)).await);

    // HTTP/2: GOAWAY; the connection ends, and a later request on it is refused.
    let tls = connector(&served.roots, None, true);
    let mut client = connect(served.addr, &tls, true).await;
    let (status, _, _) = post(&mut client, "/validate/fail", &body, None)
        .await
        .unwrap();
    assert_eq!(status, 401);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        post(&mut client, "/validate/fail", &body, Some(TOKEN))
            .await
            .is_err(),
        "the connection was closed"
    );
    let mut waited = 0;
    while served.server.connections() > 0 && waited < 300 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += 1;
    }
    assert_eq!(
        served.server.connections(),
        0,
        "both connections were closed"
    );
    assert_eq!(closed_for(&served.registry, "unauthenticated"), 2);
    // An authenticated connection stays open across answers.
    let mut client = connect(served.addr, &tls, true).await;
    for _ in 0..2 {
        let (status, _, _) = post(&mut client, "/validate/fail", &body, Some(TOKEN))
            .await
            .unwrap();
        assert_eq!(status, 200);
    }
}

/// A request body that never sends a byte.
struct Silent;

impl hyper::body::Body for Silent {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Pending
    }
}

#[tokio::test]
async fn streams_that_never_send_their_body_give_their_permits_back_at_the_header_timeout() {
    let limits = Limits {
        max_in_flight: 4,
        header_timeout: Duration::from_secs(1),
        ..Limits::DEFAULT
    };
    let served = common::serve(limits, None).await;
    let tls = connector(&served.roots, None, true);
    let tcp = TcpStream::connect(served.addr).await.unwrap();
    let stream = tls
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let (sender, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut silent = Vec::new();
    for _ in 0..4 {
        let mut sender = sender.clone();
        let req = hyper::Request::post("https://localhost/validate/fail?timeout=10s")
            .header("content-type", "application/json")
            .header("content-length", "100")
            .body(Silent)
            .unwrap();
        silent.push(tokio::spawn(async move {
            sender.ready().await.unwrap();
            sender.send_request(req).await.map(|r| r.status().as_u16())
        }));
    }
    let mut client = connect(served.addr, &tls, true).await;
    let body = review(1, 0);
    // The four hold every permit for now...
    let held = async {
        loop {
            let (status, _, _) = post(&mut client, "/validate/fail", &body, None)
                .await
                .unwrap();
            if status == 429 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_millis(900), held)
        .await
        .expect("the silent streams hold the permits");
    // ...and are answered 408 at the header timeout, well before the call's 10 s timeout.
    for stream in silent {
        let status = tokio::time::timeout(Duration::from_secs(3), stream)
            .await
            .expect("answered at the header timeout")
            .unwrap();
        assert_eq!(status.unwrap(), 408);
    }
    let (status, _, _) = post(&mut client, "/validate/fail", &body, None)
        .await
        .unwrap();
    assert_eq!(status, 200);
}

/// An HTTP/2 frame of `kind` on `stream` with `payload`.
fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], kind, 0];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

#[tokio::test]
async fn control_frames_past_the_connections_budget_close_it() {
    let served = common::serve(Limits::DEFAULT, None).await;
    for (kind, payload) in [(0x2u8, vec![0, 0, 0, 0, 16]), (0x8, vec![0, 0, 0, 1])] {
        let tls = connector(&served.roots, None, true);
        let tcp = TcpStream::connect(served.addr).await.unwrap();
        let stream = tls
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        let mut flood = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        flood.extend(frame(0x4, 0, &[]));
        for i in 0..2_000u32 {
            // PRIORITY on ever new idle streams; WINDOW_UPDATE on the connection.
            let on = if kind == 0x2 { 2 * i + 1 } else { 0 };
            flood.extend(frame(kind, on, &payload));
        }
        let (mut read, mut write) = tokio::io::split(stream);
        let writer = tokio::spawn(async move {
            let _ = write.write_all(&flood).await;
            let _ = write.flush().await;
            write
        });
        // Closed long before the header timeout (10 s) would close it.
        assert!(
            closed_within(&mut read, Duration::from_secs(3)).await,
            "a flood of frame type {kind}"
        );
        let _ = writer.await;
    }
    assert_eq!(closed_for(&served.registry, "control_frames"), 2);
}

#[tokio::test]
async fn an_idle_http1_connection_lives_to_the_idle_timeout() {
    // hyper's own header read timeout (30 s) would close it first.
    let limits = Limits {
        idle_timeout: Duration::from_secs(60),
        ..Limits::DEFAULT
    };
    let served = common::serve(limits, None).await;
    let tls = connector(&served.roots, None, false);
    let mut client = connect(served.addr, &tls, false).await;
    let body = review(1, 0);
    assert_eq!(
        post(&mut client, "/validate/fail", &body, None)
            .await
            .unwrap()
            .0,
        200
    );
    tokio::time::sleep(Duration::from_secs(32)).await;
    let Client::H1(sender) = &client else {
        unreachable!()
    };
    assert!(
        !sender.is_closed(),
        "closed while idle before the idle timeout"
    );
    assert_eq!(
        post(&mut client, "/validate/fail", &body, None)
            .await
            .unwrap()
            .0,
        200
    );
}

#[tokio::test]
async fn the_metrics_port_has_a_connection_cap_and_a_header_timeout() {
    let limits = Limits {
        max_connections: 2,
        header_timeout: Duration::from_secs(3),
        ..Limits::DEFAULT
    };
    let server = MetricsServer::bind(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        Arc::new(Registry::default()),
        limits,
    )
    .await
    .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve());
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(TcpStream::connect(addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut extra = TcpStream::connect(addr).await.unwrap();
    assert!(
        closed_within(&mut extra, Duration::from_secs(1)).await,
        "a connection past the cap is closed at once"
    );
    for stream in &mut held {
        assert!(
            closed_within(stream, Duration::from_secs(5)).await,
            "a connection without a request is closed at the header timeout"
        );
    }
    assert_eq!(get_plain(addr, "/metrics").await, 200);
}
