//! `cargo xtask fuzz [--time S | --runs N]`: every fuzz target, one after
//! another (docs/harness.md, "Fuzzing"): the cargo-fuzz targets of `fuzz/`
//! (nightly), each over its committed corpus `fuzz/corpus/<target>/` plus a
//! scratch corpus in `target/fuzz-corpus/`, then Go's native targets, then
//! the differential check: the Rust and Go verdicts of the shared parsers on
//! every file of those corpora must be the same line.
//!
//! Without nightly or cargo-fuzz the Rust half is skipped with a reason,
//! except under `CI=true`, where that fails.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use xshell::{Shell, cmd};

/// The cargo-fuzz targets, in the order they run.
const RUST_TARGETS: &[&str] = &[
    "dsse_json",
    "dsse_proto",
    "jwe",
    "jws",
    "manifest",
    "tpm_public",
    "tpm_attest",
    "gateway_frame",
    "csr",
    "certificate",
    "otlp_json",
    "renew_body",
];

/// Go's native targets: package and function.
const GO_TARGETS: &[(&str, &str)] = &[
    ("./internal/pki", "FuzzEnvelopeJSON"),
    ("./internal/pki", "FuzzEnvelopeProto"),
    ("./internal/pki", "FuzzJWE"),
    ("./internal/pki", "FuzzJWS"),
    ("./internal/pki", "FuzzManifest"),
    ("./internal/pki", "FuzzParseCSR"),
    ("./internal/pki", "FuzzCertificate"),
    ("./internal/tpm/attestor", "FuzzPublic"),
    ("./internal/tpm/attestor", "FuzzAttest"),
    ("./internal/config", "FuzzConfig"),
    ("./internal/session", "FuzzGatewayFrame"),
    ("./internal/helper", "FuzzRequest"),
    ("./internal/hostconfig/unitfile", "FuzzUnitFile"),
    ("./internal/runtime/plan", "FuzzPlan"),
];

/// The differential check: a parser kind and the Rust corpus it reads.
const DIFFERENTIAL: &[(&str, &str)] = &[
    ("dsse-json", "dsse_json"),
    ("jwe", "jwe"),
    ("jws", "jws"),
    ("manifest", "manifest"),
    ("tpm-public", "tpm_public"),
    ("csr", "csr"),
    ("certificate", "certificate"),
];

/// How long each target runs.
#[derive(Clone, Copy, Debug)]
pub enum Budget {
    /// Seconds per target.
    Seconds(u64),
    /// Executions per target.
    Runs(u64),
}

/// Why the Rust half cannot run here, if it cannot.
fn rust_missing(sh: &Shell) -> Option<String> {
    if cmd!(sh, "cargo +nightly --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        return Some("no nightly toolchain (rustup toolchain install nightly)".into());
    }
    if cmd!(sh, "cargo +nightly fuzz --version").quiet().ignore_stdout().ignore_stderr().run().is_err() {
        return Some("no cargo-fuzz (cargo install cargo-fuzz --locked)".into());
    }
    None
}

/// Runs every target within `budget`, then the differential check.
pub fn run(sh: &Shell, root: &Path, budget: Budget) -> Result<()> {
    let started = Instant::now();
    let mut lines = Vec::new();
    match rust_missing(sh) {
        Some(reason) if std::env::var("CI").as_deref() == Ok("true") => bail!("fuzz: {reason} (CI=true)"),
        Some(reason) => println!("fuzz: skipping the cargo-fuzz targets: {reason}"),
        None => lines.extend(run_rust(sh, root, budget)?),
    }
    lines.extend(run_go(sh, root, budget)?);
    for line in &lines {
        println!("{line}");
    }
    if rust_missing(sh).is_none() {
        println!("{}", differential(sh, root)?);
    }
    println!("fuzz: {} targets, 0 crashes, in {:.1?}", lines.len(), started.elapsed());
    Ok(())
}

fn run_rust(sh: &Shell, root: &Path, budget: Budget) -> Result<Vec<String>> {
    let _dir = sh.push_dir(root.join("fuzz"));
    cmd!(sh, "cargo +nightly fuzz build -s none -a").run().context("building the cargo-fuzz targets")?;
    let flag = match budget {
        Budget::Seconds(s) => format!("-max_total_time={s}"),
        Budget::Runs(n) => format!("-runs={n}"),
    };
    let mut lines = Vec::new();
    for target in RUST_TARGETS {
        let scratch = root.join("target/fuzz-corpus").join(target);
        std::fs::create_dir_all(&scratch)?;
        let corpus = format!("corpus/{target}");
        let started = Instant::now();
        let out =
            cmd!(sh, "cargo +nightly fuzz run -s none -a {target} {scratch} {corpus} -- {flag} -print_final_stats=1")
                .ignore_status()
                .quiet()
                .output()?;
        let log = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            bail!("fuzz target {target} failed (its input is under fuzz/artifacts/{target}/):\n{log}");
        }
        let runs = log.lines().find_map(|l| l.strip_prefix("stat::number_of_executed_units:")).unwrap_or("?").trim();
        lines.push(format!("rust {target}: {runs} executions, 0 crashes, {:.1?}", started.elapsed()));
    }
    Ok(lines)
}

fn run_go(sh: &Shell, root: &Path, budget: Budget) -> Result<Vec<String>> {
    let _dir = sh.push_dir(root.join("daemon"));
    // A time-boxed smoke runs one worker; a count of executions (the
    // 10-million bench) one per core, or it takes twice as long.
    let (fuzztime, parallel) = match budget {
        Budget::Seconds(s) => (format!("{s}s"), 1),
        Budget::Runs(n) => (format!("{n}x"), std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let parallel = parallel.to_string();
    let mut lines = Vec::new();
    for (package, target) in GO_TARGETS {
        let started = Instant::now();
        let pattern = format!("^{target}$");
        let mut attempt = 0;
        let log = loop {
            attempt += 1;
            let out = cmd!(
                sh,
                "go test {package} -run ^$ -fuzz {pattern} -fuzztime {fuzztime} -fuzzminimizetime 1s -parallel {parallel}"
            )
            .ignore_status()
            .quiet()
            .output()?;
            let log = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.success() {
                break log;
            }
            if attempt == 1 && matches!(budget, Budget::Seconds(_)) && is_deadline_race(&log) {
                println!(
                    "go {target}: ended \"context deadline exceeded\" at its time limit with no failing input \
                     (Go's fuzz coordinator race, golang/go#75804); running it once more"
                );
                continue;
            }
            bail!("go fuzz target {target} failed (its input is under daemon/{package}/testdata/fuzz/):\n{log}");
        };
        let runs = log
            .lines()
            .filter_map(|l| l.split("execs: ").nth(1)?.split_whitespace().next()?.parse::<u64>().ok())
            .max()
            .map_or("?".to_string(), |n| n.to_string());
        lines.push(format!("go {target}: {runs} executions, 0 crashes, {:.1?}", started.elapsed()));
    }
    Ok(lines)
}

/// Whether a failed time-boxed Go run is the coordinator's race at the end
/// of `-fuzztime` (fixed after Go 1.26): its only failure is the deadline,
/// and it wrote no failing input, so it found nothing. A real finding
/// writes its input and says so.
fn is_deadline_race(log: &str) -> bool {
    let failures: Vec<&str> = log.lines().map(str::trim).filter(|l| l.starts_with("--- FAIL:")).collect();
    failures.len() == 1
        && log.lines().map(str::trim).any(|l| l == "context deadline exceeded")
        && !log.contains("Failing input written to")
        && !log.contains("panic:")
}

/// The Rust and Go verdicts of every shared parser on every corpus file.
fn differential(sh: &Shell, root: &Path) -> Result<String> {
    let go = root.join("target/go/bcd-fixtures");
    {
        let _dir = sh.push_dir(root.join("daemon"));
        cmd!(sh, "go build -o {go} ./cmd/bcd-fixtures").run()?;
    }
    let _dir = sh.push_dir(root.join("fuzz"));
    cmd!(sh, "cargo +nightly build --quiet --release --example verdicts").run()?;
    let rust = root.join("fuzz/target/release/examples/verdicts");
    let mut total = 0;
    for (kind, target) in DIFFERENTIAL {
        let mut files = Vec::new();
        for dir in [root.join("fuzz/corpus").join(target), root.join("target/fuzz-corpus").join(target)] {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                files.push(entry.path());
            }
        }
        files.sort();
        for chunk in files.chunks(500) {
            let ours = cmd!(sh, "{rust} {kind} {chunk...}").quiet().read()?;
            let theirs = cmd!(sh, "{go} verdicts {kind} {chunk...}").quiet().read()?;
            let differ: Vec<String> = ours
                .lines()
                .zip(theirs.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("  rust {a}\n  go   {b}"))
                .collect();
            if !differ.is_empty() || ours.lines().count() != theirs.lines().count() {
                bail!(
                    "Rust and Go disagree on {kind} (files under fuzz/corpus/{target} or target/fuzz-corpus/{target}):\n{}",
                    differ.join("\n")
                );
            }
        }
        total += files.len();
    }
    Ok(format!(
        "fuzz: differential check: Rust and Go agree on all {total} corpus files ({} parsers)",
        DIFFERENTIAL.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::is_deadline_race;

    #[test]
    fn only_a_bare_deadline_at_the_time_limit_is_the_coordinator_race() {
        let race = "fuzz: elapsed: 5s, execs: 12174 (5854/sec), new interesting: 0 (total: 305)\n\
                    --- FAIL: FuzzGatewayFrame (5.05s)\n    context deadline exceeded\nFAIL\nexit status 1\n";
        assert!(is_deadline_race(race));
        let finding = "fuzz: elapsed: 1s, execs: 900 (900/sec)\n--- FAIL: FuzzJWS (0.93s)\n    \
                       --- FAIL: FuzzJWS (0.00s)\n        testing.go:1591: panic: index out of range\n    \
                       Failing input written to testdata/fuzz/FuzzJWS/5a1b\n    To re-run:\nFAIL\n";
        assert!(!is_deadline_race(finding));
        let slow_input = "--- FAIL: FuzzManifest (5.01s)\n    context deadline exceeded\n    \
                          Failing input written to testdata/fuzz/FuzzManifest/77c0\nFAIL\n";
        assert!(!is_deadline_race(slow_input));
    }
}
