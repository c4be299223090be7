//! `devstack serve`: a dev control plane on loopback for joining bcd by hand
//! or by the dozen (docs/devstack.md, "devstack serve"). Before it writes
//! anything it locks the data directory ([`crate::lock`]) and checks that
//! the discovery file is free, so a second stack is refused with the
//! running one untouched. It prints the gateway URL, the well-known URL,
//! the pins and where it wrote a ready `config.toml` (with the WebSocket
//! fallback), `join-encryption.jwk` and a join-token file (never the token
//! itself); keeps its ports for the next run on the same directory
//! ([`crate::ports`]); serves the admin endpoint the other subcommands
//! talk to; with `--sim N` runs N simulated nodes ([`crate::sim`]); with
//! `--tpm` a TPM attestor; with `--releases DIR` serves and signs the
//! releases in DIR. SIGINT or SIGTERM stops the agents (their exit
//! awaited), the admin endpoint (its files removed) and the stack (Drain to
//! every session), quietly.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use devstack::admin::{Admin, AdminOptions, discovery, releases};
use devstack::{DevStack, DevStackOptions, PoolSpec, TpmAllow, TpmAttestorOptions};
use pki::tpm::attestor::NodeKeyPolicy;
use tokio::sync::watch;

use crate::gateway::{ChildSpec, Children};
use crate::lock::DataLock;
use crate::ports::Ports;
use crate::sim::{Sim, SimSpec, Variant, stopped};
use crate::store_args::{OpenedStore, StoreArgs, url_of};

/// The committed manufacturer root of the fakehw TPM's EK certificate.
const EK_ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/tpm/ek-root.der");
/// The committed swtpm state whose EK that root certifies.
const TPM_STATE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/tpm/tpm2-00.permall");

/// A committed file's path as a person reads it (without `..`).
fn committed(path: &str) -> PathBuf {
    Path::new(path).canonicalize().unwrap_or_else(|_| PathBuf::from(path))
}

/// `devstack serve`'s flags.
#[derive(Args)]
pub struct Serve {
    /// Keep the store in memory; config, key and token files go to a
    /// temporary directory that is printed (and removed at exit).
    #[arg(long, conflicts_with_all = ["data", "store", "postgres"])]
    memory: bool,
    /// Keep the store in DIR/devstack.sqlite (unless --store or --postgres
    /// puts it in PostgreSQL) and write the bcd files under DIR; a later run
    /// on the same DIR keeps the keys, pins and nodes.
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
    /// Run N gateways on the store (this process is g1; g2 … gN are
    /// `devstack gateway` processes); needs --postgres or --store.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    gateways: u32,
    /// The gateway port (0 picks a free one; default: the one DIR/ports.json
    /// kept from the last run on --data DIR, else 0).
    #[arg(long, value_name = "P")]
    port: Option<u16>,
    /// The HTTP port of the well-known document and the releases (as --port).
    #[arg(long, value_name = "P")]
    http_port: Option<u16>,
    /// The HTTPS port of the WebSocket session, `POST /v1/renew` and OTLP
    /// (as --port).
    #[arg(long, value_name = "P")]
    https_port: Option<u16>,
    /// The address to listen on (the admin endpoint is on loopback only, always).
    #[arg(long, value_name = "H", default_value = "127.0.0.1")]
    host: IpAddr,
    /// Sign commands and NodeSpecs with a command root, and hand joining
    /// nodes the command roots and a signed trust bundle.
    #[arg(long)]
    signed_intent: bool,
    /// The GPU count the pools' diag.nvml must report: the default pool's
    /// (default: any) and, with --sim, the sim pool's (default: the variant's).
    #[arg(long, value_name = "N")]
    expect_gpus: Option<u32>,
    /// How many joins the printed join token allows.
    #[arg(long, value_name = "N", default_value_t = 10)]
    token_uses: u32,
    /// How long the printed join token works (`90s`, `30m`, `24h`, `7d`).
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = humantime::parse_duration)]
    token_ttl: Duration,
    /// Run N simulated bcd nodes (`bcd sim`, fakehw, built on first use) that
    /// join the pool sim-<variant>; they stop with the stack.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    sim: Option<u32>,
    /// The simulated machine: hgx-h100 (8 GPUs), hgx-h100-gpu-missing (7 of
    /// 8: never adopted), l40s (4 GPUs), cpu (no GPU).
    #[arg(long, value_enum, value_name = "V", default_value = "hgx-h100")]
    sim_variant: Variant,
    /// The first simulated node's fakehw seed (node i gets S+i); also the
    /// seed of --chaos's draws.
    #[arg(long, value_name = "S", default_value = "41")]
    sim_seed: String,
    /// Run the simulated nodes under chaos: none, light or heavy (their
    /// links through a fault proxy; crashes, reboots, partitions, resets,
    /// stalls drawn from --sim-seed, each printed as it strikes; the fleet
    /// invariants checked at the stop). You are the workload.
    #[arg(long, value_name = "LEVEL", requires = "sim", value_parser = parse_level)]
    chaos: Option<devstack::chaos::Level>,
    /// A TPM attestor trusting the committed EK root (testdata/tpm/ek-root.der),
    /// admitting every EK it certifies into the default pool: `bcd join
    /// --attestor tpm` works by hand.
    #[arg(long)]
    tpm: bool,
    /// Another EK root (DER) for --tpm.
    #[arg(long, value_name = "FILE", requires = "tpm")]
    tpm_ek_root: Option<PathBuf>,
    /// The attestor's nodeKey policy: tpm, certified or any.
    #[arg(long, value_name = "POLICY", default_value = "tpm", value_parser = parse_node_key)]
    tpm_node_key: NodeKeyPolicy,
    /// Serve and sign the releases in DIR (DIR/<version>/bcd-<os>-<arch>, an
    /// optional DIR/<version>/sequence) and pin the release keys in the bcd
    /// config's [update]; `devstack command NODE daemon.upgrade --params
    /// '{"version":"V"}'` rolls one out.
    #[arg(long, value_name = "DIR")]
    releases: Option<PathBuf>,
}

fn parse_node_key(s: &str) -> Result<NodeKeyPolicy, String> {
    match s {
        "tpm" => Ok(NodeKeyPolicy::Tpm),
        "certified" => Ok(NodeKeyPolicy::Certified),
        "any" => Ok(NodeKeyPolicy::Any),
        other => Err(format!("{other:?} is not tpm, certified or any")),
    }
}

/// The name of the pool `serve` creates.
const DEFAULT_POOL: &str = "default";
/// The join token file, next to the bcd directory.
const TOKEN_FILE: &str = "join-token";

/// The TPM attestor of `--tpm`.
fn tpm_attestor(args: &Serve) -> Result<Option<TpmAttestorOptions>> {
    if !args.tpm {
        return Ok(None);
    }
    let root = args.tpm_ek_root.clone().unwrap_or_else(|| committed(EK_ROOT));
    let der = std::fs::read(&root).with_context(|| format!("read the EK root {}", root.display()))?;
    let mut attestor = TpmAttestorOptions::new(vec![der], args.tpm_node_key);
    attestor.allow.push(TpmAllow::any(DEFAULT_POOL));
    Ok(Some(attestor))
}

/// The default pool, created on first use.
async fn default_pool(stack: &DevStack, expect_gpus: Option<u32>) -> Result<String> {
    Ok(match stack.pool_by_name(DEFAULT_POOL)? {
        Some(pool) => pool.id,
        None => {
            let spec = PoolSpec { name: DEFAULT_POOL.into(), expect_gpu_count: expect_gpus, ..PoolSpec::default() };
            stack.create_pool(spec).await?
        }
    })
}

/// A stop flag that SIGINT or SIGTERM sets. It listens from now on (before
/// anything is printed, so a signal sent as soon as the output appears stops
/// the stack cleanly); once it is set the log is errors only (`quiet`).
pub fn stop_signals(quiet: crate::term::Quiet) -> Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listen for SIGINT")?;
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        quiet.now();
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// The data directory (made 0700 when serve creates it), locked; with
/// --memory a temporary one, kept until exit.
fn data_dir(args: &Serve) -> Result<(PathBuf, Option<tempfile::TempDir>, Option<DataLock>)> {
    let Some(dir) = &args.data else {
        let temp = tempfile::Builder::new().prefix("devstack-").tempdir().context("create a temporary directory")?;
        return Ok((temp.path().to_path_buf(), Some(temp), None));
    };
    // The directory holds the store (every private key of the stack) and
    // the token file: made owner-only when serve creates it.
    if !dir.exists() {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let lock = DataLock::take(dir)?;
    Ok((dir.clone(), None, Some(lock)))
}

impl Serve {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        run(self, ctx).await
    }
}

async fn run(args: Serve, ctx: &crate::Context) -> Result<ExitCode> {
    let mut stop = stop_signals(ctx.quiet.clone())?;
    if args.gateways > 1 && !args.store.shared() {
        anyhow::bail!("--gateways {} needs a store they share: --postgres or --store URL", args.gateways);
    }
    // Refused before anything is written: another stack's discovery file,
    // another stack's data directory (the lock).
    discovery::check_free(&ctx.discovery)?;
    let (dir, temp, _lock) = data_dir(&args)?;
    let kept = if args.data.is_some() { Ports::kept(&dir)? } else { Ports::default() };
    let ports = kept.choose(args.port, args.http_port, args.https_port);
    let sqlite = dir.join("devstack.sqlite");
    let opened = args.store.open((!args.memory && args.data.is_some()).then_some(sqlite.as_path()))?;
    let options = DevStackOptions {
        store: opened.location.clone(),
        signed_intent: args.signed_intent,
        listen_host: args.host,
        gateway_port: ports.gateway,
        http_port: ports.http,
        https_port: ports.https,
        tpm_attestor: tpm_attestor(&args)?,
        ..DevStackOptions::default()
    };
    let started = DevStack::start(options).await;
    let stack = match started {
        Ok(stack) => Arc::new(stack),
        Err(e @ devstack::Error::Bind { .. }) if kept.any() => {
            return Err(anyhow::anyhow!(
                "{e}: the nodes joined to {} know the ports in {} (free them, or pass --port/--http-port/--https-port 0 to take others, which those nodes will not find)",
                dir.display(),
                crate::ports::path(&dir).display()
            ));
        }
        Err(e) => return Err(anyhow::Error::from(e).context("start the dev stack")),
    };
    if args.data.is_some() {
        let now =
            Ports { gateway: stack.gateway_addr().port(), http: http_port(&stack), https: stack.https_addr().port() };
        now.keep(&dir)?;
    }
    let others = match url_of(&opened.location) {
        Some(url) if args.gateways > 1 => {
            let spec = ChildSpec {
                store_url: url,
                gateways: args.gateways,
                host: args.host,
                signed_intent: args.signed_intent,
            };
            Some(Children::start(&spec).await?)
        }
        _ => None,
    };
    let admin = prepare(&stack, &args, &dir, &ctx.discovery, &opened, others.as_ref()).await?;

    let code = run_until_stopped(&stack, &args, &dir, &mut stop).await?;
    if let Some(others) = others {
        others.stop().await?;
    }
    admin.shutdown().await;
    match Arc::try_unwrap(stack) {
        Ok(stack) => stack.shutdown().await.context("shut down")?,
        // Invariant: the admin endpoint's requests end with it; a stack
        // still shared is dropped (its servers abort) when the last one goes.
        Err(_) => tracing::warn!("devstack: the stack is still shared at exit; not drained"),
    }
    drop(temp);
    // The throwaway cluster goes last, once no gateway uses it.
    drop(opened);
    Ok(code)
}

/// The HTTP listener's port.
fn http_port(stack: &DevStack) -> u16 {
    stack.http_url().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or(0)
}

/// Runs the simulated nodes (if asked) until SIGINT or SIGTERM, then stops
/// them; a sim that ended by itself makes the exit code a failure.
async fn run_until_stopped(
    stack: &DevStack,
    args: &Serve,
    dir: &Path,
    stop: &mut watch::Receiver<bool>,
) -> Result<ExitCode> {
    let Some(nodes) = args.sim else {
        tokio::select! {
            () = report_rejections(stack) => {}
            _ = stopped(stop) => {}
        }
        crate::term::print("devstack: stopping");
        return Ok(ExitCode::SUCCESS);
    };
    let spec = SimSpec {
        nodes,
        variant: args.sim_variant,
        seed: args.sim_seed.clone(),
        expect_gpus: args.expect_gpus,
        chaos: args.chaos,
    };
    let mut sim = tokio::select! {
        sim = Sim::start(stack, dir, &spec) => sim?,
        _ = stopped(stop) => {
            crate::term::print("devstack: stopping (before bcd sim started)");
            return Ok(ExitCode::SUCCESS);
        }
    };
    let watched = sim.watch(stack, stop).await;
    if let Err(e) = &watched {
        crate::term::print(&format!("devstack: {}", crate::exit::sentence(e)));
        crate::term::print("devstack: still serving; stop with Ctrl-C");
        stopped(stop).await;
    }
    crate::term::print("devstack: stopping bcd sim, then the stack");
    let status = sim.stop(stack).await?;
    crate::term::print(&format!("devstack: bcd sim stopped: {}", crate::sim::explain(status)));
    Ok(if watched.is_ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn parse_level(s: &str) -> Result<devstack::chaos::Level, String> {
    s.parse()
}

/// Without --sim: a line for each node rejected (one at a time, as nodes
/// joined by hand come), from the event stream; until the stack stops.
async fn report_rejections(stack: &DevStack) {
    let after = stack.recent_events().last().map_or(0, |e| e.seq);
    let mut events = stack.events(after);
    while let Some(received) = events.next().await {
        if let devstack::Received::Event(e) = received
            && let devstack::StackEvent::Rejected { node_id, reason } = &e.event
        {
            crate::term::print(&format!("devstack: node {node_id} rejected: {reason}"));
        }
    }
}

/// Everything before serving: the default pool, the join token file, the
/// releases, the bcd configuration, the admin endpoint; prints where they are.
async fn prepare(
    stack: &Arc<DevStack>,
    args: &Serve,
    dir: &Path,
    discovery_file: &Path,
    opened: &OpenedStore,
    others: Option<&Children>,
) -> Result<Admin> {
    let pool_id = default_pool(stack, args.expect_gpus).await?;
    let token = stack.mint_join_token(&pool_id, args.token_uses, args.token_ttl).await?;
    let token_path = dir.join(TOKEN_FILE);
    discovery::write_private(&token_path, format!("{token}\n").as_bytes())
        .with_context(|| format!("write {}", token_path.display()))?;
    drop(token);
    let mut published = Vec::new();
    if let Some(releases_dir) = &args.releases {
        published = releases::publish_new(stack, releases_dir)
            .await
            .with_context(|| format!("publish the releases of {}", releases_dir.display()))?;
    }
    let pins = args.releases.is_some().then(|| stack.release_keys());
    let bcd_dir = dir.join("bcd");
    let paths = stack.write_bcd_config_with_websocket(&bcd_dir, &bcd_dir, pins.as_ref()).await?;
    let admin = Admin::serve(
        stack.clone(),
        AdminOptions {
            discovery: discovery_file.to_path_buf(),
            data_dir: dir.to_path_buf(),
            default_pool: DEFAULT_POOL.into(),
            releases: args.releases.clone(),
        },
    )
    .await
    .context("start the admin endpoint")?;

    let printed = Printed { pool_id: &pool_id, token_path: &token_path, paths: &paths, published: &published };
    print_block(stack, args, dir, opened, others, &admin, &printed);
    Ok(admin)
}

/// What [`prepare`] made, for the block serve prints.
struct Printed<'a> {
    pool_id: &'a str,
    token_path: &'a Path,
    paths: &'a devstack::BcdConfigPaths,
    published: &'a [devstack::Release],
}

/// The block serve prints once it serves: every URL, the pins, the files,
/// and how to join a node.
fn print_block(
    stack: &DevStack,
    args: &Serve,
    dir: &Path,
    opened: &OpenedStore,
    others: Option<&Children>,
    admin: &Admin,
    printed: &Printed<'_>,
) {
    let Printed { pool_id, token_path, paths, published } = *printed;
    let pins = stack.pins();
    let ttl = crate::table::duration(args.token_ttl);
    say!("devstack is serving (stop with Ctrl-C)");
    say!("  gateway:             {}", stack.gateway_url());
    for (id, url) in others.map(|o| o.urls.as_slice()).unwrap_or_default() {
        say!("  gateway {id:<12} {url}");
    }
    say!("  server name:         {}", stack.server_name());
    say!("  well-known:          {}", stack.well_known_url());
    say!("  websocket session:   {}", stack.websocket_url());
    say!("  OTLP metrics:        {}", stack.otlp_url());
    say!("  serving CA pin:      {}", pins.serving_ca);
    say!("  join signing pin:    {}", pins.join_signing);
    say!("  join encryption pin: {}", pins.join_encryption);
    say!("  signed intent:       {}", args.signed_intent);
    say!("  pool:                {DEFAULT_POOL} ({pool_id})");
    say!("  data dir:            {}{}", dir.display(), if args.data.is_none() { " (temporary)" } else { "" });
    match (&opened.cluster, url_of(&opened.location)) {
        // A throwaway cluster's URL has no password: printed whole, for psql.
        (Some(_), Some(url)) => say!("  store:               PostgreSQL, {url} (throwaway, removed at exit)"),
        _ => say!("  store:               {}", opened.location),
    }
    say!("  bcd config:          {}", paths.config.display());
    say!("  join encryption jwk: {}", paths.jwk.display());
    say!("  join token file:     {} ({} uses, {ttl})", token_path.display(), args.token_uses);
    say!("  admin endpoint:      {} (discovery file {})", admin.url(), admin.discovery_path().display());
    if args.tpm {
        let root = args.tpm_ek_root.clone().unwrap_or_else(|| committed(EK_ROOT));
        say!("  TPM attestor:        EK root {}", root.display());
    }
    if let Some(releases_dir) = &args.releases {
        let versions: Vec<String> =
            published.iter().map(|r| format!("{} (sequence {})", r.version, r.sequence)).collect();
        say!("  releases:            {} published from {}", versions.len(), releases_dir.display());
        for v in versions {
            say!("                       {v}");
        }
    }
    say!("");
    let (bcd, note) = crate::hint::bcd();
    say!(
        "join a node: {bcd} join --token-file {} --config {}, then {bcd} node --config {}",
        token_path.display(),
        paths.config.display(),
        paths.config.display()
    );
    if let Some(note) = note {
        say!("  ({note})");
    }
    if args.tpm {
        say!(
            "join with a TPM: BCD_FAKEHW_TPM_STATE={} {bcd} join --attestor tpm --config {} (a fakehw bcd)",
            committed(TPM_STATE).display(),
            paths.config.display()
        );
    }
    say!("look around from another terminal: devstack nodes, devstack events --watch, devstack --help");
}
