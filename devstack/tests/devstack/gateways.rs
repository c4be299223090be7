//! Several gateways on one PostgreSQL store, in process: two stacks on one
//! database (their own listeners, one store), a Rust node whose session is
//! on one while commands and specs are made on the other, a session that
//! moves and fences the one it left, and the well-known document listing
//! both. Skipped with a reason without PostgreSQL, failed under CI.

use std::time::Duration;

use devstack::{DevStack, DevStackOptions, PoolSpec, StoreLocation};
use devstack_store::cluster::Cluster;

use crate::node::{self, Session, TestNode, WAIT};

/// The process's throwaway cluster, or `None` (and why) without PostgreSQL.
fn cluster() -> Option<&'static Cluster> {
    static CLUSTER: std::sync::OnceLock<Option<Cluster>> = std::sync::OnceLock::new();
    CLUSTER
        .get_or_init(|| match Cluster::start() {
            Ok(cluster) => Some(cluster),
            Err(e) => {
                assert!(std::env::var_os("CI").is_none(), "PostgreSQL is a prerequisite under CI: {e}");
                eprintln!("skipped: {e}");
                None
            }
        })
        .as_ref()
}

/// Two gateways, `g1` and `g2`, on a new database of the cluster.
async fn two_gateways(name: &str) -> Option<(DevStack, DevStack)> {
    let url = cluster()?.database(name).unwrap();
    let options = |id: &str| DevStackOptions {
        store: StoreLocation::Postgres(url.clone()),
        gateway_id: id.into(),
        ..DevStackOptions::default()
    };
    let g1 = DevStack::start(options("g1")).await.unwrap();
    let g2 = DevStack::start(options("g2")).await.unwrap();
    Some((g1, g2))
}

/// A node adopted through `on`, with a pool and token made on `via`.
async fn adopted_on(via: &DevStack, on: &DevStack) -> (TestNode, Session) {
    let pool = via.create_pool(PoolSpec { name: "gpu".into(), ..PoolSpec::default() }).await.unwrap();
    let token = via.mint_join_token(&pool, 5, Duration::from_secs(600)).await.unwrap();
    node::adopted(on, &token, 1).await
}

#[tokio::test]
async fn a_command_made_on_one_gateway_reaches_the_node_on_another() {
    let Some((g1, g2)) = two_gateways("gw_poke").await else { return };
    let (node, mut session) = adopted_on(&g1, &g2).await;
    assert_eq!(g1.node(&node.id).unwrap().unwrap().gateway_id, "g2", "its home is where its session is");
    // Made on g1, where the node has no session: g2 is poked and delivers.
    let id = g1.enqueue_command(&node.id, "diag.nvml", serde_json::json!({}), Default::default()).await.unwrap();
    let (cmd, _) = session.expect_command().await;
    assert_eq!(cmd.id, id);
    session.complete(&cmd, &node::diag_output(1)).await;
    // g1's wait wakes on g2's commit.
    let outcome = g1.await_command(&id, WAIT).await.unwrap();
    assert_eq!(outcome.state, devstack::CommandStatus::Succeeded);
    // A spec published on g1 reaches the session on g2.
    let generation = g1.publish_spec(&node.id, devstack::SpecUpdate::default()).await.unwrap();
    let (spec, _) = session.expect_desired_state().await;
    assert_eq!(spec.generation, generation);
    // The well-known document lists both, the serving gateway first.
    let doc = g2.well_known();
    let ids: Vec<&str> = doc["gateways"].as_array().unwrap().iter().map(|g| g["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["g2", "g1"]);
    g1.shutdown().await.unwrap();
    g2.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_session_that_moved_fences_the_one_it_left() {
    let Some((g1, g2)) = two_gateways("gw_fence").await else { return };
    let (node, mut old) = adopted_on(&g1, &g1).await;
    // The node's session moves to g2 (as after a partition): epoch 2 there.
    let mut moved = node.connect(&g2, 1).await.unwrap();
    g2.await_session(&node.id, 2, WAIT).await.unwrap();
    assert_eq!(g1.node(&node.id).unwrap().unwrap().session_epoch, 2);
    // The old session on g1 writes (a report): fenced, and it ends so.
    old.send_event(node::Session::update("cmd_none", proto::CommandState::Running, None)).await;
    let (ended, _) = old.until_end().await;
    let status = ended.unwrap_err();
    assert_eq!(devstack::status::code_of(&status), "session-fenced", "{status:?}");
    let counted = g1.view(|v| v.gateways()).unwrap();
    assert_eq!(counted.iter().find(|g| g.id == "g1").unwrap().fenced_writes, 1);
    // The new session works.
    let id = g1.enqueue_command(&node.id, "diag.nvml", serde_json::json!({}), Default::default()).await.unwrap();
    assert_eq!(moved.expect_command().await.0.id, id);
    g1.shutdown().await.unwrap();
    g2.shutdown().await.unwrap();
}

/// A node no gateway hears from for the liveness timeout is marked
/// unreachable (by the store's clock), and heard again it is not.
async fn a_silent_node_is_marked_unreachable_and_cleared_when_heard(store: StoreLocation) {
    let options = DevStackOptions {
        store,
        heartbeat_interval_ms: 100,
        liveness_timeout: Duration::from_millis(600),
        ..DevStackOptions::default()
    };
    let stack = DevStack::start(options).await.unwrap();
    let mut events = stack.events(0);
    let (node, session) = adopted_on(&stack, &stack).await;
    // Heard while its session lives: a beat writes its liveness.
    stack.await_until("the node's liveness", WAIT, |v| v.node(&node.id).map(|_| ())).await.unwrap();
    drop(session);
    let marked = wait_for_event(&mut events, "node.unreachable").await;
    assert_eq!(marked.node_id(), Some(node.id.as_str()));
    assert!(stack.node(&node.id).unwrap().unwrap().unreachable_since_ms.is_some());
    let _back = node.connect(&stack, 1).await.unwrap();
    let cleared = wait_for_event(&mut events, "node.reachable").await;
    assert_eq!(cleared.node_id(), Some(node.id.as_str()));
    assert_eq!(stack.node(&node.id).unwrap().unwrap().unreachable_since_ms, None);
    stack.shutdown().await.unwrap();
}

/// A control plane that was down longer than the liveness timeout marks
/// no node unreachable before it has listened for that long itself: the
/// nodes could not be heard while nothing listened, so each gets the full
/// timeout back (then a node that stays silent is marked).
#[tokio::test]
async fn a_restarted_stack_gives_its_nodes_the_whole_liveness_timeout_before_judging() {
    let dir = tempfile::tempdir().unwrap();
    let timeout = Duration::from_millis(1500);
    let options = DevStackOptions {
        store: StoreLocation::File(dir.path().join("devstack.sqlite")),
        heartbeat_interval_ms: 100,
        liveness_timeout: timeout,
        ..DevStackOptions::default()
    };
    let stack = DevStack::start(options.clone()).await.unwrap();
    let (node, session) = adopted_on(&stack, &stack).await;
    drop(session);
    stack.shutdown().await.unwrap();
    // The outage outlasts the timeout: the node was last heard longer ago
    // than that when the stack comes back. (The passage of time is what
    // this waits for.)
    tokio::time::sleep(timeout + Duration::from_millis(200)).await;
    let back = tokio::time::Instant::now();
    let stack = DevStack::start(options).await.unwrap();
    stack.await_until("the silent node marked", WAIT, |v| v.node(&node.id)?.unreachable_since_ms).await.unwrap();
    let judged_after = back.elapsed();
    assert!(judged_after >= timeout, "marked {judged_after:?} after the stack came back, within its {timeout:?}");
    stack.shutdown().await.unwrap();
}

/// The next event named `name`, within the test's deadline.
async fn wait_for_event(events: &mut devstack::EventSubscription, name: &str) -> devstack::StackEvent {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(devstack::Received::Event(p))) if p.event.name() == name => return p.event.clone(),
            Ok(Some(_)) => {}
            other => panic!("no {name} event: {other:?}"),
        }
    }
}

#[tokio::test]
async fn on_sqlite_a_silent_node_is_marked_unreachable_and_cleared_when_heard() {
    a_silent_node_is_marked_unreachable_and_cleared_when_heard(StoreLocation::Memory).await;
}

#[tokio::test]
async fn on_postgres_a_silent_node_is_marked_unreachable_and_cleared_when_heard() {
    let Some(cluster) = cluster() else { return };
    let url = cluster.database("gw_liveness").unwrap();
    a_silent_node_is_marked_unreachable_and_cleared_when_heard(StoreLocation::Postgres(url)).await;
}
