//! The rows of pools, join tokens, nodes and what belongs to one node: its
//! certificates, sessions, joins, hardware bindings, inventory sections and
//! specs.

use std::fmt;
use std::str::FromStr;

/// The life of a node: joined, accepting (its acceptance command is out),
/// then adopted or rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeState {
    /// It joined and has not yet opened a session.
    Joined,
    /// Its acceptance check (`diag.nvml`) is running.
    Accepting,
    /// It passed the acceptance check and has a NodeSpec.
    Adopted,
    /// It failed the acceptance check; it is never adopted.
    Rejected,
}

impl NodeState {
    /// The value stored in `nodes.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Joined => "joined",
            NodeState::Accepting => "accepting",
            NodeState::Adopted => "adopted",
            NodeState::Rejected => "rejected",
        }
    }
}

impl FromStr for NodeState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "joined" => NodeState::Joined,
            "accepting" => NodeState::Accepting,
            "adopted" => NodeState::Adopted,
            "rejected" => NodeState::Rejected,
            other => return Err(format!("unknown node state {other:?}")),
        })
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A pool of nodes and its acceptance rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolRow {
    /// `pool_…`.
    pub id: String,
    /// A unique name.
    pub name: String,
    /// The GPU model nodes should have, if any.
    pub gpu_model: Option<String>,
    /// The GPU count `diag.nvml` must report, if any.
    pub expect_gpu_count: Option<u32>,
    /// The acceptance check: `diag.nvml`, or `none` (adopted on first session).
    pub acceptance: String,
    /// Creation time.
    pub created_at_ms: i64,
    /// What its nodes are for: `gpu` (the default) or `vps-host`.
    pub kind: String,
    /// Its policy as JSON (`{}`: none; `crate::policy::PoolPolicy`).
    pub policy: String,
}

/// A join token as stored: its SHA-256 only, never the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinTokenRow {
    /// `jt_…`.
    pub id: String,
    /// Lowercase hex SHA-256 of the token.
    pub token_sha256: String,
    /// The pool it joins nodes into.
    pub pool_id: String,
    /// How many joins it allows.
    pub max_uses: u32,
    /// How many joins used it.
    pub uses: u32,
    /// When it stops working.
    pub expires_at_ms: i64,
    /// Creation time.
    pub created_at_ms: i64,
}

/// A node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    /// The order of joins (a cursor for [`crate::JoinMark`]).
    pub seq: i64,
    /// `node_…`.
    pub id: String,
    /// Its pool.
    pub pool_id: String,
    /// Where it is in its life.
    pub state: NodeState,
    /// Why it is in that state (a rejection reason, say).
    pub reason: String,
    /// What it claimed at join and in its Hello.
    pub hostname: String,
    /// The daemon version of its last Hello (or join claims).
    pub daemon_version: String,
    /// Its claimed hardware id.
    pub hardware_id: String,
    /// The id of its acceptance command, once enqueued.
    pub acceptance_command_id: Option<String>,
    /// The spec generation it reports as applied.
    pub applied_generation: u64,
    /// The latest spec generation the stack made for it.
    pub spec_generation: u64,
    /// Join time.
    pub created_at_ms: i64,
    /// Adoption time.
    pub adopted_at_ms: Option<i64>,
    /// The epoch of its latest session (what fences an older one's writes).
    pub session_epoch: u64,
    /// Its home: the gateway its latest session opened on (empty before one).
    pub gateway_id: String,
    /// Since when (the store's clock) it is marked unreachable: no gateway
    /// heard from it for the liveness timeout. `None` while it is heard.
    pub unreachable_since_ms: Option<i64>,
}

/// A certificate issued to a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeCertRow {
    /// The node.
    pub node_id: String,
    /// The serial, lowercase hex of the DER integer bytes.
    pub serial: String,
    /// The pin of the certified key.
    pub spki_pin: String,
    /// The certificate.
    pub der: Vec<u8>,
    /// notBefore.
    pub not_before_ms: i64,
    /// notAfter.
    pub not_after_ms: i64,
    /// When it was revoked.
    pub revoked_at_ms: Option<i64>,
}

/// One session of a node: a Hello answered by a Welcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSessionRow {
    /// Row id.
    pub id: i64,
    /// The node.
    pub node_id: String,
    /// The Welcome's session epoch (per node, increasing).
    pub epoch: u64,
    /// The node's journal id.
    pub journal_id: String,
    /// The node's boot id.
    pub boot_id: String,
    /// The daemon version of the Hello.
    pub daemon_version: String,
    /// When the Welcome was sent.
    pub connected_at_ms: i64,
    /// When the stream ended.
    pub disconnected_at_ms: Option<i64>,
    /// The gateway it ran on.
    pub gateway_id: String,
}

/// One verified inventory section of a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InventoryRow {
    /// The node.
    pub node_id: String,
    /// `system`, `gpus` or `network`.
    pub name: String,
    /// Lowercase hex SHA-256 of `content`.
    pub sha256: String,
    /// The section's protobuf bytes.
    pub content: Vec<u8>,
    /// When it was last reported.
    pub updated_at_ms: i64,
}

/// A NodeSpec the stack made for a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpecRow {
    /// The node.
    pub node_id: String,
    /// Its generation (1, 2, …).
    pub generation: u64,
    /// The `NodeSpec` protobuf bytes.
    pub payload: Vec<u8>,
    /// The DSSE envelope sent (protobuf `Envelope` bytes).
    pub envelope: Vec<u8>,
    /// Creation time.
    pub created_at_ms: i64,
}

/// How a node joined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum JoinMethod {
    /// A sealed join token, one round.
    Token,
    /// TPM attestation, two rounds.
    Tpm,
}

impl JoinMethod {
    /// The value stored in `node_joins.method`.
    pub fn as_str(self) -> &'static str {
        match self {
            JoinMethod::Token => "token",
            JoinMethod::Tpm => "tpm",
        }
    }
}

impl FromStr for JoinMethod {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "token" => Ok(JoinMethod::Token),
            "tpm" => Ok(JoinMethod::Tpm),
            other => Err(format!("unknown join method {other:?}")),
        }
    }
}

/// What a node's key is, as far as its join proved: `tpm` (made in the TPM
/// and certified by the AK: the CSR's key), `certified` (the AK certified a
/// TPM key, the CSR's key is another), `any` (nothing proved; every token join).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeKeyLevel {
    /// The CSR's key is the AK-certified TPM key.
    Tpm,
    /// The AK certified a TPM key; the CSR's key may differ.
    Certified,
    /// Nothing is proved about the key.
    Any,
}

impl NodeKeyLevel {
    /// The value stored in `node_joins.node_key`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKeyLevel::Tpm => "tpm",
            NodeKeyLevel::Certified => "certified",
            NodeKeyLevel::Any => "any",
        }
    }
}

impl FromStr for NodeKeyLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "tpm" => Ok(NodeKeyLevel::Tpm),
            "certified" => Ok(NodeKeyLevel::Certified),
            "any" => Ok(NodeKeyLevel::Any),
            other => Err(format!("unknown node key level {other:?}")),
        }
    }
}

impl fmt::Display for NodeKeyLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One join of a node (a TPM node that rejoins after a reinstall has several).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeJoinRow {
    /// The node.
    pub node_id: String,
    /// Token or TPM.
    pub method: JoinMethod,
    /// What the join proved about the node key.
    pub node_key: NodeKeyLevel,
    /// The attestor's `nodeKey` policy at the time (`tpm`, `certified`,
    /// `any`), empty for a token join.
    pub policy: String,
    /// The serial of the certificate the join issued.
    pub serial: String,
    /// When.
    pub at_ms: i64,
}

/// A hardware identity bound to a node: for `tpm-ek`, `SHA-256` of the EK's
/// `TPMT_PUBLIC`, with the AK of the latest join (renewals are checked against it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeBindingRow {
    /// The node.
    pub node_id: String,
    /// `tpm-ek`.
    pub kind: String,
    /// Lowercase hex SHA-256 of the EK's `TPMT_PUBLIC`.
    pub sha256: String,
    /// The AK's `TPMT_PUBLIC` (of the latest join).
    pub ak_public: Vec<u8>,
    /// The AK's name (`0x000b || SHA-256(TPMT_PUBLIC)`).
    pub ak_name: Vec<u8>,
    /// The first join.
    pub created_at_ms: i64,
    /// The latest join.
    pub updated_at_ms: i64,
}
