//! The probes' own plain-HTTP port, `/healthz` and `/readyz`, served by a thread with a
//! runtime of its own: they answer at once while reviews saturate the webhook's runtime and
//! blocking pool, and the kubelet needs no credentials and no TLS for them.
//!
//! Its connections are shared fairly among the addresses that open them, so no client of the
//! Pod network can starve the kubelet's probes, which come from the node's address: one address
//! holds a few connections at most, and when the port is full, a connection from an address
//! holding fewer than another closes the oldest connection of the address holding the most.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::AbortHandle;

use crate::connection::{self, Activity, Serving};
use crate::limits::Limits;
use crate::server::{AppState, ServerError, probe_router};

/// Connections the probe port holds open at once.
const PROBE_CONNECTIONS: usize = 64;
/// Connections one address may hold open at once: the kubelet probes a container at most three
/// ways at once (startup, readiness, liveness), one connection each.
const PROBE_CONNECTIONS_PER_ADDRESS: usize = 4;
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
    let holders = Arc::new(Mutex::new(Holders::default()));
    let limits = Limits {
        header_timeout: PROBE_TIMEOUT,
        idle_timeout: PROBE_TIMEOUT,
        ..Limits::DEFAULT
    };
    // Never stops: the probes are answered until the process exits.
    let (_stop, stopping) = watch::channel(None);
    loop {
        let Ok((tcp, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let address = peer.ip().to_canonical();
        let mut held = holders.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(id) = held.admit(address) else {
            continue; // closed at once
        };
        let activity = Activity::new(Instant::now(), true, PROBE_TIMEOUT);
        let serving = Serving {
            router: router.clone(),
            peer: None,
            limits: limits.clone(),
            stopping: stopping.clone(),
            draining: None,
        };
        let slot = Slot {
            holders: holders.clone(),
            id,
        };
        let task = tokio::spawn(async move {
            let _ = connection::serve(tcp, false, activity, serving).await;
            drop(slot);
        });
        held.opened(id, address, task.abort_handle());
    }
}

/// The probe port's open connections, by the address that opened them.
#[derive(Default)]
struct Holders {
    /// Each connection's address and task, by id (ids grow: the first is the oldest).
    open: BTreeMap<u64, (IpAddr, Option<AbortHandle>)>,
    /// Connections held per address.
    per_address: HashMap<IpAddr, usize>,
    next: u64,
}

impl Holders {
    /// Admits a connection from `address` (its id), closing another to make room if need be,
    /// or refuses it: when its address holds [`PROBE_CONNECTIONS_PER_ADDRESS`], or when the
    /// port is full and no address holds more connections than its address does.
    fn admit(&mut self, address: IpAddr) -> Option<u64> {
        let held = self.per_address.get(&address).copied().unwrap_or(0);
        if held >= PROBE_CONNECTIONS_PER_ADDRESS {
            return None;
        }
        if self.open.len() >= PROBE_CONNECTIONS {
            let most = self.per_address.values().copied().max().unwrap_or(0);
            if most <= held {
                return None;
            }
            let oldest = self
                .open
                .iter()
                .find(|(_, (a, _))| self.per_address.get(a) == Some(&most))
                .map(|(id, _)| *id)?;
            if let Some(task) = self.close(oldest) {
                task.abort();
            }
        }
        let id = self.next;
        self.next += 1;
        self.open.insert(id, (address, None));
        *self.per_address.entry(address).or_default() += 1;
        Some(id)
    }

    /// Records the task serving connection `id` (so it can be closed to make room).
    fn opened(&mut self, id: u64, address: IpAddr, task: AbortHandle) {
        if let Some(entry) = self.open.get_mut(&id) {
            *entry = (address, Some(task));
        }
    }

    /// Forgets connection `id` (if still held); its task, to end if it is closed early.
    fn close(&mut self, id: u64) -> Option<AbortHandle> {
        let (address, task) = self.open.remove(&id)?;
        if let Some(n) = self.per_address.get_mut(&address) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&address);
            }
        }
        task
    }
}

/// A connection's place on the probe port, given back when its task ends.
struct Slot {
    holders: Arc<Mutex<Holders>>,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut holders = self.holders.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = holders.close(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn one_address_holds_a_few_connections_and_a_full_port_makes_room_for_another() {
        let mut holders = Holders::default();
        let attacker = ip(1);
        let held: Vec<u64> = (0..PROBE_CONNECTIONS_PER_ADDRESS)
            .map(|_| holders.admit(attacker).expect("admitted"))
            .collect();
        assert_eq!(holders.admit(attacker), None, "past the address's share");
        // Fill the port from other addresses, each holding as many as allowed.
        let mut address = 2;
        while holders.open.len() < PROBE_CONNECTIONS {
            if holders.admit(ip(address)).is_none() {
                address += 1;
            }
        }
        // The kubelet's address, holding none, closes the oldest connection of a largest holder.
        let kubelet = ip(250);
        assert!(holders.admit(kubelet).is_some());
        assert!(
            !holders.open.contains_key(&held[0]),
            "the oldest was closed"
        );
        assert_eq!(holders.open.len(), PROBE_CONNECTIONS);
        assert_eq!(
            holders.per_address[&attacker],
            PROBE_CONNECTIONS_PER_ADDRESS - 1
        );
        // An address holding as many as every other is refused rather than closing an equal's.
        let mut even = Holders::default();
        for last in 0..PROBE_CONNECTIONS {
            even.admit(IpAddr::from([10, 1, 0, u8::try_from(last).unwrap()]))
                .expect("admitted");
        }
        assert_eq!(even.admit(IpAddr::from([10, 1, 0, 0])), None);
        assert!(even.admit(kubelet).is_some(), "an address holding none");
        // A closed connection gives its place back once.
        assert!(
            holders.close(held[1]).is_none(),
            "no task recorded in this test"
        );
        assert!(holders.close(held[1]).is_none());
        assert_eq!(
            holders.per_address[&attacker],
            PROBE_CONNECTIONS_PER_ADDRESS - 2
        );
    }
}
