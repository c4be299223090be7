//! A fleet's cold start (docs/harness.md, "Cold start"): agents power on
//! at seeded times within a spread, join and are adopted; the stack goes
//! down, every agent is power cycled, and the fleet comes back; no node is
//! ever marked unreachable and the fleet invariants hold. The CI-sized run
//! here, and `cargo xtask bench cold-start --nodes N` (`bench_cold_start`).

use std::time::Duration;

use daemon_harness::prereq;
use devstack::chaos::cold_start::{self, ColdStartReport, ColdStartSpec};

use crate::common;

async fn cold(name: &str, spec: ColdStartSpec) -> Option<ColdStartReport> {
    if !prereq::require_go(name) {
        return None;
    }
    devstack::raise_open_file_limit();
    let bcd = common::bcd().expect("bcd builds");
    let dir = tempfile::Builder::new().prefix("bcd-e2e-cold-").tempdir().unwrap();
    let report = match cold_start::run(&spec, &bcd, dir.path(), &mut |line| eprintln!("{name}: {line}")).await {
        Ok(report) => report,
        Err(e) => panic!("{name}: {e} (the run is kept in {})", dir.keep().display()),
    };
    eprintln!("{name}: {}", serde_json::to_string_pretty(&report).unwrap());
    if !report.passed() {
        eprintln!("{name}: the run is kept in {}", dir.keep().display());
    }
    assert_eq!(report.unreachable_marks, 0, "a node was marked unreachable");
    assert!(report.passed(), "{} violation(s), the first: {:#?}", report.violations, report.first_violations);
    Some(report)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cold_start_of_forty_nodes_is_adopted_and_back_after_a_power_cycle_with_no_unreachable_mark() {
    let name = "a_cold_start_of_forty_nodes_is_adopted_and_back_after_a_power_cycle_with_no_unreachable_mark";
    let spec = ColdStartSpec {
        seed: "ci".into(),
        nodes: 40,
        procs: 2,
        spread: Duration::from_secs(5),
        down: Duration::from_secs(2),
        limit: Duration::from_secs(60),
    };
    let started = std::time::Instant::now();
    let Some(report) = cold(name, spec).await else { return };
    assert!(report.first_session.max_ms > 0 && report.adopted.p50_ms >= report.first_session.p50_ms);
    eprintln!("scenario {name}: {:.2?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench cold-start --nodes N [--procs P] [--spread D]"]
async fn bench_cold_start() {
    let var = |k: &str, default: u64| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let spec = ColdStartSpec {
        seed: "bench".into(),
        nodes: var("BCD_COLD_NODES", 10_000) as u32,
        procs: var("BCD_COLD_PROCS", 4) as u32,
        spread: Duration::from_secs(var("BCD_COLD_SPREAD_S", 30)),
        down: Duration::from_secs(5),
        limit: Duration::from_secs(600),
    };
    let Some(r) = cold("bench_cold_start", spec.clone()).await else { return };
    println!(
        "cold start: {} agents in {} bcd sim process(es), power-on spread {:?}",
        spec.nodes, spec.procs, spec.spread
    );
    println!(
        "ready (all connected and adopted) {:.1} s after the first power-on (goal ≤ 80 s)",
        r.ready_ms as f64 / 1e3
    );
    let s = |x: &cold_start::Spread| format!("p50 {} / p99 {} / max {} ms", x.p50_ms, x.p99_ms, x.max_ms);
    println!("first session after power-on: {}", s(&r.first_session));
    println!("adopted after power-on: {}", s(&r.adopted));
    println!(
        "power cycle: every node back {:.1} s after the stack returned (goal ≤ 40 s); {}",
        r.back_ms as f64 / 1e3,
        s(&r.back)
    );
    println!("unreachable marks: {}; invariant violations: {}", r.unreachable_marks, r.violations);
}
