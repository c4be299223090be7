//! `devstack`: the dev control plane's command line (docs/devstack.md,
//! "devstack serve" and "The admin CLI"). `serve` runs a stack on loopback
//! (optionally with N simulated bcd nodes, `--sim N`, and N gateways on a
//! PostgreSQL store, `--gateways N`) and its admin endpoint; `gateway` runs
//! one more gateway on a shared store; every other subcommand talks to a running stack through that
//! endpoint, found by its discovery file: `nodes`, `node`, `token`,
//! `command`, `reserve`, `release`, `revoke`, `events`, `status`,
//! `cordon`, `uncordon` ([`fleet`]), `ssh-cert` ([`ssh_cert`]), and
//! `console` (a node's shell in this terminal, [`console`]).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

mod cli;
mod console;
mod fleet;
mod gateway;
mod serve;
mod sim;
mod ssh_cert;
mod store_args;
mod table;

/// The dev control plane of the bcd interop workspace.
#[derive(Parser)]
#[command(name = "devstack", version, about)]
struct Cli {
    /// The admin discovery file (default: DEVSTACK_ADMIN, else
    /// $XDG_RUNTIME_DIR/devstack/admin.json, else <temp dir>/devstack-<uid>/admin.json).
    #[arg(long, value_name = "FILE", global = true)]
    admin_file: Option<PathBuf>,
    #[command(subcommand)]
    action: Action,
}

#[derive(Subcommand)]
enum Action {
    /// Serve the JoinService, the gateway, the well-known document and the
    /// admin endpoint until SIGINT or SIGTERM.
    Serve(serve::Serve),
    /// Serve one more gateway of a stack whose store is a shared PostgreSQL
    /// database (its nodes fail over between the gateways) until SIGINT or SIGTERM.
    Gateway(gateway::Gateway),
    /// What the running stack is: URLs, pools, how many nodes in each state.
    Status(cli::Status),
    /// List the nodes of the running stack.
    Nodes(cli::Nodes),
    /// Show one node: sessions, certificates, inventory, sections, commands, reservations.
    Node(cli::NodeArgs),
    /// Mint a join token; the stack writes it to a file (0600) and prints the path.
    Token(cli::Token),
    /// Enqueue a command for a node (and wait for its end with --wait).
    Command(cli::CommandArgs),
    /// Book GPUs of an adopted node (or, with --pool, of the node placement picks) as a hold.
    Reserve(cli::Reserve),
    /// Cordon a node: it takes no new reservation or instance and keeps what it runs.
    Cordon(fleet::Cordon),
    /// Lift a node's cordon.
    Uncordon(fleet::Uncordon),
    /// A user certificate of the stack's break-glass SSH CA for a principal the node allows.
    SshCert(ssh_cert::SshCert),
    /// Withdraw a reservation's hold.
    Release(cli::Release),
    /// Revoke every certificate of a node; its session gets a RevocationNotice.
    Revoke(cli::Revoke),
    /// Print the stack's events, one JSON line each (and follow them with --watch).
    Events(cli::Events),
    /// A node's shell in this terminal (signed intent): raw mode, the window
    /// size, the shell's exit status; Ctrl-] detaches (exit 254), a console
    /// that ends without the shell's status exits 255.
    Console(console::ConsoleArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let serving = matches!(cli.action, Action::Serve(_) | Action::Gateway(_));
    // The stack logs warnings by default (RUST_LOG=info shows every join,
    // session and command); the client subcommands log nothing of their own.
    tracing_subscriber::fmt()
        .fmt_fields(devstack::EscapedFields)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(if serving { "warn" } else { "error" })),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("devstack: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<std::process::ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the runtime")?;
    let discovery = devstack::admin::discovery::path(cli.admin_file.as_deref());
    let result = runtime.block_on(async move {
        match cli.action {
            Action::Serve(args) => serve::run(args, discovery).await,
            Action::Gateway(args) => gateway::run(args).await,
            Action::Status(args) => cli::status(&discovery, args).await,
            Action::Nodes(args) => cli::nodes(&discovery, args).await,
            Action::Node(args) => cli::node(&discovery, args).await,
            Action::Token(args) => cli::token(&discovery, args).await,
            Action::Command(args) => cli::command(&discovery, args).await,
            Action::Reserve(args) => cli::reserve(&discovery, args).await,
            Action::Cordon(args) => fleet::cordon(&discovery, args).await,
            Action::Uncordon(args) => fleet::uncordon(&discovery, args).await,
            Action::SshCert(args) => ssh_cert::ssh_cert(&discovery, args).await,
            Action::Release(args) => cli::release(&discovery, args).await,
            Action::Revoke(args) => cli::revoke(&discovery, args).await,
            Action::Events(args) => cli::events(&discovery, args).await,
            Action::Console(args) => console::console(&discovery, args).await,
        }
    });
    // A first bcd build still running in a blocking thread (a stop during
    // it) is not waited for.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}
