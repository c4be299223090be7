//! The rows the fleet invariants are checked over (docs/harness.md, "Fleet
//! invariants"): unreachable marks, spec deliveries, why a hold was
//! withdrawn, usage windows, and the command and reservation facts a
//! checker reads beside them. Every time here is the store's clock.

use std::fmt;
use std::str::FromStr;

/// Why a reservation's hold was withdrawn or ended (`reservations.release_cause`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReleaseCause {
    /// Someone released it (the API, the admin CLI).
    Tenant,
    /// Its booked duration ended.
    Expired,
    /// The node reported that it could not bind or keep it (AllocationFailed).
    NodeFailed,
}

impl ReleaseCause {
    /// Every cause, in the order the docs list them.
    pub const ALL: [ReleaseCause; 3] = [ReleaseCause::Tenant, ReleaseCause::Expired, ReleaseCause::NodeFailed];

    /// The value stored in `reservations.release_cause`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseCause::Tenant => "tenant",
            ReleaseCause::Expired => "expired",
            ReleaseCause::NodeFailed => "node-failed",
        }
    }
}

impl FromStr for ReleaseCause {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReleaseCause::ALL.into_iter().find(|c| c.as_str() == s).ok_or_else(|| format!("unknown release cause {s:?}"))
    }
}

impl fmt::Display for ReleaseCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node marked unreachable: no gateway heard from it for the liveness
/// timeout (`liveness_marks`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LivenessMark {
    /// The node.
    pub node_id: String,
    /// When it was marked.
    pub marked_at_ms: i64,
    /// When a gateway had last heard from it, as the mark judged.
    pub heard_at_ms: i64,
    /// When a gateway heard from it again, if one did.
    pub cleared_at_ms: Option<i64>,
}

/// A spec generation sent to its node, and when the node reported it
/// observed (its applied generation reached it) (`spec_deliveries`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecDelivery {
    /// The node.
    pub node_id: String,
    /// The generation.
    pub generation: u64,
    /// When it was first sent.
    pub first_delivered_at_ms: i64,
    /// When it was last sent before it was observed (a new session sends it again).
    pub delivered_at_ms: i64,
    /// How many times it was sent before it was observed.
    pub deliveries: u64,
    /// When the node first reported it applied.
    pub observed_at_ms: Option<i64>,
}

/// One metered usage window of a reservation (`usage_windows`), keyed by
/// the reservation and the window's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageWindow {
    /// The reservation.
    pub reservation_id: String,
    /// Where the window starts (inclusive).
    pub start_ms: i64,
    /// Where it ends (exclusive).
    pub end_ms: i64,
    /// The atoms (GPUs) booked through it.
    pub gpus: u32,
}

/// What the checkers read of a reservation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservationFact {
    /// The reservation.
    pub id: String,
    /// Its node.
    pub node_id: String,
    /// Its GPU indexes.
    pub gpu_indexes: Vec<u32>,
    /// Its state (`pending`, `active`, …).
    pub state: super::ReservationState,
    /// When it was booked.
    pub created_at_ms: i64,
    /// When the node bound it.
    pub active_at_ms: Option<i64>,
    /// When its hold was withdrawn or it failed.
    pub release_requested_at_ms: Option<i64>,
    /// When the node let go of it (or it failed).
    pub released_at_ms: Option<i64>,
    /// Why it was withdrawn or ended; `None` while it runs (and for a row
    /// of a cause this build does not know: the checker names it).
    pub release_cause: Option<Result<ReleaseCause, String>>,
    /// How far it was metered.
    pub metered_to_ms: Option<i64>,
}

/// What the checkers read of a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandFact {
    /// The command.
    pub id: String,
    /// Its node.
    pub node_id: String,
    /// Its kind.
    pub kind: String,
    /// Whether the node may run it again after a crash.
    pub retry_safe: bool,
    /// Its state as the stack has it.
    pub state: super::CommandStatus,
    /// The node's reason (a failure's code first).
    pub reason: String,
    /// When it was enqueued.
    pub created_at_ms: i64,
    /// When it was first delivered.
    pub delivered_at_ms: Option<i64>,
    /// When it ended.
    pub finished_at_ms: Option<i64>,
}

/// A session as the checkers read it: when its node was heard opening it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionFact {
    /// The node.
    pub node_id: String,
    /// The session's epoch.
    pub epoch: u64,
    /// When it opened (the Hello was heard).
    pub connected_at_ms: i64,
    /// When it closed.
    pub disconnected_at_ms: Option<i64>,
}

/// Everything the fleet invariants read from the store, in one snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FleetFacts {
    /// When the snapshot was read, by the store's clock.
    pub taken_at_ms: i64,
    /// Every unreachable mark.
    pub marks: Vec<LivenessMark>,
    /// Every spec delivery.
    pub deliveries: Vec<SpecDelivery>,
    /// Every reservation.
    pub reservations: Vec<ReservationFact>,
    /// Every usage window.
    pub windows: Vec<UsageWindow>,
    /// Every command.
    pub commands: Vec<CommandFact>,
    /// The sessions the store keeps.
    pub sessions: Vec<SessionFact>,
}
