//! Benchmarks run by `cargo xtask bench …` (ignored in the normal suite):
//! the time from `bcd node` start to adopted, over `BCD_BENCH_RUNS` runs
//! (default 10), median printed.

use std::time::{Duration, Instant};

use crate::common::{DEADLINE, Env};

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench adoption"]
async fn bench_time_from_node_start_to_adopted() {
    let runs: usize = std::env::var("BCD_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let Some(env) = Env::start("bench_time_from_node_start_to_adopted").await else { return };
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut times: Vec<Duration> = Vec::new();
    for i in 0..runs {
        let mut node = env.must_make_node(&format!("bench-{i}"), "hgx-h100").await;
        let id = env.must_join(&node, &pool).await;
        let started = Instant::now();
        node.start().unwrap();
        env.stack.await_adopted(&id, DEADLINE).await.unwrap();
        let took = started.elapsed();
        node.stop().await;
        println!("run {}: bcd node start to adopted in {took:.1?}", i + 1);
        times.push(took);
    }
    times.sort();
    println!("bcd node start to adopted: median {:.1?} over {runs} runs", times[times.len() / 2]);
}
