//! What a fault does to an agent: a process fault (crash, reboot, journal
//! loss) through `bcd sim`'s control socket, with the dead process's
//! connections reset; a link fault through the fault proxy, counted per
//! agent so that two faults of one kind that overlap end when the later
//! one does. Gateway faults are the plane's ([`super::plane`]).

use std::collections::HashMap;

use super::ChaosError;
use super::agents::SimControl;
use super::proxy::{FaultProxy, LinkState};
use super::schedule::{Fault, FaultKind};

/// The link faults an agent is under, each counted.
#[derive(Clone, Copy, Debug, Default)]
struct Under {
    partition: u32,
    isolate: u32,
    half_open: u32,
    stall: u32,
}

/// The faults under way on the agents.
pub struct AgentFaults {
    under: HashMap<u32, Under>,
    gateways: usize,
}

impl AgentFaults {
    /// None under way, for agents that reach `gateways` gateways.
    pub fn new(gateways: usize) -> AgentFaults {
        AgentFaults { under: HashMap::new(), gateways: gateways.max(1) }
    }

    /// Starts (or, `starts` false, ends) an agent's `fault`: `Some(false)`
    /// when a process fault found its agent between two lives, `None` for
    /// a gateway's fault.
    pub async fn apply(
        &mut self,
        control: &mut SimControl,
        proxy: &FaultProxy,
        fault: &Fault,
        starts: bool,
    ) -> Result<Option<bool>, ChaosError> {
        let links = proxy.agent(fault.target.min(proxy.agents().len().saturating_sub(1) as u32));
        let kind = match fault.kind {
            FaultKind::Crash | FaultKind::Reboot | FaultKind::JournalLoss => {
                let done = match control.fault(fault.kind, fault.target).await {
                    Ok(()) => true,
                    Err(ChaosError::Sim(_)) => false,
                    Err(e) => return Err(e),
                };
                // What the dead process held is reset by its kernel.
                links.update(|s| s.resets += 1);
                return Ok(Some(done));
            }
            FaultKind::Reset => {
                links.update(|s| s.resets += 1);
                return Ok(Some(true));
            }
            FaultKind::GatewayKill | FaultKind::GatewayStall => return Ok(None),
            kind => kind,
        };
        let home = fault.target as usize % self.gateways;
        let under = self.under.entry(fault.target).or_default();
        let count = match kind {
            FaultKind::Partition => &mut under.partition,
            FaultKind::Isolate => &mut under.isolate,
            FaultKind::HalfOpen => &mut under.half_open,
            _ => &mut under.stall,
        };
        *count = if starts { *count + 1 } else { count.saturating_sub(1) };
        let u = *under;
        links.update(|s| {
            *s = LinkState {
                // A partition cuts the node from its home gateway; isolation from all.
                cut: if u.isolate > 0 {
                    u64::MAX
                } else if u.partition > 0 {
                    1 << home.min(63)
                } else {
                    0
                },
                up_held: u.half_open > 0,
                down_held: u.stall > 0,
                resets: s.resets,
            }
        });
        Ok(Some(true))
    }
}
