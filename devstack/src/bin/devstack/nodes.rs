//! `devstack nodes` (a list sorted by hostname, filtered by `--selector`
//! and `--state`, followed with `--watch`) and `devstack node NODE` (one
//! node in full). A node is named by its id, a unique prefix of it, or its
//! hostname; an empty name or one with a control character is a usage
//! error before any URL is built ([`route`]).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use devstack::admin::api::{self, NodeDetail, NodeSummary, StackInfo};
use devstack::admin::query::encode;

use crate::output::{Filter, Format, Output, Row, table};
use crate::table::{Table, ago, or_dash};

/// `PREFIX` + `path`.
pub fn api(path: &str) -> String {
    format!("{}{path}", api::PREFIX)
}

/// The route of a named object (`/v1/nodes/<name>…`), the name checked
/// and encoded as one path segment.
pub fn route(collection: &str, what: &str, name: &str, rest: &str) -> Result<String> {
    if name.is_empty() {
        return Err(crate::usage(format!("the {what} is empty: name one (devstack {collection} lists them)")));
    }
    if name.chars().any(char::is_control) || name.len() > devstack::admin::MAX_NAME {
        return Err(crate::usage(format!("{name:?} is no {what} name")));
    }
    Ok(api(&format!("/{collection}/{}{rest}", encode(name))))
}

fn session(n: &NodeSummary) -> String {
    n.session_epoch.map_or("-".into(), |e| format!("live ({e})"))
}

impl Row for NodeSummary {
    const KIND: &'static str = "node";
    fn name(&self) -> String {
        self.id.clone()
    }
    fn headers(wide: bool) -> Vec<&'static str> {
        let mut h = vec!["ID", "HOSTNAME", "POOL", "STATE", "SESSION", "GPUS", "VERSION"];
        if wide {
            h.extend(["GEN", "JOINED", "ADOPTED", "REVOKED"]);
        }
        h.push("REASON");
        h
    }
    fn cells(&self, wide: bool) -> Vec<String> {
        let mut c = vec![
            self.id.clone(),
            or_dash(self.hostname.clone()),
            self.pool.clone(),
            self.state.clone(),
            session(self),
            self.gpus.map_or("-".into(), |g| g.to_string()),
            or_dash(self.daemon_version.clone()),
        ];
        if wide {
            c.extend([
                format!("{}/{}", self.applied_generation, self.spec_generation),
                ago(self.created_at_ms),
                self.adopted_at_ms.map_or("-".into(), ago),
                self.revoked_at_ms.map_or("-".into(), ago),
            ]);
        }
        c.push(or_dash(self.reason.clone()));
        c
    }
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            ("id", self.id.clone()),
            ("hostname", self.hostname.clone()),
            ("pool", self.pool.clone()),
            ("state", self.state.clone()),
            ("session", if self.session_epoch.is_some() { "live" } else { "none" }.into()),
            ("gpus", self.gpus.map_or(String::new(), |g| g.to_string())),
            ("version", self.daemon_version.clone()),
        ]
    }
}

/// Sorted by hostname, then id.
fn sorted(mut nodes: Vec<NodeSummary>) -> Vec<NodeSummary> {
    nodes.sort_by(|a, b| (&a.hostname, &a.id).cmp(&(&b.hostname, &b.id)));
    nodes
}

/// `3 node(s): 2 adopted, 1 rejected`.
fn counts(nodes: &[NodeSummary]) -> String {
    let mut states: Vec<(String, usize)> = Vec::new();
    for n in nodes {
        match states.iter_mut().find(|(s, _)| *s == n.state) {
            Some((_, count)) => *count += 1,
            None => states.push((n.state.clone(), 1)),
        }
    }
    let states: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
    format!("{} node(s): {}", nodes.len(), states.join(", "))
}

/// `devstack nodes [-o FORMAT] [--selector S] [--state S] [--watch]`.
#[derive(Args)]
pub struct Nodes {
    #[command(flatten)]
    out: Output,
    #[command(flatten)]
    filter: Filter,
    /// Keep watching: after the list, print each node again when it changes
    /// (a row, or a JSON line with -o json), until Ctrl-C or the stack stops.
    #[arg(short, long)]
    watch: bool,
}

impl Nodes {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        let c = ctx.client()?;
        let last: StackInfo = c.get(&api("/stack")).await?;
        let nodes = sorted(self.filter.apply(c.get(&api("/nodes")).await?)?);
        let format = self.out.format();
        if self.watch && format == Format::Json {
            for n in &nodes {
                outln!("{}", serde_json::to_string(n)?)?;
            }
        } else {
            self.out.list(&nodes, "no nodes yet (join one: devstack token, then bcd join)")?;
            if matches!(format, Format::Table | Format::Wide) && !nodes.is_empty() && !self.watch {
                outln!("{}", counts(&nodes))?;
            }
        }
        if !self.watch {
            return Ok(ExitCode::SUCCESS);
        }
        self.follow(&c, last.last_event_seq, nodes).await
    }

    /// Prints each node whose summary changed, from the events after `seq`.
    async fn follow(
        &self,
        c: &devstack::admin::client::AdminClient,
        seq: u64,
        mut shown: Vec<NodeSummary>,
    ) -> Result<ExitCode> {
        let mut lines = c.lines(&api(&format!("/events?after={seq}&watch=true"))).await?;
        loop {
            let line = tokio::select! {
                line = lines.next_line() => line?,
                _ = tokio::signal::ctrl_c() => None,
            };
            let Some(line) = line else { return Ok(ExitCode::SUCCESS) };
            let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            let Some(id) = event["node_id"].as_str() else { continue };
            let detail: NodeDetail = match c.get(&route("nodes", "node", id, "")?).await {
                Ok(d) => d,
                // A node gone meanwhile (or a stack stopping) is no row.
                Err(_) => continue,
            };
            let node = detail.node;
            if shown.contains(&node) || self.filter.apply(vec![node.clone()])?.is_empty() {
                continue;
            }
            match self.out.format() {
                Format::Json => outln!("{}", serde_json::to_string(&node)?)?,
                Format::Name => outln!("node/{}", node.id)?,
                format => {
                    let rows = table(std::slice::from_ref(&node), format == Format::Wide).render();
                    out!("{}", rows.lines().skip(1).map(|l| format!("{l}\n")).collect::<String>())?;
                }
            }
            shown.retain(|n| n.id != node.id);
            shown.push(node);
        }
    }
}

/// `devstack node NODE [-o FORMAT]`.
#[derive(Args)]
pub struct NodeArgs {
    /// The node: its id, a unique prefix of it, or its hostname.
    id: String,
    #[command(flatten)]
    out: Output,
}

impl NodeArgs {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        let path = route("nodes", "node", &self.id, "")?;
        let d: NodeDetail = ctx.client()?.get(&path).await?;
        match self.out.format() {
            Format::Json => crate::output::print_json(&d)?,
            Format::Name => outln!("node/{}", d.node.id)?,
            _ => print_detail(&d)?,
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// From now to `at_ms`, to the hour.
fn until(at_ms: i64) -> Duration {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
    Duration::from_secs(((at_ms - now).max(0) as u64 / 1000 / 3600) * 3600)
}

fn print_detail(d: &NodeDetail) -> Result<()> {
    let n = &d.node;
    outln!("{} ({})", n.id, or_dash(n.hostname.clone()))?;
    outln!("  pool:       {} ({})", n.pool, n.pool_id)?;
    let reason = if n.reason.is_empty() { String::new() } else { format!(": {}", n.reason) };
    outln!("  state:      {}{reason}", n.state)?;
    if let Some(at) = n.revoked_at_ms {
        outln!("  revoked:    {} (no new command, reservation or console)", ago(at))?;
    }
    outln!("  session:    {}", session(n))?;
    outln!("  generation: {} applied of {}", n.applied_generation, n.spec_generation)?;
    outln!("  version:    {}", or_dash(n.daemon_version.clone()))?;
    outln!("  GPUs:       {}", n.gpus.map_or("-".into(), |g| g.to_string()))?;
    outln!("  joined:     {}", ago(n.created_at_ms))?;
    let mut sections = Table::new(&["SECTION", "STATE", "REASON", "GEN", "MESSAGE"]);
    for s in &d.sections {
        let cells =
            [&s.section, &s.state, &or_dash(s.reason.clone()), &s.generation.to_string(), &or_dash(s.message.clone())];
        sections.row(cells.iter().map(|c| c.to_string()).collect());
    }
    let mut inventory = Table::new(&["INVENTORY", "SHA256", "REPORTED"]);
    for i in &d.inventory {
        inventory.row(vec![i.name.clone(), i.sha256.chars().take(16).collect(), ago(i.updated_at_ms)]);
    }
    let mut sessions = Table::new(&["EPOCH", "VERSION", "BOOT", "CONNECTED", "DISCONNECTED"]);
    for s in &d.sessions {
        sessions.row(vec![
            s.epoch.to_string(),
            or_dash(s.daemon_version.clone()),
            s.boot_id.chars().take(8).collect(),
            ago(s.connected_at_ms),
            s.disconnected_at_ms.map_or("-".into(), ago),
        ]);
    }
    let mut certs = Table::new(&["CERTIFICATE", "KEY PIN", "EXPIRES", "REVOKED"]);
    for c in &d.certificates {
        certs.row(vec![
            c.serial.clone(),
            c.spki_pin.clone(),
            format!("in {}", humantime::format_duration(until(c.not_after_ms))),
            c.revoked_at_ms.map_or("-".into(), ago),
        ]);
    }
    for table in [sections, inventory, sessions, certs] {
        out!("\n{}", table.render())?;
    }
    out!("\n{}", table(&d.commands, false).render())?;
    if !d.reservations.is_empty() {
        out!("\n{}", table(&d.reservations, false).render())?;
    }
    Ok(())
}
