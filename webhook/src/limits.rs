//! The server's limits, sized for one replica within the Deployment's 256 MiB memory limit and
//! modelled on kube-apiserver's own HTTPS server (`ReadHeaderTimeout`, `IdleTimeout`, the
//! request size limit). `celgate run` exposes each as a flag, defaulting to these values.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// One MiB.
const MIB: usize = 1024 * 1024;

/// How much one replica accepts at once, and for how long a client may hold a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Reviews being read or decided at once; one more is answered 429 at once.
    pub max_in_flight: usize,
    /// Bytes of the reviews in flight, together: each is charged its declared body before it
    /// is read, then what decoding it builds ([`crate::review::decode_cost`]) before it is
    /// decoded. A review that would pass it is answered 429 at once; one that alone would
    /// pass it, 413. What bounds memory.
    pub max_in_flight_bytes: usize,
    /// Largest review body: kube-apiserver accepts objects up to 3 MiB, and a review carries
    /// the object and its old version, with the request around them.
    pub max_body_bytes: usize,
    /// Time from accepting a connection to its first request's headers (TLS handshake
    /// included), and from a request's first byte to its last header byte (HTTP/1.1).
    pub header_timeout: Duration,
    /// Time a connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// Interval of HTTP/2 PING frames that find a dead peer; [`HTTP2_PING_TIMEOUT`] to answer.
    pub http2_keep_alive: Duration,
}

/// Time an HTTP/2 peer has to answer a keep-alive PING before its connection is closed.
pub const HTTP2_PING_TIMEOUT: Duration = Duration::from_secs(20);

/// Largest call timeout honoured: kube-apiserver's maximum `timeoutSeconds` of a webhook. A
/// larger `?timeout=` is taken as this.
pub const MAX_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Seconds a client refused for load is asked to wait (`Retry-After`).
pub const RETRY_AFTER_SECONDS: u64 = 1;

impl Limits {
    /// The shipped defaults (see `docs/reference/flags.md` for why each).
    pub const DEFAULT: Self = Self {
        max_connections: 256,
        max_in_flight: 128,
        max_in_flight_bytes: 64 * MIB,
        max_body_bytes: 7 * MIB,
        header_timeout: Duration::from_secs(10),
        idle_timeout: Duration::from_secs(120),
        http2_keep_alive: Duration::from_secs(30),
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Review bytes are counted in flight in units of this many bytes.
const BYTES_PER_PERMIT: usize = 1024;

/// Bodies of at least this many bytes are decoded and decided on the blocking pool, at most
/// [`heavy_at_once`] at a time, never on the runtime's worker threads that accept, handshake
/// and answer the small reviews: decoding 64 KiB takes about a third of a millisecond.
pub const HEAVY_BODY_BYTES: usize = 64 * 1024;

/// Bodies nested deeper than this are decoded and decided on the blocking pool too: they are
/// read on a stack that grows, and evaluated recursively.
pub const HEAVY_DEPTH: usize = 128;

/// How many heavy reviews are decoded and decided at once: one core is always left to the
/// runtime's worker threads (one at least on a single core).
pub fn heavy_at_once() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get().saturating_sub(1))
        .max(1)
}

/// What the reviews in flight may use together: their bytes ([`Limits::max_in_flight_bytes`])
/// and the threads for heavy ones. Shared by the server and every request it reads.
#[derive(Clone, Debug)]
pub struct Budget {
    bytes: Arc<Semaphore>,
    max_bytes: usize,
    heavy: Arc<Semaphore>,
}

/// Why a review's bytes were not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The review alone needs more than the whole budget: it can never be admitted (413).
    TooLarge {
        /// Bytes it needs.
        needed: usize,
        /// The budget.
        limit: usize,
    },
    /// Reviews in flight hold too much of the budget now (429).
    Busy {
        /// Bytes it needs.
        needed: usize,
        /// Bytes the reviews in flight hold.
        in_use: usize,
        /// The budget.
        limit: usize,
    },
}

/// Bytes held in the budget by one review, given back when dropped.
#[derive(Debug)]
pub struct Charge {
    permit: OwnedSemaphorePermit,
}

impl Budget {
    /// The budget of `limits`.
    pub fn new(limits: &Limits) -> Self {
        Self {
            bytes: Arc::new(Semaphore::new(permits(limits.max_in_flight_bytes))),
            max_bytes: limits.max_in_flight_bytes,
            heavy: Arc::new(Semaphore::new(heavy_at_once())),
        }
    }

    /// Holds `bytes` of the budget, or says at once why not.
    pub fn charge(&self, bytes: usize) -> Result<Charge, Refused> {
        let needed = bytes.max(1);
        let permit = self.acquire(needed, permits(needed))?;
        Ok(Charge { permit })
    }

    /// Makes `charge` hold `bytes` in all: more of the budget, refused as [`Budget::charge`]
    /// refuses (the charge then holds what it held), or less, given back.
    pub fn recharge(&self, charge: &mut Charge, bytes: usize) -> Result<(), Refused> {
        let needed = bytes.max(1);
        let (want, held) = (permits(needed), charge.permit.num_permits());
        if want > held {
            charge.permit.merge(self.acquire(needed, want - held)?);
        } else {
            drop(charge.permit.split(held - want));
        }
        Ok(())
    }

    /// The budget: its bytes in all.
    pub fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    /// `more` permits for a review that needs `needed` bytes in all, or why not.
    fn acquire(&self, needed: usize, more: usize) -> Result<OwnedSemaphorePermit, Refused> {
        if needed > self.max_bytes {
            return Err(Refused::TooLarge {
                needed,
                limit: self.max_bytes,
            });
        }
        let weight = u32::try_from(more).unwrap_or(u32::MAX);
        self.bytes
            .clone()
            .try_acquire_many_owned(weight)
            .map_err(|_| Refused::Busy {
                needed,
                in_use: self.in_use(),
                limit: self.max_bytes,
            })
    }

    /// Bytes the reviews in flight hold now.
    pub fn in_use(&self) -> usize {
        permits(self.max_bytes)
            .saturating_sub(self.bytes.available_permits())
            .saturating_mul(BYTES_PER_PERMIT)
    }

    /// Waits for a thread of the heavy reviews' share of the blocking pool (see
    /// [`HEAVY_BODY_BYTES`]); the review holds it until it is decided.
    pub async fn heavy(&self) -> Option<OwnedSemaphorePermit> {
        self.heavy.clone().acquire_owned().await.ok()
    }
}

/// The answer to a review refused for load: the API server may retry after a second, else
/// the webhook's failurePolicy applies.
pub fn overloaded(why: &str) -> Response {
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS))],
        format!("celgate is overloaded: {why}; retry later\n"),
    )
        .into_response()
}

/// Permits of the bytes semaphore for `bytes`, rounded up.
fn permits(bytes: usize) -> usize {
    bytes.div_ceil(BYTES_PER_PERMIT).min(Semaphore::MAX_PERMITS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_is_held_until_dropped_and_one_past_the_whole_budget_is_too_large() {
        let limits = Limits {
            max_in_flight_bytes: 10 * BYTES_PER_PERMIT,
            ..Limits::DEFAULT
        };
        let budget = Budget::new(&limits);
        let first = budget
            .charge(6 * BYTES_PER_PERMIT)
            .expect("within the budget");
        assert_eq!(budget.in_use(), 6 * BYTES_PER_PERMIT);
        assert_eq!(
            budget.charge(5 * BYTES_PER_PERMIT).map(drop),
            Err(Refused::Busy {
                needed: 5 * BYTES_PER_PERMIT,
                in_use: 6 * BYTES_PER_PERMIT,
                limit: 10 * BYTES_PER_PERMIT
            })
        );
        assert_eq!(
            budget.charge(10 * BYTES_PER_PERMIT + 1).map(drop),
            Err(Refused::TooLarge {
                needed: 10 * BYTES_PER_PERMIT + 1,
                limit: 10 * BYTES_PER_PERMIT
            })
        );
        drop(first);
        assert_eq!(budget.in_use(), 0);
        // A charge grows while the budget has room, and gives back what it holds beyond.
        let mut growing = budget.charge(2 * BYTES_PER_PERMIT).expect("room");
        budget
            .recharge(&mut growing, 7 * BYTES_PER_PERMIT)
            .expect("room");
        assert_eq!(budget.in_use(), 7 * BYTES_PER_PERMIT);
        let other = budget.charge(2 * BYTES_PER_PERMIT).expect("room");
        assert_eq!(
            budget.recharge(&mut growing, 9 * BYTES_PER_PERMIT),
            Err(Refused::Busy {
                needed: 9 * BYTES_PER_PERMIT,
                in_use: 9 * BYTES_PER_PERMIT,
                limit: 10 * BYTES_PER_PERMIT
            })
        );
        budget
            .recharge(&mut growing, 3 * BYTES_PER_PERMIT - 1)
            .expect("less");
        assert_eq!(budget.in_use(), 5 * BYTES_PER_PERMIT);
        drop(growing);
        drop(other);
        assert_eq!(budget.in_use(), 0);
        // Part of a permit counts as a whole one.
        let _small = budget.charge(1).expect("within the budget");
        assert_eq!(budget.in_use(), BYTES_PER_PERMIT);
    }
}
