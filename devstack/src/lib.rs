//! The dev control plane (docs/devstack.md): a JoinService (token and TPM
//! joins) and a gateway (tonic over our own rustls acceptor, mTLS), a SQLite
//! store with migrations, adoption, GPU reservations, VPS instances
//! (placement, volumes, the secret broker, workload tokens), releases and
//! self-update, the well-known document and release downloads, an HTTPS
//! listener (the Session as a WebSocket, renewal, the OTLP receiver), run
//! in-process by tests ([`DevStack`]) or by the `devstack serve` binary.
//!
//! The protocol contract it implements is docs/protocol.md, "The agent
//! protocol". Every cryptographic object comes from `pki`.

pub mod admin;
mod adoption;
mod capabilities;
mod changes;
pub mod chaos;
pub mod client;
mod clock;
mod cluster;
mod commands;
mod compose;
pub mod config;
mod connections;
mod cordon;
mod error;
mod events;
mod fleet;
mod frames;
mod gateway;
mod http;
mod https;
mod hub;
mod ids;
mod instances;
pub mod invariants;
mod inventory;
mod issuance;
mod join;
mod keys;
mod ledger;
mod limits;
mod listen;
mod log_capture;
mod log_escape;
mod nodes;
mod options;
mod otlp;
mod placement;
mod policy;
mod pool_reservations;
mod pools;
mod releases;
mod reservation_ends;
mod reservations;
mod secrets;
mod sections;
mod shared;
mod spec;
mod ssh_ca;
mod stack;
pub mod status;
/// The store: every row type and the seam reads and writes go through.
pub(crate) use devstack_store as store;
mod tickets;
mod tls;
mod tpm;
mod trust;
mod tunnels;
mod view;
mod workload;

pub use clock::set_offset_ms as set_clock_offset_ms;
pub use commands::{Batch, BatchCommand, BatchSpec, CommandOptions, CommandOutcome, Signing};
pub use config::BcdConfigPaths;
pub use error::{Error, Result};
pub use events::{EventSubscription, Published, RECENT, Received, StackEvent};
pub use gateway::limit::MAX_MESSAGE_BYTES;
pub use http::WELL_KNOWN_PATH;
pub use hub::Transport;
pub use instances::{InstanceRequest, UNSCHEDULABLE};
pub use keys::Pins;
pub use limits::NodeLimits;
pub use listen::raise_open_file_limit;
pub use log_capture::LogCapture;
pub use log_escape::EscapedFields;
pub use nodes::{JoinMark, Revocation};
pub use options::{
    ChallengeSource, ConnectionOptions, DevStackOptions, ReleaseKeys, TpmAllow, TpmAttestorOptions, TunnelOptions,
};
pub use otlp::{Encoding as OtlpEncoding, OtlpExport, point_attribute, point_value};
pub use placement::{FILTERS, Filter, Host, Request as PlacementRequest, Room};
pub use policy::{HUGEPAGES_UNIT, HugePageSize, HugePages, MODULES_UNIT, PoolPolicy};
pub use pools::{Acceptance, KIND_GPU, KIND_VPS_HOST, PoolKind, PoolSpec};
pub use releases::{ManifestOptions, Release, UPGRADE_KIND, UpdatePins};
pub use reservations::{ALLOCATION_GENERATION, ALLOCATION_MISMATCH, Binding, ReservationRequest};
pub use spec::SpecUpdate;
pub use ssh_ca::{SshCert, SshCertRequest};
pub use stack::DevStack;
pub use status::RETRY_AFTER_MS;
pub use store::StoreLocation;
pub use store::cordons::CordonRow;
pub use store::rows::{CommandFact, FleetFacts, LivenessMark, ReservationFact, SessionFact, SpecDelivery, UsageWindow};
pub use store::rows::{
    CommandRow, CommandStatus, CommandUpdateRow, FleetCounts, GatewayRow, InstanceDesired, InstanceRow, InstanceState,
    InventoryRow, JoinMethod, JoinTokenRow, NodeBindingRow, NodeCertRow, NodeJoinRow, NodeKeyLevel, NodeLabelRow,
    NodeRow, NodeSessionRow, NodeSpecRow, NodeState, PoolRow, ReleaseArtifactRow, ReleaseCause, ReservationRow,
    ReservationState, SectionState, SectionStatus, VolumeRow, VolumeState,
};
pub use tls::{ALPN_H2, ALPN_HTTP1};
pub use tpm::{TPM_NOT_ALLOWED, TPM_SESSION_EXPIRED, TPM_SESSION_UNKNOWN};
pub use trust::IntentPublicKeys;
pub use tunnels::{
    Console, ConsoleEnd, ConsoleEvent, ConsoleOptions, ConsoleReader, ConsoleSize, ConsoleWriter, TicketChoice,
};
pub use view::StackView;
pub use workload::{TOKEN_TTL_S, issuer as workload_issuer};

/// The name the gateway's serving certificate is checked for.
pub const SERVER_NAME: &str = "gw.dev.local";
/// The default SPIFFE trust domain (the fixtures' domain).
pub const TRUST_DOMAIN: &str = "compute.dev.local";
