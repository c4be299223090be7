//! The `join_requests` table: every token join that created a node, by the
//! SHA-256 of its sealed token and CSR, with the signed JoinResponse it was
//! answered, so that the same request again (a retry, a replay) is answered
//! the same node and certificate and spends no use of the token.

use crate::params;

use crate::optional;
use crate::{Db, Error, Result};

/// Records the answer to a join request.
pub fn insert(c: &Db<'_>, request_sha256: &str, node_id: &str, response: &str, now_ms: i64) -> Result<()> {
    c.execute(
        "INSERT INTO join_requests (request_sha256, node_id, response, created_at_ms) VALUES (?1, ?2, ?3, ?4)",
        params![request_sha256, node_id, response, now_ms],
    )
    .map_err(Error::at("insert join request"))?;
    Ok(())
}

/// The node and JoinResponse (DSSE JSON) a join request was answered.
pub fn get(c: &Db<'_>, request_sha256: &str) -> Result<Option<(String, String)>> {
    optional(
        c.query_row(
            "SELECT node_id, response FROM join_requests WHERE request_sha256 = ?1",
            params![request_sha256],
            |r| Ok((r.get(0)?, r.get(1)?)),
        ),
        "read join request",
    )
}
