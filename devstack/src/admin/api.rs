//! The admin endpoint's wire types (docs/devstack.md, "The admin
//! endpoint"): what each route takes and answers, as JSON. The server
//! ([`super`]) and the client ([`super::client`]) share them, so the CLI
//! and the endpoint cannot disagree on a field.

use serde::{Deserialize, Serialize};

/// The version prefix of every route.
pub const PREFIX: &str = "/v1";

/// A refusal: the HTTP status says what kind, `code` is its stable code
/// (`proto/refusals.toml`), `error` says it for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, without the code.
    pub error: String,
    /// The stable code (`node-unknown`, `node-revoked`, …).
    #[serde(default)]
    pub code: String,
}

/// `GET /v1/stack`: what the stack is, with every URL `devstack serve`
/// prints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackInfo {
    /// The gateway URL nodes dial.
    pub gateway_url: String,
    /// Every live gateway's URL, this one first (several with `--gateways N`).
    pub gateway_urls: Vec<String>,
    /// The well-known document's URL.
    pub well_known_url: String,
    /// The WebSocket session's URL (a node's fallback transport).
    pub websocket_url: String,
    /// The OTLP/HTTP metrics receiver's URL.
    pub otlp_url: String,
    /// Where the published releases are served (`GET <url><version>/…`).
    pub releases_url: String,
    /// The admin endpoint's URL.
    pub admin_url: String,
    /// The name the serving certificate is checked for.
    pub server_name: String,
    /// The serving CA's pin.
    pub serving_ca_pin: String,
    /// The JoinService signing key's pin.
    pub join_signing_pin: String,
    /// The join-encryption key's pin.
    pub join_encryption_pin: String,
    /// Whether commands and specs are signed.
    pub signed_intent: bool,
    /// Whether the JoinService has a TPM attestor.
    pub tpm_attestor: bool,
    /// The pools.
    pub pools: Vec<PoolView>,
    /// How many nodes are in each state (state, count).
    pub nodes: Vec<(String, usize)>,
    /// How many nodes have a live session.
    pub connected: usize,
    /// The number of the last event (`seq`): `GET /v1/events?after=` it
    /// follows from now on.
    pub last_event_seq: u64,
}

/// A pool (`GET /v1/pools`, `GET /v1/pools/{pool}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolView {
    /// `pool_…`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The GPU count its acceptance check expects, if any.
    pub expect_gpus: Option<u32>,
    /// `diag.nvml` or `none`.
    pub acceptance: String,
    /// What its nodes are for: `gpu` or `vps-host`.
    #[serde(default)]
    pub kind: String,
    /// How many nodes it has.
    #[serde(default)]
    pub nodes: usize,
    /// Creation time.
    #[serde(default)]
    pub created_at_ms: i64,
}

/// One line of `devstack nodes`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// `node_…`.
    pub id: String,
    /// Its pool's id.
    pub pool_id: String,
    /// Its pool's name.
    pub pool: String,
    /// `joined`, `accepting`, `adopted`, `rejected`, or `revoked` (every
    /// certificate revoked, whatever it was before).
    pub state: String,
    /// Why (a rejection reason, say), or empty.
    pub reason: String,
    /// The hostname it claimed.
    pub hostname: String,
    /// The daemon version of its last Hello.
    pub daemon_version: String,
    /// The epoch of its live session, if it has one.
    pub session_epoch: Option<u64>,
    /// The spec generation it applied.
    pub applied_generation: u64,
    /// The latest spec generation the stack made for it.
    pub spec_generation: u64,
    /// The GPUs of its `gpus` inventory section, if it reported one.
    pub gpus: Option<u32>,
    /// Join time.
    pub created_at_ms: i64,
    /// Adoption time.
    pub adopted_at_ms: Option<i64>,
    /// When it was revoked, if it was.
    #[serde(default)]
    pub revoked_at_ms: Option<i64>,
}

/// `GET /v1/nodes/{node}`: a node and what the stack knows of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeDetail {
    /// The node.
    pub node: NodeSummary,
    /// Its sessions, the newest last (at most the last 10).
    pub sessions: Vec<SessionView>,
    /// Its certificates.
    pub certificates: Vec<CertView>,
    /// Its inventory sections.
    pub inventory: Vec<InventoryView>,
    /// Its section statuses.
    pub sections: Vec<SectionView>,
    /// Its commands, the newest last (at most the last 20).
    pub commands: Vec<CommandView>,
    /// Its reservations.
    pub reservations: Vec<ReservationView>,
}

/// A session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionView {
    /// Its epoch.
    pub epoch: u64,
    /// The daemon version of its Hello.
    pub daemon_version: String,
    /// The node's boot id.
    pub boot_id: String,
    /// When it was welcomed.
    pub connected_at_ms: i64,
    /// When it ended, if it did.
    pub disconnected_at_ms: Option<i64>,
}

/// A certificate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CertView {
    /// Its serial (hex).
    pub serial: String,
    /// The certified key's pin.
    pub spki_pin: String,
    /// notAfter.
    pub not_after_ms: i64,
    /// When it was revoked, if it was.
    pub revoked_at_ms: Option<i64>,
}

/// An inventory section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryView {
    /// `system`, `gpus`, `network`.
    pub name: String,
    /// Its SHA-256.
    pub sha256: String,
    /// When it was last reported.
    pub updated_at_ms: i64,
}

/// A section status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SectionView {
    /// The section.
    pub section: String,
    /// `applied`, `progressing`, `failed`, `unspecified`.
    pub state: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub message: String,
    /// The generation it is for.
    pub generation: u64,
}

/// `POST /v1/tokens`: a join token to mint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRequest {
    /// The pool, by id or name (default: the stack's default pool).
    pub pool: Option<String>,
    /// How many joins it allows.
    pub uses: u32,
    /// How long it works, in milliseconds.
    pub ttl_ms: u64,
}

/// A minted token: where the stack wrote it (mode 0600), never the token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenView {
    /// The token's row id.
    pub token_id: String,
    /// Its pool's id.
    pub pool_id: String,
    /// Its pool's name.
    pub pool: String,
    /// How many joins it allows.
    pub uses: u32,
    /// When it stops working.
    pub expires_at_ms: i64,
    /// The file holding the token (readable by its owner only).
    pub file: String,
}

/// `POST /v1/commands`: a command to enqueue.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandRequest {
    /// The node: its id, a unique prefix of it, or its unique hostname.
    pub node: String,
    /// The kind (`diag.nvml`, …). `daemon.upgrade` with params
    /// `{"version": V}` rolls out the published release V.
    pub kind: String,
    /// Its parameters (JSON).
    pub params: serde_json::Value,
}

/// `POST /v1/commands/{id}/wait`: how long to wait for the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitRequest {
    /// Milliseconds.
    pub timeout_ms: u64,
}

/// A command and where it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandView {
    /// `cmd_…`.
    pub id: String,
    /// The node.
    pub node_id: String,
    /// The kind.
    pub kind: String,
    /// `pending`, `delivered`, …, `succeeded`, `failed`, `expired`, `unsupported`.
    pub state: String,
    /// Whether the state is terminal.
    pub done: bool,
    /// The node's reason.
    pub reason: String,
    /// The verified result's output: JSON when it parses, else a string.
    pub output: Option<serde_json::Value>,
    /// Enqueue time.
    pub created_at_ms: i64,
    /// End time.
    pub finished_at_ms: Option<i64>,
    /// How many times it was sent.
    pub deliveries: u32,
}

/// `POST /v1/reservations`: GPUs to book, on a node or in a pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReserveRequest {
    /// The node (as for commands); empty with `pool`.
    #[serde(default)]
    pub node: String,
    /// How many GPUs.
    pub gpus: u32,
    /// The pool (name or id) whose placement picks the node, instead of `node`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// How long the reservation lasts before it ends itself (none: until released).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

/// A reservation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationView {
    /// `rsv_…`.
    pub id: String,
    /// The node.
    pub node_id: String,
    /// The GPU indexes held.
    pub gpu_indexes: Vec<u32>,
    /// `pending`, `active`, `releasing`, `released`, `failed`.
    pub state: String,
    /// The node's reason for a failure.
    pub reason: String,
    /// Why the last AllocationBound was refused, or empty.
    pub last_refusal: String,
    /// The spec generation that added the hold.
    pub generation: u64,
    /// The CDI devices the node bound.
    pub cdi_devices: Vec<String>,
}

/// `POST /v1/nodes/{node}/revoke`'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    /// The node.
    pub node_id: String,
    /// When it was revoked (now, or at its first revocation).
    pub revoked_at_ms: i64,
    /// How many certificates this request revoked.
    pub certificates: usize,
    /// Whether it was revoked before (nothing changed, no event, no notice).
    pub already_revoked: bool,
    /// Whether a live session got the RevocationNotice.
    pub session_notified: bool,
}

/// A join token as `GET /v1/tokens` lists it: never the token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSummary {
    /// `jt_…`.
    pub token_id: String,
    /// Its pool's id.
    pub pool_id: String,
    /// Its pool's name.
    pub pool: String,
    /// `valid`, `exhausted` or `expired`.
    pub state: String,
    /// How many joins used it.
    pub used: u32,
    /// How many it allows.
    pub uses: u32,
    /// When it stops working.
    pub expires_at_ms: i64,
    /// Creation time.
    pub created_at_ms: i64,
    /// The file the admin endpoint wrote it to, if it did and it is still there.
    pub file: Option<String>,
}

/// An instance (`GET /v1/instances`, `GET /v1/instances/{id}`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceView {
    /// `inst_…`.
    pub id: String,
    /// Its pool.
    pub pool_id: String,
    /// The host it is placed on, if any.
    pub node_id: Option<String>,
    /// `running`, `stopped` or `deleted`: what is asked of it.
    pub desired: String,
    /// Where it is (`pending`, `running`, `failed`, …).
    pub state: String,
    /// Why.
    pub reason: String,
    /// vCPUs.
    pub vcpus: u32,
    /// Memory, bytes.
    pub memory_bytes: u64,
    /// The runtime it asks for (`vm`, `container`, …).
    pub runtime: String,
    /// Creation time.
    pub created_at_ms: i64,
}

/// `GET /v1/nodes/{node}/console?rows=R&cols=C&term=T`: a console on the
/// node's shell over a WebSocket (docs/devstack.md, "The console route").
/// Binary messages carry the terminal's bytes both ways; the text messages
/// are these, as JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsoleControl {
    /// Client to endpoint: the caller's terminal changed size
    /// (`{"resize": {"rows": R, "cols": C}}`).
    #[serde(rename = "resize")]
    Resize {
        /// Rows.
        rows: u32,
        /// Columns.
        cols: u32,
    },
    /// Endpoint to client, last: the shell exited with this status
    /// (`{"exit": N}`).
    #[serde(rename = "exit")]
    Exit(i32),
    /// Endpoint to client, last: the console was refused or cut,
    /// `"<code>: <detail>"` (`{"closed": "tunnel-gone: …"}`).
    #[serde(rename = "closed")]
    Closed(String),
}

/// The console route's answer header naming the node the console is on.
pub const CONSOLE_NODE_HEADER: &str = "x-devstack-node-id";
/// The console route's answer header naming the tunnel.
pub const CONSOLE_TUNNEL_HEADER: &str = "x-devstack-tunnel-id";

/// `POST /v1/nodes/{node}/cordon`: why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CordonRequest {
    /// Why the node is cordoned (1 to 256 bytes, no control characters).
    pub reason: String,
}

/// A node's cordon, after `cordon` or `uncordon`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CordonView {
    /// The node.
    pub node_id: String,
    /// Whether it is cordoned now.
    pub cordoned: bool,
    /// Why (its first reason), when it is.
    pub reason: Option<String>,
    /// Whether this request changed it (a second cordon does not).
    pub changed: bool,
}

/// `POST /v1/nodes/{node}/ssh-cert`: a user certificate of the break-glass
/// SSH CA for a public key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshCertRequestBody {
    /// The principal it logs in as (one the node's access section allows).
    pub principal: String,
    /// Its validity (at most a day).
    pub ttl_ms: u64,
    /// The user's public key, an OpenSSH line.
    pub public_key: String,
    /// The addresses it may be used from (CIDRs); empty: anywhere.
    #[serde(default)]
    pub source_addresses: Vec<String>,
}

/// An issued SSH certificate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshCertView {
    /// The node.
    pub node_id: String,
    /// The certificate, an OpenSSH line.
    pub certificate: String,
    /// Its serial.
    pub serial: u64,
    /// Its key id.
    pub key_id: String,
    /// Valid from (Unix seconds).
    pub valid_after: u64,
    /// Valid until (Unix seconds).
    pub valid_before: u64,
}
