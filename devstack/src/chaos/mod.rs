//! A chaos run over real daemons (docs/harness.md, "Chaos"): a dev stack on
//! a SQLite file, `bcd sim` agents (fakehw) that each reach it through
//! links of their own in the fault proxy, a steady workload, and the
//! faults of a seeded schedule (agents crashed, rebooted, their journals
//! lost, their links cut, held, reset; the gateway killed and revived);
//! then a quiet period for the fleet to settle, and the fleet invariants
//! checked over the store, the agents' fake hardware and what the proxy
//! saw. The schedule is a function of the seed; the outcome of real
//! processes in real time is not, and the report says both.
//!
//! `devstack chaos` and `cargo xtask chaos` run it for people; the e2e
//! suite runs a CI-sized one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

pub use agents::{SimControl, SimProcess};
pub use proxy::{AgentLinks, FaultProxy, LinkState};
pub use rng::Stream;
pub use schedule::{Fault, FaultKind, Level, LinkProfile, Schedule};
pub use workload::{WorkCounts, Workload};

use crate::invariants::{AgentFacts, Heard, Violation};
use crate::pools::PoolSpec;
use crate::stack::DevStack;

mod agents;
pub mod cold_start;
mod gateways;
pub mod live;
mod plane;
mod proxy;
mod rng;
mod schedule;
mod settle;
mod strike;

pub use settle::agent_nodes;
mod workload;

use plane::Plane;
use strike::AgentFaults;

/// The Welcome's heartbeat interval of a chaos run's gateways (the stack's
/// default: a node is judged silent after three).
const HEARTBEAT_MS: u32 = 5_000;
/// A chaos run's usage window (short: a run lasts minutes).
const USAGE_WINDOW: Duration = Duration::from_secs(10);

/// How often the workload steps.
pub const WORK_EVERY: Duration = Duration::from_secs(2);
/// The GPUs each simulated machine has (fakehw `hgx-h100`).
pub(crate) const GPUS: u32 = 8;
/// The first fakehw seed of the agents.
const FAKEHW_SEED: &str = "1000";
/// How many violations the report lists.
pub(crate) const LISTED: usize = 20;

/// What to run.
#[derive(Clone, Debug)]
pub struct ChaosSpec {
    /// Everything random derives from it.
    pub seed: String,
    /// How many agents.
    pub nodes: u32,
    /// How long the workload and the faults run.
    pub duration: Duration,
    /// How long the fleet may take to settle afterwards.
    pub settle: Duration,
    /// The chaos level.
    pub level: Level,
    /// Where to write the event log (JSON lines), if anywhere.
    pub log: Option<PathBuf>,
    /// How many gateways: one is the stack in process on SQLite; more are
    /// `devstack gateway` processes of `gateway_exe` on a throwaway
    /// PostgreSQL cluster.
    pub gateways: u32,
    /// The devstack binary the gateway processes run (several gateways).
    pub gateway_exe: Option<PathBuf>,
}

/// Why a run could not be made (a violation is not an error: it is in the report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChaosError {
    /// A file or socket of the run.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The dev stack refused or failed.
    #[error("the dev stack: {0}")]
    Stack(#[from] crate::error::Error),
    /// bcd sim failed or answered an error.
    #[error("bcd sim: {0}")]
    Sim(String),
}

/// The commands of a run, by state at the end.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CommandTally {
    /// Every command.
    pub total: u64,
    /// Those not ended.
    pub open: u64,
    /// How many ended in each state.
    pub by_state: BTreeMap<String, u64>,
}

/// What a run did and found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// The seed.
    pub seed: String,
    /// The agents.
    pub nodes: u32,
    /// The level.
    pub chaos: String,
    /// The workload's duration, in minutes.
    pub minutes: f64,
    /// The whole run's wall time.
    pub wall_ms: u64,
    /// SHA-256 of the fault schedule (a function of the seed, the nodes,
    /// the level and the duration).
    pub schedule_digest: String,
    /// Faults scheduled, by kind.
    pub faults: BTreeMap<FaultKind, u64>,
    /// Process faults that found their agent between two lives (skipped).
    pub faults_skipped: u64,
    /// What the workload did.
    pub workload: WorkCounts,
    /// The commands at the end.
    pub commands: CommandTally,
    /// Whether the fleet settled within the quiet period (every node
    /// connected, every command and booking ended, every spec observed).
    pub settled: bool,
    /// How many invariant violations.
    pub violations: usize,
    /// The first of them.
    pub first_violations: Vec<Violation>,
}

impl Report {
    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.violations == 0
    }
}

/// One line of the event log.
fn log_line(log: &mut Option<std::fs::File>, value: serde_json::Value) {
    use std::io::Write as _;
    if let Some(file) = log {
        let _ = writeln!(file, "{value}");
    }
}

/// Runs `spec` with the fakehw bcd at `bcd`, its files under `dir`;
/// `progress` hears what happens, one line at a time.
pub async fn run(
    spec: &ChaosSpec,
    bcd: &Path,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<Report, ChaosError> {
    let started = Instant::now();
    let root = Stream::root(&spec.seed);
    let mut log = match &spec.log {
        Some(path) => Some(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|source| ChaosError::Io { what: "create the event log (it must not exist)", source })?,
        ),
        None => None,
    };
    let mut plane = match (spec.gateways, &spec.gateway_exe) {
        (0 | 1, _) => Plane::single(dir, HEARTBEAT_MS, USAGE_WINDOW).await?,
        (n, Some(exe)) => Plane::several(exe, n, HEARTBEAT_MS, USAGE_WINDOW).await?,
        (_, None) => return Err(ChaosError::Sim("several gateways need the devstack binary to run them".into())),
    };
    let stack = plane.stack().expect("started");
    let gateways = plane.gateway_addrs();
    let Fleet { proxy, mut sim, nodes, data } = Fleet::start(stack, &gateways, spec, bcd, dir, &root).await?;
    progress(&format!("{} node(s) adopted after {:.1?}", nodes.len(), started.elapsed()));

    let schedule = Schedule::draw(&root.fork("faults"), spec.level, spec.nodes, gateways.len() as u32, spec.duration);
    let mut faults = BTreeMap::new();
    for f in &schedule.faults {
        *faults.entry(f.kind).or_insert(0) += 1;
    }
    progress(&format!(
        "{} fault(s) scheduled over {:?} (digest {})",
        schedule.faults.len(),
        spec.duration,
        &schedule.digest()[..16]
    ));
    let mut workload = Workload::default();
    let skipped =
        drive(&mut plane, &mut sim, &proxy, &schedule, &mut workload, &root, &nodes, spec.duration, &mut log).await?;

    progress("quiet: links healed, faults and workload stopped; waiting for the fleet to settle");
    proxy.heal_all();
    plane.revive_all().await?;
    let stack = plane.stack().expect("revived");
    let settled = settle::settled(stack, &nodes, spec.settle).await;
    log_line(
        &mut log,
        serde_json::json!({ "event": "settled", "settled": settled, "at_ms": started.elapsed().as_millis() as u64 }),
    );
    if sim.stop().await != Some(0) {
        progress("bcd sim did not stop cleanly (see bcd-sim.log)");
    }
    let mut agents = AgentFacts::default();
    agents.add_sim(&data).map_err(|source| ChaosError::Io { what: "read the agents' fake hardware", source })?;
    let heard: Heard = nodes.iter().enumerate().map(|(i, id)| (id.clone(), proxy.agent(i as u32).heard())).collect();
    let violations = stack.check_invariants(agents, heard)?;
    for v in &violations {
        log_line(&mut log, serde_json::json!({ "event": "violation", "violation": v }));
    }
    let commands = settle::tally(stack)?;
    let report = Report {
        seed: spec.seed.clone(),
        nodes: spec.nodes,
        chaos: spec.level.to_string(),
        minutes: spec.duration.as_secs_f64() / 60.0,
        wall_ms: started.elapsed().as_millis() as u64,
        schedule_digest: schedule.digest(),
        faults,
        faults_skipped: skipped,
        workload: workload.counts,
        commands,
        settled,
        violations: violations.len(),
        first_violations: violations.into_iter().take(LISTED).collect(),
    };
    plane.shutdown().await;
    Ok(report)
}

/// The agents of a run: the proxy in front of the stack, bcd sim, the
/// nodes by agent index, and the agents' data dir.
struct Fleet {
    proxy: FaultProxy,
    sim: SimProcess,
    nodes: Vec<String>,
    data: PathBuf,
}

impl Fleet {
    /// A pool, a token, the proxy, each agent's configuration (its
    /// gateway: its own link), bcd sim; waits until every node is adopted.
    async fn start(
        stack: &DevStack,
        gateways: &[std::net::SocketAddr],
        spec: &ChaosSpec,
        bcd: &Path,
        dir: &Path,
        root: &Stream,
    ) -> Result<Fleet, ChaosError> {
        let pool = stack
            .create_pool(PoolSpec { name: "chaos".into(), expect_gpu_count: Some(GPUS), ..PoolSpec::default() })
            .await?;
        let token = stack.mint_join_token(&pool, spec.nodes, Duration::from_secs(3600)).await?;
        let proxy = FaultProxy::start(spec.nodes, gateways, spec.level.links(), &root.fork("links"))
            .await
            .map_err(|source| ChaosError::Io { what: "start the fault proxy", source })?;
        let data = dir.join("data");
        let base = stack.write_bcd_config(dir, &data).await?;
        for (i, agent) in proxy.agents().iter().enumerate() {
            let agent_dir = data.join("sim").join(i.to_string());
            let mut urls: Vec<String> = agent.addresses().iter().map(|a| format!("https://{a}")).collect();
            let turn = i % urls.len().max(1);
            urls.rotate_left(turn);
            stack.write_bcd_config_via(&agent_dir, &agent_dir, &urls)?;
        }
        let (control, log) = (dir.join("sim.sock"), dir.join("bcd-sim.log"));
        let sim = SimProcess::start(bcd, &base.config, spec.nodes, FAKEHW_SEED, &token, &control, &log, Duration::ZERO)
            .await?;
        let deadline = Duration::from_secs(60) + Duration::from_millis(200) * spec.nodes;
        let nodes = settle::adopted(stack, &pool, &data, spec.nodes, deadline).await?;
        Ok(Fleet { proxy, sim, nodes, data })
    }
}

/// Runs the workload and the faults for `duration`; returns how many
/// process faults were skipped (their agent between two lives).
#[allow(clippy::too_many_arguments)]
async fn drive(
    plane: &mut Plane,
    sim: &mut SimProcess,
    proxy: &FaultProxy,
    schedule: &Schedule,
    workload: &mut Workload,
    root: &Stream,
    nodes: &[String],
    duration: Duration,
    log: &mut Option<std::fs::File>,
) -> Result<u64, ChaosError> {
    let start = Instant::now();
    let at = |ms: u64| start + Duration::from_millis(ms);
    let mut events = schedule.timeline().into_iter().peekable();
    let mut agents = AgentFaults::new(plane.gateway_addrs().len());
    let (mut step, mut skipped) = (0u64, 0u64);
    let end = duration.as_millis() as u64;
    loop {
        let next_work = step * WORK_EVERY.as_millis() as u64;
        let next_fault = events.peek().map(|(ms, _, _)| *ms);
        match next_fault {
            Some(ms) if ms < next_work && ms < end => {
                tokio::time::sleep_until(at(ms)).await;
                let (_, starts, f) = events.next().expect("peeked");
                let applied = plane::apply(plane, &mut agents, sim, proxy, &f, starts).await?;
                skipped += u64::from(!applied);
                log_line(
                    log,
                    serde_json::json!({ "event": if starts { "fault" } else { "healed" }, "fault": f,
                    "node": nodes.get(f.target as usize), "applied": applied }),
                );
            }
            _ if next_work < end => {
                tokio::time::sleep_until(at(next_work)).await;
                if let Some(stack) = plane.stack() {
                    workload.step(stack, root, step, nodes).await;
                }
                step += 1;
            }
            _ => return Ok(skipped),
        }
        if !sim.running() {
            return Err(ChaosError::Sim("bcd sim ended during the run (see bcd-sim.log)".into()));
        }
    }
}
