//! The stack's TLS: our own rustls configuration and handshake in front of
//! the gateway (tonic) and of the HTTPS listener (the WebSocket session,
//! `POST /v1/renew`); `connections` serves what they accept.
//!
//! TLS 1.3 only, one ALPN protocol per listener ([`Alpn`]): exactly `h2`
//! for the gateway; `http/1.1`, or none at all, for the HTTPS listener (Go's
//! HTTP client offers no ALPN for a WebSocket upgrade, and a client that
//! offers none speaks HTTP/1.1). A connection that negotiated anything else
//! is closed and logged. A client certificate is optional at the TLS layer,
//! and any certificate is taken there once the client proved it holds its
//! key (the handshake's signature): whether the stack issued it is the
//! handlers' question (`gateway/auth`, for the gateway and the HTTPS
//! listener alike), which answers a foreign or expired certificate with a
//! stable code (`Unauthenticated` `cert-unknown`, `PermissionDenied`
//! `cert-validity`) a node can act on, where a TLS alert would say nothing.
//! Each connection carries its peer chain to the handlers as [`PeerInfo`]
//! in the request's extensions; handshake failures are logged and never
//! reach a server nor disturb other connections.
//!
//! The gateway issues one TLS 1.3 session ticket per handshake, sealed with
//! the store's ticket keys (`tickets`), so that a node resumes its session
//! after a restart, a Drain or a failover to another gateway of the store:
//! a resumed handshake carries the client chain of the one that began the
//! session, and [`PeerInfo::resumed`] says so. The HTTPS listener issues
//! none (its clients do not resume), and neither keeps sessions in memory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::HandshakeKind;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{NoServerSessionStorage, ProducesTickets, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, ServerConfig, SignatureScheme};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
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

/// Installs rustls' ring provider as the process default. Harmless when one
/// is already installed; the gateway also names ring explicitly, so a process
/// that links aws-lc-rs too never makes rustls guess.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn tls_err(e: impl std::fmt::Display) -> Error {
    Error::Tls { reason: e.to_string() }
}

/// The rustls configuration of a listener that speaks `alpn`, issuing one
/// session ticket per handshake sealed by `tickets` (none without).
pub fn server_config(
    keys: &StackKeys,
    alpn: Alpn,
    tickets: Option<Arc<dyn ProducesTickets>>,
) -> Result<Arc<ServerConfig>> {
    use p256::pkcs8::EncodePrivateKey;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots.add(CertificateDer::from(keys.node_ca_der.clone())).map_err(tls_err)?;
    let webpki = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(tls_err)?;
    let verifier = Arc::new(DeferredClientVerifier { webpki });
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
    // No session is kept in memory: a ticket holds the whole state.
    config.session_storage = Arc::new(NoServerSessionStorage {});
    match tickets {
        Some(ticketer) => {
            config.ticketer = ticketer;
            config.send_tls13_tickets = 1;
        }
        None => config.send_tls13_tickets = 0,
    }
    Ok(Arc::new(config))
}

/// A client verifier that asks a client for its certificate (hinting the
/// node CA), checks the handshake's signature with the certificate's key,
/// and leaves whether the certificate is one the stack issued to the
/// gateway's authentication.
#[derive(Debug)]
struct DeferredClientVerifier {
    /// The node CA's verifier, for the hints and the signature checks.
    webpki: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for DeferredClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.webpki.root_hint_subjects()
    }

    /// Takes the chain as it is: checking it against the node CA here too
    /// would cost every handshake a signature verification whose answer
    /// nothing reads: `gateway/auth` checks the leaf on every call and
    /// answers with a code.
    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> std::result::Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// What the handlers learn about a connection.
#[derive(Clone, Debug)]
pub struct PeerInfo {
    /// The client's address.
    pub remote_addr: SocketAddr,
    /// The client's certificate chain (DER, leaf first) as presented, its
    /// key proven by the handshake (not yet that the stack issued it: see
    /// `gateway/auth`); `None` when it presented none.
    pub client_chain: Option<Arc<Vec<Vec<u8>>>>,
    /// Whether the handshake resumed a session (a ticket the store's keys
    /// sealed): the chain is then the one the session began with, whose key
    /// signed that first handshake.
    pub resumed: bool,
}

/// One handshake within `timeout`; `None` (logged) for anything but a TLS
/// 1.3 connection that negotiated `alpn`. The stream is boxed: it is 1.2 KiB,
/// and each future it is moved through on its way to hyper would otherwise
/// keep its own copy for the connection's life.
pub(crate) async fn handshake(
    acceptor: &TlsAcceptor,
    tcp: TcpStream,
    addr: SocketAddr,
    timeout: Duration,
    alpn: Alpn,
) -> Option<(Box<TlsStream<TcpStream>>, PeerInfo)> {
    let mut tls = match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            warn!(peer = %addr, error = %e, "gateway: TLS handshake refused");
            return None;
        }
        Err(_) => {
            warn!(peer = %addr, timeout_ms = timeout.as_millis() as u64, "gateway: TLS handshake timed out");
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
    let resumed = session.handshake_kind() == Some(HandshakeKind::Resumed);
    debug!(peer = %addr, client_cert = client_chain.is_some(), resumed, "gateway: TLS connection accepted");
    Some((Box::new(tls), PeerInfo { remote_addr: addr, client_chain, resumed }))
}
