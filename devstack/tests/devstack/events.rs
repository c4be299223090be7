//! The stack-wide event stream: a node's life (joined, connected, its
//! acceptance command's states, adopted, disconnected), a rejection and a
//! reservation arrive in order on one subscription, each once.

use devstack::{CommandStatus, DevStackOptions, Received, ReservationState, StackEvent};

use crate::node::{TestNode, WAIT, adopted, diag_output, gpus_section};
use crate::stack_with_pool;

/// The next event of a subscription, within the test's deadline.
async fn next(events: &mut devstack::EventSubscription) -> StackEvent {
    match tokio::time::timeout(WAIT, events.next()).await {
        Ok(Some(Received::Event(p))) => p.event.clone(),
        other => panic!("no event: {other:?}"),
    }
}

/// Skips events until one matches; fails at the deadline.
async fn until(events: &mut devstack::EventSubscription, what: impl Fn(&StackEvent) -> bool) -> StackEvent {
    loop {
        let event = next(events).await;
        if what(&event) {
            return event;
        }
    }
}

#[tokio::test]
async fn a_nodes_life_is_published_in_order() {
    let (stack, pool, token) = stack_with_pool(DevStackOptions::memory(), Some(8)).await;
    let mut events = stack.events(0);
    assert!(matches!(next(&mut events).await, StackEvent::PoolCreated { pool_id, .. } if pool_id == pool));
    assert!(matches!(next(&mut events).await, StackEvent::TokenMinted { max_uses: 5, .. }));

    let (node, mut session) = adopted(&stack, &token, 8).await;
    let joined = next(&mut events).await;
    assert!(matches!(&joined, StackEvent::Joined { node_id, pool_id, .. } if *node_id == node.id && *pool_id == pool));
    assert!(matches!(next(&mut events).await, StackEvent::Connected { epoch: 1, .. }));
    let mut states = Vec::new();
    let adopted = loop {
        match next(&mut events).await {
            StackEvent::Command { state, kind, .. } if kind == "diag.nvml" => states.push(state),
            other => break other,
        }
    };
    use CommandStatus::*;
    assert_eq!(states, [Pending, Delivered, Accepted, Running, Succeeded]);
    assert_eq!(adopted, StackEvent::Adopted { node_id: node.id.clone() });

    let inventory = proto::StatusReport { inventory: vec![gpus_section(8)], ..Default::default() };
    let seq = session.send_event(proto::node_frame::Frame::StatusReport(inventory)).await;
    session.await_ack(seq).await;
    let rsv = stack.reserve(&node.id, 2).await.unwrap();
    let pending = until(&mut events, |e| matches!(e, StackEvent::Reservation { .. })).await;
    assert!(
        matches!(pending, StackEvent::Reservation { state: ReservationState::Pending, reservation_id, .. } if reservation_id == rsv)
    );

    drop(session);
    let gone = until(&mut events, |e| matches!(e, StackEvent::Disconnected { .. })).await;
    assert!(matches!(gone, StackEvent::Disconnected { node_id, epoch: 1, .. } if node_id == node.id));

    // A late reader gets the kept events, numbered without a gap.
    let kept = stack.recent_events();
    assert!(kept.windows(2).all(|w| w[1].seq == w[0].seq + 1), "{kept:?}");
    assert_eq!(kept[0].to_json()["event"], "pool_created");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_rejection_says_why() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), Some(8)).await;
    let mut events = stack.events(0);
    let node = TestNode::join(&stack, &token).await.unwrap();
    let mut session = node.connect(&stack, 0).await.unwrap();
    let (diag, _) = session.expect_command().await;
    session.complete(&diag, &diag_output(7)).await;
    let rejected = until(&mut events, |e| matches!(e, StackEvent::Rejected { .. })).await;
    let StackEvent::Rejected { node_id, reason } = rejected else { unreachable!() };
    assert_eq!(node_id, node.id);
    assert!(reason.starts_with("GpuCountMismatch: expected 8 GPUs, found 7"), "{reason}");
    stack.shutdown().await.unwrap();
}
