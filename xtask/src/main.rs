//! `cargo xtask …`: the project's commands.
//!
//! xtask links no system library, so it builds on a fresh machine. Every
//! command that builds a crate linking one (the fixtures' tpm2-tss, through
//! the harness's dev-dependencies too) installs the prerequisites first
//! (`scripts/install-prereqs.sh`, one line of output), and its first Rust
//! build shows what it compiles and how far it is ([`progress`]); it drives
//! the other crates through `cargo`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use xshell::{Shell, cmd};

mod chaos;
mod fuzz;
mod helper_e2e;
mod progress;
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
    /// Build the fakehw bcd (the one `devstack serve --sim` and the e2e scenarios run; it joins a
    /// dev stack by hand on any machine) unless the cache has it, and print its path.
    BuildBcd,
    /// Everything CI runs: prerequisites, formatting, lints, tests, fixture check.
    Ci,
    /// `bcd helper` as real root in private mount and net namespaces (TestHelperAsRoot); prints its wall time.
    HelperE2e,
    /// Every fuzz target (cargo-fuzz on nightly, Go native), one after another, then the Rust/Go differential check.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 5, conflicts_with = "runs")]
        time: u64,
        /// Executions per target instead (a bench run: `--runs 10000000`).
        #[arg(long)]
        runs: Option<u64>,
    },
    /// A chaos run over real daemons (devstack chaos, release build): bcd sim agents behind a
    /// fault proxy, a workload and seeded faults, then the fleet invariants; the report is JSON.
    Chaos(chaos::ChaosArgs),
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
    /// Session setup and command round trip over gRPC and over the WebSocket, side by side (medians of N runs).
    Transports {
        /// Number of runs of each.
        #[arg(long, default_value_t = 10)]
        runs: usize,
    },
    /// VPS figures: medians of create_instance to running and delete_instance to deleted (N runs), and 50 instances on 5 `bcd sim` hosts;
    /// with --real, real guests on bcd's host build (root): create to the guest reaching its metadata, delete to gone, four at once.
    Vps {
        /// Number of runs (default 10, or 5 with --real).
        #[arg(long)]
        runs: Option<usize>,
        /// Real guests under QEMU on bcd's host build, with the accelerator named.
        #[arg(long)]
        real: bool,
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
        /// How many gateways (more than one: gateway processes on PostgreSQL, one of them
        /// killed with every agent connected, its nodes' way back timed).
        #[arg(long, default_value_t = 1)]
        gateways: usize,
        /// The store: sqlite (the in-process stack on a file) or postgres (a throwaway cluster).
        #[arg(long, default_value = "sqlite", value_parser = ["sqlite", "postgres"])]
        store: String,
    },
    /// A fleet's cold start (release builds): N agents power on within a spread, then the stack goes
    /// down and every agent is power cycled; ready and back times, unreachable marks, invariants.
    ColdStart {
        /// How many agents.
        #[arg(long, default_value_t = 10_000)]
        nodes: usize,
        /// How many `bcd sim` processes share them.
        #[arg(long, default_value_t = 4)]
        procs: usize,
        /// The power-on spread, in seconds.
        #[arg(long, default_value_t = 30)]
        spread: u64,
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
        Command::Prereqs => prereqs(&sh),
        Command::BuildBcd => {
            let bcd = bcd_build::build_bcd(&bcd_build::BuildOptions::fakehw())?;
            println!("{}", bcd.display());
            Ok(())
        }
        Command::Ci => ci(&sh),
        // Each of these builds a crate that links a system library.
        Command::DaemonFixtures { check } => prereqs(&sh).and_then(|()| daemon_fixtures(&sh, check)),
        Command::HelperE2e => prereqs(&sh).and_then(|()| helper_e2e::run(&sh, &root, &target_dir())),
        Command::DaemonTpmFixture { check } => prereqs(&sh).and_then(|()| daemon_tpm_fixture(&sh, check)),
        Command::Bench { what } => prereqs(&sh).and_then(|()| bench(&sh, what)),
        Command::Chaos(args) => prereqs(&sh).and_then(|()| chaos::run(&sh, args)),
        Command::Fuzz { time, runs } => prereqs(&sh)
            .and_then(|()| fuzz::run(&sh, &root, runs.map_or(fuzz::Budget::Seconds(time), fuzz::Budget::Runs))),
    }
}

fn bench(sh: &Shell, what: Bench) -> Result<()> {
    match what {
        Bench::FixturesCheck { runs } => bench_fixtures_check(sh, runs),
        Bench::Adoption { runs } => bench_scenario(sh, "bench::bench_time_from_node_start_to_adopted", runs, "native"),
        Bench::E2e { runner } => bench_e2e(sh, &runner),
        Bench::Tpm { runs } => bench_tpm(sh, runs),
        Bench::Console { runs, runner } => {
            bench_scenario(sh, "console::bench_console_open_and_keystroke_echo", runs, &runner)
        }
        Bench::Transports { runs } => bench_scenario(sh, "bench::bench_transports", runs, "native"),
        Bench::Vps { runs, real: false } => bench_scenario(sh, "vps_bench::", runs.unwrap_or(10), "native"),
        Bench::Vps { runs, real: true } => bench_scenario(sh, "guests_bench::", runs.unwrap_or(5), "native"),
        Bench::Scale { nodes, procs, gateways, store } => bench_scale(sh, nodes, procs, gateways, &store),
        Bench::ColdStart { nodes, procs, spread } => chaos::bench_cold_start(sh, nodes, procs, spread),
    }
}

/// Builds with progress on standard error (nothing when all is fresh).
fn build_with_progress(label: &str, args: &[&str], tree: &[&str]) -> Result<()> {
    progress::build(&root(), &cargo(), &progress::Build { label, args, tree })
}

/// The fixtures binary `bin`, built with progress.
fn build_fixtures_bin(bin: &str) -> Result<()> {
    build_with_progress(
        &format!("fixtures ({bin})"),
        &["build", "-p", "fixtures", "--bin", bin],
        &["-p", "fixtures", "-e", "normal,build"],
    )
}

/// The workspace with the e2e scenarios' feature: clippy checks it, and the
/// scenarios are selected from it (`--test e2e`) with the workspace's
/// feature set, so that they reuse what `cargo test --workspace` built
/// (`-p daemon-harness` would resolve the dependencies' features anew and
/// build most of them again).
const WITH_E2E: [&str; 3] = ["--workspace", "--features", "daemon-harness/bcd-e2e"];

/// The e2e scenarios' test binary, built with progress.
fn build_e2e() -> Result<()> {
    build_with_progress(
        "the e2e scenarios (daemon-harness, bcd-e2e)",
        &[&["test"], &WITH_E2E[..], &["--test", "e2e", "--no-run"]].concat(),
        &[&WITH_E2E[..], &["-e", "normal,build,dev"]].concat(),
    )
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
    build_with_progress(
        "proto-codegen",
        &["build", "-p", "proto-codegen"],
        &["-p", "proto-codegen", "-e", "normal,build"],
    )?;
    cmd!(sh, "{cargo} run --quiet -p proto-codegen -- {flag...}").run()?;
    Ok(())
}

fn daemon_fixtures(sh: &Shell, check: bool) -> Result<()> {
    let cargo = cargo();
    let flag = check_flag(check);
    build_fixtures_bin("daemon-fixtures")?;
    cmd!(sh, "{cargo} run --quiet -p fixtures --bin daemon-fixtures -- {flag...}").run()?;
    Ok(())
}

/// The TPM fixture factory links tpm2-tss (through tss-esapi), so it runs as
/// a binary of the fixtures crate, never inside xtask. `TSS2_LOG=all+none`
/// keeps tpm2-tss from logging its TCTI probing.
fn daemon_tpm_fixture(sh: &Shell, check: bool) -> Result<()> {
    let cargo = cargo();
    let flag = check_flag(check);
    build_fixtures_bin("daemon-tpm-fixture")?;
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
    build_fixtures_bin("daemon-tpm-fixture")?;
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

/// Installs the missing Debian packages (as root; otherwise fails with the
/// `apt-get` line to run) and the Go modules. The script says what it did in
/// one line; `go mod download` prints nothing unless it fails.
fn prereqs(sh: &Shell) -> Result<()> {
    cmd!(sh, "bash scripts/install-prereqs.sh").quiet().run().context("installing prerequisites")?;
    let go_dir = root().join("daemon");
    let _dir = sh.push_dir(go_dir);
    cmd!(sh, "go mod download").quiet().run().context("downloading Go modules")?;
    // cargo-fuzz, for `cargo xtask fuzz`, when the nightly toolchain is there.
    let nightly = cmd!(sh, "cargo +nightly --version").quiet().ignore_stdout().ignore_stderr().run().is_ok();
    if nightly && cmd!(sh, "cargo +nightly fuzz --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        cmd!(sh, "cargo install cargo-fuzz --locked").run().context("installing cargo-fuzz")?;
    }
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
    step("prerequisites", || {
        prereqs(sh)?;
        disk_space(sh)
    })?;
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
        build_with_progress(
            "the workspace (clippy)",
            &[&["clippy", "--all-targets"], &WITH_E2E[..], &["--", "-D", "warnings"]].concat(),
            &[&WITH_E2E[..], &["-e", "normal,build,dev"]].concat(),
        )
    })?;
    step("cargo test", || {
        build_with_progress(
            "the workspace's tests",
            &["test", "--workspace", "--no-run"],
            &["--workspace", "-e", "normal,build,dev"],
        )?;
        Ok(cmd!(sh, "{cargo} test --workspace --quiet").run()?)
    })?;
    step("go test (no tags, and the fakehw build)", || {
        let _dir = sh.push_dir(&daemon);
        cmd!(sh, "go test ./...").run()?;
        Ok(cmd!(sh, "go test -tags nonvml,fakehw ./...").run()?)
    })?;
    step("e2e: bcd against the dev stack (--features bcd-e2e)", || {
        build_e2e()?;
        Ok(cmd!(sh, "{cargo} test {WITH_E2E...} --test e2e --quiet").run()?)
    })?;
    step("helper-e2e: bcd helper as root in private namespaces", || helper_e2e::run(sh, &root(), &target_dir()))?;
    step("no process left behind by the e2e scenarios", no_leftover_processes)?;
    step("fuzz smoke: every target for 5 s over its corpus, and the differential check", || {
        fuzz::run(sh, &root(), fuzz::Budget::Seconds(5))
    })?;
    step("codegen --check", || codegen(sh, true))?;
    step("daemon-fixtures --check", || daemon_fixtures(sh, true))?;
    println!("\nci: all steps passed in {:.1?}", started.elapsed());
    Ok(())
}

fn bench_fixtures_check(sh: &Shell, runs: usize) -> Result<()> {
    build_fixtures_bin("daemon-fixtures")?;
    let binary = target_dir().join("debug/daemon-fixtures");
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

fn bench_scale(sh: &Shell, nodes: usize, procs: usize, gateways: usize, store: &str) -> Result<()> {
    anyhow::ensure!(
        (1..=10_000 * procs.max(1)).contains(&nodes) && procs >= 1,
        "--nodes 1 to 10,000 per process, --procs at least 1"
    );
    anyhow::ensure!((1..=8).contains(&gateways), "--gateways 1 to 8");
    anyhow::ensure!(gateways == 1 || store == "postgres", "several gateways share a store: --store postgres");
    let cargo = cargo();
    let (nodes, procs, gateways) = (nodes.to_string(), procs.to_string(), gateways.to_string());
    let _nodes = sh.push_env("BCD_SCALE_NODES", &nodes);
    let _procs = sh.push_env("BCD_SCALE_PROCS", &procs);
    let _gateways = sh.push_env("BCD_SCALE_GATEWAYS", &gateways);
    let _store = sh.push_env("BCD_SCALE_STORE", store);
    // The release profile: the dev stack (in the test process) and its crypto optimized.
    cmd!(
        sh,
        "{cargo} test --release --quiet {WITH_E2E...} --test e2e -- --ignored --exact scale::bench_scale --nocapture"
    )
    .run()?;
    Ok(())
}

/// Runs the ignored benchmark scenarios of the e2e suite whose names
/// contain `filter`, one at a time (`BCD_BENCH_RUNS` runs each, bcd under
/// `runner`); they print their own figures.
fn bench_scenario(sh: &Shell, filter: &str, runs: usize, runner: &str) -> Result<()> {
    let cargo = cargo();
    let runs = runs.to_string();
    let _runs = sh.push_env("BCD_BENCH_RUNS", &runs);
    let _runner = sh.push_env("BCD_E2E_RUNNER", runner);
    build_e2e()?;
    cmd!(sh, "{cargo} test --quiet {WITH_E2E...} --test e2e -- --ignored --test-threads 1 {filter} --nocapture")
        .run()?;
    Ok(())
}

fn bench_e2e(sh: &Shell, runner: &str) -> Result<()> {
    let cargo = cargo();
    let _env = sh.push_env("BCD_E2E_RUNNER", runner);
    // Build first, so the figure is the suite's own time with binaries built.
    build_e2e()?;
    let started = Instant::now();
    let out = cmd!(sh, "{cargo} test --quiet {WITH_E2E...} --test e2e -- --nocapture").ignore_status().output()?;
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

/// What a clean run of `ci` writes under the target directories (measured:
/// 4.5 GiB, the fuzz targets' 1.1 GiB included).
const CI_BUILD_BYTES: u64 = 4608 << 20;

/// Room beyond that for Go's build cache and the scenarios' files.
const CI_ROOM_BYTES: u64 = 1536 << 20;

/// Prints the space free for the build, and warns when a clean run may not
/// fit: a full disk otherwise shows only as a compiler's I/O error.
fn disk_space(sh: &Shell) -> Result<()> {
    let target = target_dir();
    let probe = if target.exists() { target } else { root() };
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let free = cmd!(sh, "df --output=avail -B1 {probe}")
        .quiet()
        .read()
        .ok()
        .and_then(|out| out.lines().last().and_then(|l| l.trim().parse::<u64>().ok()));
    let Some(free) = free else {
        println!("disk: could not read the space free under {} (df)", probe.display());
        return Ok(());
    };
    println!("disk: {:.1} GiB free under {}", gib(free), probe.display());
    if free < CI_BUILD_BYTES + CI_ROOM_BYTES {
        println!(
            "warning: a clean run writes about {:.1} GiB of build output, and Go's build cache beside it; {:.1} GiB is free",
            gib(CI_BUILD_BYTES),
            gib(free)
        );
    }
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
