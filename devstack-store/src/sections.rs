//! The `node_section_status` table: the latest status a node reported for
//! each section of its NodeSpec.

use crate::params;
use crate::sql::{Row, SqlError, ToValue};

use crate::optional;
use crate::rows::SectionStatus;
use crate::{Db, Error, Result};

const COLUMNS: &str = "node_id, section, state, reason, message, generation, updated_at_ms";

fn row(r: &Row) -> Result<SectionStatus, SqlError> {
    Ok(SectionStatus {
        node_id: r.get(0)?,
        section: r.get(1)?,
        state: r.parse(2)?,
        reason: r.get(3)?,
        message: r.get(4)?,
        generation: r.get(5)?,
        updated_at_ms: r.get(6)?,
    })
}

/// Stores (or replaces) statuses, one statement for all of them (a node's
/// report names a few sections, and sends them all again at every
/// reconnection: one statement each was most of a reconnection's writes on
/// PostgreSQL). A section named twice keeps the last.
pub fn upsert(c: &Db<'_>, statuses: &[SectionStatus]) -> Result<()> {
    for rows in crate::sql::last_of_each(statuses, |s| (s.node_id.as_str(), s.section.as_str())) {
        let states: Vec<&str> = rows.iter().map(|s| s.state.as_str()).collect();
        let mut args: Vec<&dyn ToValue> = Vec::with_capacity(rows.len() * 7);
        for (s, state) in rows.iter().zip(&states) {
            args.extend([&s.node_id as &dyn ToValue, &s.section, state, &s.reason, &s.message, &s.generation]);
            args.push(&s.updated_at_ms);
        }
        c.execute(
            &format!(
                "INSERT INTO node_section_status ({COLUMNS}) VALUES {}
                 ON CONFLICT (node_id, section) DO UPDATE
                 SET state = excluded.state, reason = excluded.reason, message = excluded.message,
                     generation = excluded.generation, updated_at_ms = excluded.updated_at_ms",
                crate::sql::value_rows(rows.len(), 7)
            ),
            &args,
        )
        .map_err(Error::at("store section statuses"))?;
    }
    Ok(())
}

/// A node's status of one section.
pub fn get(c: &Db<'_>, node_id: &str, section: &str) -> Result<Option<SectionStatus>> {
    optional(
        c.query_row(
            &format!("SELECT {COLUMNS} FROM node_section_status WHERE node_id = ?1 AND section = ?2"),
            params![node_id, section],
            row,
        ),
        "read section status",
    )
}

/// A node's statuses, by section.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<SectionStatus>> {
    c.query_map(
        &format!("SELECT {COLUMNS} FROM node_section_status WHERE node_id = ?1 ORDER BY section"),
        params![node_id],
        row,
    )
    .map_err(Error::at("list section statuses"))
}

/// The sections a node has a status of.
pub fn names(c: &Db<'_>, node_id: &str) -> Result<Vec<String>> {
    c.query_map("SELECT section FROM node_section_status WHERE node_id = ?1 ORDER BY section", params![node_id], |r| {
        r.get(0)
    })
    .map_err(Error::at("list section names"))
}
