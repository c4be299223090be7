//! A fleet's cold start over real daemons (docs/harness.md, "Cold start"):
//! N `bcd sim` agents (in P processes) power on at seeded times within a
//! spread and join a fresh dev stack; each node's first session and its
//! adoption are timed from its own power-on (the first boot its fake
//! hardware recorded). Then the stack goes down, every agent is power
//! cycled (a new boot), the stack comes back, and the way back is timed
//! from its return. An unreachable mark fails the run, and the fleet
//! invariants are checked at the end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use super::agents::SimProcess;
use super::plane::Plane;
use super::schedule::FaultKind;
use super::{ChaosError, GPUS};
use crate::invariants::{AgentFacts, Heard, Violation};
use crate::pools::PoolSpec;
use crate::store::rows::NodeState;

/// What to run.
#[derive(Clone, Debug)]
pub struct ColdStartSpec {
    /// The agents' seed (their power-on times derive from it).
    pub seed: String,
    /// How many agents.
    pub nodes: u32,
    /// How many bcd sim processes share them.
    pub procs: u32,
    /// The power-on spread.
    pub spread: Duration,
    /// How long the stack stays down for the power cycle.
    pub down: Duration,
    /// How long each phase may take before the run gives up.
    pub limit: Duration,
}

/// p50, p99 and max of some latencies, in ms.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Spread {
    /// The median.
    pub p50_ms: u64,
    /// The 99th percentile.
    pub p99_ms: u64,
    /// The largest.
    pub max_ms: u64,
}

impl Spread {
    fn of(mut ms: Vec<u64>) -> Spread {
        ms.sort_unstable();
        let at = |q: f64| ms.get(((ms.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
        Spread { p50_ms: at(0.5), p99_ms: at(0.99), max_ms: ms.last().copied().unwrap_or(0) }
    }
}

/// What a cold start measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ColdStartReport {
    /// The agents.
    pub nodes: u32,
    /// The power-on spread.
    pub spread_ms: u64,
    /// From the first power-on until every node was connected and adopted.
    pub ready_ms: u64,
    /// Each node's first session after its power-on.
    pub first_session: Spread,
    /// Each node's adoption after its power-on.
    pub adopted: Spread,
    /// From the stack's return until every power-cycled node was connected again.
    pub back_ms: u64,
    /// Each node's new session after the stack's return.
    pub back: Spread,
    /// Unreachable marks, at any time (the run fails with any).
    pub unreachable_marks: usize,
    /// Invariant violations.
    pub violations: usize,
    /// The first of them.
    pub first_violations: Vec<Violation>,
}

impl ColdStartReport {
    /// Whether the run held: no mark, no violation.
    pub fn passed(&self) -> bool {
        self.unreachable_marks == 0 && self.violations == 0
    }
}

/// Runs a cold start with the fakehw bcd at `bcd`, its files under `dir`.
pub async fn run(
    spec: &ColdStartSpec,
    bcd: &Path,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<ColdStartReport, ChaosError> {
    let mut plane = Plane::single(dir, 5_000, Duration::from_secs(60)).await?;
    let stack = plane.stack().expect("started");
    let pool = stack
        .create_pool(PoolSpec { name: "cold".into(), expect_gpu_count: Some(GPUS), ..PoolSpec::default() })
        .await?;
    let token = stack.mint_join_token(&pool, spec.nodes, Duration::from_secs(3600)).await?;
    let procs = spec.procs.clamp(1, spec.nodes.max(1));
    let mut sims = Vec::new();
    let mut dirs = Vec::new();
    let started = crate::clock::now_ms();
    for p in 0..procs {
        let share = spec.nodes / procs + u32::from(p < spec.nodes % procs);
        let proc_dir = dir.join(format!("sim-{p}"));
        let base = stack.write_bcd_config(&proc_dir, &proc_dir.join("data")).await?;
        let seed = format!("{}-{p}", spec.seed);
        let (control, log) = (proc_dir.join("sim.sock"), proc_dir.join("bcd-sim.log"));
        let sim = SimProcess::start(bcd, &base.config, share, &seed, &token, &control, &log, spec.spread).await?;
        sims.push((sim, share));
        dirs.push(proc_dir.join("data"));
    }
    progress(&format!("{} agent(s) in {procs} bcd sim process(es) power on within {:?}", spec.nodes, spec.spread));
    await_all(&plane, spec.nodes, spec.limit, |n| n.state == NodeState::Adopted).await?;
    let ready_ms = (crate::clock::now_ms() - started).max(0) as u64;
    let stack = plane.stack().expect("up");
    let facts = stack.fleet_facts()?;
    let agents = read_agents(&dirs)?;
    let power_on: BTreeMap<&str, i64> =
        agents.nodes.iter().filter_map(|(id, a)| Some((id.as_str(), *a.boots.first()?))).collect();
    let first_session = per_node(&power_on, facts.sessions.iter().map(|s| (s.node_id.as_str(), s.connected_at_ms)));
    let adopted_at = stack.nodes()?.into_iter().filter_map(|n| Some((n.id, n.adopted_at_ms?))).collect::<Vec<_>>();
    let adopted = per_node(&power_on, adopted_at.iter().map(|(id, at)| (id.as_str(), *at)));
    progress(&format!("ready after {ready_ms} ms; power cycle: the stack down for {:?}", spec.down));

    let epochs: BTreeMap<String, u64> = stack.nodes()?.into_iter().map(|n| (n.id, n.session_epoch)).collect();
    let killed = Instant::now();
    plane.kill(0).await;
    progress(&format!("the stack killed in {} ms", killed.elapsed().as_millis()));
    let cycling = Instant::now();
    // An agent between two lives (its last crash, a reboot) is not struck: it starts anew anyway.
    let struck = futures_util::future::try_join_all(
        sims.iter_mut().map(|(sim, share)| sim.control().fault_all(FaultKind::Reboot, *share)),
    )
    .await?;
    let struck: u32 = struck.iter().sum();
    progress(&format!("{struck} agent(s) power cycled in {} ms", cycling.elapsed().as_millis()));
    tokio::time::sleep_until(killed + spec.down).await;
    plane.revive(0).await?;
    let revived = Instant::now();
    progress(&format!("the stack up again {} ms after it was killed", killed.elapsed().as_millis()));
    let revived_ms = crate::clock::now_ms();
    await_all(&plane, spec.nodes, spec.limit, |n| epochs.get(&n.id).is_some_and(|e| n.session_epoch > *e)).await?;
    let back_ms = revived.elapsed().as_millis() as u64;
    let stack = plane.stack().expect("up");
    let facts = stack.fleet_facts()?;
    let back = Spread::of(
        facts
            .sessions
            .iter()
            .filter(|s| s.connected_at_ms >= revived_ms)
            .map(|s| (s.connected_at_ms - revived_ms) as u64)
            .collect(),
    );
    progress(&format!("every node back {back_ms} ms after the stack returned"));
    for (sim, _) in sims {
        sim.stop().await;
    }
    let violations = stack.check_invariants(read_agents(&dirs)?, Heard::new())?;
    let report = ColdStartReport {
        nodes: spec.nodes,
        spread_ms: spec.spread.as_millis() as u64,
        ready_ms,
        first_session,
        adopted,
        back_ms,
        back,
        unreachable_marks: stack.fleet_facts()?.marks.len(),
        violations: violations.len(),
        first_violations: violations.into_iter().take(super::LISTED).collect(),
    };
    plane.shutdown().await;
    Ok(report)
}

/// Waits until `nodes` nodes satisfy `done`, polling the store.
async fn await_all(
    plane: &Plane,
    nodes: u32,
    within: Duration,
    done: impl Fn(&crate::store::rows::NodeRow) -> bool + Send + Sync,
) -> Result<(), ChaosError> {
    let stack = plane.stack().expect("up");
    stack
        .await_until(format!("{nodes} node(s)"), within, |v| {
            let all = v.nodes();
            let n = all.iter().filter(|n| done(n)).count() as u32;
            let missing: Vec<&str> = all.iter().filter(|n| !done(n)).map(|n| n.id.as_str()).take(5).collect();
            v.note(format_args!("{n} so far; not yet {missing:?}"));
            (n >= nodes).then_some(())
        })
        .await?;
    Ok(())
}

/// Every agent's fake hardware facts under the sim processes' data dirs.
fn read_agents(dirs: &[PathBuf]) -> Result<AgentFacts, ChaosError> {
    let mut agents = AgentFacts::default();
    for d in dirs {
        agents.add_sim(d).map_err(|source| ChaosError::Io { what: "read the agents' fake hardware", source })?;
    }
    Ok(agents)
}

/// Each node's first time of `times` after its power-on.
fn per_node<'a>(power_on: &BTreeMap<&str, i64>, times: impl Iterator<Item = (&'a str, i64)>) -> Spread {
    let mut first: BTreeMap<&str, i64> = BTreeMap::new();
    for (node, at) in times {
        let e = first.entry(node).or_insert(at);
        *e = (*e).min(at);
    }
    Spread::of(first.iter().filter_map(|(node, at)| Some((at - power_on.get(node)?).max(0) as u64)).collect())
}
