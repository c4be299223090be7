//! The `node_inventory` table: the latest verified section of each name.

use crate::params;
use crate::sql::ToValue;

use crate::rows::InventoryRow;
use crate::{Db, Error, Result};

/// A verified section to store: its name, SHA-256 (hex) and content.
#[derive(Clone, Copy, Debug)]
pub struct Section<'a> {
    /// The section's name.
    pub name: &'a str,
    /// The SHA-256 of its content, in hex.
    pub sha256: &'a str,
    /// Its content.
    pub content: &'a [u8],
}

/// Stores (or replaces) a node's verified sections, one statement for all
/// of them (a report sends them all again at every reconnection). A name
/// given twice keeps the last.
pub fn upsert(c: &Db<'_>, node_id: &str, sections: &[Section<'_>], now_ms: i64) -> Result<()> {
    for rows in crate::sql::last_of_each(sections, |s| s.name) {
        let mut args: Vec<&dyn ToValue> = Vec::with_capacity(rows.len() * 5);
        for s in &rows {
            args.extend([&node_id as &dyn ToValue, &s.name, &s.sha256, &s.content, &now_ms]);
        }
        c.execute(
            &format!(
                "INSERT INTO node_inventory (node_id, name, sha256, content, updated_at_ms) VALUES {}
                 ON CONFLICT (node_id, name) DO UPDATE
                 SET sha256 = excluded.sha256, content = excluded.content, updated_at_ms = excluded.updated_at_ms",
                crate::sql::value_rows(rows.len(), 5)
            ),
            &args,
        )
        .map_err(Error::at("store inventory sections"))?;
    }
    Ok(())
}

/// A node's sections, by name.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<InventoryRow>> {
    c.query_map(
        "SELECT node_id, name, sha256, content, updated_at_ms FROM node_inventory WHERE node_id = ?1 ORDER BY name",
        params![node_id],
        |r| {
            Ok(InventoryRow {
                node_id: r.get(0)?,
                name: r.get(1)?,
                sha256: r.get(2)?,
                content: r.get(3)?,
                updated_at_ms: r.get(4)?,
            })
        },
    )
    .map_err(Error::at("list inventory"))
}

/// The names of a node's stored sections.
pub fn names(c: &Db<'_>, node_id: &str) -> Result<Vec<String>> {
    c.query_map("SELECT name FROM node_inventory WHERE node_id = ?1 ORDER BY name", params![node_id], |r| r.get(0))
        .map_err(Error::at("list inventory names"))
}
