//! `cargo xtask …`: the project's commands.
//!
//! xtask links no system library, so it builds on a fresh machine; it
//! installs the prerequisites first (`scripts/install-prereqs.sh`) and drives
//! the other crates through `cargo`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use xshell::{Shell, cmd};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "The bcd interop workspace's commands", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Regenerate the committed protocol code (Rust and Go) from proto/*.proto.
    Codegen {
        /// Write nothing; fail if the committed code is stale.
        #[arg(long)]
        check: bool,
    },
    /// Write the cross-language fixtures under testdata/ and verify them in both languages.
    DaemonFixtures {
        /// Write nothing; fail on a stale file or a failing case, listing the fix.
        #[arg(long)]
        check: bool,
    },
    /// Install missing prerequisites (Debian packages as root, else print the apt-get line).
    Prereqs,
    /// Everything CI runs: prerequisites, formatting, lints, tests, fixture check.
    Ci,
    /// Print a benchmark figure.
    Bench {
        #[command(subcommand)]
        what: Bench,
    },
}

#[derive(Subcommand)]
enum Bench {
    /// Wall time of `cargo xtask daemon-fixtures --check` with everything built (median of N runs).
    FixturesCheck {
        /// Number of runs.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let sh = Shell::new()?;
    let root = root();
    sh.change_dir(&root);
    match cli.command {
        Command::Codegen { check } => codegen(&sh, check),
        Command::DaemonFixtures { check } => daemon_fixtures(&sh, check),
        Command::Prereqs => prereqs(&sh),
        Command::Ci => ci(&sh),
        Command::Bench { what: Bench::FixturesCheck { runs } } => bench_fixtures_check(&sh, runs),
    }
}

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string())
}

fn check_flag(check: bool) -> Option<&'static str> {
    check.then_some("--check")
}

fn codegen(sh: &Shell, check: bool) -> Result<()> {
    let cargo = cargo();
    let flag = check_flag(check);
    cmd!(sh, "{cargo} run --quiet -p proto-codegen -- {flag...}").run()?;
    Ok(())
}

fn daemon_fixtures(sh: &Shell, check: bool) -> Result<()> {
    let cargo = cargo();
    let flag = check_flag(check);
    cmd!(sh, "{cargo} run --quiet -p fixtures --bin daemon-fixtures -- {flag...}").run()?;
    Ok(())
}

fn prereqs(sh: &Shell) -> Result<()> {
    cmd!(sh, "bash scripts/install-prereqs.sh").run().context("installing prerequisites")?;
    let go_dir = root().join("daemon");
    let _dir = sh.push_dir(go_dir);
    cmd!(sh, "go mod download").run().context("downloading Go modules")?;
    Ok(())
}

/// One CI step: prints its name, runs it, prints its time.
fn step(name: &str, f: impl FnOnce() -> Result<()>) -> Result<Duration> {
    println!("\n==> {name}");
    let started = Instant::now();
    f().with_context(|| format!("CI step failed: {name}"))?;
    let took = started.elapsed();
    println!("<== {name}: ok in {took:.1?}");
    Ok(took)
}

fn ci(sh: &Shell) -> Result<()> {
    let cargo = cargo();
    let started = Instant::now();
    let daemon = root().join("daemon");
    step("prerequisites", || prereqs(sh))?;
    step("cargo fmt --check", || Ok(cmd!(sh, "{cargo} fmt --all -- --check").run()?))?;
    step("gofmt", || {
        let _dir = sh.push_dir(&daemon);
        let unformatted = cmd!(sh, "gofmt -l .").read()?;
        if !unformatted.trim().is_empty() {
            bail!("gofmt would change:\n{unformatted}");
        }
        Ok(())
    })?;
    step("go vet", || {
        let _dir = sh.push_dir(&daemon);
        Ok(cmd!(sh, "go vet ./...").run()?)
    })?;
    step("cargo clippy -D warnings", || {
        Ok(cmd!(sh, "{cargo} clippy --workspace --all-targets --quiet -- -D warnings").run()?)
    })?;
    step("cargo test", || Ok(cmd!(sh, "{cargo} test --workspace --quiet").run()?))?;
    step("go test", || {
        let _dir = sh.push_dir(&daemon);
        Ok(cmd!(sh, "go test ./...").run()?)
    })?;
    step("codegen --check", || codegen(sh, true))?;
    step("daemon-fixtures --check", || daemon_fixtures(sh, true))?;
    println!("\nci: all steps passed in {:.1?}", started.elapsed());
    Ok(())
}

fn bench_fixtures_check(sh: &Shell, runs: usize) -> Result<()> {
    let cargo = cargo();
    cmd!(sh, "{cargo} build --quiet -p fixtures --bin daemon-fixtures").run()?;
    let binary = root().join("target/debug/daemon-fixtures");
    // One warm-up run builds the Go tool and fills the Go build cache.
    cmd!(sh, "{binary} --check").quiet().ignore_stdout().run()?;
    let mut times = Vec::new();
    for i in 1..=runs {
        let started = Instant::now();
        cmd!(sh, "{binary} --check").quiet().ignore_stdout().run()?;
        let took = started.elapsed();
        println!("run {i}: {took:.3?}");
        times.push(took);
    }
    times.sort();
    println!("daemon-fixtures --check: median {:.3?} over {runs} runs (target ≤ 5 s)", times[times.len() / 2]);
    Ok(())
}
