//! One accepted connection: its deadlines and its HTTP/1.1 or HTTP/2 service. hyper's own
//! HTTP/1.1 header timeout also runs while a keep-alive connection waits for its next request,
//! so it would close idle connections early; here the header deadline starts only when a
//! request's first byte arrives (or at accept, for the first request), and idleness counts
//! time with no request in flight, not bytes (so HTTP/2 PINGs do not keep a connection alive).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::http::header::CONNECTION;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, watch};
use tower_service::Service;

use crate::auth::Peer;
use crate::limits::{HEAVY_WAITING, HTTP2_PING_TIMEOUT, Limits, heavy_at_once};

/// HTTP/2 receive window of one review's stream: a small review (under
/// [`HEAVY_BODY_BYTES`](crate::limits::HEAVY_BODY_BYTES)) arrives without waiting for a window
/// update, and a heavy one waiting for its turn holds this much unread at most; one being read
/// pays a window update per half of it.
const STREAM_WINDOW_BYTES: u32 = 256 * 1024;
/// HTTP/2 receive window of a connection left to its small reviews beside the heavy ones
/// waiting for their turn or being read, whose unread bytes it also holds.
const CONNECTION_WINDOW_BYTES: u32 = 4 * 1024 * 1024;

/// The HTTP/2 receive window of a connection: room for every heavy review that may be read or
/// wait at once ([`heavy_at_once`], [`HEAVY_WAITING`]) to hold its stream's window unread,
/// and [`CONNECTION_WINDOW_BYTES`] more, so that they never stall the connection's small
/// reviews.
fn connection_window() -> u32 {
    let heavy = u32::try_from(heavy_at_once() + HEAVY_WAITING).unwrap_or(u32::MAX);
    heavy
        .saturating_mul(STREAM_WINDOW_BYTES)
        .saturating_add(CONNECTION_WINDOW_BYTES)
}

/// Largest header block of an HTTP/2 request (hyper's default is 16 MiB).
const MAX_HEADER_LIST_BYTES: u32 = 64 * 1024;
/// HTTP/2 PRIORITY and WINDOW_UPDATE frames (which cost the server work, and which hyper
/// accepts without limit) a connection may send before its first request...
const CONTROL_FRAMES: u64 = 1_000;
/// ...and more per request...
const CONTROL_FRAMES_PER_REQUEST: u64 = 16;
/// ...and one more per this many bytes the server sent: a client's WINDOW_UPDATEs follow the
/// data it receives (Go's client, kube-apiserver's, sends one per 4 KiB at most).
const BYTES_PER_CONTROL_FRAME: u64 = 1024;

/// Why the server closed a connection (the `reason` label of its metric).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Closed {
    /// No complete request headers in time.
    HeaderTimeout,
    /// No request in flight for the idle timeout.
    Idle,
    /// A request failed authentication.
    Unauthenticated,
    /// More HTTP/2 control frames than its requests allow.
    ControlFrames,
}

impl Closed {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Self::HeaderTimeout => "header_timeout",
            Self::Idle => "idle",
            Self::Unauthenticated => "unauthenticated",
            Self::ControlFrames => "control_frames",
        }
    }
}

/// Marks a response after which the server closes its connection (a request that failed
/// authentication): an HTTP/1.1 answer says `Connection: close`, an HTTP/2 connection is sent
/// GOAWAY, so a client without credentials holds no connection slot past its answer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CloseAfter;

/// What a connection is doing, shared by its reader, its service and its watchdog. Times are
/// milliseconds since the connection was accepted, plus one (0 is "none").
#[derive(Debug)]
pub(crate) struct Activity {
    accepted: Instant,
    in_flight: AtomicU32,
    /// Requests received so far.
    requests: AtomicU64,
    /// Set once the client sent more control frames than its requests allow.
    flooded: AtomicBool,
    header_deadline: AtomicU64,
    idle_since: AtomicU64,
    /// HTTP/1.1: a byte read with no request in flight starts the next request's headers.
    http1: bool,
    header_timeout: u64,
    /// Set by an answer marked [`CloseAfter`] (the flag, and a wake-up of the watchdog).
    unauthenticated: AtomicBool,
    closing: Notify,
}

impl Activity {
    /// A connection accepted at `accepted`, whose first request's headers are due within the
    /// header timeout.
    pub(crate) fn new(accepted: Instant, http1: bool, header_timeout: Duration) -> Arc<Self> {
        let header_timeout = millis(header_timeout);
        Arc::new(Self {
            accepted,
            in_flight: AtomicU32::new(0),
            requests: AtomicU64::new(0),
            flooded: AtomicBool::new(false),
            header_deadline: AtomicU64::new(1 + header_timeout),
            idle_since: AtomicU64::new(1),
            http1,
            header_timeout,
            unauthenticated: AtomicBool::new(false),
            closing: Notify::new(),
        })
    }

    fn now(&self) -> u64 {
        1 + millis(self.accepted.elapsed())
    }

    /// A request's headers arrived: it is in flight until the guard is dropped.
    pub(crate) fn started(self: &Arc<Self>) -> Busy {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.requests.fetch_add(1, Ordering::AcqRel);
        self.header_deadline.store(0, Ordering::Release);
        Busy(self.clone())
    }

    fn read(&self) {
        if self.http1 && self.in_flight.load(Ordering::Acquire) == 0 {
            let deadline = self.now().saturating_add(self.header_timeout);
            // Only the first byte of a request starts its deadline.
            let _ = self.header_deadline.compare_exchange(
                0,
                deadline,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
    }

    /// An answer marked [`CloseAfter`] is sent: the connection is to close after it.
    fn close(&self) {
        self.unauthenticated.store(true, Ordering::Release);
        self.closing.notify_one();
    }

    /// Why the server ended the connection through its stream or an answer, if it did.
    fn ended(&self) -> Option<Closed> {
        if self.flooded.load(Ordering::Acquire) {
            Some(Closed::ControlFrames)
        } else if self.unauthenticated.load(Ordering::Acquire) {
            Some(Closed::Unauthenticated)
        } else {
            None
        }
    }

    /// Whether the connection should be closed now.
    fn expired(&self, idle_timeout: Duration) -> Option<Closed> {
        let now = self.now();
        let deadline = self.header_deadline.load(Ordering::Acquire);
        if deadline != 0 && now >= deadline {
            return Some(Closed::HeaderTimeout);
        }
        let idle = deadline == 0
            && self.in_flight.load(Ordering::Acquire) == 0
            && now.saturating_sub(self.idle_since.load(Ordering::Acquire)) >= millis(idle_timeout);
        idle.then_some(Closed::Idle)
    }
}

/// A request in flight on its connection.
pub(crate) struct Busy(Arc<Activity>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.idle_since.store(self.0.now(), Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// HTTP/2 frame type of PRIORITY.
const PRIORITY: u8 = 0x2;
/// HTTP/2 frame type of WINDOW_UPDATE.
const WINDOW_UPDATE: u8 = 0x8;
/// Length of the client's HTTP/2 connection preface (`PRI * HTTP/2.0…`).
const PREFACE_BYTES: usize = 24;

/// Finds the HTTP/2 frames in what a client sends, to count its control frames.
#[derive(Debug)]
struct Frames {
    /// Bytes still to skip: the preface, then the payload of the frame being read.
    skip: usize,
    /// The frame header being read, and how much of it has arrived.
    header: [u8; 9],
    have: usize,
    /// PRIORITY and WINDOW_UPDATE frames so far.
    control: u64,
    /// Bytes the server sent so far.
    sent: u64,
}

impl Frames {
    fn new() -> Self {
        Self {
            skip: PREFACE_BYTES,
            header: [0; 9],
            have: 0,
            control: 0,
            sent: 0,
        }
    }

    /// Whether the control frames so far are more than `requests` and the bytes sent allow.
    fn over_budget(&self, requests: u64) -> bool {
        let allowed = CONTROL_FRAMES
            .saturating_add(requests.saturating_mul(CONTROL_FRAMES_PER_REQUEST))
            .saturating_add(self.sent / BYTES_PER_CONTROL_FRAME);
        self.control > allowed
    }

    /// Reads `bytes`, the next bytes the client sent.
    fn read(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            let n = (self.header.len() - self.have).min(bytes.len());
            self.header[self.have..self.have + n].copy_from_slice(&bytes[..n]);
            self.have += n;
            bytes = &bytes[n..];
            if self.have == self.header.len() {
                let [a, b, c, kind, ..] = self.header;
                self.skip = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
                self.have = 0;
                if kind == PRIORITY || kind == WINDOW_UPDATE {
                    self.control += 1;
                }
            }
        }
    }
}

/// The connection's stream, telling its [`Activity`] when bytes arrive, and (HTTP/2) ending
/// the connection when the client sends more control frames than its requests and the data it
/// received allow.
struct Watched<I> {
    io: I,
    activity: Arc<Activity>,
    frames: Option<Frames>,
}

impl<I> Watched<I> {
    /// Counts what a write sent.
    fn sent(&mut self, written: &Poll<io::Result<usize>>) {
        if let (Some(frames), Poll::Ready(Ok(n))) = (&mut self.frames, written) {
            frames.sent = frames
                .sent
                .saturating_add(u64::try_from(*n).unwrap_or(u64::MAX));
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
            let this = &mut *self;
            if let Some(frames) = &mut this.frames {
                frames.read(&buf.filled()[before..]);
                if frames.over_budget(this.activity.requests.load(Ordering::Acquire)) {
                    this.activity.flooded.store(true, Ordering::Release);
                    return Poll::Ready(Err(io::Error::other(
                        "more HTTP/2 control frames than the connection's requests allow",
                    )));
                }
            }
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        self.sent(&written);
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.sent(&written);
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// How one connection is served.
pub(crate) struct Serving {
    /// The routes.
    pub router: Router,
    /// What the TLS handshake proved about the client (none over plain HTTP).
    pub peer: Option<Peer>,
    /// The limits.
    pub limits: Limits,
    /// Becomes `Some` (the grace) when the server stops: the connection finishes what is in
    /// flight and ends.
    pub stopping: watch::Receiver<Option<Duration>>,
    /// Set while the webhook drains: HTTP/1.1 keep-alive ends (none for the probes).
    pub draining: Option<Arc<AtomicBool>>,
}

/// Serves `io` (HTTP/2 if `http2`, else HTTP/1.1) until the client closes it or the server
/// does; returns why the server did, if it did.
pub(crate) async fn serve<I>(
    io: I,
    http2: bool,
    activity: Arc<Activity>,
    serving: Serving,
) -> Option<Closed>
where
    I: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let Serving {
        router,
        peer,
        limits,
        mut stopping,
        draining,
    } = serving;
    // While the process drains, HTTP/1.1 answers say `Connection: close`: the client retires
    // each kept-alive connection after its next answer, before the listener closes, instead of
    // writing a request into a connection closed under it (a failed call). HTTP/2 has GOAWAY.
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let busy = activity.started();
            if let Some(peer) = peer {
                req.extensions_mut().insert(peer);
            }
            let mut router = router.clone();
            let draining = draining.clone();
            let activity = activity.clone();
            async move {
                let mut response = router.call(req.map(Body::new)).await;
                if let Ok(response) = &mut response {
                    let close = response.extensions().get::<CloseAfter>().is_some();
                    if close {
                        activity.close();
                    }
                    if !http2 && (close || draining.is_some_and(|d| d.load(Ordering::Relaxed))) {
                        response
                            .headers_mut()
                            .insert(CONNECTION, HeaderValue::from_static("close"));
                    }
                }
                drop(busy);
                response
            }
        })
    };
    let io = TokioIo::new(Watched {
        io,
        activity: activity.clone(),
        frames: http2.then(Frames::new),
    });
    if http2 {
        let conn = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(limits.http2_keep_alive)
            .keep_alive_timeout(HTTP2_PING_TIMEOUT)
            .max_concurrent_streams(u32::try_from(limits.max_in_flight).unwrap_or(u32::MAX))
            .max_header_list_size(MAX_HEADER_LIST_BYTES)
            // Receive windows that hold a small review whole: with the protocol's 64 KiB
            // defaults, concurrent reviews on one connection (how kube-apiserver calls a
            // webhook over HTTP/2) stall on flow control and pay a WINDOW_UPDATE round trip
            // per 64 KiB.
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(connection_window())
            .serve_connection(io, service);
        drive(conn, &activity, &limits, &mut stopping).await
    } else {
        // The header deadline is the watchdog's: hyper's own (30 s by default) would also run
        // while a kept-alive connection waits for its next request, closing it before the
        // idle timeout.
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .serve_connection(io, service);
        drive(conn, &activity, &limits, &mut stopping).await
    }
}

/// Runs `conn` under its deadlines: a late header closes it at once; idleness and an answer
/// marked [`CloseAfter`] close it gracefully, bounded by the header timeout; the server's stop
/// closes it gracefully, bounded by the server's grace.
async fn drive<C: GracefulConnection>(
    conn: C,
    activity: &Activity,
    limits: &Limits,
    stopping: &mut watch::Receiver<Option<Duration>>,
) -> Option<Closed> {
    tokio::pin!(conn);
    let closed = tokio::select! {
        biased;
        () = activity.closing.notified() => Some(Closed::Unauthenticated),
        _ = conn.as_mut() => return activity.ended(),
        closed = watchdog(activity, limits) => match closed {
            Closed::HeaderTimeout => return Some(closed),
            other => Some(other),
        },
        () = stopped(stopping) => None,
    };
    conn.as_mut().graceful_shutdown();
    if closed.is_some() {
        // A client that does not read the GOAWAY (or the last answer) gets no longer.
        let _ = tokio::time::timeout(limits.header_timeout, conn).await;
    } else {
        // The server bounds this by its shutdown grace.
        let _ = conn.await;
    }
    closed
}

/// Completes when the server stops (or is gone).
pub(crate) async fn stopped(stopping: &mut watch::Receiver<Option<Duration>>) {
    // The guard `wait_for` returns is dropped here, before any other await.
    let _ = stopping.wait_for(Option::is_some).await;
}

/// Completes when the connection's deadlines say to close it, checking ten times per
/// shortest timeout (at most once a second, at least every 50 ms).
async fn watchdog(activity: &Activity, limits: &Limits) -> Closed {
    let tick = (limits.header_timeout.min(limits.idle_timeout) / 10)
        .clamp(Duration::from_millis(50), Duration::from_secs(1));
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        if let Some(closed) = activity.expired(limits.idle_timeout) {
            return closed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_is_due_from_accept_then_from_a_requests_first_byte() {
        let activity = Activity::new(Instant::now(), true, Duration::ZERO);
        assert_eq!(
            activity.expired(Duration::from_secs(60)),
            Some(Closed::HeaderTimeout)
        );
        let busy = activity.started();
        activity.read(); // a request body's bytes
        assert_eq!(activity.expired(Duration::ZERO), None);
        drop(busy);
        assert_eq!(activity.expired(Duration::ZERO), Some(Closed::Idle));
        assert_eq!(activity.expired(Duration::from_secs(60)), None);
        activity.read(); // the next request's first byte
        assert_eq!(
            activity.expired(Duration::from_secs(60)),
            Some(Closed::HeaderTimeout)
        );
    }

    #[test]
    fn control_frames_are_counted_across_reads_and_budgeted_by_requests_and_data_sent() {
        let frame = |kind: u8, payload: &[u8]| {
            let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
            let mut f = vec![len[1], len[2], len[3], kind, 0, 0, 0, 0, 1];
            f.extend_from_slice(payload);
            f
        };
        let mut sent = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        sent.extend(frame(0x4, &[0; 6])); // SETTINGS
        sent.extend(frame(PRIORITY, &[0, 0, 0, 0, 16]));
        sent.extend(frame(0x1, &[0x82; 40])); // HEADERS, whose payload holds no frame
        sent.extend(frame(WINDOW_UPDATE, &[0, 0, 0, 1]));
        sent.extend(frame(0x0, &[0x2; 300])); // DATA
        let mut frames = Frames::new();
        for chunk in sent.chunks(7) {
            frames.read(chunk);
        }
        assert_eq!(frames.control, 2);
        frames.control = CONTROL_FRAMES;
        assert!(!frames.over_budget(0));
        frames.control += 1;
        assert!(frames.over_budget(0));
        assert!(!frames.over_budget(1), "a request allows more");
        frames.control += CONTROL_FRAMES_PER_REQUEST;
        assert!(frames.over_budget(1));
        frames.sent = BYTES_PER_CONTROL_FRAME;
        assert!(!frames.over_budget(1), "data sent allows more");
    }

    #[test]
    fn http2_frames_between_requests_start_no_header_deadline() {
        let activity = Activity::new(Instant::now(), false, Duration::ZERO);
        drop(activity.started());
        activity.read(); // a PING
        assert_eq!(activity.expired(Duration::from_secs(60)), None);
    }
}
