//! One gateway of a shared PostgreSQL store as a process of its own, for
//! the scenarios that kill, pause and skew gateways and for the failover
//! benchmark (docs/harness.md, "Several gateways"): what `devstack gateway`
//! is, built beside the e2e suite so the suite always runs the current
//! code. `daemon_harness::gateways` starts it.
//!
//! The store's URL comes in `DEVSTACK_DATABASE_URL` (never the command
//! line); the flags are `--id ID`, `--host H`, `--port P`, `--http-port
//! P`, `--https-port P`, `--heartbeat-ms N`, `--liveness-ms N`,
//! `--clock-offset S` and `--signed-intent`. It prints `ready <gateway URL>
//! <http URL> <https URL>` once it serves, and drains and exits on SIGTERM
//! or when its standard input ends (the harness that started it is gone).

use std::io::Read as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use devstack::{DevStack, DevStackOptions, StoreLocation};

/// The options from the command line.
fn options(args: &[String]) -> Result<(DevStackOptions, i64)> {
    let url = std::env::var("DEVSTACK_DATABASE_URL").context("DEVSTACK_DATABASE_URL names the store")?;
    let mut options = DevStackOptions { store: StoreLocation::Postgres(url), ..DevStackOptions::default() };
    let mut offset_s = 0;
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        if flag == "--signed-intent" {
            options.signed_intent = true;
            continue;
        }
        let value = args.next().with_context(|| format!("{flag} takes a value"))?;
        match flag.as_str() {
            "--id" => options.gateway_id = value.clone(),
            "--host" => options.listen_host = value.parse().context("--host")?,
            "--port" => options.gateway_port = value.parse().context("--port")?,
            "--http-port" => options.http_port = value.parse().context("--http-port")?,
            "--https-port" => options.https_port = value.parse().context("--https-port")?,
            "--heartbeat-ms" => options.heartbeat_interval_ms = value.parse().context("--heartbeat-ms")?,
            "--liveness-ms" => {
                options.liveness_timeout = Duration::from_millis(value.parse().context("--liveness-ms")?)
            }
            "--clock-offset" => offset_s = value.parse().context("--clock-offset")?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok((options, offset_s))
}

async fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (options, offset_s) = options(&args)?;
    devstack::set_clock_offset_ms(offset_s.saturating_mul(1000));
    let id = options.gateway_id.clone();
    let stack = DevStack::start(options).await.with_context(|| format!("start gateway {id}"))?;
    println!("ready {} {} {}", stack.gateway_url(), stack.http_url(), stack.https_url());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let orphaned = orphaned()?;
    tokio::select! {
        _ = term.recv() => {}
        _ = orphaned => {}
    }
    stack.shutdown().await.context("shut down")?;
    Ok(())
}

/// Resolves when standard input ends. Read on a thread of its own, not
/// with `tokio::io::stdin`: that read sits in the runtime's blocking pool,
/// and dropping the runtime waits for it, so a gateway stopped by SIGTERM
/// would hang at exit until its harness closed the pipe.
fn orphaned() -> Result<tokio::sync::oneshot::Receiver<()>> {
    let (ended, orphaned) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            let mut sink = [0u8; 64];
            while std::io::stdin().read(&mut sink).is_ok_and(|n| n > 0) {}
            let _ = ended.send(());
        })
        .context("watch standard input")?;
    Ok(orphaned)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .fmt_fields(devstack::EscapedFields)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(false)
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("e2e-gateway: start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("e2e-gateway: {e:#}");
            ExitCode::FAILURE
        }
    }
}
