//! Signed intent end to end (issue 5 item 2): destructive commands run only in
//! a batch the approvers signed (BATCH_UNAPPROVED) or within the unbatched
//! allowance (UNBATCHED_LIMIT), and a trust-bundle rotation is taken only when
//! the current approvers signed it (otherwise logged `trust.ignored`).

use std::time::Duration;

use devstack::{BatchCommand, BatchSpec, CommandOptions, CommandStatus, SpecUpdate};
use serde_json::json;

use crate::common::{DEADLINE, Env, execution_count};

#[tokio::test(flavor = "multi_thread")]
async fn destructive_commands_run_only_in_an_approved_batch_or_within_the_allowance() {
    let Some(env) = Env::start("destructive_commands_run_only_in_an_approved_batch_or_within_the_allowance").await
    else {
        return;
    };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("guarded", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let batch = |approvals| BatchSpec {
        commands: vec![BatchCommand {
            node_id: id.clone(),
            kind: "logs.collect".into(),
            params: json!({}),
            retry_safe: true,
        }],
        approvals,
        not_after: None,
    };

    let under = env.stack.enqueue_batch(batch(1)).await.unwrap();
    let outcome = env.stack.await_command(&under.command_ids[0], DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Failed, "{outcome:?}");
    assert!(outcome.reason.starts_with("BATCH_UNAPPROVED"), "{outcome:?}");
    assert_eq!(execution_count(&node, &under.command_ids[0]), 0);

    let approved = env.stack.enqueue_batch(batch(2)).await.unwrap();
    let outcome = env.stack.await_command(&approved.command_ids[0], DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    assert_eq!(execution_count(&node, &approved.command_ids[0]), 1);

    // The trust bundle allows two unbatched destructive commands an hour.
    let destructive = CommandOptions { destructive: true, retry_safe: true, ..Default::default() };
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({}), destructive.clone()).await.unwrap();
        outcomes.push((env.stack.await_command(&cmd, DEADLINE).await.unwrap(), execution_count(&node, &cmd)));
    }
    assert_eq!(outcomes[0].0.state, CommandStatus::Succeeded, "{outcomes:?}");
    assert_eq!(outcomes[1].0.state, CommandStatus::Succeeded, "{outcomes:?}");
    assert_eq!(outcomes[2].0.state, CommandStatus::Failed, "{outcomes:?}");
    assert!(outcomes[2].0.reason.starts_with("UNBATCHED_LIMIT"), "{outcomes:?}");
    assert_eq!(outcomes[2].1, 0, "the refused command never ran");
    node.stop().await;
    env.report();
}

/// Publishes `update` to the node and waits until the stack saw the node
/// apply it: bcd decides on a spec's trust bundle (and logs `trust.rotated`
/// or `trust.ignored`) before it records the generation as applied.
async fn must_publish_and_apply(env: &Env, id: &str, update: SpecUpdate) {
    let generation = env.stack.publish_spec(id, update).await.unwrap();
    env.stack.await_node(id, |n| n.applied_generation >= generation, DEADLINE).await.unwrap();
}

/// Waits until the node's captured log has a line containing `needle`.
/// bcd wrote it before the stack saw the spec applied, so this waits only
/// for the harness to read bcd's output pipe, which has no change
/// notification to await: a short poll with a deadline.
async fn await_log(node: &daemon_harness::node::Node, needle: &str) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !node.logs().contains(needle) {
        assert!(tokio::time::Instant::now() < deadline, "no log line with {needle:?}:\n{}", node.logs().text());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trust_rotation_is_taken_only_from_the_current_approvers() {
    let Some(env) = Env::start("a_trust_rotation_is_taken_only_from_the_current_approvers").await else { return };
    let pool = env.must_create_pool("any", None).await;
    let mut node = env.must_make_node("rotated", "cpu").await;
    let id = env.must_join_and_adopt(&mut node, &pool).await;
    let next = env.stack.next_trust_bundle().unwrap();

    let weak = env.stack.sign_trust_bundle(&next, 1).unwrap();
    must_publish_and_apply(&env, &id, SpecUpdate { trust_bundle: Some(weak), ..Default::default() }).await;
    await_log(&node, "trust.ignored").await;
    assert!(!node.logs().contains("trust.rotated"), "a rotation signed by one approver is not taken");

    let strong = env.stack.sign_trust_bundle(&next, 2).unwrap();
    must_publish_and_apply(&env, &id, SpecUpdate { trust_bundle: Some(strong), ..Default::default() }).await;
    await_log(&node, "trust.rotated").await;
    // Commands signed by the stack's root still run under the rotated bundle.
    let cmd = env.stack.enqueue_command(&id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
    assert_eq!(env.stack.await_command(&cmd, DEADLINE).await.unwrap().state, CommandStatus::Succeeded);
    node.stop().await;
    env.report();
}
