//! `DevStack`: the in-process dev control plane for tests, in the spirit of
//! Tailscale's testcontrol. Start it, create pools, mint join tokens, wait for
//! nodes, enqueue commands and wait for their outcomes, revoke nodes, inject
//! frames, read the store, shut it down (Drain to every session) and start it
//! again on the same SQLite file.
//!
//! Every wait is a deadline over the stack's change notification; none sleeps
//! a fixed time.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_stream::StreamExt as _;
use tokio_stream::wrappers::ReceiverStream;
use tracing::{info, warn};

use crate::adoption::{ACCEPTANCE_DIAG, ACCEPTANCE_NONE};
use crate::clock::now_ms;
use crate::commands::{self, Batch, BatchSpec, CommandOptions};
use crate::config::{self, BcdConfig, BcdConfigPaths};
use crate::error::{Error, Result};
use crate::gateway::{GatewayService, limit};
use crate::hub::Control;
use crate::join::JoinService;
use crate::keys::{ServingNames, StackKeys};
use crate::releases::{ManifestOptions, Release, ReleaseKeys, UpdatePins};
use crate::shared::{Settings, Shared};
use crate::spec::SpecUpdate;
use crate::store::rows::{
    CommandRow, CommandStatus, CommandUpdateRow, InventoryRow, NodeBindingRow, NodeCertRow, NodeJoinRow, NodeRow,
    NodeSessionRow, NodeSpecRow, NodeState, PoolRow, ReleaseArtifactRow, ReservationRow, ReservationState,
};
use crate::store::{Store, StoreLocation};
use crate::store::{
    bindings, certs, commands as command_rows, inventory, nodes, pools, releases as release_rows,
    reservations as reservation_rows, sessions, specs, tokens,
};
use crate::tpm::{TpmAllow, TpmAttestorOptions, TpmJoin};
use crate::{http, ids, tls};

/// How long shutdown waits for sessions to drain and servers to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

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
    /// The TPM attestor of the JoinService; without one a TPM join is
    /// refused `method-unsupported`.
    pub tpm_attestor: Option<TpmAttestorOptions>,
}

impl Default for DevStackOptions {
    fn default() -> Self {
        DevStackOptions {
            store: StoreLocation::Memory,
            signed_intent: false,
            listen_host: IpAddr::V4(Ipv4Addr::LOCALHOST),
            gateway_port: 0,
            http_port: 0,
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
            tpm_attestor: None,
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

/// How a pool accepts its nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Acceptance {
    /// Run `diag.nvml` and compare its GPU count with the expected one.
    #[default]
    DiagNvml,
    /// Adopt on the first session.
    None,
}

/// A pool to create.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSpec {
    /// A unique name.
    pub name: String,
    /// The GPU model nodes should have (recorded, not checked yet).
    pub gpu_model: Option<String>,
    /// The GPU count `diag.nvml` must report; `None` accepts any.
    pub expect_gpu_count: Option<u32>,
    /// The acceptance check.
    pub acceptance: Acceptance,
}

/// The end of a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutcome {
    /// The command.
    pub id: String,
    /// Its terminal state.
    pub state: CommandStatus,
    /// The node's reason (or `result-unverified: …` for a refused result).
    pub reason: String,
    /// The verified result's output (JSON), empty without one.
    pub output: Vec<u8>,
}

impl CommandOutcome {
    /// The output parsed as JSON.
    pub fn output_json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.output).ok()
    }
}

/// The public keys of signed intent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntentPublicKeys {
    /// The command root.
    pub command_root: pki::PublicKey,
    /// The trust bundle's approvers.
    pub approvers: Vec<pki::PublicKey>,
    /// The exec ticket issuer.
    pub tunnels_issuer: pki::PublicKey,
    /// The workload token issuer.
    pub workload_issuer: pki::PublicKey,
}

/// A point in the order of joins: nodes that join later are "new".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct JoinMark(i64);

/// A running dev stack.
pub struct DevStack {
    shared: Arc<Shared>,
    options: DevStackOptions,
    gateway_addr: SocketAddr,
    http_addr: SocketAddr,
    stop: watch::Sender<bool>,
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
    TcpListener::bind(addr).await.map_err(|source| Error::Bind { addr: addr.to_string(), source })
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
        let gateway_addr =
            gateway_listener.local_addr().map_err(|source| Error::Bind { addr: "gateway".into(), source })?;
        let http_addr = http_listener.local_addr().map_err(|source| Error::Bind { addr: "http".into(), source })?;
        let host = options.advertise_host.clone().unwrap_or_else(|| options.listen_host.to_string());
        let gateway_url = format!("https://{}:{}", host_for_url(&host), gateway_addr.port());
        let http_base_url = format!("http://{}:{}", host_for_url(&host), http_addr.port());

        let names = serving_names(&options);
        let keys = StackKeys::load_or_create(
            &store,
            &names,
            options.signed_intent,
            &options.trust_domain,
            &options.release_keys,
            now,
        )?;
        let settings = Settings {
            trust_domain: options.trust_domain.clone(),
            gateway_url,
            heartbeat_interval: Duration::from_millis(u64::from(options.heartbeat_interval_ms.max(1))),
            lane_credits: options.lane_credits,
            busy_retry: Duration::from_millis(u64::from(options.busy_retry_ms)),
            drain_retry_after_ms: options.drain_retry_after_ms,
            http_base_url,
            release_threshold: options.release_threshold,
            release_min_sequence: options.release_min_sequence,
        };
        let tpm = options.tpm_attestor.clone().map(TpmJoin::new);
        let shared = Arc::new(Shared::new(store, keys, settings, tpm));
        let (stop, _) = watch::channel(false);
        let mut tasks = Vec::new();

        // The gateway: our TLS acceptor feeding tonic.
        let acceptor = tokio_rustls::TlsAcceptor::from(tls::server_config(&shared.keys)?);
        let (conn_tx, conn_rx) = mpsc::channel(16);
        tasks.push(tokio::spawn(tls::accept_loop(gateway_listener, acceptor, conn_tx, stop.subscribe())));
        let incoming = ReceiverStream::new(conn_rx).map(Ok::<_, std::io::Error>);
        let join = proto::join_server::JoinServer::new(JoinService::new(shared.clone()))
            .max_decoding_message_size(limit::MAX_MESSAGE_BYTES);
        let gateway = proto::gateway_server::GatewayServer::new(GatewayService::new(shared.clone()))
            .max_decoding_message_size(limit::MAX_MESSAGE_BYTES);
        let router =
            tonic::transport::Server::builder().layer(limit::FrameLimitLayer).add_service(join).add_service(gateway);
        let signal = stopped(stop.subscribe());
        tasks.push(tokio::spawn(async move {
            if let Err(e) = router.serve_with_incoming_shutdown(incoming, signal).await {
                warn!(error = %e, "devstack: gateway server stopped");
            }
        }));

        // The HTTP side.
        let app = http::router(shared.clone());
        let signal = stopped(stop.subscribe());
        tasks.push(tokio::spawn(async move {
            if let Err(e) = axum::serve(http_listener, app).with_graceful_shutdown(signal).await {
                warn!(error = %e, "devstack: HTTP server stopped");
            }
        }));

        info!(
            gateway = %shared.settings.gateway_url,
            http = %http_addr,
            serving_dns = ?names.dns,
            serving_ips = ?names.ips,
            signed_intent = shared.keys.intent.is_some(),
            tpm_attestor = shared.tpm.is_some(),
            store = ?options.store,
            "devstack: started"
        );
        Ok(DevStack { shared, options, gateway_addr, http_addr, stop, tasks })
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

    /// The command roots nodes receive (empty without signed intent).
    pub fn command_roots(&self) -> Vec<pki::PublicKey> {
        self.shared.keys.command_roots()
    }

    /// The approvers of the trust bundle, and the tunnels and workload token
    /// issuers (under signed intent).
    pub fn intent_public_keys(&self) -> Option<IntentPublicKeys> {
        self.shared.keys.intent.as_ref().map(|i| IntentPublicKeys {
            command_root: pki::Signer::public_key(&i.command_root),
            approvers: i.approvers.iter().map(pki::Signer::public_key).collect(),
            tunnels_issuer: pki::Signer::public_key(&i.tunnels_issuer),
            workload_issuer: pki::Signer::public_key(&i.workload_issuer),
        })
    }

    /// The current trust bundle and its signed envelope (under signed
    /// intent): sequence 1, or the latest rotation the approvers signed that
    /// was published with [`DevStack::publish_spec`].
    pub fn trust_bundle(&self) -> Option<(proto::TrustBundle, pki::dsse::Envelope)> {
        self.shared.keys.intent.as_ref().map(|i| i.trust())
    }

    /// Writes a ready bcd `config.toml` and `join-encryption.jwk` into `dir`,
    /// with `data_dir` as bcd's data directory.
    pub async fn write_bcd_config(&self, dir: &Path, data_dir: &Path) -> Result<BcdConfigPaths> {
        self.write_bcd_config_with(dir, data_dir, None).await
    }

    /// Writes a ready bcd `config.toml` (with an `[update]` section pinning
    /// `update`, when given: [`DevStack::release_keys`] or a changed copy)
    /// and `join-encryption.jwk` into `dir`.
    pub async fn write_bcd_config_with(
        &self,
        dir: &Path,
        data_dir: &Path,
        update: Option<&UpdatePins>,
    ) -> Result<BcdConfigPaths> {
        let pins = self.pins();
        let cfg = BcdConfig {
            gateway_url: self.gateway_url().to_string(),
            gateway_server_name: crate::SERVER_NAME.to_string(),
            serving_ca_spki_pin: pins.serving_ca,
            join_signing_pin: pins.join_signing,
            join_signing_key: pins.join_signing_key,
            join_encryption_pin: pins.join_encryption,
            data_dir: data_dir.to_path_buf(),
            update: update.cloned(),
        };
        config::write(dir, &cfg, &pins.join_encryption_jwk)
    }

    /// Creates a pool; returns its id.
    pub async fn create_pool(&self, spec: PoolSpec) -> Result<String> {
        let row = PoolRow {
            id: ids::pool_id(),
            name: spec.name,
            gpu_model: spec.gpu_model,
            expect_gpu_count: spec.expect_gpu_count,
            acceptance: match spec.acceptance {
                Acceptance::DiagNvml => ACCEPTANCE_DIAG,
                Acceptance::None => ACCEPTANCE_NONE,
            }
            .to_string(),
            created_at_ms: now_ms(),
        };
        self.shared.store.with(|c| pools::insert(c, &row))?;
        info!(pool_id = %row.id, name = %row.name, expect_gpu_count = ?row.expect_gpu_count, "pool created");
        Ok(row.id)
    }

    /// Every pool.
    pub async fn pools(&self) -> Result<Vec<PoolRow>> {
        self.shared.store.with(pools::all)
    }

    /// A pool by name.
    pub async fn pool_by_name(&self, name: &str) -> Result<Option<PoolRow>> {
        self.shared.store.with(|c| pools::by_name(c, name))
    }

    /// Mints a join token for a pool; returns the secret token. Only its
    /// SHA-256 is stored, and it is never logged.
    pub async fn mint_join_token(&self, pool_id: &str, max_uses: u32, ttl: Duration) -> Result<String> {
        let secret = ids::token_secret();
        let now = now_ms();
        let row = crate::store::rows::JoinTokenRow {
            id: ids::token_id(),
            token_sha256: hex::encode(Sha256::digest(secret.as_bytes())),
            pool_id: pool_id.to_string(),
            max_uses,
            uses: 0,
            expires_at_ms: now.saturating_add(ttl.as_millis().min(i64::MAX as u128) as i64),
            created_at_ms: now,
        };
        self.shared.store.with(|c| {
            if pools::get(c, pool_id)?.is_none() {
                return Err(Error::UnknownPool { pool_id: pool_id.to_string() });
            }
            tokens::insert(c, &row)
        })?;
        info!(token_id = %row.id, pool_id, max_uses, expires_at_ms = row.expires_at_ms, "join token minted");
        Ok(secret)
    }

    /// The join tokens of a pool (hashes and counters only).
    pub async fn join_tokens(&self, pool_id: &str) -> Result<Vec<crate::store::rows::JoinTokenRow>> {
        self.shared.store.with(|c| tokens::of_pool(c, pool_id))
    }

    /// Enqueues a command for a node (signed under signed intent); returns its id.
    pub async fn enqueue_command(
        &self,
        node_id: &str,
        kind: &str,
        params: serde_json::Value,
        opts: CommandOptions,
    ) -> Result<String> {
        commands::enqueue(&self.shared, node_id, kind, &params, &opts)
    }

    /// Enqueues a batch of destructive commands with a BatchApproval signed
    /// by `spec.approvals` of the stack's approvers (signed intent only).
    pub async fn enqueue_batch(&self, spec: BatchSpec) -> Result<Batch> {
        commands::enqueue_batch(&self.shared, &spec)
    }

    /// Publishes the next spec generation of a node (sections not in
    /// `update` carry over) and sends it to its live session; returns the
    /// generation.
    pub async fn publish_spec(&self, node_id: &str, update: SpecUpdate) -> Result<u64> {
        crate::spec::publish(&self.shared, node_id, &update).map(|row| row.generation)
    }

    /// The current trust bundle with the next sequence number: the start of
    /// a rotation (signed intent only).
    pub fn next_trust_bundle(&self) -> Result<proto::TrustBundle> {
        let intent = self.shared.keys.intent.as_ref().ok_or(Error::NoSignedIntent)?;
        let (current, _) = intent.trust();
        Ok(proto::TrustBundle { sequence: current.sequence + 1, ..current })
    }

    /// Signs a trust bundle with the first `approvals` of the stack's
    /// current approvers (signed intent only).
    pub fn sign_trust_bundle(&self, bundle: &proto::TrustBundle, approvals: usize) -> Result<pki::dsse::Envelope> {
        let intent = self.shared.keys.intent.as_ref().ok_or(Error::NoSignedIntent)?;
        let signers: Vec<&dyn pki::Signer> =
            intent.approvers.iter().take(approvals).map(|a| a as &dyn pki::Signer).collect();
        Ok(pki::intent::sign_trust_bundle(&signers, bundle))
    }

    /// Waits until a command reaches a terminal state.
    pub async fn await_command(&self, id: &str, timeout: Duration) -> Result<CommandOutcome> {
        let shared = &self.shared;
        let last = std::sync::Mutex::new(None::<CommandStatus>);
        shared
            .wait_for(
                timeout,
                || format!("command {id} to end (last state {:?})", last.lock().map(|l| *l).unwrap_or_default()),
                || {
                    let row = shared
                        .store
                        .with(|c| command_rows::get(c, id))?
                        .ok_or_else(|| Error::UnknownCommand { command_id: id.to_string() })?;
                    if let Ok(mut l) = last.lock() {
                        *l = Some(row.state);
                    }
                    Ok(row.state.is_terminal().then(|| CommandOutcome {
                        id: row.id,
                        state: row.state,
                        reason: row.reason,
                        output: row.output.unwrap_or_default(),
                    }))
                },
            )
            .await
    }

    /// Waits until a node satisfies `predicate`; returns its row.
    pub async fn await_node(
        &self,
        node_id: &str,
        predicate: impl Fn(&NodeRow) -> bool + Send,
        timeout: Duration,
    ) -> Result<NodeRow> {
        let shared = &self.shared;
        let last = std::sync::Mutex::new(None::<(NodeState, u64, String)>);
        shared
            .wait_for(
                timeout,
                || {
                    let seen = last.lock().map(|l| l.clone()).unwrap_or_default();
                    format!("node {node_id} (last state, applied generation, reason: {seen:?})")
                },
                || {
                    let row = shared
                        .store
                        .with(|c| nodes::get(c, node_id))?
                        .ok_or_else(|| Error::UnknownNode { node_id: node_id.to_string() })?;
                    if let Ok(mut l) = last.lock() {
                        *l = Some((row.state, row.applied_generation, row.reason.clone()));
                    }
                    Ok(predicate(&row).then_some(row))
                },
            )
            .await
    }

    /// Waits until a node is in `state`.
    pub async fn await_node_state(&self, node_id: &str, state: NodeState, timeout: Duration) -> Result<NodeRow> {
        self.await_node(node_id, |n| n.state == state, timeout).await
    }

    /// Waits until a node is adopted and has applied generation ≥ 1 (the
    /// contract's "adopted"); fails at once if it is rejected.
    pub async fn await_adopted(&self, node_id: &str, timeout: Duration) -> Result<NodeRow> {
        let row = self
            .await_node(
                node_id,
                |n| n.state == NodeState::Rejected || (n.state == NodeState::Adopted && n.applied_generation >= 1),
                timeout,
            )
            .await?;
        if row.state == NodeState::Rejected {
            return Err(Error::Rejected { node_id: row.id, reason: row.reason });
        }
        Ok(row)
    }

    /// A mark in the order of joins; nodes that join later are after it.
    pub async fn join_mark(&self) -> Result<JoinMark> {
        self.shared.store.with(nodes::last_seq).map(JoinMark)
    }

    /// The nodes that joined after `mark`.
    pub async fn nodes_joined_since(&self, mark: JoinMark) -> Result<Vec<NodeRow>> {
        self.shared.store.with(|c| nodes::after(c, mark.0))
    }

    /// Waits for the first node of `pool_id` that joined after `mark`.
    pub async fn await_new_node(&self, pool_id: &str, mark: JoinMark, timeout: Duration) -> Result<NodeRow> {
        let shared = &self.shared;
        shared
            .wait_for(
                timeout,
                || format!("a node to join pool {pool_id}"),
                || Ok(shared.store.with(|c| nodes::after(c, mark.0))?.into_iter().find(|n| n.pool_id == pool_id)),
            )
            .await
    }

    /// Waits until a node has a live session of epoch ≥ `min_epoch`; returns
    /// its row. Pass 0 for any session, or a previous epoch + 1 to wait for a
    /// reconnection.
    pub async fn await_session(&self, node_id: &str, min_epoch: u64, timeout: Duration) -> Result<NodeSessionRow> {
        let shared = &self.shared;
        shared
            .wait_for(
                timeout,
                || format!("a session of node {node_id} with epoch ≥ {min_epoch}"),
                || {
                    let Some(epoch) = shared.hub.live_epoch(node_id).filter(|e| *e >= min_epoch) else {
                        return Ok(None);
                    };
                    Ok(shared.store.with(|c| sessions::of_node(c, node_id))?.into_iter().find(|s| s.epoch == epoch))
                },
            )
            .await
    }

    /// The epoch of a node's live session, if it has one.
    pub fn live_epoch(&self, node_id: &str) -> Option<u64> {
        self.shared.hub.live_epoch(node_id)
    }

    /// Revokes every certificate of a node; a live session gets a
    /// RevocationNotice and is closed, and new sessions are refused.
    pub async fn revoke_node(&self, node_id: &str) -> Result<()> {
        let n = self.shared.store.with(|c| {
            if nodes::get(c, node_id)?.is_none() {
                return Err(Error::UnknownNode { node_id: node_id.to_string() });
            }
            certs::revoke_all(c, node_id, now_ms())
        })?;
        info!(node_id, certificates = n, "node revoked");
        self.shared.hub.send(node_id, Control::Revoke("the node's certificates were revoked".into()));
        self.shared.bump();
        Ok(())
    }

    /// Sends a frame as is into a node's live session (tests inject unsigned
    /// commands this way).
    pub async fn send_raw(&self, node_id: &str, frame: proto::GatewayFrame) -> Result<()> {
        if self.shared.hub.send(node_id, Control::Raw(Box::new(frame))) {
            Ok(())
        } else {
            Err(Error::NoSession { node_id: node_id.to_string() })
        }
    }

    /// A node.
    pub async fn node(&self, node_id: &str) -> Result<Option<NodeRow>> {
        self.shared.store.with(|c| nodes::get(c, node_id))
    }

    /// Every node, in join order.
    pub async fn nodes(&self) -> Result<Vec<NodeRow>> {
        self.shared.store.with(nodes::all)
    }

    /// A node's sessions.
    pub async fn node_sessions(&self, node_id: &str) -> Result<Vec<NodeSessionRow>> {
        self.shared.store.with(|c| sessions::of_node(c, node_id))
    }

    /// A node's certificates.
    pub async fn node_certs(&self, node_id: &str) -> Result<Vec<NodeCertRow>> {
        self.shared.store.with(|c| certs::of_node(c, node_id))
    }

    /// A node's commands.
    pub async fn commands(&self, node_id: &str) -> Result<Vec<CommandRow>> {
        self.shared.store.with(|c| command_rows::of_node(c, node_id))
    }

    /// A command.
    pub async fn command(&self, id: &str) -> Result<Option<CommandRow>> {
        self.shared.store.with(|c| command_rows::get(c, id))
    }

    /// The states a node reported for a command.
    pub async fn command_updates(&self, id: &str) -> Result<Vec<CommandUpdateRow>> {
        self.shared.store.with(|c| command_rows::updates(c, id))
    }

    /// A node's verified inventory sections.
    pub async fn inventory(&self, node_id: &str) -> Result<Vec<InventoryRow>> {
        self.shared.store.with(|c| inventory::of_node(c, node_id))
    }

    /// A node's specs.
    pub async fn node_specs(&self, node_id: &str) -> Result<Vec<NodeSpecRow>> {
        self.shared.store.with(|c| specs::of_node(c, node_id))
    }

    /// Books `gpus` free GPUs of an adopted node (from its `gpus` inventory
    /// section) as a hold in a new spec generation sent to the node; returns
    /// the reservation id (also the hold's `allocation_id`). It turns
    /// `active` on the node's signed AllocationBound.
    pub async fn reserve(&self, node_id: &str, gpus: u32) -> Result<String> {
        crate::reservations::reserve(&self.shared, node_id, gpus)
    }

    /// Withdraws a pending or active reservation's hold in a new spec
    /// generation (returned); it is `released` on the node's
    /// AllocationReleased.
    pub async fn release(&self, reservation_id: &str) -> Result<u64> {
        crate::reservations::release(&self.shared, reservation_id)
    }

    /// A reservation.
    pub async fn reservation(&self, reservation_id: &str) -> Result<Option<ReservationRow>> {
        self.shared.store.with(|c| reservation_rows::get(c, reservation_id))
    }

    /// A node's reservations, oldest first.
    pub async fn reservations(&self, node_id: &str) -> Result<Vec<ReservationRow>> {
        self.shared.store.with(|c| reservation_rows::of_node(c, node_id))
    }

    /// Waits until a reservation is in `state`; fails at once when it ended
    /// in another state (`failed`, say, when `active` is awaited).
    pub async fn await_reservation(
        &self,
        reservation_id: &str,
        state: ReservationState,
        timeout: Duration,
    ) -> Result<ReservationRow> {
        let shared = &self.shared;
        let last = std::sync::Mutex::new(None::<(ReservationState, String)>);
        let row = shared
            .wait_for(
                timeout,
                || {
                    let seen = last.lock().map(|l| l.clone()).unwrap_or_default();
                    format!("reservation {reservation_id} to be {state} (last state, refusal: {seen:?})")
                },
                || {
                    let row = shared
                        .store
                        .with(|c| reservation_rows::get(c, reservation_id))?
                        .ok_or_else(|| Error::UnknownReservation { reservation_id: reservation_id.to_string() })?;
                    if let Ok(mut l) = last.lock() {
                        *l = Some((row.state, row.last_refusal.clone()));
                    }
                    Ok((row.state == state || row.state.is_terminal()).then_some(row))
                },
            )
            .await?;
        if row.state != state {
            return Err(Error::ReservationEnded { reservation_id: row.id, state: row.state, reason: row.reason });
        }
        Ok(row)
    }

    /// The release keys' pins, threshold and lowest sequence: what bcd's
    /// `[update]` section pins.
    pub fn release_keys(&self) -> UpdatePins {
        crate::releases::pins(&self.shared)
    }

    /// Publishes a release: its artifacts (`(os, arch, bytes)`) are served
    /// at `GET /releases/<version>/bcd-<os>-<arch>` on the HTTP listener and
    /// its manifest, signed by every release key, at
    /// `GET /releases/<version>/manifest.dsse.json`.
    pub async fn publish_release(
        &self,
        version: &str,
        sequence: u64,
        artifacts: &[(&str, &str, &[u8])],
    ) -> Result<Release> {
        crate::releases::publish(&self.shared, version, sequence, artifacts)
    }

    /// A published release.
    pub async fn release_info(&self, version: &str) -> Result<Release> {
        crate::releases::get(&self.shared, version)
    }

    /// The artifacts of a published release (without their bytes).
    pub async fn release_artifacts(&self, version: &str) -> Result<Vec<ReleaseArtifactRow>> {
        self.shared.store.with(|c| release_rows::artifacts(c, version))
    }

    /// A release's manifest signed as `options` say: fewer keys, another
    /// sequence, a wrong digest (the published manifest by default).
    pub async fn release_manifest(&self, version: &str, options: &ManifestOptions) -> Result<pki::dsse::Envelope> {
        crate::releases::manifest_with(&self.shared, version, options)
    }

    /// Enqueues a `daemon.upgrade` of a node to a published release (params
    /// `{"manifest": <the signed manifest, DSSE JSON>}`); returns the command id.
    pub async fn rollout_upgrade(&self, node_id: &str, version: &str) -> Result<String> {
        self.rollout_upgrade_with(node_id, version, &ManifestOptions::default()).await
    }

    /// Like [`DevStack::rollout_upgrade`] with a manifest signed as
    /// `options` say (to test bcd's refusals).
    pub async fn rollout_upgrade_with(
        &self,
        node_id: &str,
        version: &str,
        options: &ManifestOptions,
    ) -> Result<String> {
        crate::releases::rollout(&self.shared, node_id, version, options)
    }

    /// Waits until a node has a live session whose Hello reported
    /// `version` (a self-update confirmed by its Welcome); returns its row.
    pub async fn await_daemon_version(
        &self,
        node_id: &str,
        version: &str,
        timeout: Duration,
    ) -> Result<NodeSessionRow> {
        let shared = &self.shared;
        let last = std::sync::Mutex::new(String::new());
        shared
            .wait_for(
                timeout,
                || {
                    let seen = last.lock().map(|l| l.clone()).unwrap_or_default();
                    format!("node {node_id} to run {version} (last session's version {seen:?})")
                },
                || {
                    let sessions = shared.store.with(|c| sessions::of_node(c, node_id))?;
                    if let (Some(s), Ok(mut l)) = (sessions.last(), last.lock()) {
                        l.clone_from(&s.daemon_version);
                    }
                    let Some(epoch) = shared.hub.live_epoch(node_id) else { return Ok(None) };
                    Ok(sessions.into_iter().find(|s| s.epoch == epoch && s.daemon_version == version))
                },
            )
            .await
    }

    /// Adds an entry to the TPM attestor's allow-list.
    pub fn allow_tpm(&self, entry: TpmAllow) -> Result<()> {
        self.shared.tpm.as_ref().ok_or(Error::NoTpmAttestor)?.allow(entry);
        Ok(())
    }

    /// A node's hardware bindings (`tpm-ek`).
    pub async fn node_bindings(&self, node_id: &str) -> Result<Vec<NodeBindingRow>> {
        self.shared.store.with(|c| bindings::of_node(c, node_id))
    }

    /// The node bound to a TPM's EK (`SHA-256` of its `TPMT_PUBLIC`).
    pub async fn node_by_ek(&self, ek_sha256: &[u8; 32]) -> Result<Option<NodeBindingRow>> {
        self.shared.store.with(|c| bindings::get(c, bindings::TPM_EK, &hex::encode(ek_sha256)))
    }

    /// A node's joins, oldest first (method, what was proved about its key).
    pub async fn node_joins(&self, node_id: &str) -> Result<Vec<NodeJoinRow>> {
        self.shared.store.with(|c| bindings::joins(c, node_id))
    }

    /// Shuts down gracefully: Drain to every session, then the servers stop.
    /// The store file (if any) can be opened by a new stack afterwards.
    pub async fn shutdown(mut self) -> Result<()> {
        let shared = self.shared.clone();
        let drain = Control::Drain {
            reason: "the dev stack is shutting down".into(),
            retry_after_ms: shared.settings.drain_retry_after_ms,
        };
        shared.start_draining();
        shared.hub.broadcast(&drain);
        let drained = shared
            .wait_for(SHUTDOWN_GRACE, || "sessions to drain".into(), || Ok(shared.hub.is_empty().then_some(())))
            .await;
        if drained.is_err() {
            warn!(sessions = shared.hub.len(), "devstack: sessions still open after the drain grace period");
        }
        let _ = self.stop.send(true);
        for task in std::mem::take(&mut self.tasks) {
            let abort = task.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, task).await.is_err() {
                warn!("devstack: a server did not stop in time; aborted");
                abort.abort();
            }
        }
        info!(gateway = %shared.settings.gateway_url, "devstack: stopped");
        Ok(())
    }
}

impl Drop for DevStack {
    fn drop(&mut self) {
        // A stack dropped without shutdown() stops at once.
        let _ = self.stop.send(true);
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A future that completes once `stop` turns true.
async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
