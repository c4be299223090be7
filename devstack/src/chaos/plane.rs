//! The control plane of a chaos run, and what each fault does: the dev
//! stack in process on its SQLite file (a gateway kill drops it, as a crash
//! would, and the revival starts it again on the same file and ports), and
//! the faults' effects on the agents' links, counted per agent so that two
//! faults of one kind that overlap end when the later one does.

use std::collections::HashMap;
use std::time::Duration;

use super::ChaosError;
use super::agents::SimProcess;
use super::proxy::{FaultProxy, LinkState};
use super::schedule::{Fault, FaultKind};
use crate::options::DevStackOptions;
use crate::stack::DevStack;

/// How long a revival waits for the old listeners' ports.
const REBIND: Duration = Duration::from_secs(30);

/// The link faults an agent is under, each counted.
#[derive(Clone, Copy, Debug, Default)]
struct Under {
    partition: u32,
    isolate: u32,
    half_open: u32,
    stall: u32,
}

/// The stack, and the link faults under way.
pub struct Plane {
    stack: Option<DevStack>,
    options: DevStackOptions,
    under: HashMap<u32, Under>,
}

impl Plane {
    /// Starts the stack.
    pub async fn start(options: DevStackOptions) -> Result<Plane, ChaosError> {
        let stack = DevStack::start(options).await?;
        let options = stack.restart_options();
        Ok(Plane { stack: Some(stack), options, under: HashMap::new() })
    }

    /// The stack, unless it is killed now.
    pub fn stack(&self) -> Option<&DevStack> {
        self.stack.as_ref()
    }

    /// Kills the stack: dropped, no Drain, every connection cut.
    pub fn kill(&mut self) {
        drop(self.stack.take());
    }

    /// Starts the stack again on its file and ports, if it is killed.
    pub async fn revive(&mut self) -> Result<(), ChaosError> {
        if self.stack.is_some() {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + REBIND;
        loop {
            match DevStack::start(self.options.clone()).await {
                Ok(stack) => {
                    self.stack = Some(stack);
                    return Ok(());
                }
                Err(crate::error::Error::Bind { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Shuts the stack down (Drain to every session).
    pub async fn shutdown(mut self) {
        if let Some(stack) = self.stack.take() {
            let _ = stack.shutdown().await;
        }
    }
}

/// Starts (or, `starts` false, ends) `fault`; false when a process fault
/// found its agent between two lives (skipped).
pub async fn apply(
    plane: &mut Plane,
    sim: &mut SimProcess,
    proxy: &FaultProxy,
    fault: &Fault,
    starts: bool,
) -> Result<bool, ChaosError> {
    let links = proxy.agent(fault.target.min(proxy.agents().len().saturating_sub(1) as u32));
    match fault.kind {
        FaultKind::Crash | FaultKind::Reboot | FaultKind::JournalLoss => {
            let done = match sim.fault(fault.kind, fault.target).await {
                Ok(()) => true,
                Err(ChaosError::Sim(_)) => false,
                Err(e) => return Err(e),
            };
            // What the dead process held is reset by its kernel.
            links.update(|s| s.resets += 1);
            Ok(done)
        }
        FaultKind::Reset => {
            links.update(|s| s.resets += 1);
            Ok(true)
        }
        FaultKind::GatewayKill if starts => {
            plane.kill();
            Ok(true)
        }
        FaultKind::GatewayKill => plane.revive().await.map(|()| true),
        FaultKind::Partition | FaultKind::Isolate | FaultKind::HalfOpen | FaultKind::Stall => {
            let under = plane.under.entry(fault.target).or_default();
            let count = match fault.kind {
                FaultKind::Partition => &mut under.partition,
                FaultKind::Isolate => &mut under.isolate,
                FaultKind::HalfOpen => &mut under.half_open,
                _ => &mut under.stall,
            };
            *count = if starts { *count + 1 } else { count.saturating_sub(1) };
            let u = *under;
            links.update(|s| {
                *s = LinkState {
                    cut: if u.isolate > 0 {
                        u64::MAX
                    } else if u.partition > 0 {
                        1
                    } else {
                        0
                    },
                    up_held: u.half_open > 0,
                    down_held: u.stall > 0,
                    resets: s.resets,
                }
            });
            Ok(true)
        }
    }
}
