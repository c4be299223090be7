//! The `secrets` table: the secrets the broker seals to nodes (instance
//! user data marked secret). Values are never logged; a test or an
//! operator puts them with `DevStack::put_secret`.

use crate::params;

use crate::optional;
use crate::{Db, Error, Result};

/// Stores a secret under `id`.
pub fn insert(c: &Db<'_>, id: &str, value: &[u8], now: i64) -> Result<()> {
    c.execute("INSERT INTO secrets (id, value, created_at_ms) VALUES (?1, ?2, ?3)", params![id, value, now])
        .map_err(Error::at("insert secret"))?;
    Ok(())
}

/// A secret's value.
pub fn get(c: &Db<'_>, id: &str) -> Result<Option<Vec<u8>>> {
    optional(c.query_row("SELECT value FROM secrets WHERE id = ?1", params![id], |r| r.get(0)), "read secret")
}
