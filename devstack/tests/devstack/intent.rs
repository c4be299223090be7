//! Signed intent beyond single commands: batches of destructive commands
//! with their approval, and spec generations that rotate the trust bundle.

use devstack::{BatchCommand, BatchSpec, CommandOptions, CommandStatus, DevStackOptions, Error, Signing, SpecUpdate};
use prost::Message as _;

use crate::node::{self, Session, TestNode, WAIT, diag_output};
use crate::stack_with_pool;

async fn adopted_node(stack: &devstack::DevStack, token: &str) -> (TestNode, Session) {
    let node = TestNode::join(stack, token).await.unwrap();
    let mut session = node.connect(stack, 0).await.unwrap();
    let (diag, _) = session.expect_command().await;
    session.complete(&diag, &diag_output(1)).await;
    session.expect_desired_state().await;
    session.heartbeat(1).await;
    stack.await_adopted(&node.id, WAIT).await.unwrap();
    (node, session)
}

#[tokio::test]
async fn a_batch_carries_an_approval_by_the_quorum() {
    let options = DevStackOptions { signed_intent: true, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let (node, mut session) = adopted_node(&stack, &token).await;
    let (bundle, _) = stack.trust_bundle().unwrap();
    let quorum = bundle.quorum.clone().unwrap();
    let reboot = |node_id: &str| BatchCommand {
        node_id: node_id.to_string(),
        kind: "node.reboot".into(),
        params: serde_json::json!({}),
        retry_safe: false,
    };
    let now = node::devstack_now_ms();

    for (approvals, verdict) in [(2, None), (1, Some("batch-unapproved"))] {
        let spec = BatchSpec { commands: vec![reboot(&node.id), reboot(&node.id)], approvals, not_after: None };
        let batch = stack.enqueue_batch(spec).await.unwrap();
        assert_eq!(batch.command_ids.len(), 2);
        for id in &batch.command_ids {
            let delivery = session.expect_delivery().await;
            let env = pki::dsse::Envelope::from_proto(&delivery.command.unwrap());
            let cmd = proto::Command::decode(env.payload.as_slice()).unwrap();
            assert_eq!((&cmd.id, cmd.destructive, &cmd.batch), (id, true, &batch.id));
            let approval = pki::dsse::Envelope::from_proto(&delivery.batch_approval.expect("an approval"));
            let checked = pki::intent::verify_batch_approval(&approval, &quorum, "compute.dev.local", &env, &cmd, now);
            assert_eq!(checked.err().map(|e| e.code()), verdict, "{approvals} approvals");
        }
    }
    stack.shutdown().await.unwrap();

    let (plain, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = TestNode::join(&plain, &token).await.unwrap();
    let spec = BatchSpec { commands: vec![reboot(&node.id)], approvals: 2, not_after: None };
    assert!(matches!(plain.enqueue_batch(spec).await, Err(Error::NoSignedIntent)));
    plain.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_published_spec_rotates_the_trust_bundle() {
    let options = DevStackOptions { signed_intent: true, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let (node, mut session) = adopted_node(&stack, &token).await;
    let roots = stack.command_roots();
    let (current, _) = stack.trust_bundle().unwrap();

    let next = stack.next_trust_bundle().unwrap();
    assert_eq!(next.sequence, 2);
    let rotation = stack.sign_trust_bundle(&next, 2).unwrap();
    assert_eq!(pki::intent::accept_trust_bundle(&current, &rotation).unwrap(), next);
    let weak = stack.sign_trust_bundle(&next, 1).unwrap();
    assert_eq!(pki::intent::accept_trust_bundle(&current, &weak).unwrap_err().code(), "trust-quorum");

    let update = SpecUpdate { trust_bundle: Some(rotation.clone()), ..SpecUpdate::default() };
    assert_eq!(stack.publish_spec(&node.id, update).await.unwrap(), 2);
    let (_, env) = session.expect_desired_state().await;
    let env = pki::dsse::Envelope::from_proto(&env);
    let spec = pki::intent::verify_spec(&env, &roots, &node.id, pki::intent::SignedSpecs::Always, None).unwrap();
    assert_eq!(spec.generation, 2);
    let carried = spec.trust.unwrap().trust_bundle.unwrap();
    assert_eq!(pki::dsse::Envelope::from_proto(&carried), rotation);

    // An unsigned generation keeps the trust section and changes access.
    let access = proto::AccessSection {
        accounts: vec![proto::SshAccount { name: "ops".into(), principals: vec!["ops".into()], ..Default::default() }],
        ..Default::default()
    };
    let update = SpecUpdate { access: Some(access.clone()), unsigned: true, ..SpecUpdate::default() };
    assert_eq!(stack.publish_spec(&node.id, update).await.unwrap(), 3);
    let (spec, env) = session.expect_desired_state().await;
    assert!(env.signatures.is_empty());
    assert_eq!((spec.generation, spec.access), (3, Some(access)));
    assert!(spec.trust.is_some());
    let env = pki::dsse::Envelope::from_proto(&env);
    let refused = pki::intent::verify_spec(&env, &roots, &node.id, pki::intent::SignedSpecs::Access, None);
    assert_eq!(refused.unwrap_err().code(), "spec-unsigned-access");
    assert_eq!(stack.node(&node.id).unwrap().unwrap().spec_generation, 3);
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn unsigned_and_outsider_commands_reach_the_node_and_its_refusal_is_recorded() {
    let options = DevStackOptions { signed_intent: true, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let (node, mut session) = adopted_node(&stack, &token).await;
    for (signing, code) in [(Signing::Unsigned, "dsse-unsigned"), (Signing::Outsider, "dsse-unknown-key")] {
        let opts = CommandOptions { signing, ..CommandOptions::default() };
        let id = stack.enqueue_command(&node.id, "diag.nvml", serde_json::json!({}), opts).await.unwrap();
        let (cmd, env) = session.expect_command().await;
        assert_eq!(cmd.id, id);
        let env = pki::dsse::Envelope::from_proto(&env);
        let refusal = pki::intent::verify_command(&env, &stack.command_roots(), &node.id, 0).unwrap_err();
        assert_eq!(refusal.code(), code);
        // What bcd answers: FAILED BAD_SIGNATURE with a node-signed result.
        let reason = format!("BAD_SIGNATURE: {code}");
        let result = session.signed_result(&node.key, &cmd, proto::CommandState::Failed, &reason, "");
        let update = proto::node_frame::Frame::CommandUpdate(proto::CommandUpdate {
            command_id: id.clone(),
            state: proto::CommandState::Failed as i32,
            reason: reason.clone(),
            result: Some(result),
            at_ms: node::devstack_now_ms(),
        });
        let seq = session.send_event(update).await;
        session.await_ack(seq).await;
        let outcome = stack.await_command(&id, WAIT).await.unwrap();
        assert_eq!((outcome.state, outcome.reason), (CommandStatus::Failed, reason));
    }
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_rotation_signed_by_the_approvers_becomes_the_stacks_bundle_for_later_joins() {
    let dir = tempfile::tempdir().unwrap();
    let options = DevStackOptions { signed_intent: true, ..DevStackOptions::file(dir.path().join("stack.sqlite")) };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let (node, mut session) = adopted_node(&stack, &token).await;
    let (first, first_env) = stack.trust_bundle().unwrap();

    // A rotation under the threshold is sent (bcd ignores it) but not adopted.
    let next = stack.next_trust_bundle().unwrap();
    let weak = stack.sign_trust_bundle(&next, 1).unwrap();
    stack.publish_spec(&node.id, SpecUpdate { trust_bundle: Some(weak), ..SpecUpdate::default() }).await.unwrap();
    session.expect_desired_state().await;
    assert_eq!(stack.trust_bundle().unwrap(), (first.clone(), first_env));

    // One the approvers signed is: nodes joining afterwards get it.
    let rotation = stack.sign_trust_bundle(&next, 2).unwrap();
    stack
        .publish_spec(&node.id, SpecUpdate { trust_bundle: Some(rotation.clone()), ..SpecUpdate::default() })
        .await
        .unwrap();
    assert_eq!(stack.trust_bundle().unwrap(), (next.clone(), rotation.clone()));
    assert_eq!(stack.next_trust_bundle().unwrap().sequence, 3);
    let later = TestNode::join(&stack, &token).await.unwrap();
    let carried = later.response.trust.as_ref().unwrap().trust_bundle.as_ref().unwrap();
    assert_eq!(pki::dsse::Envelope::from_proto(carried), rotation);
    assert_eq!(pki::intent::accept_trust_bundle(&first, &rotation).unwrap().sequence, 2);
    // Publishing it again (to another node) changes nothing.
    stack
        .publish_spec(&later.id, SpecUpdate { trust_bundle: Some(rotation.clone()), ..SpecUpdate::default() })
        .await
        .unwrap();
    assert_eq!(stack.trust_bundle().unwrap().0.sequence, 2);

    // It survives a restart.
    let restart = stack.restart_options();
    stack.shutdown().await.unwrap();
    let stack = devstack::DevStack::start(restart).await.unwrap();
    assert_eq!(stack.trust_bundle().unwrap(), (next, rotation));
    stack.shutdown().await.unwrap();
}
