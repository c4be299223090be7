//! The `node_sessions` table: one row per Welcome, closed when the stream ends.

use crate::optional;
use crate::params;
use crate::sql::{Row, SqlError};

use crate::rows::NodeSessionRow;
use crate::{Db, Error, Result};

const COLUMNS: &str =
    "id, node_id, epoch, journal_id, boot_id, daemon_version, connected_at_ms, disconnected_at_ms, gateway_id";

fn row(r: &Row) -> Result<NodeSessionRow, SqlError> {
    Ok(NodeSessionRow {
        id: r.get(0)?,
        node_id: r.get(1)?,
        epoch: r.get(2)?,
        journal_id: r.get(3)?,
        boot_id: r.get(4)?,
        daemon_version: r.get(5)?,
        connected_at_ms: r.get(6)?,
        disconnected_at_ms: r.get(7)?,
        gateway_id: r.get(8)?,
    })
}

/// What a Hello says about the session.
pub struct NewSession<'a> {
    /// The node.
    pub node_id: &'a str,
    /// Its journal id.
    pub journal_id: &'a str,
    /// Its boot id.
    pub boot_id: &'a str,
    /// Its daemon version.
    pub daemon_version: &'a str,
    /// The gateway it opens on.
    pub gateway_id: &'a str,
    /// Now.
    pub now_ms: i64,
}

/// Opens a session: it takes the node's next session epoch (which fences
/// every older session's writes, on any gateway), makes the gateway the
/// node's home and records the node heard (by the store's clock). The node's closed sessions beyond the newest `kept` are
/// forgotten. `None` for an unknown node.
pub fn open(c: &Db<'_>, s: &NewSession<'_>, kept: u32) -> Result<Option<NodeSessionRow>> {
    let Some(epoch) = crate::nodes::take_epoch(c, s.node_id, s.gateway_id)? else { return Ok(None) };
    let id: i64 = c
        .query_row(
            "INSERT INTO node_sessions (node_id, epoch, journal_id, boot_id, daemon_version, gateway_id, connected_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) RETURNING id",
            params![s.node_id, epoch, s.journal_id, s.boot_id, s.daemon_version, s.gateway_id, s.now_ms],
            |r| r.get(0),
        )
        .map_err(Error::at("insert node session"))?;
    // Heard now: a session that ends before its gateway's next beat still
    // leaves the node's liveness to judge (a mark is cleared by the beat).
    let now = crate::clock::now_ms(c)?;
    c.execute(
        "INSERT INTO node_liveness (node_id, epoch, heard_at_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (node_id) DO UPDATE SET epoch = excluded.epoch, heard_at_ms = excluded.heard_at_ms",
        params![s.node_id, epoch, now],
    )
    .map_err(Error::at("record the node heard"))?;
    // The kept count is written into the statement: SQLite prepares a
    // statement whose LIMIT is a bound parameter again at every run.
    c.execute(
        &format!(
            "DELETE FROM node_sessions WHERE node_id = ?1 AND disconnected_at_ms IS NOT NULL AND id NOT IN
             (SELECT id FROM node_sessions WHERE node_id = ?1 ORDER BY epoch DESC LIMIT {kept})"
        ),
        params![s.node_id],
    )
    .map_err(Error::at("forget old node sessions"))?;
    Ok(Some(NodeSessionRow {
        id,
        node_id: s.node_id.to_string(),
        epoch,
        journal_id: s.journal_id.to_string(),
        boot_id: s.boot_id.to_string(),
        daemon_version: s.daemon_version.to_string(),
        connected_at_ms: s.now_ms,
        disconnected_at_ms: None,
        gateway_id: s.gateway_id.to_string(),
    }))
}

/// Closes a session.
pub fn close(c: &Db<'_>, id: i64, now_ms: i64) -> Result<()> {
    c.execute(
        "UPDATE node_sessions SET disconnected_at_ms = ?2 WHERE id = ?1 AND disconnected_at_ms IS NULL",
        params![id, now_ms],
    )
    .map_err(Error::at("close node session"))?;
    Ok(())
}

/// Closes every session of `gateway_id` left open (by a gateway that
/// stopped without closing them; another gateway's stay open).
pub fn close_all_open(c: &Db<'_>, gateway_id: &str, now_ms: i64) -> Result<usize> {
    c.execute(
        "UPDATE node_sessions SET disconnected_at_ms = ?1 WHERE disconnected_at_ms IS NULL AND gateway_id = ?2",
        params![now_ms, gateway_id],
    )
    .map_err(Error::at("close open sessions"))
}

/// The journal id of a node's latest session, if it had one.
pub fn last_journal(c: &Db<'_>, node_id: &str) -> Result<Option<String>> {
    optional(
        c.query_row(
            "SELECT journal_id FROM node_sessions WHERE node_id = ?1 ORDER BY epoch DESC LIMIT 1",
            params![node_id],
            |r| r.get(0),
        ),
        "read the last journal id",
    )
}

/// Every session of a node, oldest first.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<NodeSessionRow>> {
    c.query_map(
        &format!("SELECT {COLUMNS} FROM node_sessions WHERE node_id = ?1 ORDER BY epoch"),
        params![node_id],
        row,
    )
    .map_err(Error::at("list node sessions"))
}

/// Every node's current session, on any gateway, still connected (the
/// session of the node's epoch, not closed), by node id: what a watcher of
/// several gateways counts as connected.
pub fn open_all(c: &Db<'_>) -> Result<Vec<NodeSessionRow>> {
    let columns: Vec<String> = COLUMNS.split(", ").map(|col| format!("s.{col}")).collect();
    c.query_map(
        &format!(
            "SELECT {} FROM node_sessions s JOIN nodes n ON n.id = s.node_id AND n.session_epoch = s.epoch
             WHERE s.disconnected_at_ms IS NULL ORDER BY s.node_id",
            columns.join(", ")
        ),
        params![],
        row,
    )
    .map_err(Error::at("list the open sessions"))
}
