//! The rows of commands and of the states a node reports for them.

use std::fmt;
use std::str::FromStr;

/// Where a command is: the stack's own states (`pending`, `delivered`), then
/// the states the node reports (docs/protocol.md, "Commands").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommandStatus {
    /// Enqueued, not yet sent to the node.
    Pending,
    /// Sent; the node has not answered yet.
    Delivered,
    /// The node journaled it.
    Accepted,
    /// The node runs it.
    Running,
    /// It succeeded (terminal).
    Succeeded,
    /// It failed (terminal).
    Failed,
    /// It was past its `not_after` (terminal).
    Expired,
    /// The node had no free lane credit; the stack delivers it again.
    Busy,
    /// The node does not run it (terminal).
    Unsupported,
}

impl CommandStatus {
    /// Whether the command is done.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            CommandStatus::Succeeded | CommandStatus::Failed | CommandStatus::Expired | CommandStatus::Unsupported
        )
    }

    /// The value stored in `commands.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            CommandStatus::Pending => "pending",
            CommandStatus::Delivered => "delivered",
            CommandStatus::Accepted => "accepted",
            CommandStatus::Running => "running",
            CommandStatus::Succeeded => "succeeded",
            CommandStatus::Failed => "failed",
            CommandStatus::Expired => "expired",
            CommandStatus::Busy => "busy",
            CommandStatus::Unsupported => "unsupported",
        }
    }

    /// The status of a state the node reports; `None` for UNSPECIFIED.
    pub fn from_proto(state: proto::CommandState) -> Option<Self> {
        Some(match state {
            proto::CommandState::Unspecified => return None,
            proto::CommandState::Accepted => CommandStatus::Accepted,
            proto::CommandState::Running => CommandStatus::Running,
            proto::CommandState::Succeeded => CommandStatus::Succeeded,
            proto::CommandState::Failed => CommandStatus::Failed,
            proto::CommandState::Expired => CommandStatus::Expired,
            proto::CommandState::Busy => CommandStatus::Busy,
            proto::CommandState::Unsupported => CommandStatus::Unsupported,
        })
    }
}

impl FromStr for CommandStatus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "pending" => CommandStatus::Pending,
            "delivered" => CommandStatus::Delivered,
            "accepted" => CommandStatus::Accepted,
            "running" => CommandStatus::Running,
            "succeeded" => CommandStatus::Succeeded,
            "failed" => CommandStatus::Failed,
            "expired" => CommandStatus::Expired,
            "busy" => CommandStatus::Busy,
            "unsupported" => CommandStatus::Unsupported,
            other => return Err(format!("unknown command state {other:?}")),
        })
    }
}

impl fmt::Display for CommandStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A command and its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandRow {
    /// `cmd_…`.
    pub id: String,
    /// The node it is for.
    pub node_id: String,
    /// Its kind (`diag.nvml`, …).
    pub kind: String,
    /// Its parameters (JSON).
    pub params: Vec<u8>,
    /// Whether the node may run it again after a crash.
    pub retry_safe: bool,
    /// Whether it needs an approved batch.
    pub destructive: bool,
    /// Its batch id, or empty.
    pub batch: String,
    /// Its deadline (0: none).
    pub not_after_ms: i64,
    /// The spec generation the node must have applied first.
    pub min_generation: u64,
    /// The DSSE envelope delivered (protobuf `Envelope` bytes).
    pub envelope: Vec<u8>,
    /// Where it is.
    pub state: CommandStatus,
    /// The node's reason (or the stack's, for a refused result).
    pub reason: String,
    /// The node-signed result (protobuf `Envelope` bytes), once verified.
    pub result: Option<Vec<u8>>,
    /// The result's output (JSON, kind-specific).
    pub output: Option<Vec<u8>>,
    /// Enqueue time.
    pub created_at_ms: i64,
    /// Last delivery time.
    pub delivered_at_ms: Option<i64>,
    /// When it reached a terminal state.
    pub finished_at_ms: Option<i64>,
    /// How many times it was sent.
    pub deliveries: u32,
    /// The batch approval delivered with it (`Envelope` bytes).
    pub batch_approval: Option<Vec<u8>>,
}

/// One state a node reported for a command (the history).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandUpdateRow {
    /// The command.
    pub command_id: String,
    /// The state reported.
    pub state: CommandStatus,
    /// The node's reason.
    pub reason: String,
    /// When the stack recorded it.
    pub at_ms: i64,
}
