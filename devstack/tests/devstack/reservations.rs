//! GPU reservations: a hold in a new spec generation, active only on a
//! node-signed AllocationBound that matches, released on AllocationReleased,
//! failed on AllocationFailed.

use devstack::{DevStackOptions, Error, ReservationState};
use proto::node_frame::Frame as In;

use crate::node::{self, Session, TestNode, WAIT, allocation_bound, gpus_section};
use crate::stack_with_pool;

async fn report(session: &mut Session, report: proto::StatusReport) {
    let seq = session.send_event(In::StatusReport(report)).await;
    session.await_ack(seq).await;
}

fn bound_report(env: proto::Envelope, generation: u64) -> proto::StatusReport {
    proto::StatusReport { allocations: vec![env], applied_generation: generation, ..Default::default() }
}

#[tokio::test]
async fn a_reservation_turns_active_on_a_node_signed_allocation_bound_and_ends_released() {
    let options = DevStackOptions { signed_intent: true, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let (node, mut session) = node::adopted(&stack, &token, 4).await;

    // Without a gpus section nothing can be booked.
    assert!(matches!(stack.reserve(&node.id, 2).await, Err(Error::NoGpuInventory { .. })));
    report(&mut session, proto::StatusReport { inventory: vec![gpus_section(4)], ..Default::default() }).await;
    assert!(matches!(stack.reserve(&node.id, 0).await, Err(Error::InvalidReservation { .. })));
    assert!(matches!(stack.reserve(&node.id, 5).await, Err(Error::InsufficientGpus { wanted: 5, free: 4, .. })));

    // The hold goes out in generation 2, signed.
    let id = stack.reserve(&node.id, 2).await.unwrap();
    let (spec, env) = session.expect_desired_state().await;
    assert_eq!(spec.generation, 2);
    assert_eq!(spec.holds, [proto::Hold { allocation_id: id.clone(), gpu_indexes: vec![0, 1], ..Default::default() }]);
    let env = pki::dsse::Envelope::from_proto(&env);
    pki::intent::verify_spec(&env, &stack.command_roots(), &node.id, pki::intent::SignedSpecs::Always, None).unwrap();
    let row = stack.reservation(&id).unwrap().unwrap();
    assert_eq!((row.state, row.gpu_indexes.as_slice(), row.generation), (ReservationState::Pending, &[0, 1][..], 2));

    // Refused: another key's signature, other indexes, a generation before the hold.
    let foreign = pki::keys::random_p256();
    let cases = [
        (allocation_bound(&node, &foreign, &id, &[0, 1], 2), "dsse-unknown-key"),
        (allocation_bound(&node, &node.key, &id, &[0, 2], 2), devstack::ALLOCATION_MISMATCH),
        (allocation_bound(&node, &node.key, &id, &[1, 0], 1), devstack::ALLOCATION_GENERATION),
    ];
    for (env, code) in cases {
        report(&mut session, bound_report(env, 2)).await;
        let row = stack.reservation(&id).unwrap().unwrap();
        assert_eq!(row.state, ReservationState::Pending, "{code}");
        assert!(row.last_refusal.starts_with(&format!("{code}: ")), "{code}: {}", row.last_refusal);
    }
    // A statement for another node's allocation id changes nothing.
    report(&mut session, bound_report(allocation_bound(&node, &node.key, "rsv_other", &[0], 2), 2)).await;

    // Accepted: the node's key, the held indexes (in any order), this generation.
    let statement = allocation_bound(&node, &node.key, &id, &[1, 0], 2);
    report(&mut session, bound_report(statement.clone(), 2)).await;
    let active = stack.await_reservation(&id, ReservationState::Active, WAIT).await.unwrap();
    assert_eq!((active.bound_generation, active.last_refusal.as_str()), (Some(2), ""));
    assert_eq!(active.cdi_devices, ["nvidia.com/gpu=1", "nvidia.com/gpu=0"]);
    assert_eq!(active.statement, Some(prost::Message::encode_to_vec(&statement)));
    assert!(active.active_at_ms.is_some());
    // Reported again (every status report carries it): nothing changes.
    report(&mut session, bound_report(statement, 2)).await;
    assert_eq!(stack.reservation(&id).unwrap().unwrap(), active);

    // A second reservation takes the next free GPUs; the node fails it.
    assert!(matches!(stack.reserve(&node.id, 3).await, Err(Error::InsufficientGpus { free: 2, .. })));
    let second = stack.reserve(&node.id, 2).await.unwrap();
    let (spec, _) = session.expect_desired_state().await;
    assert_eq!(spec.generation, 3);
    assert_eq!(spec.holds.iter().map(|h| h.gpu_indexes.clone()).collect::<Vec<_>>(), [vec![0, 1], vec![2, 3]]);
    let failed = proto::AllocationFailed { allocation_id: second.clone(), reason: "CdiWriteFailed: disk full".into() };
    report(&mut session, proto::StatusReport { failed: vec![failed], applied_generation: 3, ..Default::default() })
        .await;
    let ended = stack.await_reservation(&second, ReservationState::Active, WAIT).await.unwrap_err();
    assert!(
        matches!(&ended, Error::ReservationEnded { state: ReservationState::Failed, reason, .. } if reason == "CdiWriteFailed: disk full"),
        "{ended}"
    );
    // Its hold is withdrawn in generation 4.
    let (spec, _) = session.expect_desired_state().await;
    assert_eq!((spec.generation, spec.holds.len()), (4, 1));
    assert_eq!(stack.reservation(&second).unwrap().unwrap().release_generation, Some(4));

    // Release: the hold goes in generation 5, released on the node's report.
    assert_eq!(stack.release(&id).await.unwrap(), 5);
    let (spec, _) = session.expect_desired_state().await;
    assert_eq!((spec.generation, spec.holds.len()), (5, 0));
    let row = stack.reservation(&id).unwrap().unwrap();
    assert_eq!((row.state, row.release_generation), (ReservationState::Releasing, Some(5)));
    assert!(matches!(stack.release(&id).await, Err(Error::ReservationState { .. })));
    // Its GPUs stay claimed until the node lets go (fail-closed): an overlap, not a shortage.
    let overlap = stack.reserve(&node.id, 3).await.unwrap_err();
    assert!(matches!(overlap, Error::ReservationOverlap { .. }), "{overlap}");
    assert!(overlap.to_string().starts_with("reservation-overlap: ") && overlap.to_string().contains(&id), "{overlap}");
    assert!(matches!(stack.reserve(&node.id, 5).await, Err(Error::InsufficientGpus { free: 2, .. })));
    let released = proto::AllocationReleased { allocation_id: id.clone() };
    report(&mut session, proto::StatusReport { released: vec![released], applied_generation: 5, ..Default::default() })
        .await;
    let row = stack.await_reservation(&id, ReservationState::Released, WAIT).await.unwrap();
    assert!(row.released_at_ms.is_some());
    assert_eq!(stack.reservations(&node.id).unwrap().len(), 2);
    let all = stack.reserve(&node.id, 4).await.unwrap();
    assert_eq!(stack.reservation(&all).unwrap().unwrap().gpu_indexes, [0, 1, 2, 3]);
    assert!(matches!(stack.release("rsv_none").await, Err(Error::UnknownReservation { .. })));
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn only_an_adopted_node_takes_a_reservation_and_a_renewed_key_still_signs() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let joined = TestNode::join(&stack, &token).await.unwrap();
    assert!(matches!(stack.reserve(&joined.id, 1).await, Err(Error::NodeNotAdopted { .. })));
    assert!(matches!(stack.reserve("node_none", 1).await, Err(Error::UnknownNode { .. })));

    let (node, mut session) = node::adopted(&stack, &token, 8).await;
    report(&mut session, proto::StatusReport { inventory: vec![gpus_section(8)], ..Default::default() }).await;
    let id = stack.reserve(&node.id, 1).await.unwrap();
    let (spec, _) = session.expect_desired_state().await;
    // Signed by a key certified later (a renewal): still the node's.
    let (key, csr, _) = node::key_and_csr();
    let channel = node::channel(&stack, Some(node.cert.clone())).await.unwrap();
    let request = proto::RenewRequest { csr_der: csr, node_key: None };
    proto::gateway_client::GatewayClient::new(channel).renew(request).await.unwrap();
    let statement = allocation_bound(&node, &key, &id, &[0], spec.generation);
    report(&mut session, bound_report(statement, spec.generation)).await;
    stack.await_reservation(&id, ReservationState::Active, WAIT).await.unwrap();
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_hold_withdrawn_before_the_node_bound_it_is_released_once_the_node_applied_past_it() {
    let options = DevStackOptions { signed_intent: true, ..DevStackOptions::memory() };
    let (stack, _pool, token) = stack_with_pool(options, None).await;
    let (node, mut session) = node::adopted(&stack, &token, 4).await;
    report(&mut session, proto::StatusReport { inventory: vec![gpus_section(4)], ..Default::default() }).await;
    // Booked in generation 2 and withdrawn in 3 before the node saw 2: a
    // node that takes the newest spec never holds it, and so never reports
    // it released.
    let id = stack.reserve(&node.id, 2).await.unwrap();
    stack.release(&id).await.unwrap();
    let row = stack.reservation(&id).unwrap().unwrap();
    assert_eq!((row.state, row.release_generation), (ReservationState::Releasing, Some(3)));
    report(&mut session, proto::StatusReport { applied_generation: 2, ..Default::default() }).await;
    assert_eq!(stack.reservation(&id).unwrap().unwrap().state, ReservationState::Releasing, "2 still holds it");
    report(&mut session, proto::StatusReport { applied_generation: 3, ..Default::default() }).await;
    let released = stack.await_reservation(&id, ReservationState::Released, WAIT).await.unwrap();
    assert!(released.released_at_ms.is_some() && released.bound_generation.is_none());
    // Its GPUs are free again.
    let next = stack.reserve(&node.id, 4).await.unwrap();
    assert_eq!(stack.reservation(&next).unwrap().unwrap().gpu_indexes, [0, 1, 2, 3]);
}
