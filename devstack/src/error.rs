//! The errors of the dev stack library.
//!
//! Refusals on the wire are gRPC statuses (see `status`); this enum is what the
//! in-process API returns to a test or to the binary.

use std::path::PathBuf;

use proto::refusal::Code;

/// Why the dev stack could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store failed (a statement, a migration, a stored value that does
    /// not read back, its file).
    #[error(transparent)]
    Store(#[from] crate::store::Error),
    /// A persisted key or certificate of the stack cannot be read back.
    #[error("stored key {name}: {reason}")]
    StoredKey {
        /// The settings entry.
        name: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A cryptographic operation of `pki` failed.
    #[error("{context}: {source}")]
    Pki {
        /// What the stack was doing.
        context: &'static str,
        /// The `pki` refusal.
        source: pki::Error,
    },
    /// The TLS configuration could not be built.
    #[error("TLS configuration: {reason}")]
    Tls {
        /// rustls' complaint.
        reason: String,
    },
    /// A listening socket could not be bound.
    #[error("bind {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// No pool has this id.
    #[error("unknown pool {pool_id}")]
    UnknownPool {
        /// The pool id.
        pool_id: String,
    },
    /// No node has this id.
    #[error("unknown node {node_id}")]
    UnknownNode {
        /// The node id.
        node_id: String,
    },
    /// No command has this id.
    #[error("unknown command {command_id}")]
    UnknownCommand {
        /// The command id.
        command_id: String,
    },
    /// The node has no live session to send to.
    #[error("node {node_id} has no live session")]
    NoSession {
        /// The node id.
        node_id: String,
    },
    /// A wait reached its deadline.
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout {
        /// What was awaited (and its last observed state).
        what: String,
        /// How long the wait lasted.
        waited_ms: u64,
    },
    /// The node was rejected (so it will never be adopted).
    #[error("node {node_id} was rejected: {reason}")]
    Rejected {
        /// The node id.
        node_id: String,
        /// The rejection reason (`GpuCountMismatch: …`).
        reason: String,
    },
    /// No reservation has this id.
    #[error("unknown reservation {reservation_id}")]
    UnknownReservation {
        /// The reservation id.
        reservation_id: String,
    },
    /// The reservation is not in a state that allows the operation.
    #[error("reservation {reservation_id} is {state}: cannot {action}")]
    ReservationState {
        /// The reservation id.
        reservation_id: String,
        /// Its state.
        state: crate::store::rows::ReservationState,
        /// What was asked (`release`).
        action: &'static str,
    },
    /// An awaited reservation ended in another state than the one awaited.
    #[error("reservation {reservation_id} ended {state}: {reason}")]
    ReservationEnded {
        /// The reservation id.
        reservation_id: String,
        /// Its terminal state.
        state: crate::store::rows::ReservationState,
        /// The node's reason (for a failure).
        reason: String,
    },
    /// A reservation request that cannot be met as asked (zero GPUs).
    #[error("a reservation on node {node_id}: {reason}")]
    InvalidReservation {
        /// The node id.
        node_id: String,
        /// What is wrong.
        reason: String,
    },
    /// The node is not adopted, so nothing can be booked on it.
    #[error("node {node_id} is {state}, not adopted")]
    NodeNotAdopted {
        /// The node id.
        node_id: String,
        /// Its state.
        state: crate::store::rows::NodeState,
    },
    /// The node reported no readable `gpus` inventory section.
    #[error("node {node_id} has no gpus inventory section: {reason}")]
    NoGpuInventory {
        /// The node id.
        node_id: String,
        /// Why (absent, or undecodable).
        reason: String,
    },
    /// Fewer free GPUs than asked.
    #[error("node {node_id} has {free} free GPUs, {wanted} asked")]
    InsufficientGpus {
        /// The node id.
        node_id: String,
        /// How many were asked.
        wanted: u32,
        /// How many are free.
        free: u32,
    },
    /// A Kubernetes binding on a pool whose policy does not enable it.
    #[error("{}: node {node_id}'s pool {pool:?} has no policy.kubernetes", Code::BindingUnsupported)]
    BindingUnsupported {
        /// The node id.
        node_id: String,
        /// The pool's name.
        pool: String,
    },
    /// GPUs asked that a releasing reservation still claims.
    #[error("{}: node {node_id}: {reason}", Code::ReservationOverlap)]
    ReservationOverlap {
        /// The node id.
        node_id: String,
        /// Which GPUs, held by which reservation.
        reason: String,
    },
    /// Fewer free vCPUs or less free memory than the reservation books.
    #[error("{}: node {node_id}: {reason}", Code::ReservationRoom)]
    ReservationRoom {
        /// The node id.
        node_id: String,
        /// What is short.
        reason: String,
    },
    /// No instance has this id.
    #[error("unknown instance {instance_id}")]
    UnknownInstance {
        /// The instance id.
        instance_id: String,
    },
    /// An instance request the stack does not place.
    #[error("invalid instance: {reason}")]
    InvalidInstance {
        /// What is wrong.
        reason: String,
    },
    /// A pool policy the stack does not render (docs/devstack.md, "Pool policies").
    #[error("invalid pool policy: {reason}")]
    InvalidPolicy {
        /// What is wrong.
        reason: String,
    },
    /// No volume has this id.
    #[error("unknown volume {volume_id}")]
    UnknownVolume {
        /// The volume id.
        volume_id: String,
    },
    /// A volume request the stack refuses (a shrink, a host that is no VPS host).
    #[error("invalid volume: {reason}")]
    InvalidVolume {
        /// What is wrong.
        reason: String,
    },
    /// A volume an instance still attaches.
    #[error("volume {volume_id} is attached to instance {instance_id}")]
    VolumeInUse {
        /// The volume id.
        volume_id: String,
        /// The instance that attaches it.
        instance_id: String,
    },
    /// An instance ended in another state than the one awaited.
    #[error("instance {instance_id} is {state}: {reason}")]
    InstanceEnded {
        /// The instance id.
        instance_id: String,
        /// Its state.
        state: crate::store::rows::InstanceState,
        /// Its reason.
        reason: String,
    },
    /// No release has this version.
    #[error("unknown release {version}")]
    UnknownRelease {
        /// The version.
        version: String,
    },
    /// A release of this version was already published.
    #[error("release {version} already exists")]
    ReleaseExists {
        /// The version.
        version: String,
    },
    /// A release to publish is not well formed.
    #[error("invalid release: {reason}")]
    InvalidRelease {
        /// What is wrong.
        reason: String,
    },
    /// The operation needs a TPM attestor and the stack runs without one.
    #[error("the dev stack has no TPM attestor")]
    NoTpmAttestor,
    /// The stack refused the request with a stable code (a console beyond
    /// the node's tunnel limit: `tunnel-limit`).
    #[error("{code}: {detail}")]
    Refused {
        /// The code.
        code: proto::refusal::Code,
        /// For people.
        detail: String,
    },
    /// The console ended (or its relay went away) before what was asked.
    #[error("console {tunnel_id} ended{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    ConsoleEnded {
        /// The tunnel id.
        tunnel_id: String,
        /// How it ended, when it said so.
        reason: Option<String>,
    },
    /// The operation needs signed intent and the stack runs without it.
    #[error("the dev stack runs without signed intent")]
    NoSignedIntent,
    /// The stack is shutting down or has shut down.
    #[error("the dev stack is shut down")]
    Shutdown,
    /// A server task failed.
    #[error("{server} server: {reason}")]
    Serve {
        /// Which server: `gateway` or `http`.
        server: &'static str,
        /// Why it stopped.
        reason: String,
    },
}

/// A result whose error is a dev stack [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A `pki` error with its context.
    pub(crate) fn pki(context: &'static str) -> impl FnOnce(pki::Error) -> Error {
        move |source| Error::Pki { context, source }
    }
}

impl crate::store::StoreFailure for Error {
    fn store_error(&self) -> Option<&crate::store::Error> {
        match self {
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}
