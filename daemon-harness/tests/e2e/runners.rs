//! Runners agree (issue 7): the join, adoption and reboot scenarios under the
//! native and the netns runner give the same observable outcomes (node state,
//! command outcomes, boot ids changing, inventory), and the join scenario runs
//! through the real WSL runner code against the Linux `wsl.exe` shim.

use std::sync::Arc;

use daemon_harness::netns::NetnsRunner;
use daemon_harness::prereq;
use daemon_harness::runner::{Native, Runner};
use daemon_harness::wsl_runner::WslRunner;
use devstack::{CommandOptions, CommandStatus, NodeState};
use serde_json::{Value, json};

use crate::common::{DEADLINE, Env};

/// What a scenario observes, whatever runs bcd.
#[derive(Debug, PartialEq, Eq)]
struct Observed {
    node_state: NodeState,
    diag: (CommandStatus, Value),
    session_state: Value,
    inventory: Vec<(String, String)>,
    reboot: (CommandStatus, bool),
    boot_id_changed: bool,
}

/// Join, adoption and reboot of one hgx-h100 node under `runner`.
async fn observe(scenario: &str, runner: Arc<dyn Runner>) -> Observed {
    let env = Env::start_on(scenario, runner, |_| {}).await;
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut node = env.must_make_node("compared", "hgx-h100").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let row = env.stack.node(&id).unwrap().unwrap();
    let diag = env.stack.await_command(row.acceptance_command_id.as_deref().unwrap(), DEADLINE).await.unwrap();
    let status = node.await_status(DEADLINE, "connected", |s| s["session"]["state"] == "connected").await.unwrap();
    let mut inventory: Vec<(String, String)> =
        env.stack.inventory(&id).unwrap().into_iter().map(|r| (r.name, r.sha256)).collect();
    inventory.sort();

    let before = env.stack.await_session(&id, 1, DEADLINE).await.unwrap();
    let reboot = env.stack.enqueue_command(&id, "node.reboot", json!({}), CommandOptions::default()).await.unwrap();
    let rebooted = env.stack.await_command(&reboot, DEADLINE).await.unwrap();
    let after = env.stack.await_session(&id, before.epoch + 1, DEADLINE).await.unwrap();
    node.stop().await;
    env.report();
    Observed {
        node_state: env.stack.node(&id).unwrap().unwrap().state,
        diag: (diag.state, diag.output_json().unwrap_or_default()["gpus"].clone()),
        session_state: status["session"]["state"].clone(),
        inventory,
        reboot: (rebooted.state, rebooted.reason.contains("rebooted")),
        boot_id_changed: after.boot_id != before.boot_id,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn native_and_netns_agree_on_join_adoption_and_reboot() {
    let scenario = "native_and_netns_agree_on_join_adoption_and_reboot";
    if !prereq::require_go(scenario) || !prereq::require_netns(scenario) {
        return;
    }
    let native = observe(scenario, Arc::new(Native)).await;
    let netns = observe(scenario, Arc::new(NetnsRunner::new().unwrap())).await;
    assert_eq!(native.node_state, NodeState::Adopted);
    assert_eq!(native.diag, (CommandStatus::Succeeded, json!(8)));
    assert_eq!(native.reboot, (CommandStatus::Succeeded, true));
    assert!(native.boot_id_changed);
    assert_eq!(native, netns, "the runners disagree");
}

#[tokio::test(flavor = "multi_thread")]
async fn join_through_the_wsl_runner_and_its_shim() {
    let scenario = "join_through_the_wsl_runner_and_its_shim";
    if !prereq::require_go(scenario) || !prereq::require_netns(scenario) {
        return;
    }
    let runner = Arc::new(WslRunner::with_shim(None).unwrap());
    let env = Env::start_on(scenario, runner, |_| {}).await;
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut node = env.must_make_node("wsl", "hgx-h100").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let status = node.await_status(DEADLINE, "connected", |s| s["session"]["state"] == "connected").await.unwrap();
    assert_eq!(status["nodeId"], json!(id));
    node.stop().await;
    env.report();
}
