//! Fleet-sized reads for scale runs (`cargo xtask bench scale`): counts of
//! nodes by state and of commands by state, each one aggregate query, so
//! that a watcher of 10,000 nodes reads a few numbers instead of every row.

use crate::rows::FleetCounts;
use crate::{Db, Error, Result};

/// The fleet's counts in the store (`sessions` is the caller's: the live
/// sessions are not stored).
pub fn counts(c: &Db<'_>) -> Result<FleetCounts> {
    let (nodes, adopted, rejected) = c
        .query_row_cached(
            "SELECT COUNT(*), COALESCE(SUM(state = 'adopted'), 0), COALESCE(SUM(state = 'rejected'), 0) FROM nodes",
            [],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)),
        )
        .map_err(Error::sqlite("counting nodes"))?;
    let (commands, commands_done) = c.query_row_cached(
        "SELECT COUNT(*), COALESCE(SUM(state IN ('succeeded', 'failed', 'expired', 'unsupported')), 0) FROM commands",
        [],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
    )
    .map_err(Error::sqlite("counting commands"))?;
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
