//! The real-guest benchmark, `cargo xtask bench vps --real` (ignored in
//! the normal suite): on bcd's host build in a VPS host of its own, the
//! time from `create_instance` to the guest having reached its metadata
//! endpoint (its console says it fetched its meta-data, user data and
//! token), and from `delete_instance` to `deleted`, medians over
//! `BCD_BENCH_RUNS` runs (default 5); then four guests created at once,
//! the time until all four reached theirs. The accelerator is named.

use std::time::{Duration, Instant};

use devstack::InstanceState;

use crate::common::DEADLINE;
use crate::guests::GuestWorld;

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench vps --real"]
async fn bench_real_guests_create_to_metadata_delete_to_gone_and_four_at_once() {
    let runs: usize = std::env::var("BCD_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(5);
    let Some(world) = GuestWorld::start("bench_real_guests").await else { return };
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let started = Instant::now();
        let id = world.env.stack.create_instance(&world.pool, world.request(256, b"#cloud-config\n")).await.unwrap();
        world.await_console(&id, "ready", |c| c.ready()).await;
        let reached = started.elapsed();
        let started = Instant::now();
        world.env.stack.delete_instance(&id).await.unwrap();
        world.env.stack.await_instance_state(&id, InstanceState::Deleted, DEADLINE).await.unwrap();
        let gone = started.elapsed();
        println!(
            "run {}: create_instance to metadata reached {reached:.1?}, delete_instance to deleted {gone:.1?}",
            i + 1
        );
        up.push(reached);
        down.push(gone);
    }
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(world.env.stack.create_instance(&world.pool, world.request(256, b"#cloud-config\n")).await.unwrap());
    }
    for id in &ids {
        world.await_console(id, "ready", |c| c.ready()).await;
    }
    let four = started.elapsed();
    for id in &ids {
        world.env.stack.delete_instance(id).await.unwrap();
    }
    for id in &ids {
        world.env.stack.await_instance_state(id, InstanceState::Deleted, DEADLINE).await.unwrap();
    }
    let accel = world.accel;
    println!("real guests ({accel}, 1 vCPU, 256 MiB, the cached busybox image):");
    println!("  create_instance to the guest reaching its metadata: median {:.1?} over {runs} runs", median(up));
    println!("  delete_instance to deleted: median {:.1?} over {runs} runs", median(down));
    println!("  four guests created at once, all reaching their metadata: {four:.1?}");
    world.stop().await;
}
