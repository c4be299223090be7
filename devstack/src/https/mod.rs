//! The HTTPS listener (docs/protocol.md, "WebSocket transport"): for nodes
//! on networks that block HTTP/2, the Session as a WebSocket
//! (`GET /v1/session`, [`ws`]), renewal as `POST /v1/renew` ([`renew`]), and
//! the OTLP receiver (`POST /v1/metrics`, also on the HTTP side).
//!
//! It runs axum behind the stack's own rustls acceptor (`tls`): TLS 1.3,
//! ALPN `http/1.1` or none (`tls::Alpn::HTTPS`), the same serving certificate as the gateway
//! (from the CA nodes pin), and the client certificate optional at the TLS
//! layer but verified against the node CA when presented; each request
//! sees its connection's [`PeerInfo`] as `ConnectInfo`, and the handlers
//! check it against `node_certs` exactly as the gateway does
//! (`gateway::auth::authenticate_peer`).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::connect_info::Connected;
use axum::routing::{get, post};
use axum::serve::{IncomingStream, Listener};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::warn;

use crate::error::Result;
use crate::shared::Shared;
use crate::tls::{self, Alpn, PeerInfo, TlsConn};

pub mod renew;
pub mod ws;

/// The accepted TLS connections, as axum's listener.
struct TlsListener {
    conns: mpsc::Receiver<TlsConn>,
    local: SocketAddr,
}

impl Listener for TlsListener {
    type Io = TlsConn;
    type Addr = PeerInfo;

    async fn accept(&mut self) -> (TlsConn, PeerInfo) {
        match self.conns.recv().await {
            Some(conn) => {
                let info = conn.info().clone();
                (conn, info)
            }
            // The accept loop ended: the stack is stopping, and the graceful
            // shutdown ends the server.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<PeerInfo> {
        Ok(PeerInfo { remote_addr: self.local, client_chain: None })
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for PeerInfo {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// The HTTPS routes.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(ws::PATH, get(ws::upgrade))
        .route(renew::PATH, post(renew::renew))
        .route(crate::otlp::PATH, post(crate::otlp::receive))
        .with_state(shared)
}

/// Serves the HTTPS listener until `stop` turns true; returns its tasks.
pub fn serve(shared: &Arc<Shared>, listener: TcpListener, stop: &watch::Sender<bool>) -> Result<Vec<JoinHandle<()>>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls::server_config(&shared.keys, Alpn::HTTPS)?);
    let local = listener.local_addr().map_err(|source| crate::error::Error::Bind { addr: "https".into(), source })?;
    let (conn_tx, conns) = mpsc::channel(16);
    let accept = tokio::spawn(tls::accept_loop(listener, acceptor, Alpn::HTTPS, conn_tx, stop.subscribe()));
    let app = router(shared.clone()).into_make_service_with_connect_info::<PeerInfo>();
    let mut stop = stop.subscribe();
    let serve = tokio::spawn(async move {
        let signal = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(TlsListener { conns, local }, app).with_graceful_shutdown(signal).await {
            warn!(error = %e, "devstack: HTTPS server stopped");
        }
    });
    Ok(vec![accept, serve])
}
