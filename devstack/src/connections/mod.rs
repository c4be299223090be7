//! How the stack holds its connections (docs/devstack.md, "Connections"):
//! the cap on each listener and how it sheds, the deadlines of a connection
//! (the TLS handshake, idleness, a request, HTTP/2 keepalive), and the loops
//! that accept and serve them. The gateway's connections are TLS 1.3 `h2`
//! ([`crate::tls`]) served as HTTP/2 over tonic's routes; the HTTP side's
//! are plain HTTP/1.1 or HTTP/2 over axum's.
//!
//! Every connection is served by hyper directly, so that the stack sees
//! each one: a connection with no request or stream open for
//! `idle_timeout` (one that completed TLS and sent nothing, no HTTP/2
//! preface, a keep-alive connection left behind) is shut down gracefully,
//! and closed `SHUTDOWN_GRACE` later whatever it does; a peer that stops
//! answering HTTP/2 PINGs (a half-open connection) is dropped by hyper.

mod accept;
mod serve;
mod track;

pub(crate) use accept::{gateway, http, https};

use std::time::Duration;

/// The connection limits and deadlines of a stack's two listeners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionOptions {
    /// Gateway connections held at once (15,000: room for 10,000 sessions
    /// and their renewals and tunnels under an open-file limit of 20,000).
    pub max_connections: usize,
    /// Gateway connections beyond the cap that are still answered, each
    /// request `Unavailable` `connection-limit` with a retry-after hint,
    /// before they are closed (64); beyond those a connection is closed at
    /// once.
    pub max_shed: usize,
    /// HTTP-side connections held at once (1,024); beyond the cap a
    /// connection is answered `503` `connection-limit` and closed.
    pub http_max_connections: usize,
    /// How long a client may take to finish its TLS handshake (10 s).
    pub handshake_timeout: Duration,
    /// How long a connection may stay without an open request or stream
    /// (30 s).
    pub idle_timeout: Duration,
    /// How long a request may take to arrive and be answered, up to its
    /// response's headers (30 s; a Session's and a Tunnel's come at once).
    pub request_timeout: Duration,
    /// How often an HTTP/2 connection is PINGed (30 s) …
    pub keepalive_interval: Duration,
    /// … and how long the answer may take before it is dropped (20 s).
    pub keepalive_timeout: Duration,
    /// The retry-after hint of a shed connection (1 s).
    pub shed_retry_after: Duration,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        ConnectionOptions {
            max_connections: 15_000,
            max_shed: 64,
            http_max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(20),
            shed_retry_after: Duration::from_secs(1),
        }
    }
}

/// Where a stack's listeners are in their life. A shutdown first closes
/// them (`Closed`: the listening sockets close, the connections they hold
/// go on, so that the sessions drain while a node that redials meets a
/// refused connection instead of a TLS handshake the stack would spend
/// its CPU on), then stops them (`Stopped`: every connection is told to
/// end, and closed `SHUTDOWN_GRACE` later).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Phase {
    /// Accepting and serving.
    Serving,
    /// Serving what they hold, accepting nothing more.
    Closed,
    /// Every connection told to end.
    Stopped,
}

/// How long a connection that was told to shut down may take to do so.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How long a shed connection is kept at most.
pub(crate) const SHED_LIFETIME: Duration = Duration::from_secs(5);
/// The metadata key of the retry-after hint of a `connection-limit` refusal.
pub const RETRY_AFTER_MS: &str = "retry-after-ms";
