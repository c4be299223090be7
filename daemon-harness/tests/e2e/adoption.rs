//! Adoption and the session: adopted after the node-signed diag.nvml,
//! `bcd status --json`, inventory.refresh, a machine with a GPU missing that
//! is never adopted, and a revoked node that cannot open a session.

use std::time::Duration;

use devstack::{CommandOptions, CommandStatus, NodeState};
use serde_json::json;

use crate::common::{DEADLINE, Env, SEED};

#[tokio::test(flavor = "multi_thread")]
async fn node_is_adopted_after_its_signed_diag_and_answers_status() {
    let Some(env) = Env::start("node_is_adopted_after_its_signed_diag_and_answers_status").await else { return };
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut node = env.must_make_node("adoptee", "hgx-h100").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;

    let row = env.stack.node(&id).unwrap().unwrap();
    let diag_id = row.acceptance_command_id.expect("an acceptance command");
    let diag = env.stack.await_command(&diag_id, DEADLINE).await.unwrap();
    assert_eq!(diag.state, CommandStatus::Succeeded);
    let output = diag.output_json().expect("a verified, node-signed result");
    assert_eq!(output["gpus"], json!(8), "{output}");

    let status =
        node.await_status(DEADLINE, "a connected session", |s| s["session"]["state"] == "connected").await.unwrap();
    assert_eq!(status["nodeId"], json!(id));
    assert!(status["appliedGeneration"].as_u64().unwrap() >= 1, "{status}");
    let sessions = env.stack.node_sessions(&id).unwrap();
    assert!(!sessions.is_empty() && !sessions[0].boot_id.is_empty(), "{sessions:?}");
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn inventory_refresh_succeeds_with_the_golden_sections() {
    let Some(env) = Env::start("inventory_refresh_succeeds_with_the_golden_sections").await else { return };
    let pool = env.must_create_pool("l40s", Some(4)).await;
    let mut node = env.must_make_node("inventoried", "l40s").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;

    let cmd = env.stack.enqueue_command(&id, "inventory.refresh", json!({}), CommandOptions::default()).await.unwrap();
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");

    // The sections the stack stored are the golden bytes Go wrote for this seed.
    let golden = fixtures::read_json(&interop::testdata().join("daemon/inventory/hashes.json")).unwrap();
    assert_eq!(golden["seed"], json!(SEED));
    let variant = golden["variants"].as_array().unwrap().iter().find(|v| v["variant"] == "l40s").expect("l40s golden");
    let stored = env.stack.inventory(&id).unwrap();
    for section in variant["sections"].as_array().unwrap() {
        let name = section["name"].as_str().unwrap();
        let row = stored.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("section {name} stored"));
        assert_eq!(row.sha256, section["sha256"].as_str().unwrap(), "section {name}");
    }
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_with_a_gpu_missing_is_never_adopted() {
    let Some(env) = Env::start("a_node_with_a_gpu_missing_is_never_adopted").await else { return };
    let pool = env.must_create_pool("hgx", Some(8)).await;
    let mut node = env.must_make_node("short", "hgx-h100-gpu-missing").await;
    let id = env.must_join(&node, &pool).await;
    node.start().unwrap();
    let row = env.stack.await_node_state(&id, NodeState::Rejected, DEADLINE).await.unwrap();
    assert!(row.reason.contains("GpuCountMismatch"), "{row:?}");
    assert!(env.stack.await_adopted(&id, Duration::from_secs(1)).await.is_err(), "never adopted");
    assert_eq!(env.stack.node(&id).unwrap().unwrap().state, NodeState::Rejected);
    node.stop().await;
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_node_cannot_open_a_session() {
    let Some(env) = Env::start("a_revoked_node_cannot_open_a_session").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("revoked", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;

    env.stack.revoke_node(&id).await.unwrap();
    // The live session gets a RevocationNotice: bcd node exits 3 and is not restarted.
    let state =
        node.supervisor().unwrap().await_state(DEADLINE, "bcd to exit after revocation", |s| s.finished).await.unwrap();
    assert_eq!(state.exits.last().copied().flatten(), Some(3), "{state:?}");
    node.stop().await;

    // A new start cannot open a session either.
    let sessions_before = env.stack.node_sessions(&id).unwrap().len();
    let out = node.run(&["node", "--config", &node.config().to_string_lossy()], None, DEADLINE).await.unwrap();
    assert!(!out.success(), "{out:?}");
    assert!(format!("{}{}", out.stdout, out.stderr).contains("cert-revoked"), "{out:?}");
    assert_eq!(env.stack.node_sessions(&id).unwrap().len(), sessions_before, "no session was opened");
    env.report();
}
