//! The probe port cannot be starved from another address: while 1,000 idle connections from
//! one address are open (and re-opened as they are closed), a probe from the kubelet's address
//! is answered.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use celgate_webhook::Limits;
use http_body_util::Full;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpSocket, TcpStream};

/// Idle connections the other address holds.
const IDLE: usize = 1_000;

/// A connection to `to` from the loopback address `from`.
async fn connect_from(from: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(to).await
}

/// `GET path` on a new connection from 127.0.0.1 (the kubelet's address here): the status, or
/// why there is none within 4 s (shorter than the probe port's 5 s header timeout, so no idle
/// connection ends in the meantime).
async fn probe(addr: SocketAddr, path: &str) -> Result<u16, String> {
    let answer = async {
        let tcp = connect_from([127, 0, 0, 1], addr)
            .await
            .map_err(|e| e.to_string())?;
        let (mut sender, conn) = http1::handshake::<_, Full<Bytes>>(TokioIo::new(tcp))
            .await
            .map_err(|e| e.to_string())?;
        tokio::spawn(conn);
        let req = hyper::Request::get(path)
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
        Ok(resp.status().as_u16())
    };
    tokio::time::timeout(Duration::from_secs(4), answer)
        .await
        .unwrap_or_else(|_| Err("no answer within 4 s".into()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_idle_connections_from_another_address_leave_the_probes_answered() {
    let served = common::serve(Limits::DEFAULT, None).await;
    let mut idle = Vec::with_capacity(IDLE);
    for _ in 0..IDLE {
        idle.push(connect_from([127, 0, 0, 2], served.probes).await.unwrap());
    }
    // The server accepts them all (and closes most) before the probes come.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut slowest = Duration::ZERO;
    for path in ["/readyz", "/healthz", "/readyz"] {
        // The other address re-opens what was closed, as a client starving the port would.
        for held in &mut idle {
            if held.try_read(&mut [0u8; 1]).is_ok_and(|n| n == 0) {
                *held = connect_from([127, 0, 0, 2], served.probes).await.unwrap();
            }
        }
        let started = Instant::now();
        assert_eq!(
            probe(served.probes, path).await,
            Ok(200),
            "{path} with {IDLE} idle connections from 127.0.0.2"
        );
        slowest = slowest.max(started.elapsed());
    }
    eprintln!(
        "probes: with {IDLE} idle connections from another address, the slowest of 3 probes took {slowest:.2?}"
    );
}
