//! Chaos in a running dev stack (`devstack serve --sim N --chaos LEVEL`,
//! docs/devstack.md, "devstack serve"): the simulated nodes reach the stack
//! through the fault proxy, and the level's faults strike them (their
//! processes through `bcd sim`'s control socket, their links through the
//! proxy) until the stack stops; the person using the stack is the
//! workload. The draws come from the seed an hour at a time, the same
//! whatever else was drawn; gateway faults are skipped (the stack is this
//! process). At the stop every link heals, and the caller checks the
//! fleet invariants with what the proxy heard.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::ChaosError;
use super::agents::SimControl;
use super::proxy::FaultProxy;
use super::rng::Stream;
use super::schedule::{Fault, FaultKind, Level, Schedule};
use super::strike::AgentFaults;
use crate::invariants::Heard;
use crate::stack::DevStack;

/// The ticks drawn at a time.
const WINDOW: Duration = Duration::from_secs(3600);

/// The proxy in front of the stack's gateway for `nodes` agents whose
/// data dirs are `data/sim/<i>`, each agent's configuration pointed at its
/// own link (a new one written, or an existing one's gateway lines changed:
/// a node that joined keeps its identity).
pub async fn links(
    stack: &DevStack,
    nodes: u32,
    level: Level,
    seed: &str,
    data: &Path,
) -> Result<Arc<FaultProxy>, ChaosError> {
    let root = Stream::root(seed);
    let proxy = FaultProxy::start(nodes, &[stack.gateway_addr()], level.links(), &root.fork("links"))
        .await
        .map_err(|source| ChaosError::Io { what: "start the fault proxy", source })?;
    for (i, agent) in proxy.agents().iter().enumerate() {
        let dir = data.join("sim").join(i.to_string());
        let urls: Vec<String> = agent.addresses().iter().map(|a| format!("https://{a}")).collect();
        point_at(stack, &dir, &urls)?;
    }
    Ok(Arc::new(proxy))
}

/// Points every agent that has a configuration under `data/sim/<i>` back at
/// the stack's own gateways (agent i's list turned to start at gateway i
/// mod n, as bcd sim writes it): a stack that ran under chaos before left
/// them pointing at a proxy that is gone.
pub fn unproxied(stack: &DevStack, nodes: u32, data: &Path) -> Result<(), ChaosError> {
    let gateways: Vec<String> = stack.well_known()["gateways"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["url"].as_str().map(str::to_string))
        .collect();
    let gateways = if gateways.is_empty() { vec![stack.gateway_url().to_string()] } else { gateways };
    for i in 0..nodes as usize {
        let dir = data.join("sim").join(i.to_string());
        if dir.join("config.toml").exists() {
            let mut urls = gateways.clone();
            let turn = i % urls.len();
            urls.rotate_left(turn);
            point_at(stack, &dir, &urls)?;
        }
    }
    Ok(())
}

/// Points the agent of `dir` at `urls` (its first the home): a new
/// configuration, or an existing one's gateway lines rewritten (the rest,
/// its node id first, kept).
fn point_at(stack: &DevStack, dir: &Path, urls: &[String]) -> Result<(), ChaosError> {
    let path = dir.join("config.toml");
    let io = |what| move |source| ChaosError::Io { what, source };
    let Ok(text) = std::fs::read_to_string(&path) else {
        stack.write_bcd_config_via(dir, dir, urls)?;
        return Ok(());
    };
    let quoted: Vec<String> = urls.iter().map(|u| crate::config::toml_string(u)).collect();
    let mut out = String::new();
    let mut in_table = false;
    for line in text.lines() {
        in_table |= line.trim_start().starts_with('[');
        match line.split_once('=').map(|(k, _)| k.trim()) {
            Some("gateway_url") if !in_table => {
                out.push_str(&format!("gateway_url = {}\n", quoted.first().map_or("\"\"", String::as_str)));
                if urls.len() > 1 {
                    out.push_str(&format!("gateway_urls = [{}]\n", quoted.join(", ")));
                }
            }
            Some("gateway_urls") if !in_table => {}
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    std::fs::write(&path, out).map_err(io("point an agent at its gateways"))
}

/// The faults striking, until [`Live::stop`].
pub struct Live {
    stop: watch::Sender<bool>,
    task: JoinHandle<BTreeMap<FaultKind, u64>>,
    proxy: Arc<FaultProxy>,
}

impl Live {
    /// Starts the faults of `level` on `nodes` agents of the bcd sim whose
    /// control socket is `control`; `told` hears a line for each fault as
    /// it strikes (and for one that could not).
    pub fn start(
        proxy: Arc<FaultProxy>,
        control: PathBuf,
        level: Level,
        seed: &str,
        nodes: u32,
        mut told: impl FnMut(String) + Send + 'static,
    ) -> Live {
        let (stop, mut stopped) = watch::channel(false);
        let root = Stream::root(seed).fork("faults");
        let links = proxy.clone();
        let task = tokio::spawn(async move {
            let mut control = SimControl::new(&control);
            let mut agents = AgentFaults::new(1);
            let mut struck = BTreeMap::new();
            let (every, _) = level.faults();
            let per_window = (WINDOW.as_millis() / every.as_millis().max(1)) as u64;
            let start = Instant::now();
            for window in 0.. {
                if *stopped.borrow() {
                    break;
                }
                let ticks = window * per_window + 1..=(window + 1) * per_window;
                for (ms, starts, fault) in Schedule::draw_ticks(&root, level, nodes, 1, ticks).timeline() {
                    tokio::select! {
                        _ = tokio::time::sleep_until(start + Duration::from_millis(ms)) => {}
                        _ = stopped.changed() => return struck,
                    }
                    match agents.apply(&mut control, &links, &fault, starts).await {
                        Ok(Some(true)) if starts => {
                            *struck.entry(fault.kind).or_insert(0) += 1;
                            told(describe(&fault));
                        }
                        Ok(_) => {}
                        Err(e) => told(format!("{} failed: {e}", describe(&fault))),
                    }
                }
            }
            struck
        });
        Live { stop, task, proxy }
    }

    /// Stops the faults and heals every link; the faults struck, by kind.
    pub async fn stop(&mut self) -> Result<BTreeMap<FaultKind, u64>, ChaosError> {
        let _ = self.stop.send(true);
        let struck = (&mut self.task).await.map_err(|e| ChaosError::Sim(format!("the chaos task: {e}")))?;
        self.proxy.heal_all();
        Ok(struck)
    }

    /// What the proxy saw reach the gateway, by node (`nodes`: by agent index).
    pub fn heard(&self, nodes: &[(u32, String)]) -> Heard {
        nodes.iter().map(|(i, id)| (id.clone(), self.proxy.agent(*i).heard())).collect()
    }
}

/// A fault as a line for a person.
fn describe(f: &Fault) -> String {
    match f.for_ms {
        0 => format!("chaos: {} on agent {}", f.kind, f.target),
        ms => format!("chaos: {} on agent {} for {:.1} s", f.kind, f.target, ms as f64 / 1e3),
    }
}
