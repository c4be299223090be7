//! The dev stack's scenario suite: a Rust node over real mTLS against an
//! in-process stack (no Go needed).

mod admin;
mod connections;
mod events;
mod gateways;
mod hardening;
mod instances;
mod intent;
mod join;
mod limits;
mod node;
mod releases;
mod reservations;
mod restart;
mod sections;
mod serve;
mod session;
mod telemetry;
mod tls;
mod tpm;
mod tunnels;
mod websocket;

use std::time::Duration;

use devstack::{DevStack, DevStackOptions, PoolSpec};

/// The captured logs of the test binary (every stack's).
pub use devstack::LogCapture as Logs;

/// A stack on an in-memory store with a pool expecting `gpus` GPUs and a
/// five-use token.
pub async fn stack_with_pool(options: DevStackOptions, gpus: Option<u32>) -> (DevStack, String, String) {
    let stack = DevStack::start(options).await.expect("start");
    let pool = stack
        .create_pool(PoolSpec { name: "gpu".into(), expect_gpu_count: gpus, ..PoolSpec::default() })
        .await
        .unwrap();
    let token = stack.mint_join_token(&pool, 5, Duration::from_secs(600)).await.unwrap();
    (stack, pool, token)
}

/// The API's futures are `Send`, so a harness can spawn them.
#[allow(dead_code)]
fn api_futures_are_send(stack: &DevStack) {
    fn send<T: Send>(_: T) {}
    let wait = Duration::from_secs(1);
    send(stack.await_command("cmd", wait));
    send(stack.await_node("node", |_| true, wait));
    send(stack.await_adopted("node", wait));
    send(stack.await_session("node", 1, wait));
    send(stack.enqueue_command("node", "diag.nvml", serde_json::json!({}), Default::default()));
    send(stack.revoke_node("node"));
    send(stack.reserve("node", 2));
    send(stack.release("rsv"));
    send(stack.await_reservation("rsv", devstack::ReservationState::Active, wait));
    send(stack.publish_release("0.9.0", 7, &[("linux", "amd64", b"bcd")]));
    send(stack.rollout_upgrade("node", "0.9.0"));
    send(stack.rollout_upgrade_with("node", "0.9.0", &devstack::ManifestOptions::default()));
    send(stack.await_daemon_version("node", "0.9.0", wait));
    send(stack.node_bindings("node"));
    send(stack.section_status("node", "instances"));
    send(stack.create_instance("pool", devstack::InstanceRequest::default()));
    send(stack.delete_instance("inst"));
    send(stack.await_instance_state("inst", devstack::InstanceState::Running, wait));
    send(stack.put_secret(b"s"));
    send(stack.create_volume("node", 1));
    send(stack.await_volume_state("vol", devstack::VolumeState::Ready, wait));
    send(stack.await_until("anything", wait, |v| v.section_status("node", "instances")));
    send(DevStack::start(DevStackOptions::memory()));
    send(stack.open_console("node", devstack::ConsoleSize::default()));
}

/// A console's halves can each be driven from its own task (a WebSocket
/// route's two pumps).
#[allow(dead_code)]
fn console_halves_are_send(console: devstack::Console) {
    fn send<T: Send + 'static>(_: T) {}
    let (writer, mut reader) = console.split();
    send(async move { writer.write("x").await });
    send(async move { reader.next().await });
}

/// The stack can be shared between tasks, and shut down from any of them.
#[allow(dead_code)]
fn the_stack_is_send_and_sync(stack: DevStack) {
    fn shared<T: Send + Sync>(_: &T) {}
    fn send<T: Send>(_: T) {}
    shared(&stack);
    send(stack.shutdown());
}
