//! Commands: building the (signed or unsigned) envelope, enqueueing, waking
//! the node's session, and the frames that deliver them.

use std::time::SystemTime;

use prost::Message as _;

use crate::clock::{now_ms, to_ms};
use crate::error::{Error, Result};
use crate::hub::Control;
use crate::ids;
use crate::shared::Shared;
use crate::store::rows::{CommandRow, CommandStatus};
use crate::store::{commands, nodes};

/// How a command is to be run (DESIGN.md §3.6).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandOptions {
    /// The node may run it again after a crash.
    pub retry_safe: bool,
    /// It needs an approved batch (or the unbatched allowance).
    pub destructive: bool,
    /// Its batch id.
    pub batch: Option<String>,
    /// The node refuses it (EXPIRED) after this time; `None`: no deadline.
    pub not_after: Option<SystemTime>,
    /// The spec generation the node must have applied first.
    pub min_generation: u64,
}

/// Enqueues a command for a node and wakes its session; returns the id.
pub fn enqueue(
    shared: &Shared,
    node_id: &str,
    kind: &str,
    params: &serde_json::Value,
    opts: &CommandOptions,
) -> Result<String> {
    let now = now_ms();
    let command = proto::Command {
        id: ids::command_id(),
        node_id: node_id.to_string(),
        kind: kind.to_string(),
        params: serde_json::to_vec(params).unwrap_or_else(|_| b"{}".to_vec()),
        not_after_ms: opts.not_after.map(to_ms).unwrap_or(0),
        min_generation: opts.min_generation,
        retry_safe: opts.retry_safe,
        destructive: opts.destructive,
        batch: opts.batch.clone().unwrap_or_default(),
        issued_at_ms: now,
    };
    let envelope = match &shared.keys.intent {
        Some(intent) => pki::intent::sign_command(&intent.command_root, &command),
        None => pki::dsse::Envelope::unsigned(proto::payload_type::COMMAND, command.encode_to_vec()),
    };
    let row = CommandRow {
        id: command.id.clone(),
        node_id: command.node_id.clone(),
        kind: command.kind.clone(),
        params: command.params.clone(),
        retry_safe: command.retry_safe,
        destructive: command.destructive,
        batch: command.batch.clone(),
        not_after_ms: command.not_after_ms,
        min_generation: command.min_generation,
        envelope: envelope.to_proto().encode_to_vec(),
        state: CommandStatus::Pending,
        reason: String::new(),
        result: None,
        output: None,
        created_at_ms: now,
        delivered_at_ms: None,
        finished_at_ms: None,
        deliveries: 0,
    };
    shared.store.tx(|c| {
        if nodes::get(c, node_id)?.is_none() {
            return Err(Error::UnknownNode { node_id: node_id.to_string() });
        }
        commands::insert(c, &row)
    })?;
    tracing::info!(node_id, command_id = %row.id, kind, signed = shared.keys.intent.is_some(), "command enqueued");
    shared.hub.send(node_id, Control::Wake);
    shared.bump();
    Ok(row.id)
}

/// The frame that delivers a stored command.
pub fn delivery_frame(row: &CommandRow) -> Result<proto::GatewayFrame> {
    let envelope = proto::Envelope::decode(row.envelope.as_slice()).map_err(|e| Error::Corrupt {
        table: "commands",
        column: "envelope",
        key: row.id.clone(),
        reason: e.to_string(),
    })?;
    Ok(frame(proto::gateway_frame::Frame::Command(proto::CommandDelivery {
        command: Some(envelope),
        batch_approval: None,
    })))
}

/// A control frame (`seq` 0).
pub fn frame(frame: proto::gateway_frame::Frame) -> proto::GatewayFrame {
    proto::GatewayFrame { seq: 0, frame: Some(frame) }
}
