//! The `reservations` table: GPU holds on a node and what the node reported
//! about them.

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::{ReleaseCause, ReservationRow, ReservationState};
use crate::{Db, Error, Result};

const COLUMNS: &str = "id, node_id, gpu_indexes, state, reason, generation, release_generation, bound_generation, \
                       cdi_devices, statement, last_refusal, created_at_ms, active_at_ms, released_at_ms, \
                       vcpus, memory_bytes, binding, cgroup_parent, release_cause, release_requested_at_ms";

/// The states whose GPUs are taken, as SQL.
const TAKEN: &str = "('pending', 'active', 'releasing')";

/// A JSON text column, parsed by `parse` (an array of indexes or of names).
fn json_col<T>(r: &Row, index: usize, parse: impl FnOnce(&str) -> serde_json::Result<T>) -> Result<T, SqlError> {
    let text: String = r.get(index)?;
    parse(&text).map_err(|e| SqlError::Column { index, reason: e.to_string() })
}

fn row(r: &Row) -> Result<ReservationRow, SqlError> {
    Ok(ReservationRow {
        id: r.get(0)?,
        node_id: r.get(1)?,
        gpu_indexes: json_col(r, 2, |t| serde_json::from_str::<Vec<u32>>(t))?,
        state: r.parse(3)?,
        reason: r.get(4)?,
        generation: r.get(5)?,
        release_generation: r.get(6)?,
        bound_generation: r.get(7)?,
        cdi_devices: json_col(r, 8, |t| serde_json::from_str::<Vec<String>>(t))?,
        statement: r.get(9)?,
        last_refusal: r.get(10)?,
        created_at_ms: r.get(11)?,
        active_at_ms: r.get(12)?,
        released_at_ms: r.get(13)?,
        vcpus: r.get(14)?,
        memory_bytes: r.get::<i64>(15)? as u64,
        binding: r.get(16)?,
        cgroup_parent: r.get(17)?,
        release_cause: cause(r.get(18)?),
        release_requested_at_ms: r.get(19)?,
    })
}

/// A stored release cause: `None` while the reservation runs, else the
/// cause or the text this build does not know.
pub(crate) fn cause(text: String) -> Option<Result<ReleaseCause, String>> {
    (!text.is_empty()).then(|| text.parse::<ReleaseCause>().map_err(|_| text))
}

fn list(c: &Db<'_>, where_clause: &str, node_id: &str) -> Result<Vec<ReservationRow>> {
    c.query_map(
        &format!("SELECT {COLUMNS} FROM reservations WHERE node_id = ?1 {where_clause} ORDER BY seq"),
        params![node_id],
        row,
    )
    .map_err(Error::at("list reservations"))
}

fn to_json(value: impl Into<serde_json::Value>) -> String {
    value.into().to_string()
}

/// What a new reservation books besides its GPUs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Share {
    /// Booked vCPUs.
    pub vcpus: u32,
    /// Booked memory.
    pub memory_bytes: u64,
    /// `""` or `kubernetes`.
    pub binding: String,
}

/// Inserts a new `pending` reservation.
pub fn insert(
    c: &Db<'_>,
    id: &str,
    node_id: &str,
    gpu_indexes: &[u32],
    share: &Share,
    generation: u64,
    now_ms: i64,
) -> Result<()> {
    c.execute(
        "INSERT INTO reservations (id, node_id, gpu_indexes, state, generation, created_at_ms, vcpus, memory_bytes, binding)
         VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?7, ?8)",
        params![
            id,
            node_id,
            to_json(gpu_indexes.to_vec()),
            generation,
            now_ms,
            share.vcpus,
            share.memory_bytes as i64,
            share.binding
        ],
    )
    .map_err(Error::at("insert reservation"))?;
    Ok(())
}

/// A reservation by id.
pub fn get(c: &Db<'_>, id: &str) -> Result<Option<ReservationRow>> {
    optional(
        c.query_row(&format!("SELECT {COLUMNS} FROM reservations WHERE id = ?1"), params![id], row),
        "read reservation",
    )
}

/// Every reservation of a node, oldest first.
pub fn of_node(c: &Db<'_>, node_id: &str) -> Result<Vec<ReservationRow>> {
    list(c, "", node_id)
}

/// The reservations whose GPUs are taken (pending, active, releasing).
pub fn taken(c: &Db<'_>, node_id: &str) -> Result<Vec<ReservationRow>> {
    list(c, &format!("AND state IN {TAKEN}"), node_id)
}

/// The reservations whose hold is in the node's spec (pending, active), oldest first.
pub fn held(c: &Db<'_>, node_id: &str) -> Result<Vec<ReservationRow>> {
    list(c, "AND state IN ('pending', 'active')", node_id)
}

/// Moves a pending reservation to `active` with the node's verified
/// statement, booked from `now_ms` (the store's clock: usage is metered
/// from it); returns false when it was not pending.
pub fn activate(
    c: &Db<'_>,
    id: &str,
    bound_generation: u64,
    cdi_devices: &[String],
    cgroup_parent: &str,
    statement: &[u8],
    now_ms: i64,
) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE reservations SET state = 'active', bound_generation = ?2, cdi_devices = ?3, statement = ?4,
                    last_refusal = '', active_at_ms = ?5, cgroup_parent = ?6
             WHERE id = ?1 AND state = 'pending'",
            params![id, bound_generation, to_json(cdi_devices.to_vec()), statement, now_ms, cgroup_parent],
        )
        .map_err(Error::at("activate reservation"))?;
    Ok(n == 1)
}

/// Records why a report about a reservation was refused.
pub fn refuse(c: &Db<'_>, id: &str, refusal: &str) -> Result<()> {
    c.execute("UPDATE reservations SET last_refusal = ?2 WHERE id = ?1", params![id, refusal])
        .map_err(Error::at("record reservation refusal"))?;
    Ok(())
}

/// Moves a pending or active reservation to `releasing` at the spec
/// generation that dropped its hold, for `cause`, booked until `now_ms`
/// (the store's clock); returns false otherwise.
pub fn start_release(c: &Db<'_>, id: &str, generation: u64, cause: ReleaseCause, now_ms: i64) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE reservations SET state = 'releasing', release_generation = ?2, release_cause = ?3,
                    release_requested_at_ms = ?4
             WHERE id = ?1 AND state IN ('pending', 'active')",
            params![id, generation, cause.as_str(), now_ms],
        )
        .map_err(Error::at("release reservation"))?;
    Ok(n == 1)
}

/// Moves a releasing reservation to `released`; returns false otherwise.
pub fn finish_release(c: &Db<'_>, id: &str, now_ms: i64) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE reservations SET state = 'released', released_at_ms = ?2 WHERE id = ?1 AND state = 'releasing'",
            params![id, now_ms],
        )
        .map_err(Error::at("finish reservation release"))?;
    Ok(n == 1)
}

/// Moves to `released` every releasing reservation of `node_id` that the
/// node never bound (no AllocationBound was taken) and whose hold was
/// withdrawn at or before `applied`, the generation the node applied: a
/// node that took a newer spec than the hold's never held it, and so never
/// reports it released. Returns their ids.
pub fn finish_unbound(c: &Db<'_>, node_id: &str, applied: u64, now_ms: i64) -> Result<Vec<String>> {
    c.query_map(
        "UPDATE reservations SET state = 'released', released_at_ms = ?3
         WHERE node_id = ?1 AND state = 'releasing' AND bound_generation IS NULL AND release_generation <= ?2
         RETURNING id",
        params![node_id, applied, now_ms],
        |r| r.get(0),
    )
    .map_err(Error::at("release the holds a node never bound"))
}

/// Moves a reservation that is not over to `failed` (the node could not
/// bind or keep it: cause `node-failed`), booked until `now_ms` unless its
/// hold was withdrawn before; returns its state before, or `None` when it
/// was already over.
pub fn fail(c: &Db<'_>, id: &str, reason: &str, now_ms: i64) -> Result<Option<ReservationState>> {
    let Some(before) = get(c, id)?.map(|r| r.state).filter(|s| !s.is_terminal()) else { return Ok(None) };
    c.execute(
        "UPDATE reservations SET state = 'failed', reason = ?2, released_at_ms = ?3,
                release_cause = CASE WHEN release_cause = '' THEN ?4 ELSE release_cause END,
                release_requested_at_ms = COALESCE(release_requested_at_ms, ?3)
         WHERE id = ?1",
        params![id, reason, now_ms, ReleaseCause::NodeFailed.as_str()],
    )
    .map_err(Error::at("fail reservation"))?;
    Ok(Some(before))
}

/// Records the spec generation that dropped a failed reservation's hold.
pub fn set_release_generation(c: &Db<'_>, id: &str, generation: u64) -> Result<()> {
    c.execute("UPDATE reservations SET release_generation = ?2 WHERE id = ?1", params![id, generation])
        .map_err(Error::at("set reservation release generation"))?;
    Ok(())
}

/// Records when a reservation booked for a while ends itself.
pub fn set_end(c: &Db<'_>, id: &str, ends_at_ms: i64) -> Result<()> {
    c.execute("INSERT INTO reservation_ends (reservation_id, ends_at_ms) VALUES (?1, ?2)", params![id, ends_at_ms])
        .map_err(Error::at("set reservation end"))?;
    Ok(())
}

/// When a reservation ends itself (None: it lasts until released).
pub fn end_of(c: &Db<'_>, id: &str) -> Result<Option<i64>> {
    optional(
        c.query_row("SELECT ends_at_ms FROM reservation_ends WHERE reservation_id = ?1", params![id], |r| r.get(0)),
        "read reservation end",
    )
}

/// The reservations still held (pending, active) whose end is at or before
/// `now_ms`, soonest first, at most `limit`.
pub fn ended(c: &Db<'_>, now_ms: i64, limit: u32) -> Result<Vec<String>> {
    c.query_map(
        "SELECT e.reservation_id FROM reservation_ends e JOIN reservations r ON r.id = e.reservation_id
         WHERE e.ends_at_ms <= ?1 AND r.state IN ('pending', 'active') ORDER BY e.ends_at_ms LIMIT ?2",
        params![now_ms, limit],
        |r| r.get(0),
    )
    .map_err(Error::at("list ended reservations"))
}

/// The soonest end of a reservation still held (None: none ends).
pub fn next_end(c: &Db<'_>) -> Result<Option<i64>> {
    let rows: Vec<Option<i64>> = c
        .query_map(
            "SELECT MIN(e.ends_at_ms) FROM reservation_ends e JOIN reservations r ON r.id = e.reservation_id
             WHERE r.state IN ('pending', 'active')",
            params![],
            |r| r.get(0),
        )
        .map_err(Error::at("read the next reservation end"))?;
    Ok(rows.into_iter().next().flatten())
}
