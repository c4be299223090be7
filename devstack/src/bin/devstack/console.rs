//! `devstack console NODE [-- CMD…]` (docs/devstack.md, "devstack
//! console"): a node's shell in this terminal, or one command on it,
//! through the running stack's console route. On a terminal it switches to
//! raw mode (restored on every way out: the end, a detach, a signal, an
//! error, a panic), sends the terminal's size and each change of it
//! (SIGWINCH, and before typed bytes when the size moved), and relays until
//! the shell exits; the shell's status becomes this process's. Input waits
//! until the shell is up (its first output), so input that ended before
//! (`echo cmd | devstack console NODE`) is delivered, its end (Ctrl-D)
//! too, once the shell reads it ([`gate`]). With `-- CMD…` the shell runs
//! CMD alone and exits with its status, and only CMD's output is shown.
//! Ctrl-] (0x1d) detaches: the console is hung up and the process exits
//! [`DETACHED`]. Anything that ends the console without the shell's status
//! (a refusal, a cut tunnel, no stack) exits [`FAILED`] with the reason on
//! standard error. Nothing typed or shown is logged.

use std::io::{IsTerminal as _, Read as _};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use devstack::admin::client::AdminClient;
use devstack::admin::console_client::{ConsoleReceiver, ConsoleRequest, ConsoleSender};
use devstack::{ConsoleEnd, ConsoleEvent, ConsoleSize};
use tokio::io::AsyncWriteExt as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};

use crate::console_gate::{self as gate, Seen};

/// Ctrl-]: the byte that detaches.
const DETACH_BYTE: u8 = 0x1d;
/// The exit status of a detach (Ctrl-]).
pub const DETACHED: u8 = 254;
/// The exit status when the console ended without the shell's status.
pub const FAILED: u8 = 255;
/// How long a hang-up waits for the endpoint to take the close.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// `devstack console NODE [-- CMD…]`.
#[derive(Args)]
pub struct ConsoleArgs {
    /// The node: its id, a unique prefix of it, or its hostname.
    #[arg(value_name = "NODE", required_unless_present = "node_flag")]
    node: Option<String>,
    /// The same as NODE (as earlier versions took it).
    #[arg(long = "node", id = "node_flag", value_name = "NODE", conflicts_with = "node")]
    node_flag: Option<String>,
    /// One command to run instead of the interactive shell (after `--`; its
    /// words joined by spaces and run by the node's shell, as ssh does):
    /// only its output is shown, and its status is the exit status.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<String>,
}

impl ConsoleArgs {
    pub async fn run(self, ctx: &crate::Context) -> Result<ExitCode> {
        console(ctx, self).await
    }
}

/// How the relay ended.
enum Ending {
    /// The console said how it ended.
    End(ConsoleEnd),
    /// Ctrl-] was typed.
    Detached,
    /// This process got a signal (its number).
    Signal(i32),
}

/// Runs the console; the exit status is the shell's, [`DETACHED`], 128 + a
/// signal, or [`FAILED`] (with the reason printed).
async fn console(ctx: &crate::Context, args: ConsoleArgs) -> Result<ExitCode> {
    let node = args.node.clone().or(args.node_flag.clone()).unwrap_or_default();
    // Checked before any URL is built (a usage error, exit 2).
    crate::nodes::route("nodes", "node", &node, "")?;
    match run(ctx, &node, &args.command).await {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(e) => {
            eprintln!("devstack: {}", crate::exit::sentence(&e));
            Ok(ExitCode::from(FAILED))
        }
    }
}

/// The terminal's size, if standard input or output is one.
fn terminal_size() -> Option<ConsoleSize> {
    let (cols, rows) = crossterm::terminal::size().ok()?;
    (rows > 0 && cols > 0).then_some(ConsoleSize { rows: rows.into(), cols: cols.into() })
}

/// The caller's TERM (`dumb` without one).
fn caller_term() -> String {
    std::env::var("TERM").ok().filter(|t| !t.is_empty()).unwrap_or_else(|| "dumb".into())
}

/// Raw mode while it lives: the terminal as it was comes back on drop.
struct RawMode;

impl RawMode {
    fn enable() -> Result<RawMode> {
        crossterm::terminal::enable_raw_mode().context("put the terminal in raw mode")?;
        Ok(RawMode)
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

async fn run(ctx: &crate::Context, node: &str, command: &[String]) -> Result<u8> {
    let client = AdminClient::discover(&ctx.discovery)?;
    let terminal = std::io::stdin().is_terminal();
    let one_shot = (!command.is_empty()).then(|| gate::one_shot(&command.join(" "), terminal));
    let size = if terminal { terminal_size() } else { None }.unwrap_or_default();
    let request = ConsoleRequest { node: node.to_string(), size, term: Some(caller_term()) };
    let connection = client.console(&request).await?;
    let node = connection.node_id().to_string();
    if one_shot.is_none() {
        eprintln!("devstack: console on {node} (tunnel {}); Ctrl-] detaches", connection.tunnel_id());
    }
    let (mut tx, mut rx) = connection.split();
    let raw = if terminal { Some(RawMode::enable()?) } else { None };
    let how = How { terminal, size, line: one_shot };
    let ending = relay(&mut tx, &mut rx, stdin_chunks(), how).await;
    if matches!(ending, Ok(Ending::Detached | Ending::Signal(_))) {
        let _ = tokio::time::timeout(CLOSE_WAIT, tx.close()).await;
    }
    drop(raw);
    // A detach or a signal may leave the cursor mid-line: the sentence starts a line of its own.
    let (code, said) = match ending? {
        Ending::End(ConsoleEnd::Exited(status)) => (
            u8::try_from(status).unwrap_or(FAILED),
            format!("devstack: console on {node} ended: the shell exited with status {status}"),
        ),
        Ending::End(ConsoleEnd::Closed(reason)) => (FAILED, format!("devstack: console on {node} closed: {reason}")),
        Ending::End(other) => (FAILED, format!("devstack: console on {node} ended: {other}")),
        Ending::Detached => (DETACHED, format!("\ndevstack: detached from {node} (Ctrl-]); its shell is hung up")),
        Ending::Signal(n) => (128 + n as u8, format!("\ndevstack: console on {node} hung up on signal {n}")),
    };
    // A one-shot command's own status says enough; anything else is told.
    if command.is_empty() || code == FAILED || code == DETACHED || code > 128 {
        eprintln!("{said}");
    }
    Ok(code)
}

/// How the relay runs.
struct How {
    /// Standard input is a terminal.
    terminal: bool,
    /// Its size when the console opened.
    size: ConsoleSize,
    /// The one-shot line to type once the shell is up, if any.
    line: Option<Vec<u8>>,
}

/// Standard input in chunks as it comes, read by a thread of its own (the
/// channel closes at its end). The thread is not joined: the process exits
/// with it blocked in a read.
fn stdin_chunks() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    let spawned = std::thread::Builder::new().name("console-stdin".into()).spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buffer = [0u8; 4096];
        loop {
            match stdin.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.blocking_send(buffer[..n].to_vec()).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    });
    if spawned.is_err() {
        // No reader: the channel is closed, as at the end of the input.
        return mpsc::channel(1).1;
    }
    rx
}

/// Both directions at once, until the console ends, Ctrl-] or a signal.
async fn relay(
    tx: &mut ConsoleSender,
    rx: &mut ConsoleReceiver,
    input: mpsc::Receiver<Vec<u8>>,
    how: How,
) -> Result<Ending> {
    let mut signals = Signals::new()?;
    let (seen_tx, seen_rx) = watch::channel(Seen::default());
    let one_shot = how.line.is_some();
    tokio::select! {
        end = output(rx, seen_tx, one_shot) => end.map(Ending::End),
        ending = typing(tx, input, how, seen_rx, &mut signals) => Ok(ending),
    }
}

/// The console's output to standard output, until its end; what it shows
/// of the shell (up, the one-shot command started, a prompt) goes to `seen`.
async fn output(rx: &mut ConsoleReceiver, seen: watch::Sender<Seen>, one_shot: bool) -> Result<ConsoleEnd> {
    let mut stdout = tokio::io::stdout();
    let mut filter = gate::OutputFilter::new(one_shot);
    while let Some(event) = rx.next().await {
        match event {
            ConsoleEvent::Output(bytes) => {
                let (shown, now) = filter.pass(&bytes);
                seen.send_if_modified(|s| {
                    let changed = *s != now;
                    *s = now;
                    changed
                });
                if shown.is_empty() {
                    continue;
                }
                // A reader that went away (`| head`) stops nothing: the shell's status still counts.
                if stdout.write_all(&shown).await.is_ok() {
                    let _ = stdout.flush().await;
                }
            }
            ConsoleEvent::Ended(end) => return Ok(end),
            _ => {}
        }
    }
    anyhow::bail!("the console ended without saying how")
}

/// The signals the relay answers.
struct Signals {
    winch: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> Result<Signals> {
        let listen = |kind: SignalKind| signal(kind).context("listen for signals");
        Ok(Signals {
            winch: listen(SignalKind::window_change())?,
            hangup: listen(SignalKind::hangup())?,
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
        })
    }
}

/// Typed bytes and size changes to the console, until Ctrl-] or a signal.
/// Input is held until the shell is up ([`gate::Gate`]). A send that fails
/// is dropped: the receiving half reports the end.
async fn typing(
    tx: &mut ConsoleSender,
    mut input: mpsc::Receiver<Vec<u8>>,
    how: How,
    mut seen: watch::Receiver<Seen>,
    signals: &mut Signals,
) -> Ending {
    let (terminal, mut size) = (how.terminal, how.size);
    let mut gate = gate::Gate::new(how.line, terminal);
    let mut open = true;
    loop {
        tokio::select! {
            chunk = input.recv(), if open => {
                let Some(chunk) = chunk else {
                    // A file or a pipe ends like a person typing Ctrl-D.
                    open = false;
                    send(tx, gate.end()).await;
                    continue;
                };
                // A resize first, so the shell sees the size the person saw when typing.
                if terminal {
                    resize(tx, &mut size).await;
                }
                match chunk.iter().position(|b| *b == DETACH_BYTE) {
                    Some(at) => {
                        send(tx, gate.input(chunk[..at].to_vec())).await;
                        return Ending::Detached;
                    }
                    None => send(tx, gate.input(chunk)).await,
                }
            }
            changed = seen.changed() => {
                if changed.is_err() {
                    // The output half ended first: it reports the end.
                    std::future::pending::<()>().await;
                }
                let now = *seen.borrow_and_update();
                send(tx, gate.seen(now)).await;
            }
            _ = signals.winch.recv() => resize(tx, &mut size).await,
            _ = signals.hangup.recv() => return Ending::Signal(libc::SIGHUP),
            _ = signals.interrupt.recv() => return Ending::Signal(libc::SIGINT),
            _ = signals.terminate.recv() => return Ending::Signal(libc::SIGTERM),
        }
    }
}

/// Sends what the gate let through, in order.
async fn send(tx: &mut ConsoleSender, chunks: Vec<Vec<u8>>) {
    for chunk in chunks.into_iter().filter(|c| !c.is_empty()) {
        let _ = tx.write(chunk).await;
    }
}

/// Sends the terminal's size when it changed from `size`.
async fn resize(tx: &mut ConsoleSender, size: &mut ConsoleSize) {
    if let Some(now) = terminal_size().filter(|now| now != size) {
        *size = now;
        let _ = tx.resize(now).await;
    }
}
