//! A node's inventory (docs/protocol.md, "Inventory"): the report part that
//! stores each section whose SHA-256 matches its content (and refuses the
//! others, and those beyond the node's limit of sections: a plain name, at
//! most `NodeLimits::inventory_sections` names), and the reads of the
//! stored sections.

use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use crate::error::Result;
use crate::gateway::handlers::{Effects, Event, EventHandler};
use crate::limits::{self, Refused};
use crate::status::Code;
use crate::store::inventory;
use crate::store::rows::InventoryRow;
use crate::view::StackView;

/// The report part that stores verified inventory sections.
pub struct Inventory;

impl EventHandler<proto::StatusReport> for Inventory {
    fn record(&self, event: &Event<'_>, report: &proto::StatusReport) -> Result<Effects> {
        let node_id = event.node_id();
        let limit = event.shared.settings.options.limits.inventory_sections;
        let mut kept = inventory::names(event.c, node_id)?;
        let mut stored = Vec::new();
        let (mut beyond, mut mismatched) = (Refused::default(), Refused::default());
        for section in &report.inventory {
            if !limits::valid_name(&section.name) || !limits::admits(&kept, &section.name, limit) {
                beyond.add(&section.name);
                continue;
            }
            if hex::encode(Sha256::digest(&section.content)) != section.sha256 {
                mismatched.add(&section.name);
                continue;
            }
            stored.push(inventory::Section { name: &section.name, sha256: &section.sha256, content: &section.content });
            if !kept.contains(&section.name) {
                kept.push(section.name.clone());
            }
        }
        inventory::upsert(event.c, node_id, &stored, event.now_ms)?;
        if beyond.count > 0 {
            warn!(
                node_id = %node_id,
                code = %Code::ReportLimit,
                refused = beyond.count,
                first = ?beyond.first,
                kept = kept.len(),
                limit,
                "session: inventory sections refused: not plain names, or beyond the node's limit of sections"
            );
        }
        if mismatched.count > 0 {
            warn!(
                node_id = %node_id,
                refused = mismatched.count,
                first = ?mismatched.first,
                "session: inventory sections refused: their sha256 does not match their content"
            );
        }
        if !report.inventory.is_empty() {
            debug!(node_id = %node_id, sections = stored.len(), refused = report.inventory.len() - stored.len(), "inventory stored");
        }
        Ok(Effects::default())
    }
}

impl StackView<'_> {
    /// A node's verified inventory sections, by name.
    pub fn inventory(&self, node_id: &str) -> Vec<InventoryRow> {
        self.read(|c| inventory::of_node(c, node_id))
    }
}
