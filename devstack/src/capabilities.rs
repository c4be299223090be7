//! Device capabilities (docs/protocol.md, "Capabilities"): what a node's
//! Hello advertises becomes its labels `bc.dev/cap.<capability>` (replaced
//! at every Hello), and a booking that needs one is refused on a node
//! without it (`capability-missing`, naming it): a booked share of the
//! host needs `devices.limits`, a Kubernetes binding `binding.kubernetes`
//! (and an instance with a network policy `instance.network-policy`, which
//! placement asks for: `instances`).
//! A node started with an older capability set gets neither.

use tracing::{info, warn};

use crate::error::{Error, Result};
use crate::gateway::handlers::{HelloHook, Opening};
use crate::status::Code;
use crate::store::Db;
use crate::store::labels;

/// The node runs a hold's booked vCPUs and memory in a slice.
pub const DEVICES_LIMITS: &str = "devices.limits";
/// The node binds holds to Kubernetes.
pub const BINDING_KUBERNETES: &str = "binding.kubernetes";
/// The node enforces an instance's network policy.
pub const INSTANCE_NETWORK_POLICY: &str = "instance.network-policy";

/// The most capabilities of a Hello the stack records.
pub const MAX_CAPABILITIES: usize = 32;

/// Whether a capability is of its form: 1 to 64 bytes of lowercase ASCII
/// letters, digits, `.` and `-` (it names a label).
fn well_formed(capability: &str) -> bool {
    (1..=64).contains(&capability.len())
        && capability.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

/// The Hello hook that records a Hello's capabilities as labels: the first
/// [`MAX_CAPABILITIES`] well-formed ones (the others are logged and left).
pub struct Capabilities;

impl HelloHook for Capabilities {
    fn on_hello(&self, opening: &Opening<'_>) -> Result<()> {
        let node_id = opening.node.node_id.as_str();
        let advertised = &opening.hello.capabilities;
        let mut kept: Vec<String> =
            advertised.iter().filter(|c| well_formed(c)).take(MAX_CAPABILITIES).cloned().collect();
        kept.sort();
        kept.dedup();
        if kept.len() != advertised.len() {
            warn!(
                node_id,
                advertised = advertised.len(),
                kept = kept.len(),
                "node: capabilities not of their form left out"
            );
        }
        if labels::set_capabilities(opening.c, node_id, &kept, opening.now_ms)? {
            info!(node_id, capabilities = ?kept, "node: capability labels");
        }
        Ok(())
    }
}

/// Refuses a booking on a node that does not advertise each of `needed`
/// (`capability-missing`, naming the first missing), inside the caller's
/// transaction.
pub fn require(c: &Db<'_>, node_id: &str, needed: &[&str]) -> Result<()> {
    for capability in needed {
        if !labels::has_capability(c, node_id, capability)? {
            return Err(Error::Refused {
                code: Code::CapabilityMissing,
                detail: format!("{capability}: node {node_id} does not advertise it"),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capability_names_a_label() {
        for good in ["nvml", "devices.limits", "instance.network-policy", "events.v1"] {
            assert!(well_formed(good), "{good}");
        }
        for bad in ["", "Caps", "a b", "x/y", "\u{1b}[31m", &"a".repeat(65)] {
            assert!(!well_formed(bad), "{bad:?}");
        }
    }
}
