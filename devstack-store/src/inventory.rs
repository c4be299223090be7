//! The `node_inventory` table: the latest verified section of each name.

use rusqlite::params;

use crate::rows::InventoryRow;
use crate::{Db, Error, Result};

/// Stores (or replaces) a verified section.
pub fn upsert(c: &Db<'_>, node_id: &str, name: &str, sha256: &str, content: &[u8], now_ms: i64) -> Result<()> {
    c.execute_cached(
        "INSERT INTO node_inventory (node_id, name, sha256, content, updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (node_id, name) DO UPDATE
         SET sha256 = excluded.sha256, content = excluded.content, updated_at_ms = excluded.updated_at_ms",
        params![node_id, name, sha256, content, now_ms],
    )
    .map_err(Error::sqlite("store inventory section"))?;
    Ok(())
}

/// A node's sections, by name.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<InventoryRow>> {
    let mut stmt = c
        .prepare_cached(
            "SELECT node_id, name, sha256, content, updated_at_ms FROM node_inventory WHERE node_id = ?1 ORDER BY name",
        )
        .map_err(Error::sqlite("list inventory"))?;
    let rows = stmt
        .query_map([node_id], |r| {
            Ok(InventoryRow {
                node_id: r.get(0)?,
                name: r.get(1)?,
                sha256: r.get(2)?,
                content: r.get(3)?,
                updated_at_ms: r.get(4)?,
            })
        })
        .map_err(Error::sqlite("list inventory"))?;
    rows.collect::<rusqlite::Result<_>>().map_err(Error::sqlite("list inventory"))
}

/// The names of a node's stored sections.
pub fn names(c: &Db<'_>, node_id: &str) -> Result<Vec<String>> {
    let mut stmt = c
        .prepare_cached("SELECT name FROM node_inventory WHERE node_id = ?1 ORDER BY name")
        .map_err(Error::sqlite("list inventory names"))?;
    let rows = stmt.query_map([node_id], |r| r.get(0)).map_err(Error::sqlite("list inventory names"))?;
    rows.collect::<rusqlite::Result<_>>().map_err(Error::sqlite("list inventory names"))
}
