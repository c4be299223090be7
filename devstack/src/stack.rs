//! `DevStack`: the in-process dev control plane, in the spirit of Tailscale's
//! testcontrol, and the whole of its public API in one place. Every method
//! is a one-liner over the layers below (the domain modules, the one
//! consistent read [`DevStack::view`] and the one wait
//! [`DevStack::await_until`]); none of them names `DevStack`. Reads are
//! synchronous; what writes or waits is `async`. `compose` starts and stops
//! the stack.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::commands::{self, Batch, BatchSpec, CommandOptions, CommandOutcome};
use crate::compose::Running;
use crate::config::{self, BcdConfigPaths};
use crate::error::Result;
use crate::events::{EventSubscription, Published};
use crate::hub::Transport;
use crate::instances::{self, InstanceRequest, volumes};
use crate::invariants::{self, AgentFacts, Facts, Heard, Thresholds, Violation};
use crate::keys::Pins;
use crate::nodes::{self, JoinMark, Revocation};
use crate::options::{DevStackOptions, TpmAllow};
use crate::otlp::{self, OtlpExport};
use crate::pools::{self, PoolSpec};
use crate::releases::{self, ManifestOptions, Release, UpdatePins};
use crate::reservations::{self, ReservationRequest};
use crate::spec::{self, SpecUpdate};
use crate::ssh_ca::{self, SshCert, SshCertRequest};
use crate::store::cordons::CordonRow;
use crate::store::rows::{
    CommandRow, CommandUpdateRow, FleetCounts, FleetFacts, InstanceDesired, InstanceRow, InstanceState, InventoryRow,
    JoinTokenRow, NodeBindingRow, NodeCertRow, NodeJoinRow, NodeLabelRow, NodeRow, NodeSessionRow, NodeSpecRow,
    NodeState, PoolRow, ReleaseArtifactRow, ReleaseCause, ReservationRow, ReservationState, SectionStatus, VolumeRow,
    VolumeState,
};
use crate::trust::{self, IntentPublicKeys};
use crate::tunnels::{self, Console, ConsoleOptions, ConsoleSize};
use crate::view::StackView;
use crate::{cordon, http, https, pool_reservations, secrets, tpm};

/// A running dev stack.
pub struct DevStack {
    run: Running,
}

/// Starting, stopping, and what the stack itself is.
impl DevStack {
    /// Starts a stack: opens the store (migrations), loads or creates its
    /// keys, and serves the gateway (TLS), the HTTPS listener and the HTTP
    /// side.
    pub async fn start(options: DevStackOptions) -> Result<DevStack> {
        Ok(DevStack { run: Running::start(options).await? })
    }

    /// Shuts down gracefully: the listeners close (a node that redials is
    /// refused at connect), Drain goes to every session, then the servers
    /// stop. The store file (if any) can be opened by a new stack afterwards.
    pub async fn shutdown(self) -> Result<()> {
        self.run.shutdown().await
    }

    /// The options the stack was started with.
    pub fn options(&self) -> &DevStackOptions {
        &self.run.shared.settings.options
    }

    /// Options to start this stack again on the same store and ports.
    pub fn restart_options(&self) -> DevStackOptions {
        let (gateway_port, http_port, https_port) =
            (self.run.gateway_addr.port(), self.run.http_addr.port(), self.run.https_addr.port());
        DevStackOptions { gateway_port, http_port, https_port, ..self.options().clone() }
    }

    /// The gateway URL nodes dial (`https://host:port`).
    pub fn gateway_url(&self) -> &str {
        &self.run.shared.settings.gateway_url
    }

    /// The gateway's listening address.
    pub fn gateway_addr(&self) -> SocketAddr {
        self.run.gateway_addr
    }

    /// The HTTP side's base URL (`http://host:port`).
    pub fn http_url(&self) -> String {
        format!("http://{}", self.run.http_addr)
    }

    /// The HTTPS listener's base URL as nodes reach it (`https://host:port`).
    pub fn https_url(&self) -> &str {
        &self.run.shared.settings.https_base_url
    }

    /// The HTTPS listener's address.
    pub fn https_addr(&self) -> SocketAddr {
        self.run.https_addr
    }

    /// The WebSocket session's URL (`wss://host:port/v1/session`), bcd's
    /// `[websocket] url`.
    pub fn websocket_url(&self) -> String {
        https::ws::url(&self.run.shared.settings.https_base_url)
    }

    /// The URL of the well-known document.
    pub fn well_known_url(&self) -> String {
        format!("{}{}", self.http_url(), http::WELL_KNOWN_PATH)
    }

    /// The well-known document, as served.
    pub fn well_known(&self) -> serde_json::Value {
        http::well_known(&self.run.shared)
    }

    /// The pins a node needs.
    pub fn pins(&self) -> Pins {
        self.run.shared.keys.pins()
    }

    /// The trust domain.
    pub fn trust_domain(&self) -> &str {
        &self.options().trust_domain
    }

    /// The server name the serving certificate is checked for (`gw.dev.local`).
    pub fn server_name(&self) -> &'static str {
        crate::SERVER_NAME
    }

    /// The serving CA certificate (DER).
    pub fn serving_ca_der(&self) -> &[u8] {
        &self.run.shared.keys.serving_ca_der
    }

    /// The node CA certificate (DER).
    pub fn node_ca_der(&self) -> &[u8] {
        &self.run.shared.keys.node_ca_der
    }

    /// The public join-signing key (verifies JoinResponses).
    pub fn join_signing_key(&self) -> pki::PublicKey {
        pki::Signer::public_key(&self.run.shared.keys.join_signing)
    }

    /// The public join-encryption key (seals join tokens).
    pub fn join_encryption_key(&self) -> p256::PublicKey {
        self.run.shared.keys.join_encryption.public_key()
    }

    /// Writes a ready bcd `config.toml` and `join-encryption.jwk` into `dir`,
    /// with `data_dir` as bcd's data directory.
    pub async fn write_bcd_config(&self, dir: &Path, data_dir: &Path) -> Result<BcdConfigPaths> {
        config::write_for(&self.run.shared, dir, data_dir, None, None)
    }

    /// Like [`DevStack::write_bcd_config`], the node dialing `gateway_urls`
    /// in that order (a fault proxy's addresses in front of this stack's
    /// gateways).
    pub fn write_bcd_config_via(&self, dir: &Path, data_dir: &Path, gateway_urls: &[String]) -> Result<BcdConfigPaths> {
        config::write_via(&self.run.shared, dir, data_dir, gateway_urls)
    }

    /// Like [`DevStack::write_bcd_config`], with an `[update]` section
    /// pinning `update` ([`DevStack::release_keys`] or a changed copy).
    pub async fn write_bcd_config_with(
        &self,
        dir: &Path,
        data_dir: &Path,
        update: Option<&UpdatePins>,
    ) -> Result<BcdConfigPaths> {
        config::write_for(&self.run.shared, dir, data_dir, None, update)
    }

    /// Like [`DevStack::write_bcd_config_with`], with `[websocket] url` set
    /// to this stack's WebSocket session: the node falls back to it when its
    /// gRPC dial fails (what `devstack serve` writes).
    pub async fn write_bcd_config_with_websocket(
        &self,
        dir: &Path,
        data_dir: &Path,
        update: Option<&UpdatePins>,
    ) -> Result<BcdConfigPaths> {
        config::write_for(&self.run.shared, dir, data_dir, Some(self.websocket_url()), update)
    }
}

/// Reading and waiting.
impl DevStack {
    /// One consistent read of the stack: `read` sees the store and the live
    /// sessions at one instant (it must not call back into the stack).
    pub fn view<T>(&self, read: impl FnOnce(&StackView<'_>) -> T) -> Result<T> {
        self.run.shared.view(read)
    }

    /// Waits until `until` returns `Some` (re-checked on every change of the
    /// store or of the live sessions), for at most `timeout`; returns its
    /// value. `what` names the wait in the timeout error, with what
    /// [`StackView::note`] recorded last. A condition that can fail returns
    /// `Some(Err(…))` and the caller flattens it.
    pub async fn await_until<T>(
        &self,
        what: impl Into<String>,
        timeout: Duration,
        until: impl FnMut(&StackView<'_>) -> Option<T> + Send,
    ) -> Result<T> {
        self.run.shared.await_until(what, timeout, until).await
    }

    /// Subscribes to the stack's events: the kept ones numbered after
    /// `after` (0: every kept one), then each new one as it happens.
    pub fn events(&self, after: u64) -> EventSubscription {
        self.run.shared.ledger.events().subscribe(after)
    }

    /// The last events the stack kept (at most [`crate::RECENT`]), oldest first.
    pub fn recent_events(&self) -> Vec<Arc<Published>> {
        self.run.shared.ledger.events().recent()
    }

    /// The fleet's counts.
    pub fn fleet(&self) -> Result<FleetCounts> {
        self.view(|v| v.fleet())
    }

    /// How many sessions are live: [`FleetCounts::sessions`] alone, read
    /// without the store.
    pub fn live_sessions(&self) -> u64 {
        self.run.shared.hub.len() as u64
    }
}

/// Pools and join tokens.
impl DevStack {
    /// Creates a pool; returns its id.
    pub async fn create_pool(&self, spec: PoolSpec) -> Result<String> {
        pools::create_pool(&self.run.shared, spec)
    }

    /// Every pool.
    pub fn pools(&self) -> Result<Vec<PoolRow>> {
        self.view(|v| v.pools())
    }

    /// A pool by name.
    pub fn pool_by_name(&self, name: &str) -> Result<Option<PoolRow>> {
        self.view(|v| v.pool_by_name(name))
    }

    /// Mints a join token for a pool; returns the secret token. Only its
    /// SHA-256 is stored, and it is never logged.
    pub async fn mint_join_token(&self, pool_id: &str, max_uses: u32, ttl: Duration) -> Result<String> {
        pools::mint_join_token(&self.run.shared, pool_id, max_uses, ttl)
    }

    /// The join tokens of a pool (hashes and counters only).
    pub fn join_tokens(&self, pool_id: &str) -> Result<Vec<JoinTokenRow>> {
        self.view(|v| v.join_tokens(pool_id))
    }
}

/// Nodes and their sessions.
impl DevStack {
    /// A node.
    pub fn node(&self, node_id: &str) -> Result<Option<NodeRow>> {
        self.view(|v| v.node(node_id))
    }

    /// Every node, in join order.
    pub fn nodes(&self) -> Result<Vec<NodeRow>> {
        self.view(|v| v.nodes())
    }

    /// A mark in the order of joins; nodes that join later are after it.
    pub fn join_mark(&self) -> Result<JoinMark> {
        self.view(|v| v.join_mark())
    }

    /// The nodes that joined after `mark`.
    pub fn nodes_joined_since(&self, mark: JoinMark) -> Result<Vec<NodeRow>> {
        self.view(|v| v.nodes_joined_since(mark))
    }

    /// A node's sessions.
    pub fn node_sessions(&self, node_id: &str) -> Result<Vec<NodeSessionRow>> {
        self.view(|v| v.node_sessions(node_id))
    }

    /// A node's certificates.
    pub fn node_certs(&self, node_id: &str) -> Result<Vec<NodeCertRow>> {
        self.view(|v| v.node_certs(node_id))
    }

    /// A node's verified inventory sections.
    pub fn inventory(&self, node_id: &str) -> Result<Vec<InventoryRow>> {
        self.view(|v| v.inventory(node_id))
    }

    /// A node's latest status of `section`.
    pub fn section_status(&self, node_id: &str, section: &str) -> Result<Option<SectionStatus>> {
        self.view(|v| v.section_status(node_id, section))
    }

    /// A node's latest section statuses, by section.
    pub fn section_statuses(&self, node_id: &str) -> Result<Vec<SectionStatus>> {
        self.view(|v| v.section_statuses(node_id))
    }

    /// The epoch of a node's live session, if it has one.
    pub fn live_epoch(&self, node_id: &str) -> Option<u64> {
        self.run.shared.hub.live_epoch(node_id)
    }

    /// The transport of a node's live session, if it has one.
    pub fn live_transport(&self, node_id: &str) -> Option<Transport> {
        self.run.shared.hub.live_transport(node_id)
    }

    /// Waits until a node satisfies `predicate`; returns its row. Fails at
    /// once for an unknown node.
    pub async fn await_node(
        &self,
        node_id: &str,
        predicate: impl Fn(&NodeRow) -> bool + Send,
        timeout: Duration,
    ) -> Result<NodeRow> {
        nodes::await_node(&self.run.shared, node_id, predicate, timeout).await
    }

    /// Waits until a node is in `state`.
    pub async fn await_node_state(&self, node_id: &str, state: NodeState, timeout: Duration) -> Result<NodeRow> {
        self.await_node(node_id, |n| n.state == state, timeout).await
    }

    /// Waits until a node is adopted and has applied generation ≥ 1 (the
    /// contract's "adopted"); fails at once if it is rejected.
    pub async fn await_adopted(&self, node_id: &str, timeout: Duration) -> Result<NodeRow> {
        nodes::await_adopted(&self.run.shared, node_id, timeout).await
    }

    /// Waits for the first node of `pool_id` that joined after `mark`.
    pub async fn await_new_node(&self, pool_id: &str, mark: JoinMark, timeout: Duration) -> Result<NodeRow> {
        nodes::await_new_node(&self.run.shared, pool_id, mark, timeout).await
    }

    /// Waits until a node has a live session of epoch ≥ `min_epoch`; returns
    /// its row. Pass 0 for any session, or a previous epoch + 1 to wait for a
    /// reconnection.
    pub async fn await_session(&self, node_id: &str, min_epoch: u64, timeout: Duration) -> Result<NodeSessionRow> {
        nodes::await_session(&self.run.shared, node_id, min_epoch, timeout).await
    }

    /// Revokes every certificate of a node; a live session gets a
    /// RevocationNotice and is closed, and new sessions, commands,
    /// reservations and consoles are refused (`node-revoked`). Revoking a
    /// revoked node changes nothing and says so.
    pub async fn revoke_node(&self, node_id: &str) -> Result<Revocation> {
        nodes::revoke(&self.run.shared, node_id)
    }

    /// Issues and stores another certificate of a known node for `csr_der`,
    /// as the stack would have issued it at `issued_at_ms` (24 hours of
    /// validity from a minute before): a drill's expired or not-yet-valid
    /// certificate. The node's other certificates stay as they are.
    pub async fn issue_node_cert_at(&self, node_id: &str, csr_der: &[u8], issued_at_ms: i64) -> Result<NodeCertRow> {
        nodes::issue_cert_at(&self.run.shared, node_id, csr_der, issued_at_ms)
    }

    /// Cordons a node: it takes no new reservation or instance
    /// (`node-cordoned`) and keeps what it runs; `node.cordoned` goes out.
    /// Says whether it was not cordoned already.
    pub async fn cordon(&self, node_id: &str, reason: &str) -> Result<bool> {
        cordon::cordon(&self.run.shared, node_id, reason)
    }

    /// Lifts a node's cordon; says whether it was cordoned.
    pub async fn uncordon(&self, node_id: &str) -> Result<bool> {
        cordon::uncordon(&self.run.shared, node_id)
    }

    /// A node's cordon, if it is cordoned.
    pub fn cordoned(&self, node_id: &str) -> Result<Option<CordonRow>> {
        self.view(|v| v.cordon(node_id))
    }

    /// Sends a frame as is into a node's live session (tests inject unsigned
    /// commands this way).
    pub async fn send_raw(&self, node_id: &str, frame: proto::GatewayFrame) -> Result<()> {
        nodes::send_raw(&self.run.shared, node_id, frame)
    }
}

/// Commands.
impl DevStack {
    /// Enqueues a command for a node (signed under signed intent); returns its id.
    pub async fn enqueue_command(
        &self,
        node_id: &str,
        kind: &str,
        params: serde_json::Value,
        opts: CommandOptions,
    ) -> Result<String> {
        commands::enqueue(&self.run.shared, node_id, kind, &params, &opts)
    }

    /// Enqueues a batch of destructive commands with a BatchApproval signed
    /// by `spec.approvals` of the stack's approvers (signed intent only).
    pub async fn enqueue_batch(&self, spec: BatchSpec) -> Result<Batch> {
        commands::enqueue_batch(&self.run.shared, &spec)
    }

    /// Waits until a command reaches a terminal state; fails at once for an
    /// unknown command.
    pub async fn await_command(&self, id: &str, timeout: Duration) -> Result<CommandOutcome> {
        commands::await_command(&self.run.shared, id, timeout).await
    }

    /// A command.
    pub fn command(&self, id: &str) -> Result<Option<CommandRow>> {
        self.view(|v| v.command(id))
    }

    /// A node's commands.
    pub fn commands(&self, node_id: &str) -> Result<Vec<CommandRow>> {
        self.view(|v| v.commands(node_id))
    }

    /// The states a node reported for a command.
    pub fn command_updates(&self, id: &str) -> Result<Vec<CommandUpdateRow>> {
        self.view(|v| v.command_updates(id))
    }
}

/// Desired state and signed intent.
impl DevStack {
    /// Publishes the next spec generation of a node (sections not in
    /// `update` carry over) and sends it to its live session; returns the
    /// generation.
    pub async fn publish_spec(&self, node_id: &str, update: SpecUpdate) -> Result<u64> {
        spec::publish(&self.run.shared, node_id, &update).map(|row| row.generation)
    }

    /// A node's specs.
    pub fn node_specs(&self, node_id: &str) -> Result<Vec<NodeSpecRow>> {
        self.view(|v| v.node_specs(node_id))
    }

    /// The command roots nodes receive (empty without signed intent).
    pub fn command_roots(&self) -> Vec<pki::PublicKey> {
        self.run.shared.keys.command_roots()
    }

    /// The approvers of the trust bundle, and the tunnels and workload token
    /// issuers (under signed intent).
    pub fn intent_public_keys(&self) -> Option<IntentPublicKeys> {
        trust::intent_public_keys(&self.run.shared)
    }

    /// The current trust bundle and its signed envelope (under signed
    /// intent): sequence 1, or the latest rotation the approvers signed that
    /// was published with [`DevStack::publish_spec`].
    pub fn trust_bundle(&self) -> Option<(proto::TrustBundle, pki::dsse::Envelope)> {
        self.run.shared.keys.intent.as_ref().map(|i| i.trust())
    }

    /// The current trust bundle with the next sequence number: the start of
    /// a rotation (signed intent only).
    pub fn next_trust_bundle(&self) -> Result<proto::TrustBundle> {
        trust::next_trust_bundle(&self.run.shared)
    }

    /// Signs a trust bundle with the first `approvals` of the stack's
    /// current approvers (signed intent only).
    pub fn sign_trust_bundle(&self, bundle: &proto::TrustBundle, approvals: usize) -> Result<pki::dsse::Envelope> {
        trust::sign_trust_bundle(&self.run.shared, bundle, approvals)
    }
}

/// SSH certificates.
impl DevStack {
    /// Issues a user certificate with the break-glass CA for a principal
    /// the node's access section allows (`ssh-principal` otherwise), valid
    /// for `request.ttl` (at most a day, `ssh-ttl`).
    pub async fn issue_ssh_cert(&self, node_id: &str, request: &SshCertRequest) -> Result<SshCert> {
        ssh_ca::issue(&self.run.shared, node_id, request)
    }

    /// Every node's access section of this stack: the break-glass and
    /// sandbox CAs and the account `root` (a test extends it).
    pub fn ssh_access_section(&self) -> proto::AccessSection {
        ssh_ca::default_access(&self.run.shared.keys)
    }
}

/// Reservations.
impl DevStack {
    /// Books `gpus` free GPUs of an adopted node (from its `gpus` inventory
    /// section) as a hold in a new spec generation sent to the node; returns
    /// the reservation id (also the hold's `allocation_id`). It turns
    /// `active` on the node's signed AllocationBound.
    pub async fn reserve(&self, node_id: &str, gpus: u32) -> Result<String> {
        self.reserve_with(node_id, ReservationRequest { gpus, ..ReservationRequest::default() }).await
    }

    /// Like [`DevStack::reserve`], with a booked share of the host (vCPUs,
    /// memory; refused `reservation-room` beyond what the node's held and
    /// releasing reservations leave) and a binding (`kubernetes` refused
    /// `binding-unsupported` on a pool without `policy.kubernetes`).
    pub async fn reserve_with(&self, node_id: &str, request: ReservationRequest) -> Result<String> {
        reservations::reserve(&self.run.shared, node_id, request, None)
    }

    /// Like [`DevStack::reserve_with`], for `duration`: the reservation ends
    /// itself then (its hold withdrawn, as by [`DevStack::release`]).
    pub async fn reserve_for(&self, node_id: &str, request: ReservationRequest, duration: Duration) -> Result<String> {
        let end = crate::clock::now_ms().saturating_add(duration.as_millis().min(i64::MAX as u128) as i64);
        reservations::reserve(&self.run.shared, node_id, request, Some(end))
    }

    /// Books a reservation in a pool (its id or name): placement picks the
    /// node (the most free GPUs that passes every check of a node's
    /// reservation) or refuses `reservation-unplaceable`, saying why of
    /// each node; with `duration` it ends itself then. Returns the
    /// reservation id and the node.
    pub async fn reserve_in_pool(
        &self,
        pool: &str,
        request: ReservationRequest,
        duration: Option<Duration>,
    ) -> Result<(String, String)> {
        pool_reservations::reserve_in_pool(&self.run.shared, pool, request, duration)
    }

    /// When a reservation ends itself (None: it lasts until released).
    pub fn reservation_end(&self, reservation_id: &str) -> Result<Option<i64>> {
        self.view(|v| v.reservation_end(reservation_id))
    }

    /// Withdraws a pending or active reservation's hold in a new spec
    /// generation (returned); it is `released` on the node's
    /// AllocationReleased.
    pub async fn release(&self, reservation_id: &str) -> Result<u64> {
        reservations::release(&self.run.shared, reservation_id, ReleaseCause::Tenant)
    }

    /// What the fleet invariants read of the store (docs/harness.md,
    /// "Fleet invariants"): a usage meter pass, then one snapshot.
    pub fn fleet_facts(&self) -> Result<FleetFacts> {
        invariants::read(&self.run.shared)
    }

    /// Checks the fleet invariants over the store's facts, what the agents'
    /// fake hardware recorded and what a fault proxy heard; the violations.
    pub fn check_invariants(&self, agents: AgentFacts, heard: Heard) -> Result<Vec<Violation>> {
        let facts = Facts { store: self.fleet_facts()?, agents, heard };
        Ok(invariants::check(&facts, Thresholds::default()))
    }

    /// A reservation.
    pub fn reservation(&self, reservation_id: &str) -> Result<Option<ReservationRow>> {
        self.view(|v| v.reservation(reservation_id))
    }

    /// A node's reservations, oldest first.
    pub fn reservations(&self, node_id: &str) -> Result<Vec<ReservationRow>> {
        self.view(|v| v.reservations(node_id))
    }

    /// Waits until a reservation is in `state`; fails at once when it ended
    /// in another state (`failed`, say, when `active` is awaited), or when
    /// no reservation has this id.
    pub async fn await_reservation(
        &self,
        reservation_id: &str,
        state: ReservationState,
        timeout: Duration,
    ) -> Result<ReservationRow> {
        reservations::await_reservation(&self.run.shared, reservation_id, state, timeout).await
    }
}

/// Releases and self-update.
impl DevStack {
    /// The release keys' pins, threshold and lowest sequence: what bcd's
    /// `[update]` section pins.
    pub fn release_keys(&self) -> UpdatePins {
        releases::pins(&self.run.shared)
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
        releases::publish(&self.run.shared, version, sequence, artifacts)
    }

    /// A published release.
    pub fn release_info(&self, version: &str) -> Result<Release> {
        releases::get(&self.run.shared, version)
    }

    /// The artifacts of a published release (without their bytes).
    pub fn release_artifacts(&self, version: &str) -> Result<Vec<ReleaseArtifactRow>> {
        self.view(|v| v.release_artifacts(version))
    }

    /// A release's manifest signed as `options` say: fewer keys, another
    /// sequence, a wrong digest, another expiry (the published manifest by
    /// default).
    pub fn release_manifest(&self, version: &str, options: &ManifestOptions) -> Result<pki::dsse::Envelope> {
        releases::manifest_with(&self.run.shared, version, options)
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
        releases::rollout(&self.run.shared, node_id, version, options)
    }

    /// Publishes the next spec generation of a node with a daemon section
    /// naming a published release (its signed manifest carried): bcd
    /// converges to it by the slots, swap and confirmation of
    /// `daemon.upgrade` and reports the section (docs/protocol.md,
    /// "Self-update"). Returns the generation.
    pub async fn converge_daemon(&self, node_id: &str, version: &str) -> Result<u64> {
        self.converge_daemon_with(node_id, version, &ManifestOptions::default()).await
    }

    /// Like [`DevStack::converge_daemon`] with a manifest signed as
    /// `options` say (to test bcd's refusals).
    pub async fn converge_daemon_with(&self, node_id: &str, version: &str, options: &ManifestOptions) -> Result<u64> {
        releases::converge_daemon(&self.run.shared, node_id, version, options)
    }

    /// Waits until a node has a live session whose Hello reported
    /// `version` (a self-update confirmed by its Welcome); returns its row.
    pub async fn await_daemon_version(
        &self,
        node_id: &str,
        version: &str,
        timeout: Duration,
    ) -> Result<NodeSessionRow> {
        releases::await_daemon_version(&self.run.shared, node_id, version, timeout).await
    }
}

/// The TPM attestor.
impl DevStack {
    /// Adds an entry to the TPM attestor's allow-list.
    pub fn allow_tpm(&self, entry: TpmAllow) -> Result<()> {
        tpm::allow(self.run.tpm.as_deref(), entry)
    }

    /// A node's hardware bindings (`tpm-ek`).
    pub fn node_bindings(&self, node_id: &str) -> Result<Vec<NodeBindingRow>> {
        self.view(|v| v.node_bindings(node_id))
    }

    /// The node bound to a TPM's EK (`SHA-256` of its `TPMT_PUBLIC`).
    pub fn node_by_ek(&self, ek_sha256: &[u8; 32]) -> Result<Option<NodeBindingRow>> {
        self.view(|v| v.node_by_ek(ek_sha256))
    }

    /// A node's joins, oldest first (method, what was proved about its key).
    pub fn node_joins(&self, node_id: &str) -> Result<Vec<NodeJoinRow>> {
        self.view(|v| v.node_joins(node_id))
    }
}

/// Consoles.
impl DevStack {
    /// Opens a console on a node's shell with a fresh exec ticket: the
    /// console's events say when the node opened it (or why not), carry
    /// the terminal's output, and end with the shell's exit status.
    pub async fn open_console(&self, node_id: &str, size: ConsoleSize) -> Result<Console> {
        self.open_console_with(node_id, ConsoleOptions { size, ..ConsoleOptions::default() }).await
    }

    /// Opens a console as `options` say (the ticket among them). Errors:
    /// no signed intent (no tunnels issuer), no live session, or
    /// [`crate::Error::Refused`] `tunnel-limit`.
    pub async fn open_console_with(&self, node_id: &str, options: ConsoleOptions) -> Result<Console> {
        tunnels::open_console_with(&self.run.shared, &self.run.tunnels, node_id, options)
    }

    /// How many tunnels of a node are opening or open now.
    pub fn open_tunnels(&self, node_id: &str) -> usize {
        self.run.tunnels.of_node(node_id)
    }
}

/// Telemetry.
impl DevStack {
    /// The OTLP/HTTP metrics endpoint as nodes reach it, on the HTTPS
    /// listener (`https://host:port/v1/metrics`): a node presents its
    /// certificate.
    pub fn otlp_url(&self) -> String {
        format!("{}{}", self.run.shared.settings.https_base_url, otlp::PATH)
    }

    /// The OTLP exports of a node the stack keeps (none when its store
    /// cannot be read: the error is logged).
    pub fn otlp_exports(&self, node_id: &str) -> Vec<Arc<OtlpExport>> {
        self.view(|v| v.otlp_exports(node_id)).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "otlp: the exports could not be read");
            Vec::new()
        })
    }

    /// Waits for an export of `node_id` for which `matches` holds (the first
    /// such, in the order received), for at most `timeout`.
    pub async fn await_export(
        &self,
        node_id: &str,
        timeout: Duration,
        matches: impl Fn(&OtlpExport) -> bool + Send + Sync,
    ) -> Result<Arc<OtlpExport>> {
        otlp::await_export(&self.run.shared, node_id, timeout, matches).await
    }
}

/// Instances, volumes and secrets.
impl DevStack {
    /// Creates an instance in a pool and places it on a host of the pool
    /// (unschedulable when none passes placement); returns its id.
    pub async fn create_instance(&self, pool_id: &str, request: InstanceRequest) -> Result<String> {
        instances::create(&self.run.shared, pool_id, request)
    }

    /// Deletes an instance (deleted once its host confirms the domain gone).
    pub async fn delete_instance(&self, instance_id: &str) -> Result<()> {
        instances::delete(&self.run.shared, instance_id)
    }

    /// Asks for an instance to run or to stop.
    pub async fn set_instance_state(&self, instance_id: &str, desired: InstanceDesired) -> Result<()> {
        instances::set_state(&self.run.shared, instance_id, desired)
    }

    /// An instance.
    pub fn instance(&self, instance_id: &str) -> Result<Option<InstanceRow>> {
        self.view(|v| v.instance(instance_id))
    }

    /// Every instance, oldest first.
    pub fn instances(&self) -> Result<Vec<InstanceRow>> {
        self.view(|v| v.instances())
    }

    /// A node's labels.
    pub fn node_labels(&self, node_id: &str) -> Result<Vec<NodeLabelRow>> {
        self.view(|v| v.node_labels(node_id))
    }

    /// Waits until an instance is in `state`; fails at once when it is
    /// deleted (and `deleted` is not awaited), or failed when `running` is.
    pub async fn await_instance_state(
        &self,
        instance_id: &str,
        state: InstanceState,
        timeout: Duration,
    ) -> Result<InstanceRow> {
        instances::await_instance_state(&self.run.shared, instance_id, state, timeout).await
    }

    /// Creates a volume of `size_bytes` on an adopted VPS host; returns its id.
    pub async fn create_volume(&self, node_id: &str, size_bytes: u64) -> Result<String> {
        volumes::create(&self.run.shared, node_id, size_bytes)
    }

    /// Grows a volume (a smaller size is refused).
    pub async fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<()> {
        volumes::resize(&self.run.shared, volume_id, size_bytes)
    }

    /// Deletes a volume no instance attaches (deleted once its host confirms).
    pub async fn delete_volume(&self, volume_id: &str) -> Result<()> {
        volumes::delete(&self.run.shared, volume_id)
    }

    /// A volume.
    pub fn volume(&self, volume_id: &str) -> Result<Option<VolumeRow>> {
        self.view(|v| v.volume(volume_id))
    }

    /// Waits until a volume is in `state`.
    pub async fn await_volume_state(
        &self,
        volume_id: &str,
        state: VolumeState,
        timeout: Duration,
    ) -> Result<VolumeRow> {
        volumes::await_volume_state(&self.run.shared, volume_id, state, timeout).await
    }

    /// Stores a secret (instance user data, say) and returns its reference;
    /// the value is never logged and reaches a node only sealed, for one of
    /// its instances.
    pub async fn put_secret(&self, value: &[u8]) -> Result<String> {
        secrets::put_secret(&self.run.shared, value)
    }
}
