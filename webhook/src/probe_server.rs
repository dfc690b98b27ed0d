//! The probes' own plain-HTTP port, `/healthz` and `/readyz`, served by a thread with a
//! runtime of its own: they answer at once while reviews saturate the webhook's runtime and
//! blocking pool, and the kubelet needs no credentials and no TLS for them.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::connection::{self, Activity, Serving};
use crate::limits::Limits;
use crate::server::{AppState, ServerError, probe_router};

/// Connections the probe port holds open at once (the kubelet opens one per probe).
const PROBE_CONNECTIONS: usize = 16;
/// Header and idle timeout of a probe connection.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The probe port, served by its own thread until the process exits.
#[derive(Debug)]
pub struct ProbeServer {
    addr: SocketAddr,
}

impl ProbeServer {
    /// Binds `addr` and starts answering the probes of `state` on a thread of its own.
    pub fn start(addr: SocketAddr, state: Arc<AppState>) -> Result<Self, ServerError> {
        let failed = |source| ServerError::Serve { addr, source };
        let listener = std::net::TcpListener::bind(addr).map_err(failed)?;
        listener.set_nonblocking(true).map_err(failed)?;
        let local = listener.local_addr().map_err(failed)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(failed)?;
        std::thread::Builder::new()
            .name("celgate-probes".into())
            .spawn(move || runtime.block_on(serve(listener, state)))
            .map_err(failed)?;
        Ok(Self { addr: local })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

async fn serve(listener: std::net::TcpListener, state: Arc<AppState>) {
    let listener = match TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!(error = %e, "the probe port cannot be served");
            return;
        }
    };
    let router = probe_router(state);
    let slots = Arc::new(Semaphore::new(PROBE_CONNECTIONS));
    let limits = Limits {
        header_timeout: PROBE_TIMEOUT,
        idle_timeout: PROBE_TIMEOUT,
        ..Limits::DEFAULT
    };
    // Never stops: the probes are answered until the process exits.
    let (_stop, stopping) = watch::channel(None);
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            continue;
        };
        let activity = Activity::new(Instant::now(), true, PROBE_TIMEOUT);
        let serving = Serving {
            router: router.clone(),
            peer: None,
            limits: limits.clone(),
            stopping: stopping.clone(),
            draining: None,
        };
        tokio::spawn(async move {
            let _ = connection::serve(tcp, false, activity, serving).await;
            drop(slot);
        });
    }
}
