//! The accept loops of the three listeners: each connection within the cap
//! is served in its own task (the gateway's and the HTTPS listener's after
//! their TLS handshake, bounded by `handshake_timeout`, at most
//! `max_handshakes` at once); beyond the cap the
//! gateway answers up to `max_shed` more connections with `Unavailable`
//! `connection-limit` (and a `retry-after-ms` hint) and the HTTP sides
//! answer `503`, and beyond those a connection is closed at accept.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::response::IntoResponse as _;
use tokio::io::AsyncWriteExt as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tower::ServiceBuilder;
use tracing::{debug, warn};

use super::serve::{self, Protocol, Serving};
use super::track::{Open, TrackLayer};
use super::{HANDSHAKE_SLOT_HOLD, Phase, SHED_LIFETIME, SHUTDOWN_GRACE};
use crate::options::ConnectionOptions;
use crate::status::{Code, refuse, refuse_with_retry};
use crate::tls::{Alpn, PeerInfo};

/// What one listener serves.
struct Listener<S> {
    service: S,
    protocol: Protocol,
    options: ConnectionOptions,
    stop: watch::Receiver<Phase>,
}

/// The gateway: TLS 1.3 `h2` connections served with `routes` (Join and
/// Gateway), each request carrying its connection's [`crate::tls::PeerInfo`].
pub(crate) async fn gateway(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    routes: tonic::service::Routes,
    options: ConnectionOptions,
    stop: watch::Receiver<Phase>,
) {
    let l = Listener { service: routes, protocol: Protocol::Http2, options, stop };
    accept_tls(listener, l, "gateway", acceptor, Alpn::GATEWAY, |tls, info, permit, open, count, l| async move {
        match permit {
            Permit::Held(_held) => {
                let peer = info.remote_addr;
                let service = ServiceBuilder::new()
                    .layer(TrackLayer { open, timeout: l.options.request_timeout, late: request_late })
                    .map_request(move |mut r: http::Request<hyper::body::Incoming>| {
                        r.extensions_mut().insert(info.clone());
                        r
                    })
                    .layer(crate::gateway::limit::FrameLimitLayer)
                    .service(l.service.clone());
                serve::connection(tls, service, serving(&l, peer, count, None)).await;
            }
            Permit::Shed(_shed) => {
                let retry = l.options.shed_retry_after;
                let shed = tower::service_fn(move |_: http::Request<hyper::body::Incoming>| async move {
                    Ok::<_, Infallible>(connection_limit(retry).into_http::<tonic::body::Body>())
                });
                let service = ServiceBuilder::new()
                    .layer(TrackLayer { open, timeout: l.options.request_timeout, late: request_late })
                    .service(shed);
                serve::connection(tls, service, serving(&l, info.remote_addr, count, Some(SHED_LIFETIME))).await;
            }
        }
    })
    .await
}

/// The HTTP side: HTTP/1.1 or HTTP/2 connections served with `router`.
pub(crate) async fn http(
    listener: TcpListener,
    router: axum::Router,
    options: ConnectionOptions,
    stop: watch::Receiver<Phase>,
) {
    let mut options = options;
    options.max_connections = options.http_max_connections;
    let l = Listener { service: router, protocol: Protocol::Auto, options, stop };
    accept(listener, l, "http", |mut tcp, addr, permit, l| async move {
        match permit {
            Permit::Held(_held) => {
                let (open, count) = Open::new();
                let service = ServiceBuilder::new()
                    .layer(TrackLayer { open, timeout: l.options.request_timeout, late: http_request_late })
                    .service(l.service.clone());
                serve::connection(tcp, service, serving(&l, addr, count, None)).await;
            }
            Permit::Shed(_shed) => {
                let retry = l.options.shed_retry_after.as_secs().max(1);
                let body = http_shed_sentence();
                let answer = format!(
                    "HTTP/1.1 503 Service Unavailable\r\nRetry-After: {retry}\r\nContent-Type: text/plain\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    let _ = tcp.write_all(answer.as_bytes()).await;
                    let _ = tcp.shutdown().await;
                })
                .await;
            }
        }
    })
    .await
}

/// The HTTPS listener: TLS 1.3 `http/1.1` (or no ALPN) connections served
/// with `router` (the WebSocket session, `POST /v1/renew`, OTLP), each
/// request carrying its connection's [`crate::tls::PeerInfo`] as axum's `ConnectInfo`.
/// Its cap is the HTTP side's (`http_max_connections`); beyond it a
/// connection's first request is answered `503` `connection-limit`. A
/// WebSocket leaves the cap and the idle deadline once upgraded: the
/// session's liveness bounds it.
pub(crate) async fn https(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    router: axum::Router,
    options: ConnectionOptions,
    stop: watch::Receiver<Phase>,
) {
    let mut options = options;
    options.max_connections = options.http_max_connections;
    let l = Listener { service: router, protocol: Protocol::Auto, options, stop };
    accept_tls(listener, l, "https", acceptor, Alpn::HTTPS, |tls, info, permit, open, count, l| async move {
        let late = http_request_late;
        match permit {
            Permit::Held(_held) => {
                let peer = info.remote_addr;
                let service = ServiceBuilder::new()
                    .layer(TrackLayer { open, timeout: l.options.request_timeout, late })
                    .map_request(move |mut r: http::Request<hyper::body::Incoming>| {
                        r.extensions_mut().insert(axum::extract::ConnectInfo(info.clone()));
                        r.extensions_mut().insert(info.clone());
                        r
                    })
                    .service(l.service.clone());
                serve::connection(tls, service, serving(&l, peer, count, None)).await;
            }
            Permit::Shed(_shed) => {
                let retry = l.options.shed_retry_after.as_secs().max(1);
                let shed = tower::service_fn(move |_: http::Request<hyper::body::Incoming>| async move {
                    let body = http_shed_sentence();
                    Ok::<_, Infallible>(
                        (http::StatusCode::SERVICE_UNAVAILABLE, [(http::header::RETRY_AFTER, retry.to_string())], body)
                            .into_response(),
                    )
                });
                let service = ServiceBuilder::new()
                    .layer(TrackLayer { open, timeout: l.options.request_timeout, late })
                    .service(shed);
                serve::connection(tls, service, serving(&l, info.remote_addr, count, Some(SHED_LIFETIME))).await;
            }
        }
    })
    .await
}

/// [`accept`] for a TLS listener: each admitted connection's handshake
/// (ALPN `alpn`, within `handshake_timeout`; a refused or late one is
/// closed), then `serve` with the TLS stream, its peer, its permit and the
/// count of its open requests.
async fn accept_tls<S, F, Fut>(
    listener: TcpListener,
    l: Listener<S>,
    name: &'static str,
    acceptor: TlsAcceptor,
    alpn: Alpn,
    serve: F,
) where
    S: Send + Sync + 'static,
    F: Fn(Box<TlsStream<TcpStream>>, PeerInfo, Permit, Open, watch::Receiver<usize>, Arc<Listener<S>>) -> Fut
        + Send
        + Sync
        + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let acceptor = Arc::new(acceptor);
    let serve = Arc::new(serve);
    let slots = Arc::new(Semaphore::new(l.options.max_handshakes.max(1)));
    accept(listener, l, name, move |tcp, addr, permit, l| {
        let (acceptor, serve, slots) = (acceptor.clone(), serve.clone(), slots.clone());
        async move {
            let deadline = Instant::now() + l.options.handshake_timeout;
            let Some(slot) = handshake_slot(&tcp, &slots, deadline).await else {
                debug!(peer = %addr, "{name}: TLS handshake not begun within the handshake timeout");
                return;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            let handshake = crate::tls::handshake(&acceptor, tcp, addr, left, alpn);
            tokio::pin!(handshake);
            let held = tokio::time::timeout(HANDSHAKE_SLOT_HOLD, &mut handshake).await;
            drop(slot);
            let Some((tls, info)) = (match held {
                Ok(done) => done,
                Err(_) => handshake.await,
            }) else {
                return;
            };
            let (open, count) = Open::new();
            serve(tls, info, permit, open, count, l).await;
        }
    })
    .await
}

/// A slot for the handshake of `tcp`, once its ClientHello begins to arrive,
/// by `deadline` (`None`: it came too late, and the connection is dropped
/// unanswered, since its client has given up by then). The slots make a
/// burst of handshakes (a gateway's nodes failing over to this one) run a
/// few hundred at a time, each to its end: all of them interleaved, every
/// step of each waits behind a step of all the others, so each finishes
/// only when nearly all do, past the clients' connect timeout, and the
/// work is lost and tried again.
async fn handshake_slot(tcp: &TcpStream, slots: &Arc<Semaphore>, deadline: Instant) -> Option<OwnedSemaphorePermit> {
    let wait = async {
        // A byte there to read, not readiness alone (which a fresh socket
        // may report before anything arrived).
        tcp.peek(&mut [0u8; 1]).await.ok().filter(|n| *n > 0)?;
        slots.clone().acquire_owned().await.ok()
    };
    tokio::time::timeout_at(deadline, wait).await.ok().flatten()
}

/// How a connection was admitted.
enum Permit {
    /// Within the cap: served.
    Held(OwnedSemaphorePermit),
    /// Beyond the cap, within the shed allowance: told so.
    Shed(OwnedSemaphorePermit),
}

fn serving<S>(l: &Listener<S>, peer: SocketAddr, open: watch::Receiver<usize>, first: Option<Duration>) -> Serving<'_> {
    Serving { options: &l.options, protocol: l.protocol, peer, open, first_request_only: first, stop: l.stop.clone() }
}

/// The refusal of a request on a shed connection.
fn connection_limit(retry_after: Duration) -> tonic::Status {
    refuse_with_retry(Code::ConnectionLimit, "the gateway holds as many connections as it allows", retry_after)
}

/// The HTTP sides' answer to a request not answered within `request_timeout`.
fn http_request_late() -> axum::response::Response {
    (http::StatusCode::GATEWAY_TIMEOUT, Code::RequestTimeout.as_str()).into_response()
}

/// The body of the HTTP sides' `503` to a connection beyond the cap.
fn http_shed_sentence() -> String {
    format!("{}: the dev stack holds as many connections as it allows\n", Code::ConnectionLimit)
}

/// The answer to a request not answered within `request_timeout`.
fn request_late() -> http::Response<tonic::body::Body> {
    refuse(Code::RequestTimeout, "the request did not arrive and get its answer in time").into_http()
}

/// Accepts until the listener is closed, admitting each connection by the
/// cap, and gives the admitted ones to `serve` in their own tasks; then it
/// closes the listening socket, lets the connections go on until the stack
/// stops, waits up to `SHUTDOWN_GRACE` for them and aborts the rest.
async fn accept<S, F, Fut>(listener: TcpListener, l: Listener<S>, name: &'static str, serve: F)
where
    S: Send + Sync + 'static,
    F: Fn(TcpStream, SocketAddr, Permit, Arc<Listener<S>>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let held = Arc::new(Semaphore::new(l.options.max_connections));
    let shed = Arc::new(Semaphore::new(l.options.max_shed));
    let mut stop = l.stop.clone();
    let l = Arc::new(l);
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            _ = async { let _ = stop.wait_for(|p| *p >= Phase::Closed).await; } => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, addr)) => {
                    let _ = tcp.set_nodelay(true);
                    let permit = if let Ok(p) = held.clone().try_acquire_owned() {
                        Permit::Held(p)
                    } else if let Ok(p) = shed.clone().try_acquire_owned() {
                        warn!(peer = %addr, code = %Code::ConnectionLimit, limit = l.options.max_connections, "{name}: connection shed");
                        Permit::Shed(p)
                    } else {
                        debug!(peer = %addr, "{name}: connection closed at accept: beyond the cap and the shed allowance");
                        continue;
                    };
                    tasks.spawn(serve(tcp, addr, permit, l.clone()));
                }
                Err(e) => {
                    warn!(error = %e, "{name}: accept failed");
                    // A full file table makes accept fail at once; do not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    // The listening socket closes now, not when the last connection ends:
    // a stack started next on the same port binds it at once.
    drop(listener);
    loop {
        tokio::select! {
            _ = async { let _ = stop.wait_for(|p| *p == Phase::Stopped).await; } => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    let _ = tokio::time::timeout(SHUTDOWN_GRACE, async { while tasks.join_next().await.is_some() {} }).await;
    tasks.abort_all();
}
