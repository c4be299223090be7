//! Section statuses: how far a node got with each section of its applied
//! NodeSpec (`StatusReport.sections`: trust, holds, host, instances, …), as
//! its reconcilers report them. The report part stores the latest status of
//! each section per node; features read it ([`DevStack::section_status`])
//! and await it (a [`StackView::section_status`] condition in
//! [`DevStack::await_until`]), say "instances PROGRESSING with reason
//! Retrying".

use tracing::{debug, warn};

use crate::error::Result;
use crate::gateway::handlers::{Effects, Event, EventHandler};
use crate::limits;
use crate::status::Code;
use crate::store::rows::{SectionState, SectionStatus};
use crate::store::sections;
use crate::view::StackView;

/// The report part that stores section statuses (the latest report wins,
/// per section; sections a report does not name keep their status; a name
/// that is not plain, or beyond `NodeLimits::section_statuses` names, is
/// refused `report-limit`).
pub struct Sections;

impl EventHandler<proto::StatusReport> for Sections {
    fn record(&self, event: &Event<'_>, report: &proto::StatusReport) -> Result<Effects> {
        let node_id = event.node_id();
        let limit = event.shared.settings.options.limits.section_statuses;
        let mut kept = sections::names(event.c, node_id)?;
        let mut refused = limits::Refused::default();
        let mut statuses = Vec::new();
        for s in &report.sections {
            if !limits::valid_name(&s.section) || !limits::admits(&kept, &s.section, limit) {
                refused.add(&s.section);
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
            debug!(
                node_id = %node_id,
                section = ?status.section,
                state = %status.state,
                reason = ?status.reason,
                generation = status.generation,
                "section status"
            );
            statuses.push(status);
        }
        sections::upsert(event.c, &statuses)?;
        if refused.count > 0 {
            warn!(
                node_id = %node_id,
                code = %Code::ReportLimit,
                refused = refused.count,
                first = ?refused.first,
                kept = kept.len(),
                limit,
                "session: section statuses refused: not plain names, or beyond the node's limit of sections"
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
