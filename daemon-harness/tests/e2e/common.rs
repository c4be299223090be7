//! What every scenario shares: the bcd binary (built once per run), a dev
//! stack under signed intent, pools, tokens and node handles, and the
//! `must_*` / `await_*` actions the scenarios read as sentences.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use daemon_harness::build::{BuildOptions, build_bcd};
use daemon_harness::node::Node;
use daemon_harness::prereq;
use daemon_harness::runner::{self, Runner};
use devstack::invariants::{AgentFacts, Heard};
use devstack::{Acceptance, DevStack, DevStackOptions, PoolSpec};

/// How long a scenario waits for anything before it fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The fakehw seed of the scenarios (the golden inventory's seed).
pub const SEED: &str = "41";

/// The fakehw bcd, built once per test binary (and cached across runs).
pub fn bcd() -> Result<PathBuf> {
    static BCD: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BCD.get_or_init(|| build_bcd(&BuildOptions::fakehw()).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

/// One scenario's world: a dev stack and the runner bcd runs under.
pub struct Env {
    pub stack: DevStack,
    pub bcd: PathBuf,
    pub runner: Arc<dyn Runner>,
    started: Instant,
    name: String,
    /// Every node directory made for the scenario (its config.toml and data
    /// dir): the fleet invariants read their fake hardware at the end.
    nodes: Mutex<Vec<(PathBuf, PathBuf)>>,
}

impl Env {
    /// Starts a dev stack under signed intent, or returns None when a
    /// prerequisite is missing (skipped locally, a failure under CI).
    pub async fn start(scenario: &str) -> Option<Env> {
        Self::start_with(scenario, |_| {}).await
    }

    /// Like [`Env::start`], with changed stack options.
    pub async fn start_with(scenario: &str, adjust: impl FnOnce(&mut DevStackOptions)) -> Option<Env> {
        if !prereq::require_go(scenario) || !runner::require_runner(scenario) {
            return None;
        }
        let runner = runner::from_env().expect("BCD_E2E_RUNNER names a runner");
        Some(Self::start_on(scenario, runner, adjust).await)
    }

    /// A dev stack for bcd under `runner` (whose prerequisites the caller
    /// checked): the stack listens where the runner's bcd reaches it, and its
    /// serving certificate names that address.
    pub async fn start_on(scenario: &str, runner: Arc<dyn Runner>, adjust: impl FnOnce(&mut DevStackOptions)) -> Env {
        let bcd = bcd().expect("bcd builds");
        let mut options = DevStackOptions { signed_intent: true, heartbeat_interval_ms: 500, ..Default::default() };
        let host = runner.gateway_host();
        if host != "127.0.0.1" {
            let ip = host.parse().expect("the runner's gateway host is an IP address");
            options.listen_host = ip;
            options.extra_ips.push(ip);
        }
        adjust(&mut options);
        let stack = DevStack::start(options).await.expect("the dev stack starts");
        Env { stack, bcd, runner, started: Instant::now(), name: scenario.to_string(), nodes: Mutex::default() }
    }

    /// A pool with diag.nvml acceptance and an optional expected GPU count.
    pub async fn must_create_pool(&self, name: &str, expect_gpus: Option<u32>) -> String {
        self.stack
            .create_pool(PoolSpec {
                name: name.to_string(),
                gpu_model: None,
                expect_gpu_count: expect_gpus,
                acceptance: Acceptance::DiagNvml,
                ..PoolSpec::default()
            })
            .await
            .expect("the pool is created")
    }

    /// A join token for `pool` with `uses` uses.
    pub async fn must_mint_token(&self, pool: &str, uses: u32) -> String {
        self.stack.mint_join_token(pool, uses, Duration::from_secs(3600)).await.expect("a token is minted")
    }

    /// A fakehw node of `variant`, with a ready config.toml.
    pub async fn must_make_node(&self, name: &str, variant: &str) -> Node {
        self.must_make_node_seeded(name, variant, SEED).await
    }

    /// A fakehw node of `variant` and `seed`, with a ready config.toml.
    pub async fn must_make_node_seeded(&self, name: &str, variant: &str, seed: &str) -> Node {
        self.must_make_node_in(&std::env::temp_dir(), name, variant, seed).await
    }

    /// Like [`Env::must_make_node_seeded`], the node's directory under `parent`.
    pub async fn must_make_node_in(&self, parent: &Path, name: &str, variant: &str, seed: &str) -> Node {
        let env = vec![
            ("BCD_FAKEHW_SEED".to_string(), seed.to_string()),
            ("BCD_FAKEHW_VARIANT".to_string(), variant.to_string()),
        ];
        let node = Node::new_in(parent, name, &self.bcd, self.runner.clone(), env).expect("a node directory");
        self.must_configure(&node).await;
        node
    }

    /// Writes `node`'s config.toml for this stack, and watches the node:
    /// its fake hardware is read for the fleet invariants at the end.
    pub async fn must_configure(&self, node: &Node) {
        let data_dir = self.runner.daemon_path(&node.data_dir()).expect("the data dir has a path where bcd runs");
        self.stack.write_bcd_config(node.dir(), Path::new(&data_dir)).await.expect("config.toml is written");
        self.nodes.lock().unwrap().push((node.config(), node.data_dir()));
    }

    /// Joins `node` with a fresh one-use token of `pool` and returns its node id.
    pub async fn must_join(&self, node: &Node, pool: &str) -> String {
        let token = self.must_mint_token(pool, 1).await;
        let out = node.must_join(&token).await.expect("bcd join succeeds");
        assert!(!out.stdout.contains(&token) && !out.stderr.contains(&token), "bcd join printed the token");
        node.assert_never_printed(&token, "the join token");
        node_id(node).expect("config.toml names the node")
    }

    /// Joins and starts `node`, then waits until the stack adopted it.
    pub async fn must_join_and_adopt(&self, node: &mut Node, pool: &str) -> String {
        let id = self.must_join(node, pool).await;
        node.start().expect("bcd node starts");
        self.stack.await_adopted(&id, DEADLINE).await.expect("the node is adopted");
        id
    }

    /// Shuts the dev stack down (Drain to every session) and starts it again
    /// on the same store and ports, as an operator restart would; returns
    /// how long the shutdown and the start took.
    pub async fn restart_stack(&mut self) -> (Duration, Duration) {
        let options = self.stack.restart_options();
        // `shutdown` consumes the stack: park a throwaway one in its place.
        let parked = DevStack::start(DevStackOptions::default()).await.expect("a throwaway stack starts");
        let old = std::mem::replace(&mut self.stack, parked);
        let shutdown = Instant::now();
        old.shutdown().await.expect("the dev stack shuts down");
        let start = Instant::now();
        let new = DevStack::start(options).await.expect("the dev stack starts again on its file");
        let took = (start - shutdown, start.elapsed());
        std::mem::replace(&mut self.stack, new).shutdown().await.expect("the throwaway stack shuts down");
        took
    }

    /// Kills the dev stack (dropped without shutdown: no Drain, every
    /// connection cut) and starts it again on the same store and ports, as
    /// after a crash; the ports are taken again as soon as the old
    /// listeners are gone.
    pub async fn kill_and_restart_stack(&mut self) {
        let options = self.stack.restart_options();
        let parked = DevStack::start(DevStackOptions::default()).await.expect("a throwaway stack starts");
        drop(std::mem::replace(&mut self.stack, parked));
        let deadline = tokio::time::Instant::now() + DEADLINE;
        let new = loop {
            match DevStack::start(options.clone()).await {
                Ok(stack) => break stack,
                Err(devstack::Error::Bind { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(e) => panic!("the dev stack starts again on its file: {e}"),
            }
        };
        std::mem::replace(&mut self.stack, new).shutdown().await.expect("the throwaway stack shuts down");
    }

    /// Checks the fleet invariants, then prints the scenario's wall time
    /// (the figure the issues ask for).
    pub fn report(&self) {
        self.assert_invariants();
        eprintln!("scenario {} ({}): {:.2?}", self.name, self.runner.name(), self.started.elapsed());
    }

    /// The fake hardware facts of every node the scenario made (and of the
    /// agents of any bcd sim run from one), by node id.
    pub fn agent_facts(&self) -> AgentFacts {
        let mut facts = AgentFacts::default();
        for (config, data_dir) in self.nodes.lock().unwrap().iter() {
            let Ok(text) = std::fs::read_to_string(config) else { continue };
            if let Some(node_id) = config_node_id(&text) {
                facts.add(&node_id, data_dir).unwrap_or_else(|e| panic!("{}: {e}", data_dir.display()));
            }
            facts.add_sim(data_dir).unwrap_or_else(|e| panic!("{}: {e}", data_dir.display()));
        }
        facts
    }

    /// Fails the scenario when a fleet invariant does not hold over the
    /// store and its nodes' fake hardware (docs/harness.md, "Fleet
    /// invariants").
    pub fn assert_invariants(&self) {
        let agents = self.agent_facts();
        let read = agents.nodes.len();
        let runs: u64 = agents.nodes.values().flat_map(|n| n.executions.values()).sum();
        let violations = self.stack.check_invariants(agents, Heard::new()).expect("the facts read");
        assert!(
            violations.is_empty(),
            "{}: {} fleet invariant violation(s):\n{}",
            self.name,
            violations.len(),
            violations.iter().map(|v| format!("  {v}")).collect::<Vec<_>>().join("\n")
        );
        eprintln!(
            "scenario {}: fleet invariants hold over the store and {read} node(s)' fake hardware ({runs} execution(s))",
            self.name
        );
    }
}

/// How a node reaches the stack after [`Env::must_use_websocket`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transports {
    /// Only the WebSocket: no `gateway_url`, a `[websocket] url`.
    WebSocketOnly,
    /// Both configured, the gRPC gateway unreachable (a closed port): bcd
    /// falls back to the WebSocket.
    UnreachableGrpcAndWebSocket,
    /// Both configured and reachable: gRPC is used.
    GrpcAndWebSocket,
}

impl Env {
    /// Rewrites `node`'s config.toml for `transports` (the node must be
    /// stopped): `gateway_url` kept, emptied or pointed at a closed port,
    /// and a `[websocket]` table naming the stack's WebSocket session.
    pub fn must_use_websocket(&self, node: &Node, transports: Transports) {
        let path = node.config();
        let text = std::fs::read_to_string(&path).expect("config.toml reads");
        let gateway = match transports {
            Transports::WebSocketOnly => String::new(),
            Transports::UnreachableGrpcAndWebSocket => {
                format!("https://{}:{}", self.runner.gateway_host(), closed_port())
            }
            Transports::GrpcAndWebSocket => self.stack.gateway_url().to_string(),
        };
        let mut out: Vec<String> = Vec::new();
        let mut in_websocket = false;
        for line in text.lines() {
            let trimmed = line.trim();
            if trimmed.starts_with('[') {
                in_websocket = trimmed == "[websocket]";
            }
            if in_websocket {
                continue;
            }
            match trimmed.split_once('=') {
                Some((key, _)) if key.trim() == "gateway_url" => out.push(format!("gateway_url = \"{gateway}\"")),
                _ => out.push(line.to_string()),
            }
        }
        out.push(String::new());
        out.push("[websocket]".into());
        out.push(format!("url = \"{}\"", self.stack.websocket_url()));
        std::fs::write(&path, out.join("\n") + "\n").expect("config.toml is rewritten");
    }

    /// Waits until `node_id` has a live session over `transport`; returns its epoch.
    pub async fn await_transport(&self, node_id: &str, transport: devstack::Transport, min_epoch: u64) -> u64 {
        self.stack
            .await_until(format!("a {transport} session of {node_id}"), DEADLINE, |v| {
                let (live, epoch) = (v.live_transport(node_id), v.live_epoch(node_id));
                v.note(format_args!("{live:?} at epoch {epoch:?}"));
                epoch.filter(|e| *e >= min_epoch && live == Some(transport))
            })
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").port()
}

/// The node id bcd wrote into its config.toml.
pub fn node_id(node: &Node) -> Result<String> {
    let text = std::fs::read_to_string(node.config()).context("reading config.toml")?;
    config_node_id(&text).context("config.toml has no node_id")
}

/// The node id of a config.toml's text, once bcd joined.
fn config_node_id(text: &str) -> Option<String> {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with('['))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == "node_id")
        .map(|(_, v)| v.trim().trim_matches('"').to_string())
        .filter(|id| !id.is_empty())
}

/// How many times fakehw really executed `command_id` on `node` (its
/// execution counter under the fake root; 0 when it never ran).
pub fn execution_count(node: &Node, command_id: &str) -> u64 {
    let path = node.data_dir().join("fakehw-root/var/lib/fakehw/executions").join(command_id);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("{} holds {text:?}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
        Err(e) => panic!("reading {}: {e}", path.display()),
    }
}

/// Waits until command `id` is in `state`, or fails at the deadline (or at
/// once when the stack has no such command).
pub async fn await_command_state(stack: &DevStack, id: &str, state: devstack::CommandStatus) -> devstack::CommandRow {
    let found = stack
        .await_until(format!("command {id} to be {state}"), DEADLINE, |v| match v.command(id) {
            Some(row) if row.state == state => Some(Some(row)),
            Some(row) => {
                v.note(format_args!("command {id} is {}", row.state));
                None
            }
            None => Some(None),
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    found.expect("the command exists")
}
