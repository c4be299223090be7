//! Section statuses: how far a node got with each section of its applied
//! NodeSpec (`StatusReport.sections`: trust, holds, host, instances, …), as
//! its reconcilers report them. The report part stores the latest status of
//! each section per node; features read it ([`DevStack::section_status`])
//! and await it (a [`StackView::section_status`] condition in
//! [`DevStack::await_until`]), say "instances PROGRESSING with reason
//! Retrying".

use std::fmt;
use std::str::FromStr;

use tracing::{debug, warn};

use crate::error::Result;
use crate::gateway::handlers::{Effects, Event, EventHandler};
use crate::limits;
use crate::stack::DevStack;
use crate::status::Code;
use crate::store::sections;
use crate::view::StackView;

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

/// The report part that stores section statuses (the latest report wins,
/// per section; sections a report does not name keep their status; a name
/// that is not plain, or beyond `NodeLimits::section_statuses` names, is
/// refused `report-limit`).
pub struct Sections;

impl EventHandler<proto::StatusReport> for Sections {
    fn record(&self, event: &Event<'_>, report: &proto::StatusReport) -> Result<Effects> {
        let node_id = event.node_id();
        let limit = event.shared.settings.limits.section_statuses;
        let mut kept = sections::names(event.c, node_id)?;
        for s in &report.sections {
            if !limits::valid_name(&s.section) || !limits::admits(&kept, &s.section, limit) {
                warn!(
                    node_id = %node_id,
                    code = %Code::ReportLimit,
                    section = ?s.section,
                    kept = kept.len(),
                    limit,
                    "session: section status refused: not a plain name, or beyond the node's limit of sections"
                );
                continue;
            }
            if !kept.contains(&s.section) {
                kept.push(s.section.clone());
            }
            let status = SectionStatus {
                node_id: node_id.to_string(),
                section: s.section.clone(),
                state: SectionState::from_proto(s.state),
                reason: s.reason.clone(),
                message: s.message.clone(),
                generation: s.generation,
                updated_at_ms: event.now_ms,
            };
            sections::upsert(event.c, &status)?;
            debug!(
                node_id = %node_id,
                section = ?status.section,
                state = %status.state,
                reason = ?status.reason,
                generation = status.generation,
                "section status"
            );
        }
        Ok(Effects::default())
    }
}

impl StackView<'_> {
    /// A node's latest status of `section`.
    pub fn section_status(&self, node_id: &str, section: &str) -> Option<SectionStatus> {
        self.read(|c| sections::get(c, node_id, section))
    }

    /// A node's latest section statuses, by section.
    pub fn section_statuses(&self, node_id: &str) -> Vec<SectionStatus> {
        self.read(|c| sections::of_node(c, node_id))
    }
}

impl DevStack {
    /// A node's latest status of `section`.
    pub async fn section_status(&self, node_id: &str, section: &str) -> Result<Option<SectionStatus>> {
        self.view(|v| v.section_status(node_id, section))
    }

    /// A node's latest section statuses, by section.
    pub async fn section_statuses(&self, node_id: &str) -> Result<Vec<SectionStatus>> {
        self.view(|v| v.section_statuses(node_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_read_back_and_unknown_ones_are_unspecified() {
        for state in [SectionState::Unspecified, SectionState::Applied, SectionState::Progressing, SectionState::Failed]
        {
            assert_eq!(state.as_str().parse::<SectionState>(), Ok(state));
        }
        assert_eq!(SectionState::from_proto(proto::SectionState::Progressing as i32), SectionState::Progressing);
        assert_eq!(SectionState::from_proto(99), SectionState::Unspecified);
        assert!("retrying".parse::<SectionState>().is_err());
    }
}
