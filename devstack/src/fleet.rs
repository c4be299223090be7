//! Fleet-sized reads for scale runs (`cargo xtask bench scale`): counts of
//! nodes by state, of live sessions and of commands by state, each one
//! aggregate query, so that a watcher of 10,000 nodes reads a few numbers
//! instead of every row.

use crate::store::{fleet, rows::FleetCounts};
use crate::view::StackView;

impl StackView<'_> {
    /// The fleet's counts.
    pub fn fleet(&self) -> FleetCounts {
        let mut counts = self.read(fleet::counts);
        counts.sessions = self.hub().len() as u64;
        counts
    }

    /// How many nodes are connected to each gateway of the store, by the
    /// store (every gateway process's sessions, not only this one's).
    pub fn sessions_by_gateway(&self) -> Vec<(String, u64)> {
        self.read(fleet::sessions_by_gateway)
    }

    /// Every node's open session on any gateway, by node id.
    pub fn open_sessions(&self) -> Vec<crate::store::rows::NodeSessionRow> {
        self.read(crate::store::sessions::open_all)
    }
}

#[cfg(test)]
mod tests {
    use crate::shared::testing::shared_with_node;

    #[test]
    fn counts_the_joined_node() {
        let shared = shared_with_node("none");
        let counts = shared.view(|v| v.fleet()).unwrap();
        assert_eq!((counts.nodes, counts.adopted, counts.commands), (1, 0, 0));
    }
}
