//! Commands: building the (signed or unsigned) envelope, enqueueing, batches
//! of destructive commands with their approval, waking the node's session,
//! the frames that deliver them, and the API's commands and outcomes. What
//! a node reports back is [`updates`]; what a node with a new journal may
//! no longer be sent is [`journal`].

use std::time::{Duration, SystemTime};

use prost::Message as _;

use crate::clock::{now_ms, to_ms};
use crate::error::{Error, Result};
use crate::events::StackEvent;
use crate::hub::Control;
use crate::ids;
use crate::ledger::Tx;
use crate::shared::Shared;
use crate::store::rows::{CommandRow, CommandStatus, CommandUpdateRow};
use crate::store::{commands, nodes};
use crate::view::StackView;

pub mod journal;
pub mod updates;

/// How a command is to be run (docs/formats.md, "Commands").
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
    /// How the envelope is signed (tests of bcd's refusals change it).
    pub signing: Signing,
}

/// How a command's envelope is signed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Signing {
    /// By the stack's command root under signed intent; unsigned otherwise.
    #[default]
    Stack,
    /// No signature, even under signed intent (bcd answers BAD_SIGNATURE).
    Unsigned,
    /// By a fresh key no trust bundle names (bcd answers BAD_SIGNATURE).
    Outsider,
}

/// One command of a batch.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchCommand {
    /// The node it is for.
    pub node_id: String,
    /// Its kind.
    pub kind: String,
    /// Its parameters.
    pub params: serde_json::Value,
    /// Whether the node may run it again after a crash.
    pub retry_safe: bool,
}

/// A batch of destructive commands and how many approvers sign it.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchSpec {
    /// The commands (each becomes destructive, with the batch id).
    pub commands: Vec<BatchCommand>,
    /// How many of the stack's approvers sign the approval (fewer than the
    /// quorum asks makes a batch bcd refuses, BATCH_UNAPPROVED).
    pub approvals: usize,
    /// The approval's deadline; `None`: none.
    pub not_after: Option<SystemTime>,
}

/// A stored batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// The batch id.
    pub id: String,
    /// The command ids, in the order given.
    pub command_ids: Vec<String>,
}

/// The end of a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandOutcome {
    /// The command.
    pub id: String,
    /// Its terminal state.
    pub state: CommandStatus,
    /// The node's reason (or `result-unverified: …` for a refused result).
    pub reason: String,
    /// The verified result's output (JSON), empty without one.
    pub output: Vec<u8>,
}

impl CommandOutcome {
    /// The outcome of a command that ended; `None` while it runs.
    pub fn of(row: CommandRow) -> Option<Self> {
        row.state.is_terminal().then(|| CommandOutcome {
            id: row.id,
            state: row.state,
            reason: row.reason,
            output: row.output.unwrap_or_default(),
        })
    }

    /// The output parsed as JSON.
    pub fn output_json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.output).ok()
    }
}

/// A command and its envelope, signed by the command root under signed intent.
fn build(
    shared: &Shared,
    node_id: &str,
    kind: &str,
    params: &serde_json::Value,
    opts: &CommandOptions,
    now: i64,
) -> (proto::Command, pki::dsse::Envelope) {
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
    let envelope = match (opts.signing, &shared.keys.intent) {
        (Signing::Stack, Some(intent)) => pki::intent::sign_command(&intent.command_root, &command),
        (Signing::Outsider, _) => pki::intent::sign_command(&pki::keys::random_ed25519(), &command),
        (Signing::Stack | Signing::Unsigned, _) => {
            pki::dsse::Envelope::unsigned(proto::payload_type::COMMAND, command.encode_to_vec())
        }
    };
    (command, envelope)
}

/// The row of a new command.
fn row(command: &proto::Command, envelope: &pki::dsse::Envelope, approval: Option<Vec<u8>>, now: i64) -> CommandRow {
    CommandRow {
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
        batch_approval: approval,
    }
}

/// Inserts rows inside a caller's transaction, after checking their nodes;
/// each is published `pending` once the transaction committed. The caller
/// then [`wake`]s their nodes.
pub fn insert_rows(c: &Tx<'_>, rows: &[CommandRow]) -> Result<()> {
    for row in rows {
        if nodes::get(c, &row.node_id)?.is_none() {
            return Err(Error::UnknownNode { node_id: row.node_id.clone() });
        }
        commands::insert(c, row)?;
        c.publish(StackEvent::Command {
            node_id: row.node_id.clone(),
            command_id: row.id.clone(),
            kind: row.kind.clone(),
            state: CommandStatus::Pending,
            reason: String::new(),
        });
    }
    Ok(())
}

/// Logs committed rows and wakes their nodes' sessions.
pub fn wake(shared: &Shared, rows: &[CommandRow]) {
    for row in rows {
        tracing::info!(
            node_id = %row.node_id,
            command_id = %row.id,
            kind = %row.kind,
            batch = %row.batch,
            "command enqueued"
        );
        shared.hub.send(&row.node_id, Control::Wake);
    }
}

/// Inserts rows (all or none) after checking their nodes, then wakes them.
fn insert(shared: &Shared, rows: &[CommandRow]) -> Result<()> {
    shared.ledger.write(|c| insert_rows(c, rows))?;
    wake(shared, rows);
    Ok(())
}

/// The row of a new command for a node (signed under signed intent), not
/// yet stored.
pub fn prepare(
    shared: &Shared,
    node_id: &str,
    kind: &str,
    params: &serde_json::Value,
    opts: &CommandOptions,
) -> CommandRow {
    let now = now_ms();
    let (command, envelope) = build(shared, node_id, kind, params, opts, now);
    row(&command, &envelope, None, now)
}

/// Enqueues a command for a node and wakes its session; returns the id.
pub fn enqueue(
    shared: &Shared,
    node_id: &str,
    kind: &str,
    params: &serde_json::Value,
    opts: &CommandOptions,
) -> Result<String> {
    shared.ledger.read(|c| crate::nodes::refuse_revoked(c, node_id))?;
    let row = prepare(shared, node_id, kind, params, opts);
    insert(shared, std::slice::from_ref(&row))?;
    Ok(row.id)
}

/// Enqueues a batch of destructive commands, each delivered with a
/// BatchApproval over the digests of all of them, signed by the first
/// `approvals` approvers. Needs signed intent.
pub fn enqueue_batch(shared: &Shared, spec: &BatchSpec) -> Result<Batch> {
    let intent = shared.keys.intent.as_ref().ok_or(Error::NoSignedIntent)?;
    let now = now_ms();
    let batch_id = format!("batch_{}", hex::encode(ids::random_bytes(8)));
    let opts = |retry_safe| CommandOptions {
        retry_safe,
        destructive: true,
        batch: Some(batch_id.clone()),
        ..CommandOptions::default()
    };
    let built: Vec<_> =
        spec.commands.iter().map(|c| build(shared, &c.node_id, &c.kind, &c.params, &opts(c.retry_safe), now)).collect();
    let approval = proto::BatchApproval {
        batch_id: batch_id.clone(),
        trust_domain: shared.settings.options.trust_domain.clone(),
        command_digests: built.iter().map(|(_, env)| pki::intent::command_digest(env)).collect(),
        not_after_ms: spec.not_after.map(to_ms).unwrap_or(0),
    };
    let signers: Vec<&dyn pki::Signer> =
        intent.approvers.iter().take(spec.approvals).map(|a| a as &dyn pki::Signer).collect();
    let approval = pki::intent::sign_batch_approval(&signers, &approval).to_proto().encode_to_vec();
    let rows: Vec<CommandRow> = built.iter().map(|(c, env)| row(c, env, Some(approval.clone()), now)).collect();
    insert(shared, &rows)?;
    tracing::info!(batch = %batch_id, commands = rows.len(), approvals = signers.len(), "batch enqueued");
    Ok(Batch { id: batch_id, command_ids: rows.into_iter().map(|r| r.id).collect() })
}

impl StackView<'_> {
    /// A command.
    pub fn command(&self, id: &str) -> Option<CommandRow> {
        self.read(|c| commands::get(c, id))
    }

    /// A node's commands, in enqueue order.
    pub fn commands(&self, node_id: &str) -> Vec<CommandRow> {
        self.read(|c| commands::of_node(c, node_id))
    }

    /// The states a node reported for a command, oldest first.
    pub fn command_updates(&self, id: &str) -> Vec<CommandUpdateRow> {
        self.read(|c| commands::updates(c, id))
    }
}

/// Waits until a command reaches a terminal state; fails at once for an
/// unknown command.
pub async fn await_command(shared: &Shared, id: &str, timeout: Duration) -> Result<CommandOutcome> {
    shared
        .await_until(format!("command {id} to end"), timeout, |v| {
            let Some(row) = v.command(id) else {
                return Some(Err(Error::UnknownCommand { command_id: id.to_string() }));
            };
            v.note(format_args!("state {}", row.state));
            CommandOutcome::of(row).map(Ok)
        })
        .await?
}
