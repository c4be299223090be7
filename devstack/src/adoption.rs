//! Adoption: a joined node's first session enqueues its pool's acceptance
//! check (`diag.nvml`); its verified SUCCEEDED result with the pool's
//! expected GPU count adopts the node with NodeSpec generation 1, anything
//! else rejects it (`GpuCountMismatch`, `AcceptanceFailed`). Event-driven: the
//! session task calls in when a session opens and when a command ends.

use serde_json::json;
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::commands::{self, CommandOptions};
use crate::error::{Error, Result};
use crate::shared::Shared;
use crate::store::rows::{CommandRow, CommandStatus, NodeRow, NodeSpecRow, NodeState};
use crate::store::{commands as command_rows, nodes, pools, specs};

/// The acceptance check that runs `diag.nvml`.
pub const ACCEPTANCE_DIAG: &str = "diag.nvml";
/// No acceptance check: adopted on the first session.
pub const ACCEPTANCE_NONE: &str = "none";

/// Called once a node's session is welcomed. Returns a spec to send when the
/// node was adopted right now (a pool without acceptance check).
pub fn on_session_start(shared: &Shared, node: &NodeRow) -> Result<Option<NodeSpecRow>> {
    match node.state {
        NodeState::Joined => {
            let pool = shared
                .store
                .with(|c| pools::get(c, &node.pool_id))?
                .ok_or_else(|| Error::UnknownPool { pool_id: node.pool_id.clone() })?;
            if pool.acceptance == ACCEPTANCE_NONE {
                return adopt(shared, node).map(Some);
            }
            let opts = CommandOptions { retry_safe: true, ..Default::default() };
            let id = commands::enqueue(shared, &node.id, ACCEPTANCE_DIAG, &json!({}), &opts)?;
            shared.store.with(|c| nodes::set_accepting(c, &node.id, &id))?;
            info!(node_id = %node.id, command_id = %id, "adoption: acceptance check enqueued");
            shared.bump();
            Ok(None)
        }
        // A stack that stopped between a result and its decision decides now.
        NodeState::Accepting => {
            let Some(id) = &node.acceptance_command_id else { return Ok(None) };
            match shared.store.with(|c| command_rows::get(c, id))? {
                Some(cmd) if cmd.state.is_terminal() => on_command_done(shared, node, &cmd),
                _ => Ok(None),
            }
        }
        NodeState::Adopted | NodeState::Rejected => Ok(None),
    }
}

/// Called when a command of `node` reached a terminal state. Returns the
/// spec to send when the node was adopted.
pub fn on_command_done(shared: &Shared, node: &NodeRow, cmd: &CommandRow) -> Result<Option<NodeSpecRow>> {
    if node.state != NodeState::Accepting || node.acceptance_command_id.as_deref() != Some(cmd.id.as_str()) {
        return Ok(None);
    }
    let pool = shared
        .store
        .with(|c| pools::get(c, &node.pool_id))?
        .ok_or_else(|| Error::UnknownPool { pool_id: node.pool_id.clone() })?;
    let verdict = judge(cmd, pool.expect_gpu_count);
    match verdict {
        Ok(gpus) => {
            info!(node_id = %node.id, gpus, "adoption: acceptance check passed");
            adopt(shared, node).map(Some)
        }
        Err(reason) => {
            warn!(node_id = %node.id, %reason, "adoption: node rejected");
            shared.store.with(|c| nodes::set_state(c, &node.id, NodeState::Rejected, &reason, now_ms()))?;
            shared.bump();
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
    match expected {
        Some(n) if u64::from(n) != gpus => Err(format!("GpuCountMismatch: expected {n} GPUs, found {gpus}")),
        _ => Ok(gpus),
    }
}

/// Adopts a node with NodeSpec generation 1.
fn adopt(shared: &Shared, node: &NodeRow) -> Result<NodeSpecRow> {
    let now = now_ms();
    let spec = crate::spec::first(shared, &node.id, now);
    shared.store.tx(|c| {
        nodes::set_state(c, &node.id, NodeState::Adopted, "", now)?;
        specs::insert(c, &spec)
    })?;
    info!(node_id = %node.id, generation = 1, "adoption: node adopted");
    shared.bump();
    Ok(spec)
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
    }
}
