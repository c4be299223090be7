//! A stack restarted on the same SQLite file keeps its keys, pins, tokens,
//! nodes and open commands; connected nodes are drained and reconnect.

use devstack::{CommandStatus, DevStack, DevStackOptions, NodeState};
use proto::gateway_frame::Frame as Out;

use crate::node::{TestNode, WAIT, diag_output};
use crate::stack_with_pool;

#[tokio::test]
async fn a_restart_on_the_same_file_keeps_keys_nodes_and_commands() {
    let dir = tempfile::tempdir().unwrap();
    let options = DevStackOptions { signed_intent: true, ..DevStackOptions::file(dir.path().join("stack.sqlite")) };
    let (stack, pool, token) = stack_with_pool(options, Some(2)).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (diag, _) = session.expect_command().await;
    session.complete(&diag, &diag_output(2)).await;
    session.expect_desired_state().await;
    session.heartbeat(1).await;
    stack.await_adopted(&node.id, WAIT).await.unwrap();
    let open =
        stack.enqueue_command(&node.id, "logs.collect", serde_json::json!({}), Default::default()).await.unwrap();
    let (cmd, _) = session.expect_command().await;
    assert_eq!(cmd.id, open);
    let last_seq = session.last_seq();

    let pins = stack.pins();
    let bundle = stack.trust_bundle().unwrap().1;
    let restart = stack.restart_options();
    let url = stack.gateway_url().to_string();
    stack.shutdown().await.unwrap();
    let (end, frames) = session.until_end().await;
    assert!(end.is_ok(), "{end:?}");
    let drain = frames.iter().find_map(|f| match &f.frame {
        Some(Out::Drain(d)) => Some(d.clone()),
        _ => None,
    });
    assert_eq!(drain.expect("a Drain").retry_after_ms, 1000);

    let stack = DevStack::start(restart).await.unwrap();
    assert_eq!(stack.pins(), pins);
    assert_eq!(stack.gateway_url(), url);
    assert_eq!(stack.trust_bundle().unwrap().1, bundle);
    let row = stack.node(&node.id).unwrap().unwrap();
    assert_eq!((row.state, row.applied_generation), (NodeState::Adopted, 1));
    assert!(stack.node_sessions(&node.id).unwrap().iter().all(|s| s.disconnected_at_ms.is_some()));

    // The node reconnects with its certificate; the open command comes again.
    let mut session = node.connect(&stack, 1).await.unwrap();
    assert_eq!((session.welcome.session_epoch, session.welcome.acked_seq), (2, last_seq));
    let (spec, _) = session.expect_desired_state().await;
    assert_eq!(spec.generation, 1);
    let (again, _) = session.expect_command().await;
    assert_eq!(again.id, open);
    session.complete(&again, "{}").await;
    let outcome = stack.await_command(&open, WAIT).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded);
    assert_eq!(stack.command(&open).unwrap().unwrap().deliveries, 2);

    // The token minted before the restart still works.
    let second = TestNode::join(&stack, &token).await.unwrap();
    assert_eq!(stack.node(&second.id).unwrap().unwrap().pool_id, pool);
    assert_eq!(stack.join_tokens(&pool).unwrap()[0].uses, 2);
    stack.shutdown().await.unwrap();
}
