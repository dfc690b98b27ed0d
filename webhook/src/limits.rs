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

/// Bodies of at least this many bytes (by their length, or any body without one) are heavy:
/// at most [`heavy_at_once`] are read, decoded and decided at a time ([`Budget::turn`]), the
/// others' bytes left unread in the connection until their turn; they are decoded and decided
/// on the blocking pool, never on the runtime's worker threads that accept, handshake and
/// answer the small reviews, which never wait for a turn: decoding 64 KiB takes about a third
/// of a millisecond.
pub const HEAVY_BODY_BYTES: usize = 64 * 1024;

/// Bodies nested deeper than this are heavy too, once read: they are read on a stack that
/// grows, and evaluated recursively.
pub const HEAVY_DEPTH: usize = 128;

/// How many heavy reviews are read, decoded and decided at once: one core is always left to
/// the runtime's worker threads (one at least on a single core).
pub fn heavy_at_once() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get().saturating_sub(1))
        .max(1)
}

/// How many heavy reviews may wait for their turn at once; one more is answered 429 at once.
/// A waiting review holds its place in flight, and over HTTP/2 up to a stream's receive window
/// of unread data, charged to nothing: few may wait.
pub const HEAVY_WAITING: usize = 8;

/// How long a heavy review waits for its turn before it is answered 429: the `Retry-After` it
/// is then sent.
pub const HEAVY_WAIT: Duration = Duration::from_secs(RETRY_AFTER_SECONDS);

/// The in-flight bytes heavy reviews may take together, of `max` for all reviews: all but an
/// eighth, kept for the small ones, so that large reviews decoded at once never leave a small
/// review no room.
pub fn heavy_max_bytes(max: usize) -> usize {
    max - max / 8
}

/// What the reviews in flight may use together: their bytes ([`Limits::max_in_flight_bytes`],
/// of which heavy ones take at most [`heavy_max_bytes`]) and the turns of heavy ones. Shared
/// by the server and every request it reads.
#[derive(Clone, Debug)]
pub struct Budget {
    bytes: Arc<Semaphore>,
    max_bytes: usize,
    /// The share of heavy reviews, charged besides `bytes`.
    heavy_bytes: Arc<Semaphore>,
    /// Turns of heavy reviews: [`heavy_at_once`].
    heavy: Arc<Semaphore>,
    /// Places of heavy reviews waiting for a turn: [`HEAVY_WAITING`].
    waiting: Arc<Semaphore>,
}

/// A heavy review's turn (see [`HEAVY_BODY_BYTES`]): held from before its body is read (when
/// its length says it is heavy) until it is decided. Shared so that a request can carry it
/// from the server's admission to the review's decision; the turn ends with the last copy.
#[derive(Clone, Debug)]
pub struct Turn {
    _permit: Arc<OwnedSemaphorePermit>,
}

/// Why a heavy review got no turn (429).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoTurn {
    /// As many heavy reviews as may wait are waiting.
    Queue,
    /// It waited [`HEAVY_WAIT`] without one.
    Waited,
}

impl NoTurn {
    /// The answer: 429, saying why.
    pub fn response(self) -> Response {
        let why = match self {
            NoTurn::Queue => "as many large or deep reviews as may wait for their turn are waiting",
            NoTurn::Waited => "this large or deep review waited its longest for its turn",
        };
        overloaded(&format!(
            "{why} (reviews of {HEAVY_BODY_BYTES} bytes or more, or nested deeper than {HEAVY_DEPTH}, are read and decided {} at a time, {HEAVY_WAITING} more waiting at most {}s)",
            heavy_at_once(),
            HEAVY_WAIT.as_secs()
        ))
    }
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
    /// A heavy review's bytes of the heavy share.
    _heavy: Option<OwnedSemaphorePermit>,
}

impl Budget {
    /// The budget of `limits`.
    pub fn new(limits: &Limits) -> Self {
        Self {
            bytes: Arc::new(Semaphore::new(permits(limits.max_in_flight_bytes))),
            max_bytes: limits.max_in_flight_bytes,
            heavy_bytes: Arc::new(Semaphore::new(permits(heavy_max_bytes(
                limits.max_in_flight_bytes,
            )))),
            heavy: Arc::new(Semaphore::new(heavy_at_once())),
            waiting: Arc::new(Semaphore::new(HEAVY_WAITING)),
        }
    }

    /// Holds `bytes` of the budget, or says at once why not.
    pub fn charge(&self, bytes: usize) -> Result<Charge, Refused> {
        let needed = bytes.max(1);
        let permit = self.acquire(needed, permits(needed))?;
        Ok(Charge {
            permit,
            _heavy: None,
        })
    }

    /// Holds `bytes` of the budget for a heavy review, within the heavy reviews' share
    /// ([`heavy_max_bytes`]), or says at once why not.
    pub fn charge_heavy(&self, bytes: usize) -> Result<Charge, Refused> {
        let needed = bytes.max(1);
        let limit = heavy_max_bytes(self.max_bytes);
        if needed > limit {
            return Err(Refused::TooLarge { needed, limit });
        }
        let weight = u32::try_from(permits(needed)).unwrap_or(u32::MAX);
        let heavy = self
            .heavy_bytes
            .clone()
            .try_acquire_many_owned(weight)
            .map_err(|_| Refused::Busy {
                needed,
                in_use: self.in_use(),
                limit,
            })?;
        let permit = self.acquire(needed, permits(needed))?;
        Ok(Charge {
            permit,
            _heavy: Some(heavy),
        })
    }

    /// Makes a small review's `charge` hold `bytes` in all: more of the budget, refused as
    /// [`Budget::charge`] refuses (the charge then holds what it held), or less, given back.
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

    /// A heavy review's turn (see [`HEAVY_BODY_BYTES`]): at once if one is free, else after
    /// waiting at most [`HEAVY_WAIT`] behind at most [`HEAVY_WAITING`] others (first come,
    /// first served); otherwise why not.
    pub async fn turn(&self) -> Result<Turn, NoTurn> {
        if let Ok(turn) = self.heavy.clone().try_acquire_owned() {
            return Ok(Turn {
                _permit: Arc::new(turn),
            });
        }
        let Ok(_place) = self.waiting.clone().try_acquire_owned() else {
            return Err(NoTurn::Queue);
        };
        match tokio::time::timeout(HEAVY_WAIT, self.heavy.clone().acquire_owned()).await {
            Ok(Ok(turn)) => Ok(Turn {
                _permit: Arc::new(turn),
            }),
            _ => Err(NoTurn::Waited),
        }
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

    #[test]
    fn heavy_reviews_leave_an_eighth_of_the_budget_to_small_ones() {
        let kib = BYTES_PER_PERMIT;
        let budget = Budget::new(&Limits {
            max_in_flight_bytes: 16 * kib,
            ..Limits::DEFAULT
        });
        assert_eq!(
            budget.charge_heavy(15 * kib).map(drop),
            Err(Refused::TooLarge {
                needed: 15 * kib,
                limit: 14 * kib
            })
        );
        let heavy = budget
            .charge_heavy(10 * kib)
            .expect("within the heavy share");
        assert_eq!(
            budget.charge_heavy(5 * kib).map(drop),
            Err(Refused::Busy {
                needed: 5 * kib,
                in_use: 10 * kib,
                limit: 14 * kib
            })
        );
        // What heavy reviews hold leaves small ones the rest, whatever its size.
        let heavy_too = budget.charge_heavy(4 * kib).expect("the rest of the share");
        let small = budget.charge(2 * kib).expect("the small reviews' eighth");
        assert_eq!(budget.in_use(), 16 * kib);
        drop((heavy_too, small));
        // Small reviews may take the whole budget; a heavy one then waits for them.
        let small = budget.charge(5 * kib).expect("room");
        assert_eq!(
            budget.charge_heavy(2 * kib).map(drop),
            Err(Refused::Busy {
                needed: 2 * kib,
                in_use: 15 * kib,
                limit: 16 * kib
            })
        );
        drop((heavy, small));
        assert_eq!(budget.in_use(), 0);
    }
}
