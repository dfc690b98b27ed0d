//! Decoding bombs against the real server (issue 40, item 2): the webhook, with the shipped
//! default limits and the realistic fixture's policies (1,000 validating and 1,000 mutating,
//! 20 of each matching the Pod), runs in a child process of its own, so that its peak resident
//! set (`VmHWM`, reset before each case) is the server's alone. For each shape of review an
//! attacker may send (numbers, empty objects, empty arrays, arrays nested 9,990 deep, empty
//! strings, distinct keys; and a legitimate large string), two sizes: the largest body
//! allowed (7 MiB), and the largest body whose decoding the server admits alone. `BOMBERS`
//! (128) connections send it over and over for `DECODE_BENCH_SECONDS` (default 4), while
//! one HTTP/2 connection, as kube-apiserver keeps, times small realistic reviews and fresh
//! TLS handshakes are timed beside them. Each case reports the answers by status, the
//! server's peak RSS and CPU time per second, and the small reviews' and handshakes' p50/p99,
//! against the same figures with no bombs. Written to `target/bench/decode.json`; run with `make bench-decode`.

#![allow(clippy::expect_used, clippy::unwrap_used, missing_docs)] // A benchmark harness.

use std::collections::BTreeMap;
use std::io::{BufRead as _, Write as _};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use celgate_cel::json_tape::Footprint;
use celgate_engine::PolicySet;
use celgate_snapshot::Deps;
use celgate_webhook::Limits;
use celgate_webhook::limits::heavy_max_bytes;
use celgate_webhook::review::{ObjectRead, decode_cost};
use celgate_webhook::server::{AppState, Server, TlsMaterial};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;

mod common;

use common::{env_or, fixture, fixture_mutating, fixture_store, fixture_validating};

/// Set in the child process that serves.
const SERVE_ENV: &str = "DECODE_BENCH_SERVE";
/// Connections sending bombs at once: the default `--webhook-max-in-flight`.
const BOMBERS: usize = 128;
/// How long a bomber waits after each answer.
const BOMBER_PAUSE: Duration = Duration::from_millis(20);
/// How long a bomber waits after a refusal before it connects again (a refused body is not
/// read, so the connection is closed): without it the bombers flood the server with TLS
/// handshakes, which is another attack.
const REFUSED_PAUSE: Duration = Duration::from_millis(250);
/// How often a fresh TLS handshake is timed.
const HANDSHAKE_EVERY: Duration = Duration::from_millis(100);

fn main() {
    if std::env::args()
        .skip(1)
        .any(|a| !a.starts_with('-') && a != "bombs")
    {
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(celgate_snapshot::dispatch::THREAD_STACK_BYTES)
        .enable_all()
        .build()
        .unwrap();
    if std::env::var_os(SERVE_ENV).is_some() {
        runtime.block_on(serve());
    } else {
        runtime.block_on(measure());
    }
}

/// The child: serves the realistic fixture with the default limits on a free loopback port,
/// prints the port, and serves until its standard input closes.
async fn serve() {
    let set = PolicySet::new(
        fixture_validating(&fixture::validating(1000, 20)),
        fixture_mutating(&fixture::mutating(1000, 20)),
    );
    let store = fixture_store(set);
    let metrics = celgate_webhook::metrics::Metrics::register(
        &mut prometheus_client::registry::Registry::default(),
        10,
    );
    let state = AppState::new(store, Deps::default(), metrics);
    let material = TlsMaterial {
        cert_pem: std::env::var("DECODE_BENCH_CERT").unwrap(),
        key_pem: std::env::var("DECODE_BENCH_KEY").unwrap(),
    };
    let server = Server::new(SocketAddr::from(([127, 0, 0, 1], 0)), state, material)
        .await
        .unwrap();
    println!("{}", server.local_addr());
    std::io::stdout().flush().unwrap();
    let serving = server.clone();
    tokio::spawn(async move { serving.serve().await });
    tokio::task::spawn_blocking(|| {
        let _ = std::io::stdin().lines().count();
    })
    .await
    .unwrap();
}

/// One shape: its name and `n` values of it as JSON text.
struct Shape {
    name: &'static str,
    make: fn(usize) -> String,
    /// Bytes of text per value, roughly (to size the first guess).
    bytes_each: usize,
}

fn joined(item: &str, n: usize) -> String {
    let mut out = String::with_capacity(n * (item.len() + 1) + 2);
    out.push('[');
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item);
    }
    out.push(']');
    out
}

fn shapes() -> Vec<Shape> {
    vec![
        Shape {
            name: "numbers",
            make: |n| joined("0", n),
            bytes_each: 2,
        },
        Shape {
            name: "empty objects",
            make: |n| joined("{}", n),
            bytes_each: 3,
        },
        Shape {
            name: "empty arrays",
            make: |n| joined("[]", n),
            bytes_each: 3,
        },
        Shape {
            name: "nesting 9,990 deep",
            make: |n| joined(&format!("{}{}", "[".repeat(9990), "]".repeat(9990)), n),
            bytes_each: 19_981,
        },
        Shape {
            name: "empty strings",
            make: |n| joined("\"\"", n),
            bytes_each: 3,
        },
        Shape {
            name: "keys",
            make: |n| {
                let keys: Vec<String> = (0..n).map(|i| format!("\"k{i:08}\":0")).collect();
                format!("{{{}}}", keys.join(","))
            },
            bytes_each: 13,
        },
        Shape {
            name: "one string (legitimate)",
            make: |n| format!("\"{}\"", "x".repeat(n)),
            bytes_each: 1,
        },
    ]
}

/// The realistic Pod review with `value` as its object's member `bomb`.
fn review_with(value: &str) -> String {
    let pod = fixture::pod_review().to_string();
    let body = pod.replacen(
        "\"object\":{",
        &format!("\"object\":{{\"bomb\":{value},"),
        1,
    );
    assert_ne!(body, pod);
    body
}

/// What the server charges for `body` in all: the body twice while it is read, then what
/// decoding it builds.
fn charged(body: &str, read: ObjectRead) -> usize {
    2 * body.len() + decode_cost(body.len(), &Footprint::of(body.as_bytes()), read)
}

/// The largest `n` for which `fits` holds (it holds for 0), by doubling and bisection.
fn largest(fits: impl Fn(usize) -> bool, guess: usize) -> usize {
    let (mut lo, mut hi) = (0, guess.max(1));
    while fits(hi) {
        lo = hi;
        hi *= 2;
    }
    while hi - lo > 1.max(lo / 1000) {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) { lo = mid } else { hi = mid }
    }
    lo
}

/// The parent: starts the server, measures the idle figures, then every case.
async fn measure() {
    let secs = env_or("DECODE_BENCH_SECONDS", 4);
    let limits = Limits::DEFAULT;
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.der().clone()).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env(SERVE_ENV, "1")
        .env("DECODE_BENCH_CERT", cert.pem())
        .env("DECODE_BENCH_KEY", key.serialize_pem())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line.trim().parse().unwrap();
    let h1 = connector(&roots, false);
    let h2 = connector(&roots, true);
    let small = Bytes::from(fixture::pod_review().to_string());
    let apiserver = Arc::new(Mutex::new(connect(addr, &h2, true).await));
    // Warm up, then the idle figures.
    for _ in 0..200 {
        let status = post(&mut *apiserver.lock().await, "/validate/fail", &small).await;
        assert_eq!(status, Some(200));
    }
    let idle_rss = rss_mib(pid, "VmRSS");
    let cpu_before = cpu_seconds(pid);
    let idle = probe(
        addr,
        &apiserver,
        &h2,
        &small,
        Duration::from_secs(secs),
        None,
    )
    .await;
    let idle_cpu = (cpu_seconds(pid) - cpu_before) / secs as f64;
    println!(
        "idle: server RSS {idle_rss:.0} MiB, CPU {idle_cpu:.2} s/s; small reviews p50 {:.2} ms p99 {:.2} ms; handshakes p50 {:.2} ms p99 {:.2} ms",
        idle.reviews.0, idle.reviews.1, idle.handshakes.0, idle.handshakes.1
    );
    // What large reviews may take of the bytes in flight.
    let budget = heavy_max_bytes(limits.max_in_flight_bytes);
    let mut cases = Vec::new();
    for shape in shapes() {
        let overhead = review_with("0").len();
        let max_n = largest(
            |n| review_with(&(shape.make)(n)).len() <= limits.max_body_bytes,
            (limits.max_body_bytes - overhead) / shape.bytes_each,
        );
        cases.push((shape.name, "largest body", "/validate/fail", max_n));
        for (path, read) in [
            ("/validate/fail", ObjectRead::Tape),
            ("/mutate/fail/never", ObjectRead::TapeToMutate),
        ] {
            let n = largest(
                |n| {
                    let body = review_with(&(shape.make)(n));
                    body.len() <= limits.max_body_bytes && charged(&body, read) <= budget
                },
                max_n / 8,
            );
            cases.push((shape.name, "largest admitted", path, n));
        }
    }
    let mut report = Vec::new();
    let mut worst_rss = idle_rss;
    for (name, size, path, n) in cases {
        let shape = shapes().into_iter().find(|s| s.name == name).unwrap();
        let body = Bytes::from(review_with(&(shape.make)(n)));
        std::fs::write(format!("/proc/{pid}/clear_refs"), "5").unwrap();
        let cpu_before = cpu_seconds(pid);
        let bombing = probe(
            addr,
            &apiserver,
            &h2,
            &small,
            Duration::from_secs(secs),
            Some((&h1, path, &body)),
        )
        .await;
        // Let the last answers finish before the next case.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let peak = rss_mib(pid, "VmHWM");
        // The bombs' CPU, over the case and the pause after it.
        let cpu = (cpu_seconds(pid) - cpu_before) / secs as f64;
        worst_rss = worst_rss.max(peak);
        println!(
            "{name}, {size} ({:.2} MiB) on {path}: answers {:?}; server peak RSS {peak:.0} MiB, CPU {cpu:.2} s/s; small reviews p50 {:.2} ms p99 {:.2} ms ({} refused); handshakes p50 {:.2} ms p99 {:.2} ms",
            body.len() as f64 / (1024.0 * 1024.0),
            bombing.answers,
            bombing.reviews.0,
            bombing.reviews.1,
            bombing.small_refused,
            bombing.handshakes.0,
            bombing.handshakes.1
        );
        report.push(
            json!({"shape": name, "size": size, "path": path, "body_bytes": body.len(),
            "answers": bombing.answers, "server_peak_rss_mib": peak.round(),
            "server_cpu_seconds_per_second": (cpu * 100.0).round() / 100.0,
            "small_review_ms": {"p50": bombing.reviews.0, "p99": bombing.reviews.1},
            "small_reviews_refused": bombing.small_refused,
            "handshake_ms": {"p50": bombing.handshakes.0, "p99": bombing.handshakes.1}}),
        );
    }
    println!("worst server peak RSS: {worst_rss:.0} MiB (idle {idle_rss:.0} MiB)");
    drop(child.stdin.take());
    let _ = child.wait();
    let report = json!({"bombers": BOMBERS, "seconds_per_case": secs,
        "idle": {"server_rss_mib": idle_rss.round(),
            "server_cpu_seconds_per_second": (idle_cpu * 100.0).round() / 100.0,
            "small_review_ms": {"p50": idle.reviews.0, "p99": idle.reviews.1},
            "handshake_ms": {"p50": idle.handshakes.0, "p99": idle.handshakes.1}},
        "worst_server_peak_rss_mib": worst_rss.round(), "cases": report,
        "loadavg": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()});
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench/decode.json");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    println!("report: {}", path.display());
}

/// CPU time process `pid` has used so far, user and system, its threads that ended included
/// (`/proc/<pid>/stat`, in the kernel's 100 ticks per second).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: Vec<f64> = after
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|t| t.parse().ok())
        .collect();
    ticks.iter().sum::<f64>() / 100.0
}

/// `field` (`VmRSS`, `VmHWM`) of process `pid`, in MiB.
fn rss_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// What one run measured: small reviews' (decided) and fresh handshakes' p50 and p99 (ms), and the
/// bombs' answers by status (`error`: the connection failed, as when a refused body is not
/// read).
struct Probed {
    reviews: (f64, f64),
    /// Small reviews answered 429.
    small_refused: u64,
    handshakes: (f64, f64),
    answers: BTreeMap<String, u64>,
}

/// For `length`: small reviews timed one after another on the API server's connection and
/// fresh handshakes every [`HANDSHAKE_EVERY`], while `bombs` (if any) are sent by
/// [`BOMBERS`] connections.
async fn probe(
    addr: SocketAddr,
    apiserver: &Arc<Mutex<Sender>>,
    h2: &TlsConnector,
    small: &Bytes,
    length: Duration,
    bombs: Option<(&TlsConnector, &'static str, &Bytes)>,
) -> Probed {
    let stop = Arc::new(AtomicBool::new(false));
    let mut bombers = Vec::new();
    if let Some((h1, path, body)) = bombs {
        for _ in 0..BOMBERS {
            let (stop, h1, body) = (stop.clone(), h1.clone(), body.clone());
            bombers.push(tokio::spawn(async move {
                let mut answers: BTreeMap<String, u64> = BTreeMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let mut sender = connect(addr, &h1, false).await;
                    // Keep-alive until the server closes or refuses.
                    while !stop.load(Ordering::Relaxed) {
                        let status = post(&mut sender, path, &body).await;
                        let key = status.map_or("error".to_string(), |s| s.to_string());
                        *answers.entry(key.clone()).or_default() += 1;
                        if key != "200" {
                            tokio::time::sleep(REFUSED_PAUSE).await;
                            break;
                        }
                        tokio::time::sleep(BOMBER_PAUSE).await;
                    }
                }
                answers
            }));
        }
    }
    let handshaker = {
        let (stop, h2) = (stop.clone(), h2.clone());
        tokio::spawn(async move {
            let mut times = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let started = Instant::now();
                let tcp = TcpStream::connect(addr).await.unwrap();
                if h2
                    .connect(ServerName::try_from("localhost").unwrap(), tcp)
                    .await
                    .is_ok()
                {
                    times.push(started.elapsed());
                }
                tokio::time::sleep(HANDSHAKE_EVERY).await;
            }
            times
        })
    };
    let mut times = Vec::new();
    let mut small_refused = 0;
    let until = Instant::now() + length;
    {
        let mut sender = apiserver.lock().await;
        while Instant::now() < until {
            let started = Instant::now();
            // Refused when the bombers hold every place in flight, as they may.
            match post(&mut sender, "/validate/fail", small).await {
                Some(200) => times.push(started.elapsed()),
                Some(429) => small_refused += 1,
                other => panic!("a small review was answered {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut answers: BTreeMap<String, u64> = BTreeMap::new();
    for bomber in bombers {
        for (status, count) in bomber.await.unwrap() {
            *answers.entry(status).or_default() += count;
        }
    }
    let mut handshakes = handshaker.await.unwrap();
    Probed {
        reviews: percentiles(&mut times),
        small_refused,
        handshakes: percentiles(&mut handshakes),
        answers,
    }
}

/// p50 and p99 in ms.
fn percentiles(times: &mut [Duration]) -> (f64, f64) {
    times.sort();
    let at = |p: f64| {
        times
            .get(((times.len() as f64 * p) as usize).min(times.len().saturating_sub(1)))
            .map_or(f64::NAN, |d| (d.as_secs_f64() * 1e5).round() / 100.0)
    };
    (at(0.5), at(0.99))
}

/// One client connection.
enum Sender {
    H1(http1::SendRequest<Full<Bytes>>),
    H2(http2::SendRequest<Full<Bytes>>),
}

fn connector(roots: &rustls::RootCertStore, http2: bool) -> TlsConnector {
    let mut client = rustls::ClientConfig::builder()
        .with_root_certificates(roots.clone())
        .with_no_client_auth();
    client.alpn_protocols = vec![if http2 {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    TlsConnector::from(Arc::new(client))
}

async fn connect(addr: SocketAddr, tls: &TlsConnector, http2: bool) -> Sender {
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
        Sender::H2(sender)
    } else {
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.unwrap();
        tokio::spawn(conn);
        Sender::H1(sender)
    }
}

/// Posts `body` to `path`: the status, or `None` when the connection failed.
async fn post(sender: &mut Sender, path: &str, body: &Bytes) -> Option<u16> {
    let req = |uri: String| {
        hyper::Request::post(uri)
            .header("content-type", "application/json")
            .header("host", "localhost")
            .body(Full::new(body.clone()))
            .unwrap()
    };
    let resp = match sender {
        Sender::H1(s) => {
            s.ready().await.ok()?;
            s.send_request(req(format!("{path}?timeout=10s")))
                .await
                .ok()?
        }
        Sender::H2(s) => {
            s.ready().await.ok()?;
            s.send_request(req(format!("https://localhost{path}?timeout=10s")))
                .await
                .ok()?
        }
    };
    let status = resp.status().as_u16();
    resp.into_body().collect().await.ok()?;
    Some(status)
}
