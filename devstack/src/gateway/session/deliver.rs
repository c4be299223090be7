//! A session's command delivery: every open command after the Welcome,
//! the pending ones when the hub wakes it, a BUSY one again once its delay
//! is up. Each delivery is claimed, fenced by the session's epoch, before
//! it is sent, so a session another gateway took over delivers nothing.

use tokio::time::Instant;
use tracing::debug;

use super::{End, Session, store_end};
use crate::frames::delivery_frame;
use crate::gateway::fence;
use crate::store::commands;
use crate::store::rows::{CommandRow, CommandStatus};

impl Session {
    /// Delivers every command that is not done.
    pub(super) async fn deliver_open(&mut self) -> Result<(), End> {
        let open = self.shared.ledger.read_one(|c| commands::open(c, &self.node.node_id)).map_err(store_end)?;
        self.deliver(&open).await
    }

    pub(super) async fn deliver(&mut self, rows: &[CommandRow]) -> Result<(), End> {
        for row in rows {
            let frame = delivery_frame(row).map_err(store_end)?;
            self.shared.ledger.write(|c| fence::mark_delivered(c, row, self.row.epoch)).map_err(store_end)?;
            self.send(frame).await?;
            self.busy.remove(&row.id);
            debug!(node_id = %self.node.node_id, command_id = %row.id, kind = %row.kind, "session: command delivered");
        }
        Ok(())
    }

    pub(super) async fn retry_busy(&mut self) -> Result<(), End> {
        let now = Instant::now();
        let due: Vec<String> = self.busy.iter().filter(|(_, at)| **at <= now).map(|(id, _)| id.clone()).collect();
        let mut rows = Vec::new();
        for id in due {
            self.busy.remove(&id);
            match self.shared.ledger.read_one(|c| commands::get(c, &id)).map_err(store_end)? {
                Some(row) if row.state == CommandStatus::Busy => rows.push(row),
                _ => {}
            }
        }
        self.deliver(&rows).await
    }
}
