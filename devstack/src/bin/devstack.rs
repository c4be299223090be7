//! `devstack serve`: a dev control plane on loopback for joining a bcd by
//! hand. It prints the gateway URL, the well-known URL, the pins and where it
//! wrote a ready `config.toml`, `join-encryption.jwk` and a join-token file;
//! never the token itself.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use devstack::{DevStack, DevStackOptions, PoolSpec, StoreLocation};

/// The dev control plane of the bcd interop workspace.
#[derive(Parser)]
#[command(name = "devstack", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the JoinService, the gateway and the well-known document until
    /// SIGINT or SIGTERM.
    Serve(Serve),
}

#[derive(Parser)]
struct Serve {
    /// Keep the store in memory; config, key and token files go to a
    /// temporary directory that is printed (and removed at exit).
    #[arg(long, conflicts_with = "data")]
    memory: bool,
    /// Keep the store in DIR/devstack.sqlite and write the bcd files under
    /// DIR; a later run on the same DIR keeps the keys, pins and nodes.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// The gateway port (0 picks a free one).
    #[arg(long, value_name = "P", default_value_t = 0)]
    port: u16,
    /// The HTTP port of the well-known document (0 picks a free one).
    #[arg(long, value_name = "P", default_value_t = 0)]
    http_port: u16,
    /// The address to listen on.
    #[arg(long, value_name = "H", default_value = "127.0.0.1")]
    host: IpAddr,
    /// Sign commands and NodeSpecs with a command root, and hand joining
    /// nodes the command roots and a signed trust bundle.
    #[arg(long)]
    signed_intent: bool,
    /// The GPU count the default pool's diag.nvml must report (default: any).
    #[arg(long, value_name = "N")]
    expect_gpus: Option<u32>,
}

/// The name of the pool `serve` creates.
const DEFAULT_POOL: &str = "default";
/// The join token file, next to the bcd directory.
const TOKEN_FILE: &str = "join-token";

fn main() -> Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the runtime")?;
    match cli.command {
        Command::Serve(serve) => runtime.block_on(run(serve)),
    }
}

async fn run(args: Serve) -> Result<()> {
    let stop = stop_signals()?;
    // With --memory the files live in a temporary directory kept until exit.
    let (dir, _temp) = match &args.data {
        Some(dir) => (dir.clone(), None),
        None => {
            let temp =
                tempfile::Builder::new().prefix("devstack-").tempdir().context("create a temporary directory")?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    // The directory holds the store (every private key of the stack) and
    // the token file: made owner-only when serve creates it.
    if !dir.exists() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(&dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let store = if args.memory || args.data.is_none() {
        StoreLocation::Memory
    } else {
        StoreLocation::File(dir.join("devstack.sqlite"))
    };
    let options = DevStackOptions {
        store,
        signed_intent: args.signed_intent,
        listen_host: args.host,
        gateway_port: args.port,
        http_port: args.http_port,
        ..DevStackOptions::default()
    };
    let stack = DevStack::start(options).await.context("start the dev stack")?;

    let pool_id = match stack.pool_by_name(DEFAULT_POOL).await? {
        Some(pool) => pool.id,
        None => {
            let spec =
                PoolSpec { name: DEFAULT_POOL.into(), expect_gpu_count: args.expect_gpus, ..PoolSpec::default() };
            stack.create_pool(spec).await?
        }
    };
    let token = stack.mint_join_token(&pool_id, 10, Duration::from_secs(24 * 3600)).await?;
    let bcd_dir = dir.join("bcd");
    let paths = stack.write_bcd_config(&bcd_dir, &bcd_dir).await?;
    let token_path = dir.join(TOKEN_FILE);
    write_secret(&token_path, &token)?;
    drop(token);

    let pins = stack.pins();
    println!("devstack is serving (stop with Ctrl-C)");
    println!("  gateway:            {}", stack.gateway_url());
    println!("  server name:        {}", stack.server_name());
    println!("  well-known:         {}", stack.well_known_url());
    println!("  serving CA pin:     {}", pins.serving_ca);
    println!("  join signing pin:   {}", pins.join_signing);
    println!("  join encryption pin: {}", pins.join_encryption);
    println!("  signed intent:      {}", args.signed_intent);
    println!("  pool:               {DEFAULT_POOL} ({pool_id})");
    println!("  data dir:           {}{}", dir.display(), if args.data.is_none() { " (temporary)" } else { "" });
    println!("  bcd config:         {}", paths.config.display());
    println!("  join encryption jwk: {}", paths.jwk.display());
    println!("  join token file:    {} (10 uses, 24 h)", token_path.display());
    println!();
    println!(
        "join a node: bcd join --token-file {}, with {} as its configuration",
        token_path.display(),
        paths.config.display()
    );

    stop.await;
    eprintln!("devstack: stopping");
    stack.shutdown().await.context("shut down")?;
    Ok(())
}

/// Writes a secret file readable by its owner only.
fn write_secret(path: &Path, secret: &str) -> Result<()> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path).with_context(|| format!("create {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        // An existing file keeps its mode through open(): set it again.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("chmod {}", path.display()))?;
    }
    writeln!(file, "{secret}").with_context(|| format!("write {}", path.display()))?;
    Ok(())
}

/// Listens for SIGINT and SIGTERM from now on (before anything is printed,
/// so a signal sent as soon as the output appears stops the stack cleanly);
/// the returned future completes on the first one.
fn stop_signals() -> Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("listen for SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("listen for SIGINT")?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async move {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
