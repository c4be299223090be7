//! Benchmarks run by `cargo xtask bench …` (ignored in the normal suite):
//! the time from `bcd node` start to adopted, over `BCD_BENCH_RUNS` runs
//! (default 10), median printed; and the transports side by side (`cargo
//! xtask bench transports`): session setup (a Drain with `retry_after_ms`
//! 0 to the next session's Welcome) and a command's round trip (enqueued
//! to its verified result) over gRPC and over the WebSocket, in one run.

use std::time::{Duration, Instant};

use devstack::{CommandOptions, CommandStatus, Transport};
use proto::gateway_frame::Frame as Out;

use crate::common::{DEADLINE, Env, Transports};

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

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Session setups and command round trips of `runs` each over `transport`.
async fn measure(env: &Env, id: &str, transport: Transport, runs: usize) -> (Duration, Duration) {
    let mut epoch = env.await_transport(id, transport, 1).await;
    let (mut setups, mut trips) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let drain = proto::Drain { reason: "bench".into(), retry_after_ms: 0 };
        let started = Instant::now();
        env.stack.send_raw(id, proto::GatewayFrame { seq: 0, frame: Some(Out::Drain(drain)) }).await.unwrap();
        epoch = env.await_transport(id, transport, epoch + 1).await;
        setups.push(started.elapsed());
    }
    for _ in 0..runs {
        let started = Instant::now();
        let cmd = env.stack.enqueue_command(id, "diag.nvml", serde_json::json!({}), CommandOptions::default()).await;
        let outcome = env.stack.await_command(&cmd.unwrap(), DEADLINE).await.unwrap();
        trips.push(started.elapsed());
        assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    }
    (median(setups), median(trips))
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench transports"]
async fn bench_transports() {
    let runs: usize = std::env::var("BCD_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let Some(env) = Env::start("bench_transports").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("bench-transports", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let (grpc_setup, grpc_trip) = measure(&env, &id, Transport::Grpc, runs).await;
    node.stop().await;
    env.must_use_websocket(&node, Transports::WebSocketOnly);
    node.start().unwrap();
    let (ws_setup, ws_trip) = measure(&env, &id, Transport::WebSocket, runs).await;
    node.stop().await;
    let ratio = |ws: Duration, grpc: Duration| ws.as_secs_f64() / grpc.as_secs_f64();
    println!("transports, medians over {runs} runs each (heartbeat 500 ms, loopback):");
    println!("  {:<10} {:>14} {:>20}", "transport", "session setup", "command round trip");
    println!("  {:<10} {:>14.1?} {:>20.1?}", "grpc", grpc_setup, grpc_trip);
    println!("  {:<10} {:>14.1?} {:>20.1?}", "websocket", ws_setup, ws_trip);
    println!(
        "  websocket/grpc: session setup {:.2}, command round trip {:.2}",
        ratio(ws_setup, grpc_setup),
        ratio(ws_trip, grpc_trip)
    );
}
