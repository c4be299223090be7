//! Adoption: a joined node's first session enqueues its pool's acceptance
//! check (`diag.nvml`); its verified SUCCEEDED result with the pool's
//! expected GPU count, every GPU healthy, adopts the node with NodeSpec
//! generation 1 (its pool policy's host section), anything else rejects it
//! (`GpuCountMismatch`, `GpuUnhealthy`, `AcceptanceFailed`). Event-driven:
//! the session calls in when a session opens, and the decision on a
//! command's end is a CommandUpdate handler ([`AcceptanceCheck`]) that runs
//! in the update's transaction.

use serde_json::json;
use tracing::info;

use crate::clock::now_ms;
use crate::commands::{self, CommandOptions};
use crate::error::{Error, Result};
use crate::events::StackEvent;
use crate::gateway::handlers::{Effects, Event, EventHandler, RequestContext, WelcomedHook};
use crate::ledger::Tx;
use crate::policy::PoolPolicy;
use crate::shared::Shared;
use crate::store::rows::{CommandRow, CommandStatus, NodeRow, NodeSpecRow, NodeState};
use crate::store::{commands as command_rows, nodes, pools, specs};

/// The acceptance check that runs `diag.nvml`.
pub const ACCEPTANCE_DIAG: &str = "diag.nvml";
/// No acceptance check: adopted on the first session.
pub const ACCEPTANCE_NONE: &str = "none";

/// The Welcomed hook: a joined node's first session enqueues its acceptance
/// check (or adopts it at once), and a decision a stopped stack had not made
/// is made now; a node adopted now gets its first spec.
pub struct FirstSession;

impl WelcomedHook for FirstSession {
    fn on_welcomed(&self, session: &RequestContext<'_>) -> Result<Effects> {
        let shared = session.shared;
        let Some(node) = shared.ledger.read_one(|c| nodes::get(c, &session.node.node_id))? else {
            return Ok(Effects::default());
        };
        let spec = on_session_start(shared, &node, session.epoch)?;
        Ok(Effects { specs: spec.into_iter().collect(), ..Effects::default() })
    }
}

/// Returns a spec to send when the node was adopted right now (a pool
/// without acceptance check, or a decision a stopped stack had not made
/// yet).
fn on_session_start(shared: &Shared, node: &NodeRow, epoch: u64) -> Result<Option<NodeSpecRow>> {
    match node.state {
        NodeState::Joined => {
            let pool = shared
                .ledger
                .read(|c| pools::get(c, &node.pool_id))?
                .ok_or_else(|| Error::UnknownPool { pool_id: node.pool_id.clone() })?;
            if pool.acceptance == ACCEPTANCE_NONE {
                return shared.ledger.write(|c| {
                    nodes::fence(c, &node.id, epoch)?;
                    adopt(c, shared, node)
                });
            }
            // The command and the move to `accepting` in one transaction:
            // of two first sessions racing here, only one enqueues.
            let opts = CommandOptions { retry_safe: true, ..Default::default() };
            let row = commands::prepare(shared, &node.id, ACCEPTANCE_DIAG, &json!({}), &opts);
            let enqueued = shared.ledger.write(|c| {
                nodes::fence(c, &node.id, epoch)?;
                if !nodes::set_accepting(c, &node.id, &row.id)? {
                    return Ok(false);
                }
                commands::insert_rows(c, std::slice::from_ref(&row))?;
                Ok(true)
            })?;
            if enqueued {
                info!(node_id = %node.id, command_id = %row.id, "adoption: acceptance check enqueued");
                commands::wake(shared, std::slice::from_ref(&row));
            }
            Ok(None)
        }
        // A stack that stopped between a result and its decision decides now.
        NodeState::Accepting => {
            let Some(id) = &node.acceptance_command_id else { return Ok(None) };
            shared.ledger.write(|c| match nodes::fence(c, &node.id, epoch).and_then(|()| command_rows::get(c, id))? {
                Some(cmd) if cmd.state.is_terminal() => decide(c, shared, node, &cmd),
                _ => Ok(None),
            })
        }
        NodeState::Adopted | NodeState::Rejected => Ok(None),
    }
}

/// The CommandUpdate handler that decides on a node once its acceptance
/// command ended (after the commands handler stored the end).
pub struct AcceptanceCheck;

impl EventHandler<proto::CommandUpdate> for AcceptanceCheck {
    fn record(&self, event: &Event<'_>, update: &proto::CommandUpdate) -> Result<Effects> {
        let mut effects = Effects::default();
        let node_id = event.node_id();
        let cmd = command_rows::get(event.c, &update.command_id)?;
        let Some(cmd) = cmd.filter(|c| c.node_id == node_id && c.state.is_terminal()) else { return Ok(effects) };
        let Some(node) = nodes::get(event.c, node_id)? else { return Ok(effects) };
        effects.specs.extend(decide(event.c, event.shared, &node, &cmd)?);
        Ok(effects)
    }
}

/// Decides on a node whose command `cmd` ended, inside a caller's
/// transaction: nothing unless it is the node's acceptance check and the
/// node still waits for it. Returns the spec to send when the node was
/// adopted; the decision is published once the transaction committed.
fn decide(c: &Tx<'_>, shared: &Shared, node: &NodeRow, cmd: &CommandRow) -> Result<Option<NodeSpecRow>> {
    if node.state != NodeState::Accepting || node.acceptance_command_id.as_deref() != Some(cmd.id.as_str()) {
        return Ok(None);
    }
    let pool = pools::get(c, &node.pool_id)?.ok_or_else(|| Error::UnknownPool { pool_id: node.pool_id.clone() })?;
    match judge(cmd, pool.expect_gpu_count) {
        Ok(gpus) => {
            info!(node_id = %node.id, gpus, "adoption: acceptance check passed");
            adopt(c, shared, node)
        }
        Err(reason) => {
            // An outcome, not a fault of the stack: info, and the `rejected`
            // event (`devstack serve` reports rejections grouped).
            info!(node_id = %node.id, %reason, "adoption: node rejected");
            nodes::reject(c, &node.id, &reason)?;
            c.publish(StackEvent::Rejected { node_id: node.id.clone(), reason });
            Ok(None)
        }
    }
}

/// The GPU count of a passed check, or the rejection reason.
fn judge(cmd: &CommandRow, expected: Option<u32>) -> Result<u64, String> {
    if cmd.state != CommandStatus::Succeeded {
        return Err(format!("AcceptanceFailed: {} ended {}: {}", cmd.kind, cmd.state, cmd.reason));
    }
    let output: serde_json::Value = serde_json::from_slice(cmd.output.as_deref().unwrap_or_default())
        .map_err(|e| format!("AcceptanceFailed: {} output is not JSON: {e}", cmd.kind))?;
    let gpus = output
        .get("gpus")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format!("AcceptanceFailed: {} output has no gpus count", cmd.kind))?;
    if let Some(n) = expected
        && u64::from(n) != gpus
    {
        return Err(format!("GpuCountMismatch: expected {n} GPUs, found {gpus}"));
    }
    let healthy = output.get("healthy").and_then(serde_json::Value::as_u64).unwrap_or(gpus);
    if healthy < gpus {
        let failing = output.get("failing").map(|f| f.to_string()).unwrap_or_else(|| "[]".into());
        return Err(format!("GpuUnhealthy: {} of {gpus} GPUs failed {}: {failing}", gpus - healthy, cmd.kind));
    }
    Ok(gpus)
}

/// Adopts a node with NodeSpec generation 1 inside a caller's transaction;
/// `None` when another session of the node adopted it first.
fn adopt(c: &Tx<'_>, shared: &Shared, node: &NodeRow) -> Result<Option<NodeSpecRow>> {
    let now = now_ms();
    let pool = pools::get(c, &node.pool_id)?.ok_or_else(|| Error::UnknownPool { pool_id: node.pool_id.clone() })?;
    let spec = crate::spec::first(shared, &node.id, PoolPolicy::of(&pool)?.host_section(), now);
    if !nodes::adopt(c, &node.id, now)? {
        return Ok(None);
    }
    specs::insert(c, &spec)?;
    info!(node_id = %node.id, generation = 1, "adoption: node adopted");
    c.publish(StackEvent::Adopted { node_id: node.id.clone() });
    Ok(Some(spec))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diag(state: CommandStatus, output: &str) -> CommandRow {
        CommandRow {
            id: "cmd_1".into(),
            node_id: "node_1".into(),
            kind: ACCEPTANCE_DIAG.into(),
            params: b"{}".to_vec(),
            retry_safe: true,
            destructive: false,
            batch: String::new(),
            not_after_ms: 0,
            min_generation: 0,
            envelope: Vec::new(),
            state,
            reason: String::new(),
            result: None,
            output: Some(output.as_bytes().to_vec()),
            created_at_ms: 0,
            delivered_at_ms: None,
            finished_at_ms: None,
            deliveries: 1,
            batch_approval: None,
        }
    }

    #[test]
    fn the_gpu_count_decides() {
        let ok = diag(CommandStatus::Succeeded, r#"{"gpus":8,"healthy":8,"driver":"550"}"#);
        assert_eq!(judge(&ok, Some(8)), Ok(8));
        assert_eq!(judge(&ok, None), Ok(8));
        assert!(judge(&ok, Some(7)).unwrap_err().starts_with("GpuCountMismatch"));
        assert!(judge(&diag(CommandStatus::Failed, "{}"), None).unwrap_err().starts_with("AcceptanceFailed"));
        assert!(judge(&diag(CommandStatus::Succeeded, "{}"), None).unwrap_err().starts_with("AcceptanceFailed"));
        let sick = diag(CommandStatus::Succeeded, r#"{"gpus":8,"healthy":6,"failing":[1,5]}"#);
        assert_eq!(judge(&sick, Some(8)).unwrap_err(), "GpuUnhealthy: 2 of 8 GPUs failed diag.nvml: [1,5]");
    }

    #[test]
    fn two_first_sessions_with_the_same_view_enqueue_one_check_and_adopt_once() {
        let shared = crate::shared::testing::shared_with_node(ACCEPTANCE_DIAG);
        let joined = shared.ledger.read(|c| nodes::get(c, "node_1")).unwrap().unwrap();
        // Both sessions read the node as `joined` before either decided.
        assert_eq!(on_session_start(&shared, &joined, 0).unwrap(), None);
        assert_eq!(on_session_start(&shared, &joined, 0).unwrap(), None);
        let commands = shared.ledger.read(|c| command_rows::of_node(c, "node_1")).unwrap();
        assert_eq!(commands.len(), 1);
        let node = shared.ledger.read(|c| nodes::get(c, "node_1")).unwrap().unwrap();
        assert_eq!((node.state, node.acceptance_command_id), (NodeState::Accepting, Some(commands[0].id.clone())));

        let plain = crate::shared::testing::shared_with_node(ACCEPTANCE_NONE);
        let joined = plain.ledger.read(|c| nodes::get(c, "node_1")).unwrap().unwrap();
        assert_eq!(on_session_start(&plain, &joined, 0).unwrap().map(|s| s.generation), Some(1));
        assert_eq!(on_session_start(&plain, &joined, 0).unwrap(), None);
        assert_eq!(plain.ledger.read(|c| specs::of_node(c, "node_1")).unwrap().len(), 1);
    }
}
