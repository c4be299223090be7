//! The chaos levels and a run's fault schedule (docs/harness.md, "Chaos").
//! A level is its links (latency, jitter, how often a chunk resets its
//! connection) and its faults, each drawn every tick with its probability
//! (the product simulator's table). The schedule is drawn before the run
//! from the seed alone: every tick, each kind of fault happens with its
//! probability (its own stream, `fault/<kind>/<tick>`), and strikes the node
//! whose own stream scores highest for it (`node/<i>/<kind>/<tick>`,
//! rendezvous hashing: adding a node changes a fault's target only when
//! the new node wins it, and no other node's draws). The same seed, nodes,
//! gateways, level and duration give the same schedule and digest.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::rng::Stream;

/// A chaos level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Perfect links, no faults.
    None,
    /// 5 ms latency, 20 ms jitter, rare resets; every 15 s crash 0.1,
    /// reboot 0.05, partition 0.1, reset 0.1, stall 0.05.
    Light,
    /// The same links with more resets; every 5 s crash 0.3, reboot 0.1,
    /// journal loss 0.05, partition 0.3, isolate 0.1, half-open 0.1, reset
    /// 0.2, stall 0.2, gateway kill 0.02 (and, with several gateways,
    /// gateway stall 0.02).
    Heavy,
}

impl FromStr for Level {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Level::None),
            "light" => Ok(Level::Light),
            "heavy" => Ok(Level::Heavy),
            other => Err(format!("unknown chaos level {other:?} (none, light, heavy)")),
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::None => "none",
            Level::Light => "light",
            Level::Heavy => "heavy",
        })
    }
}

/// How a level's links behave, both directions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkProfile {
    /// Added to every chunk.
    pub latency: Duration,
    /// Up to this much more, drawn per chunk.
    pub jitter: Duration,
    /// The chance that a chunk resets its connection instead of passing.
    pub reset_per_chunk: f64,
}

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// The agent is killed and starts again from its data dir.
    Crash,
    /// The same with a new boot.
    Reboot,
    /// The same without its journal.
    JournalLoss,
    /// The node's link to one gateway is cut both ways, then healed.
    Partition,
    /// Every link of the node is cut for longer than the liveness timeout.
    Isolate,
    /// The node's bytes stop reaching the gateways; the gateways' still reach it.
    HalfOpen,
    /// Every connection of the node is reset (RST).
    Reset,
    /// What the gateways send the node stops being read.
    Stall,
    /// A gateway is killed, and revived after a while.
    GatewayKill,
    /// A gateway process is stopped (SIGSTOP), and resumed after a while:
    /// a zombie whose nodes moved meanwhile (several gateways only).
    GatewayStall,
}

impl FaultKind {
    /// Every kind, in the order a tick draws them.
    pub const ALL: [FaultKind; 10] = [
        FaultKind::Crash,
        FaultKind::Reboot,
        FaultKind::JournalLoss,
        FaultKind::Partition,
        FaultKind::Isolate,
        FaultKind::HalfOpen,
        FaultKind::Reset,
        FaultKind::Stall,
        FaultKind::GatewayKill,
        FaultKind::GatewayStall,
    ];

    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Crash => "crash",
            FaultKind::Reboot => "reboot",
            FaultKind::JournalLoss => "journal-loss",
            FaultKind::Partition => "partition",
            FaultKind::Isolate => "isolate",
            FaultKind::HalfOpen => "half-open",
            FaultKind::Reset => "reset",
            FaultKind::Stall => "stall",
            FaultKind::GatewayKill => "gateway-kill",
            FaultKind::GatewayStall => "gateway-stall",
        }
    }

    /// How long the fault lasts, in ms (0: at once), as [lo, hi].
    fn lasts(self) -> (u64, u64) {
        match self {
            FaultKind::Partition | FaultKind::HalfOpen => (5_000, 20_000),
            FaultKind::Isolate => (35_000, 50_000),
            FaultKind::Stall => (5_000, 15_000),
            FaultKind::GatewayKill => (2_000, 8_000),
            FaultKind::GatewayStall => (3_000, 10_000),
            FaultKind::Crash | FaultKind::Reboot | FaultKind::JournalLoss | FaultKind::Reset => (0, 0),
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Level {
    /// The level's links.
    pub fn links(self) -> LinkProfile {
        let (latency, jitter) = match self {
            Level::None => (0, 0),
            Level::Light | Level::Heavy => (5, 20),
        };
        let reset_per_chunk = match self {
            Level::None => 0.0,
            Level::Light => 0.0001,
            Level::Heavy => 0.0005,
        };
        LinkProfile { latency: Duration::from_millis(latency), jitter: Duration::from_millis(jitter), reset_per_chunk }
    }

    /// How often faults are drawn, and each kind's probability per draw.
    pub fn faults(self) -> (Duration, &'static [(FaultKind, f64)]) {
        use FaultKind::*;
        match self {
            Level::None => (Duration::from_secs(15), &[]),
            Level::Light => (
                Duration::from_secs(15),
                &[(Crash, 0.1), (Reboot, 0.05), (Partition, 0.1), (Reset, 0.1), (Stall, 0.05)],
            ),
            Level::Heavy => (
                Duration::from_secs(5),
                &[
                    (Crash, 0.3),
                    (Reboot, 0.1),
                    (JournalLoss, 0.05),
                    (Partition, 0.3),
                    (Isolate, 0.1),
                    (HalfOpen, 0.1),
                    (Reset, 0.2),
                    (Stall, 0.2),
                    (GatewayKill, 0.02),
                    (GatewayStall, 0.02),
                ],
            ),
        }
    }
}

/// One scheduled fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Fault {
    /// When, from the start of the faults.
    pub at_ms: u64,
    /// What.
    pub kind: FaultKind,
    /// The node's index (the gateway's, for a gateway kill).
    pub target: u32,
    /// How long it lasts (0: at once).
    pub for_ms: u64,
}

/// A run's faults, in time order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Schedule {
    /// The faults.
    pub faults: Vec<Fault>,
}

impl Schedule {
    /// Draws the schedule of `level` over `duration` for `nodes` nodes and
    /// `gateways` gateways from `root`.
    pub fn draw(root: &Stream, level: Level, nodes: u32, gateways: u32, duration: Duration) -> Schedule {
        let (every, _) = level.faults();
        let ticks = (duration.as_millis() / every.as_millis().max(1)) as u64;
        Schedule::draw_ticks(root, level, nodes, gateways, 1..=ticks)
    }

    /// Draws the faults of `ticks` (a live run draws an hour at a time: the
    /// faults of a tick are the same whatever else was drawn).
    pub fn draw_ticks(
        root: &Stream,
        level: Level,
        nodes: u32,
        gateways: u32,
        ticks: std::ops::RangeInclusive<u64>,
    ) -> Schedule {
        let (every, kinds) = level.faults();
        let mut faults = Vec::new();
        for tick in ticks {
            for &(kind, p) in kinds {
                if kind == FaultKind::GatewayStall && gateways < 2 {
                    continue; // the one gateway runs in process: nothing to stop
                }
                let mut draw = root.fork(&format!("fault/{kind}/{tick}"));
                if !draw.chance(p) || nodes == 0 {
                    continue;
                }
                let target = match kind {
                    FaultKind::GatewayKill | FaultKind::GatewayStall => draw.below(u64::from(gateways.max(1))) as u32,
                    _ => {
                        (0..nodes).max_by_key(|i| root.fork(&format!("node/{i}/{kind}/{tick}")).rng_u64()).unwrap_or(0)
                    }
                };
                let (lo, hi) = kind.lasts();
                let at_ms = tick * every.as_millis() as u64;
                faults.push(Fault { at_ms, kind, target, for_ms: draw.between(lo, hi) });
            }
        }
        Schedule { faults }
    }

    /// Each fault's start and, for one that lasts, its end, in time order
    /// (an end before a start at the same time).
    pub fn timeline(&self) -> Vec<(u64, bool, Fault)> {
        let mut timeline: Vec<(u64, bool, Fault)> = Vec::new();
        for f in &self.faults {
            timeline.push((f.at_ms, true, *f));
            if f.for_ms > 0 {
                timeline.push((f.at_ms + f.for_ms, false, *f));
            }
        }
        timeline.sort_by_key(|(ms, starts, _)| (*ms, *starts));
        timeline
    }

    /// SHA-256 (hex) of the schedule, one line per fault.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        for f in &self.faults {
            h.update(format!("{} {} {} {}\n", f.at_ms, f.kind, f.target, f.for_ms));
        }
        hex::encode(h.finalize())
    }
}

impl Stream {
    /// A raw 64-bit draw (a node's score for a fault).
    fn rng_u64(mut self) -> u64 {
        self.next_raw()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draw(seed: &str, level: Level, nodes: u32) -> Schedule {
        Schedule::draw(&Stream::root(seed), level, nodes, 1, Duration::from_secs(600))
    }

    #[test]
    fn the_same_seed_draws_the_same_schedule_and_another_seed_another() {
        let a = draw("42", Level::Heavy, 16);
        assert_eq!(a, draw("42", Level::Heavy, 16));
        assert_eq!(a.digest(), draw("42", Level::Heavy, 16).digest());
        assert_ne!(a.digest(), draw("43", Level::Heavy, 16).digest());
        assert!(draw("42", Level::None, 16).faults.is_empty());
        assert!(a.faults.windows(2).all(|w| w[0].at_ms <= w[1].at_ms));
        assert!(a.faults.iter().all(|f| f.target < 16));
    }

    #[test]
    fn a_node_added_changes_only_the_faults_it_wins() {
        let (small, big) = (draw("7", Level::Heavy, 16), draw("7", Level::Heavy, 17));
        assert_eq!(small.faults.len(), big.faults.len(), "the same faults happen");
        for (s, b) in small.faults.iter().zip(&big.faults) {
            assert_eq!((s.at_ms, s.kind, s.for_ms), (b.at_ms, b.kind, b.for_ms));
            assert!(s.target == b.target || b.target == 16, "{s:?} moved to {b:?}");
        }
    }

    #[test]
    fn light_draws_its_kinds_about_as_often_as_its_table_says() {
        let s = Schedule::draw(&Stream::root("rates"), Level::Light, 16, 1, Duration::from_secs(15 * 2000));
        let crashes = s.faults.iter().filter(|f| f.kind == FaultKind::Crash).count();
        assert!((150..250).contains(&crashes), "{crashes} crashes in 2000 draws at 0.1");
        assert!(s.faults.iter().all(|f| !matches!(f.kind, FaultKind::JournalLoss | FaultKind::GatewayKill)));
        let partitions = s.faults.iter().filter(|f| f.kind == FaultKind::Partition);
        assert!(partitions.clone().all(|f| (5_000..=20_000).contains(&f.for_ms)));
    }
}

#[cfg(test)]
mod pinned {
    use super::*;

    /// The CI run's schedule (seed `ci`, 16 nodes, light, two minutes) is
    /// the same on every machine and every run: its digest is pinned here,
    /// so a change of the drawing shows as a change of this line.
    #[test]
    fn the_ci_runs_schedule_is_pinned() {
        let s = Schedule::draw(&Stream::root("ci").fork("faults"), Level::Light, 16, 1, Duration::from_secs(120));
        assert_eq!(s.digest(), "07cc770bf6131f3ea87a885d8220c4349ce4b03320d59a29a5eb4938be8b1cb3", "{:#?}", s.faults);
    }
}
