//! The `node_certs` table: every certificate issued to a node, and revocation.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::NodeCertRow;
use crate::{Db, Error, Result};

const COLUMNS: &str = "node_id, serial, spki_pin, der, not_before_ms, not_after_ms, revoked_at_ms";

fn row(r: &Row) -> Result<NodeCertRow, SqlError> {
    Ok(NodeCertRow {
        node_id: r.get(0)?,
        serial: r.get(1)?,
        spki_pin: r.get(2)?,
        der: r.get(3)?,
        not_before_ms: r.get(4)?,
        not_after_ms: r.get(5)?,
        revoked_at_ms: r.get(6)?,
    })
}

/// Inserts an issued certificate.
pub fn insert(c: &Db<'_>, cert: &NodeCertRow, now_ms: i64) -> Result<()> {
    c.execute(
        &format!("INSERT INTO node_certs ({COLUMNS}, created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        params![
            cert.node_id,
            cert.serial,
            cert.spki_pin,
            cert.der,
            cert.not_before_ms,
            cert.not_after_ms,
            cert.revoked_at_ms,
            now_ms
        ],
    )
    .map_err(Error::at("insert node certificate"))?;
    Ok(())
}

/// A node's certificate by serial.
pub fn get(c: &Db<'_>, node_id: &str, serial: &str) -> Result<Option<NodeCertRow>> {
    optional(
        c.query_row(
            &format!("SELECT {COLUMNS} FROM node_certs WHERE node_id = ?1 AND serial = ?2"),
            params![node_id, serial],
            row,
        ),
        "read node certificate",
    )
}

/// Every certificate of a node, oldest first.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<NodeCertRow>> {
    c.query_map(
        &format!("SELECT {COLUMNS} FROM node_certs WHERE node_id = ?1 ORDER BY created_at_ms, serial"),
        params![node_id],
        row,
    )
    .map_err(Error::at("list node certificates"))
}

/// A node's certificate of the key whose pin is `spki_pin` that is valid
/// at `now_ms` and not revoked (the one issued last, if several).
pub fn valid_by_pin(c: &Db<'_>, node_id: &str, spki_pin: &str, now_ms: i64) -> Result<Option<NodeCertRow>> {
    optional(
        c.query_row(
            &format!(
                "SELECT {COLUMNS} FROM node_certs WHERE node_id = ?1 AND spki_pin = ?2 AND revoked_at_ms IS NULL
                 AND not_before_ms <= ?3 AND not_after_ms > ?3 ORDER BY created_at_ms DESC LIMIT 1"
            ),
            params![node_id, spki_pin, now_ms],
            row,
        ),
        "read node certificate by pin",
    )
}

/// How many certificates of a node were renewed (issued other than by a
/// join) since `since_ms`.
pub fn renewed_since(c: &Db<'_>, node_id: &str, since_ms: i64) -> Result<u32> {
    c.query_row(
        "SELECT COUNT(*) FROM node_certs WHERE node_id = ?1 AND created_at_ms >= ?2
         AND serial NOT IN (SELECT serial FROM node_joins WHERE node_id = ?1)",
        params![node_id, since_ms],
        |r| r.get(0),
    )
    .map_err(Error::at("count node certificates"))
}

/// Revokes every unrevoked certificate of a node; returns how many.
pub fn revoke_all(c: &Db<'_>, node_id: &str, now_ms: i64) -> Result<usize> {
    c.execute(
        "UPDATE node_certs SET revoked_at_ms = ?2 WHERE node_id = ?1 AND revoked_at_ms IS NULL",
        params![node_id, now_ms],
    )
    .map_err(Error::at("revoke node certificates"))
}
