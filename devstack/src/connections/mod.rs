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
/// How long a handshake holds its slot (`ConnectionOptions::max_handshakes`)
/// at most; past it the handshake goes on without one, so a peer that sends
/// a byte and stalls keeps the others waiting no longer than this.
pub(crate) const HANDSHAKE_SLOT_HOLD: Duration = Duration::from_secs(2);
