//! Several gateways on one PostgreSQL store (docs/harness.md, "Several
//! gateways"): gateway processes on a throwaway cluster of the scenario's
//! own ([`crate::plane`]) and real fakehw bcds that fail over between them. A gateway killed while a held
//! command runs, a gateway paused while its node moves (then fenced when it
//! wakes), three gateways with skewed clocks, every gateway restarted at
//! once, and PostgreSQL itself restarted; each asserts with fakehw's
//! execution counters and the store's rows. Without PostgreSQL the
//! scenarios skip, except under CI.

use std::time::{Duration, Instant};

use daemon_harness::gateways::GatewaySpec;
use daemon_harness::node::Node;
use devstack::{CommandOptions, CommandStatus, DevStack};
use serde_json::json;

use crate::common::{DEADLINE, await_command_state, execution_count};
use crate::plane::Plane;

/// How long a node may take to be back on another gateway after its own
/// died: the redial's jitter (at most 200 ms at the first attempt), a TLS
/// handshake and a Welcome, with room for a loaded machine.
const REHOME_BOUND: Duration = Duration::from_secs(10);

/// A control plane of `specs`' gateway processes.
async fn fleet(scenario: &str, specs: Vec<GatewaySpec>) -> Option<Plane> {
    Plane::start_gateways(scenario, specs, |_| {}).await
}

/// What these scenarios ask of a plane of gateway processes.
trait Gateways {
    /// A node joined and adopted whose configuration lists the gateways
    /// with `home` first (so its first session is there).
    async fn must_adopt_on(&self, name: &str, pool: &str, home: &str) -> (Node, String);
    /// How many session writes the store fenced for gateway `id`.
    fn fenced_writes(&self, id: &str) -> u64;
    /// No gateway (and not the driving stack) marked a node unreachable.
    fn assert_no_unreachable_mark(&self);
}

impl Gateways for Plane {
    async fn must_adopt_on(&self, name: &str, pool: &str, home: &str) -> (Node, String) {
        let mut node = self.env.must_make_node(name, "cpu").await;
        let mut urls: Vec<&str> = self.gateways.iter().map(|g| g.urls().gateway.as_str()).collect();
        let at = self.gateways.iter().position(|g| g.id() == home).expect("the home is a gateway");
        urls.rotate_left(at);
        rewrite_gateways(&node, &urls);
        let id = self.env.must_join_and_adopt(&mut node, pool).await;
        let session = self.await_open_session(&id, 1, |_| true).await;
        assert_eq!(session.gateway_id, home, "the node's first session is on its home");
        (node, id)
    }

    fn fenced_writes(&self, id: &str) -> u64 {
        let gateways = self.stack().view(|v| v.gateways()).unwrap();
        gateways.iter().find(|g| g.id == id).map(|g| g.fenced_writes).unwrap_or(0)
    }

    fn assert_no_unreachable_mark(&self) {
        for g in &self.gateways {
            assert!(
                !g.logged("node unreachable"),
                "gateway {} marked a node unreachable:\n{}",
                g.id(),
                g.log().join("\n")
            );
        }
        let marked: Vec<_> =
            self.stack().recent_events().into_iter().filter(|e| e.event.name() == "node.unreachable").collect();
        assert!(marked.is_empty(), "node.unreachable: {marked:?}");
        for n in self.stack().nodes().unwrap() {
            assert_eq!(n.unreachable_since_ms, None, "{} is marked unreachable", n.id);
        }
    }
}

/// Rewrites a node's config.toml to list `urls`, the first as its
/// `gateway_url` (the node must not run).
fn rewrite_gateways(node: &Node, urls: &[&str]) {
    let path = node.config();
    let text = std::fs::read_to_string(&path).expect("config.toml reads");
    let list: Vec<String> = urls.iter().map(|u| format!("\"{u}\"")).collect();
    let mut out = Vec::new();
    for line in text.lines() {
        match line.split_once('=').map(|(k, _)| k.trim()) {
            Some("gateway_url") => {
                out.push(format!("gateway_url = \"{}\"", urls[0]));
                out.push(format!("gateway_urls = [{}]", list.join(", ")));
            }
            Some("gateway_urls") => {}
            _ => out.push(line.to_string()),
        }
    }
    std::fs::write(&path, out.join("\n") + "\n").expect("config.toml is rewritten");
}

/// A command that runs `hold_ms` on the node and is not retry-safe.
async fn enqueue_held(stack: &DevStack, node_id: &str, hold_ms: u64) -> String {
    let held = CommandOptions { retry_safe: false, ..Default::default() };
    stack.enqueue_command(node_id, "logs.collect", json!({ "hold_ms": hold_ms }), held).await.unwrap()
}

/// The command ended `Succeeded` with one terminal update, one delivery,
/// and fakehw ran it once.
async fn assert_ended_once(stack: &DevStack, node: &Node, cmd: &str) {
    let outcome = stack.await_command(cmd, DEADLINE).await.unwrap();
    assert_eq!(outcome.state, CommandStatus::Succeeded, "{outcome:?}");
    let updates = stack.command_updates(cmd).unwrap();
    assert_eq!(updates.iter().filter(|u| u.state.is_terminal()).count(), 1, "one terminal update: {updates:?}");
    assert_eq!(execution_count(node, cmd), 1, "{cmd} ran once");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_killed_while_a_held_command_runs_rehomes_its_node_and_the_command_ends_once() {
    let scenario = "a_gateway_killed_while_a_held_command_runs_rehomes_its_node_and_the_command_ends_once";
    let specs = ["g1", "g2", "g3"].map(GatewaySpec::new).to_vec();
    let Some(mut fleet) = fleet(scenario, specs).await else { return };
    let pool = fleet.env.must_create_pool("any", None).await;
    let (mut node, id) = fleet.must_adopt_on("rehomed", &pool, "g1").await;
    let epoch = fleet.await_open_session(&id, 1, |_| true).await.epoch;
    let cmd = enqueue_held(fleet.stack(), &id, 1_500).await;
    await_command_state(fleet.stack(), &cmd, CommandStatus::Running).await;

    let killed = Instant::now();
    fleet.gateway("g1").kill().await.unwrap();
    let moved = fleet.await_open_session(&id, epoch + 1, |g| g != "g1").await;
    let took = killed.elapsed();
    eprintln!("{scenario}: re-homed on {} in {took:.2?}", moved.gateway_id);
    assert!(took <= REHOME_BOUND, "re-homed in {took:?}, over {REHOME_BOUND:?}");
    assert_eq!(fleet.stack().node(&id).unwrap().unwrap().gateway_id, moved.gateway_id, "its home is recorded");

    assert_ended_once(fleet.stack(), &node, &cmd).await;
    let next = fleet.stack().enqueue_command(&id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
    assert_ended_once(fleet.stack(), &node, &next).await;
    node.stop().await;
    fleet.env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_gateway_whose_node_moved_is_fenced_when_it_wakes_and_delivers_nothing_twice() {
    let scenario = "a_paused_gateway_whose_node_moved_is_fenced_when_it_wakes_and_delivers_nothing_twice";
    let specs = ["g1", "g2"].map(GatewaySpec::new).to_vec();
    let Some(mut fleet) = fleet(scenario, specs).await else { return };
    let pool = fleet.env.must_create_pool("any", None).await;
    let (mut node, id) = fleet.must_adopt_on("zombie", &pool, "g1").await;
    let epoch = fleet.await_open_session(&id, 1, |_| true).await.epoch;
    // Shorter than bcd's liveness (three 500 ms intervals): its result goes
    // to the paused gateway, unacknowledged, before bcd gives up on it.
    let cmd = enqueue_held(fleet.stack(), &id, 300).await;
    await_command_state(fleet.stack(), &cmd, CommandStatus::Running).await;

    fleet.gateway("g1").pause().unwrap();
    let moved = fleet.await_open_session(&id, epoch + 1, |g| g == "g2").await;
    // The result bcd journaled reaches g2; a command made now goes there.
    assert_ended_once(fleet.stack(), &node, &cmd).await;
    let during =
        fleet.stack().enqueue_command(&id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
    assert_ended_once(fleet.stack(), &node, &during).await;

    let delivered: Vec<u32> =
        [&cmd, &during].iter().map(|c| fleet.stack().command(c).unwrap().unwrap().deliveries).collect();
    fleet.gateway("g1").resume().unwrap();
    // The zombie wakes and ends its old session: its row, which nothing
    // else closes, is closed when it has. What it read from that session
    // (the heartbeats and the result it never acknowledged) it tries to
    // write, fenced; under load its HTTP/2 connection may take bcd's reset
    // before the session reads those frames, and then it tries nothing.
    // Either way it changes nothing (below), and every write it tried was
    // fenced, and counted in the store.
    fleet
        .stack()
        .await_until("g1 to end its old session", DEADLINE, |v| {
            v.node_sessions(&id).iter().any(|s| s.epoch == epoch && s.disconnected_at_ms.is_some()).then_some(())
        })
        .await
        .unwrap();
    let g1 = fleet.gateway("g1");
    let tried = g1.log().iter().filter(|l| l.contains("session-fenced")).count() as u64;
    eprintln!("{scenario}: the woken gateway tried {tried} write(s) for the moved node, each fenced");
    if tried > 0 {
        fleet
            .stack()
            .await_until("the store to count g1's fenced writes", DEADLINE, |v| {
                v.gateways().iter().any(|g| g.id == "g1" && g.fenced_writes >= 1).then_some(())
            })
            .await
            .unwrap();
    }
    assert_eq!(fleet.fenced_writes("g2"), 0);
    // The zombie delivered nothing: the deliveries are g1's first and g2's
    // (the command not done when the node moved is delivered again on its
    // new session, and bcd answers it from its journal), and the node's
    // journal accepted each command once.
    for (c, before) in [&cmd, &during].into_iter().zip(delivered) {
        let row = fleet.stack().command(c).unwrap().unwrap();
        assert_eq!(row.deliveries, before, "no delivery of {c} after g1 woke");
        let accepted = node.logs().text().matches(&format!("msg=dispatch.accepted command_id={c} ")).count();
        assert_eq!(accepted, 1, "bcd accepted {c} once");
        assert_eq!(execution_count(&node, c), 1, "{c} ran once");
        let updates = fleet.stack().command_updates(c).unwrap();
        assert_eq!(updates.iter().filter(|u| u.state.is_terminal()).count(), 1, "{updates:?}");
    }
    // The node stays where it is; the woken gateway delivers nothing new.
    let after = fleet.stack().enqueue_command(&id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
    assert_ended_once(fleet.stack(), &node, &after).await;
    assert_eq!(fleet.stack().command(&after).unwrap().unwrap().deliveries, 1);
    assert_eq!(fleet.stack().view(|v| v.open_session(&id)).unwrap().map(|s| s.epoch), Some(moved.epoch));
    node.stop().await;
    fleet.env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn three_gateways_ninety_seconds_apart_mark_no_node_unreachable_and_the_skewed_ones_take_over() {
    let scenario = "three_gateways_ninety_seconds_apart_mark_no_node_unreachable_and_the_skewed_ones_take_over";
    let spec =
        |id: &str, offset: i64| GatewaySpec { clock_offset_s: offset, liveness_ms: 5_000, ..GatewaySpec::new(id) };
    let specs = vec![spec("ahead", 90), spec("behind", -90), spec("ontime", 0)];
    let Some(mut fleet) = fleet(scenario, specs).await else { return };
    let pool = fleet.env.must_create_pool("any", None).await;
    let mut nodes = Vec::new();
    for home in ["ahead", "behind", "ontime"] {
        nodes.push(fleet.must_adopt_on(&format!("skew-{home}"), &pool, home).await);
    }
    // diag.nvml settles through each gateway.
    for (node, id) in &nodes {
        let cmd = fleet.stack().enqueue_command(id, "diag.nvml", json!({}), CommandOptions::default()).await.unwrap();
        assert_ended_once(fleet.stack(), node, &cmd).await;
    }
    // Longer than the liveness timeout, every gateway beating.
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    fleet.assert_no_unreachable_mark();

    let (ontime_node, ontime_id) = &nodes[2];
    let epoch = fleet.await_open_session(ontime_id, 1, |_| true).await.epoch;
    fleet.gateway("ontime").kill().await.unwrap();
    let moved = fleet.await_open_session(ontime_id, epoch + 1, |g| g == "ahead" || g == "behind").await;
    let cmd =
        fleet.stack().enqueue_command(ontime_id, "diag.nvml", json!({}), CommandOptions::default()).await.unwrap();
    assert_ended_once(fleet.stack(), ontime_node, &cmd).await;
    eprintln!("{scenario}: the on-time gateway's node moved to {}", moved.gateway_id);
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    fleet.assert_no_unreachable_mark();
    for (mut node, _) in nodes {
        node.stop().await;
    }
    fleet.env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_gateway_restarted_at_once_with_nodes_connected_loses_nothing_and_runs_nothing_twice() {
    let scenario = "every_gateway_restarted_at_once_with_nodes_connected_loses_nothing_and_runs_nothing_twice";
    let specs = ["g1", "g2", "g3"].map(GatewaySpec::new).to_vec();
    let Some(mut fleet) = fleet(scenario, specs).await else { return };
    let pool = fleet.env.must_create_pool("any", None).await;
    let mut adopted = Vec::new();
    for home in ["g1", "g2", "g3"] {
        adopted.push(fleet.must_adopt_on(&format!("restart-{home}"), &pool, home).await);
    }
    let mut nodes = Vec::new();
    for (node, id) in adopted {
        let epoch = fleet.await_open_session(&id, 1, |_| true).await.epoch;
        let cmd = enqueue_held(fleet.stack(), &id, 3_000).await;
        nodes.push((node, id, epoch, cmd));
    }
    for (_, _, _, cmd) in &nodes {
        await_command_state(fleet.stack(), cmd, CommandStatus::Running).await;
    }
    for g in &mut fleet.gateways {
        g.kill().await.unwrap();
    }
    for g in &mut fleet.gateways {
        g.restart().await.unwrap();
    }
    for (node, id, epoch, cmd) in &nodes {
        fleet.await_open_session(id, epoch + 1, |_| true).await;
        assert_ended_once(fleet.stack(), node, cmd).await;
        let next =
            fleet.stack().enqueue_command(id, "logs.collect", json!({}), CommandOptions::default()).await.unwrap();
        assert_ended_once(fleet.stack(), node, &next).await;
        assert_eq!(fleet.stack().node(id).unwrap().unwrap().state, devstack::NodeState::Adopted);
    }
    for (mut node, _, _, _) in nodes {
        node.stop().await;
    }
    fleet.env.report();
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_restarted_while_reports_and_updates_flow_loses_and_doubles_nothing() {
    let scenario = "postgres_restarted_while_reports_and_updates_flow_loses_and_doubles_nothing";
    let specs = ["g1", "g2"].map(GatewaySpec::new).to_vec();
    let Some(fleet) = fleet(scenario, specs).await else { return };
    let pool = fleet.env.must_create_pool("any", None).await;
    let (mut a, a_id) = fleet.must_adopt_on("pg-a", &pool, "g1").await;
    let (mut b, b_id) = fleet.must_adopt_on("pg-b", &pool, "g2").await;
    let mut commands = Vec::new();
    for i in 0..4u64 {
        for (node, id) in [(&a, &a_id), (&b, &b_id)] {
            let cmd = enqueue_held(fleet.stack(), id, 200 + 100 * i).await;
            commands.push((node, cmd));
        }
    }
    await_command_state(fleet.stack(), &commands[0].1, CommandStatus::Running).await;
    fleet.cluster.as_ref().expect("a cluster").restart().expect("PostgreSQL restarts");
    for (node, cmd) in &commands {
        assert_ended_once(fleet.stack(), node, cmd).await;
    }
    for id in [&a_id, &b_id] {
        fleet.await_open_session(id, 1, |_| true).await;
        let cmd =
            fleet.stack().enqueue_command(id, "inventory.refresh", json!({}), CommandOptions::default()).await.unwrap();
        assert_eq!(fleet.stack().await_command(&cmd, DEADLINE).await.unwrap().state, CommandStatus::Succeeded);
    }
    a.stop().await;
    b.stop().await;
    fleet.env.report();
}
