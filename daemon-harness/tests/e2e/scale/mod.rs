//! A fleet against one control plane (issue 15): `bcd sim` processes of
//! many agents joined on one token, all adopted, none lost and none
//! doubled; with several gateways, the one holding the most sessions killed
//! and every one of its nodes back on the others, each command once; then
//! the control plane restarted with every agent connected, every agent
//! back, no node adopted twice, no command lost or run twice.
//!
//! The CI-sized runs (500 agents; they assert, they do not time) run on the
//! in-process stack over SQLite and on three gateway processes over
//! PostgreSQL; `bench_scale` (ignored) is `cargo xtask bench scale --nodes
//! N [--procs P] [--gateways G] [--store sqlite|postgres]`
//! (docs/harness.md, "The scale benchmark"): the same run at
//! `BCD_SCALE_NODES` agents in `BCD_SCALE_PROCS` processes on
//! `BCD_SCALE_GATEWAYS` gateways over `BCD_SCALE_STORE`, its figures printed.

mod measure;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use daemon_harness::node::Background;
use devstack::{CommandOptions, CommandStatus, FleetCounts, NodeState};
use serde_json::json;

use crate::common::SEED;
use crate::plane::{Plane, Topology};
use measure::{
    Floor, agents_parent, config_node_id, cpu_times, crypto_floor, executions, peak_rss, quantiles, resumed_sessions,
    rss, unix_ms,
};

/// The heartbeat of a scale run: one Ping per session every 10 s (the
/// scenarios' 500 ms would be 20,000 Pings a second at 10,000 sessions).
const HEARTBEAT_MS: u32 = 10_000;

/// How often the run reads the fleet's counts (one aggregate query).
const POLL: Duration = Duration::from_millis(100);

/// How often it reads the store's counts while not all are connected.
const SLOW_POLL: Duration = Duration::from_secs(1);

/// How often the run reads the connected count when that is the store's
/// (gateway processes): an aggregate over the open sessions, which costs
/// PostgreSQL the cores the fleet needs. The figures come from the
/// sessions' rows, so this changes only when the run sees an end.
const STORE_POLL: Duration = Duration::from_millis(500);

/// A fleet: how many agents, in how many `bcd sim` processes, against
/// which control plane.
#[derive(Clone, Copy, Debug)]
struct Scale {
    nodes: usize,
    procs: usize,
    topology: Topology,
}

impl Scale {
    /// How long any phase may take before the run fails.
    fn deadline(&self) -> Duration {
        Duration::from_secs(60).max(Duration::from_millis(30 * self.nodes as u64))
    }
}

/// What a run measured.
#[derive(Debug)]
struct Figures {
    joined: Duration,
    connected: Duration,
    adopted: Duration,
    join_to_adopted: [Duration; 3],
    stack_peak_rss: u64,
    stack_rss_per_session: u64,
    sim_rss_per_agent: u64,
    /// CPU time used until all were adopted: the stack's (this process's,
    /// since the fleet started) and every bcd sim's.
    cpu_until_adopted: [Duration; 2],
    floor: Floor,
    restart_connected: Duration,
    restart_connected_since_shutdown: Duration,
    /// The restart's shutdown (Drain to every session, the servers stopped).
    restart_shutdown: Duration,
    /// The restart's start on the same file.
    restart_start: Duration,
    /// When 50 %, 90 % and 99 % were connected again after the start.
    restart_quantiles: [Duration; 3],
    /// CPU time the stack and every bcd sim used from the stack's start on
    /// its file until all were connected again.
    cpu_until_back: [Duration; 2],
    /// The agents' connections over the whole run that resumed a TLS
    /// session, and all of them (bcd's `session.connected` lines).
    resumed: [usize; 2],
    /// With several gateways: the one killed with every agent connected.
    failover: Option<Failover>,
    /// How many unreachable marks the run made (each of a live node).
    marks: usize,
}

/// A gateway killed with every agent connected, and its nodes' way back.
#[derive(Debug)]
struct Failover {
    /// The gateway killed, and how many nodes it held.
    gateway: String,
    nodes: usize,
    /// When each node's new session opened, from the kill: p50, p99, and
    /// the last (all back).
    quantiles: [Duration; 3],
}

#[tokio::test(flavor = "multi_thread")]
async fn five_hundred_sim_agents_are_adopted_and_survive_a_restart() {
    let name = "five_hundred_sim_agents_are_adopted_and_survive_a_restart";
    if let Some(figures) = run(name, Scale { nodes: 500, procs: 1, topology: Topology::Sqlite }).await {
        eprintln!("{name}: {figures:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn five_hundred_sim_agents_on_three_gateways_over_postgres_fail_over_and_survive_a_restart() {
    let name = "five_hundred_sim_agents_on_three_gateways_over_postgres_fail_over_and_survive_a_restart";
    let scale = Scale { nodes: 500, procs: 1, topology: Topology::Postgres { gateways: 3 } };
    if let Some(figures) = run(name, scale).await {
        eprintln!("{name}: {figures:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench scale --nodes N [--procs P] [--gateways G] [--store S]"]
async fn bench_scale() {
    let var = |k: &str, default: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let gateways = var("BCD_SCALE_GATEWAYS", 1).max(1);
    let topology = match std::env::var("BCD_SCALE_STORE").as_deref() {
        Ok("postgres") => Topology::Postgres { gateways },
        _ if gateways > 1 => panic!("several gateways share a PostgreSQL store: BCD_SCALE_STORE=postgres"),
        _ => Topology::Sqlite,
    };
    let scale = Scale { nodes: var("BCD_SCALE_NODES", 10_000), procs: var("BCD_SCALE_PROCS", 4).max(1), topology };
    devstack::raise_open_file_limit();
    let Some(f) = run("bench_scale", scale).await else { return };
    print_figures(&scale, &f);
}

/// The figures of a benchmark run, one per line.
fn print_figures(scale: &Scale, f: &Figures) {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let kib = |b: u64| b as f64 / 1024.0;
    let plane = match scale.topology {
        Topology::Sqlite => "the in-process stack on SQLite".to_string(),
        Topology::Postgres { gateways: 1 } => "the in-process stack on PostgreSQL".to_string(),
        Topology::Postgres { gateways } => format!("{gateways} gateway processes on PostgreSQL"),
    };
    println!("scale: {} agents in {} bcd sim process(es), {cores} core(s), {plane}", scale.nodes, scale.procs);
    println!("all joined:    {:.2?}", f.joined);
    println!("all connected: {:.2?}", f.connected);
    println!("all adopted:   {:.2?}", f.adopted);
    let [p50, p99, max] = f.join_to_adopted;
    println!("join to adopted: p50 {p50:.2?}, p99 {p99:.2?}, max {max:.2?}");
    println!(
        "stack: peak RSS {:.1} MiB, {:.1} KiB per connected session (RSS with all connected minus before the fleet, / N)",
        kib(f.stack_peak_rss) / 1024.0,
        kib(f.stack_rss_per_session)
    );
    println!("bcd sim: {:.1} KiB per agent (RSS with all connected, / agents)", kib(f.sim_rss_per_agent));
    let [stack_cpu, sim_cpu] = f.cpu_until_adopted;
    let per_node = |d: Duration| d / scale.nodes as u32;
    println!(
        "cpu until all adopted: stack {stack_cpu:.2?}, bcd sim {sim_cpu:.2?} (a node's {:.2?} on the stack and {:.2?} on bcd; {:.2?} of {cores} cores' {:.2?})",
        per_node(stack_cpu),
        per_node(sim_cpu),
        stack_cpu + sim_cpu,
        f.adopted * cores as u32
    );
    println!(
        "crypto floor: {:.2?} (the join's and first session's P-256, X25519 and Ed25519 operations, a node's {:.0?} on bcd and {:.0?} on the stack, x N / {cores} cores); wall (all adopted) / floor = {:.1}",
        f.floor.total,
        f.floor.node,
        f.floor.stack,
        f.adopted.as_secs_f64() / f.floor.total.as_secs_f64().max(1e-9)
    );
    if let Some(fo) = &f.failover {
        let [q50, q99, all] = fo.quantiles;
        println!(
            "failover: {} killed with {} of {} nodes; all back on the others {all:.2?} after the kill (each node's new session: p50 {q50:.2?}, p99 {q99:.2?}); 0 lost, 0 doubled, every command once",
            fo.gateway, fo.nodes, scale.nodes
        );
    }
    println!(
        "restart: all {} connected again {:.2?} after the stack was up ({:.2?} after its shutdown began: shutdown {:.2?}, start {:.2?}); no node adopted twice, no command lost or run twice",
        scale.nodes, f.restart_connected, f.restart_connected_since_shutdown, f.restart_shutdown, f.restart_start
    );
    println!(
        "liveness: {} live node(s) marked unreachable over the run (a mark of a live node is a false one)",
        f.marks
    );
    let [q50, q90, q99] = f.restart_quantiles;
    println!("restart: 50 % connected again after {q50:.2?}, 90 % after {q90:.2?}, 99 % after {q99:.2?}");
    let [stack_cpu, sim_cpu] = f.cpu_until_back;
    println!(
        "cpu until all connected again: stack {stack_cpu:.2?}, bcd sim {sim_cpu:.2?} (a reconnection's {:.2?} on the stack and {:.2?} on bcd, its command's run included; {:.2?} of {cores} cores' {:.2?})",
        per_node(stack_cpu),
        per_node(sim_cpu),
        stack_cpu + sim_cpu,
        f.restart_connected * cores as u32
    );
    let [resumed, connections] = f.resumed;
    let ([bcd_resumed, stack_resumed], [bcd_full, stack_full]) = (f.floor.resumed, f.floor.full);
    println!(
        "tls: {resumed} of the run's {connections} connections resumed a session; a reconnection's crypto floor {bcd_resumed:.0?} on bcd and {stack_resumed:.0?} on the stack resumed, {bcd_full:.0?} and {stack_full:.0?} in full"
    );
}

/// One run; None when a prerequisite is missing (skipped).
async fn run(name: &str, scale: Scale) -> Option<Figures> {
    let mut plane = Plane::start(name, scale.topology, HEARTBEAT_MS, |_| {}).await?;
    let deadline = scale.deadline();
    let pool = plane.env.must_create_pool("fleet", Some(8)).await;
    let token = plane.env.must_mint_token(&pool, scale.nodes as u32).await;
    let stack_pids = plane.pids();
    let stack_rss =
        |pids: &[u32]| rss(std::process::id()).unwrap_or(0) + pids.iter().copied().filter_map(rss).sum::<u64>();
    let rss_before = stack_rss(&stack_pids);

    // One node directory (config.toml, data dir) per bcd sim process.
    let shares: Vec<usize> =
        (0..scale.procs).map(|p| scale.nodes / scale.procs + usize::from(p < scale.nodes % scale.procs)).collect();
    let mut procs = Vec::new();
    for (p, share) in shares.iter().enumerate() {
        let node = plane.env.must_make_node_in(&agents_parent(), &format!("fleet-{p}"), "hgx-h100", SEED).await;
        procs.push((node, *share, (1_000_000 + p * 20_000).to_string()));
    }
    let cpu_before = cpu_times(&stack_pids, &[])[0];
    let started_ms = unix_ms();
    let started = Instant::now();
    let mut sims: Vec<Background> = Vec::new();
    for (node, share, seed) in &procs {
        let config = node.config().to_string_lossy().into_owned();
        let share = share.to_string();
        let args = ["sim", "--config", &config, "--nodes", &share, "--seed", seed];
        sims.push(node.spawn_to_file(&args, Some(&token)).await.expect("bcd sim starts"));
    }
    let pids: Vec<u32> = sims.iter().filter_map(|s| s.pid()).collect();

    // Joined, connected, adopted: the first read that sees all N.
    let mut at: [Option<Duration>; 3] = [None; 3];
    let mut sim_rss = 0;
    let mut stack_rss_connected = 0;
    let counts = poll(&plane, scale.nodes, deadline, "every agent joined, connected and adopted", &mut sims, |c| {
        let n = scale.nodes as u64;
        assert_eq!(c.rejected, 0, "no node rejected: {c:?}");
        assert!(c.nodes <= n, "no more nodes than agents (a doubled join): {c:?}");
        for (i, done) in [c.nodes == n, c.sessions == n, c.adopted == n].into_iter().enumerate() {
            if done && at[i].is_none() {
                at[i] = Some(started.elapsed());
            }
        }
        at.iter().all(Option::is_some)
    })
    .await;
    let [stack_cpu, sims_cpu] = cpu_times(&stack_pids, &pids);
    let cpu_until_adopted = [stack_cpu.saturating_sub(cpu_before), sims_cpu];
    if counts.sessions == scale.nodes as u64 {
        stack_rss_connected = stack_rss(&stack_pids);
        sim_rss = pids.iter().copied().filter_map(rss).sum::<u64>();
    }
    let stack_peak_rss = peak_rss(&stack_pids).unwrap_or(0);

    // Every agent a node, once; every node adopted, from its join.
    let nodes = plane.stack().nodes().unwrap();
    assert_eq!(nodes.len(), scale.nodes, "one node per agent");
    let hardware: BTreeSet<&str> = nodes.iter().map(|n| n.hardware_id.as_str()).collect();
    assert_eq!(hardware.len(), scale.nodes, "distinct machines");
    let mut latencies: Vec<i64> = Vec::new();
    let mut joined_last = 0;
    for n in &nodes {
        assert_eq!(n.state, NodeState::Adopted, "{n:?}");
        assert!(n.created_at_ms >= started_ms, "joined by this run: {n:?}");
        joined_last = joined_last.max(n.created_at_ms);
        latencies.push(n.adopted_at_ms.expect("an adopted node has its time") - n.created_at_ms);
    }
    let tokens = plane.stack().join_tokens(&pool).unwrap();
    assert_eq!(tokens[0].uses as usize, scale.nodes, "one use per agent, none spent twice");

    // Where each node's agent keeps its fake root (its command counters).
    let mut dirs: BTreeMap<String, std::path::PathBuf> = BTreeMap::new();
    for (node, share, _) in &procs {
        for i in 0..*share {
            let dir = node.data_dir().join("sim").join(i.to_string());
            dirs.insert(config_node_id(&dir.join("config.toml")), dir);
        }
    }
    assert_eq!(dirs.len(), scale.nodes, "every agent's config.toml names its own node");
    let adopted: BTreeMap<String, Option<i64>> = nodes.iter().map(|n| (n.id.clone(), n.adopted_at_ms)).collect();
    for n in &nodes {
        let acceptance = n.acceptance_command_id.as_deref().expect("an adopted node ran its acceptance");
        assert_eq!(executions(&dirs[&n.id], acceptance), 1, "{acceptance} on {} ran once", n.id);
    }

    // A command for every node, then the restart with every agent connected.
    let mut commands = Vec::new();
    for n in &nodes {
        let id = plane
            .stack()
            .enqueue_command(&n.id, "inventory.refresh", json!({}), CommandOptions::default())
            .await
            .unwrap();
        commands.push((n.id.clone(), id));
    }
    let failover = match plane.gateways.len() {
        0 | 1 => None,
        _ => Some(fail_over(&mut plane, &scale, &mut sims).await),
    };
    let shutdown = Instant::now();
    let (restart_shutdown, restart_start) = plane.restart().await;
    let up = Instant::now();
    let up_ms = unix_ms();
    let stack_pids = plane.pids();
    let cpu_at_up = cpu_times(&stack_pids, &pids);
    let mut cpu_until_back = None;
    poll(&plane, scale.nodes, deadline, "every agent connected again after the restart", &mut sims, |c| {
        if cpu_until_back.is_none() && c.sessions == scale.nodes as u64 {
            let now = cpu_times(&stack_pids, &pids);
            cpu_until_back = Some([0, 1].map(|i| now[i].saturating_sub(cpu_at_up[i])));
        }
        cpu_until_back.is_some() && c.commands_done == c.commands
    })
    .await;
    let cpu_until_back = cpu_until_back.expect("all connected again");
    // When each node's session opened again, from the start, by the store.
    let open = plane.stack().view(|v| v.open_sessions()).unwrap();
    assert_eq!(open.len(), scale.nodes, "every node has a session again");
    let again: Vec<i64> = open.iter().map(|s| s.connected_at_ms - up_ms).collect();
    let [q50, q90, q99, restart_connected] = quantiles(again, [0.5, 0.9, 0.99, 1.0]);
    let restart_quantiles = [q50, q90, q99];
    let restart_connected_since_shutdown = restart_connected + (up - shutdown);

    let after = plane.stack().nodes().unwrap();
    assert_eq!(after.len(), scale.nodes, "no node joined again");
    for n in &after {
        assert_eq!(adopted.get(&n.id), Some(&n.adopted_at_ms), "{} adopted once, not again", n.id);
        assert_eq!(n.state, NodeState::Adopted);
    }
    for (node_id, cmd) in &commands {
        let row = plane.stack().view(|v| v.command(cmd)).unwrap().expect("the command is kept");
        assert_eq!(row.state, CommandStatus::Succeeded, "{cmd} on {node_id}: {row:?}");
        assert_eq!(executions(&dirs[node_id], cmd), 1, "{cmd} on {node_id} ran exactly once");
    }
    let mut resumed = [0, 0];
    for (sim, (node, _, _)) in sims.into_iter().zip(&procs) {
        assert_eq!(sim.stop().await, Some(0), "bcd sim stops cleanly on SIGTERM");
        let log = node.log_file_text();
        assert!(!log.contains(&token), "bcd sim never prints the token");
        let [r, n] = resumed_sessions(&log);
        resumed = [resumed[0] + r, resumed[1] + n];
    }

    // Every agent reconnected at least once, and the store's ticket keys
    // resume a session across the restart (and a failover). Not every
    // one: crypto/tls drops a session whose resumption failed for any
    // reason, a connection cut by the stopping stack included.
    assert!(resumed[0] * 10 >= scale.nodes * 9, "nine reconnections in ten resumed their TLS session: {resumed:?}");
    // Every node was live throughout (the killed gateway's came back within
    // the liveness timeout): a mark is a live node judged unreachable.
    let marks = plane.stack().fleet_facts().expect("the fleet's facts").marks;
    if let Some(first) = marks.first() {
        eprintln!("{name}: {} live node(s) marked unreachable, the first {first:?}", marks.len());
    }
    let floor = crypto_floor(&procs[0].0, scale.nodes).await;
    plane.env.report();
    let per_session = stack_rss_connected.saturating_sub(rss_before) / scale.nodes as u64;
    Some(Figures {
        joined: Duration::from_millis((joined_last - started_ms).max(0) as u64),
        connected: at[1].unwrap(),
        adopted: at[2].unwrap(),
        join_to_adopted: quantiles(latencies, [0.5, 0.99, 1.0]),
        stack_peak_rss,
        stack_rss_per_session: per_session,
        sim_rss_per_agent: sim_rss / scale.nodes as u64,
        cpu_until_adopted,
        floor,
        restart_connected,
        restart_connected_since_shutdown,
        restart_shutdown,
        restart_start,
        restart_quantiles,
        cpu_until_back,
        resumed,
        failover,
        marks: marks.len(),
    })
}

/// Reads the fleet's counts every [`POLL`] (every [`STORE_POLL`] when the
/// connected count is the store's) until `done` says so, failing at the
/// deadline or when a bcd sim exits. The live sessions are counted at
/// every read; the store's counts (a scan of every node and command, under
/// the store's lock: some 6 ms at 10,000 nodes) only once a [`SLOW_POLL`]
/// until all `nodes` are connected, and at every read after that, when what
/// remains to be seen is adoption and commands. So the watching costs the
/// stack it measures little.
async fn poll(
    plane: &Plane,
    nodes: usize,
    deadline: Duration,
    what: &str,
    sims: &mut [Background],
    mut done: impl FnMut(&FleetCounts) -> bool,
) -> FleetCounts {
    let until = Instant::now() + deadline;
    let mut tick = tokio::time::interval(if plane.gateways.is_empty() { POLL } else { STORE_POLL });
    let mut counts = FleetCounts::default();
    let mut read_at: Option<Instant> = None;
    loop {
        tick.tick().await;
        let sessions = plane.sessions();
        if sessions >= nodes as u64 || read_at.is_none_or(|at| at.elapsed() >= SLOW_POLL) {
            counts = plane.stack().fleet().expect("the fleet's counts");
            read_at = Some(Instant::now());
        }
        counts.sessions = sessions;
        if done(&counts) {
            return counts;
        }
        assert!(sims.iter_mut().all(|s| s.running()), "a bcd sim ended early; {counts:?}");
        assert!(Instant::now() < until, "{what}: not within {deadline:?}; last {counts:?}");
    }
}

/// Kills the gateway holding the most sessions, with every agent
/// connected, and waits until each of its nodes has a session on another
/// gateway; starts it again after. The figures are the store's: when each
/// node's new session opened, from the kill (the gateways and this
/// process share the machine's clock). The wait reads the count by
/// gateway every [`STORE_POLL`] and nothing else.
async fn fail_over(plane: &mut Plane, scale: &Scale, sims: &mut [Background]) -> Failover {
    let by_gateway = plane.sessions_by_gateway();
    let (victim, _) = by_gateway.iter().max_by_key(|(_, n)| *n).cloned().expect("sessions on some gateway");
    let open = plane.stack().view(|v| v.open_sessions()).unwrap();
    let moving: BTreeSet<String> = open.into_iter().filter(|s| s.gateway_id == victim).map(|s| s.node_id).collect();
    let killed_ms = unix_ms();
    plane.gateway(&victim).kill().await.expect("the gateway is killed");
    let until = Instant::now() + scale.deadline();
    loop {
        tokio::time::sleep(STORE_POLL).await;
        let by_gateway = plane.sessions_by_gateway();
        let left = by_gateway.iter().find(|(g, _)| *g == victim).map_or(0, |(_, n)| *n);
        if left == 0 && by_gateway.iter().map(|(_, n)| n).sum::<u64>() == scale.nodes as u64 {
            break;
        }
        assert!(sims.iter_mut().all(|s| s.running()), "a bcd sim ended early; {left} of {victim}'s nodes not back");
        assert!(
            Instant::now() < until,
            "every node of {victim} back on another gateway: {left} not within {:?}",
            scale.deadline()
        );
    }
    let open = plane.stack().view(|v| v.open_sessions()).unwrap();
    let back: Vec<i64> = open
        .iter()
        .filter(|s| moving.contains(&s.node_id))
        .inspect(|s| assert_ne!(s.gateway_id, victim, "{} is back on another gateway", s.node_id))
        .map(|s| s.connected_at_ms - killed_ms)
        .collect();
    assert_eq!(back.len(), moving.len(), "every node of {victim} has a session again");
    plane.gateway(&victim).restart().await.expect("the killed gateway starts again");
    Failover { gateway: victim, nodes: moving.len(), quantiles: quantiles(back, [0.5, 0.99, 1.0]) }
}
