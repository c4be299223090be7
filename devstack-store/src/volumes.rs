//! The `volumes` table: volumes of a host's store, and what the host
//! reported about them.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::{VolumeRow, VolumeState};
use crate::{Db, Error, Result};

const COLUMNS: &str =
    "id, node_id, size_bytes, desired, state, reason, generation, delete_generation, created_at_ms, deleted_at_ms";

fn row(r: &Row) -> Result<VolumeRow, SqlError> {
    let desired: String = r.get(3)?;
    Ok(VolumeRow {
        id: r.get(0)?,
        node_id: r.get(1)?,
        size_bytes: r.get::<i64>(2)? as u64,
        deleting: desired == "deleted",
        state: r.parse(4)?,
        reason: r.get(5)?,
        generation: r.get(6)?,
        delete_generation: r.get(7)?,
        created_at_ms: r.get(8)?,
        deleted_at_ms: r.get(9)?,
    })
}

fn list(c: &Db<'_>, where_clause: &str, args: &[&dyn crate::sql::ToValue]) -> Result<Vec<VolumeRow>> {
    c.query_map(&format!("SELECT {COLUMNS} FROM volumes {where_clause} ORDER BY seq"), args, row)
        .map_err(Error::at("list volumes"))
}

/// Inserts a volume (`pending`).
pub fn insert(c: &Db<'_>, id: &str, node_id: &str, size_bytes: u64, generation: u64, now: i64) -> Result<()> {
    c.execute(
        "INSERT INTO volumes (id, node_id, size_bytes, desired, state, generation, created_at_ms)
         VALUES (?1, ?2, ?3, 'present', 'pending', ?4, ?5)",
        params![id, node_id, size_bytes as i64, generation, now],
    )
    .map_err(Error::at("insert volume"))?;
    Ok(())
}

/// Records the spec generation that carries a new volume.
pub fn set_generation(c: &Db<'_>, id: &str, generation: u64) -> Result<()> {
    c.execute("UPDATE volumes SET generation = ?2 WHERE id = ?1", params![id, generation])
        .map_err(Error::at("set volume generation"))?;
    Ok(())
}

/// A volume by id.
pub fn get(c: &Db<'_>, id: &str) -> Result<Option<VolumeRow>> {
    optional(c.query_row(&format!("SELECT {COLUMNS} FROM volumes WHERE id = ?1"), params![id], row), "read volume")
}

/// Every volume, oldest first.
pub fn all(c: &Db<'_>) -> Result<Vec<VolumeRow>> {
    list(c, "", params![])
}

/// A node's volumes that are not deleted.
pub fn on_node(c: &Db<'_>, node_id: &str) -> Result<Vec<VolumeRow>> {
    list(c, "WHERE node_id = ?1 AND state != 'deleted'", params![node_id])
}

/// Grows a volume.
pub fn resize(c: &Db<'_>, id: &str, size_bytes: u64) -> Result<()> {
    c.execute("UPDATE volumes SET size_bytes = ?2 WHERE id = ?1", params![id, size_bytes as i64])
        .map_err(Error::at("resize volume"))?;
    Ok(())
}

/// Takes a volume out of its host's spec at `generation`.
pub fn start_delete(c: &Db<'_>, id: &str, generation: u64) -> Result<()> {
    c.execute("UPDATE volumes SET desired = 'deleted', delete_generation = ?2 WHERE id = ?1", params![id, generation])
        .map_err(Error::at("delete volume"))?;
    Ok(())
}

/// Records what the host reported; true when it changed.
pub fn report(c: &Db<'_>, id: &str, state: VolumeState, reason: &str) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE volumes SET state = ?2, reason = ?3 WHERE id = ?1 AND state != 'deleted' AND (state != ?2 OR reason != ?3)",
            params![id, state.as_str(), reason],
        )
        .map_err(Error::at("record volume state"))?;
    Ok(n > 0)
}

/// Marks a volume deleted.
pub fn finish_delete(c: &Db<'_>, id: &str, now: i64) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE volumes SET state = 'deleted', deleted_at_ms = ?2 WHERE id = ?1 AND state != 'deleted'",
            params![id, now],
        )
        .map_err(Error::at("finish volume delete"))?;
    Ok(n > 0)
}
