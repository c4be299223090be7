//! Per-node limits (docs/devstack.md, "Limits"), each test named for the
//! defect an outside review found: a node growing the store with section
//! names, burning the stack's CPU with bogus statements after many
//! renewals (and holding up an unrelated Join meanwhile), renewing without
//! limit, and statements that verify under the key of an expired
//! certificate.

use std::time::{Duration, Instant};

use devstack::{DevStackOptions, NodeLimits};
use proto::node_frame::Frame as In;
use sha2::Digest as _;

use crate::node::{self, Session, TestNode};
use crate::{Logs, stack_with_pool};

async fn report(session: &mut Session, report: proto::StatusReport) {
    let seq = session.send_event(In::StatusReport(report)).await;
    session.await_ack(seq).await;
}

fn section(name: &str) -> proto::InventorySection {
    let content = name.as_bytes().to_vec();
    proto::InventorySection { name: name.into(), sha256: hex::encode(sha2::Sha256::digest(&content)), content }
}

fn code(status: &tonic::Status) -> (tonic::Code, &str) {
    (status.code(), devstack::status::code_of(status))
}

#[tokio::test]
async fn a_node_cannot_grow_the_store_with_section_names() {
    let logs = Logs::global();
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let (node, mut session) = node::adopted(&stack, &token, 1).await;
    report(&mut session, proto::StatusReport { inventory: vec![node::gpus_section(1)], ..Default::default() }).await;
    // 20 reports of 1,000 new names each, of inventory sections and of
    // section statuses.
    for r in 0..20 {
        let names: Vec<String> = (0..1000).map(|i| format!("s-{r}-{i}")).collect();
        let inventory = names.iter().map(|n| section(n)).collect();
        let sections = names
            .iter()
            .map(|n| proto::SectionStatus { section: n.clone(), state: 1, generation: 1, ..Default::default() })
            .collect();
        report(&mut session, proto::StatusReport { inventory, sections, ..Default::default() }).await;
    }
    let limits = NodeLimits::default();
    let inventory = stack.inventory(&node.id).unwrap();
    assert_eq!(inventory.len(), limits.inventory_sections, "sections kept");
    assert!(inventory.iter().any(|s| s.name == "gpus"), "the node's own section is kept");
    assert_eq!(stack.section_statuses(&node.id).unwrap().len(), limits.section_statuses);
    // A kept section is still updated, and a name that is not plain is refused.
    report(&mut session, proto::StatusReport { inventory: vec![node::gpus_section(2)], ..Default::default() }).await;
    report(&mut session, proto::StatusReport { inventory: vec![section("a\nforged")], ..Default::default() }).await;
    let inventory = stack.inventory(&node.id).unwrap();
    assert_eq!(inventory.len(), limits.inventory_sections);
    assert_eq!(inventory.iter().find(|s| s.name == "gpus").unwrap().sha256, node::gpus_section(2).sha256);
    stack.shutdown().await.unwrap();
    let refusals = logs.text().lines().filter(|l| l.contains(&node.id) && l.contains("report-limit")).count();
    // One line per report part that refused some, not one per name: 20
    // reports with both parts over the limit, and the forged name.
    assert!((1..=41).contains(&refusals), "{refusals} report-limit lines");
}

/// Renews `node`'s certificate once over mTLS.
async fn renew(stack: &devstack::DevStack, node: &TestNode) -> Result<(), tonic::Status> {
    let (_, csr, _) = node::key_and_csr();
    let channel = node::channel(stack, Some(node.cert.clone())).await.unwrap();
    let request = proto::RenewRequest { csr_der: csr, node_key: None };
    proto::gateway_client::GatewayClient::new(channel).renew(request).await.map(|_| ())
}

#[tokio::test]
async fn a_node_cannot_burn_the_stacks_cpu_with_bogus_statements() {
    let (stack, _pool, token) = stack_with_pool(DevStackOptions::memory(), None).await;
    let (node, mut session) = node::adopted(&stack, &token, 8).await;
    for _ in 0..50 {
        renew(&stack, &node).await.unwrap();
    }
    // 4,000 statements (the 1 MiB a frame may hold) signed by keys the stack never certified, naming
    // allocations of this node (about 1 MB).
    let bogus: Vec<proto::Envelope> = (0..4000)
        .map(|i| node::allocation_bound(&node, &pki::keys::random_p256(), &format!("res_{i}"), &[0], 1))
        .collect();
    let report_at = Instant::now();
    let seq =
        session.send_event(In::StatusReport(proto::StatusReport { allocations: bogus, ..Default::default() })).await;
    // An unrelated Join meanwhile is not held up.
    let acked = async {
        session.await_ack(seq).await;
        report_at.elapsed()
    };
    let joined = async {
        let at = Instant::now();
        TestNode::join(&stack, &token).await.unwrap();
        at.elapsed()
    };
    let (report_took, join_took) = tokio::join!(acked, joined);
    assert!(report_took < Duration::from_secs(3), "the report took {report_took:?}");
    assert!(join_took < Duration::from_secs(3), "a Join meanwhile took {join_took:?}");
    stack.shutdown().await.unwrap();
}

#[tokio::test]
async fn renewals_beyond_the_hourly_limit_are_refused() {
    let limits = NodeLimits { renewals_per_hour: 3, ..NodeLimits::default() };
    let (stack, _pool, token) = stack_with_pool(DevStackOptions { limits, ..DevStackOptions::memory() }, None).await;
    let node = TestNode::join(&stack, &token).await.unwrap();
    for _ in 0..3 {
        renew(&stack, &node).await.unwrap();
    }
    let err = renew(&stack, &node).await.unwrap_err();
    assert_eq!(code(&err), (tonic::Code::ResourceExhausted, "renew-limit"));
    assert_eq!(stack.node_certs(&node.id).unwrap().len(), 4, "the join's and three renewals");
    // Another node is not limited by this one.
    let other = TestNode::join(&stack, &token).await.unwrap();
    renew(&stack, &other).await.unwrap();
    stack.shutdown().await.unwrap();
}
