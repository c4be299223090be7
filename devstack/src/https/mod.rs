//! The HTTPS listener (docs/protocol.md, "WebSocket transport"): for nodes
//! on networks that block HTTP/2, the Session as a WebSocket
//! (`GET /v1/session`, [`ws`]), renewal as `POST /v1/renew` ([`renew`]), and
//! the OTLP receiver (`POST /v1/metrics`, also on the HTTP side).
//!
//! It runs axum behind the stack's own rustls handshake (`tls`) and
//! connection handling (`connections::https`): TLS 1.3, ALPN `http/1.1` or
//! none (`tls::Alpn::HTTPS`), the same serving certificate as the gateway
//! (from the CA nodes pin), and the client certificate optional at the TLS
//! layer and taken there as presented; each request sees its connection's
//! [`crate::tls::PeerInfo`] as `ConnectInfo`, and the handlers verify it
//! against the node CA and `node_certs` exactly as the gateway does
//! (`gateway::auth::authenticate_peer`).

use axum::Router;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::connections::Phase;
use crate::error::Result;
use crate::gateway::GatewayService;
use crate::tls::{self, Alpn};

pub mod renew;
pub mod ws;

/// The HTTPS routes: the sessions of `gateway`, renewal, and the OTLP
/// receiver.
pub fn router(gateway: GatewayService) -> Router {
    let shared = gateway.shared.clone();
    Router::new()
        .route(ws::PATH, get(ws::upgrade).with_state(gateway))
        .route(renew::PATH, post(renew::renew))
        .route(crate::otlp::PATH, post(crate::otlp::receive))
        .with_state(shared)
}

/// Serves the HTTPS listener until `stop` closes it, through the stack's
/// connection handling (`connections::https`).
pub(crate) fn serve(
    gateway: GatewayService,
    listener: TcpListener,
    stop: &watch::Sender<Phase>,
) -> Result<JoinHandle<()>> {
    let shared = &gateway.shared;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls::server_config(&shared.keys, Alpn::HTTPS, None)?);
    let options = shared.settings.options.connections.clone();
    let router = router(gateway);
    Ok(tokio::spawn(crate::connections::https(listener, acceptor, router, options, stop.subscribe())))
}
