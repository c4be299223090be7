//! I2: at most one execution per command. fakehw's execution counters are
//! the ground truth (a command's counter is fsynced before it runs). A
//! command that is not retry-safe runs at most once, whatever happened to
//! its node (a crash, a reboot, a lost journal: bcd fails it `interrupted`
//! or `journal-lost` instead of running it again); a retry-safe one runs
//! again only after its node restarted while it was open (bcd's rule:
//! accepted but not finished before a crash runs again), so at most once
//! plus the agent's starts between its creation and its end. A command the
//! stack has as SUCCEEDED ran at least once. Only nodes whose agent facts
//! were read are checked.

use super::{Facts, Invariant, Violation};
use crate::store::rows::CommandStatus;

/// The I2 violations.
pub(super) fn i2(facts: &Facts) -> Vec<Violation> {
    let mut out = Vec::new();
    for cmd in &facts.store.commands {
        let Some(agent) = facts.agents.nodes.get(&cmd.node_id) else { continue };
        let runs = agent.executions.get(&cmd.id).copied().unwrap_or(0);
        let violation =
            |detail: String| Violation::new(Invariant::I2, &cmd.node_id, &cmd.id, cmd.finished_at_ms, detail);
        if !cmd.retry_safe && runs > 1 {
            out.push(violation(format!(
                "{} ran {runs} times; it is not retry-safe (now {} {:?})",
                cmd.kind, cmd.state, cmd.reason
            )));
            continue;
        }
        if cmd.retry_safe {
            // From its creation: `delivered_at_ms` moves with each delivery,
            // and the restart that made a delivery again comes before it.
            let from = cmd.created_at_ms;
            let to = cmd.finished_at_ms.unwrap_or(facts.store.taken_at_ms);
            let restarts = agent.starts.iter().filter(|&&s| from <= s && s <= to).count() as u64;
            if runs > 1 + restarts {
                out.push(violation(format!(
                    "{} ran {runs} times with {restarts} restart(s) of its node while it was open ({from}..{to})",
                    cmd.kind
                )));
                continue;
            }
        }
        if cmd.state == CommandStatus::Succeeded && runs == 0 {
            out.push(violation(format!("{} is SUCCEEDED but never ran on its node", cmd.kind)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{AgentFacts, NodeAgentFacts, check};
    use super::*;
    use crate::store::rows::{CommandFact, FleetFacts};

    fn command(id: &str, retry_safe: bool, state: CommandStatus) -> CommandFact {
        CommandFact {
            id: id.into(),
            node_id: "n".into(),
            kind: "logs.collect".into(),
            retry_safe,
            state,
            reason: String::new(),
            created_at_ms: 100,
            delivered_at_ms: Some(110),
            finished_at_ms: Some(500),
        }
    }

    fn facts(commands: Vec<CommandFact>, runs: &[(&str, u64)], starts: &[i64]) -> Facts {
        let node = NodeAgentFacts {
            executions: runs.iter().map(|(c, n)| (c.to_string(), *n)).collect(),
            starts: starts.to_vec(),
            ..Default::default()
        };
        Facts {
            store: FleetFacts { commands, taken_at_ms: 1_000, ..Default::default() },
            agents: AgentFacts { nodes: [("n".to_string(), node)].into() },
            ..Default::default()
        }
    }

    #[test]
    fn a_command_that_is_not_retry_safe_run_twice_is_a_violation() {
        let f = facts(vec![command("c1", false, CommandStatus::Failed)], &[("c1", 2)], &[0, 300]);
        let v = check(&f, Default::default());
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!((v[0].invariant, v[0].subject.as_str()), (Invariant::I2, "c1"));
    }

    #[test]
    fn a_retry_safe_command_runs_again_only_after_a_restart_while_it_was_open() {
        let after_a_restart = facts(vec![command("c1", true, CommandStatus::Succeeded)], &[("c1", 2)], &[0, 300]);
        assert!(check(&after_a_restart, Default::default()).is_empty());
        let without = facts(vec![command("c1", true, CommandStatus::Succeeded)], &[("c1", 2)], &[0, 600]);
        assert_eq!(check(&without, Default::default()).len(), 1);
    }

    #[test]
    fn a_success_that_never_ran_is_a_violation_and_an_unread_node_is_not_checked() {
        let f = facts(vec![command("c1", false, CommandStatus::Succeeded)], &[], &[]);
        assert_eq!(check(&f, Default::default()).len(), 1);
        let mut unread = f.clone();
        unread.agents.nodes.clear();
        assert!(check(&unread, Default::default()).is_empty());
        let failed = facts(vec![command("c1", false, CommandStatus::Expired)], &[], &[]);
        assert!(check(&failed, Default::default()).is_empty());
    }
}
