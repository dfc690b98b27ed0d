//! The server's limits, sized for one replica within the Deployment's 256 MiB memory limit and
//! modelled on kube-apiserver's own HTTPS server (`ReadHeaderTimeout`, `IdleTimeout`, the
//! request size limit). `celgate run` exposes each as a flag, defaulting to these values.

use std::time::Duration;

/// One MiB.
const MIB: usize = 1024 * 1024;

/// How much one replica accepts at once, and for how long a client may hold a connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; one more is closed as soon as it is accepted.
    pub max_connections: usize,
    /// Reviews being read or decided at once; one more is answered 429 at once.
    pub max_in_flight: usize,
    /// Declared body bytes of the reviews in flight, together; a review that would pass it is
    /// answered 429 at once. What bounds memory: a review's body is read whole, then decoded.
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
