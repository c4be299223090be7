//! Fleet-sized reads for scale runs (`cargo xtask bench scale`): counts of
//! nodes by state and of commands by state, each one aggregate query, so
//! that a watcher of 10,000 nodes reads a few numbers instead of every row.

use crate::params;
use crate::rows::FleetCounts;
use crate::{Db, Error, Result};

/// The fleet's counts in the store (`sessions` is the caller's: the live
/// sessions are not stored).
pub fn counts(c: &Db<'_>) -> Result<FleetCounts> {
    let (nodes, adopted, rejected) = c
        .query_row(
            "SELECT COUNT(*), CAST(COALESCE(SUM(CASE WHEN state = 'adopted' THEN 1 ELSE 0 END), 0) AS BIGINT), \
             CAST(COALESCE(SUM(CASE WHEN state = 'rejected' THEN 1 ELSE 0 END), 0) AS BIGINT) FROM nodes",
            params![],
            |r| Ok((r.get::<i64>(0)?, r.get::<i64>(1)?, r.get::<i64>(2)?)),
        )
        .map_err(Error::at("counting nodes"))?;
    let (commands, commands_done) = c
        .query_row(
            "SELECT COUNT(*), CAST(COALESCE(SUM(CASE WHEN state IN ('succeeded', 'failed', 'expired', 'unsupported') \
         THEN 1 ELSE 0 END), 0) AS BIGINT) FROM commands",
            params![],
            |r| Ok((r.get::<i64>(0)?, r.get::<i64>(1)?)),
        )
        .map_err(Error::at("counting commands"))?;
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok(FleetCounts {
        nodes: n(nodes),
        adopted: n(adopted),
        rejected: n(rejected),
        sessions: 0,
        commands_done: n(commands_done),
        commands: n(commands),
    })
}

/// How many nodes have their current session open on each gateway (the
/// store's view of who is connected where, across gateway processes).
pub fn sessions_by_gateway(c: &Db<'_>) -> Result<Vec<(String, u64)>> {
    c.query_map(
        "SELECT s.gateway_id, COUNT(*) FROM node_sessions s
         JOIN nodes n ON n.id = s.node_id AND n.session_epoch = s.epoch
         WHERE s.disconnected_at_ms IS NULL GROUP BY s.gateway_id ORDER BY s.gateway_id",
        params![],
        |r| Ok((r.get::<String>(0)?, u64::try_from(r.get::<i64>(1)?).unwrap_or(0))),
    )
    .map_err(Error::at("count the open sessions by gateway"))
}
