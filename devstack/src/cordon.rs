//! Cordon (docs/devstack.md, "Cordon"): a cordoned node takes no new
//! reservation or instance (`node-cordoned`; placement's `cordoned`
//! filter) and keeps what it runs; `node.cordoned` and `node.uncordoned`
//! go out on the event stream. The cordon is the store's
//! (`node_cordons`), so every gateway of a store sees it.

use tracing::info;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::events::StackEvent;
use crate::shared::Shared;
use crate::status::Code;
use crate::store::Db;
use crate::store::cordons::{self, CordonRow};
use crate::store::nodes;
use crate::view::StackView;

/// The longest reason a cordon keeps.
pub const MAX_REASON_BYTES: usize = 256;

/// Checks a cordon's reason: 1 to 256 bytes, no control characters (it
/// is shown in tables and events).
fn check_reason(reason: &str) -> Result<()> {
    let why = if reason.trim().is_empty() {
        "a cordon needs a reason"
    } else if reason.len() > MAX_REASON_BYTES {
        "the reason is longer than 256 bytes"
    } else if reason.chars().any(char::is_control) {
        "the reason holds control characters"
    } else {
        return Ok(());
    };
    Err(Error::Refused { code: Code::CordonReason, detail: why.into() })
}

/// Cordons a node; says whether it was not cordoned already (a node
/// cordoned again keeps its first reason, and no event goes out).
pub fn cordon(shared: &Shared, node_id: &str, reason: &str) -> Result<bool> {
    check_reason(reason)?;
    let new = shared.ledger.write(|c| {
        if nodes::get(c, node_id)?.is_none() {
            return Err(Error::UnknownNode { node_id: node_id.into() });
        }
        let new = cordons::cordon(c, node_id, reason, now_ms())?;
        if new {
            c.publish(StackEvent::Cordoned { node_id: node_id.into(), reason: reason.into() });
        }
        Ok(new)
    })?;
    if new {
        info!(node_id, reason, "node: cordoned");
    }
    Ok(new)
}

/// Lifts a node's cordon; says whether it was cordoned.
pub fn uncordon(shared: &Shared, node_id: &str) -> Result<bool> {
    let lifted = shared.ledger.write(|c| {
        if nodes::get(c, node_id)?.is_none() {
            return Err(Error::UnknownNode { node_id: node_id.into() });
        }
        let lifted = cordons::uncordon(c, node_id)?;
        if lifted {
            c.publish(StackEvent::Uncordoned { node_id: node_id.into() });
        }
        Ok(lifted)
    })?;
    if lifted {
        info!(node_id, "node: uncordoned");
    }
    Ok(lifted)
}

/// Refuses a new booking on a cordoned node (`node-cordoned`), inside the
/// caller's transaction.
pub fn refuse_if_cordoned(c: &Db<'_>, node_id: &str) -> Result<()> {
    match cordons::get(c, node_id)? {
        Some(row) => Err(Error::Refused {
            code: Code::NodeCordoned,
            detail: format!("node {node_id} is cordoned ({}): it takes no new reservation or instance", row.reason),
        }),
        None => Ok(()),
    }
}

impl StackView<'_> {
    /// A node's cordon, if it is cordoned.
    pub fn cordon(&self, node_id: &str) -> Option<CordonRow> {
        self.read(|c| cordons::get(c, node_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::testing::shared_with_node;

    #[test]
    fn a_cordon_needs_a_known_node_and_a_readable_reason_and_is_published_once() {
        let shared = shared_with_node("none");
        for reason in ["", "a\nb", &"x".repeat(257)] {
            let err = cordon(&shared, "node_1", reason).unwrap_err();
            assert!(err.to_string().starts_with("cordon-reason: "), "{err}");
        }
        assert!(matches!(cordon(&shared, "node_9", "r").unwrap_err(), Error::UnknownNode { .. }));
        assert!(cordon(&shared, "node_1", "disk swap").unwrap());
        assert!(!cordon(&shared, "node_1", "again").unwrap());
        let refused = shared.ledger.read(|c| refuse_if_cordoned(c, "node_1")).unwrap_err();
        assert!(refused.to_string().starts_with("node-cordoned: node node_1 is cordoned (disk swap)"), "{refused}");
        assert!(uncordon(&shared, "node_1").unwrap());
        assert!(!uncordon(&shared, "node_1").unwrap());
        shared.ledger.read(|c| refuse_if_cordoned(c, "node_1")).unwrap();
        let names: Vec<&str> = shared.ledger.events().recent().iter().map(|e| e.event.name()).collect();
        assert_eq!(names, ["node.cordoned", "node.uncordoned"]);
    }
}
