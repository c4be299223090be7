//! The CI-sized chaos run (docs/harness.md, "Chaos"): 16 `bcd sim` agents
//! behind the fault proxy, light chaos for two minutes with the steady
//! workload, then the quiet period and the fleet invariants; the seed is
//! fixed, so its fault schedule (and digest) is the same on every run.
//! `cargo xtask chaos` runs the same thing at any size.

use std::time::Duration;

use daemon_harness::prereq;
use devstack::chaos::{self, ChaosSpec, Level};

use crate::common;

#[tokio::test(flavor = "multi_thread")]
async fn a_light_chaos_run_of_sixteen_nodes_keeps_every_invariant() {
    let name = "a_light_chaos_run_of_sixteen_nodes_keeps_every_invariant";
    if !prereq::require_go(name) {
        return;
    }
    let bcd = common::bcd().expect("bcd builds");
    let dir = tempfile::tempdir().unwrap();
    let spec = ChaosSpec {
        seed: "ci".into(),
        nodes: 16,
        duration: Duration::from_secs(120),
        settle: Duration::from_secs(120),
        level: Level::Light,
        log: Some(dir.path().join("events.jsonl")),
        gateways: 1,
        gateway_exe: None,
    };
    let started = std::time::Instant::now();
    let report = match chaos::run(&spec, &bcd, dir.path(), &mut |line| eprintln!("{name}: {line}")).await {
        Ok(report) => report,
        Err(e) => panic!("{name}: {e} (the run is kept in {})", dir.keep().display()),
    };
    eprintln!("{}", serde_json::to_string_pretty(&report).unwrap());
    assert_eq!(report.schedule_digest, "07cc770bf6131f3ea87a885d8220c4349ce4b03320d59a29a5eb4938be8b1cb3");
    assert!(report.faults.values().sum::<u64>() > 0, "light chaos drew no fault");
    assert!(report.commands.total > 100 && report.workload.bookings > 20, "the workload ran: {:?}", report.workload);
    if !(report.settled && report.passed()) {
        // The store, the agents, bcd sim's log and the event log, for whoever debugs it.
        eprintln!("{name}: the run is kept in {}", dir.keep().display());
    }
    assert!(report.settled, "the fleet settled: {} command(s) open", report.commands.open);
    assert!(report.passed(), "{} violation(s), the first: {:#?}", report.violations, report.first_violations);
    eprintln!("scenario {name}: {:.2?}", started.elapsed());
}
