//! A session's writes are its own only while its epoch is the node's
//! (docs/protocol.md, "Several gateways"): every session-scoped write is
//! fenced by it, a command is claimed before it is sent, and a session that
//! a newer one fenced is counted against its gateway.

use tracing::warn;

use crate::clock::now_ms;
use crate::error::Result;
use crate::events::StackEvent;
use crate::ledger::Tx;
use crate::shared::Shared;
use crate::status::Code;
use crate::store::rows::{CommandRow, CommandStatus};
use crate::store::{commands, gateways, nodes};

/// Records a command delivered by the session of `epoch`, inside a
/// transaction (fenced: another session's is not written); a first delivery
/// is published `delivered` (a delivery again, after a BUSY or on a new
/// session, changes no state).
pub(super) fn mark_delivered(c: &Tx<'_>, row: &CommandRow, epoch: u64) -> Result<()> {
    nodes::fence(c, &row.node_id, epoch)?;
    commands::mark_delivered(c, &row.id, now_ms())?;
    if row.state == CommandStatus::Pending {
        c.publish(StackEvent::Command {
            node_id: row.node_id.clone(),
            command_id: row.id.clone(),
            kind: row.kind.clone(),
            state: CommandStatus::Delivered,
            reason: String::new(),
        });
    }
    Ok(())
}

/// Counts a session of this gateway that a newer one fenced (its write was
/// refused `session-fenced`), and says so once.
pub(super) fn count_fenced(shared: &Shared, node_id: &str, epoch: u64) {
    let gateway = &shared.settings.options.gateway_id;
    warn!(node_id = %node_id, epoch, gateway = %gateway, code = %Code::SessionFenced, "session: a session's write was fenced");
    if let Err(e) = shared.ledger.write(|c| Ok(gateways::count_fenced(c, gateway)?)) {
        warn!(error = %e, "session: could not count the fenced write");
    }
}
