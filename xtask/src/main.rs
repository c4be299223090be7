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

mod helper_e2e;
mod tidy;

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
    /// Regenerate testdata/tpm/ on a fresh software TPM (swtpm) with the Go node side, then check it.
    DaemonTpmFixture {
        /// Regenerate nothing; check the committed set in both languages, with a swtpm round trip.
        #[arg(long)]
        check: bool,
    },
    /// Install missing prerequisites (Debian packages as root, else print the apt-get line).
    Prereqs,
    /// Everything CI runs: prerequisites, formatting, lints, tests, fixture check.
    Ci,
    /// `bcd helper` as real root in private mount and net namespaces (TestHelperAsRoot); prints its wall time.
    HelperE2e,
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
    /// Median time from `bcd node` start to adopted by the dev stack (N runs).
    Adoption {
        /// Number of runs.
        #[arg(long, default_value_t = 10)]
        runs: usize,
    },
    /// Wall time of the whole bcd-e2e suite with binaries built, and of each scenario.
    E2e {
        /// Where bcd runs: native, netns (root) or wsl.
        #[arg(long, default_value = "native")]
        runner: String,
    },
    /// Medians of N consoles on one bcd: open_console to the first shell prompt byte, and one keystroke's echo.
    Console {
        /// Number of runs.
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Where bcd runs: native, netns (root) or wsl.
        #[arg(long, default_value = "native")]
        runner: String,
    },
    /// N real bcd agents (`bcd sim`) against one dev stack, release builds: times to all joined,
    /// connected and adopted, join-to-adopted p50/p99/max, memory per session and per agent, the
    /// crypto floor and wall/floor, then a restart of the stack with all connected.
    Scale {
        /// How many agents.
        #[arg(long, default_value_t = 10_000)]
        nodes: usize,
        /// How many `bcd sim` processes share them (each agent holds about 4 descriptors).
        #[arg(long, default_value_t = 4)]
        procs: usize,
    },
    /// Wall time of the TPM fixture regeneration (into a scratch directory) and of its check (medians of N runs).
    Tpm {
        /// Number of runs of each.
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
        Command::HelperE2e => helper_e2e::run(&sh, &root, &target_dir()),
        Command::DaemonTpmFixture { check } => daemon_tpm_fixture(&sh, check),
        Command::Bench { what: Bench::FixturesCheck { runs } } => bench_fixtures_check(&sh, runs),
        Command::Bench { what: Bench::Adoption { runs } } => bench_adoption(&sh, runs),
        Command::Bench { what: Bench::E2e { runner } } => bench_e2e(&sh, &runner),
        Command::Bench { what: Bench::Tpm { runs } } => bench_tpm(&sh, runs),
        Command::Bench { what: Bench::Scale { nodes, procs } } => bench_scale(&sh, nodes, procs),
        Command::Bench { what: Bench::Console { runs, runner } } => bench_console(&sh, runs, &runner),
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

/// The TPM fixture factory links tpm2-tss (through tss-esapi), so it runs as
/// a binary of the fixtures crate, never inside xtask. `TSS2_LOG=all+none`
/// keeps tpm2-tss from logging its TCTI probing.
fn daemon_tpm_fixture(sh: &Shell, check: bool) -> Result<()> {
    let cargo = cargo();
    let flag = check_flag(check);
    cmd!(sh, "{cargo} run --quiet -p fixtures --bin daemon-tpm-fixture -- {flag...}")
        .env("TSS2_LOG", "all+none")
        .run()?;
    Ok(())
}

/// The cargo target directory (`CARGO_TARGET_DIR` or `target/`).
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root().join("target"))
}

/// The median of some durations.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Runs `f` `runs` times, printing each time, and returns the median.
fn timed(label: &str, runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<Duration> {
    let mut times = Vec::new();
    for i in 1..=runs.max(1) {
        let started = Instant::now();
        f()?;
        let took = started.elapsed();
        println!("{label} run {i}: {took:.3?}");
        times.push(took);
    }
    Ok(median(times))
}

fn bench_tpm(sh: &Shell, runs: usize) -> Result<()> {
    let cargo = cargo();
    cmd!(sh, "{cargo} build --quiet -p fixtures --bin daemon-tpm-fixture").run()?;
    let binary = target_dir().join("debug/daemon-tpm-fixture");
    let scratch = target_dir().join("bench-tpm/testdata");
    std::fs::create_dir_all(&scratch)?;
    // One warm-up run builds the Go command and fills the Go build cache.
    cmd!(sh, "{binary} --check").env("TSS2_LOG", "all+none").quiet().ignore_stdout().run()?;
    let regenerate = timed("regeneration", runs, || {
        Ok(cmd!(sh, "{binary} --testdata {scratch}").env("TSS2_LOG", "all+none").quiet().ignore_stdout().run()?)
    })?;
    let check = timed("check", runs, || {
        Ok(cmd!(sh, "{binary} --check").env("TSS2_LOG", "all+none").quiet().ignore_stdout().run()?)
    })?;
    println!(
        "daemon-tpm-fixture (regeneration on a fresh swtpm, into {}): median {regenerate:.3?} over {runs} runs",
        scratch.display()
    );
    println!(
        "daemon-tpm-fixture --check (Rust, Go, swtpm round trip): median {check:.3?} over {runs} runs (target ≤ 2 s)"
    );
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
    step("go vet (no tags, fakehw, helpere2e)", || {
        let _dir = sh.push_dir(&daemon);
        cmd!(sh, "go vet ./...").run()?;
        cmd!(sh, "go vet -tags nonvml,fakehw ./...").run()?;
        Ok(cmd!(sh, "go vet -tags nonvml,helpere2e ./...").run()?)
    })?;
    step("cargo clippy -D warnings", || {
        Ok(cmd!(
            sh,
            "{cargo} clippy --workspace --all-targets --features daemon-harness/bcd-e2e --quiet -- -D warnings"
        )
        .run()?)
    })?;
    step("cargo test", || Ok(cmd!(sh, "{cargo} test --workspace --quiet").run()?))?;
    step("go test (no tags, and the fakehw build)", || {
        let _dir = sh.push_dir(&daemon);
        cmd!(sh, "go test ./...").run()?;
        Ok(cmd!(sh, "go test -tags nonvml,fakehw ./...").run()?)
    })?;
    step("e2e: bcd against the dev stack (--features bcd-e2e)", || {
        Ok(cmd!(sh, "{cargo} test -p daemon-harness --features bcd-e2e --test e2e --quiet").run()?)
    })?;
    step("helper-e2e: bcd helper as root in private namespaces", || helper_e2e::run(sh, &root(), &target_dir()))?;
    step("no process left behind by the e2e scenarios", no_leftover_processes)?;
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

fn bench_adoption(sh: &Shell, runs: usize) -> Result<()> {
    let cargo = cargo();
    let runs = runs.to_string();
    let _env = sh.push_env("BCD_BENCH_RUNS", &runs);
    cmd!(sh, "{cargo} test --quiet -p daemon-harness --features bcd-e2e --test e2e -- --ignored --exact bench::bench_time_from_node_start_to_adopted --nocapture")
        .run()?;
    Ok(())
}

fn bench_scale(sh: &Shell, nodes: usize, procs: usize) -> Result<()> {
    anyhow::ensure!(
        (1..=10_000 * procs.max(1)).contains(&nodes) && procs >= 1,
        "--nodes 1 to 10,000 per process, --procs at least 1"
    );
    let cargo = cargo();
    let (nodes, procs) = (nodes.to_string(), procs.to_string());
    let _nodes = sh.push_env("BCD_SCALE_NODES", &nodes);
    let _procs = sh.push_env("BCD_SCALE_PROCS", &procs);
    // The release profile: the dev stack (in the test process) and its crypto optimized.
    cmd!(sh, "{cargo} test --release --quiet -p daemon-harness --features bcd-e2e --test e2e -- --ignored --exact scale::bench_scale --nocapture")
        .run()?;
    Ok(())
}

fn bench_console(sh: &Shell, runs: usize, runner: &str) -> Result<()> {
    let cargo = cargo();
    let runs = runs.to_string();
    let _runs = sh.push_env("BCD_BENCH_RUNS", &runs);
    let _runner = sh.push_env("BCD_E2E_RUNNER", runner);
    cmd!(sh, "{cargo} test --quiet -p daemon-harness --features bcd-e2e --test e2e -- --ignored --exact console::bench_console_open_and_keystroke_echo --nocapture")
        .run()?;
    Ok(())
}

fn bench_e2e(sh: &Shell, runner: &str) -> Result<()> {
    let cargo = cargo();
    let _env = sh.push_env("BCD_E2E_RUNNER", runner);
    // Build first, so the figure is the suite's own time with binaries built.
    cmd!(sh, "{cargo} test --quiet -p daemon-harness --features bcd-e2e --test e2e --no-run").run()?;
    let started = Instant::now();
    let out = cmd!(sh, "{cargo} test --quiet -p daemon-harness --features bcd-e2e --test e2e -- --nocapture")
        .ignore_status()
        .output()?;
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut scenarios: Vec<&str> = stderr.lines().filter(|l| l.starts_with("scenario ")).collect();
    scenarios.sort();
    for line in &scenarios {
        println!("{line}");
    }
    if !out.status.success() {
        bail!("the e2e suite failed:\n{}{}", String::from_utf8_lossy(&out.stdout), stderr);
    }
    println!("bcd-e2e suite under {runner}: {} scenarios in {took:.2?} wall time (target ≤ 60 s)", scenarios.len());
    Ok(())
}

/// Fails if a process started by the e2e scenarios still runs: every node
/// lives under a `bcd-e2e-*` directory, which appears in the command line of
/// its bcd and of its swtpm.
fn no_leftover_processes() -> Result<()> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Ok(()) };
    let mut left = Vec::new();
    for entry in entries.flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains("/bcd-e2e-") {
            left.push(format!("pid {}: {}", entry.file_name().to_string_lossy(), cmdline.trim()));
        }
    }
    if !left.is_empty() {
        bail!("processes left behind:\n{}", left.join("\n"));
    }
    Ok(())
}
