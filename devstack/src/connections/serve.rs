//! Serving one accepted connection with hyper until it ends: HTTP/2 only
//! (the gateway) or HTTP/1.1 and HTTP/2 (the HTTP side), PINGed every
//! `keepalive_interval`, shut down gracefully once it has had nothing open
//! for `idle_timeout` (or after its first request, for a shed connection),
//! or when the stack stops, and closed `SHUTDOWN_GRACE` after that.

use std::net::SocketAddr;
use std::time::Duration;

use http_body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::debug;

use super::{Phase, SHUTDOWN_GRACE};
use crate::options::ConnectionOptions;

/// Which HTTP a connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// HTTP/2 only (the gateway, after ALPN `h2`).
    Http2,
    /// HTTP/1.1 or HTTP/2 with prior knowledge (the HTTP side).
    Auto,
}

/// How one connection is served.
pub(crate) struct Serving<'a> {
    pub options: &'a ConnectionOptions,
    pub protocol: Protocol,
    pub peer: SocketAddr,
    /// The number of requests it has open (see `track`).
    pub open: watch::Receiver<usize>,
    /// Shut down after its first request ends (a shed connection), and at
    /// the latest after this long.
    pub first_request_only: Option<Duration>,
    pub stop: watch::Receiver<Phase>,
}

/// Serves `io` with `service` until the connection ends or is closed.
pub(crate) async fn connection<I, S, B>(io: I, service: S, mut s: Serving<'_>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<http::Request<Incoming>, Response = http::Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    if s.protocol == Protocol::Http2 {
        builder = builder.http2_only();
    }
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(s.options.keepalive_interval)
        .keep_alive_timeout(s.options.keepalive_timeout);
    builder.http1().timer(TokioTimer::new()).header_read_timeout(s.options.request_timeout);
    // With upgrades: the HTTPS listener's WebSocket.
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service));
    tokio::pin!(conn);
    let deadline = s.first_request_only.map(|d| Instant::now() + d);
    let mut served = false;
    let mut closing: Option<Instant> = None;
    loop {
        let open = *s.open.borrow_and_update();
        served |= open > 0;
        let done = s.first_request_only.is_some() && served && open == 0;
        if closing.is_none() && done {
            conn.as_mut().graceful_shutdown();
            closing = Some(Instant::now() + SHUTDOWN_GRACE);
        }
        let idle = open == 0 && closing.is_none();
        let far = Instant::now() + Duration::from_secs(86_400);
        tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    debug!(peer = %s.peer, error = %e, "connection: ended with an error");
                }
                return;
            }
            _ = s.open.changed() => {}
            _ = tokio::time::sleep(s.options.idle_timeout), if idle => {
                debug!(peer = %s.peer, idle_ms = s.options.idle_timeout.as_millis() as u64, "connection: idle, closing");
                conn.as_mut().graceful_shutdown();
                closing = Some(Instant::now() + SHUTDOWN_GRACE);
            }
            _ = async { let _ = s.stop.wait_for(|p| *p == Phase::Stopped).await; }, if closing.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing = Some(Instant::now() + SHUTDOWN_GRACE);
            }
            _ = tokio::time::sleep_until(deadline.unwrap_or(far)), if deadline.is_some() && closing.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing = Some(Instant::now() + SHUTDOWN_GRACE);
            }
            _ = tokio::time::sleep_until(closing.unwrap_or(far)), if closing.is_some() => {
                debug!(peer = %s.peer, "connection: closed after the shutdown grace");
                return;
            }
        }
    }
}
