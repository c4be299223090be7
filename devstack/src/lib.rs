//! The dev control plane (docs/devstack.md): a JoinService (token and TPM
//! joins) and a gateway (tonic over our own rustls acceptor, mTLS), a SQLite
//! store with migrations, adoption, GPU reservations, releases and
//! self-update, the well-known document and release downloads, run
//! in-process by tests ([`DevStack`]) or by the `devstack serve` binary.
//!
//! The protocol contract it implements is docs/protocol.md, "The agent
//! protocol". Every cryptographic object comes from `pki`.

mod adoption;
pub mod client;
mod clock;
mod commands;
pub mod config;
mod error;
mod fleet;
mod gateway;
mod http;
mod hub;
mod ids;
mod inventory;
mod issuance;
mod join;
mod keys;
mod limits;
mod listen;
mod nodes;
mod pools;
mod releases;
mod reservations;
mod secrets;
mod sections;
mod shared;
mod spec;
mod stack;
pub mod status;
mod store;
mod tls;
mod tpm;
mod trust;
mod tunnels;
mod view;
mod workload;

pub use commands::{Batch, BatchCommand, BatchSpec, CommandOptions, CommandOutcome, Signing};
pub use config::BcdConfigPaths;
pub use error::{Error, Result};
pub use fleet::FleetCounts;
pub use gateway::limit::MAX_MESSAGE_BYTES;
pub use http::WELL_KNOWN_PATH;
pub use limits::NodeLimits;
pub use nodes::JoinMark;
pub use pools::{Acceptance, PoolSpec};
pub use releases::{ManifestOptions, Release, ReleaseKeys, UPGRADE_KIND, UpdatePins};
pub use reservations::{ALLOCATION_GENERATION, ALLOCATION_MISMATCH};
pub use sections::{SectionState, SectionStatus};
pub use spec::SpecUpdate;
pub use stack::{DevStack, DevStackOptions, Pins};
pub use store::StoreLocation;
pub use store::rows::{
    CommandRow, CommandStatus, CommandUpdateRow, InventoryRow, JoinMethod, JoinTokenRow, NodeBindingRow, NodeCertRow,
    NodeJoinRow, NodeKeyLevel, NodeRow, NodeSessionRow, NodeSpecRow, NodeState, PoolRow, ReleaseArtifactRow,
    ReservationRow, ReservationState,
};
pub use tls::ALPN_H2;
pub use tpm::{
    ChallengeSource, TPM_NOT_ALLOWED, TPM_SESSION_EXPIRED, TPM_SESSION_UNKNOWN, TpmAllow, TpmAttestorOptions,
};
pub use trust::IntentPublicKeys;
pub use tunnels::{
    Console, ConsoleEnd, ConsoleEvent, ConsoleOptions, ConsoleReader, ConsoleSize, ConsoleWriter, TicketChoice,
    TunnelOptions,
};
pub use view::StackView;

/// The name the gateway's serving certificate is checked for.
pub const SERVER_NAME: &str = "gw.dev.local";
/// The default SPIFFE trust domain (the fixtures' domain).
pub const TRUST_DOMAIN: &str = "compute.dev.local";
