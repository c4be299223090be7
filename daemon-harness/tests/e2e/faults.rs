//! Crash and restart faults (issue 5 item 4): bcd SIGKILLed while a command
//! runs and started again (a non-retry-safe command ends FAILED interrupted
//! and never runs twice; a retry-safe one runs exactly once more), and the
//! dev stack restarted on the same SQLite file while nodes are connected
//! (every node reconnects; no command is lost or doubled). fakehw's
//! execution counters under the fake root prove "never twice". And a lost
//! journal: a new journal id, and the in-flight command that is not
//! retry-safe fails `journal-lost` instead of running again.

use devstack::{CommandOptions, CommandOutcome, CommandStatus, StoreLocation};
use serde_json::json;

use crate::common::{DEADLINE, Env, await_command_state, execution_count};

/// How long the held commands of these scenarios run.
const HOLD_MS: u64 = 1_500;

/// Runs a held command, SIGKILLs bcd while it runs, and returns the outcome
/// once the supervisor started bcd again, with the execution count.
async fn kill_mid_command(env: &Env, retry_safe: bool) -> (CommandOutcome, u64) {
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("crashy", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let epoch = env.stack.await_session(&id, 1, DEADLINE).await.unwrap().epoch;

    let options = CommandOptions { retry_safe, ..Default::default() };
    let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({ "hold_ms": HOLD_MS }), options).await.unwrap();
    await_command_state(&env.stack, &cmd, CommandStatus::Running).await;
    assert_eq!(execution_count(&node, &cmd), 1);
    node.supervisor().unwrap().signal(libc::SIGKILL).unwrap();
    node.supervisor().unwrap().await_state(DEADLINE, "bcd to be started again", |s| s.starts >= 2).await.unwrap();
    env.stack.await_session(&id, epoch + 1, DEADLINE).await.unwrap();

    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    let count = execution_count(&node, &cmd);
    node.stop().await;
    (outcome, count)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_retry_safe_command_interrupted_by_a_crash_fails_and_never_runs_twice() {
    let Some(env) = Env::start("a_non_retry_safe_command_interrupted_by_a_crash_fails_and_never_runs_twice").await
    else {
        return;
    };
    let (outcome, count) = kill_mid_command(&env, false).await;
    assert_eq!(outcome.state, CommandStatus::Failed, "{outcome:?}");
    assert!(outcome.reason.contains("interrupted"), "{outcome:?}");
    assert_eq!(count, 1, "never runs twice");
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_safe_command_interrupted_by_a_crash_runs_exactly_once_more() {
    let Some(env) = Env::start("a_retry_safe_command_interrupted_by_a_crash_runs_exactly_once_more").await else {
        return;
    };
    let (outcome, count) = kill_mid_command(&env, true).await;
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    assert_eq!(count, 2, "exactly once more");
    env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dev_stack_restarts_on_its_file_and_no_command_is_lost_or_doubled() {
    let store = tempfile::tempdir().unwrap();
    let path = store.path().join("devstack.sqlite");
    let scenario = "the_dev_stack_restarts_on_its_file_and_no_command_is_lost_or_doubled";
    let Some(mut env) = Env::start_with(scenario, |o| o.store = StoreLocation::File(path.clone())).await else {
        return;
    };
    let pool = env.must_create_pool("any", None).await;
    let mut nodes = Vec::new();
    for name in ["first", "second"] {
        let mut node = env.must_make_node(name, "cpu").await;
        let id = env.must_join_and_adopt(&mut node, &pool).await;
        nodes.push((node, id));
    }

    // One command in flight on each node, and one queued behind it.
    let mut commands = Vec::new();
    for (_, id) in &nodes {
        let held = CommandOptions { retry_safe: false, ..Default::default() };
        let running = env.stack.enqueue_command(id, "logs.collect", json!({ "hold_ms": HOLD_MS }), held).await.unwrap();
        await_command_state(&env.stack, &running, CommandStatus::Running).await;
        let queued =
            env.stack.enqueue_command(id, "inventory.refresh", json!({}), CommandOptions::default()).await.unwrap();
        commands.push((id.clone(), running));
        commands.push((id.clone(), queued));
    }
    let epochs: Vec<u64> = nodes.iter().map(|(_, id)| env.stack.live_epoch(id).unwrap_or(0)).collect();

    env.restart_stack().await;

    for ((_, id), epoch) in nodes.iter().zip(epochs) {
        env.stack.await_session(id, epoch + 1, DEADLINE).await.expect("the node reconnects");
    }
    // A command enqueued after the restart is delivered too.
    for (_, id) in &nodes {
        let after = env.stack.enqueue_command(id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
        commands.push((id.clone(), after));
    }
    for (node_id, cmd) in &commands {
        let outcome = env.stack.await_command(cmd, DEADLINE).await.unwrap();
        assert_eq!(outcome.state, CommandStatus::Succeeded, "{cmd} on {node_id}: {outcome:?}");
        let (node, _) = nodes.iter().find(|(_, id)| id == node_id).unwrap();
        assert_eq!(execution_count(node, cmd), 1, "{cmd} ran exactly once");
    }
    for (node, _) in &mut nodes {
        node.stop().await;
    }
    env.report();
}

/// A lost journal (issue 16, "Faults end to end"): the journal file deleted
/// while bcd is stopped with a command running. bcd starts a new journal
/// (a new id), and the stack, seeing another journal in the Hello, fails
/// the in-flight command that is not retry-safe `journal-lost` instead of
/// delivering it again: it ran once and never twice (I2, by fakehw's
/// execution counter); a command enqueued afterwards runs once.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_journal_gets_a_new_id_and_its_in_flight_command_fails_instead_of_running_again() {
    let scenario = "a_lost_journal_gets_a_new_id_and_its_in_flight_command_fails_instead_of_running_again";
    let Some(env) = Env::start(scenario).await else {
        return;
    };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("forgetful", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let journal = |s: &serde_json::Value| s["journalId"].as_str().unwrap_or_default().to_string();
    let before = journal(&node.status().await.unwrap());
    assert!(!before.is_empty());
    let epoch = env.stack.await_session(&id, 1, DEADLINE).await.unwrap().epoch;

    // Held long enough that the stop cuts it off (it stays running in the
    // journal that is then lost).
    let once = CommandOptions { retry_safe: false, ..Default::default() };
    let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({ "hold_ms": 60_000 }), once).await.unwrap();
    await_command_state(&env.stack, &cmd, CommandStatus::Running).await;
    assert_eq!(execution_count(&node, &cmd), 1);
    node.stop().await;
    let data = node.data_dir();
    assert!(data.join("journal.db").exists(), "no journal at {}", data.display());
    for file in ["journal.db", "journal.db-wal", "journal.db-shm"] {
        let _ = std::fs::remove_file(data.join(file));
    }
    node.start().unwrap();
    env.stack.await_session(&id, epoch + 1, DEADLINE).await.expect("the node reconnects");
    let after =
        node.await_status(DEADLINE, "a new journal", |s| !journal(s).is_empty() && journal(s) != before).await.unwrap();
    assert_ne!(journal(&after), before);

    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Failed, "{outcome:?}");
    assert!(outcome.reason.starts_with("journal-lost: "), "{outcome:?}");
    let next = env.stack.enqueue_command(&id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
    assert_eq!(env.stack.await_command(&next, DEADLINE).await.unwrap().state, CommandStatus::Succeeded);
    assert_eq!(execution_count(&node, &next), 1);
    assert_eq!(execution_count(&node, &cmd), 1, "the command from before the loss never ran again");
    node.stop().await;
    env.report();
}

/// The gateway killed while a command runs (issue 16, "Faults end to end"):
/// the dev stack dropped without a Drain while a held command runs on a
/// node, and started again on its file. The node reconnects, the command
/// ends exactly once (its result reaches the new stack) and ran once, and a
/// command enqueued afterwards runs once too (I2).
#[tokio::test(flavor = "multi_thread")]
async fn the_gateway_killed_while_a_command_runs_and_restarted_ends_it_exactly_once() {
    let store = tempfile::tempdir().unwrap();
    let path = store.path().join("devstack.sqlite");
    let scenario = "the_gateway_killed_while_a_command_runs_and_restarted_ends_it_exactly_once";
    let Some(mut env) = Env::start_with(scenario, |o| o.store = StoreLocation::File(path.clone())).await else {
        return;
    };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("steady", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let epoch = env.stack.await_session(&id, 1, DEADLINE).await.unwrap().epoch;
    let held = CommandOptions { retry_safe: false, ..Default::default() };
    let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({ "hold_ms": HOLD_MS }), held).await.unwrap();
    await_command_state(&env.stack, &cmd, CommandStatus::Running).await;

    env.kill_and_restart_stack().await;

    env.stack.await_session(&id, epoch + 1, DEADLINE).await.expect("the node reconnects");
    let outcome = env.stack.await_command(&cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    let updates = env.stack.command_updates(&cmd).unwrap();
    let terminal = updates.iter().filter(|u| u.state.is_terminal()).count();
    assert_eq!(terminal, 1, "one terminal update recorded: {updates:?}");
    let next = env.stack.enqueue_command(&id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
    assert_eq!(env.stack.await_command(&next, DEADLINE).await.unwrap().state, CommandStatus::Succeeded);
    assert_eq!(execution_count(&node, &cmd), 1, "ran once");
    assert_eq!(execution_count(&node, &next), 1, "ran once");
    node.stop().await;
    env.report();
}

/// A network partition (issue 16, "Faults end to end"): under the netns
/// runner, the link goes down while a held command runs and stays down
/// after it ended on the node, longer than the liveness timeout (the stack
/// drops the node's session: it is unreachable); the link comes back, the
/// node reconnects, and the command ends exactly once (its journaled result
/// reaches the stack once, it ran once, I2), as does one enqueued during
/// the partition.
#[tokio::test(flavor = "multi_thread")]
async fn a_partition_longer_than_the_liveness_timeout_heals_and_every_command_ends_once() {
    let scenario = "a_partition_longer_than_the_liveness_timeout_heals_and_every_command_ends_once";
    if !daemon_harness::prereq::require_go(scenario) || !daemon_harness::prereq::require_netns(scenario) {
        return;
    }
    let runner = std::sync::Arc::new(daemon_harness::netns::NetnsRunner::new().unwrap());
    // Liveness is three intervals: 0.9 s.
    let env = Env::start_on(scenario, runner.clone(), |o| o.heartbeat_interval_ms = 300).await;
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("partitioned", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let epoch = env.stack.await_session(&id, 1, DEADLINE).await.unwrap().epoch;
    let held = CommandOptions { retry_safe: false, ..Default::default() };
    let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({ "hold_ms": 500 }), held).await.unwrap();
    await_command_state(&env.stack, &cmd, CommandStatus::Running).await;

    runner.netns().set_link(false).unwrap();
    let down_at = tokio::time::Instant::now();
    // Unreachable: the stack ends the session (its liveness, or the
    // unreachable route).
    env.stack
        .await_until("the partitioned node's session to end", DEADLINE, |v| v.live_session(&id).is_none().then_some(()))
        .await
        .unwrap();
    let during = env.stack.enqueue_command(&id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
    // The command ran to its end on the node meanwhile (its counter says it
    // started; its result waits in bcd's journal).
    assert_eq!(execution_count(&node, &cmd), 1);
    assert!(!env.stack.command(&cmd).unwrap().unwrap().state.is_terminal(), "no result crossed the partition");
    // bcd's side (its status socket is local): the session is down and the
    // command ended there, its result journaled.
    node.await_status(DEADLINE, "the command to end behind the partition", |s| {
        s["session"]["state"] != "connected" && s["commands"]["running"] == 0
    })
    .await
    .unwrap();
    // The partition lasts longer than the liveness timeout (three
    // heartbeat intervals) whatever noticed it first.
    tokio::time::sleep_until(down_at + std::time::Duration::from_millis(3 * 300 + 300)).await;
    assert!(!env.stack.command(&cmd).unwrap().unwrap().state.is_terminal(), "no result crossed the partition");
    runner.netns().set_link(true).unwrap();

    env.stack.await_session(&id, epoch + 1, DEADLINE).await.expect("the node comes back");
    for c in [&cmd, &during] {
        let outcome = env.stack.await_command(c, DEADLINE).await.unwrap();
        assert_eq!(outcome.state, CommandStatus::Succeeded, "{c}: {outcome:?}");
        let updates = env.stack.command_updates(c).unwrap();
        assert_eq!(updates.iter().filter(|u| u.state.is_terminal()).count(), 1, "{c} ended once: {updates:?}");
        assert_eq!(execution_count(&node, c), 1, "{c} ran once");
    }
    node.stop().await;
    env.report();
}
