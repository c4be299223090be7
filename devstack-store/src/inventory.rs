//! The `node_inventory` table: the latest verified section of each name.

use crate::params;

use crate::rows::InventoryRow;
use crate::{Db, Error, Result};

/// Stores (or replaces) a verified section.
pub fn upsert(c: &Db<'_>, node_id: &str, name: &str, sha256: &str, content: &[u8], now_ms: i64) -> Result<()> {
    c.execute(
        "INSERT INTO node_inventory (node_id, name, sha256, content, updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (node_id, name) DO UPDATE
         SET sha256 = excluded.sha256, content = excluded.content, updated_at_ms = excluded.updated_at_ms",
        params![node_id, name, sha256, content, now_ms],
    )
    .map_err(Error::at("store inventory section"))?;
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
