//! What a node reports about a command (docs/protocol.md, "Commands"): the
//! CommandUpdate handler. Every state reported until the command is done
//! goes into the history (an update after that is bcd's stored result sent
//! again for a duplicate delivery, and changes nothing); the command's
//! state changes when the update moves it on, and a terminal
//! update's node-signed result must verify under one of the node's
//! certified keys and agree with the update, else the command ends FAILED
//! `result-unverified: …`. A BUSY command is delivered again after a delay.

use prost::Message as _;
use tracing::{debug, info, warn};

use crate::error::Result;
use crate::events::StackEvent;
use crate::gateway::handlers::{Effects, Event, EventHandler};
use crate::status::Code;
use crate::store::commands::{self, Outcome};
use crate::store::rows::{CommandRow, CommandStatus};

/// The CommandUpdate handler of the commands feature.
pub struct CommandUpdates;

impl EventHandler<proto::CommandUpdate> for CommandUpdates {
    fn record(&self, event: &Event<'_>, update: &proto::CommandUpdate) -> Result<Effects> {
        let node_id = event.node_id();
        let id = &update.command_id;
        let Some(reported) = proto::CommandState::try_from(update.state).ok().and_then(CommandStatus::from_proto)
        else {
            warn!(node_id = %node_id, command_id = %id, state = update.state, "session: command update without a state");
            return Ok(Effects::default());
        };
        let Some(row) = commands::get(event.c, id)?.filter(|r| r.node_id == node_id) else {
            warn!(node_id = %node_id, command_id = %id, "session: update for a command this node does not have");
            return Ok(Effects::default());
        };
        if row.state.is_terminal() {
            // A done command's outcome is final: bcd answers a delivery that
            // crossed its result with the stored one (docs/daemon.md,
            // "Duplicate delivery"), which is not a new step.
            debug!(node_id = %node_id, command_id = %id, state = %reported, "session: update for a done command not recorded");
            return Ok(Effects::default());
        }
        let checked = check_result(event, &row, reported, update);
        let outcome = Outcome {
            state: checked.state,
            reason: &checked.reason,
            result: checked.result.as_deref(),
            output: checked.output.as_deref(),
        };
        commands::record_update(event.c, id, reported, &update.reason, event.now_ms)?;
        if !commands::set_state(event.c, id, &outcome, event.now_ms)? {
            return Ok(Effects::default());
        }
        info!(
            node_id = %node_id,
            command_id = %id,
            kind = %row.kind,
            state = %checked.state,
            reason = ?checked.reason,
            "session: command update"
        );
        let again = (checked.state == CommandStatus::Busy).then_some(event.shared.settings.busy_retry);
        event.c.publish(StackEvent::Command {
            node_id: node_id.to_string(),
            command_id: id.clone(),
            kind: row.kind.clone(),
            state: checked.state,
            reason: checked.reason.clone(),
        });
        Ok(Effects { redeliver: vec![(id.clone(), again)], ..Effects::default() })
    }
}

/// What to store for a command update.
struct Checked {
    state: CommandStatus,
    reason: String,
    result: Option<Vec<u8>>,
    output: Option<Vec<u8>>,
}

/// The state to store for an update: a terminal update's node-signed
/// result must verify under one of the node's certified keys and agree
/// with the update, else the command is FAILED `result-unverified`.
fn check_result(
    event: &Event<'_>,
    row: &CommandRow,
    reported: CommandStatus,
    update: &proto::CommandUpdate,
) -> Checked {
    let plain = Checked { state: reported, reason: update.reason.clone(), result: None, output: None };
    let refused = |detail: String| {
        warn!(node_id = %event.node_id(), command_id = %row.id, %detail, "session: command result refused");
        Checked {
            state: CommandStatus::Failed,
            reason: format!("{}: {detail}", Code::ResultUnverified),
            result: None,
            output: None,
        }
    };
    let Some(env) = &update.result else {
        if reported == CommandStatus::Succeeded {
            return refused("SUCCEEDED without a node-signed result".into());
        }
        return plain;
    };
    let envelope = pki::dsse::Envelope::from_proto(env);
    let result = match event.verify_statement(&envelope, pki::statement::verify_command_result) {
        Ok(result) => result,
        Err(e) => return refused(format!("{}: {e}", e.code())),
    };
    if result.command_id != row.id || CommandStatus::from_proto(result.state()) != Some(reported) {
        return refused(format!(
            "the signed result is for {} in state {:?}, the update for {} in state {reported}",
            result.command_id,
            result.state(),
            row.id
        ));
    }
    Checked {
        state: reported,
        reason: if result.reason.is_empty() { update.reason.clone() } else { result.reason },
        result: Some(env.encode_to_vec()),
        output: Some(result.output),
    }
}
