//! A fleet against one dev stack (issue 15): `bcd sim` processes of many
//! agents joined on one token, all adopted, none lost and none doubled;
//! then the stack restarted on its file with every agent connected, every
//! agent back, no node adopted twice, no command lost or run twice.
//!
//! `five_hundred_sim_agents_are_adopted_and_survive_a_restart` is the
//! CI-sized run (it asserts, it does not time); `bench_scale` (ignored) is
//! `cargo xtask bench scale --nodes N [--procs P]` (docs/harness.md, "The
//! scale benchmark"): the same run at `BCD_SCALE_NODES` agents in
//! `BCD_SCALE_PROCS` processes, with its figures printed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use daemon_harness::node::{Background, Node};
use devstack::{CommandOptions, CommandStatus, FleetCounts, NodeState, StoreLocation};
use serde_json::json;

use crate::common::{Env, SEED};

/// The heartbeat of a scale run: one Ping per session every 10 s (the
/// scenarios' 500 ms would be 20,000 Pings a second at 10,000 sessions).
const HEARTBEAT_MS: u32 = 10_000;

/// How often the run reads the fleet's counts (one aggregate query).
const POLL: Duration = Duration::from_millis(100);

/// How often it reads the store's counts while not all are connected.
const SLOW_POLL: Duration = Duration::from_secs(1);

/// A fleet: how many agents, in how many `bcd sim` processes.
#[derive(Clone, Copy, Debug)]
struct Scale {
    nodes: usize,
    procs: usize,
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
}

#[tokio::test(flavor = "multi_thread")]
async fn five_hundred_sim_agents_are_adopted_and_survive_a_restart() {
    let name = "five_hundred_sim_agents_are_adopted_and_survive_a_restart";
    if let Some(figures) = run(name, Scale { nodes: 500, procs: 1 }).await {
        eprintln!("{name}: {figures:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a benchmark: cargo xtask bench scale --nodes N [--procs P]"]
async fn bench_scale() {
    let var = |k: &str, default: usize| std::env::var(k).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let scale = Scale { nodes: var("BCD_SCALE_NODES", 10_000), procs: var("BCD_SCALE_PROCS", 4).max(1) };
    raise_open_file_limit();
    let Some(f) = run("bench_scale", scale).await else { return };
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let kib = |b: u64| b as f64 / 1024.0;
    println!("scale: {} agents in {} bcd sim process(es), {cores} core(s)", scale.nodes, scale.procs);
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
    println!(
        "restart: all {} connected again {:.2?} after the stack was up ({:.2?} after its shutdown began: shutdown {:.2?}, start {:.2?}); no node adopted twice, no command lost or run twice",
        scale.nodes, f.restart_connected, f.restart_connected_since_shutdown, f.restart_shutdown, f.restart_start
    );
    let [q50, q90, q99] = f.restart_quantiles;
    println!("restart: 50 % connected again after {q50:.2?}, 90 % after {q90:.2?}, 99 % after {q99:.2?}");
    let [stack_cpu, sim_cpu] = f.cpu_until_back;
    println!(
        "cpu until all connected again: stack {stack_cpu:.2?}, bcd sim {sim_cpu:.2?} ({:.2?} of {cores} cores' {:.2?})",
        stack_cpu + sim_cpu,
        f.restart_connected * cores as u32
    );
}

/// One run; None when a prerequisite is missing (skipped).
async fn run(name: &str, scale: Scale) -> Option<Figures> {
    let store = tempfile::tempdir().unwrap();
    let path = store.path().join("devstack.sqlite");
    let mut env = Env::start_with(name, |o| {
        o.store = StoreLocation::File(path.clone());
        o.heartbeat_interval_ms = HEARTBEAT_MS;
    })
    .await?;
    let deadline = scale.deadline();
    let pool = env.must_create_pool("fleet", Some(8)).await;
    let token = env.must_mint_token(&pool, scale.nodes as u32).await;
    let rss_before = rss(std::process::id()).unwrap_or(0);

    // One node directory (config.toml, data dir) per bcd sim process.
    let shares: Vec<usize> =
        (0..scale.procs).map(|p| scale.nodes / scale.procs + usize::from(p < scale.nodes % scale.procs)).collect();
    let mut procs = Vec::new();
    for (p, share) in shares.iter().enumerate() {
        let node = env.must_make_node_in(&agents_parent(), &format!("fleet-{p}"), "hgx-h100", SEED).await;
        procs.push((node, *share, (1_000_000 + p * 20_000).to_string()));
    }
    let cpu_before = cpu_times(&[])[0];
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
    let counts = poll(&env, scale.nodes, deadline, "every agent joined, connected and adopted", &mut sims, |c| {
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
    let [stack_cpu, sims_cpu] = cpu_times(&pids);
    let cpu_until_adopted = [stack_cpu.saturating_sub(cpu_before), sims_cpu];
    if counts.sessions == scale.nodes as u64 {
        stack_rss_connected = rss(std::process::id()).unwrap_or(0);
        sim_rss = pids.iter().copied().filter_map(rss).sum::<u64>();
    }
    let stack_peak_rss = peak_rss().unwrap_or(0);

    // Every agent a node, once; every node adopted, from its join.
    let nodes = env.stack.nodes().unwrap();
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
    latencies.sort_unstable();
    let pick = |q: f64| Duration::from_millis(latencies[((latencies.len() - 1) as f64 * q).round() as usize] as u64);
    let tokens = env.stack.join_tokens(&pool).unwrap();
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
        let id =
            env.stack.enqueue_command(&n.id, "inventory.refresh", json!({}), CommandOptions::default()).await.unwrap();
        commands.push((n.id.clone(), id));
    }
    let shutdown = Instant::now();
    let (restart_shutdown, restart_start) = env.restart_stack().await;
    let up = Instant::now();
    let cpu_at_up = cpu_times(&pids);
    let mut cpu_until_back = [Duration::ZERO; 2];
    let mut back = None;
    // When half, 90 % and 99 % of the agents were connected again.
    let mut quantiles: [Option<Duration>; 3] = [None; 3];
    poll(&env, scale.nodes, deadline, "every agent connected again after the restart", &mut sims, |c| {
        for (at, q) in quantiles.iter_mut().zip([0.5, 0.9, 0.99]) {
            if at.is_none() && c.sessions as f64 >= scale.nodes as f64 * q {
                *at = Some(up.elapsed());
            }
        }
        if back.is_none() && c.sessions == scale.nodes as u64 {
            back = Some(up.elapsed());
            let now = cpu_times(&pids);
            cpu_until_back = [0, 1].map(|i| now[i].saturating_sub(cpu_at_up[i]));
        }
        back.is_some() && c.commands_done == c.commands
    })
    .await;
    let restart_connected = back.expect("all connected again");
    let restart_quantiles = quantiles.map(|q| q.expect("all connected again"));
    let restart_connected_since_shutdown = restart_connected + (up - shutdown);

    let after = env.stack.nodes().unwrap();
    assert_eq!(after.len(), scale.nodes, "no node joined again");
    for n in &after {
        assert_eq!(adopted.get(&n.id), Some(&n.adopted_at_ms), "{} adopted once, not again", n.id);
        assert_eq!(n.state, NodeState::Adopted);
    }
    for (node_id, cmd) in &commands {
        let row = env.stack.view(|v| v.command(cmd)).unwrap().expect("the command is kept");
        assert_eq!(row.state, CommandStatus::Succeeded, "{cmd} on {node_id}: {row:?}");
        assert_eq!(executions(&dirs[node_id], cmd), 1, "{cmd} on {node_id} ran exactly once");
    }
    for (sim, (node, _, _)) in sims.into_iter().zip(&procs) {
        assert_eq!(sim.stop().await, Some(0), "bcd sim stops cleanly on SIGTERM");
        let log = node.log_file_text();
        assert!(!log.contains(&token), "bcd sim never prints the token");
    }

    let floor = crypto_floor(&procs[0].0, scale.nodes).await;
    env.report();
    let per_session = stack_rss_connected.saturating_sub(rss_before) / scale.nodes as u64;
    Some(Figures {
        joined: Duration::from_millis((joined_last - started_ms).max(0) as u64),
        connected: at[1].unwrap(),
        adopted: at[2].unwrap(),
        join_to_adopted: [pick(0.5), pick(0.99), pick(1.0)],
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
    })
}

/// Reads the fleet's counts every [`POLL`] until `done` says so, failing at
/// the deadline or when a bcd sim exits. The live sessions are counted at
/// every read; the store's counts (a scan of every node and command, under
/// the store's lock: some 6 ms at 10,000 nodes) only once a [`SLOW_POLL`]
/// until all `nodes` are connected, and at every read after that, when what
/// remains to be seen is adoption and commands. So the watching costs the
/// stack it measures little.
async fn poll(
    env: &Env,
    nodes: usize,
    deadline: Duration,
    what: &str,
    sims: &mut [Background],
    mut done: impl FnMut(&FleetCounts) -> bool,
) -> FleetCounts {
    let until = Instant::now() + deadline;
    let mut tick = tokio::time::interval(POLL);
    let mut counts = FleetCounts::default();
    let mut read_at: Option<Instant> = None;
    loop {
        tick.tick().await;
        let sessions = env.stack.live_sessions();
        if sessions >= nodes as u64 || read_at.is_none_or(|at| at.elapsed() >= SLOW_POLL) {
            counts = env.stack.fleet().expect("the fleet's counts");
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

/// The crypto floor: the P-256, X25519 and Ed25519 operations one node's
/// join and first session cost (as counted in docs/harness.md, "The scale
/// benchmark"), each timed with the implementation that does it: bcd's
/// with Go's crypto (`bcd sim --crypto-floor`), the stack's TLS with ring
/// (rustls's provider) and the rest with pki's crates; times N, over the
/// cores.
async fn crypto_floor(node: &Node, nodes: usize) -> Floor {
    let out = node.run(&["sim", "--crypto-floor"], None, Duration::from_secs(60)).await.unwrap();
    assert!(out.success(), "{out:?}");
    let go: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let go = |k: &str| go[k].as_u64().unwrap_or_else(|| panic!("{k} in {go}")) as f64;
    let stack = StackCrypto::measure();
    let node_side = 3.0 * go("p256_sign_ns")
        + 3.0 * go("p256_verify_ns")
        + go("p256_keygen_ns")
        + go("p256_ecdh_ns")
        + 2.0 * go("x25519_ns")
        + 3.0 * go("ed25519_verify_ns");
    let stack_side = 2.0 * stack.tls_sign
        + stack.pki_sign
        + 4.0 * stack.verify
        + 2.0 * stack.tls_x25519
        + stack.pki_ecdh
        + 2.0 * stack.ed25519_sign;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) as f64;
    Floor {
        total: Duration::from_nanos(((node_side + stack_side) * nodes as f64 / cores) as u64),
        node: Duration::from_nanos(node_side as u64),
        stack: Duration::from_nanos(stack_side as u64),
    }
}

/// The crypto floor of a run, and what one node costs each side.
#[derive(Debug)]
struct Floor {
    total: Duration,
    node: Duration,
    stack: Duration,
}

/// The stack's operations, timed here (ns each).
struct StackCrypto {
    /// A TLS CertificateVerify signature (ring, P-256).
    tls_sign: f64,
    /// A certificate signature (pki: p256, RFC 6979).
    pki_sign: f64,
    /// A P-256 verification (pki and rustls both use ring's).
    verify: f64,
    /// A TLS key share: an X25519 key and the shared secret (ring).
    tls_x25519: f64,
    /// A JWE ECDH-ES open (p256).
    pki_ecdh: f64,
    /// An Ed25519 signature (ed25519-dalek).
    ed25519_sign: f64,
}

impl StackCrypto {
    fn measure() -> Self {
        use pki::Signer;
        const ROUNDS: u32 = 200;
        let msg = b"bcd crypto floor";
        let p256 = pki::keys::random_p256();
        let public_key = pki::PublicKey::P256(p256.public_key());
        let sig = Signer::sign(&p256, msg);
        let ed = pki::keys::random_ed25519();
        let peer = pki::keys::random_p256().public_key();
        let rng = ring::rand::SystemRandom::new();
        let alg = &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING;
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let tls_key = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let x25519_peer = ring::agreement::EphemeralPrivateKey::generate(&ring::agreement::X25519, &rng)
            .and_then(|k| k.compute_public_key())
            .unwrap();
        let time = |f: &mut dyn FnMut()| {
            let start = Instant::now();
            for _ in 0..ROUNDS {
                f();
            }
            start.elapsed().as_nanos() as f64 / f64::from(ROUNDS)
        };
        StackCrypto {
            tls_sign: time(&mut || {
                std::hint::black_box(tls_key.sign(&rng, msg).unwrap());
            }),
            pki_sign: time(&mut || drop(std::hint::black_box(Signer::sign(&p256, msg)))),
            verify: time(&mut || assert!(public_key.verify(msg, &sig))),
            tls_x25519: time(&mut || {
                let k = ring::agreement::EphemeralPrivateKey::generate(&ring::agreement::X25519, &rng).unwrap();
                let theirs = ring::agreement::UnparsedPublicKey::new(&ring::agreement::X25519, x25519_peer.as_ref());
                std::hint::black_box(ring::agreement::agree_ephemeral(k, &theirs, |s| s[0]).unwrap());
            }),
            pki_ecdh: time(&mut || {
                let e = pki::keys::random_p256();
                let shared = p256::ecdh::diffie_hellman(e.to_nonzero_scalar(), peer.as_affine());
                std::hint::black_box(shared);
            }),
            ed25519_sign: time(&mut || drop(std::hint::black_box(Signer::sign(&ed, msg)))),
        }
    }
}

/// How many times fakehw executed `command` under an agent's `dir`.
fn executions(dir: &Path, command: &str) -> u64 {
    let path = dir.join("fakehw-root/var/lib/fakehw/executions").join(command);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("{} holds {text:?}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => panic!("reading {}: {e}", path.display()),
    }
}

/// The node id an agent's config.toml names.
fn config_node_id(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == "node_id")
        .map(|(_, v)| v.trim().trim_matches('"').to_string())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| panic!("{} names no node", path.display()))
}

/// Where the agents' directories go: `/dev/shm` when it is there (the
/// agents are simulated machines, each with its files, journal and fake
/// root: on this machine's shared disk, creating and fsyncing them is what
/// bcd sim spent its time on), else the temporary directory. The stack's
/// store stays on the disk.
fn agents_parent() -> std::path::PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() }
}

fn unix_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A process's resident memory (VmRSS), in bytes.
fn rss(pid: u32) -> Option<u64> {
    status_kib(&format!("/proc/{pid}/status"), "VmRSS:").map(|k| k * 1024)
}

/// The CPU time used so far by this process (the stack) and by the bcd sim
/// processes, in total.
fn cpu_times(sims: &[u32]) -> [Duration; 2] {
    let sims = sims.iter().filter_map(|pid| cpu_time(&pid.to_string())).sum();
    [cpu_time("self").unwrap_or_default(), sims]
}

/// The CPU time (user and system) a process has used: `pid` or "self".
fn cpu_time(pid: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command's ")": utime and stime are the 14th and
    // 15th of the line, in clock ticks.
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let ticks: u64 = rest.next()?.parse::<u64>().ok()? + rest.next()?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some(Duration::from_secs_f64(ticks as f64 / per_second))
}

/// This process's peak resident memory (VmHWM), in bytes.
fn peak_rss() -> Option<u64> {
    status_kib("/proc/self/status", "VmHWM:").map(|k| k * 1024)
}

fn status_kib(path: &str, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Raises the soft open-file limit to the hard one (the stack holds a
/// descriptor per session; the bcd sim children inherit it).
fn raise_open_file_limit() {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit on this process with a valid pointer.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
