//! The rows of section statuses: how far a node got with each section of
//! its applied NodeSpec, as its reconcilers report them.

use std::fmt;
use std::str::FromStr;

/// Where a node's reconciler is with one section.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SectionState {
    /// The node named no state (or one this stack does not know).
    #[default]
    Unspecified,
    /// Converged to the spec.
    Applied,
    /// Not yet; the node tries again on its next pass.
    Progressing,
    /// It cannot converge as specified (see the reason and message).
    Failed,
}

impl SectionState {
    /// The value stored in `node_section_status.state`.
    pub fn as_str(self) -> &'static str {
        match self {
            SectionState::Unspecified => "unspecified",
            SectionState::Applied => "applied",
            SectionState::Progressing => "progressing",
            SectionState::Failed => "failed",
        }
    }

    /// The state a node reported (an unknown value is `Unspecified`).
    pub fn from_proto(state: i32) -> Self {
        match proto::SectionState::try_from(state) {
            Ok(proto::SectionState::Applied) => SectionState::Applied,
            Ok(proto::SectionState::Progressing) => SectionState::Progressing,
            Ok(proto::SectionState::Failed) => SectionState::Failed,
            Ok(proto::SectionState::Unspecified) | Err(_) => SectionState::Unspecified,
        }
    }
}

impl FromStr for SectionState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "unspecified" => SectionState::Unspecified,
            "applied" => SectionState::Applied,
            "progressing" => SectionState::Progressing,
            "failed" => SectionState::Failed,
            other => return Err(format!("unknown section state {other:?}")),
        })
    }
}

impl fmt::Display for SectionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The latest status a node reported for one section of its spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SectionStatus {
    /// The node.
    pub node_id: String,
    /// The NodeSpec field name: `trust`, `holds`, `instances`, …
    pub section: String,
    /// Where the node is with it.
    pub state: SectionState,
    /// A stable CamelCase reason (`Applied`, `Retrying`, `InstanceFailed`, …).
    pub reason: String,
    /// For people.
    pub message: String,
    /// The spec generation the status is for.
    pub generation: u64,
    /// When the stack recorded it.
    pub updated_at_ms: i64,
}

impl SectionStatus {
    /// Whether the status is `state` with `reason`.
    pub fn is(&self, state: SectionState, reason: &str) -> bool {
        self.state == state && self.reason == reason
    }
}
