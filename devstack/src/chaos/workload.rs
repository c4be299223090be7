//! The steady workload of a chaos run (docs/harness.md, "Chaos"): every
//! two seconds, three commands drawn from `diag.nvml`, `inventory.refresh`,
//! `logs.collect` and `node.reboot` on nodes drawn from the fleet, a GPU
//! booking of one or two GPUs, and now and then the release of a booking.
//! Each step's draws come from its own stream (`work/<step>`). A refusal
//! (no room on a node, a node the stack cannot reach now) is counted, not
//! an error: the stack under faults refuses what it must.

use std::collections::BTreeMap;

use serde_json::json;

use super::rng::Stream;
use crate::commands::CommandOptions;
use crate::stack::DevStack;
use crate::store::rows::ReservationState;

/// The command kinds the workload draws from, and whether each is retry-safe.
const KINDS: [(&str, bool); 4] =
    [("diag.nvml", true), ("inventory.refresh", true), ("logs.collect", false), ("node.reboot", true)];
/// Commands per step.
const COMMANDS_PER_STEP: usize = 3;
/// The chance that a step also releases a booking.
const RELEASE_CHANCE: f64 = 0.3;

/// What the workload did, by action.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkCounts {
    /// Commands enqueued, by kind.
    pub commands: BTreeMap<String, u64>,
    /// Bookings made.
    pub bookings: u64,
    /// Releases asked for.
    pub releases: u64,
    /// What the stack refused, by what was asked.
    pub refused: BTreeMap<String, u64>,
}

/// The workload's state across steps.
#[derive(Default)]
pub struct Workload {
    /// Bookings not released yet.
    bookings: Vec<String>,
    /// What it did.
    pub counts: WorkCounts,
}

impl Workload {
    /// One step: `step`'s draws from `root`, against `nodes` (by agent index).
    pub async fn step(&mut self, stack: &DevStack, root: &Stream, step: u64, nodes: &[String]) {
        if nodes.is_empty() {
            return;
        }
        let mut draw = root.fork(&format!("work/{step}"));
        for _ in 0..COMMANDS_PER_STEP {
            let (kind, retry_safe) = KINDS[draw.below(KINDS.len() as u64) as usize];
            let node = &nodes[draw.below(nodes.len() as u64) as usize];
            let options = CommandOptions { retry_safe, ..CommandOptions::default() };
            let done = stack.enqueue_command(node, kind, json!({}), options).await;
            self.count(kind, done.is_ok());
        }
        let node = &nodes[draw.below(nodes.len() as u64) as usize];
        let gpus = draw.between(1, 2) as u32;
        match stack.reserve(node, gpus).await {
            Ok(id) => {
                self.bookings.push(id);
                self.counts.bookings += 1;
            }
            Err(_) => *self.counts.refused.entry("booking".into()).or_default() += 1,
        }
        if draw.chance(RELEASE_CHANCE) && !self.bookings.is_empty() {
            let id = self.bookings.swap_remove(draw.below(self.bookings.len() as u64) as usize);
            let releasable = stack
                .reservation(&id)
                .ok()
                .flatten()
                .is_some_and(|r| matches!(r.state, ReservationState::Pending | ReservationState::Active));
            if releasable && stack.release(&id).await.is_ok() {
                self.counts.releases += 1;
            } else {
                *self.counts.refused.entry("release".into()).or_default() += 1;
            }
        }
    }

    fn count(&mut self, kind: &str, done: bool) {
        if done {
            *self.counts.commands.entry(kind.to_string()).or_default() += 1;
        } else {
            *self.counts.refused.entry(kind.to_string()).or_default() += 1;
        }
    }
}
