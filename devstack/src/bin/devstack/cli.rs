//! The subcommands that talk to a running stack's admin endpoint
//! (docs/devstack.md, "The admin CLI"): each finds the endpoint through the
//! discovery file, prints a table a person reads (or `--json` for scripts),
//! and fails with the endpoint's own words (no stack running, a refused
//! token, an unknown node).

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use devstack::admin::api::{
    self, CommandRequest, CommandView, NodeDetail, NodeSummary, ReservationView, Revoked, StackInfo, TokenRequest,
    TokenView, WaitRequest,
};
use devstack::admin::client::AdminClient;

use crate::table::{Table, ago, or_dash};

fn client(discovery: &Path) -> Result<AdminClient> {
    Ok(AdminClient::discover(discovery)?)
}

fn route(path: &str) -> String {
    format!("{}{path}", api::PREFIX)
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// `--json`: print the answer as JSON instead of a table.
#[derive(Args, Clone, Copy)]
pub struct Json {
    /// Print JSON (for scripts) instead of a table.
    #[arg(long)]
    json: bool,
}

/// `devstack status`.
#[derive(Args)]
pub struct Status {
    #[command(flatten)]
    out: Json,
}

pub async fn status(discovery: &Path, args: Status) -> Result<ExitCode> {
    let c = client(discovery)?;
    let info: StackInfo = c.get(&route("/stack")).await?;
    if args.out.json {
        print_json(&info)?;
        return Ok(ExitCode::SUCCESS);
    }
    let d = c.discovery();
    println!("devstack (pid {}) up {}", d.pid, ago(d.started_at_ms).trim_end_matches(" ago"));
    println!("  gateway:        {}", info.gateway_url);
    println!("  well-known:     {}", info.well_known_url);
    println!("  serving CA pin: {}", info.serving_ca_pin);
    println!("  signed intent:  {}, TPM attestor: {}", info.signed_intent, info.tpm_attestor);
    println!("  data dir:       {}", d.data_dir.display());
    let counts: Vec<String> = info.nodes.iter().map(|(state, n)| format!("{n} {state}")).collect();
    let total: usize = info.nodes.iter().map(|(_, n)| n).sum();
    println!("  nodes:          {total} ({}), {} connected", or_dash(counts.join(", ")), info.connected);
    let mut pools = Table::new(&["POOL", "ID", "EXPECTS", "ACCEPTANCE"]);
    for p in &info.pools {
        let expects = p.expect_gpus.map_or("any GPU count".into(), |n| format!("{n} GPUs"));
        pools.row(vec![p.name.clone(), p.id.clone(), expects, p.acceptance.clone()]);
    }
    print!("\n{}", pools.render());
    Ok(ExitCode::SUCCESS)
}

/// `devstack nodes [--json]`.
#[derive(Args)]
pub struct Nodes {
    #[command(flatten)]
    out: Json,
}

fn session(n: &NodeSummary) -> String {
    n.session_epoch.map_or("-".into(), |e| format!("live ({e})"))
}

pub async fn nodes(discovery: &Path, args: Nodes) -> Result<ExitCode> {
    let nodes: Vec<NodeSummary> = client(discovery)?.get(&route("/nodes")).await?;
    if args.out.json {
        print_json(&nodes)?;
        return Ok(ExitCode::SUCCESS);
    }
    if nodes.is_empty() {
        println!("no nodes yet (join one: devstack token, then bcd join)");
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&["ID", "HOSTNAME", "POOL", "STATE", "SESSION", "GEN", "GPUS", "VERSION", "REASON"]);
    for n in &nodes {
        t.row(vec![
            n.id.clone(),
            or_dash(n.hostname.clone()),
            n.pool.clone(),
            n.state.clone(),
            session(n),
            format!("{}/{}", n.applied_generation, n.spec_generation),
            n.gpus.map_or("-".into(), |g| g.to_string()),
            or_dash(n.daemon_version.clone()),
            or_dash(n.reason.clone()),
        ]);
    }
    print!("{}", t.render());
    let mut states: Vec<(String, usize)> = Vec::new();
    for n in &nodes {
        match states.iter_mut().find(|(s, _)| *s == n.state) {
            Some((_, count)) => *count += 1,
            None => states.push((n.state.clone(), 1)),
        }
    }
    let states: Vec<String> = states.iter().map(|(s, n)| format!("{n} {s}")).collect();
    println!("{} node(s): {}", nodes.len(), states.join(", "));
    Ok(ExitCode::SUCCESS)
}

/// `devstack node ID [--json]`.
#[derive(Args)]
pub struct NodeArgs {
    /// The node: its id, a unique prefix of it, or its hostname.
    id: String,
    #[command(flatten)]
    out: Json,
}

pub async fn node(discovery: &Path, args: NodeArgs) -> Result<ExitCode> {
    let d: NodeDetail = client(discovery)?.get(&route(&format!("/nodes/{}", args.id))).await?;
    if args.out.json {
        print_json(&d)?;
        return Ok(ExitCode::SUCCESS);
    }
    let n = &d.node;
    println!("{} ({})", n.id, or_dash(n.hostname.clone()));
    println!("  pool:       {} ({})", n.pool, n.pool_id);
    println!(
        "  state:      {}{}",
        n.state,
        if n.reason.is_empty() { String::new() } else { format!(": {}", n.reason) }
    );
    println!("  session:    {}", session(n));
    println!("  generation: {} applied of {}", n.applied_generation, n.spec_generation);
    println!("  version:    {}", or_dash(n.daemon_version.clone()));
    println!("  GPUs:       {}", n.gpus.map_or("-".into(), |g| g.to_string()));
    println!("  joined:     {}", ago(n.created_at_ms));
    let mut sections = Table::new(&["SECTION", "STATE", "REASON", "GEN", "MESSAGE"]);
    for s in &d.sections {
        sections.row(vec![
            s.section.clone(),
            s.state.clone(),
            or_dash(s.reason.clone()),
            s.generation.to_string(),
            or_dash(s.message.clone()),
        ]);
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
        print!("\n{}", table.render());
    }
    print!("\n{}", commands_table(&d.commands).render());
    if !d.reservations.is_empty() {
        print!("\n{}", reservations_table(&d.reservations).render());
    }
    Ok(ExitCode::SUCCESS)
}

/// From now to `at_ms`, to the hour.
fn until(at_ms: i64) -> Duration {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as i64;
    Duration::from_secs(((at_ms - now).max(0) as u64 / 1000 / 3600) * 3600)
}

fn commands_table(commands: &[CommandView]) -> Table {
    let mut t = Table::new(&["COMMAND", "KIND", "STATE", "ENQUEUED", "REASON"]);
    for c in commands {
        t.row(vec![c.id.clone(), c.kind.clone(), c.state.clone(), ago(c.created_at_ms), or_dash(c.reason.clone())]);
    }
    t
}

fn reservations_table(reservations: &[ReservationView]) -> Table {
    let mut t = Table::new(&["RESERVATION", "NODE", "GPUS", "STATE", "REASON"]);
    for r in reservations {
        let reason = if r.reason.is_empty() { r.last_refusal.clone() } else { r.reason.clone() };
        t.row(vec![r.id.clone(), r.node_id.clone(), format!("{:?}", r.gpu_indexes), r.state.clone(), or_dash(reason)]);
    }
    t
}

/// `devstack token --uses N [--ttl D] [--pool P]`.
#[derive(Args)]
pub struct Token {
    /// How many joins the token allows.
    #[arg(long, value_name = "N", default_value_t = 1)]
    uses: u32,
    /// How long it works (`90s`, `30m`, `24h`, `7d`).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = humantime::parse_duration)]
    ttl: Duration,
    /// The pool it joins nodes into, by name or id (default: the stack's `default`).
    #[arg(long, value_name = "POOL")]
    pool: Option<String>,
    #[command(flatten)]
    out: Json,
}

pub async fn token(discovery: &Path, args: Token) -> Result<ExitCode> {
    let c = client(discovery)?;
    let request = TokenRequest { pool: args.pool, uses: args.uses, ttl_ms: args.ttl.as_millis() as u64 };
    let t: TokenView = c.post(&route("/tokens"), &request).await?;
    if args.out.json {
        print_json(&t)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "join token {} ({} use(s), pool {}, expires in {}) written to {}",
        t.token_id,
        t.uses,
        t.pool,
        crate::table::duration(args.ttl),
        t.file
    );
    let config = c.discovery().data_dir.join("bcd").join(devstack::config::CONFIG_FILE);
    println!("join a node: bcd join --token-file {} --config {}", t.file, config.display());
    Ok(ExitCode::SUCCESS)
}

/// `devstack command NODE KIND [--params JSON] [--wait]`.
#[derive(Args)]
pub struct CommandArgs {
    /// The node: its id, a unique prefix of it, or its hostname.
    node: String,
    /// The command kind (`diag.nvml`, `daemon.upgrade`, …).
    kind: String,
    /// Its parameters, a JSON object (`daemon.upgrade` takes `{"version": "0.9.1"}`
    /// to roll out a release of `serve --releases`).
    #[arg(long, value_name = "JSON", default_value = "{}")]
    params: String,
    /// Wait for the command to end; exit non-zero unless it succeeded.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    out: Json,
}

pub async fn command(discovery: &Path, args: CommandArgs) -> Result<ExitCode> {
    let params: serde_json::Value = serde_json::from_str(&args.params).context("--params is not JSON")?;
    let c = client(discovery)?;
    let request = CommandRequest { node: args.node, kind: args.kind, params };
    let mut view: CommandView = c.post(&route("/commands"), &request).await?;
    if args.wait {
        if !args.out.json {
            eprintln!("enqueued {} ({}) for {}; waiting for its end", view.id, view.kind, view.node_id);
        }
        let wait = WaitRequest { timeout_ms: args.timeout.as_millis() as u64 };
        view = c
            .post(&route(&format!("/commands/{}/wait", view.id)), &wait)
            .await
            .with_context(|| format!("waiting for {}", view.id))?;
    }
    if args.out.json {
        print_json(&view)?;
    } else {
        print_command(&view);
    }
    Ok(if !args.wait || view.state == "succeeded" { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn print_command(view: &CommandView) {
    let reason = if view.reason.is_empty() { String::new() } else { format!(": {}", view.reason) };
    println!("{} {} on {}: {}{reason}", view.id, view.kind, view.node_id, view.state);
    if let Some(output) = &view.output {
        println!("{}", serde_json::to_string_pretty(output).unwrap_or_default());
    }
}

/// `devstack reserve NODE --gpus N [--wait]`, or `--pool P` (crate::fleet).
#[derive(Args)]
pub struct Reserve {
    /// The node: its id, a unique prefix of it, or its hostname.
    #[arg(required_unless_present = "pool")]
    node: Option<String>,
    #[command(flatten)]
    pool: crate::fleet::PoolForm,
    /// How many GPUs to book.
    #[arg(long, value_name = "N")]
    gpus: u32,
    /// Wait until the node bound the hold (or it failed); exit non-zero unless active.
    #[arg(long)]
    wait: bool,
    /// How long --wait waits.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    out: Json,
}

pub async fn reserve(discovery: &Path, args: Reserve) -> Result<ExitCode> {
    let c = client(discovery)?;
    let mut view: ReservationView = c.post(&route("/reservations"), &args.pool.request(args.node, args.gpus)).await?;
    if args.wait {
        let wait = WaitRequest { timeout_ms: args.timeout.as_millis() as u64 };
        view = c.post(&route(&format!("/reservations/{}/wait", view.id)), &wait).await?;
    }
    if args.out.json {
        print_json(&view)?;
    } else {
        print!("{}", reservations_table(std::slice::from_ref(&view)).render());
    }
    Ok(if !args.wait || view.state == "active" { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `devstack release ID`.
#[derive(Args)]
pub struct Release {
    /// The reservation (`rsv_…`).
    id: String,
    #[command(flatten)]
    out: Json,
}

pub async fn release(discovery: &Path, args: Release) -> Result<ExitCode> {
    let view: ReservationView =
        client(discovery)?.post(&route(&format!("/reservations/{}/release", args.id)), &serde_json::json!({})).await?;
    if args.out.json {
        print_json(&view)?;
    } else {
        print!("{}", reservations_table(std::slice::from_ref(&view)).render());
    }
    Ok(ExitCode::SUCCESS)
}

/// `devstack revoke NODE`.
#[derive(Args)]
pub struct Revoke {
    /// The node: its id, a unique prefix of it, or its hostname.
    node: String,
}

pub async fn revoke(discovery: &Path, args: Revoke) -> Result<ExitCode> {
    let r: Revoked =
        client(discovery)?.post(&route(&format!("/nodes/{}/revoke", args.node)), &serde_json::json!({})).await?;
    println!("{}: every certificate revoked; its session got a RevocationNotice", r.node_id);
    Ok(ExitCode::SUCCESS)
}

/// `devstack events [--watch] [--after N]`.
#[derive(Args)]
pub struct Events {
    /// Keep following: print each new event as it happens, until the stack stops or Ctrl-C.
    #[arg(long)]
    watch: bool,
    /// Only events numbered after N (the `seq` field).
    #[arg(long, value_name = "N", default_value_t = 0)]
    after: u64,
}

pub async fn events(discovery: &Path, args: Events) -> Result<ExitCode> {
    use std::io::Write as _;
    let path = route(&format!("/events?after={}{}", args.after, if args.watch { "&watch=true" } else { "" }));
    let mut lines = client(discovery)?.lines(&path).await?;
    let mut stdout = std::io::stdout();
    loop {
        let next = tokio::select! {
            line = lines.next_line() => line?,
            _ = tokio::signal::ctrl_c() => None,
        };
        let Some(line) = next else { break };
        // One line a write, flushed, so a pipe sees each event as it comes.
        if writeln!(stdout, "{line}").and_then(|()| stdout.flush()).is_err() {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
}
