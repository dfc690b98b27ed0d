//! A draining server (the process got SIGTERM and waits out its shutdown delay): reviews are
//! still decided, `/readyz` fails, and every HTTP/1.1 answer says `Connection: close`, so a
//! client retires its kept-alive connection instead of later writing into one the server closed
//! (behind a Service, kube-apiserver calls webhooks over HTTP/1.1; a write into a closed
//! connection is a failed admission). HTTP/2 connections are served as before.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

mod common;

use std::time::Duration;

use bytes::Bytes;
use celgate_webhook::Limits;
use common::{Client, allowed, connect, connector, get_plain, post, review};
use http_body_util::{BodyExt as _, Full};

/// Posts a review on an HTTP/1.1 connection: the status and the `Connection` header.
async fn post_h1(client: &mut Client, body: &Bytes) -> (u16, Option<String>) {
    let Client::H1(sender) = client else {
        panic!("an HTTP/1.1 client")
    };
    sender.ready().await.unwrap();
    let req = hyper::Request::post("https://localhost/validate/fail?timeout=10s")
        .header("content-type", "application/json")
        .header("host", "localhost")
        .body(Full::new(body.clone()))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let connection = resp
        .headers()
        .get("connection")
        .map(|v| v.to_str().unwrap().to_string());
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(allowed(&body), "{body:?}");
    (status, connection)
}

#[tokio::test]
async fn a_draining_server_decides_and_ends_http1_keep_alive() {
    let served = common::serve(Limits::DEFAULT, None).await;
    let body = review(3, 0);
    let mut h1 = connect(served.addr, &connector(&served.roots, None, false), false).await;
    let mut h2 = connect(served.addr, &connector(&served.roots, None, true), true).await;
    assert_eq!(post_h1(&mut h1, &body).await, (200, None));
    assert_eq!(post_h1(&mut h1, &body).await, (200, None), "kept alive");

    served.server.drain();
    assert_eq!(get_plain(served.probes, "/readyz").await, 503);
    assert_eq!(
        post_h1(&mut h1, &body).await,
        (200, Some("close".to_string()))
    );
    let Client::H1(sender) = &mut h1 else {
        unreachable!()
    };
    tokio::time::timeout(Duration::from_secs(5), async {
        while !sender.is_closed() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the connection is closed after the answer");
    // A new HTTP/1.1 connection is served the same way; HTTP/2 goes on.
    let mut next = connect(served.addr, &connector(&served.roots, None, false), false).await;
    assert_eq!(
        post_h1(&mut next, &body).await,
        (200, Some("close".to_string()))
    );
    for _ in 0..2 {
        let (status, _, answer) = post(&mut h2, "/validate/fail", &body, None).await.unwrap();
        assert_eq!(status, 200);
        assert!(allowed(&answer), "{answer:?}");
    }
}
