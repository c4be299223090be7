//! The `node_bindings` and `node_joins` tables: the hardware identity a node
//! is bound to (a TPM's EK, with the AK of its latest join), and how each
//! join of a node went.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::{NodeBindingRow, NodeJoinRow, NodeKeyLevel};
use crate::{Db, Error, Result};

/// The binding kind of a TPM's endorsement key.
pub const TPM_EK: &str = "tpm-ek";

const BINDING_COLUMNS: &str = "node_id, kind, sha256, ak_public, ak_name, created_at_ms, updated_at_ms";
const JOIN_COLUMNS: &str = "node_id, method, node_key, policy, serial, at_ms";

fn binding(r: &Row) -> Result<NodeBindingRow, SqlError> {
    Ok(NodeBindingRow {
        node_id: r.get(0)?,
        kind: r.get(1)?,
        sha256: r.get(2)?,
        ak_public: r.get(3)?,
        ak_name: r.get(4)?,
        created_at_ms: r.get(5)?,
        updated_at_ms: r.get(6)?,
    })
}

fn join(r: &Row) -> Result<NodeJoinRow, SqlError> {
    Ok(NodeJoinRow {
        node_id: r.get(0)?,
        method: r.parse(1)?,
        node_key: r.parse(2)?,
        policy: r.get(3)?,
        serial: r.get(4)?,
        at_ms: r.get(5)?,
    })
}

/// The binding of a hardware identity (`kind`, lowercase hex SHA-256).
pub fn get(c: &Db<'_>, kind: &str, sha256: &str) -> Result<Option<NodeBindingRow>> {
    optional(
        c.query_row(
            &format!("SELECT {BINDING_COLUMNS} FROM node_bindings WHERE kind = ?1 AND sha256 = ?2"),
            params![kind, sha256],
            binding,
        ),
        "read node binding",
    )
}

/// Every binding of a node.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<NodeBindingRow>> {
    c.query_map(
        &format!("SELECT {BINDING_COLUMNS} FROM node_bindings WHERE node_id = ?1 ORDER BY created_at_ms"),
        params![node_id],
        binding,
    )
    .map_err(Error::at("list node bindings"))
}

/// The TPM binding of a node, if it joined with a TPM.
pub fn tpm_of_node(c: &Db<'_>, node_id: &str) -> Result<Option<NodeBindingRow>> {
    Ok(of_node(c, node_id)?.into_iter().find(|b| b.kind == TPM_EK))
}

/// Binds a hardware identity to a node, or records the AK of a rejoin.
pub fn upsert(c: &Db<'_>, b: &NodeBindingRow) -> Result<()> {
    c.execute(
        &format!(
            "INSERT INTO node_bindings ({BINDING_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (kind, sha256) DO UPDATE
             SET ak_public = excluded.ak_public, ak_name = excluded.ak_name, updated_at_ms = excluded.updated_at_ms
             WHERE node_bindings.node_id = excluded.node_id"
        ),
        params![b.node_id, b.kind, b.sha256, b.ak_public, b.ak_name, b.created_at_ms, b.updated_at_ms],
    )
    .map_err(Error::at("write node binding"))?;
    Ok(())
}

/// Records a join.
pub fn record_join(c: &Db<'_>, j: &NodeJoinRow) -> Result<()> {
    c.execute(
        &format!("INSERT INTO node_joins ({JOIN_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"),
        params![j.node_id, j.method.as_str(), j.node_key.as_str(), j.policy, j.serial, j.at_ms],
    )
    .map_err(Error::at("record node join"))?;
    Ok(())
}

/// Every join of a node, oldest first.
pub fn joins(c: &Db<'_>, node_id: &str) -> Result<Vec<NodeJoinRow>> {
    c.query_map(
        &format!("SELECT {JOIN_COLUMNS} FROM node_joins WHERE node_id = ?1 ORDER BY id"),
        params![node_id],
        join,
    )
    .map_err(Error::at("list node joins"))
}

/// The latest join's node-key level (what renewals must keep).
pub fn latest_node_key(c: &Db<'_>, node_id: &str) -> Result<Option<NodeKeyLevel>> {
    Ok(joins(c, node_id)?.pop().map(|j| j.node_key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::JoinMethod;

    #[test]
    fn an_ek_stays_bound_to_its_node_and_a_rejoin_records_its_new_ak() {
        let store = crate::store_with_node();
        let binding = |node_id: &str, ak: u8, at: i64| NodeBindingRow {
            node_id: node_id.into(),
            kind: TPM_EK.into(),
            sha256: "ab".repeat(32),
            ak_public: vec![ak],
            ak_name: vec![ak, ak],
            created_at_ms: at,
            updated_at_ms: at,
        };
        let join = |level: NodeKeyLevel, serial: &str| NodeJoinRow {
            node_id: "node_1".into(),
            method: JoinMethod::Tpm,
            node_key: level,
            policy: "certified".into(),
            serial: serial.into(),
            at_ms: 1,
        };
        store
            .write(|c| {
                assert_eq!(latest_node_key(c, "node_1")?, None);
                upsert(c, &binding("node_1", 1, 10))?;
                record_join(c, &join(NodeKeyLevel::Tpm, "01"))?;
                // The rejoin after a reinstall: same EK, new AK, same node.
                upsert(c, &NodeBindingRow { created_at_ms: 10, ..binding("node_1", 2, 20) })?;
                record_join(c, &join(NodeKeyLevel::Certified, "02"))?;
                // Another node cannot take the EK over.
                crate::nodes::insert(
                    c,
                    &crate::nodes::NewNode {
                        id: "node_2",
                        pool_id: "pool_1",
                        join_token_id: None,
                        hostname: "",
                        daemon_version: "",
                        hardware_id: "",
                        created_at_ms: 0,
                    },
                )?;
                upsert(c, &binding("node_2", 3, 30))?;
                Ok::<_, Error>(())
            })
            .unwrap();
        let bound = store.read(|c| get(c, TPM_EK, &"ab".repeat(32))).unwrap().unwrap();
        assert_eq!((bound.node_id.as_str(), bound.ak_public.as_slice()), ("node_1", &[2u8][..]));
        assert_eq!((bound.created_at_ms, bound.updated_at_ms), (10, 20));
        assert_eq!(store.read(|c| tpm_of_node(c, "node_1")).unwrap(), Some(bound));
        assert_eq!(store.read(|c| tpm_of_node(c, "node_2")).unwrap(), None);
        let joins = store.read(|c| joins(c, "node_1")).unwrap();
        assert_eq!(joins.iter().map(|j| j.serial.as_str()).collect::<Vec<_>>(), ["01", "02"]);
        assert_eq!(store.read(|c| latest_node_key(c, "node_1")).unwrap(), Some(NodeKeyLevel::Certified));
        assert!(store.read(|c| get(c, TPM_EK, "cd")).unwrap().is_none());
    }
}
