//! The `gateways` table: every gateway process of a store registers itself
//! (its id and the URLs nodes dial), beats by the store's clock while it
//! runs, says when it drains, and counts the session-scoped writes the
//! store fenced for it. The well-known document lists the gateways that
//! beat; a node fails over among them.

use crate::params;
use crate::rows::GatewayRow;
use crate::sql::{Row, SqlError};
use crate::{Db, Error, Result};

fn row(r: &Row) -> Result<GatewayRow, SqlError> {
    Ok(GatewayRow {
        id: r.get(0)?,
        grpc_url: r.get(1)?,
        https_url: r.get(2)?,
        started_at_ms: r.get(3)?,
        beat_ms_ago: r.get(4)?,
        draining: r.get(5)?,
        fenced_writes: r.get(6)?,
    })
}

/// Registers (or registers again, after a restart) a gateway; it beats now.
pub fn register(c: &Db<'_>, id: &str, grpc_url: &str, https_url: &str, started_at_ms: i64) -> Result<()> {
    let now = crate::clock::now_ms(c)?;
    c.execute(
        "INSERT INTO gateways (id, grpc_url, https_url, started_at_ms, beat_at_ms) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (id) DO UPDATE SET grpc_url = excluded.grpc_url, https_url = excluded.https_url,
             started_at_ms = excluded.started_at_ms, beat_at_ms = excluded.beat_at_ms, draining = 0",
        params![id, grpc_url, https_url, started_at_ms, now],
    )
    .map_err(Error::at("register a gateway"))?;
    Ok(())
}

/// A gateway's beat: it runs (by the store's clock).
pub fn beat(c: &Db<'_>, id: &str) -> Result<()> {
    let now = crate::clock::now_ms(c)?;
    c.execute("UPDATE gateways SET beat_at_ms = ?2 WHERE id = ?1", params![id, now])
        .map_err(Error::at("beat a gateway"))?;
    Ok(())
}

/// Marks a gateway draining (or stopped): nodes are not sent to it.
pub fn set_draining(c: &Db<'_>, id: &str) -> Result<()> {
    c.execute("UPDATE gateways SET draining = 1 WHERE id = ?1", params![id]).map_err(Error::at("drain a gateway"))?;
    Ok(())
}

/// Counts a session-scoped write the store fenced for a gateway.
pub fn count_fenced(c: &Db<'_>, id: &str) -> Result<()> {
    c.execute("UPDATE gateways SET fenced_writes = fenced_writes + 1 WHERE id = ?1", params![id])
        .map_err(Error::at("count a fenced write"))?;
    Ok(())
}

/// Every registered gateway, by id, with how long ago it beat.
pub fn all(c: &Db<'_>) -> Result<Vec<GatewayRow>> {
    let now = crate::clock::now_ms(c)?;
    c.query_map(
        "SELECT id, grpc_url, https_url, started_at_ms, ?1 - beat_at_ms, draining, fenced_writes FROM gateways ORDER BY id",
        params![now],
        row,
    )
    .map_err(Error::at("list gateways"))
}
