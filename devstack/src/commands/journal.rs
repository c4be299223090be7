//! A node that comes back with another journal (its journal file was lost)
//! no longer knows which commands it accepted or ran. The stack keeps the
//! invariant "at most one execution per command" (I2): a command delivered
//! to it that is not retry-safe ends FAILED `journal-lost` instead of being
//! delivered again; a retry-safe one, and one never delivered or answered
//! BUSY, is delivered as usual.

use tracing::warn;

use crate::error::Result;
use crate::events::StackEvent;
use crate::gateway::handlers::{HelloHook, Opening};
use crate::ledger::Tx;
use crate::status::Code;
use crate::store::commands::{self, Outcome};
use crate::store::rows::CommandStatus;

/// The Hello hook that keeps I2 across a lost journal.
pub struct JournalLost;

impl HelloHook for JournalLost {
    fn on_hello(&self, opening: &Opening<'_>) -> Result<()> {
        fail_on_new_journal(
            opening.c,
            &opening.node.node_id,
            opening.previous_journal,
            &opening.hello.journal_id,
            opening.now_ms,
        )
    }
}

/// Fails the node's delivered, not retry-safe commands when `journal_id`
/// is not the journal of its previous session (`previous`, `None` for a
/// first session); each is published once committed.
fn fail_on_new_journal(c: &Tx<'_>, node_id: &str, previous: Option<&str>, journal_id: &str, now_ms: i64) -> Result<()> {
    let Some(previous) = previous.filter(|p| *p != journal_id) else {
        return Ok(());
    };
    for row in commands::open(c, node_id)? {
        let delivered =
            matches!(row.state, CommandStatus::Delivered | CommandStatus::Accepted | CommandStatus::Running);
        if !delivered || row.retry_safe {
            continue;
        }
        let reason = format!(
            "{}: the node came back with journal {journal_id:?}, not {previous:?}; the command may have run and is not retry-safe",
            Code::JournalLost
        );
        let outcome = Outcome { state: CommandStatus::Failed, reason: &reason, result: None, output: None };
        if commands::set_state(c, &row.id, &outcome, now_ms)? {
            warn!(node_id, command_id = %row.id, kind = %row.kind, code = %Code::JournalLost, "session: command not delivered again to a new journal");
            c.publish(StackEvent::Command {
                node_id: node_id.to_string(),
                command_id: row.id.clone(),
                kind: row.kind.clone(),
                state: CommandStatus::Failed,
                reason,
            });
        }
    }
    Ok(())
}
