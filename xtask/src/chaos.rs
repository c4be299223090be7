//! `cargo xtask chaos`: a chaos run over real daemons (docs/harness.md,
//! "Chaos"), the dev stack's `devstack chaos` built in the release
//! profile: the report (JSON) on standard output, and a failure
//! (`invariant-violated`) when an invariant did not hold.

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
    let ChaosArgs { seed, nodes, minutes, level, settle, log, keep } = args;
    let (nodes, minutes) = (nodes.to_string(), minutes.to_string());
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
        "{devstack} chaos --seed {seed} --nodes {nodes} --minutes {minutes} --chaos {level} --settle {settle} {extra...}"
    )
    .into();
    let status = command.status()?;
    match status.code() {
        Some(0) => Ok(()),
        Some(3) => bail!("invariant-violated: the report above lists the violations"),
        other => bail!("devstack chaos failed ({other:?})"),
    }
}
