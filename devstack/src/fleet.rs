//! Fleet-sized reads for scale runs (`cargo xtask bench scale`): counts of
//! nodes by state, of live sessions and of commands by state, each one
//! aggregate query, so that a watcher of 10,000 nodes reads a few numbers
//! instead of every row.

use crate::store::Cached as _;
use rusqlite::Connection;

use crate::error::{Error, Result};
use crate::stack::DevStack;
use crate::view::StackView;

/// How many nodes, sessions and commands the stack holds, at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FleetCounts {
    /// Nodes joined (any state).
    pub nodes: u64,
    /// Nodes adopted.
    pub adopted: u64,
    /// Nodes rejected.
    pub rejected: u64,
    /// Live sessions.
    pub sessions: u64,
    /// Commands in a terminal state.
    pub commands_done: u64,
    /// Commands of any state.
    pub commands: u64,
}

fn counts(c: &Connection) -> Result<FleetCounts> {
    let (nodes, adopted, rejected) = c
        .query_row_cached(
            "SELECT COUNT(*), COALESCE(SUM(state = 'adopted'), 0), COALESCE(SUM(state = 'rejected'), 0) FROM nodes",
            [],
            |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?)),
        )
        .map_err(Error::store("counting nodes"))?;
    let (commands, commands_done) = c.query_row_cached(
        "SELECT COUNT(*), COALESCE(SUM(state IN ('succeeded', 'failed', 'expired', 'unsupported')), 0) FROM commands",
        [],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
    )
    .map_err(Error::store("counting commands"))?;
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

impl StackView<'_> {
    /// The fleet's counts.
    pub fn fleet(&self) -> FleetCounts {
        let mut counts = self.read(counts);
        counts.sessions = self.hub().len() as u64;
        counts
    }
}

impl DevStack {
    /// The fleet's counts.
    pub fn fleet(&self) -> Result<FleetCounts> {
        self.view(|v| v.fleet())
    }

    /// How many sessions are live: [`FleetCounts::sessions`] alone, read
    /// without the store.
    pub fn live_sessions(&self) -> u64 {
        self.shared().hub.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use crate::shared::testing::shared_with_node;

    #[test]
    fn counts_the_joined_node() {
        let shared = shared_with_node("none");
        let counts = shared.store.with(super::counts).unwrap();
        assert_eq!((counts.nodes, counts.adopted, counts.commands), (1, 0, 0));
    }
}
