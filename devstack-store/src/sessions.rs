//! The `node_sessions` table: one row per Welcome, closed when the stream ends.

use rusqlite::{Row, params};

use crate::rows::NodeSessionRow;
use crate::{Db, Error, Result};

const COLUMNS: &str = "id, node_id, epoch, journal_id, boot_id, daemon_version, connected_at_ms, disconnected_at_ms";

fn row(r: &Row<'_>) -> rusqlite::Result<NodeSessionRow> {
    Ok(NodeSessionRow {
        id: r.get(0)?,
        node_id: r.get(1)?,
        epoch: r.get(2)?,
        journal_id: r.get(3)?,
        boot_id: r.get(4)?,
        daemon_version: r.get(5)?,
        connected_at_ms: r.get(6)?,
        disconnected_at_ms: r.get(7)?,
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
    /// Now.
    pub now_ms: i64,
}

/// Opens a session: the next epoch of the node (one more than its highest,
/// across restarts of the stack), recorded in the same statement group. The
/// node's closed sessions beyond the newest `kept` are forgotten.
pub fn open(c: &Db<'_>, s: &NewSession<'_>, kept: u32) -> Result<NodeSessionRow> {
    let epoch: u64 = c
        .query_row_cached(
            "SELECT COALESCE(MAX(epoch), 0) + 1 FROM node_sessions WHERE node_id = ?1",
            [s.node_id],
            |r| r.get(0),
        )
        .map_err(Error::sqlite("next session epoch"))?;
    c.execute_cached(
        "INSERT INTO node_sessions (node_id, epoch, journal_id, boot_id, daemon_version, connected_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![s.node_id, epoch, s.journal_id, s.boot_id, s.daemon_version, s.now_ms],
    )
    .map_err(Error::sqlite("insert node session"))?;
    let id = c.last_insert_rowid();
    c.execute_cached(
        "DELETE FROM node_sessions WHERE node_id = ?1 AND disconnected_at_ms IS NOT NULL AND id NOT IN
         (SELECT id FROM node_sessions WHERE node_id = ?1 ORDER BY epoch DESC LIMIT ?2)",
        params![s.node_id, kept],
    )
    .map_err(Error::sqlite("forget old node sessions"))?;
    Ok(NodeSessionRow {
        id,
        node_id: s.node_id.to_string(),
        epoch,
        journal_id: s.journal_id.to_string(),
        boot_id: s.boot_id.to_string(),
        daemon_version: s.daemon_version.to_string(),
        connected_at_ms: s.now_ms,
        disconnected_at_ms: None,
    })
}

/// Closes a session.
pub fn close(c: &Db<'_>, id: i64, now_ms: i64) -> Result<()> {
    c.execute_cached(
        "UPDATE node_sessions SET disconnected_at_ms = ?2 WHERE id = ?1 AND disconnected_at_ms IS NULL",
        params![id, now_ms],
    )
    .map_err(Error::sqlite("close node session"))?;
    Ok(())
}

/// Closes every session left open (by a stack that stopped without closing).
pub fn close_all_open(c: &Db<'_>, now_ms: i64) -> Result<usize> {
    c.execute_cached("UPDATE node_sessions SET disconnected_at_ms = ?1 WHERE disconnected_at_ms IS NULL", [now_ms])
        .map_err(Error::sqlite("close open sessions"))
}

/// The journal id of a node's latest session, if it had one.
pub fn last_journal(c: &Db<'_>, node_id: &str) -> Result<Option<String>> {
    let mut stmt = c
        .prepare_cached("SELECT journal_id FROM node_sessions WHERE node_id = ?1 ORDER BY epoch DESC LIMIT 1")
        .map_err(Error::sqlite("read the last journal id"))?;
    let mut rows = stmt.query_map([node_id], |r| r.get(0)).map_err(Error::sqlite("read the last journal id"))?;
    rows.next().transpose().map_err(Error::sqlite("read the last journal id"))
}

/// Every session of a node, oldest first.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<NodeSessionRow>> {
    let mut stmt = c
        .prepare_cached(&format!("SELECT {COLUMNS} FROM node_sessions WHERE node_id = ?1 ORDER BY epoch"))
        .map_err(Error::sqlite("list node sessions"))?;
    let rows = stmt.query_map([node_id], row).map_err(Error::sqlite("list node sessions"))?;
    rows.collect::<rusqlite::Result<_>>().map_err(Error::sqlite("list node sessions"))
}
