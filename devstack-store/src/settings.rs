//! The `settings` table: the stack's persistent keys and certificates by name.

use crate::params;

use crate::now_ms;
use crate::optional;
use crate::{Db, Error, Result};

/// The value of a setting.
pub fn get(c: &Db<'_>, name: &str) -> Result<Option<Vec<u8>>> {
    optional(c.query_row("SELECT value FROM settings WHERE name = ?1", params![name], |r| r.get(0)), "read setting")
}

/// Sets a setting.
pub fn put(c: &Db<'_>, name: &str, value: &[u8]) -> Result<()> {
    c.execute(
        "INSERT INTO settings (name, value, updated_at_ms) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at_ms = excluded.updated_at_ms",
        params![name, value, now_ms()],
    )
    .map_err(Error::at("write setting"))?;
    Ok(())
}
