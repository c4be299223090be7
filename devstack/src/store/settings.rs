//! The `settings` table: the stack's persistent keys and certificates by name.

use super::Cached as _;
use rusqlite::{Connection, params};

use super::optional;
use crate::clock::now_ms;
use crate::error::{Error, Result};

/// The value of a setting.
pub fn get(c: &Connection, name: &str) -> Result<Option<Vec<u8>>> {
    optional(c.query_row_cached("SELECT value FROM settings WHERE name = ?1", [name], |r| r.get(0)), "read setting")
}

/// Sets a setting.
pub fn put(c: &Connection, name: &str, value: &[u8]) -> Result<()> {
    c.execute_cached(
        "INSERT INTO settings (name, value, updated_at_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms",
        params![name, value, now_ms()],
    )
    .map_err(Error::store("write setting"))?;
    Ok(())
}
