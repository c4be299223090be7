//! `cargo xtask chaos`: a chaos run over real daemons (docs/harness.md,
//! "Chaos"), the dev stack's `devstack chaos` built in the release
//! profile: the report (JSON) on standard output, and a failure
//! (`invariant-violated`) when an invariant did not hold; and `cargo xtask
//! bench cold-start`, the e2e suite's `cold_start::bench_cold_start` in the
//! release profile ("Cold start").

use std::path::PathBuf;

use anyhow::{Result, bail};
use clap::Args;
use xshell::{Shell, cmd};

/// `cargo xtask chaos`'s arguments, handed to `devstack chaos`.
#[derive(Args)]
pub struct ChaosArgs {
    /// Everything random derives from it: the same seed draws the same faults.
    #[arg(long, default_value = "chaos")]
    seed: String,
    /// How many simulated nodes (bcd sim agents).
    #[arg(long, default_value_t = 16)]
    nodes: u32,
    /// How long the workload and the faults run, in minutes.
    #[arg(long, default_value_t = 2.0)]
    minutes: f64,
    /// The chaos level: none, light or heavy.
    #[arg(long = "chaos", default_value = "light", value_parser = ["none", "light", "heavy"])]
    level: String,
    /// How long the fleet may take to settle afterwards (`2m`, `90s`).
    #[arg(long, default_value = "2m")]
    settle: String,
    /// How many gateways (more than 1: gateway processes on a throwaway PostgreSQL cluster).
    #[arg(long, default_value_t = 1)]
    gateways: u32,
    /// Write the event log (JSON lines) to this new file.
    #[arg(long, value_name = "PATH")]
    log: Option<PathBuf>,
    /// Keep the run's directory here.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
}

/// Builds `devstack` (release) with progress and runs the chaos run.
pub fn run(sh: &Shell, args: ChaosArgs) -> Result<()> {
    super::build_with_progress(
        "devstack (release)",
        &["build", "--release", "-p", "devstack", "--bin", "devstack"],
        &["-p", "devstack", "-e", "normal,build"],
    )?;
    let devstack = super::target_dir().join("release/devstack");
    let ChaosArgs { seed, nodes, minutes, level, settle, gateways, log, keep } = args;
    let (nodes, minutes, gateways) = (nodes.to_string(), minutes.to_string(), gateways.to_string());
    let mut extra: Vec<String> = Vec::new();
    if let Some(log) = log {
        extra.extend(["--log".into(), log.to_string_lossy().into_owned()]);
    }
    if let Some(keep) = keep {
        extra.extend(["--keep".into(), keep.to_string_lossy().into_owned()]);
    }
    // Its own standard output and error: the progress and the report as they come.
    let mut command: std::process::Command = cmd!(
        sh,
        "{devstack} chaos --seed {seed} --nodes {nodes} --minutes {minutes} --chaos {level} --settle {settle} --gateways {gateways} {extra...}"
    )
    .into();
    let status = command.status()?;
    match status.code() {
        Some(0) => Ok(()),
        Some(7) => bail!("invariant-violated: the report above lists the violations"),
        other => bail!("devstack chaos failed ({other:?})"),
    }
}

/// `cargo xtask bench cold-start`: prints its own figures.
pub fn bench_cold_start(sh: &Shell, nodes: usize, procs: usize, spread: u64) -> Result<()> {
    anyhow::ensure!(
        (1..=10_000 * procs.max(1)).contains(&nodes) && procs >= 1,
        "--nodes 1 to 10,000 per process, --procs at least 1"
    );
    let cargo = super::cargo();
    let (nodes, procs, spread) = (nodes.to_string(), procs.to_string(), spread.to_string());
    let _nodes = sh.push_env("BCD_COLD_NODES", &nodes);
    let _procs = sh.push_env("BCD_COLD_PROCS", &procs);
    let _spread = sh.push_env("BCD_COLD_SPREAD_S", &spread);
    let with_e2e = super::WITH_E2E;
    cmd!(
        sh,
        "{cargo} test --release --quiet {with_e2e...} --test e2e -- --ignored --exact cold_start::bench_cold_start --nocapture"
    )
    .run()?;
    Ok(())
}
