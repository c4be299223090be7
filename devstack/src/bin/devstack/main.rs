//! `devstack`: the dev control plane's command line (docs/devstack.md,
//! "devstack serve" and "The admin CLI"). `serve` runs a stack on loopback
//! (optionally with N simulated bcd nodes, `--sim N`, and N gateways on a
//! PostgreSQL store, `--gateways N`) and its admin endpoint; `gateway` runs
//! one more gateway on a shared store; `chaos` runs a chaos run over real
//! daemons and checks the fleet invariants; every other subcommand talks to
//! a running stack through that endpoint, found by its discovery file.
//!
//! A subcommand is a module whose arguments type has `async fn run(self,
//! &Context) -> Result<ExitCode>`, plus one line in [`actions!`] below;
//! lists and gets print through [`output`], and errors become one line and
//! a stable exit status in [`exit`].

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};

#[macro_use]
mod output;
mod chaos;
mod commands;
mod completion;
mod console;
mod console_gate;
mod events;
mod exit;
mod fleet;
mod gateway;
mod hint;
mod instances;
mod lock;
mod nodes;
mod pools;
mod ports;
mod reservations;
mod revoke;
mod serve;
mod sim;
mod ssh_cert;
mod status;
mod store_args;
mod table;
mod term;
mod tokens;

pub use exit::usage;

/// The dev control plane of the bcd interop workspace.
#[derive(Parser)]
#[command(name = "devstack", version, about, after_help = exit::HELP)]
pub struct Cli {
    /// The admin discovery file (default: DEVSTACK_ADMIN, else
    /// $XDG_RUNTIME_DIR/devstack/admin.json, else <temp dir>/devstack-<uid>/admin.json).
    #[arg(long, value_name = "FILE", global = true)]
    admin_file: Option<PathBuf>,
    #[command(subcommand)]
    action: Action,
}

/// What every subcommand gets.
pub struct Context {
    /// The admin discovery file.
    pub discovery: PathBuf,
    /// Lowers the stack's log level once a stop began (`serve`, `gateway`).
    pub quiet: term::Quiet,
}

impl Context {
    /// The client of the running stack.
    pub fn client(&self) -> Result<devstack::admin::client::AdminClient> {
        Ok(devstack::admin::client::AdminClient::discover(&self.discovery)?)
    }
}

/// Declares the subcommands: each `Variant(module::Args)` line is one
/// subcommand, its help the doc comment above it.
macro_rules! actions {
    ($( $(#[$doc:meta])* $variant:ident($module:ident::$args:ident), )*) => {
        #[derive(Subcommand)]
        enum Action { $( $(#[$doc])* $variant($module::$args), )* }

        impl Action {
            async fn run(self, ctx: &Context) -> Result<ExitCode> {
                match self { $( Action::$variant(args) => args.run(ctx).await, )* }
            }
        }
    };
}

actions! {
    /// Serve the JoinService, the gateway, the well-known document and the
    /// admin endpoint until SIGINT or SIGTERM.
    Serve(serve::Serve),
    /// Serve one more gateway of a stack whose store is a shared PostgreSQL
    /// database (its nodes fail over between the gateways) until SIGINT or SIGTERM.
    Gateway(gateway::Gateway),
    /// A chaos run over real daemons: N bcd sim agents behind a fault proxy,
    /// a workload and seeded faults, then the fleet invariants (the report is
    /// JSON; exit 7, invariant-violated, when one does not hold).
    Chaos(chaos::Chaos),
    /// What the running stack is: URLs, pools, how many nodes in each state.
    Status(status::Status),
    /// List the nodes (sorted by hostname; `--watch` follows their changes).
    Nodes(nodes::Nodes),
    /// Show one node: sessions, certificates, inventory, sections, commands, reservations.
    Node(nodes::NodeArgs),
    /// Mint a join token; the stack writes it to a file (0600) and prints the path.
    Token(tokens::Token),
    /// List the join tokens (never the tokens themselves).
    Tokens(tokens::Tokens),
    /// Enqueue a command for a node (and wait for its end with --wait).
    Command(commands::CommandArgs),
    /// List the commands (of a node, in a state), or show one.
    Commands(commands::Commands),
    /// Book GPUs of an adopted node (or, with --pool, of the node placement picks) as a hold.
    Reserve(reservations::Reserve),
    /// Cordon a node: it takes no new reservation or instance and keeps what it runs.
    Cordon(fleet::Cordon),
    /// Lift a node's cordon.
    Uncordon(fleet::Uncordon),
    /// A user certificate of the stack's break-glass SSH CA for a principal the node allows.
    SshCert(ssh_cert::SshCert),
    /// Withdraw a reservation's hold.
    Release(reservations::Release),
    /// List the reservations, or show one.
    Reservations(reservations::Reservations),
    /// List the pools, or show one.
    Pools(pools::Pools),
    /// List the VPS instances, or show one.
    Instances(instances::Instances),
    /// Revoke every certificate of a node; its session gets a RevocationNotice.
    Revoke(revoke::Revoke),
    /// Print the stack's events (a line a person reads on a terminal, JSON
    /// lines when piped or with -o json), and follow them with --watch.
    Events(events::Events),
    /// A node's shell in this terminal (signed intent), or one command on it
    /// (`devstack console NODE -- CMD…`); exits with the shell's status.
    Console(console::ConsoleArgs),
    /// Print a shell completion script (bash, zsh or fish).
    Completion(completion::Completion),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help, a version or a usage error (2); a reader that went away is no failure.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(exit::USAGE));
        }
    };
    let serving = matches!(cli.action, Action::Serve(_) | Action::Gateway(_));
    // The stack logs warnings by default (RUST_LOG=info shows every join,
    // session and command); the client subcommands log nothing of their own,
    // and a chaos run only errors (its faults make warnings by design).
    let quiet = term::init_logs(if serving { "warn" } else { "error" });
    match run(cli, quiet) {
        Ok(code) => code,
        Err(e) => exit::report(&e),
    }
}

fn run(cli: Cli, quiet: term::Quiet) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("start the runtime")?;
    let ctx = Context { discovery: devstack::admin::discovery::path(cli.admin_file.as_deref()), quiet };
    let result = runtime.block_on(cli.action.run(&ctx));
    // A first bcd build still running in a blocking thread (a stop during
    // it) is not waited for.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}
