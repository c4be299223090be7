//! The gateway's TLS: our own rustls acceptor in front of tonic, and in
//! front of the HTTPS listener (the WebSocket session, `POST /v1/renew`).
//!
//! TLS 1.3 only, one ALPN protocol per listener ([`Alpn`]): exactly `h2`
//! for the gateway; `http/1.1`, or none at all, for the HTTPS listener (Go's
//! HTTP client offers no ALPN for a WebSocket upgrade, and a client that
//! offers none speaks HTTP/1.1). A connection that negotiated anything else
//! is closed and logged; client certificates optional at
//! the TLS layer but verified against the node CA when presented. Each
//! accepted connection carries its verified peer chain to the handlers as
//! tonic `ConnectInfo` ([`PeerInfo`]); handshake failures are logged and
//! never reach tonic nor disturb other connections.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::keys::StackKeys;

/// The only ALPN protocol the gateway speaks.
pub const ALPN_H2: &[u8] = b"h2";
/// The only ALPN protocol the HTTPS listener speaks (a WebSocket upgrade is
/// an HTTP/1.1 request).
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

/// What a listener accepts of the ALPN negotiation.
#[derive(Clone, Copy, Debug)]
pub struct Alpn {
    /// The one protocol it offers.
    pub protocol: &'static [u8],
    /// Whether a client that offered no ALPN at all is accepted too.
    pub or_none: bool,
}

impl Alpn {
    /// The gateway's: `h2`, and nothing else.
    pub const GATEWAY: Alpn = Alpn { protocol: ALPN_H2, or_none: false };
    /// The HTTPS listener's: `http/1.1`, or no ALPN.
    pub const HTTPS: Alpn = Alpn { protocol: ALPN_HTTP1, or_none: true };

    fn accepts(&self, negotiated: Option<&[u8]>) -> bool {
        match negotiated {
            Some(p) => p == self.protocol,
            None => self.or_none,
        }
    }
}
/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Installs rustls' ring provider as the process default. Harmless when one
/// is already installed; the gateway also names ring explicitly, so a process
/// that links aws-lc-rs too never makes rustls guess.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn tls_err(e: impl std::fmt::Display) -> Error {
    Error::Tls { reason: e.to_string() }
}

/// The rustls configuration of a listener that speaks `alpn`.
pub fn server_config(keys: &StackKeys, alpn: Alpn) -> Result<Arc<ServerConfig>> {
    use p256::pkcs8::EncodePrivateKey;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(keys.node_ca_der.clone())).map_err(tls_err)?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(tls_err)?;
    let chain = vec![CertificateDer::from(keys.gateway_der.clone()), CertificateDer::from(keys.serving_ca_der.clone())];
    let key_der = keys.gateway_key.to_pkcs8_der().map_err(tls_err)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_der.as_bytes().to_vec()));
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(tls_err)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(tls_err)?;
    config.alpn_protocols = vec![alpn.protocol.to_vec()];
    Ok(Arc::new(config))
}

/// What the handlers learn about a connection.
#[derive(Clone, Debug)]
pub struct PeerInfo {
    /// The client's address.
    pub remote_addr: SocketAddr,
    /// The client's certificate chain (DER, leaf first), verified against the
    /// node CA during the handshake; `None` when it presented none.
    pub client_chain: Option<Arc<Vec<Vec<u8>>>>,
}

/// An accepted TLS connection that negotiated its listener's protocol.
pub struct TlsConn {
    inner: TlsStream<TcpStream>,
    info: PeerInfo,
}

impl Connected for TlsConn {
    type ConnectInfo = PeerInfo;
    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl TlsConn {
    /// What the handlers learn about this connection.
    pub fn info(&self) -> &PeerInfo {
        &self.info
    }
}

/// Accepts TCP connections until `stop` turns true, handshakes each in its
/// own task (which must negotiate `alpn`), and hands the good ones to the
/// server through `tx`.
pub async fn accept_loop(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    alpn: Alpn,
    tx: mpsc::Sender<TlsConn>,
    mut stop: watch::Receiver<bool>,
) {
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            _ = async { let _ = stop.wait_for(|s| *s).await; } => break,
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((tcp, addr)) => {
                    let (acceptor, tx) = (acceptor.clone(), tx.clone());
                    handshakes.spawn(async move {
                        if let Some(conn) = handshake(acceptor, tcp, addr, alpn).await {
                            // The receiver is gone only when the server stopped.
                            let _ = tx.send(conn).await;
                        }
                    });
                }
                Err(e) => {
                    warn!(error = %e, "gateway: accept failed");
                    // A full file table makes accept fail at once; do not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    handshakes.abort_all();
}

/// One handshake; `None` (logged) for anything but a TLS 1.3 connection
/// that negotiated `alpn`.
async fn handshake(acceptor: TlsAcceptor, tcp: TcpStream, addr: SocketAddr, alpn: Alpn) -> Option<TlsConn> {
    let _ = tcp.set_nodelay(true);
    let mut tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            warn!(peer = %addr, error = %e, "gateway: TLS handshake refused");
            return None;
        }
        Err(_) => {
            warn!(peer = %addr, "gateway: TLS handshake timed out");
            return None;
        }
    };
    let (_, session) = tls.get_ref();
    if !alpn.accepts(session.alpn_protocol()) {
        let offered = session.alpn_protocol().map(|p| String::from_utf8_lossy(p).into_owned());
        let wanted = String::from_utf8_lossy(alpn.protocol);
        warn!(peer = %addr, alpn = ?offered, "tls: connection refused: the negotiated ALPN is not {wanted}");
        let _ = tls.shutdown().await;
        return None;
    }
    let client_chain = session
        .peer_certificates()
        .map(|certs| Arc::new(certs.iter().map(|c| c.as_ref().to_vec()).collect::<Vec<_>>()));
    debug!(peer = %addr, client_cert = client_chain.is_some(), "gateway: TLS connection accepted");
    Some(TlsConn { inner: tls, info: PeerInfo { remote_addr: addr, client_chain } })
}
