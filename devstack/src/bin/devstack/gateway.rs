//! `devstack gateway`: one more gateway of a stack whose store is a shared
//! PostgreSQL database (docs/devstack.md, "Several gateways"). It loads the
//! keys the first gateway made, serves the JoinService, the gateway, the
//! well-known document and the HTTPS listener on ports of its own, and joins
//! the others (registration, beat, pokes) until SIGINT or SIGTERM, when it
//! marks itself draining and drains its sessions. `devstack serve
//! --gateways N` starts N - 1 of these beside itself.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use devstack::{DevStack, DevStackOptions, StoreLocation};

use crate::serve::stop_signals;
use crate::sim::stopped;

/// The line a gateway prints once it serves (what `serve --gateways` waits for).
pub const READY: &str = "is serving";

/// `devstack gateway`'s flags.
#[derive(Args, Debug)]
pub struct Gateway {
    /// The shared PostgreSQL store (the one `devstack serve --postgres`
    /// printed, or `--store` of serve).
    #[arg(long, value_name = "URL", env = "DEVSTACK_DATABASE_URL", hide_env_values = true)]
    store: String,
    /// This gateway's id among the store's gateways (letters, digits, `-`, `_`).
    #[arg(long, value_name = "ID", value_parser = parse_id)]
    id: String,
    /// The address to listen on.
    #[arg(long, value_name = "H", default_value = "127.0.0.1")]
    host: IpAddr,
    /// The gateway port (0 picks a free one).
    #[arg(long, value_name = "P", default_value_t = 0)]
    port: u16,
    /// The HTTP port of the well-known document (0 picks a free one).
    #[arg(long, value_name = "P", default_value_t = 0)]
    http_port: u16,
    /// The HTTPS port of the WebSocket session and renewal (0 picks a free one).
    #[arg(long, value_name = "P", default_value_t = 0)]
    https_port: u16,
    /// Sign commands and NodeSpecs with the command root (as the other gateways do).
    #[arg(long)]
    signed_intent: bool,
    /// The Welcome's heartbeat interval (also the ping interval and the beat).
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = humantime::parse_duration)]
    heartbeat_interval: Duration,
    /// How long no gateway may hear from a node before it is marked unreachable.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    liveness_timeout: Duration,
    /// A test knob: run this gateway's wall clock S seconds off (`-90`,
    /// `+90`). What it stamps moves; liveness does not.
    #[arg(long, value_name = "S", default_value_t = 0, allow_hyphen_values = true)]
    clock_offset: i64,
}

fn parse_id(s: &str) -> Result<String, String> {
    let plain = s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if s.is_empty() || s.len() > 32 || !plain {
        return Err(format!("{s:?} is not 1 to 32 letters, digits, '-' or '_'"));
    }
    Ok(s.to_string())
}

/// A heartbeat interval as the Welcome carries it (milliseconds).
pub fn interval_ms(d: Duration) -> Result<u32> {
    match u32::try_from(d.as_millis()) {
        Ok(ms) if (100..=300_000).contains(&ms) => Ok(ms),
        _ => bail!("the heartbeat interval must be between 100ms and 5m"),
    }
}

impl Gateway {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        run(self, ctx).await
    }
}

async fn run(args: Gateway, ctx: &crate::Context) -> Result<ExitCode> {
    let mut stop = stop_signals(ctx.quiet.clone())?;
    devstack::set_clock_offset_ms(args.clock_offset.saturating_mul(1000));
    let options = DevStackOptions {
        store: StoreLocation::Postgres(args.store.clone()),
        gateway_id: args.id.clone(),
        signed_intent: args.signed_intent,
        listen_host: args.host,
        gateway_port: args.port,
        http_port: args.http_port,
        https_port: args.https_port,
        heartbeat_interval_ms: interval_ms(args.heartbeat_interval)?,
        liveness_timeout: args.liveness_timeout,
        ..DevStackOptions::default()
    };
    let location = format!("{}", options.store);
    let stack = DevStack::start(options).await.with_context(|| format!("start gateway {}", args.id))?;
    say!("devstack gateway {} {READY} (stop with Ctrl-C)", args.id);
    say!("  gateway:             {}", stack.gateway_url());
    say!("  well-known:          {}", stack.well_known_url());
    say!("  websocket session:   {}", stack.websocket_url());
    say!("  store:               {location}");
    if args.clock_offset != 0 {
        say!("  clock offset:        {:+} s (a test knob)", args.clock_offset);
    }
    stopped(&mut stop).await;
    eprintln!("devstack: gateway {} stopping", args.id);
    stack.shutdown().await.context("shut down")?;
    Ok(ExitCode::SUCCESS)
}

/// The gateways `devstack serve --gateways N` runs beside its own, each a
/// `devstack gateway` child process on the same store.
pub struct Children {
    children: Vec<(String, tokio::process::Child)>,
    /// Each one's id and gateway URL.
    pub urls: Vec<(String, String)>,
}

/// What the other gateways are started with.
pub struct ChildSpec<'a> {
    /// The shared store's URL (handed in the environment, never the command line).
    pub store_url: &'a str,
    /// How many gateways in all (this one is `g1`).
    pub gateways: u32,
    /// Where they listen.
    pub host: IpAddr,
    /// Whether they sign intent.
    pub signed_intent: bool,
}

impl Children {
    /// Starts gateways `g2` … `gN` and waits until each serves.
    pub async fn start(spec: &ChildSpec<'_>) -> Result<Children> {
        use tokio::io::{AsyncBufReadExt as _, BufReader};
        let exe = std::env::current_exe().context("find the devstack binary")?;
        let mut started = Children { children: Vec::new(), urls: Vec::new() };
        for k in 2..=spec.gateways {
            let id = format!("g{k}");
            let mut command = tokio::process::Command::new(&exe);
            command.args(["gateway", "--id", &id, "--host", &spec.host.to_string()]);
            if spec.signed_intent {
                command.arg("--signed-intent");
            }
            command.env("DEVSTACK_DATABASE_URL", spec.store_url).stdout(std::process::Stdio::piped());
            command.kill_on_drop(true);
            let mut child = command.spawn().with_context(|| format!("start gateway {id}"))?;
            let stdout = child.stdout.take().context("the gateway's output")?;
            let mut lines = BufReader::new(stdout).lines();
            let mut url = None;
            while let Some(line) = lines.next_line().await.context("read the gateway's output")? {
                if let Some(u) = line.trim_start().strip_prefix("gateway:") {
                    url = Some(u.trim().to_string());
                    break;
                }
            }
            let Some(url) = url else {
                let status = child.wait().await.context("wait for the gateway")?;
                bail!("gateway {id} ended before it served ({status})");
            };
            // The rest of its output is read (and dropped) so it never blocks.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            started.urls.push((id.clone(), url));
            started.children.push((id, child));
        }
        Ok(started)
    }

    /// Stops them (SIGTERM: each drains its sessions) and waits for each.
    pub async fn stop(mut self) -> Result<()> {
        for (_, child) in &self.children {
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                // SAFETY: kill has no memory preconditions; the pid is our
                // own child's, not yet waited for.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
        }
        for (id, child) in &mut self.children {
            let status = child.wait().await.with_context(|| format!("wait for gateway {id}"))?;
            if !status.success() {
                eprintln!("devstack: gateway {id} ended {status}");
            }
        }
        Ok(())
    }
}
