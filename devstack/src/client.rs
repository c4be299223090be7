//! A node's connection to the dev stack, for tests and tools that play a
//! node in Rust (the harness's replay scenario, the crate's own tests): the
//! rustls client configuration (the serving CA as the only root, TLS 1.3,
//! ALPN as given, rustls' in-memory session store), a raw TLS dial, a tonic
//! channel over it (or over one connection of a given configuration, which
//! resumes a session that configuration keeps), and a sealed join token for
//! a CSR.

use std::sync::Arc;

use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tokio::net::TcpStream;
use tonic::transport::{Channel, Endpoint};

use crate::DevStack;

/// A client certificate chain and its key.
#[derive(Clone)]
pub struct ClientCert {
    /// The chain, leaf first (DER).
    pub chain: Vec<Vec<u8>>,
    /// The leaf's key.
    pub key: p256::SecretKey,
}

/// The rustls client configuration of a node: the serving CA as the only
/// root, TLS 1.3, the given ALPN list and optional client certificate.
pub fn client_config(stack: &DevStack, cert: Option<&ClientCert>, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    use p256::pkcs8::EncodePrivateKey as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(stack.serving_ca_der().to_vec())).expect("the stack's own serving CA parses");
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("the ring provider supports TLS 1.3")
        .with_root_certificates(roots);
    let mut config = match cert {
        Some(c) => {
            let chain = c.chain.iter().map(|d| CertificateDer::from(d.clone())).collect();
            let pkcs8 = c.key.to_pkcs8_der().expect("a P-256 key encodes as PKCS#8");
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8.as_bytes().to_vec()));
            builder.with_client_auth_cert(chain, key).expect("rustls takes a P-256 PKCS#8 key")
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

/// A TLS connection to the gateway.
pub async fn dial(
    stack: &DevStack,
    cert: Option<&ClientCert>,
    alpn: &[&[u8]],
) -> std::io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
    let connector = tokio_rustls::TlsConnector::from(client_config(stack, cert, alpn));
    let tcp = TcpStream::connect(stack.gateway_addr()).await?;
    connector.connect(server_name(), tcp).await
}

/// A gRPC channel to the gateway over our own TLS (ALPN h2).
pub async fn channel(stack: &DevStack, cert: Option<ClientCert>) -> Result<Channel, tonic::transport::Error> {
    let addr = stack.gateway_addr();
    let config = client_config(stack, cert.as_ref(), &[b"h2"]);
    let connector = tower::service_fn(move |_uri: http::Uri| {
        let config = config.clone();
        async move {
            let tcp = TcpStream::connect(addr).await?;
            let tls = tokio_rustls::TlsConnector::from(config).connect(server_name(), tcp).await?;
            Ok::<_, std::io::Error>(TokioIo::new(tls))
        }
    });
    Endpoint::from_static("http://gw.dev.local").connect_with_connector(connector).await
}

/// A gRPC channel to the gateway over one TLS connection made with
/// `config` (whose session store resumes a TLS session it keeps from an
/// earlier connection to the stack), and whether that connection resumed
/// one. The channel does not connect again.
pub async fn channel_with(
    stack: &DevStack,
    config: Arc<rustls::ClientConfig>,
) -> Result<(Channel, bool), Box<dyn std::error::Error + Send + Sync>> {
    let tcp = TcpStream::connect(stack.gateway_addr()).await?;
    let tls = tokio_rustls::TlsConnector::from(config).connect(server_name(), tcp).await?;
    let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    let once = Arc::new(std::sync::Mutex::new(Some(tls)));
    let connector = tower::service_fn(move |_uri: http::Uri| {
        let taken = once.lock().unwrap_or_else(|p| p.into_inner()).take();
        async move {
            let tls = taken.ok_or_else(|| std::io::Error::other("this channel's one connection is used"))?;
            Ok::<_, std::io::Error>(TokioIo::new(tls))
        }
    });
    let channel = Endpoint::from_static("http://gw.dev.local").connect_with_connector(connector).await?;
    Ok((channel, resumed))
}

fn server_name() -> ServerName<'static> {
    ServerName::try_from(crate::SERVER_NAME).expect("gw.dev.local is a valid DNS name")
}

/// A sealed token for a CSR.
pub fn seal(stack: &DevStack, token: &str, csr_pin: &str) -> String {
    let iat = now_ms() / 1000;
    pki::join::seal_token(&stack.join_encryption_key(), token, csr_pin, iat, &pki::jwe::SealRandomness::from_os())
}

/// The wall clock in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
