//! The `instances` table: VPS instances, where placement put them, and
//! what their host reported.

use crate::params;
use crate::sql::{Row, SqlError};
use prost::Message as _;

use crate::optional;
use crate::rows::{InstanceDesired, InstanceRow, InstanceState};
use crate::{Db, Error, Result};

const COLUMNS: &str = "id, pool_id, node_id, desired, state, reason, spec, pinned_node, generation, \
                       delete_generation, created_at_ms, updated_at_ms, running_at_ms, deleted_at_ms, \
                       current_memory_bytes";

fn row(r: &Row) -> Result<InstanceRow, SqlError> {
    let spec: Vec<u8> = r.get(6)?;
    let spec = proto::InstanceSpec::decode(spec.as_slice())
        .map_err(|e| SqlError::Column { index: 6, reason: e.to_string() })?;
    Ok(InstanceRow {
        id: r.get(0)?,
        pool_id: r.get(1)?,
        node_id: r.get(2)?,
        desired: r.parse(3)?,
        state: r.parse(4)?,
        reason: r.get(5)?,
        spec,
        pinned_node: r.get(7)?,
        generation: r.get(8)?,
        delete_generation: r.get(9)?,
        created_at_ms: r.get(10)?,
        updated_at_ms: r.get(11)?,
        running_at_ms: r.get(12)?,
        deleted_at_ms: r.get(13)?,
        current_memory_bytes: r.get::<Option<i64>>(14)?.map(|n| n as u64),
    })
}

fn list(c: &Db<'_>, where_clause: &str, args: &[&dyn crate::sql::ToValue]) -> Result<Vec<InstanceRow>> {
    c.query_map(&format!("SELECT {COLUMNS} FROM instances {where_clause} ORDER BY seq"), args, row)
        .map_err(Error::at("list instances"))
}

/// Inserts an instance.
pub fn insert(c: &Db<'_>, i: &InstanceRow) -> Result<()> {
    c.execute(
        &format!(
            "INSERT INTO instances ({COLUMNS}, runtime, vcpus, memory_bytes) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)"
        ),
        params![
            i.id,
            i.pool_id,
            i.node_id,
            i.desired.as_str(),
            i.state.as_str(),
            i.reason,
            i.spec.encode_to_vec(),
            i.pinned_node,
            i.generation,
            i.delete_generation,
            i.created_at_ms,
            i.updated_at_ms,
            i.running_at_ms,
            i.deleted_at_ms,
            i.current_memory_bytes.map(|n| n as i64),
            i.spec.runtime,
            i.spec.vcpus,
            i.spec.memory_bytes as i64,
        ],
    )
    .map_err(Error::at("insert instance"))?;
    Ok(())
}

/// An instance by id.
pub fn get(c: &Db<'_>, id: &str) -> Result<Option<InstanceRow>> {
    optional(c.query_row(&format!("SELECT {COLUMNS} FROM instances WHERE id = ?1"), params![id], row), "read instance")
}

/// Every instance, oldest first.
pub fn all(c: &Db<'_>) -> Result<Vec<InstanceRow>> {
    list(c, "", params![])
}

/// A node's instances that are not deleted.
pub fn on_node(c: &Db<'_>, node_id: &str) -> Result<Vec<InstanceRow>> {
    list(c, "WHERE node_id = ?1 AND state != 'deleted'", params![node_id])
}

/// A pool's unschedulable instances that are not deleted.
pub fn unschedulable(c: &Db<'_>, pool_id: &str) -> Result<Vec<InstanceRow>> {
    list(c, "WHERE pool_id = ?1 AND state = 'unschedulable' AND desired != 'deleted'", params![pool_id])
}

/// Places an instance on a node at a spec generation (`pending`).
pub fn place(c: &Db<'_>, id: &str, node_id: &str, generation: u64, now: i64) -> Result<()> {
    c.execute(
        "UPDATE instances SET node_id = ?2, generation = ?3, state = 'pending', reason = '', updated_at_ms = ?4 WHERE id = ?1",
        params![id, node_id, generation, now],
    )
    .map_err(Error::at("place instance"))?;
    Ok(())
}

/// Replaces an instance's spec (placement's pinned CPUs).
pub fn set_spec(c: &Db<'_>, id: &str, spec: &proto::InstanceSpec) -> Result<()> {
    c.execute("UPDATE instances SET spec = ?2 WHERE id = ?1", params![id, spec.encode_to_vec()])
        .map_err(Error::at("update instance spec"))?;
    Ok(())
}

/// Records what a running guest has now (its host's current_memory_bytes);
/// true when it changed.
pub fn report_memory(c: &Db<'_>, id: &str, bytes: u64) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE instances SET current_memory_bytes = ?2
             WHERE id = ?1 AND (current_memory_bytes IS NULL OR current_memory_bytes != ?2)",
            params![id, bytes as i64],
        )
        .map_err(Error::at("record instance memory"))?;
    Ok(n == 1)
}

/// Records what the instance's host reported; true when it changed.
pub fn report(c: &Db<'_>, id: &str, state: InstanceState, reason: &str, now: i64) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE instances SET state = ?2, reason = ?3, updated_at_ms = ?4,
                running_at_ms = CASE WHEN ?2 = 'running' AND running_at_ms IS NULL THEN ?4 ELSE running_at_ms END
             WHERE id = ?1 AND state != 'deleted' AND (state != ?2 OR reason != ?3)",
            params![id, state.as_str(), reason, now],
        )
        .map_err(Error::at("record instance state"))?;
    Ok(n > 0)
}

/// Sets the unschedulable reason.
pub fn set_unschedulable(c: &Db<'_>, id: &str, reason: &str, now: i64) -> Result<()> {
    c.execute(
        "UPDATE instances SET state = 'unschedulable', reason = ?2, updated_at_ms = ?3 WHERE id = ?1",
        params![id, reason, now],
    )
    .map_err(Error::at("record unschedulable"))?;
    Ok(())
}

/// Sets what the instance should be, with its spec and (when deleted) the
/// generation that removes it.
pub fn set_desired(
    c: &Db<'_>,
    id: &str,
    desired: InstanceDesired,
    spec: &proto::InstanceSpec,
    delete_generation: Option<u64>,
    now: i64,
) -> Result<()> {
    c.execute(
        "UPDATE instances SET desired = ?2, spec = ?3, delete_generation = ?4, updated_at_ms = ?5 WHERE id = ?1",
        params![id, desired.as_str(), spec.encode_to_vec(), delete_generation, now],
    )
    .map_err(Error::at("set desired instance state"))?;
    Ok(())
}

/// Marks an instance deleted (its host confirmed it, or it was never placed).
pub fn finish_delete(c: &Db<'_>, id: &str, now: i64) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE instances SET state = 'deleted', deleted_at_ms = ?2, updated_at_ms = ?2 WHERE id = ?1 AND state != 'deleted'",
            params![id, now],
        )
        .map_err(Error::at("delete instance"))?;
    Ok(n > 0)
}
