//! The `pools` table.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::PoolRow;
use crate::{Db, Error, Result};

const COLUMNS: &str = "id, name, gpu_model, expect_gpu_count, acceptance, created_at_ms, kind, policy";

fn row(r: &Row) -> Result<PoolRow, SqlError> {
    Ok(PoolRow {
        id: r.get(0)?,
        name: r.get(1)?,
        gpu_model: r.get(2)?,
        expect_gpu_count: r.get(3)?,
        acceptance: r.get(4)?,
        created_at_ms: r.get(5)?,
        kind: r.get(6)?,
        policy: r.get(7)?,
    })
}

/// Inserts a pool.
pub fn insert(c: &Db<'_>, p: &PoolRow) -> Result<()> {
    c.execute(
        &format!("INSERT INTO pools ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        params![p.id, p.name, p.gpu_model, p.expect_gpu_count, p.acceptance, p.created_at_ms, p.kind, p.policy],
    )
    .map_err(Error::at("insert pool"))?;
    Ok(())
}

/// A pool by id.
pub fn get(c: &Db<'_>, id: &str) -> Result<Option<PoolRow>> {
    optional(c.query_row(&format!("SELECT {COLUMNS} FROM pools WHERE id = ?1"), params![id], row), "read pool")
}

/// A pool by name.
pub fn by_name(c: &Db<'_>, name: &str) -> Result<Option<PoolRow>> {
    optional(c.query_row(&format!("SELECT {COLUMNS} FROM pools WHERE name = ?1"), params![name], row), "read pool")
}

/// Every pool, oldest first.
pub fn all(c: &Db<'_>) -> Result<Vec<PoolRow>> {
    c.query_map(&format!("SELECT {COLUMNS} FROM pools ORDER BY created_at_ms, id"), params![], row)
        .map_err(Error::at("list pools"))
}
