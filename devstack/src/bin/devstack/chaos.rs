//! `devstack chaos`: a chaos run over real daemons (docs/harness.md,
//! "Chaos"): it builds the fakehw bcd (the harness's cached build), runs
//! N `bcd sim` agents behind the fault proxy against a dev stack of its
//! own, with a steady workload and the seeded faults of the level, lets the
//! fleet settle, checks the fleet invariants, and prints the report (JSON)
//! on standard output. It exits 0 when every invariant held and 7
//! (`invariant-violated`, [`crate::exit::VIOLATED`]) when one did not.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use devstack::chaos::{self, ChaosSpec, Level};

/// `devstack chaos`.
#[derive(Args)]
pub struct Chaos {
    /// Everything random derives from it: the same seed draws the same faults.
    #[arg(long, default_value = "chaos")]
    seed: String,
    /// How many simulated nodes (bcd sim agents).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=2000))]
    nodes: u32,
    /// How long the workload and the faults run, in minutes.
    #[arg(long, default_value_t = 2.0)]
    minutes: f64,
    /// The chaos level: none, light or heavy.
    #[arg(long = "chaos", default_value = "light", value_parser = parse_level)]
    level: Level,
    /// How long the fleet may take to settle afterwards.
    #[arg(long, default_value = "2m", value_parser = humantime::parse_duration)]
    settle: Duration,
    /// How many gateways: 1 is the stack in process on SQLite; more are
    /// `devstack gateway` processes on a throwaway PostgreSQL cluster,
    /// which heavy chaos kills and stalls.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    gateways: u32,
    /// Write the event log (JSON lines) to this new file.
    #[arg(long, value_name = "PATH")]
    log: Option<PathBuf>,
    /// Keep the run's directory (the stack's store, the agents, bcd sim's log) here instead of a temporary one.
    #[arg(long, value_name = "DIR")]
    keep: Option<PathBuf>,
}

fn parse_level(s: &str) -> Result<Level, String> {
    s.parse()
}

impl Chaos {
    pub async fn run(self, _ctx: &crate::Context) -> Result<ExitCode> {
        run(self).await
    }
}

async fn run(args: Chaos) -> Result<ExitCode> {
    anyhow::ensure!(args.minutes > 0.0 && args.minutes <= 24.0 * 60.0, "--minutes must be above 0 and at most a day");
    devstack::raise_open_file_limit();
    let bcd = crate::sim::build_bcd().await?;
    let temp;
    let dir = match &args.keep {
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
            dir.clone()
        }
        None => {
            temp = tempfile::Builder::new().prefix("devstack-chaos-").tempdir().context("a temporary directory")?;
            temp.path().to_path_buf()
        }
    };
    let spec = ChaosSpec {
        seed: args.seed.clone(),
        nodes: args.nodes,
        duration: Duration::from_secs_f64(args.minutes * 60.0),
        settle: args.settle,
        level: args.level,
        log: args.log.clone(),
        gateways: args.gateways,
        gateway_exe: Some(std::env::current_exe().context("find the devstack binary")?),
    };
    eprintln!(
        "chaos: seed {:?}, {} node(s), {} for {} min, in {}",
        spec.seed,
        spec.nodes,
        spec.level,
        args.minutes,
        dir.display()
    );
    let report = chaos::run(&spec, &bcd, &dir, &mut |line| eprintln!("chaos: {line}")).await?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    if report.passed() {
        eprintln!(
            "chaos: every invariant held ({} command(s), {} booking(s))",
            report.commands.total, report.workload.bookings
        );
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "devstack chaos: invariant-violated: {} violation(s); run again with --seed {:?} (and --log PATH for the event log)",
        report.violations, spec.seed
    );
    Ok(ExitCode::from(crate::exit::VIOLATED))
}
