//! The fleet's counts, read in one aggregate query.

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
