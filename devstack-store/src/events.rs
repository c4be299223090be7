//! The `node_journals` table: how far each journal of a node was recorded.
//! A node's events increase per journal (docs/protocol.md, "Events and
//! acks"), so an event at or below its journal's recorded seq is a resend,
//! acknowledged without being applied twice; a journal id is stored once,
//! and a node keeps at most a bounded number of journals (the oldest go).

use crate::params;

use crate::{Db, Error, Result};

/// The highest event seq recorded for a node's journal (0 for a new journal).
pub fn acked_seq(c: &Db<'_>, node_id: &str, journal_id: &str) -> Result<u64> {
    c.query_row(
        "SELECT COALESCE(MAX(acked_seq), 0) FROM node_journals WHERE node_id = ?1 AND journal_id = ?2",
        params![node_id, journal_id],
        |r| r.get(0),
    )
    .map_err(Error::at("read acked seq"))
}

/// Records an event of a journal; returns false when it was recorded
/// already (its seq is not above the journal's). A node's journals beyond
/// the newest `journals_kept` are forgotten.
///
/// The usual event moves its known journal on (one update); only a
/// journal's first event inserts its row, and only then are the node's old
/// journals forgotten. (The kept count is written into the statement, not
/// bound: SQLite prepares a statement whose LIMIT is a bound parameter
/// again at every run.)
pub fn record(c: &Db<'_>, node_id: &str, journal_id: &str, seq: u64, now_ms: i64, journals_kept: u32) -> Result<bool> {
    let moved = c
        .execute(
            "UPDATE node_journals SET acked_seq = ?3, updated_at_ms = ?4
             WHERE node_id = ?1 AND journal_id = ?2 AND acked_seq < ?3",
            params![node_id, journal_id, seq, now_ms],
        )
        .map_err(Error::at("record node event"))?;
    if moved == 1 {
        return Ok(true);
    }
    let inserted = c
        .execute(
            "INSERT INTO node_journals (node_id, journal_id, acked_seq, updated_at_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (node_id, journal_id) DO NOTHING",
            params![node_id, journal_id, seq, now_ms],
        )
        .map_err(Error::at("record node event"))?;
    if inserted == 0 {
        return Ok(false); // recorded already: its journal is at or past this seq
    }
    c.execute(
        &format!(
            "DELETE FROM node_journals WHERE node_id = ?1 AND id NOT IN
             (SELECT id FROM node_journals WHERE node_id = ?1 ORDER BY updated_at_ms DESC, id DESC LIMIT {journals_kept})"
        ),
        params![node_id],
    )
    .map_err(Error::at("forget old journals"))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_recorded_once_and_old_journals_go() {
        let store = crate::store_with_node();
        let record =
            |journal: &str, seq: u64, at: i64| store.write(|c| record(c, "node_1", journal, seq, at, 2)).unwrap();
        assert!(record("j1", 1, 1) && record("j1", 2, 2));
        assert!(!record("j1", 2, 3) && !record("j1", 1, 3), "a resend");
        assert_eq!(store.read(|c| acked_seq(c, "node_1", "j1")).unwrap(), 2);
        assert!(record("j2", 1, 4) && record("j3", 1, 5));
        // Two journals kept: j1, the oldest, is forgotten.
        assert_eq!(store.read(|c| acked_seq(c, "node_1", "j1")).unwrap(), 0);
        assert_eq!(store.read(|c| acked_seq(c, "node_1", "j3")).unwrap(), 1);
    }
}
