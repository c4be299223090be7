//! The session contract: events, deliveries, results, inventory, refusals.

use std::time::Duration;

use devstack::{CommandOptions, CommandStatus, DevStackOptions};
use proto::CommandState;
use proto::gateway_frame::Frame as Out;
use proto::node_frame::Frame as In;
use sha2::{Digest, Sha256};
use tonic::Code;

use crate::node::{Session, TestNode, WAIT, control, diag_output};
use crate::stack_with_pool;

fn code(status: &tonic::Status) -> (Code, &str) {
    (status.code(), devstack::status::code_of(status))
}

#[tokio::test]
async fn events_are_recorded_once_and_acked_across_sessions() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (cmd, _) = session.expect_command().await;
    let accepted = Session::update(&cmd.id, CommandState::Accepted, None);
    let seq = session.send_event(accepted.clone()).await;
    session.await_ack(seq).await;
    session.resend_event(seq, accepted).await;
    let seq2 = session.complete(&cmd, &diag_output(2)).await;
    assert_eq!(session.acked, seq2);
    let history = stack.command_updates(&cmd.id).unwrap();
    assert_eq!(history.iter().filter(|u| u.state == CommandStatus::Accepted).count(), 2, "{history:?}");
    // complete() sent its own ACCEPTED: two distinct events, the duplicate not recorded.
    assert_eq!(history.len(), 4);
    drop(session);

    // A new session: epoch 2, the journal's acked seq, no re-delivery of a done command.
    stack.await_node(&node.id, |n| n.state == devstack::NodeState::Adopted, WAIT).await.unwrap();
    let mut again = node.connect(&stack, 1).await.unwrap();
    assert_eq!((again.welcome.session_epoch, again.welcome.acked_seq), (2, seq2));
    let (spec, _) = again.expect_desired_state().await;
    assert_eq!(spec.generation, 1);
    let sessions = stack.node_sessions(&node.id).unwrap();
    assert_eq!(sessions.len(), 2);
    stack.await_adopted(&node.id, WAIT).await.unwrap();
    stack.shutdown().await.unwrap();
}

/// bcd answers a delivery that crossed its result with the stored result,
/// a new event: the history ends at the outcome, which stays as it was.
#[tokio::test]
async fn an_update_after_the_outcome_is_not_recorded() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (cmd, _) = session.expect_command().await;
    session.complete(&cmd, &diag_output(8)).await;
    let stored = session.signed_result(&node.key, &cmd, CommandState::Succeeded, "", &diag_output(8));
    let again = session.send_event(Session::update(&cmd.id, CommandState::Succeeded, Some(stored))).await;
    let failed = session.send_event(Session::update(&cmd.id, CommandState::Failed, None)).await;
    session.await_ack(failed.max(again)).await;
    let history: Vec<_> = stack.command_updates(&cmd.id).unwrap().into_iter().map(|u| u.state).collect();
    assert_eq!(history, [CommandStatus::Accepted, CommandStatus::Running, CommandStatus::Succeeded]);
    let outcome = stack.await_command(&cmd.id, WAIT).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_busy_command_is_delivered_again() {
    let options = DevStackOptions { busy_retry_ms: 50, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (diag, _) = session.expect_command().await;
    let seq = session.send_event(Session::update(&diag.id, CommandState::Busy, None)).await;
    session.await_ack(seq).await;
    let (again, _) = session.expect_command().await;
    assert_eq!(again.id, diag.id);
    session.complete(&again, &diag_output(1)).await;
    let row = stack.command(&diag.id).unwrap().unwrap();
    assert_eq!((row.state, row.deliveries), (CommandStatus::Succeeded, 2));
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_result_signed_by_another_key_is_refused() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (cmd, _) = session.expect_command().await;
    let forged = session.signed_result(&pki::keys::random_p256(), &cmd, CommandState::Succeeded, "", &diag_output(8));
    let seq = session.send_event(Session::update(&cmd.id, CommandState::Succeeded, Some(forged))).await;
    session.await_ack(seq).await;
    let outcome = stack.await_command(&cmd.id, WAIT).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Failed);
    assert!(outcome.reason.starts_with("result-unverified: dsse-unknown-key"), "{}", outcome.reason);
    assert!(outcome.output.is_empty());
    let err = stack.await_adopted(&node.id, WAIT).await.unwrap_err();
    assert!(matches!(err, devstack::Error::Rejected { .. }), "{err}");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn inventory_sections_are_stored_only_with_their_hash() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let system = prost::Message::encode_to_vec(&proto::SystemInventory { hostname: "h".into(), ..Default::default() });
    let network = b"network bytes".to_vec();
    let section = |name: &str, content: &[u8], sha256: String| proto::InventorySection {
        name: name.into(),
        content: content.to_vec(),
        sha256,
    };
    let report = proto::StatusReport {
        inventory: vec![
            section("system", &system, hex::encode(Sha256::digest(&system))),
            section("network", &network, hex::encode(Sha256::digest(b"other bytes"))),
        ],
        applied_generation: 0,
        ..Default::default()
    };
    let seq = session.send_event(In::StatusReport(report)).await;
    session.await_ack(seq).await;
    let stored = stack.inventory(&node.id).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!((stored[0].name.as_str(), stored[0].content.as_slice()), ("system", system.as_slice()));
    assert_eq!(stored[0].sha256, hex::encode(Sha256::digest(&system)));
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_revoked_node_is_told_and_then_refused() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    stack.await_session(&node.id, 1, WAIT).await.unwrap();
    stack.revoke_node(&node.id).await.unwrap();
    let (end, frames) = session.until_end().await;
    assert!(end.is_ok(), "{end:?}");
    assert!(frames.iter().any(|f| matches!(f.frame, Some(Out::RevocationNotice(_)))), "{frames:?}");
    let err = node.connect(&stack, 0).await.err().expect("a refusal");
    assert_eq!(code(&err), (Code::PermissionDenied, "cert-revoked"));
    assert!(stack.node_certs(&node.id).unwrap()[0].revoked_at_ms.is_some());
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn sessions_refuse_a_missing_certificate_a_missing_hello_and_another_node() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let other = TestNode::join(&stack, &token).await.unwrap();

    let err = Session::open(&stack, None, node.hello(0)).await.err().expect("a refusal");
    assert_eq!(code(&err), (Code::Unauthenticated, "cert-unknown"));

    let heartbeat = control(In::Heartbeat(proto::Heartbeat::default()));
    let mut s = Session::open(&stack, Some(node.cert.clone()), heartbeat).await.unwrap();
    let (end, _) = s.until_end().await;
    assert_eq!(code(&end.unwrap_err()), (Code::InvalidArgument, "hello-expected"));

    let mut s = Session::open(&stack, Some(node.cert.clone()), other.hello(0)).await.unwrap();
    let (end, _) = s.until_end().await;
    assert_eq!(code(&end.unwrap_err()), (Code::PermissionDenied, "node-mismatch"));

    assert!(stack.node_sessions(&node.id).unwrap().is_empty());
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn an_oversized_frame_ends_the_session_with_frame_too_large() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let content = vec![7u8; devstack::MAX_MESSAGE_BYTES + 1];
    let section =
        proto::InventorySection { name: "system".into(), sha256: hex::encode(Sha256::digest(&content)), content };
    session.send_event(In::StatusReport(proto::StatusReport { inventory: vec![section], ..Default::default() })).await;
    let (end, _) = session.until_end().await;
    assert_eq!(code(&end.unwrap_err()), (Code::InvalidArgument, "frame-too-large"));
    assert!(stack.inventory(&node.id).unwrap().is_empty());
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn pings_flow_and_a_silent_node_is_dropped_after_three_intervals() {
    let options = DevStackOptions { heartbeat_interval_ms: 100, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    assert_eq!(session.welcome.heartbeat_interval_ms, 100);
    // Heartbeats keep the session alive past three intervals, and pings flow.
    let pings = session.keep_alive(Duration::from_millis(450)).await;
    assert!(pings >= 2, "{pings} pings");
    assert!(stack.live_epoch(&node.id).is_some());
    // Silence: the gateway drops the stream.
    let (end, _) = session.until_end().await;
    assert_eq!(end.unwrap_err().code(), Code::Unavailable);
    stack.await_node(&node.id, |_| true, WAIT).await.unwrap();
    let sessions = stack.node_sessions(&node.id).unwrap();
    assert!(sessions[0].disconnected_at_ms.is_some());
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn commands_carry_their_options() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (diag, _) = session.expect_command().await;
    let not_after = std::time::SystemTime::now() + Duration::from_secs(60);
    let opts = CommandOptions {
        retry_safe: false,
        destructive: true,
        batch: Some("batch-1".into()),
        not_after: Some(not_after),
        min_generation: 3,
        ..CommandOptions::default()
    };
    let id = stack.enqueue_command(&node.id, "node.reboot", serde_json::json!({"why": "test"}), opts).await.unwrap();
    let (cmd, _) = session.expect_command().await;
    assert_ne!(cmd.id, diag.id);
    assert_eq!(cmd.id, id);
    assert_eq!((cmd.destructive, cmd.retry_safe, cmd.batch.as_str(), cmd.min_generation), (true, false, "batch-1", 3));
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&cmd.params).unwrap()["why"], "test");
    assert!((cmd.not_after_ms - devstack_now(not_after)).abs() < 1000);
    let seq = session.send_event(Session::update(&cmd.id, CommandState::Expired, None)).await;
    session.await_ack(seq).await;
    assert_eq!(stack.await_command(&id, WAIT).await.unwrap().state, CommandStatus::Expired);
    stack.shutdown().await.unwrap();
}

fn devstack_now(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn a_node_renews_its_certificate_over_mtls() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    let (key, csr, pin) = crate::node::key_and_csr();
    let request = proto::RenewRequest { csr_der: csr.clone(), node_key: None };

    let anonymous = crate::node::channel(&stack, None).await.unwrap();
    let err = proto::gateway_client::GatewayClient::new(anonymous).renew(request.clone()).await.unwrap_err();
    assert_eq!(code(&err), (Code::Unauthenticated, "cert-unknown"));

    let channel = crate::node::channel(&stack, Some(node.cert.clone())).await.unwrap();
    let reply = proto::gateway_client::GatewayClient::new(channel).renew(request).await.unwrap().into_inner();
    let env = pki::dsse::Envelope::from_proto(&reply.response.unwrap());
    let response = pki::join::verify_response(&env, &stack.join_signing_key(), &pin).unwrap();
    assert_eq!(response.node_id, node.id);
    assert_ne!(response.certificate_chain[0], node.cert.chain[0]);
    assert_eq!(stack.node_certs(&node.id).unwrap().len(), 2);

    let renewed = node.renewed(key, response.certificate_chain);
    let session = renewed.connect(&stack, 0).await.unwrap();
    assert_eq!(session.welcome.session_epoch, 1);
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn racing_first_sessions_enqueue_one_acceptance_check() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    for _ in 0..5 {
        let node = TestNode::join(&stack, &token).await.unwrap();
        let (a, b, c) = tokio::join!(node.connect(&stack, 0), node.connect(&stack, 0), node.connect(&stack, 0));
        let live: Vec<_> = [a, b, c].into_iter().filter_map(Result::ok).collect();
        assert!(!live.is_empty());
        stack.await_node_state(&node.id, devstack::NodeState::Accepting, crate::node::WAIT).await.unwrap();
        let diags: Vec<_> = stack.commands(&node.id).unwrap().into_iter().filter(|c| c.kind == "diag.nvml").collect();
        assert_eq!(diags.len(), 1, "{diags:?}");
        let row = stack.node(&node.id).unwrap().unwrap();
        assert_eq!(row.acceptance_command_id.as_deref(), Some(diags[0].id.as_str()));
    }
    stack.shutdown().await.unwrap();
}

/// A node back with another journal (its journal file lost) no longer
/// knows what it ran: a delivered command that is not retry-safe ends
/// FAILED `journal-lost` and is not delivered again (at most one execution,
/// I2); a retry-safe one is delivered again. The same journal again changes
/// nothing.
#[tokio::test]
async fn a_node_with_a_new_journal_is_not_sent_again_what_it_may_have_run() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let (node, mut session) = crate::node::adopted(&stack, &token, 1).await;
    let once = CommandOptions { retry_safe: false, ..Default::default() };
    let once = stack.enqueue_command(&node.id, "logs.collect", serde_json::json!({}), once).await.unwrap();
    let (cmd, _) = session.expect_command().await;
    assert_eq!(cmd.id, once);
    let seq = session.send_event(Session::update(&once, CommandState::Running, None)).await;
    session.await_ack(seq).await;
    let safe = CommandOptions { retry_safe: true, ..Default::default() };
    let safe = stack.enqueue_command(&node.id, "logs.collect", serde_json::json!({}), safe).await.unwrap();
    assert_eq!(session.expect_command().await.0.id, safe);
    drop(session);
    // The same journal: both delivered again (bcd's journal knows them).
    let mut same = node.connect(&stack, 1).await.unwrap();
    let mut ids = vec![same.expect_command().await.0.id, same.expect_command().await.0.id];
    ids.sort();
    let mut want = vec![once.clone(), safe.clone()];
    want.sort();
    assert_eq!(ids, want);
    drop(same);
    // Another journal: only the retry-safe one.
    let mut fresh = node.connect_as(&stack, 1, |h| h.journal_id = "jr_after_the_loss".into()).await.unwrap();
    assert_eq!(fresh.expect_command().await.0.id, safe);
    let row = stack.command(&once).unwrap().unwrap();
    assert_eq!(row.state, CommandStatus::Failed, "{row:?}");
    assert!(row.reason.starts_with("journal-lost: "), "{}", row.reason);
    assert_eq!(stack.command(&safe).unwrap().unwrap().state, CommandStatus::Delivered);
    stack.shutdown().await.unwrap();
}
