//! The `node_cordons` table: a cordoned node takes no new reservation or
//! instance and keeps what it runs (docs/devstack.md, "Cordon").

use crate::params;

use crate::{Db, Error, Result};

/// A node's cordon: why, and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CordonRow {
    /// The node.
    pub node_id: String,
    /// Why it was cordoned (for people).
    pub reason: String,
    /// When.
    pub cordoned_at_ms: i64,
}

/// Cordons a node; says whether it was not cordoned before (a node
/// cordoned again keeps its first reason and time).
pub fn cordon(c: &Db<'_>, node_id: &str, reason: &str, now_ms: i64) -> Result<bool> {
    let n = c
        .execute(
            "INSERT INTO node_cordons (node_id, reason, cordoned_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (node_id) DO NOTHING",
            params![node_id, reason, now_ms],
        )
        .map_err(Error::at("cordon a node"))?;
    Ok(n == 1)
}

/// Uncordons a node; says whether it was cordoned.
pub fn uncordon(c: &Db<'_>, node_id: &str) -> Result<bool> {
    let n = c
        .execute("DELETE FROM node_cordons WHERE node_id = ?1", params![node_id])
        .map_err(Error::at("uncordon a node"))?;
    Ok(n == 1)
}

/// A node's cordon, if it is cordoned.
pub fn get(c: &Db<'_>, node_id: &str) -> Result<Option<CordonRow>> {
    let rows = c
        .query_map(
            "SELECT node_id, reason, cordoned_at_ms FROM node_cordons WHERE node_id = ?1",
            params![node_id],
            |r| Ok(CordonRow { node_id: r.get(0)?, reason: r.get(1)?, cordoned_at_ms: r.get(2)? }),
        )
        .map_err(Error::at("read a cordon"))?;
    Ok(rows.into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cordon_is_kept_once_and_lifted() {
        let store = crate::store_with_node();
        store
            .write(|c| {
                assert_eq!(get(c, "node_1")?, None);
                assert!(cordon(c, "node_1", "disk swap", 10)?);
                assert!(!cordon(c, "node_1", "again", 20)?, "a second cordon is not new");
                let row = get(c, "node_1")?.unwrap();
                assert_eq!((row.reason.as_str(), row.cordoned_at_ms), ("disk swap", 10));
                assert!(uncordon(c, "node_1")?);
                assert!(!uncordon(c, "node_1")?);
                assert_eq!(get(c, "node_1")?, None);
                Ok::<_, Error>(())
            })
            .unwrap();
    }
}
