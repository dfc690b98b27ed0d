//! The fence on the leader's writes: the webhook configurations, status, events and reports
//! are written through a client whose every write (any method but GET) is refused once this
//! replica's tenure has ended, and cut at the instant it ends. The tenure is the renew deadline
//! after the last renewal of the Lease that landed ([`super::leader`]), judged at the moment of
//! each write, so a writer that saw `leading` before a pause or a partition cannot land a write
//! after it: the check does not wait for the election's task to run again.
//!
//! Kubernetes has no precondition across objects, so a write cannot be made conditional on the
//! Lease itself. What this fence guarantees instead: every write is sent before the renew
//! deadline, a third of the Lease duration before any other replica can take the Lease over,
//! and one still in flight at the deadline is abandoned. Only a write the network holds back
//! for longer than that third can land after a takeover.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request};
use tokio::time::Instant;

/// Until when this replica may write as the leader (`None`: it may not), shared by the
/// election that sets it and the clients that check it.
#[derive(Clone, Debug, Default)]
pub struct Fence {
    until: Arc<Mutex<Option<Instant>>>,
}

/// A write refused or cut because this replica no longer holds the leader Lease.
#[derive(Debug, thiserror::Error)]
pub enum Fenced {
    /// Refused before it was sent.
    #[error(
        "not written: this replica does not hold the leader Lease (or could not renew it before its renew deadline)"
    )]
    NotLeading,
    /// Sent, and still unanswered at the renew deadline.
    #[error("write abandoned: the leader Lease's renew deadline passed while it was in flight")]
    Expired,
}

impl Fence {
    /// How long this replica may still write: `None` once its tenure ended.
    pub fn remaining(&self) -> Option<Duration> {
        let until = *self.until.lock().unwrap_or_else(PoisonError::into_inner);
        until
            .map(|until| until.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    }

    /// Lets writes through until `until`.
    pub(super) fn open_until(&self, until: Instant) {
        *self.until.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// Refuses every write from now on.
    pub(super) fn close(&self) {
        *self.until.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The layer that fences a client's writes (for `kube::client::ClientBuilder::with_layer`).
    pub fn layer(&self) -> FenceLayer {
        FenceLayer(self.clone())
    }
}

/// Wraps a client's service in [`Fenced`] writes.
#[derive(Clone, Debug)]
pub struct FenceLayer(Fence);

impl<S> tower_layer::Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.0.clone(),
        }
    }
}

/// A client's service whose writes pass only while the [`Fence`] is open.
#[derive(Clone, Debug)]
pub struct FencedService<S> {
    inner: S,
    fence: Fence,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B, R> tower_service::Service<Request<B>> for FencedService<S>
where
    S: tower_service::Service<Request<B>, Response = R>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    R: Send + 'static,
{
    type Response = R;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        if request.method() == Method::GET {
            let response = self.inner.call(request);
            return Box::pin(async move { response.await.map_err(Into::into) });
        }
        let Some(left) = self.fence.remaining() else {
            return Box::pin(std::future::ready(Err(Fenced::NotLeading.into())));
        };
        let response = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout(left, response).await {
                Ok(answered) => answered.map_err(Into::into),
                Err(_) => Err(Fenced::Expired.into()),
            }
        })
    }
}
