//! The `join_tokens` table: tokens by SHA-256, and the atomic use of one.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::JoinTokenRow;
use crate::{Db, Error, Result};

const COLUMNS: &str = "id, token_sha256, pool_id, max_uses, uses, expires_at_ms, created_at_ms";

fn row(r: &Row) -> Result<JoinTokenRow, SqlError> {
    Ok(JoinTokenRow {
        id: r.get(0)?,
        token_sha256: r.get(1)?,
        pool_id: r.get(2)?,
        max_uses: r.get(3)?,
        uses: r.get(4)?,
        expires_at_ms: r.get(5)?,
        created_at_ms: r.get(6)?,
    })
}

/// Inserts a token (its hash only).
pub fn insert(c: &Db<'_>, t: &JoinTokenRow) -> Result<()> {
    c.execute(
        &format!("INSERT INTO join_tokens ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
        params![t.id, t.token_sha256, t.pool_id, t.max_uses, t.uses, t.expires_at_ms, t.created_at_ms],
    )
    .map_err(Error::at("insert join token"))?;
    Ok(())
}

/// The token whose SHA-256 (lowercase hex) is `sha256`.
pub fn by_sha256(c: &Db<'_>, sha256: &str) -> Result<Option<JoinTokenRow>> {
    optional(
        c.query_row(&format!("SELECT {COLUMNS} FROM join_tokens WHERE token_sha256 = ?1"), params![sha256], row),
        "read join token",
    )
}

/// Counts one use of a token if it has a use left and has not expired at
/// `now_ms`; returns whether it did. One statement, so two joins racing for
/// the last use cannot both win.
pub fn use_once(c: &Db<'_>, id: &str, now_ms: i64) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE join_tokens SET uses = uses + 1 WHERE id = ?1 AND uses < max_uses AND expires_at_ms > ?2",
            params![id, now_ms],
        )
        .map_err(Error::at("use join token"))?;
    Ok(n == 1)
}

/// Every token of a pool.
pub fn of_pool(c: &Db<'_>, pool_id: &str) -> Result<Vec<JoinTokenRow>> {
    c.query_map(
        &format!("SELECT {COLUMNS} FROM join_tokens WHERE pool_id = ?1 ORDER BY created_at_ms, id"),
        params![pool_id],
        row,
    )
    .map_err(Error::at("list join tokens"))
}
