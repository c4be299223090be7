//! The `node_events` table: which journal events of a node were recorded, so
//! a re-sent event is acknowledged without being applied twice.

use rusqlite::params;

use crate::{Db, Error, Result};

/// The highest event seq recorded for a node's journal (0 for a new journal).
pub fn acked_seq(c: &Db<'_>, node_id: &str, journal_id: &str) -> Result<u64> {
    c.query_row_cached(
        "SELECT COALESCE(MAX(seq), 0) FROM node_events WHERE node_id = ?1 AND journal_id = ?2",
        [node_id, journal_id],
        |r| r.get(0),
    )
    .map_err(Error::sqlite("read acked seq"))
}

/// Records an event; returns false when it was already recorded.
pub fn record(c: &Db<'_>, node_id: &str, journal_id: &str, seq: u64, kind: &str, now_ms: i64) -> Result<bool> {
    let n = c
        .execute_cached(
            "INSERT OR IGNORE INTO node_events (node_id, journal_id, seq, kind, recorded_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![node_id, journal_id, seq, kind, now_ms],
        )
        .map_err(Error::sqlite("record node event"))?;
    Ok(n == 1)
}
