//! The `node_labels` table: what the stack knows a node offers, from its
//! Hello (`bc.dev/driver.<runtime>` for each runtime driver it announces).

use super::Cached as _;
use rusqlite::{Connection, params};

use super::instance_rows::NodeLabelRow;
use crate::error::{Error, Result};

/// The prefix of a driver label.
pub const DRIVER_PREFIX: &str = "bc.dev/driver.";

/// Replaces a node's driver labels with `drivers` (name, version).
pub fn set_drivers(c: &Connection, node_id: &str, drivers: &[(String, String)], now: i64) -> Result<bool> {
    let before = of_node(c, node_id)?;
    c.execute_cached("DELETE FROM node_labels WHERE node_id = ?1 AND label LIKE 'bc.dev/driver.%'", [node_id])
        .map_err(Error::store("clear driver labels"))?;
    for (name, version) in drivers {
        c.execute_cached(
            "INSERT OR REPLACE INTO node_labels (node_id, label, value, updated_at_ms) VALUES (?1, ?2, ?3, ?4)",
            params![node_id, format!("{DRIVER_PREFIX}{name}"), version, now],
        )
        .map_err(Error::store("insert driver label"))?;
    }
    Ok(before != of_node(c, node_id)?)
}

/// A node's labels, by label.
pub fn of_node(c: &Connection, node_id: &str) -> Result<Vec<NodeLabelRow>> {
    let mut stmt = c
        .prepare_cached("SELECT node_id, label, value FROM node_labels WHERE node_id = ?1 ORDER BY label")
        .map_err(Error::store("list labels"))?;
    let rows = stmt
        .query_map([node_id], |r| Ok(NodeLabelRow { node_id: r.get(0)?, label: r.get(1)?, value: r.get(2)? }))
        .map_err(Error::store("list labels"))?;
    rows.collect::<rusqlite::Result<_>>().map_err(Error::store("list labels"))
}
