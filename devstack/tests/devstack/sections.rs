//! Section statuses: what a StatusReport's `sections` say is stored per node
//! and section (the latest report wins, re-sent events change nothing), read
//! back as domain types, and awaited with `await_until`; and the generic
//! wait itself (its timeout names what it saw last).

use devstack::{DevStackOptions, Error, SectionState};
use proto::node_frame::Frame as In;

use crate::node::{self, Session, WAIT};
use crate::stack_with_pool;

fn status(section: &str, state: proto::SectionState, reason: &str, generation: u64) -> proto::SectionStatus {
    proto::SectionStatus {
        section: section.into(),
        state: state as i32,
        reason: reason.into(),
        message: format!("{section} is {reason}"),
        generation,
    }
}

fn report(sections: Vec<proto::SectionStatus>) -> In {
    In::StatusReport(proto::StatusReport { sections, applied_generation: 1, ..Default::default() })
}

async fn send(session: &mut Session, frame: In) -> u64 {
    let seq = session.send_event(frame).await;
    session.await_ack(seq).await;
    seq
}

#[tokio::test]
async fn section_statuses_are_stored_per_section_and_awaited() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let (node, mut session) = node::adopted(&stack, &token, 1).await;
    assert!(stack.section_statuses(&node.id).unwrap().is_empty());

    // Two sections in one report; an unnamed one is ignored.
    let first = report(vec![
        status("instances", proto::SectionState::Progressing, "Retrying", 1),
        status("trust", proto::SectionState::Applied, "Applied", 1),
        status("", proto::SectionState::Failed, "Nameless", 1),
    ]);
    session.send_event(first).await;
    let retrying = stack
        .await_until("instances to be retrying", WAIT, |v| {
            v.section_status(&node.id, "instances").filter(|s| s.is(SectionState::Progressing, "Retrying"))
        })
        .await
        .unwrap();
    assert_eq!((retrying.generation, retrying.message.as_str()), (1, "instances is Retrying"));
    let all = stack.section_statuses(&node.id).unwrap();
    let names: Vec<_> = all.iter().map(|s| (s.section.as_str(), s.state)).collect();
    assert_eq!(names, [("instances", SectionState::Progressing), ("trust", SectionState::Applied)]);

    // A later report changes the sections it names; the others keep theirs.
    send(&mut session, report(vec![status("instances", proto::SectionState::Applied, "Applied", 2)])).await;
    let instances = stack.section_status(&node.id, "instances").unwrap().unwrap();
    assert_eq!(
        (instances.state, instances.reason.as_str(), instances.generation),
        (SectionState::Applied, "Applied", 2)
    );
    assert_eq!(stack.section_status(&node.id, "trust").unwrap().unwrap().state, SectionState::Applied);
    send(&mut session, report(vec![status("instances", proto::SectionState::Failed, "InstanceFailed", 2)])).await;
    let instances = stack.section_status(&node.id, "instances").unwrap().unwrap();
    assert!(instances.is(SectionState::Failed, "InstanceFailed"), "{instances:?}");
    assert!(stack.section_status(&node.id, "").unwrap().is_none());
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_resent_report_does_not_overwrite_a_later_status() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let (node, mut session) = node::adopted(&stack, &token, 1).await;
    let progressing = report(vec![status("holds", proto::SectionState::Progressing, "Binding", 1)]);
    let seq = send(&mut session, progressing.clone()).await;
    send(&mut session, report(vec![status("holds", proto::SectionState::Applied, "Applied", 1)])).await;
    session.resend_event(seq, progressing).await;
    session.await_ack(seq).await;
    // Another event after the duplicate: once it is acknowledged, the
    // duplicate was handled too (events are handled in order).
    send(&mut session, report(vec![])).await;
    let holds = stack.section_status(&node.id, "holds").unwrap().unwrap();
    assert!(holds.is(SectionState::Applied, "Applied"), "{holds:?}");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn await_until_names_what_it_saw_last_and_a_condition_can_fail() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let node = crate::node::TestNode::join(&stack, &token).await.unwrap();
    let short = std::time::Duration::from_millis(200);
    let err = stack
        .await_until("a section that never comes", short, |v| {
            v.note(format_args!("{} sections", v.section_statuses(&node.id).len()));
            v.section_status(&node.id, "instances")
        })
        .await
        .unwrap_err();
    assert!(matches!(&err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("a section that never comes (last seen: 0 sections)"), "{err}");

    // A condition that fails returns its error at once.
    let failed = stack
        .await_until("a node that is not there", WAIT, |v| match v.node("node_none") {
            None => Some(Err(Error::UnknownNode { node_id: "node_none".into() })),
            Some(n) => Some(Ok(n)),
        })
        .await
        .unwrap();
    assert!(matches!(failed, Err(Error::UnknownNode { .. })));

    // The view reads the store and the live sessions at one instant.
    let session = node.connect(&stack, 0).await.unwrap();
    let live = stack.await_until("a live session", WAIT, |v| v.live_session(&node.id)).await.unwrap();
    assert_eq!(live.epoch, session.welcome.session_epoch);
    let (epoch, sessions) = stack.view(|v| (v.live_epoch(&node.id), v.node_sessions(&node.id))).unwrap();
    assert_eq!((epoch, sessions.len()), (Some(live.epoch), 1));
    stack.shutdown().await.unwrap();
}
