//! The rows of the VPS tables (migration 7): instances, volumes and node
//! labels.

use std::fmt;
use std::str::FromStr;

/// Where an instance is: not placed (`unschedulable`), placed and not yet
/// reported (`pending`), or as its host reports it (`starting`, `running`,
/// `stopped`, `failed`), until its host confirms it gone (`deleted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InstanceState {
    /// No host of its pool passes placement; `reason` says which filter.
    Unschedulable,
    /// In its host's spec; the host has not reported it running yet.
    Pending,
    /// Its host started it and it is not running yet.
    Starting,
    /// Its host reports it running.
    Running,
    /// Its host reports it stopped (asked to, or not admitted: the reason
    /// starts `ResourcesExhausted:`).
    Stopped,
    /// Its host cannot converge it as specified (the reason says why).
    Failed,
    /// Deleted, and its host confirmed the domain gone (terminal).
    Deleted,
}

impl InstanceState {
    /// The value stored in `instances.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceState::Unschedulable => "unschedulable",
            InstanceState::Pending => "pending",
            InstanceState::Starting => "starting",
            InstanceState::Running => "running",
            InstanceState::Stopped => "stopped",
            InstanceState::Failed => "failed",
            InstanceState::Deleted => "deleted",
        }
    }

    /// The state a host reports (`InstanceStatus.state`), if it is one.
    pub fn reported(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(InstanceState::Pending),
            "starting" => Some(InstanceState::Starting),
            "running" => Some(InstanceState::Running),
            "stopped" => Some(InstanceState::Stopped),
            "failed" => Some(InstanceState::Failed),
            _ => None,
        }
    }
}

impl FromStr for InstanceState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "unschedulable" => Ok(InstanceState::Unschedulable),
            "deleted" => Ok(InstanceState::Deleted),
            other => InstanceState::reported(other).ok_or_else(|| format!("unknown instance state {other:?}")),
        }
    }
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an instance should be: running, stopped (both in its host's spec)
/// or deleted (out of it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum InstanceDesired {
    /// Running (the default).
    #[default]
    Running,
    /// Defined and stopped.
    Stopped,
    /// Gone.
    Deleted,
}

impl InstanceDesired {
    /// The value stored in `instances.desired` (and, but for `deleted`,
    /// `InstanceSpec.state`).
    pub fn as_str(self) -> &'static str {
        match self {
            InstanceDesired::Running => "running",
            InstanceDesired::Stopped => "stopped",
            InstanceDesired::Deleted => "deleted",
        }
    }
}

impl FromStr for InstanceDesired {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "running" => InstanceDesired::Running,
            "stopped" => InstanceDesired::Stopped,
            "deleted" => InstanceDesired::Deleted,
            other => return Err(format!("unknown desired instance state {other:?}")),
        })
    }
}

/// An instance.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceRow {
    /// `inst-…`.
    pub id: String,
    /// The pool it was created in.
    pub pool_id: String,
    /// The host placement chose (none while unschedulable).
    pub node_id: Option<String>,
    /// What it should be.
    pub desired: InstanceDesired,
    /// Where it is.
    pub state: InstanceState,
    /// Why (placement's reason, or its host's message); never a secret.
    pub reason: String,
    /// The spec its host gets (its `state` is the desired one).
    pub spec: proto::InstanceSpec,
    /// The host it was pinned to at creation, if any.
    pub pinned_node: Option<String>,
    /// The spec generation that placed it on its host.
    pub generation: Option<u64>,
    /// The spec generation that removed it.
    pub delete_generation: Option<u64>,
    /// Creation time.
    pub created_at_ms: i64,
    /// Last change.
    pub updated_at_ms: i64,
    /// When its host first reported it running.
    pub running_at_ms: Option<i64>,
    /// When its host confirmed it gone.
    pub deleted_at_ms: Option<i64>,
    /// What the running guest has now, as its host last reported (less than
    /// its memory while ballooned; None before a report said).
    pub current_memory_bytes: Option<u64>,
}

impl InstanceRow {
    /// Whether it still books room on its host (everything but deleted).
    pub fn books_room(&self) -> bool {
        self.node_id.is_some() && self.state != InstanceState::Deleted
    }
}

/// Where a volume is: in its host's spec and not yet reported (`pending`),
/// as its host reports it (`ready`, `failed`), or confirmed gone (`deleted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VolumeState {
    /// Not reported yet.
    Pending,
    /// Its host holds it at its size.
    Ready,
    /// Its host cannot make it (the reason says why).
    Failed,
    /// Deleted, and its host confirmed it gone (terminal).
    Deleted,
}

impl VolumeState {
    /// The value stored in `volumes.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            VolumeState::Pending => "pending",
            VolumeState::Ready => "ready",
            VolumeState::Failed => "failed",
            VolumeState::Deleted => "deleted",
        }
    }
}

impl FromStr for VolumeState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "pending" => VolumeState::Pending,
            "ready" => VolumeState::Ready,
            "failed" => VolumeState::Failed,
            "deleted" => VolumeState::Deleted,
            other => return Err(format!("unknown volume state {other:?}")),
        })
    }
}

impl fmt::Display for VolumeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A volume of a host's store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeRow {
    /// `vol-…`.
    pub id: String,
    /// Its host.
    pub node_id: String,
    /// Its size (it only grows).
    pub size_bytes: u64,
    /// Whether it was deleted (out of the spec).
    pub deleting: bool,
    /// Where it is.
    pub state: VolumeState,
    /// Its host's message.
    pub reason: String,
    /// The spec generation that added it.
    pub generation: u64,
    /// The spec generation that removed it.
    pub delete_generation: Option<u64>,
    /// Creation time.
    pub created_at_ms: i64,
    /// When its host confirmed it gone.
    pub deleted_at_ms: Option<i64>,
}

/// A node's label (`bc.dev/driver.<runtime>` from its Hello's drivers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLabelRow {
    /// The node.
    pub node_id: String,
    /// The label.
    pub label: String,
    /// Its value (the driver's version).
    pub value: String,
}
