//! The `commands` and `command_updates` tables: the queue, the delivery
//! counters, the states a node reports and the verified outcome.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::{CommandRow, CommandStatus, CommandUpdateRow};
use crate::{Db, Error, Result};

const COLUMNS: &str = "id, node_id, kind, params, retry_safe, destructive, batch, not_after_ms, min_generation, \
                       envelope, state, reason, result, output, created_at_ms, delivered_at_ms, finished_at_ms, deliveries, \
                       batch_approval";

/// The states that are not terminal, as SQL.
const OPEN: &str = "('pending', 'delivered', 'accepted', 'running', 'busy')";

fn row(r: &Row) -> Result<CommandRow, SqlError> {
    Ok(CommandRow {
        id: r.get(0)?,
        node_id: r.get(1)?,
        kind: r.get(2)?,
        params: r.get(3)?,
        retry_safe: r.get(4)?,
        destructive: r.get(5)?,
        batch: r.get(6)?,
        not_after_ms: r.get(7)?,
        min_generation: r.get(8)?,
        envelope: r.get(9)?,
        state: r.parse(10)?,
        reason: r.get(11)?,
        result: r.get(12)?,
        output: r.get(13)?,
        created_at_ms: r.get(14)?,
        delivered_at_ms: r.get(15)?,
        finished_at_ms: r.get(16)?,
        deliveries: r.get(17)?,
        batch_approval: r.get(18)?,
    })
}

fn list(c: &Db<'_>, where_clause: &str, node_id: &str) -> Result<Vec<CommandRow>> {
    c.query_map(
        &format!("SELECT {COLUMNS} FROM commands WHERE node_id = ?1 {where_clause} ORDER BY seq"),
        params![node_id],
        row,
    )
    .map_err(Error::at("list commands"))
}

/// Inserts a command in state `pending`.
pub fn insert(c: &Db<'_>, cmd: &CommandRow) -> Result<()> {
    c.execute(
        &format!(
            "INSERT INTO commands ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, \
             ?16, ?17, ?18, ?19)"
        ),
        params![
            cmd.id,
            cmd.node_id,
            cmd.kind,
            cmd.params,
            cmd.retry_safe,
            cmd.destructive,
            cmd.batch,
            cmd.not_after_ms,
            cmd.min_generation,
            cmd.envelope,
            cmd.state.as_str(),
            cmd.reason,
            cmd.result,
            cmd.output,
            cmd.created_at_ms,
            cmd.delivered_at_ms,
            cmd.finished_at_ms,
            cmd.deliveries,
            cmd.batch_approval
        ],
    )
    .map_err(Error::at("insert command"))?;
    Ok(())
}

/// A command by id.
pub fn get(c: &Db<'_>, id: &str) -> Result<Option<CommandRow>> {
    optional(c.query_row(&format!("SELECT {COLUMNS} FROM commands WHERE id = ?1"), params![id], row), "read command")
}

/// Every command of a node, in enqueue order.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<CommandRow>> {
    list(c, "", node_id)
}

/// The commands of a node never sent.
pub fn pending(c: &Db<'_>, node_id: &str) -> Result<Vec<CommandRow>> {
    list(c, "AND state = 'pending'", node_id)
}

/// The nodes that have a command not yet delivered (the sweep that wakes
/// them, should a wake between gateways be lost).
pub fn nodes_with_pending(c: &Db<'_>) -> Result<Vec<String>> {
    c.query_map("SELECT DISTINCT node_id FROM commands WHERE state = 'pending'", params![], |r| r.get(0))
        .map_err(Error::at("list nodes with pending commands"))
}

/// The commands of a node that are not done (sent again after each Welcome).
pub fn open(c: &Db<'_>, node_id: &str) -> Result<Vec<CommandRow>> {
    list(c, &format!("AND state IN {OPEN}"), node_id)
}

/// Counts a delivery; a `pending` command becomes `delivered`.
pub fn mark_delivered(c: &Db<'_>, id: &str, now_ms: i64) -> Result<()> {
    c.execute(
        "UPDATE commands SET deliveries = deliveries + 1, delivered_at_ms = ?2,
                state = CASE WHEN state = 'pending' THEN 'delivered' ELSE state END
         WHERE id = ?1",
        params![id, now_ms],
    )
    .map_err(Error::at("mark command delivered"))?;
    Ok(())
}

/// Appends a state the node reported to the command's history.
pub fn record_update(c: &Db<'_>, id: &str, state: CommandStatus, reason: &str, now_ms: i64) -> Result<()> {
    c.execute(
        "INSERT INTO command_updates (command_id, state, reason, at_ms) VALUES (?1, ?2, ?3, ?4)",
        params![id, state.as_str(), reason, now_ms],
    )
    .map_err(Error::at("record command update"))?;
    Ok(())
}

/// The outcome to store for a command.
pub struct Outcome<'a> {
    /// The new state.
    pub state: CommandStatus,
    /// Its reason.
    pub reason: &'a str,
    /// The verified node-signed result (`Envelope` bytes).
    pub result: Option<&'a [u8]>,
    /// The result's output.
    pub output: Option<&'a [u8]>,
}

/// Moves a command that is not done to a new state; returns false (and
/// changes nothing) when it is already terminal.
pub fn set_state(c: &Db<'_>, id: &str, o: &Outcome<'_>, now_ms: i64) -> Result<bool> {
    let finished = o.state.is_terminal().then_some(now_ms);
    let n = c
        .execute(
            &format!(
                "UPDATE commands SET state = ?2, reason = ?3, result = COALESCE(?4, result), output = COALESCE(?5, output),
                        finished_at_ms = ?6
                 WHERE id = ?1 AND state IN {OPEN}"
            ),
            params![id, o.state.as_str(), o.reason, o.result, o.output, finished],
        )
        .map_err(Error::at("set command state"))?;
    Ok(n == 1)
}

/// A command's history, oldest first.
pub fn updates(c: &Db<'_>, id: &str) -> Result<Vec<CommandUpdateRow>> {
    c.query_map(
        "SELECT command_id, state, reason, at_ms FROM command_updates WHERE command_id = ?1 ORDER BY id",
        params![id],
        |r| Ok(CommandUpdateRow { command_id: r.get(0)?, state: r.parse(1)?, reason: r.get(2)?, at_ms: r.get(3)? }),
    )
    .map_err(Error::at("list command updates"))
}
