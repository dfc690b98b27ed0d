//! The server's limits through the real TLS server: reviews past the in-flight limit are
//! refused at once (429, Retry-After, counted), connections past the connection limit are
//! closed, bodies past the size limit refused, and the probes answer on their own port.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

mod common;

use std::time::Duration;

use celgate_webhook::Limits;
use common::{allowed, connect, connector, get_plain, post, review};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

#[tokio::test]
async fn a_review_past_the_in_flight_limit_is_refused_at_once() {
    let limits = Limits {
        max_in_flight: 1,
        ..Limits::DEFAULT
    };
    let served = common::serve(limits, None).await;
    // A review whose body never finishes holds the one place.
    let tls = connector(&served.roots, None, false);
    let tcp = TcpStream::connect(served.addr).await.unwrap();
    let mut holder = tls
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    holder
        .write_all(b"POST /validate/fail?timeout=10s HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{")
        .await
        .unwrap();
    holder.flush().await.unwrap();
    let tls2 = connector(&served.roots, None, true);
    let mut client = connect(served.addr, &tls2, true).await;
    let body = review(1, 0);
    let mut refused = None;
    for _ in 0..200 {
        let (status, retry_after, text) = post(&mut client, "/validate/fail", &body, None)
            .await
            .unwrap();
        if status == 429 {
            refused = Some((retry_after, text));
            break;
        }
        // The holder was not admitted yet.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (retry_after, text) = refused.expect("a second review is refused while one is in flight");
    assert_eq!(retry_after.as_deref(), Some("1"));
    let text = String::from_utf8_lossy(&text);
    assert!(text.contains("--webhook-max-in-flight"), "{text}");
    let metrics = common::scrape(&served.registry);
    assert!(
        metrics.contains(
            "celgate_webhook_errors_total{path=\"/validate/fail\",reason=\"overloaded\"}"
        ),
        "{metrics}"
    );
    // Once the holder goes, reviews are decided again.
    drop(holder);
    let mut decided = false;
    for _ in 0..200 {
        let (status, _, text) = post(&mut client, "/validate/fail", &body, None)
            .await
            .unwrap();
        if status == 200 {
            assert!(allowed(&text));
            decided = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(decided);
}

#[tokio::test]
async fn connections_past_the_limit_are_closed_and_the_probes_still_answer() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::DEFAULT
    };
    let served = common::serve(limits, None).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(TcpStream::connect(served.addr).await.unwrap());
    }
    // Give the server the time to accept the two (no timing is asserted: a connection
    // accepted before them would only be refused later).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut extra = TcpStream::connect(served.addr).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut byte))
        .await
        .expect("the extra connection is closed, not left hanging");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(get_plain(served.probes, "/healthz").await, 200);
    assert_eq!(get_plain(served.probes, "/readyz").await, 200);
    let metrics = common::scrape(&served.registry);
    assert!(
        metrics.contains("celgate_webhook_connections_closed_total{reason=\"over_limit\"}"),
        "{metrics}"
    );
    assert_eq!(served.server.connections(), 2);
}

#[tokio::test]
async fn a_body_past_the_size_limit_is_refused() {
    let limits = Limits {
        max_body_bytes: 1024 * 1024,
        ..Limits::DEFAULT
    };
    let served = common::serve(limits, None).await;
    let tls = connector(&served.roots, None, true);
    let mut client = connect(served.addr, &tls, true).await;
    let (status, _, _) = post(&mut client, "/validate/fail", &review(1, 600 * 1024), None)
        .await
        .unwrap();
    assert_eq!(status, 413);
    // A body declared larger is refused before any of it arrives (not at the header timeout).
    let tcp = TcpStream::connect(served.addr).await.unwrap();
    let mut stream = connector(&served.roots, None, false)
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let head = "POST /validate/fail HTTP/1.1\r\nhost: localhost\r\ncontent-length: 2000000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut answer))
        .await
        .expect("answered before the body is sent")
        .unwrap();
    assert_eq!(&answer, b"HTTP/1.1 413");
    let (status, _, text) = post(&mut client, "/validate/fail", &review(1, 100 * 1024), None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(allowed(&text));
}

#[tokio::test]
async fn limits_that_would_refuse_every_large_review_are_refused_at_start() {
    let store = celgate_snapshot::SnapshotStore::new();
    let metrics = celgate_webhook::metrics::Metrics::register(
        &mut prometheus_client::registry::Registry::default(),
        10,
    );
    let limits = Limits {
        max_in_flight_bytes: 1024,
        ..Limits::DEFAULT
    };
    let e = celgate_webhook::AppState::configured(
        store,
        celgate_snapshot::Deps::default(),
        metrics,
        limits,
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("review bytes in flight"), "{e}");
}

/// A Deployment review whose object also holds `value` under `spec.extra`.
fn review_holding(value: &str) -> bytes::Bytes {
    let body = String::from_utf8(review(1, 0).to_vec()).unwrap();
    let body = body.replacen("\"spec\":{", &format!("\"spec\":{{\"extra\":{value},"), 1);
    assert!(body.contains("\"extra\""), "{body}");
    bytes::Bytes::from(body)
}

#[tokio::test]
async fn a_review_that_would_decode_past_the_budget_is_refused_at_once_with_413() {
    let limits = Limits::DEFAULT;
    let served = common::serve(limits.clone(), None).await;
    let tls = connector(&served.roots, None, true);
    let mut client = connect(served.addr, &tls, true).await;
    // 3 MiB of `[0,0,…]`: well within the body limit, but 1.5 million values.
    let zeros = format!("[{}0]", "0,".repeat(3 * 512 * 1024));
    let bomb = review_holding(&zeros);
    assert!(bomb.len() < limits.max_body_bytes / 2);
    let (status, retry_after, text) = post(&mut client, "/validate/fail", &bomb, None)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&text);
    assert_eq!(status, 413, "{text}");
    assert_eq!(retry_after, None, "retrying cannot help");
    assert!(
        text.starts_with("the review is too large to decode: its body of ")
            && text.contains("holds 1572")
            && text.contains("(--webhook-max-in-flight-mib)"),
        "{text}"
    );
    // The same for mutation, and for nesting: empty arrays 2 bytes each.
    let (status, _, _) = post(&mut client, "/mutate/fail/never", &bomb, None)
        .await
        .unwrap();
    assert_eq!(status, 413);
    // A review as large, of text, is decided; so is the bomb's small cousin.
    let (status, _, text) = post(&mut client, "/validate/fail", &review(1, 1536 * 1024), None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(allowed(&text));
    let small = review_holding(&format!("[{}0]", "0,".repeat(10_000)));
    let (status, _, text) = post(&mut client, "/validate/fail", &small, None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(allowed(&text));
    let metrics = common::scrape(&served.registry);
    assert!(
        metrics.contains(
            "celgate_webhook_errors_total{path=\"/validate/fail\",reason=\"too_large\"} 1"
        ),
        "{metrics}"
    );
}
