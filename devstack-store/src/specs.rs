//! The `node_specs` table: every NodeSpec generation made for a node.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::NodeSpecRow;
use crate::{Db, Error, Result};

const COLUMNS: &str = "node_id, generation, payload, envelope, created_at_ms";

fn row(r: &Row) -> Result<NodeSpecRow, SqlError> {
    Ok(NodeSpecRow {
        node_id: r.get(0)?,
        generation: r.get(1)?,
        payload: r.get(2)?,
        envelope: r.get(3)?,
        created_at_ms: r.get(4)?,
    })
}

/// Inserts a spec and makes it the node's `spec_generation`.
pub fn insert(c: &Db<'_>, s: &NodeSpecRow) -> Result<()> {
    c.execute(
        &format!("INSERT INTO node_specs ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)"),
        params![s.node_id, s.generation, s.payload, s.envelope, s.created_at_ms],
    )
    .map_err(Error::at("insert node spec"))?;
    c.execute("UPDATE nodes SET spec_generation = ?2 WHERE id = ?1", params![s.node_id, s.generation])
        .map_err(Error::at("set spec generation"))?;
    Ok(())
}

/// A node's latest spec.
pub fn latest(c: &Db<'_>, node_id: &str) -> Result<Option<NodeSpecRow>> {
    optional(
        c.query_row(
            &format!("SELECT {COLUMNS} FROM node_specs WHERE node_id = ?1 ORDER BY generation DESC LIMIT 1"),
            params![node_id],
            row,
        ),
        "read node spec",
    )
}

/// Every spec of a node, by generation.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<NodeSpecRow>> {
    c.query_map(
        &format!("SELECT {COLUMNS} FROM node_specs WHERE node_id = ?1 ORDER BY generation"),
        params![node_id],
        row,
    )
    .map_err(Error::at("list node specs"))
}
