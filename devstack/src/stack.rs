//! `DevStack`: the in-process dev control plane for tests, in the spirit of
//! Tailscale's testcontrol. This module starts it (options, listeners, keys),
//! answers what the stack itself is (URLs, pins, CA certificates), and shuts
//! it down (Drain to every session) so that it can start again on the same
//! SQLite file.
//!
//! What a stack does lives with its domain, each an `impl DevStack` block:
//! pools and join tokens (`pools`), nodes and sessions (`nodes`), inventory
//! (`inventory`), section statuses (`sections`), commands and batches
//! (`commands`), specs (`spec`), trust (`trust`), reservations
//! (`reservations`), releases (`releases`), TPM bindings (`tpm`), bcd's
//! configuration (`config`), and the generic read and wait (`view`). Every
//! wait is a deadline over the stack's change notification; none sleeps a
//! fixed time.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use crate::clock::now_ms;
use crate::connections::{ConnectionOptions, Phase};
use crate::error::{Error, Result};
use crate::gateway::{GatewayService, limit};
use crate::hub::Control;
use crate::join::JoinService;
use crate::keys::{ServingNames, StackKeys};
use crate::releases::ReleaseKeys;
use crate::shared::{Settings, Shared};
use crate::store::sessions;
use crate::store::{Store, StoreLocation};
use crate::tpm::{TpmAttestorOptions, TpmJoin};
use crate::tunnels::TunnelOptions;
use crate::{connections, http, tls};

/// How long shutdown waits for the sessions to drain …
const DRAIN_GRACE: Duration = Duration::from_secs(4);
/// … and then for the servers to close their connections, before it cuts
/// what is left: a shutdown takes at most the two (docs/devstack.md).
const STOP_GRACE: Duration = Duration::from_secs(1);

/// How to start a stack.
#[derive(Clone, Debug)]
pub struct DevStackOptions {
    /// Where the store lives.
    pub store: StoreLocation,
    /// Sign commands and NodeSpecs with a command root, and hand joining
    /// nodes the roots and a trust bundle.
    pub signed_intent: bool,
    /// The address both servers listen on (loopback by default); the
    /// serving certificate names it (unless it is unspecified, 0.0.0.0 / ::).
    pub listen_host: IpAddr,
    /// The gateway's port; 0 picks a free one.
    pub gateway_port: u16,
    /// The HTTP port; 0 picks a free one.
    pub http_port: u16,
    /// The HTTPS listener's port (the WebSocket session, `POST /v1/renew`);
    /// 0 picks a free one.
    pub https_port: u16,
    /// The host written into the gateway and release URLs (default:
    /// `listen_host`), for a node that reaches the stack by another address
    /// (a network namespace, WSL).
    pub advertise_host: Option<String>,
    /// More DNS names for the serving certificate.
    pub extra_dns_names: Vec<String>,
    /// More IP addresses for the serving certificate.
    pub extra_ips: Vec<IpAddr>,
    /// Welcome's heartbeat interval (also the ping interval; liveness is 3×).
    pub heartbeat_interval_ms: u32,
    /// Welcome's lane credits.
    pub lane_credits: u32,
    /// Delay before a BUSY command is delivered again.
    pub busy_retry_ms: u32,
    /// Drain's `retry_after_ms` at shutdown.
    pub drain_retry_after_ms: u32,
    /// The SPIFFE trust domain.
    pub trust_domain: String,
    /// Where the release keys come from (generated and stored by default).
    pub release_keys: ReleaseKeys,
    /// How many release signatures bcd's `[update]` asks for (default 2).
    pub release_threshold: u32,
    /// The lowest release sequence bcd's `[update]` accepts (default 1).
    pub release_min_sequence: u64,
    /// How long a published release's manifest stays good: its
    /// `expires_at_ms` is the publication time plus this (default 30 days).
    pub release_expiry: Duration,
    /// The TPM attestor of the JoinService; without one a TPM join is
    /// refused `method-unsupported`.
    pub tpm_attestor: Option<TpmAttestorOptions>,
    /// The consoles' tunnels: the per-node limit, the open timeout, the
    /// tickets' lifetime.
    pub tunnels: TunnelOptions,
    /// What one node may make the stack store and compute: inventory
    /// sections, section statuses, statements per report, renewals per hour.
    pub limits: crate::limits::NodeLimits,
    /// The connection caps and deadlines of both listeners.
    pub connections: ConnectionOptions,
}

impl Default for DevStackOptions {
    fn default() -> Self {
        DevStackOptions {
            store: StoreLocation::Memory,
            signed_intent: false,
            listen_host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            gateway_port: 0,
            http_port: 0,
            https_port: 0,
            advertise_host: None,
            extra_dns_names: Vec::new(),
            extra_ips: Vec::new(),
            heartbeat_interval_ms: 5000,
            lane_credits: 4,
            busy_retry_ms: 500,
            drain_retry_after_ms: 1000,
            trust_domain: crate::TRUST_DOMAIN.to_string(),
            release_keys: ReleaseKeys::Generated,
            release_threshold: crate::releases::DEFAULT_THRESHOLD,
            release_min_sequence: 1,
            release_expiry: crate::releases::DEFAULT_EXPIRY,
            tpm_attestor: None,
            tunnels: TunnelOptions::default(),
            limits: crate::limits::NodeLimits::default(),
            connections: ConnectionOptions::default(),
        }
    }
}

impl DevStackOptions {
    /// Defaults with an in-memory store.
    pub fn memory() -> Self {
        Self::default()
    }

    /// Defaults with a store in `path`.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        DevStackOptions { store: StoreLocation::File(path.into()), ..Self::default() }
    }
}

/// The pins a node needs to join this stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pins {
    /// The serving CA's pin (`serving_ca_spki_pin`).
    pub serving_ca: String,
    /// The join-signing key's pin (`join_signing_pin`).
    pub join_signing: String,
    /// The join-signing key, standard base64 of its SPKI DER (`join_signing_key`).
    pub join_signing_key: String,
    /// The join-encryption key's pin (`join_encryption_pin`).
    pub join_encryption: String,
    /// The join-encryption key as a public JWK (with `kid`).
    pub join_encryption_jwk: String,
}

/// A running dev stack.
pub struct DevStack {
    shared: Arc<Shared>,
    options: DevStackOptions,
    gateway_addr: SocketAddr,
    http_addr: SocketAddr,
    https_addr: SocketAddr,
    /// The listeners' phase (closed, then stopped, at shutdown).
    stop: watch::Sender<Phase>,
    tasks: Vec<JoinHandle<()>>,
}

/// The names of the serving certificate: the defaults, the extra ones, the
/// listening address (when it is a specific one) and the advertised host.
fn serving_names(options: &DevStackOptions) -> ServingNames {
    let mut ips = options.extra_ips.clone();
    let mut dns = options.extra_dns_names.clone();
    if !options.listen_host.is_unspecified() {
        ips.push(options.listen_host);
    }
    if let Some(host) = &options.advertise_host {
        match host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            Ok(ip) => ips.push(ip),
            Err(_) => dns.push(host.clone()),
        }
    }
    ServingNames::new(&dns, &ips)
}

fn host_for_url(host: &str) -> String {
    if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host.to_string() }
}

async fn bind(host: IpAddr, port: u16) -> Result<TcpListener> {
    let addr = SocketAddr::new(host, port);
    crate::listen::bind(addr).map_err(|source| Error::Bind { addr: addr.to_string(), source })
}

/// The settings of a run: the options, and the URLs nodes reach the
/// listeners by (the advertised host, else the listening one).
fn settings(options: &DevStackOptions, gateway_addr: SocketAddr, http_addr: SocketAddr, https_port: u16) -> Settings {
    let host = options.advertise_host.clone().unwrap_or_else(|| options.listen_host.to_string());
    Settings {
        trust_domain: options.trust_domain.clone(),
        gateway_url: format!("https://{}:{}", host_for_url(&host), gateway_addr.port()),
        heartbeat_interval: Duration::from_millis(u64::from(options.heartbeat_interval_ms.max(1))),
        lane_credits: options.lane_credits,
        busy_retry: Duration::from_millis(u64::from(options.busy_retry_ms)),
        drain_retry_after_ms: options.drain_retry_after_ms,
        http_base_url: format!("http://{}:{}", host_for_url(&host), http_addr.port()),
        https_base_url: format!("https://{}:{}", host_for_url(&host), https_port),
        release_threshold: options.release_threshold,
        release_min_sequence: options.release_min_sequence,
        release_expiry: options.release_expiry,
        tunnels: options.tunnels.clone(),
        limits: options.limits.clone(),
        connections: options.connections.clone(),
    }
}

/// The gateway: our TLS acceptor and connection handling in front of
/// tonic's routes (Join and Gateway).
fn serve_gateway(shared: &Arc<Shared>, listener: TcpListener, stop: &watch::Sender<Phase>) -> Result<JoinHandle<()>> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls::server_config(&shared.keys, tls::Alpn::GATEWAY)?);
    let join = proto::join_server::JoinServer::new(JoinService::new(shared.clone()))
        .max_decoding_message_size(limit::MAX_MESSAGE_BYTES);
    let gateway = proto::gateway_server::GatewayServer::new(GatewayService::new(shared.clone()))
        .max_decoding_message_size(limit::MAX_MESSAGE_BYTES);
    let routes = tonic::service::Routes::new(join).add_service(gateway).prepare();
    let options = shared.settings.connections.clone();
    Ok(tokio::spawn(connections::gateway(listener, acceptor, routes, options, stop.subscribe())))
}

/// The HTTP side (well-known document, release downloads).
fn serve_http(shared: &Arc<Shared>, listener: TcpListener, stop: &watch::Sender<Phase>) -> JoinHandle<()> {
    let router = http::router(shared.clone());
    tokio::spawn(connections::http(listener, router, shared.settings.connections.clone(), stop.subscribe()))
}

impl DevStack {
    /// Starts a stack: opens the store (migrations), loads or creates its keys,
    /// and serves the gateway (TLS) and the HTTP side.
    pub async fn start(options: DevStackOptions) -> Result<DevStack> {
        tls::install_crypto_provider();
        let store = Store::open(&options.store)?;
        let now = now_ms();
        let stale = store.with(|c| sessions::close_all_open(c, now))?;
        if stale > 0 {
            info!(sessions = stale, "devstack: closed sessions left open by a previous run");
        }
        let gateway_listener = bind(options.listen_host, options.gateway_port).await?;
        let http_listener = bind(options.listen_host, options.http_port).await?;
        let https_listener = bind(options.listen_host, options.https_port).await?;
        let gateway_addr =
            gateway_listener.local_addr().map_err(|source| Error::Bind { addr: "gateway".into(), source })?;
        let http_addr = http_listener.local_addr().map_err(|source| Error::Bind { addr: "http".into(), source })?;
        let https_addr = https_listener.local_addr().map_err(|source| Error::Bind { addr: "https".into(), source })?;

        let names = serving_names(&options);
        let keys = StackKeys::load_or_create(
            &store,
            &names,
            options.signed_intent,
            &options.trust_domain,
            &options.release_keys,
            now,
        )?;
        let settings = settings(&options, gateway_addr, http_addr, https_addr.port());
        let tpm = options.tpm_attestor.clone().map(TpmJoin::new);
        let shared = Arc::new(Shared::new(store, keys, settings, tpm));
        let (stop, _) = watch::channel(Phase::Serving);
        let tasks = vec![
            serve_gateway(&shared, gateway_listener, &stop)?,
            serve_http(&shared, http_listener, &stop),
            crate::https::serve(&shared, https_listener, &stop)?,
        ];
        info!(
            gateway = %shared.settings.gateway_url,
            http = %http_addr,
            https = %shared.settings.https_base_url,
            serving_dns = ?names.dns,
            serving_ips = ?names.ips,
            signed_intent = shared.keys.intent.is_some(),
            tpm_attestor = shared.tpm.is_some(),
            store = ?options.store,
            "devstack: started"
        );
        Ok(DevStack { shared, options, gateway_addr, http_addr, https_addr, stop, tasks })
    }

    /// The state the stack's parts share (for the domain modules' methods).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The options the stack was started with.
    pub fn options(&self) -> &DevStackOptions {
        &self.options
    }

    /// Options to start this stack again on the same store and ports.
    pub fn restart_options(&self) -> DevStackOptions {
        DevStackOptions {
            gateway_port: self.gateway_addr.port(),
            http_port: self.http_addr.port(),
            https_port: self.https_addr.port(),
            ..self.options.clone()
        }
    }

    /// The gateway URL nodes dial (`https://host:port`).
    pub fn gateway_url(&self) -> &str {
        &self.shared.settings.gateway_url
    }

    /// The gateway's listening address.
    pub fn gateway_addr(&self) -> SocketAddr {
        self.gateway_addr
    }

    /// The HTTP side's base URL (`http://host:port`).
    pub fn http_url(&self) -> String {
        format!("http://{}", self.http_addr)
    }

    /// The HTTPS listener's base URL as nodes reach it (`https://host:port`).
    pub fn https_url(&self) -> &str {
        &self.shared.settings.https_base_url
    }

    /// The HTTPS listener's address.
    pub fn https_addr(&self) -> SocketAddr {
        self.https_addr
    }

    /// The WebSocket session's URL (`wss://host:port/v1/session`), bcd's
    /// `[websocket] url`.
    pub fn websocket_url(&self) -> String {
        let base = &self.shared.settings.https_base_url;
        format!("wss://{}{}", base.trim_start_matches("https://"), crate::https::ws::PATH)
    }

    /// The URL of the well-known document.
    pub fn well_known_url(&self) -> String {
        format!("{}{}", self.http_url(), http::WELL_KNOWN_PATH)
    }

    /// The well-known document, as served.
    pub fn well_known(&self) -> serde_json::Value {
        http::well_known(&self.shared)
    }

    /// The pins a node needs.
    pub fn pins(&self) -> Pins {
        let keys = &self.shared.keys;
        Pins {
            serving_ca: keys.serving_ca_pin(),
            join_signing: keys.join_signing_pin(),
            join_signing_key: keys.join_signing_key_b64(),
            join_encryption: keys.join_encryption_pin(),
            join_encryption_jwk: keys.join_encryption_jwk(),
        }
    }

    /// The trust domain.
    pub fn trust_domain(&self) -> &str {
        &self.shared.settings.trust_domain
    }

    /// The server name the serving certificate is checked for (`gw.dev.local`).
    pub fn server_name(&self) -> &'static str {
        crate::SERVER_NAME
    }

    /// The serving CA certificate (DER).
    pub fn serving_ca_der(&self) -> &[u8] {
        &self.shared.keys.serving_ca_der
    }

    /// The node CA certificate (DER).
    pub fn node_ca_der(&self) -> &[u8] {
        &self.shared.keys.node_ca_der
    }

    /// The public join-signing key (verifies JoinResponses).
    pub fn join_signing_key(&self) -> pki::PublicKey {
        pki::Signer::public_key(&self.shared.keys.join_signing)
    }

    /// The public join-encryption key (seals join tokens).
    pub fn join_encryption_key(&self) -> p256::PublicKey {
        self.shared.keys.join_encryption.public_key()
    }

    /// Shuts down gracefully: the listeners close (a node that redials is
    /// refused at connect), Drain goes to every session, then the servers
    /// stop. The store file (if any) can be opened by a new stack afterwards.
    pub async fn shutdown(mut self) -> Result<()> {
        let started = tokio::time::Instant::now();
        let shared = self.shared.clone();
        let _ = self.stop.send(Phase::Closed);
        let drain = Control::Drain {
            reason: "the dev stack is shutting down".into(),
            retry_after_ms: shared.settings.drain_retry_after_ms,
        };
        shared.start_draining();
        for caller in shared.tunnels.close_all() {
            caller
                .end(crate::tunnels::ConsoleEnd::Closed(format!(
                    "{}: the dev stack is shutting down",
                    crate::status::Code::Draining
                )))
                .await;
        }
        let sessions = shared.hub.len();
        shared.hub.broadcast(&drain);
        let drained = shared
            .wait_for(DRAIN_GRACE, || "sessions to drain".into(), || Ok(shared.hub.is_empty().then_some(())))
            .await;
        if drained.is_err() {
            warn!(
                sessions = shared.hub.len(),
                grace_ms = DRAIN_GRACE.as_millis() as u64,
                "devstack: sessions still open after the drain grace; their connections are cut"
            );
        }
        let _ = self.stop.send(Phase::Stopped);
        let cut = tokio::time::Instant::now() + STOP_GRACE;
        for mut task in std::mem::take(&mut self.tasks) {
            if tokio::time::timeout_at(cut, &mut task).await.is_err() {
                debug!("devstack: a server still had connections after the stop grace; aborted");
                task.abort();
                // An aborted task is dropped at the runtime's next turn, its
                // listener with it: wait for that, so that a stack started
                // next on the same ports can bind them.
                let _ = task.await;
            }
        }
        info!(
            gateway = %shared.settings.gateway_url,
            sessions,
            took_ms = started.elapsed().as_millis() as u64,
            "devstack: stopped"
        );
        Ok(())
    }
}

impl Drop for DevStack {
    fn drop(&mut self) {
        // A stack dropped without shutdown() stops at once.
        let _ = self.stop.send(Phase::Stopped);
        for task in &self.tasks {
            task.abort();
        }
    }
}
