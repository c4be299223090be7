//! The `nodes` table.

use std::collections::HashSet;

use crate::params;
use crate::sql::{Row, SqlError};

use crate::optional;
use crate::rows::NodeRow;
use crate::{Db, Error, Result};

const COLUMNS: &str = "seq, id, pool_id, state, reason, hostname, daemon_version, hardware_id, acceptance_command_id, \
                       applied_generation, spec_generation, created_at_ms, adopted_at_ms, session_epoch, gateway_id, \
                       (SELECT unreachable_at_ms FROM node_liveness WHERE node_liveness.node_id = nodes.id)";

fn row(r: &Row) -> Result<NodeRow, SqlError> {
    Ok(NodeRow {
        seq: r.get(0)?,
        id: r.get(1)?,
        pool_id: r.get(2)?,
        state: r.parse(3)?,
        reason: r.get(4)?,
        hostname: r.get(5)?,
        daemon_version: r.get(6)?,
        hardware_id: r.get(7)?,
        acceptance_command_id: r.get(8)?,
        applied_generation: r.get(9)?,
        spec_generation: r.get(10)?,
        created_at_ms: r.get(11)?,
        adopted_at_ms: r.get(12)?,
        session_epoch: r.get(13)?,
        gateway_id: r.get(14)?,
        unreachable_since_ms: r.get(15)?,
    })
}

fn list(c: &Db<'_>, where_clause: &str, args: &[&dyn crate::sql::ToValue]) -> Result<Vec<NodeRow>> {
    c.query_map(&format!("SELECT {COLUMNS} FROM nodes {where_clause} ORDER BY seq"), args, row)
        .map_err(Error::at("list nodes"))
}

/// What a join records about a new node.
pub struct NewNode<'a> {
    /// `node_…`.
    pub id: &'a str,
    /// Its pool.
    pub pool_id: &'a str,
    /// The token it used (none for a TPM join).
    pub join_token_id: Option<&'a str>,
    /// Claims.
    pub hostname: &'a str,
    /// Claims.
    pub daemon_version: &'a str,
    /// Claims.
    pub hardware_id: &'a str,
    /// Join time.
    pub created_at_ms: i64,
}

/// Inserts a node in state `joined`.
pub fn insert(c: &Db<'_>, n: &NewNode<'_>) -> Result<()> {
    c.execute(
        "INSERT INTO nodes (id, pool_id, state, hostname, daemon_version, hardware_id, join_token_id, created_at_ms)
         VALUES (?1, ?2, 'joined', ?3, ?4, ?5, ?6, ?7)",
        params![n.id, n.pool_id, n.hostname, n.daemon_version, n.hardware_id, n.join_token_id, n.created_at_ms],
    )
    .map_err(Error::at("insert node"))?;
    Ok(())
}

/// A node by id.
pub fn get(c: &Db<'_>, id: &str) -> Result<Option<NodeRow>> {
    optional(c.query_row(&format!("SELECT {COLUMNS} FROM nodes WHERE id = ?1"), params![id], row), "read node")
}

/// The nodes of a pool, in join order.
pub fn of_pool(c: &Db<'_>, pool_id: &str) -> Result<Vec<NodeRow>> {
    list(c, "WHERE pool_id = ?1", params![pool_id])
}

/// Every node, in join order.
pub fn all(c: &Db<'_>) -> Result<Vec<NodeRow>> {
    list(c, "", params![])
}

/// The nodes that joined after the node with `seq` (in join order).
pub fn after(c: &Db<'_>, seq: i64) -> Result<Vec<NodeRow>> {
    list(c, "WHERE seq > ?1", params![seq])
}

/// The highest join order so far (0 with no node).
pub fn last_seq(c: &Db<'_>) -> Result<i64> {
    c.query_row("SELECT COALESCE(MAX(seq), 0) FROM nodes", params![], |r| r.get(0)).map_err(Error::at("read node seq"))
}

/// Rejects a node that is `accepting`, with its reason.
pub fn reject(c: &Db<'_>, id: &str, reason: &str) -> Result<()> {
    c.execute(
        "UPDATE nodes SET state = 'rejected', reason = ?2 WHERE id = ?1 AND state = 'accepting'",
        params![id, reason],
    )
    .map_err(Error::at("reject node"))?;
    Ok(())
}

/// Records the acceptance command of a node and moves it from `joined` to
/// `accepting`; returns false (and changes nothing) when it was no longer
/// `joined` (another session of the node got there first).
pub fn set_accepting(c: &Db<'_>, id: &str, command_id: &str) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE nodes SET state = 'accepting', acceptance_command_id = ?2 WHERE id = ?1 AND state = 'joined'",
            params![id, command_id],
        )
        .map_err(Error::at("set node accepting"))?;
    Ok(n == 1)
}

/// Adopts a node that is `joined` or `accepting`; returns false when it was
/// already adopted or rejected.
pub fn adopt(c: &Db<'_>, id: &str, now_ms: i64) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE nodes SET state = 'adopted', reason = '', adopted_at_ms = ?2
             WHERE id = ?1 AND state IN ('joined', 'accepting')",
            params![id, now_ms],
        )
        .map_err(Error::at("adopt node"))?;
    Ok(n == 1)
}

/// Records what a Hello says (daemon version, applied generation, and
/// the deliveries a changed applied generation observes).
pub fn record_hello(c: &Db<'_>, id: &str, daemon_version: &str, applied_generation: u64) -> Result<()> {
    // A row already so is not written again (a reconnect changes neither).
    let n = c
        .execute(
            "UPDATE nodes SET daemon_version = ?2, applied_generation = ?3
             WHERE id = ?1 AND (daemon_version IS DISTINCT FROM ?2 OR applied_generation IS DISTINCT FROM ?3)",
            params![id, daemon_version, applied_generation],
        )
        .map_err(Error::at("record hello"))?;
    if n == 1 {
        crate::spec_deliveries::observed(c, id, applied_generation)?;
    }
    Ok(())
}

/// Records the applied generation a node reports (and the deliveries it
/// observes); returns whether it changed.
pub fn set_applied_generation(c: &Db<'_>, id: &str, generation: u64) -> Result<bool> {
    let n = c
        .execute(
            "UPDATE nodes SET applied_generation = ?2 WHERE id = ?1 AND applied_generation != ?2",
            params![id, generation],
        )
        .map_err(Error::at("set applied generation"))?;
    if n == 1 {
        crate::spec_deliveries::observed(c, id, generation)?;
    }
    Ok(n == 1)
}

/// Takes the node's next session epoch for a session opening on
/// `gateway_id`, which becomes its home; `None` for an unknown node. Every
/// session-scoped write of an older epoch is fenced from here on.
pub fn take_epoch(c: &Db<'_>, id: &str, gateway_id: &str) -> Result<Option<u64>> {
    optional(
        c.query_row(
            "UPDATE nodes SET session_epoch = session_epoch + 1, gateway_id = ?2 WHERE id = ?1 RETURNING session_epoch",
            params![id, gateway_id],
            |r| r.get(0),
        ),
        "take a session epoch",
    )
}

/// Fences a session-scoped write: `Ok` when `epoch` is still the node's
/// session epoch, else [`Error::Fenced`] (a newer session, here or on
/// another gateway, owns the node).
pub fn fence(c: &Db<'_>, id: &str, epoch: u64) -> Result<()> {
    let current: Option<u64> = optional(
        c.query_row("SELECT session_epoch FROM nodes WHERE id = ?1", params![id], |r| r.get(0)),
        "read the session epoch",
    )?;
    match current {
        Some(current) if current == epoch => Ok(()),
        current => Err(Error::Fenced { node_id: id.to_string(), epoch, current: current.unwrap_or(0) }),
    }
}

/// The nodes marked unreachable now (read through a partial index that
/// holds only them: usually none).
pub fn marked(c: &Db<'_>) -> Result<HashSet<String>> {
    Ok(c.query_map("SELECT node_id FROM node_liveness WHERE unreachable_at_ms IS NOT NULL", params![], |r| r.get(0))
        .map_err(Error::at("read the marked nodes"))?
        .into_iter()
        .collect())
}

/// Records that the nodes of `heard` (id, session epoch, how long ago the
/// gateway heard from it by its own monotonic clock) were heard: their
/// liveness row's `heard_at_ms` becomes the store's now less that age (it
/// never moves back), and the unreachable mark of those among `marked`
/// ([`marked`], read before) is cleared; a node whose epoch is no longer
/// the one given is not written (another session owns it). Returns the
/// nodes whose mark was cleared. A gateway's beat writes its sessions a
/// chunk of [`HEARD_CHUNK`] at a time, each chunk its own transaction: a
/// beat of thousands in one transaction held their rows for seconds, and
/// on PostgreSQL lost its race with whatever else wrote one of them and ran
/// whole again, until its nodes' heard times were older than the liveness
/// timeout and live nodes were marked unreachable.
pub fn heard(c: &Db<'_>, heard: &[(&str, u64, u64)], marked: &HashSet<String>) -> Result<Vec<String>> {
    let now = crate::clock::now_ms(c)?;
    let mut cleared = Vec::new();
    // A statement per chunk of nodes, not per node.
    for chunk in heard.chunks(HEARD_CHUNK) {
        for (id, epoch, _) in chunk.iter().filter(|(id, _, _)| marked.contains(*id)) {
            let unmarked = optional(
                c.query_row(
                    "UPDATE node_liveness SET unreachable_at_ms = NULL
                     WHERE node_id = ?1 AND unreachable_at_ms IS NOT NULL
                       AND EXISTS (SELECT 1 FROM nodes n WHERE n.id = ?1 AND n.session_epoch = ?2)
                     RETURNING node_id",
                    params![id, epoch],
                    |r| r.get::<String>(0),
                ),
                "clear an unreachable mark",
            )?;
            if let Some(node_id) = unmarked {
                c.execute(
                    "UPDATE liveness_marks SET cleared_at_ms = ?2 WHERE node_id = ?1 AND cleared_at_ms IS NULL",
                    params![node_id, now],
                )
                .map_err(Error::at("clear a liveness mark"))?;
                cleared.push(node_id);
            }
        }
        let ats: Vec<i64> =
            chunk.iter().map(|(_, _, age)| now.saturating_sub(i64::try_from(*age).unwrap_or(i64::MAX))).collect();
        let mut args: Vec<&dyn crate::sql::ToValue> = Vec::with_capacity(chunk.len() * 3);
        for ((id, epoch, _), at) in chunk.iter().zip(&ats) {
            args.extend([id as &dyn crate::sql::ToValue, epoch, at]);
        }
        c.execute(
            &format!(
                "INSERT INTO node_liveness (node_id, epoch, heard_at_ms) {}
                 ON CONFLICT (node_id) DO UPDATE SET epoch = excluded.epoch, heard_at_ms = excluded.heard_at_ms
                 WHERE node_liveness.heard_at_ms < excluded.heard_at_ms",
                heard_rows(chunk.len())
            ),
            &args,
        )
        .map_err(Error::at("record nodes heard"))?;
    }
    Ok(cleared)
}

/// The rows of a chunk of [`heard`] of `len` nodes (parameters id, epoch,
/// heard time for each) whose node is at that session epoch. Driven by the
/// chunk: each row finds its node by the index on `nodes.id`. (Written as a
/// join, SQLite's planner scanned every node against the chunk's rows
/// instead: 20 chunks of that at 10,000 nodes took seconds of every beat,
/// and the stack fell behind its sessions.)
fn heard_rows(len: usize) -> String {
    let rows: Vec<String> = (0..len)
        .map(|i| {
            let n = i * 3;
            format!("(CAST(?{} AS TEXT), CAST(?{} AS BIGINT), CAST(?{} AS BIGINT))", n + 1, n + 2, n + 3)
        })
        .collect();
    format!(
        "SELECT v.column1 AS id, v.column2 AS epoch, v.column3 AS heard_at FROM (VALUES {}) AS v
         WHERE EXISTS (SELECT 1 FROM nodes n WHERE n.id = v.column1 AND n.session_epoch = v.column2)",
        rows.join(", ")
    )
}

/// How many nodes one statement of [`heard`] writes (3 parameters each,
/// well under both backends' limits), and one transaction of a beat.
pub const HEARD_CHUNK: usize = 500;

/// Marks unreachable every node no gateway heard from for `timeout_ms` by
/// the store's clock (and not marked already), each mark kept in
/// `liveness_marks` with the heard time it judged from; returns them.
///
/// A node whose current session is open on a gateway that beat within the
/// timeout is that gateway's to judge, not the store's: the session ends
/// after three silent heartbeat intervals, and then the store judges the
/// node by its heard time. So a gateway that is alive but late to write
/// the heard times of its sessions (a beat waiting on a loaded store)
/// never has its live nodes marked; a gateway that stopped beating (dead,
/// or stopped) leaves its nodes to this judgement.
pub fn mark_unreachable(c: &Db<'_>, timeout_ms: u64) -> Result<Vec<String>> {
    let now = crate::clock::now_ms(c)?;
    let before = now.saturating_sub(i64::try_from(timeout_ms).unwrap_or(i64::MAX));
    let marked: Vec<(String, i64)> = c
        .query_map(
            "UPDATE node_liveness SET unreachable_at_ms = ?1
             WHERE heard_at_ms < ?2 AND unreachable_at_ms IS NULL
               AND NOT EXISTS (
                 SELECT 1 FROM nodes n
                 JOIN node_sessions s ON s.node_id = n.id AND s.epoch = n.session_epoch
                 JOIN gateways g ON g.id = s.gateway_id
                 WHERE n.id = node_liveness.node_id AND s.disconnected_at_ms IS NULL AND g.beat_at_ms >= ?2)
             RETURNING node_id, heard_at_ms",
            params![now, before],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(Error::at("mark nodes unreachable"))?;
    for (node_id, heard_at) in &marked {
        c.execute(
            "INSERT INTO liveness_marks (node_id, marked_at_ms, heard_at_ms) VALUES (?1, ?2, ?3)",
            params![node_id, now, heard_at],
        )
        .map_err(Error::at("record a liveness mark"))?;
    }
    Ok(marked.into_iter().map(|(node_id, _)| node_id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Store, StoreLocation};

    /// A store with pool `p` and node `n` (epoch 1, home `g1`).
    fn store_with_node() -> Store {
        let store = Store::open(&StoreLocation::Memory).unwrap();
        store
            .write(|c| {
                let pool = crate::rows::PoolRow {
                    id: "p".into(),
                    name: "p".into(),
                    gpu_model: None,
                    expect_gpu_count: None,
                    acceptance: "none".into(),
                    created_at_ms: 1,
                    kind: "gpu".into(),
                    policy: "{}".into(),
                };
                crate::pools::insert(c, &pool)?;
                let node = NewNode {
                    id: "n",
                    pool_id: "p",
                    join_token_id: None,
                    hostname: "h",
                    daemon_version: "v",
                    hardware_id: "hw",
                    created_at_ms: 1,
                };
                insert(c, &node)?;
                assert_eq!(take_epoch(c, "n", "g1")?, Some(1));
                Ok::<_, Error>(())
            })
            .unwrap();
        store
    }

    #[test]
    fn a_chunk_heard_finds_its_nodes_by_index_not_by_a_scan() {
        let store = store_with_node();
        let (id, epoch, at) = ("n", 1u64, 5i64);
        // A whole chunk: the planner weighs the chunk's size against the table.
        let args: Vec<&dyn crate::sql::ToValue> = [&id as &dyn crate::sql::ToValue, &epoch, &at].repeat(HEARD_CHUNK);
        let plan: Vec<String> = store
            .read(|c| {
                let sql = format!("EXPLAIN QUERY PLAN {}", heard_rows(HEARD_CHUNK));
                c.query_map(&sql, &args, |r| r.get::<String>(3)).map_err(Error::at("explain"))
            })
            .unwrap();
        assert!(plan.iter().any(|l| l.starts_with("SEARCH n USING")), "{plan:?}");
        assert!(!plan.iter().any(|l| l.starts_with("SCAN n")), "every node scanned: {plan:?}");
    }

    #[test]
    fn a_node_held_by_a_beating_gateway_is_its_gateway_s_to_judge() {
        let store = store_with_node();
        let session = store
            .write(|c| {
                crate::gateways::register(c, "g1", "https://g1:1", "https://g1:2", 1)?;
                crate::gateways::beat(c, "g1")?;
                let new = crate::sessions::NewSession {
                    node_id: "n",
                    journal_id: "jrn_1",
                    boot_id: "",
                    daemon_version: "v",
                    gateway_id: "g1",
                    now_ms: 1,
                };
                // Heard a minute ago: its gateway was late to write it.
                let session = crate::sessions::open(c, &new, 4)?.expect("a known node");
                c.execute("UPDATE node_liveness SET heard_at_ms = heard_at_ms - 60000", params![])
                    .map_err(Error::at("age the heard time"))?;
                Ok::<_, Error>(session)
            })
            .unwrap();
        let mark = || store.write(|c| mark_unreachable(c, 30_000)).unwrap();
        assert!(mark().is_empty(), "its session is open on a gateway that beats");
        // Its gateway stopped beating (dead, or stopped): the store judges.
        store
            .write(|c| {
                c.execute("UPDATE gateways SET beat_at_ms = beat_at_ms - 60000", params![])
                    .map_err(Error::at("age the beat"))
            })
            .unwrap();
        assert_eq!(mark(), ["n"]);
        // Or its session closed (its gateway judged it silent).
        store.write(|c| heard(c, &[("n", session.epoch, 0)], &marked(c)?)).unwrap();
        store.write(|c| crate::gateways::beat(c, "g1")).unwrap();
        store
            .write(|c| {
                crate::sessions::close(c, session.id, 2)?;
                c.execute("UPDATE node_liveness SET heard_at_ms = heard_at_ms - 60000", params![])
                    .map_err(Error::at("age the heard time"))
            })
            .unwrap();
        assert_eq!(mark(), ["n"]);
    }

    #[test]
    fn a_node_heard_long_ago_is_marked_unreachable_until_heard_again() {
        let store = store_with_node();
        // Heard 10 s ago by epoch 1; epoch 0's word is not written.
        assert!(store.write(|c| heard(c, &[("n", 0, 0)], &marked(c)?)).unwrap().is_empty());
        assert!(store.write(|c| mark_unreachable(c, 0)).unwrap().is_empty(), "never heard: never marked");
        assert!(store.write(|c| heard(c, &[("n", 1, 10_000)], &marked(c)?)).unwrap().is_empty());
        assert!(store.write(|c| mark_unreachable(c, 60_000)).unwrap().is_empty());
        assert_eq!(store.write(|c| mark_unreachable(c, 5_000)).unwrap(), ["n"]);
        assert!(store.read(|c| get(c, "n")).unwrap().unwrap().unreachable_since_ms.is_some());
        assert!(store.write(|c| mark_unreachable(c, 5_000)).unwrap().is_empty(), "marked once");
        assert_eq!(
            store.write(|c| heard(c, &[("n", 1, 0)], &HashSet::new())).unwrap(),
            Vec::<String>::new(),
            "a mark not read is left"
        );
        assert_eq!(store.write(|c| heard(c, &[("n", 1, 0)], &marked(c)?)).unwrap(), ["n"]);
        assert_eq!(store.read(|c| get(c, "n")).unwrap().unwrap().unreachable_since_ms, None);
    }
}
