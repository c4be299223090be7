//! How to start a stack: [`DevStackOptions`] and the option types of its
//! parts (the listeners' connections, the tunnels, the TPM attestor, the
//! release keys). Plain data, read by the composition root and by the part
//! each one configures.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use pki::tpm::NodeKeyPolicy;
use sha2::{Digest, Sha256};

use crate::limits::NodeLimits;
use crate::store::StoreLocation;

/// The default number of release signatures bcd's `[update]` asks for.
pub const DEFAULT_THRESHOLD: u32 = 2;
/// How long a published manifest stays good by default (30 days).
pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(30 * 24 * 3600);

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
    pub limits: NodeLimits,
    /// The connection caps and deadlines of both listeners.
    pub connections: ConnectionOptions,
    /// This gateway's id among the gateways of its store (several share a
    /// PostgreSQL store; default `g1`).
    pub gateway_id: String,
    /// How long no gateway may hear from a node before the stack marks it
    /// unreachable (default 30 s; docs/devstack.md, "Several gateways").
    pub liveness_timeout: Duration,
    /// Whether nodes are told of this gateway (the well-known document's
    /// and the bcd configurations' lists of gateways; default true). A stack
    /// that only drives a control plane whose nodes use its other gateways
    /// (the harness's, beside gateway processes it kills) is not listed.
    pub listed: bool,
    /// How long one usage window of a booking is (default 60 s): each beat
    /// meters the windows that ended (docs/devstack.md, "Usage").
    pub usage_window: Duration,
    /// Whether every node's access section (generation 1 on) trusts the
    /// stack's break-glass SSH CA and names its sandbox CA, with the
    /// account `root` (docs/devstack.md, "SSH certificate authorities";
    /// default true). Without it nodes get no access section.
    pub ssh_cas: bool,
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
            release_threshold: DEFAULT_THRESHOLD,
            release_min_sequence: 1,
            release_expiry: DEFAULT_EXPIRY,
            tpm_attestor: None,
            tunnels: TunnelOptions::default(),
            limits: NodeLimits::default(),
            connections: ConnectionOptions::default(),
            gateway_id: DEFAULT_GATEWAY_ID.to_string(),
            ssh_cas: true,
            liveness_timeout: Duration::from_secs(30),
            listed: true,
            usage_window: Duration::from_secs(60),
        }
    }
}

/// The id of a stack's gateway when it is the only one.
pub const DEFAULT_GATEWAY_ID: &str = "g1";

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

/// The connection limits and deadlines of a stack's two listeners.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionOptions {
    /// Gateway connections held at once (15,000: room for 10,000 sessions
    /// and their renewals and tunnels under an open-file limit of 20,000).
    pub max_connections: usize,
    /// Gateway connections beyond the cap that are still answered, each
    /// request `Unavailable` `connection-limit` with a retry-after hint,
    /// before they are closed (64); beyond those a connection is closed at
    /// once.
    pub max_shed: usize,
    /// HTTP-side connections held at once (1,024); beyond the cap a
    /// connection is answered `503` `connection-limit` and closed.
    pub http_max_connections: usize,
    /// TLS handshakes of a listener in progress at once (256), first come
    /// first served: a connection takes a slot once its ClientHello has
    /// begun to arrive (a peer that sends nothing holds none) and gives it
    /// back when the handshake ends, or after 2 s (a peer that stalls holds
    /// it no longer).
    pub max_handshakes: usize,
    /// How long a client may take to finish its TLS handshake, its wait
    /// for a slot included (10 s).
    pub handshake_timeout: Duration,
    /// How long a connection may stay without an open request or stream
    /// (30 s).
    pub idle_timeout: Duration,
    /// How long a request may take to arrive and be answered, up to its
    /// response's headers (30 s; a Session's and a Tunnel's come at once).
    pub request_timeout: Duration,
    /// How often an HTTP/2 connection is PINGed (30 s) …
    pub keepalive_interval: Duration,
    /// … and how long the answer may take before it is dropped (20 s).
    pub keepalive_timeout: Duration,
    /// The retry-after hint of a shed connection (1 s).
    pub shed_retry_after: Duration,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        ConnectionOptions {
            max_connections: 15_000,
            max_shed: 64,
            http_max_connections: 1024,
            max_handshakes: 256,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(20),
            shed_retry_after: Duration::from_secs(1),
        }
    }
}

/// The tunnels' settings of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TunnelOptions {
    /// At most this many tunnels opening or open per node (default 4); the
    /// next console is refused `tunnel-limit`.
    pub max_per_node: usize,
    /// How long the node may take to dial Tunnel after an OpenTunnel
    /// (default 10 s) before the console ends `tunnel-timeout`.
    pub open_timeout: Duration,
    /// How long a minted exec ticket is valid (default 60 s).
    pub ticket_ttl: Duration,
}

impl Default for TunnelOptions {
    fn default() -> Self {
        TunnelOptions { max_per_node: 4, open_timeout: Duration::from_secs(10), ticket_ttl: Duration::from_secs(60) }
    }
}

/// Where the challenge's secret, nonce and ephemeral key come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ChallengeSource {
    /// The OS random number generator.
    #[default]
    Os,
    /// Derived from a fixture seed and label, so that a recorded answer
    /// (`testdata/tpm/answer.json`) matches. Test-only: every challenge is
    /// the same.
    Seeded {
        /// The seed (`bc-interop-v1`).
        seed: String,
        /// The label (`tpm/challenge`).
        label: String,
    },
}

/// One allow-list entry: an EK (by `SHA-256` of its `TPMT_PUBLIC`, or any
/// EK that chains to the roots) and the pool (id or name) it joins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpmAllow {
    /// The EK's `SHA-256(TPMT_PUBLIC)`; `None` matches every EK.
    pub ek_sha256: Option<[u8; 32]>,
    /// The pool, by id or by name (resolved at join time).
    pub pool: String,
}

impl TpmAllow {
    /// Allows the EK whose `TPMT_PUBLIC` is `ek_public` into `pool`.
    pub fn ek(ek_public: &[u8], pool: impl Into<String>) -> Self {
        TpmAllow { ek_sha256: Some(Sha256::digest(ek_public).into()), pool: pool.into() }
    }

    /// Allows every EK certified by the roots into `pool`.
    pub fn any(pool: impl Into<String>) -> Self {
        TpmAllow { ek_sha256: None, pool: pool.into() }
    }
}

/// The TPM attestor of a stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TpmAttestorOptions {
    /// The EK roots (DER): the manufacturers whose EK certificates are trusted.
    pub ek_roots: Vec<Vec<u8>>,
    /// The `nodeKey` policy.
    pub node_key: NodeKeyPolicy,
    /// The allow-list (more entries with [`crate::DevStack::allow_tpm`]).
    pub allow: Vec<TpmAllow>,
    /// How long a challenge waits for its round 2.
    pub session_ttl: Duration,
    /// Where challenges draw their randomness.
    pub challenge: ChallengeSource,
}

impl TpmAttestorOptions {
    /// An attestor trusting `ek_roots`, with policy `node_key`, an empty
    /// allow-list, a 60-second round 2 deadline and OS randomness.
    pub fn new(ek_roots: Vec<Vec<u8>>, node_key: NodeKeyPolicy) -> Self {
        TpmAttestorOptions {
            ek_roots,
            node_key,
            allow: Vec::new(),
            session_ttl: Duration::from_secs(60),
            challenge: ChallengeSource::Os,
        }
    }
}

/// Where the stack's release keys come from.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum ReleaseKeys {
    /// Two Ed25519 keys generated at first start and kept in the store.
    #[default]
    Generated,
    /// These Ed25519 secret keys (32-byte seeds), in order; not stored.
    Given(Vec<[u8; 32]>),
}

impl ReleaseKeys {
    /// The keys `release/0` … `release/{count-1}` derived from a fixture seed
    /// (`testdata/release` uses the seed `bc-interop-v1` and two keys).
    pub fn from_seed(seed: &str, count: usize) -> Self {
        ReleaseKeys::Given((0..count).map(|i| pki::keys::ed25519(seed, &format!("release/{i}")).to_bytes()).collect())
    }
}

impl std::fmt::Debug for ReleaseKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret keys themselves.
        match self {
            ReleaseKeys::Generated => f.write_str("Generated"),
            ReleaseKeys::Given(keys) => write!(f, "Given({} keys)", keys.len()),
        }
    }
}
