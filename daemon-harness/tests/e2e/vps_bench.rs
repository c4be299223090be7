//! VPS benchmarks run by `cargo xtask bench vps` (ignored in the normal
//! suite): the time from `create_instance` to `running` and from
//! `delete_instance` to `deleted`, medians over `BCD_BENCH_RUNS` runs
//! (default 10), on one fakehw host; and the time until 50 instances
//! placed on 5 `bcd sim` hosts all run.

use std::time::{Duration, Instant};

use devstack::InstanceState;

use crate::common::{DEADLINE, Env};
use crate::vps::{must_create_vps_pool, request};

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench vps"]
async fn bench_instance_create_to_running_and_delete_to_deleted() {
    let runs: usize = std::env::var("BCD_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let Some(env) = Env::start("bench_instance_create_to_running_and_delete_to_deleted").await else { return };
    let pool = must_create_vps_pool(&env, "vps").await;
    let mut node = env.must_make_node("host", "cpu").await;
    env.must_join_and_adopt(&mut node, &pool).await;
    let (mut up, mut down) = (Vec::new(), Vec::new());
    for i in 0..runs {
        let started = Instant::now();
        let id = env.stack.create_instance(&pool, request(2, 2)).await.unwrap();
        env.stack.await_instance_state(&id, InstanceState::Running, DEADLINE).await.unwrap();
        let running = started.elapsed();
        let started = Instant::now();
        env.stack.delete_instance(&id).await.unwrap();
        env.stack.await_instance_state(&id, InstanceState::Deleted, DEADLINE).await.unwrap();
        let deleted = started.elapsed();
        println!("run {}: create_instance to running {running:.1?}, delete_instance to deleted {deleted:.1?}", i + 1);
        up.push(running);
        down.push(deleted);
    }
    println!("create_instance to running: median {:.1?} over {runs} runs", median(up));
    println!("delete_instance to deleted: median {:.1?} over {runs} runs", median(down));
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench vps"]
async fn bench_fifty_instances_on_five_sim_hosts() {
    let Some(env) = Env::start("bench_fifty_instances_on_five_sim_hosts").await else { return };
    let pool = must_create_vps_pool(&env, "vps").await;
    let node = env.must_make_node("sim", "cpu").await;
    let token = env.must_mint_token(&pool, 5).await;
    let mark = env.stack.join_mark().unwrap();
    let config = node.config().to_string_lossy().into_owned();
    let sim = node.spawn(&["sim", "--config", &config, "--nodes", "5", "--seed", "300"], Some(&token)).await.unwrap();
    let hosts = env
        .stack
        .await_until("five adopted hosts", DEADLINE, |v| {
            let nodes = v.nodes_joined_since(mark);
            let adopted = nodes.iter().filter(|n| n.state == devstack::NodeState::Adopted).count();
            v.note(format_args!("{adopted} adopted"));
            (adopted == 5).then_some(nodes)
        })
        .await
        .unwrap();
    for h in &hosts {
        env.stack
            .await_until("the host's driver label and inventory", DEADLINE, |v| {
                (!v.node_labels(&h.id).is_empty() && !v.inventory(&h.id).is_empty()).then_some(())
            })
            .await
            .unwrap();
    }
    let started = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..50 {
        ids.push(env.stack.create_instance(&pool, request(2, 4)).await.unwrap());
    }
    let placed = started.elapsed();
    env.stack
        .await_until("50 instances running", Duration::from_secs(120), |v| {
            let running =
                ids.iter().filter(|id| v.instance(id).is_some_and(|r| r.state == InstanceState::Running)).count();
            v.note(format_args!("{running} running"));
            (running == ids.len()).then_some(())
        })
        .await
        .unwrap();
    let all = started.elapsed();
    let per_host = env
        .stack
        .view(|v| {
            let mut counts = std::collections::BTreeMap::new();
            for id in &ids {
                *counts.entry(v.instance(id).and_then(|r| r.node_id).unwrap_or_default()).or_insert(0) += 1;
            }
            counts.into_values().collect::<Vec<u32>>()
        })
        .unwrap();
    println!(
        "50 instances on 5 bcd sim hosts: all placed in {placed:.1?}, all running in {all:.1?} (per host {per_host:?})"
    );
    assert_eq!(sim.stop().await, Some(0));
}
