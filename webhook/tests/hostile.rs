//! Hostile clients against the real server with the shipped default limits (issue 30): many
//! half-open TLS connections and slowloris requests while a kube-apiserver-like client keeps
//! sending reviews on its HTTP/2 connection, then 32 concurrent maximum-size reviews. Checks
//! that normal reviews are still decided, connections past the limit are closed, slow headers
//! are cut, the probes answer, and reports (never asserts) latencies and the process's peak
//! RSS. Run with `cargo test -p celgate-webhook --test hostile -- --nocapture` for the figures.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use celgate_webhook::Limits;
use common::{Client, allowed, connect, connector, get_plain, post, review};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// Slowloris connections: TLS, then request headers a byte at a time.
const SLOW: usize = 500;
/// Half-open connections: TCP, then nothing (more than the connection limit leaves).
const HALF_OPEN: usize = 5_000;
/// Reviews timed per measurement.
const SAMPLES: usize = 300;
/// Concurrent maximum-size reviews.
const LARGE: usize = 32;

/// The process's peak resident set (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Times `SAMPLES` reviews on `client`, each checked decided; p50 and p99 in ms.
async fn latencies(client: &mut Client) -> (f64, f64) {
    let body = review(1, 0);
    let mut times = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let started = Instant::now();
        let (status, _, text) = post(client, "/validate/fail", &body, None).await.unwrap();
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&text));
        assert!(allowed(&text));
    }
    times.sort_by(f64::total_cmp);
    (times[SAMPLES / 2], times[SAMPLES * 99 / 100])
}

/// Whether the server closed `stream` (a read gives EOF or an error) within `wait`.
async fn closed<S: tokio::io::AsyncRead + Unpin>(stream: &mut S, wait: Duration) -> bool {
    let mut buf = [0u8; 512];
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
            Err(_) => return false,
        }
    }
}

/// A slowloris: request headers a byte every 200 ms, never finished. Returns when the
/// server cut it (the time it took), or `None` if it was still open after `give_up`.
async fn slowloris(
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
    give_up: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let tcp = TcpStream::connect(addr).await.ok()?;
    let Ok(mut stream) = tls
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
    else {
        return Some(started.elapsed());
    };
    let header = b"POST /validate/fail?timeout=10s HTTP/1.1\r\nhost: localhost\r\nx-slow: ";
    if stream.write_all(header).await.is_err() {
        return Some(started.elapsed());
    }
    while started.elapsed() < give_up {
        if stream.write_all(b"a").await.is_err() || stream.flush().await.is_err() {
            return Some(started.elapsed());
        }
        if closed(&mut stream, Duration::from_millis(200)).await {
            return Some(started.elapsed());
        }
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_stays_responsive_under_hostile_clients_and_bounds_memory() {
    let limits = Limits::DEFAULT;
    let served = common::serve(limits.clone(), None).await;
    let h2 = connector(&served.roots, None, true);
    let h1 = connector(&served.roots, None, false);
    // The API server's connection, open before the attack (as kube-apiserver keeps one).
    let mut apiserver = connect(served.addr, &h2, true).await;
    let (idle_p50, idle_p99) = latencies(&mut apiserver).await;

    // The attack: slowloris first, then half-open connections past the connection limit.
    let attack_started = Instant::now();
    let give_up = limits.header_timeout * 3;
    let mut slow = JoinSet::new();
    for _ in 0..SLOW {
        slow.spawn(slowloris(served.addr, h1.clone(), give_up));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut half_open = Vec::with_capacity(HALF_OPEN);
    for _ in 0..HALF_OPEN {
        if let Ok(tcp) = TcpStream::connect(served.addr).await {
            half_open.push(tcp);
        }
    }
    // Connections past the limit are closed at once; count those closed within a second.
    let mut refused = 0;
    let mut waiting = JoinSet::new();
    for mut tcp in half_open {
        waiting.spawn(async move {
            let closed = closed(&mut tcp, Duration::from_secs(1)).await;
            (closed, tcp)
        });
    }
    let mut still_open = Vec::new();
    while let Some(joined) = waiting.join_next().await {
        let (was_closed, tcp) = joined.unwrap();
        if was_closed {
            refused += 1;
        } else {
            still_open.push(tcp);
        }
    }
    let open_during = served.server.connections();
    let (attack_p50, attack_p99) = latencies(&mut apiserver).await;
    let probe_started = Instant::now();
    assert_eq!(get_plain(served.probes, "/healthz").await, 200);
    assert_eq!(get_plain(served.probes, "/readyz").await, 200);
    let probe_ms = probe_started.elapsed().as_secs_f64() * 1000.0;

    // Slow headers are cut after the header timeout; half-open connections too.
    let mut cut = Vec::new();
    while let Some(joined) = slow.join_next().await {
        cut.push(joined.unwrap().expect("a slowloris connection is cut"));
    }
    let slowest_cut = cut.iter().max().copied().unwrap_or_default();
    let mut half_open_cut = 0;
    for mut tcp in still_open {
        let wait = give_up.saturating_sub(attack_started.elapsed());
        assert!(
            closed(&mut tcp, wait).await,
            "a half-open connection is cut"
        );
        half_open_cut += 1;
    }
    // The slots are free again: a new connection is served.
    let mut fresh = connect(served.addr, &h2, true).await;
    let (status, _, text) = post(&mut fresh, "/validate/fail", &review(1, 0), None)
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(allowed(&text));

    // Maximum-size reviews: an object and its old version just under half the body limit each.
    let rss_before = peak_rss_mib();
    let large = review(1, limits.max_body_bytes / 2 - 4096);
    assert!(large.len() <= limits.max_body_bytes);
    let mut reviews = JoinSet::new();
    for _ in 0..LARGE {
        let (tls, body) = (h1.clone(), large.clone());
        let addr = served.addr;
        reviews.spawn(async move {
            let mut client = connect(addr, &tls, false).await;
            post(&mut client, "/validate/fail", &body, None)
                .await
                .map(|(status, _, _)| status)
                .ok()
        });
    }
    let (mut decided, mut overloaded, mut other) = (0, 0, 0);
    while let Some(joined) = reviews.join_next().await {
        match joined.unwrap() {
            Some(200) => decided += 1,
            Some(429) => overloaded += 1,
            // A refused review's body is not read: the client may see the connection close.
            _ => other += 1,
        }
    }
    let rss_after = peak_rss_mib();
    assert!(decided > 0, "some maximum-size reviews are decided");
    // Still responsive after all that.
    let (status, _, _) = post(&mut apiserver, "/validate/fail", &review(1, 0), None)
        .await
        .unwrap();
    assert_eq!(status, 200);

    let metrics = common::scrape(&served.registry);
    let closed_lines: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("celgate_webhook_connections_closed_total"))
        .collect();
    println!(
        "hostile: normal reviews over HTTP/2, {SAMPLES} each: idle p50 {idle_p50:.2} ms p99 {idle_p99:.2} ms; \
         under attack ({SLOW} slowloris, {HALF_OPEN} half-open) p50 {attack_p50:.2} ms p99 {attack_p99:.2} ms; \
         probes answered in {probe_ms:.1} ms"
    );
    println!(
        "hostile: {open_during} connections open during the attack (limit {}), {refused} refused at once, \
         {half_open_cut} half-open cut later, slowloris cut after at most {:.1} s (header timeout {} s)",
        limits.max_connections,
        slowest_cut.as_secs_f64(),
        limits.header_timeout.as_secs()
    );
    println!(
        "hostile: {LARGE} concurrent reviews of {:.1} MiB: {decided} decided, {overloaded} answered 429, \
         {other} closed; peak RSS of the process (server and clients) {rss_before:.0} MiB before, {rss_after:.0} MiB after",
        large.len() as f64 / (1024.0 * 1024.0)
    );
    println!("hostile: {}", closed_lines.join("; "));
    assert!(refused > 0, "connections past the limit are refused");
    assert!(open_during <= limits.max_connections);
}
