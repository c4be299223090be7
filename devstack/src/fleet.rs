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
