//! `devstack serve --sim N`: N simulated machines that join the way the
//! daemon does (docs/devstack.md, "devstack serve"). It builds the fakehw
//! bcd (the harness's cached build, `bcd-build`, with its progress on
//! standard error), creates the pool `sim-<variant>` expecting the
//! variant's GPU count, and runs `bcd sim --nodes N` against the stack with
//! a token of N uses on its standard input (never in a file, an argument or
//! a log). Joins and adoption are reported as they happen, from what this
//! stack observes (a node counts as adopted once it is adopted and has a
//! live session here, so a restarted stack does not report nodes that have
//! not found it), rejections grouped by reason; the agents run in their own
//! process group, stop with the stack (SIGTERM, their exit awaited, its
//! status explained) and die with it if it is killed (PR_SET_PDEATHSIG).

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use bcd_build::{BuildOptions, StderrProgress};
use devstack::chaos::Level;
use devstack::chaos::live::{self, Live};
use devstack::{DevStack, NodeState, PoolSpec, StackView};
use tokio::io::AsyncWriteExt as _;
use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::term;

/// How long the agents get to stop after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long progress may stand still before a "still waiting" line.
const QUIET: Duration = Duration::from_secs(30);

/// The fakehw machine the agents simulate (`BCD_FAKEHW_VARIANT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Variant {
    /// 8 × H100 on NVSwitch: expects 8 GPUs.
    #[value(name = "hgx-h100")]
    HgxH100,
    /// The same with one GPU missing: expects 8, so never adopted.
    #[value(name = "hgx-h100-gpu-missing")]
    HgxH100GpuMissing,
    /// 4 × L40S: expects 4 GPUs.
    #[value(name = "l40s")]
    L40s,
    /// No GPU: expects no count.
    #[value(name = "cpu")]
    Cpu,
}

impl Variant {
    /// The variant's name, as bcd knows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::HgxH100 => "hgx-h100",
            Variant::HgxH100GpuMissing => "hgx-h100-gpu-missing",
            Variant::L40s => "l40s",
            Variant::Cpu => "cpu",
        }
    }

    /// The GPU count the pool's acceptance check expects.
    pub fn expected_gpus(self) -> Option<u32> {
        match self {
            Variant::HgxH100 | Variant::HgxH100GpuMissing => Some(8),
            Variant::L40s => Some(4),
            Variant::Cpu => None,
        }
    }
}

/// What to simulate.
pub struct SimSpec {
    /// How many agents.
    pub nodes: u32,
    /// Their machine.
    pub variant: Variant,
    /// The first fakehw seed.
    pub seed: String,
    /// The GPU count the pool expects, instead of the variant's.
    pub expect_gpus: Option<u32>,
    /// The chaos the agents run under, if any (`--chaos`).
    pub chaos: Option<Level>,
}

/// A running `bcd sim`.
pub struct Sim {
    child: Child,
    pool_id: String,
    nodes: u32,
    variant: Variant,
    log: PathBuf,
    /// With --chaos: the faults striking, and the agents' data dir.
    chaos: Option<(Live, PathBuf)>,
}

/// Waits until `stop` turns true.
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Builds the fakehw bcd in a blocking thread (progress on standard error).
pub async fn build_bcd() -> Result<PathBuf> {
    tokio::task::spawn_blocking(|| {
        bcd_build::build(Path::new("go"), &BuildOptions::fakehw(), &mut StderrProgress::new())
    })
    .await
    .context("the bcd build thread")?
    .context("building the fakehw bcd (Go 1.26 must be on PATH)")
}

/// The pool `sim-<variant>`, created on first use.
async fn pool(stack: &DevStack, spec: &SimSpec) -> Result<String> {
    let name = format!("sim-{}", spec.variant.as_str());
    if let Some(pool) = stack.pool_by_name(&name)? {
        return Ok(pool.id);
    }
    let expect_gpu_count = spec.expect_gpus.or(spec.variant.expected_gpus());
    Ok(stack.create_pool(PoolSpec { name, expect_gpu_count, ..PoolSpec::default() }).await?)
}

/// Asks the kernel to SIGTERM the child when this thread's process dies.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Sim {
    /// Builds bcd, makes the pool, the token and the configuration under
    /// `dir/sim`, and starts `bcd sim`. Call it from the thread that lives
    /// as long as the stack (the death signal follows the spawning thread).
    pub async fn start(stack: &DevStack, dir: &Path, spec: &SimSpec) -> Result<Sim> {
        let bcd = build_bcd().await?;
        let pool_id = pool(stack, spec).await?;
        let sim_dir = dir.join("sim");
        let paths = stack.write_bcd_config(&sim_dir, &sim_dir.join("data")).await?;
        let token = stack.mint_join_token(&pool_id, spec.nodes, Duration::from_secs(3600)).await?;
        let data = sim_dir.join("data");
        let control = sim_dir.join("sim.sock");
        let links = match spec.chaos {
            Some(level) => Some(live::links(stack, spec.nodes, level, &spec.seed, &data).await?),
            None => {
                live::unproxied(stack, spec.nodes, &data)?;
                None
            }
        };
        let log = sim_dir.join("bcd-sim.log");
        let out = std::fs::File::create(&log).with_context(|| format!("create {}", log.display()))?;
        let mut cmd = Command::new(&bcd);
        cmd.arg("sim")
            .arg("--config")
            .arg(&paths.config)
            .args(["--nodes", &spec.nodes.to_string(), "--seed", &spec.seed])
            .env("BCD_FAKEHW_VARIANT", spec.variant.as_str())
            .args(links.as_ref().map(|_| ["--control".as_ref(), control.as_os_str()]).into_iter().flatten())
            .stdin(Stdio::piped())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .kill_on_drop(true);
        die_with_parent(&mut cmd);
        let mut child = cmd.spawn().with_context(|| format!("start {} sim", bcd.display()))?;
        let mut stdin = child.stdin.take().context("bcd sim's standard input")?;
        // bcd sim reads the token to the end of its input: write it, close it.
        stdin.write_all(format!("{token}\n").as_bytes()).await.context("hand bcd sim its token")?;
        drop(stdin);
        drop(token);
        term::print(&format!(
            "Started bcd sim: {} simulated {} node(s) joining pool {pool_id} (log: {})",
            spec.nodes,
            spec.variant.as_str(),
            log.display()
        ));
        let chaos = links.zip(spec.chaos).map(|(links, level)| {
            term::print(&format!("Chaos: {level}; each fault is printed as it strikes"));
            (Live::start(links, control, level, &spec.seed, spec.nodes, |line| term::print(&line)), data)
        });
        Ok(Sim { child, pool_id, nodes: spec.nodes, variant: spec.variant, log, chaos })
    }

    /// Reports joins, then adoption, on standard error until every node is
    /// decided; then waits. Returns when `stop` turns true (`Ok`), or when
    /// bcd sim exits by itself (an error naming its log).
    pub async fn watch(&mut self, stack: &DevStack, stop: &mut watch::Receiver<bool>) -> Result<()> {
        let mut shown = Progress::default();
        loop {
            let changed = stack.await_until("the simulated nodes to change", QUIET, |v| {
                let now = Progress::of(v, &self.pool_id);
                (now != shown).then_some(now)
            });
            let now = tokio::select! {
                now = changed => now,
                status = self.child.wait() => return Err(self.ended(status)),
                _ = stopped(stop) => return Ok(()),
            };
            let Ok(now) = now else {
                term::print(&format!("still waiting: {}", shown.describe(self.nodes)));
                continue;
            };
            self.report(&shown, &now);
            shown = now;
            if shown.decided() >= self.nodes as usize {
                break;
            }
        }
        tokio::select! {
            status = self.child.wait() => Err(self.ended(status)),
            _ = stopped(stop) => Ok(()),
        }
    }

    /// The progress lines between two counts.
    fn report(&self, before: &Progress, now: &Progress) {
        let n = self.nodes as usize;
        let variant = self.variant.as_str();
        if now.joined < n {
            term::update(&format!("Joining simulated {variant} nodes: {}/{n}", now.joined));
            return;
        }
        if before.joined < n {
            term::print(&format!("Joined {} simulated {variant} node(s) into {}", now.joined, self.pool_id));
        }
        if now.decided() < n {
            let waiting = now.joined - now.connected;
            let offline = if waiting > 0 { format!(", {waiting} not connected") } else { String::new() };
            term::update(&format!("Adopting: {}/{n} adopted, {} rejected{offline}", now.adopted, now.rejected.len()));
            return;
        }
        let mut done = format!("{} simulated node(s) adopted", now.adopted);
        for (reason, count) in grouped(&now.rejected) {
            done += &format!("; {count} {} rejected: {reason}", if count == 1 { "node" } else { "nodes" });
        }
        term::print(&done);
        // Each rejected node, named with why (the first few).
        for (node, reason) in now.rejected.iter().take(REJECTED_NAMED) {
            term::print(&format!("  rejected {node}: {reason}"));
        }
        if now.rejected.len() > REJECTED_NAMED {
            term::print(&format!("  and {} more rejected", now.rejected.len() - REJECTED_NAMED));
        }
    }

    fn ended(&self, status: std::io::Result<ExitStatus>) -> anyhow::Error {
        let tail = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = tail.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        anyhow::anyhow!(
            "bcd sim exited by itself ({}); the end of {}:\n{}",
            status.map_or_else(|e| e.to_string(), |s| s.to_string()),
            self.log.display(),
            tail.join("\n")
        )
    }

    /// Stops the agents: SIGTERM to their process group, their exit awaited
    /// (SIGKILL after [`STOP_GRACE`]); under chaos, the faults stop first and
    /// the fleet invariants are checked after.
    pub async fn stop(mut self, stack: &DevStack) -> Result<ExitStatus> {
        if let Some((mut live, data)) = self.chaos.take() {
            let struck = live.stop().await?;
            let total: u64 = struck.values().sum();
            term::print(&format!("Chaos stopped after {total} fault(s); every link healed"));
            let status = self.stop_agents().await;
            check_invariants(stack, &live, &data, self.nodes);
            return status;
        }
        self.stop_agents().await
    }

    async fn stop_agents(&mut self) -> Result<ExitStatus> {
        if let Some(status) = self.child.try_wait()? {
            return Ok(status);
        }
        let pid = self.child.id().context("bcd sim's pid")? as libc::pid_t;
        // SAFETY: a signal to the process group the child leads.
        unsafe { libc::kill(-pid, libc::SIGTERM) };
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                // SAFETY: as above.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let status = self.child.wait().await?;
                bail!("bcd sim did not stop within {STOP_GRACE:?} of SIGTERM; killed ({status})")
            }
        }
    }
}

/// Checks the fleet invariants once a chaos run's agents stopped, and says
/// what they found (docs/harness.md, "Fleet invariants").
fn check_invariants(stack: &DevStack, live: &Live, data: &Path, nodes: u32) {
    let mut agents = devstack::invariants::AgentFacts::default();
    if let Err(e) = agents.add_sim(data) {
        term::print(&format!("Fleet invariants not checked: the agents' fake hardware: {e}"));
        return;
    }
    let heard = live.heard(&devstack::chaos::agent_nodes(data, nodes));
    match stack.check_invariants(agents, heard) {
        Ok(violations) if violations.is_empty() => term::print("Fleet invariants: every one held"),
        Ok(violations) => {
            term::print(&format!("Fleet invariants: {} violation(s) (invariant-violated):", violations.len()));
            for v in violations.iter().take(20) {
                term::print(&format!("  {v}"));
            }
        }
        Err(e) => term::print(&format!("Fleet invariants not checked: {e}")),
    }
}

/// Rejection reasons and how many nodes each, in order of first sight.
fn grouped(rejected: &[(String, String)]) -> Vec<(&str, usize)> {
    let mut groups: Vec<(&str, usize)> = Vec::new();
    for (_, reason) in rejected {
        match groups.iter_mut().find(|(r, _)| r == reason) {
            Some((_, n)) => *n += 1,
            None => groups.push((reason, 1)),
        }
    }
    groups
}

/// bcd sim's exit status in words (docs/daemon.md: 0 success, 1 an agent
/// could not join or failed, 3 an agent's certificates were revoked).
pub fn explain(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(0), _) => "exit status 0".into(),
        (Some(1), _) => "exit status 1: an agent could not join or failed (see the log)".into(),
        (Some(3), _) => "exit status 3: an agent was revoked (bcd exits 3 on a RevocationNotice)".into(),
        (Some(n), _) => format!("exit status {n}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => status.to_string(),
    }
}

/// How many rejected nodes the last progress line names.
const REJECTED_NAMED: usize = 10;

/// How far the simulated nodes got, as this stack observes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Progress {
    /// In the pool (joined now or in an earlier run).
    joined: usize,
    /// With a live session here.
    connected: usize,
    /// Adopted, running generation 1 or later, with a live session here.
    adopted: usize,
    /// The rejected nodes (`<id> (<hostname>)`) and why.
    rejected: Vec<(String, String)>,
}

impl Progress {
    fn of(v: &StackView<'_>, pool_id: &str) -> Progress {
        let nodes: Vec<_> = v.nodes().into_iter().filter(|n| n.pool_id == pool_id).collect();
        let live: Vec<_> = nodes.iter().filter(|n| v.live_epoch(&n.id).is_some()).collect();
        Progress {
            joined: nodes.len(),
            connected: live.len(),
            adopted: live.iter().filter(|n| n.state == NodeState::Adopted && n.applied_generation >= 1).count(),
            rejected: live
                .iter()
                .filter(|n| n.state == NodeState::Rejected)
                .map(|n| (format!("{} ({})", n.id, n.hostname), n.reason.clone()))
                .collect(),
        }
    }

    fn decided(&self) -> usize {
        self.adopted + self.rejected.len()
    }

    fn describe(&self, n: u32) -> String {
        format!(
            "{}/{n} joined, {} connected, {} adopted, {} rejected",
            self.joined,
            self.connected,
            self.adopted,
            self.rejected.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_are_grouped_and_statuses_explained() {
        use std::os::unix::process::ExitStatusExt as _;
        let rejected = [("n1".to_string(), "a".to_string()), ("n2".into(), "b".into()), ("n3".into(), "a".into())];
        assert_eq!(grouped(&rejected), [("a", 2), ("b", 1)]);
        assert!(explain(ExitStatus::from_raw(3 << 8)).contains("revoked"));
        assert_eq!(explain(ExitStatus::from_raw(0)), "exit status 0");
        assert_eq!(explain(ExitStatus::from_raw(9)), "killed by signal 9");
    }
}
