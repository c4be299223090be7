//! The rows of GPU reservations.

use std::fmt;
use std::str::FromStr;

/// Where a GPU reservation is (docs/protocol.md, "Reservations (holds)"): the stack's hold is out
/// (`pending`), the node bound it (`active`), the hold was withdrawn
/// (`releasing`), the node let go of it (`released`), or the node could not
/// bind it (`failed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReservationState {
    /// The hold is in the node's spec; no verified AllocationBound yet.
    Pending,
    /// The node reported a node-signed AllocationBound that matches.
    Active,
    /// The hold was removed from the spec; the node has not released it yet.
    Releasing,
    /// The node reported AllocationReleased (terminal).
    Released,
    /// The node reported AllocationFailed (terminal).
    Failed,
}

impl ReservationState {
    /// The value stored in `reservations.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReservationState::Pending => "pending",
            ReservationState::Active => "active",
            ReservationState::Releasing => "releasing",
            ReservationState::Released => "released",
            ReservationState::Failed => "failed",
        }
    }

    /// Whether the reservation is over.
    pub fn is_terminal(self) -> bool {
        matches!(self, ReservationState::Released | ReservationState::Failed)
    }
}

impl FromStr for ReservationState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "pending" => ReservationState::Pending,
            "active" => ReservationState::Active,
            "releasing" => ReservationState::Releasing,
            "released" => ReservationState::Released,
            "failed" => ReservationState::Failed,
            other => return Err(format!("unknown reservation state {other:?}")),
        })
    }
}

impl fmt::Display for ReservationState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A GPU reservation on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationRow {
    /// `rsv_…`; also the hold's `allocation_id`.
    pub id: String,
    /// The node.
    pub node_id: String,
    /// The GPU indexes held, ascending.
    pub gpu_indexes: Vec<u32>,
    /// Where it is.
    pub state: ReservationState,
    /// The node's reason, for a failed reservation.
    pub reason: String,
    /// The spec generation that added the hold.
    pub generation: u64,
    /// The spec generation that removed it, once released.
    pub release_generation: Option<u64>,
    /// The generation of the verified AllocationBound.
    pub bound_generation: Option<u64>,
    /// The CDI devices the node bound.
    pub cdi_devices: Vec<String>,
    /// The verified node-signed AllocationBound (protobuf `Envelope` bytes).
    pub statement: Option<Vec<u8>>,
    /// Why the last AllocationBound for it was refused (`<code>: …`), or empty.
    pub last_refusal: String,
    /// Creation time.
    pub created_at_ms: i64,
    /// When it turned active, by the store's clock (its booking starts there).
    pub active_at_ms: Option<i64>,
    /// When it ended (released or failed).
    pub released_at_ms: Option<i64>,
    /// The vCPUs booked with it (0: none).
    pub vcpus: u32,
    /// The memory booked with it (0: none).
    pub memory_bytes: u64,
    /// Its binding: `""` or `kubernetes`.
    pub binding: String,
    /// The slice the node runs a plain hold's share in (its AllocationBound's
    /// `cgroup_parent`), once active.
    pub cgroup_parent: String,
    /// Why its hold was withdrawn or it failed (`None` while it runs; the
    /// stored text when this build does not know it).
    pub release_cause: Option<Result<super::ReleaseCause, String>>,
    /// When its hold was withdrawn or it failed, by the store's clock (its
    /// booking ends there).
    pub release_requested_at_ms: Option<i64>,
}
