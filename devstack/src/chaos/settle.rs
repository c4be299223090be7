//! Waiting on the fleet of a chaos run: until every agent joined and was
//! adopted (its node id read from its own config.toml), and, after the
//! faults, until it settled: every node connected again, every command and
//! booking ended, every spec observed. Both poll the store with a deadline.

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use super::{ChaosError, CommandTally};
use crate::stack::DevStack;
use crate::store::rows::{NodeState, ReservationState};

/// How often the store is read while waiting.
const POLL: Duration = Duration::from_millis(500);

/// Waits until `nodes` nodes of `pool` are adopted; their ids, by agent index.
pub async fn adopted(
    stack: &DevStack,
    pool: &str,
    data: &Path,
    nodes: u32,
    within: Duration,
) -> Result<Vec<String>, ChaosError> {
    let what = format!("{nodes} node(s) adopted");
    stack
        .await_until(what, within, |v| {
            let adopted = v.nodes().iter().filter(|n| n.pool_id == pool && n.state == NodeState::Adopted).count();
            v.note(format_args!("{adopted} adopted"));
            (adopted as u32 >= nodes).then_some(())
        })
        .await?;
    let ids = agent_nodes(data, nodes);
    if ids.len() < nodes as usize {
        return Err(ChaosError::Sim(format!("{} of {nodes} agent(s) have a node id in their config.toml", ids.len())));
    }
    Ok(ids.into_iter().map(|(_, id)| id).collect())
}

/// The node id of each of `agents` agents under `data/sim/<i>` that joined,
/// by agent index.
pub fn agent_nodes(data: &Path, agents: u32) -> Vec<(u32, String)> {
    (0..agents)
        .filter_map(|i| {
            let text = std::fs::read_to_string(data.join("sim").join(i.to_string()).join("config.toml")).ok()?;
            let id = text
                .lines()
                .take_while(|l| !l.trim_start().starts_with('['))
                .find_map(|l| {
                    l.split_once('=').filter(|(k, _)| k.trim() == "node_id").map(|(_, v)| v.trim().trim_matches('"'))
                })
                .filter(|id| !id.is_empty())?;
            Some((i, id.to_string()))
        })
        .collect()
}

/// Waits until the fleet settled, at most `within`; whether it did.
pub async fn settled(stack: &DevStack, nodes: &[String], within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if is_settled(stack, nodes) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(POLL).await;
    }
}

fn is_settled(stack: &DevStack, nodes: &[String]) -> bool {
    // Connected to any gateway of the store: the session the store has open
    // (the stack in process holds none when gateway processes serve).
    let open: std::collections::HashSet<String> =
        stack.view(|v| v.open_sessions().into_iter().map(|s| s.node_id).collect()).unwrap_or_default();
    if !nodes.iter().all(|n| open.contains(n)) {
        return false;
    }
    let Ok(facts) = stack.fleet_facts() else { return false };
    facts.commands.iter().all(|c| c.state.is_terminal())
        && facts
            .reservations
            .iter()
            .all(|r| !matches!(r.state, ReservationState::Pending | ReservationState::Releasing))
        && facts.deliveries.iter().all(|d| d.observed_at_ms.is_some())
}

/// The commands by state.
pub fn tally(stack: &DevStack) -> Result<CommandTally, ChaosError> {
    let facts = stack.fleet_facts()?;
    let mut tally = CommandTally { total: facts.commands.len() as u64, ..CommandTally::default() };
    for c in &facts.commands {
        if c.state.is_terminal() {
            *tally.by_state.entry(c.state.to_string()).or_default() += 1;
        } else {
            tally.open += 1;
        }
    }
    Ok(tally)
}
