//! Heavy reviews take turns (issue 40, item 2): however many large bodies are sent at once, at
//! most `heavy_at_once()` are read (their bodies polled) and decided at a time, a few more wait
//! a bounded time for their turn and are then answered 429, the rest are answered 429 at once,
//! and small reviews never wait for a turn. In-process, through the router, with bodies that
//! arrive only when the test sends them and count whether the server has started reading them.

#![allow(clippy::expect_used, clippy::unwrap_used)] // A failed expectation is a failed test.

mod common;

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response};
use bytes::Bytes;
use celgate_snapshot::{Deps, NamespaceView, SnapshotStore};
use celgate_webhook::limits::{HEAVY_BODY_BYTES, HEAVY_WAIT, HEAVY_WAITING, heavy_at_once};
use celgate_webhook::metrics::Metrics;
use celgate_webhook::server::router;
use celgate_webhook::{AppState, Limits};
use http_body_util::BodyExt;
use hyper::body::{Frame, SizeHint};
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower::ServiceExt;

/// Bodies the server is reading now (polled, not yet ended or dropped), and the most at once.
#[derive(Default)]
struct Reading {
    now: AtomicUsize,
    most: AtomicUsize,
}

/// A request body of a declared length that arrives as the test sends it, counted in
/// [`Reading`] from its first poll.
struct Trickled {
    chunks: mpsc::UnboundedReceiver<Bytes>,
    len: u64,
    reading: Arc<Reading>,
    /// Set at the first poll.
    polled: Arc<AtomicBool>,
    ended: bool,
}

impl Trickled {
    fn stop(&mut self) {
        if self.polled.load(Ordering::Acquire) && !self.ended {
            self.ended = true;
            self.reading.now.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl hyper::body::Body for Trickled {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if !self.polled.swap(true, Ordering::AcqRel) {
            let now = self.reading.now.fetch_add(1, Ordering::AcqRel) + 1;
            self.reading.most.fetch_max(now, Ordering::AcqRel);
        }
        match self.chunks.poll_recv(cx) {
            Poll::Ready(Some(chunk)) => Poll::Ready(Some(Ok(Frame::data(chunk)))),
            Poll::Ready(None) => {
                self.stop();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len)
    }
}

impl Drop for Trickled {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A review sent to the router whose body the test sends.
struct Sent {
    answer: JoinHandle<(u16, String)>,
    polled: Arc<AtomicBool>,
    body: Option<(mpsc::UnboundedSender<Bytes>, Bytes)>,
}

impl Sent {
    /// Sends the whole body.
    fn send_body(&mut self) {
        let (chunks, body) = self.body.take().expect("not sent yet");
        chunks.send(body).unwrap();
    }
}

fn send(app: &axum::Router, body: Bytes, reading: &Arc<Reading>) -> Sent {
    let (chunks, receiver) = mpsc::unbounded_channel();
    let polled = Arc::new(AtomicBool::new(false));
    let trickled = Trickled {
        chunks: receiver,
        len: body.len() as u64,
        reading: reading.clone(),
        polled: polled.clone(),
        ended: false,
    };
    let req = Request::post("/validate/fail?timeout=30s")
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(Body::new(trickled))
        .unwrap();
    let answer = tokio::spawn(answered(app.clone().oneshot(req)));
    Sent {
        answer,
        polled,
        body: Some((chunks, body)),
    }
}

async fn answered(
    response: impl Future<Output = Result<Response<Body>, Infallible>>,
) -> (u16, String) {
    let response = response.await.unwrap();
    let status = response.status().as_u16();
    let text = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&text).into_owned())
}

/// Lets the spawned requests run, at most `n` times, until `done`.
async fn run_until(n: usize, done: impl Fn() -> bool) {
    for _ in 0..n {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn heavy_bodies_are_read_a_few_at_a_time_and_small_reviews_never_wait() {
    let store = SnapshotStore::new();
    store.publish_namespaces(NamespaceView::new([(
        "default".to_string(),
        json!({"metadata": {"name": "default"}}),
    )]));
    store.publish_policies(Arc::new(common::policies()), Arc::default(), Arc::default());
    let metrics = Metrics::register(&mut Registry::default(), 10);
    let limits = Limits::DEFAULT;
    let state = AppState::configured(store, Deps::default(), metrics, limits, None).unwrap();
    let app = router(state);
    let reading = Arc::new(Reading::default());
    // Large enough to be heavy, small enough that the byte budget takes every one at once.
    let large = common::review(1, HEAVY_BODY_BYTES);
    assert!(large.len() >= HEAVY_BODY_BYTES);
    let turns = heavy_at_once();
    let mut sent: Vec<Sent> = (0..turns + HEAVY_WAITING + 1)
        .map(|_| send(&app, large.clone(), &reading))
        .collect();
    let finished = |sent: &[Sent]| sent.iter().filter(|s| s.answer.is_finished()).count();
    run_until(1_000, || {
        finished(&sent) == 1 && reading.now.load(Ordering::Acquire) == turns
    })
    .await;
    // As many bodies are read as there are turns, the rest left unread; one past those that
    // may wait is refused at once.
    assert_eq!(
        reading.most.load(Ordering::Acquire),
        turns,
        "bodies read at once"
    );
    assert_eq!(finished(&sent), 1, "refused at once");
    let refused = sent.iter().position(|s| s.answer.is_finished()).unwrap();
    let refused = sent.remove(refused);
    assert!(
        !refused.polled.load(Ordering::Acquire),
        "its body was not read"
    );
    let (status, text) = refused.answer.await.unwrap();
    assert_eq!(status, 429, "{text}");
    assert!(
        text.contains("may wait for their turn are waiting"),
        "{text}"
    );

    // A small review is decided while every turn and every place to wait is taken.
    let body = common::review(1, 0);
    let small = Request::post("/validate/fail?timeout=30s")
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(Body::from(body))
        .unwrap();
    let small = tokio::spawn(answered(app.clone().oneshot(small)));
    run_until(1_000, || small.is_finished()).await;
    assert!(small.is_finished(), "a small review waits for no turn");
    let (status, text) = small.await.unwrap();
    assert_eq!(status, 200, "{text}");

    // Those waiting for a turn are refused once they have waited their longest, unread.
    let (holders, waiting): (Vec<Sent>, Vec<Sent>) = sent
        .into_iter()
        .partition(|s| s.polled.load(Ordering::Acquire));
    assert_eq!((holders.len(), waiting.len()), (turns, HEAVY_WAITING));
    tokio::time::sleep(HEAVY_WAIT + Duration::from_millis(200)).await;
    run_until(1_000, || waiting.iter().all(|s| s.answer.is_finished())).await;
    for waited in waiting {
        assert!(
            !waited.polled.load(Ordering::Acquire),
            "its body was not read"
        );
        let (status, text) = waited.answer.await.unwrap();
        assert_eq!(status, 429, "{text}");
        assert!(text.contains("waited its longest for its turn"), "{text}");
    }

    // Those in their turn are decided once their bodies arrive, and the turns go to the next.
    for mut holder in holders {
        holder.send_body();
        let (status, text) = holder.answer.await.unwrap();
        assert_eq!(status, 200, "{text}");
    }
    let mut next = send(&app, large.clone(), &reading);
    next.send_body();
    let (status, text) = next.answer.await.unwrap();
    assert_eq!(status, 200, "{text}");
    assert!(next.polled.load(Ordering::Acquire));
    assert_eq!(
        reading.most.load(Ordering::Acquire),
        turns,
        "bodies read at once"
    );
}
