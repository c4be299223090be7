//! `devstack console --node NODE` (docs/devstack.md, "devstack console"): a
//! node's shell in this terminal, through the running stack's console route.
//! On a terminal it switches to raw mode (restored on every way out: the
//! end, a detach, a signal, an error, a panic), sends the terminal's size
//! and each change of it (SIGWINCH, and before typed bytes when the size
//! moved), and relays until the shell exits; the shell's status becomes
//! this process's. Ctrl-] (0x1d) detaches: the console is hung up and the
//! process exits [`DETACHED`]. Anything that ends the console without the
//! shell's status (a refusal, a cut tunnel, no stack) exits [`FAILED`] with
//! the reason on standard error. Nothing typed or shown is logged.

use std::io::{IsTerminal as _, Read as _};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;
use devstack::admin::client::AdminClient;
use devstack::admin::console_client::{ConsoleReceiver, ConsoleRequest, ConsoleSender};
use devstack::{ConsoleEnd, ConsoleEvent, ConsoleSize};
use tokio::io::AsyncWriteExt as _;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// Ctrl-]: the byte that detaches.
const DETACH_BYTE: u8 = 0x1d;
/// Ctrl-D: what a standard input that is no terminal sends at its end.
const EOT: u8 = 0x04;
/// The exit status of a detach (Ctrl-]).
pub const DETACHED: u8 = 254;
/// The exit status when the console ended without the shell's status.
pub const FAILED: u8 = 255;
/// How long a hang-up waits for the endpoint to take the close.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// `devstack console --node NODE`.
#[derive(Args)]
pub struct ConsoleArgs {
    /// The node: its id, a unique prefix of it, or its hostname.
    #[arg(long, value_name = "NODE")]
    node: String,
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
pub async fn console(discovery: &Path, args: ConsoleArgs) -> Result<ExitCode> {
    match run(discovery, &args).await {
        Ok(code) => Ok(ExitCode::from(code)),
        Err(e) => {
            eprintln!("devstack: {e:#}");
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

async fn run(discovery: &Path, args: &ConsoleArgs) -> Result<u8> {
    let client = AdminClient::discover(discovery)?;
    let terminal = std::io::stdin().is_terminal();
    let size = if terminal { terminal_size() } else { None }.unwrap_or_default();
    let request = ConsoleRequest { node: args.node.clone(), size, term: Some(caller_term()) };
    let connection = client.console(&request).await?;
    let node = connection.node_id().to_string();
    eprintln!("devstack: console on {node} (tunnel {}); Ctrl-] detaches", connection.tunnel_id());
    let (mut tx, mut rx) = connection.split();
    let raw = if terminal { Some(RawMode::enable()?) } else { None };
    let ending = relay(&mut tx, &mut rx, stdin_chunks(), terminal, size).await;
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
    eprintln!("{said}");
    Ok(code)
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
    terminal: bool,
    size: ConsoleSize,
) -> Result<Ending> {
    let mut signals = Signals::new()?;
    tokio::select! {
        end = output(rx) => end.map(Ending::End),
        ending = typing(tx, input, terminal, size, &mut signals) => Ok(ending),
    }
}

/// The console's output to standard output, until its end.
async fn output(rx: &mut ConsoleReceiver) -> Result<ConsoleEnd> {
    let mut stdout = tokio::io::stdout();
    while let Some(event) = rx.next().await {
        match event {
            ConsoleEvent::Output(bytes) => {
                stdout.write_all(&bytes).await.context("write to standard output")?;
                stdout.flush().await.context("write to standard output")?;
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
/// A send that fails is dropped: the receiving half reports the end.
async fn typing(
    tx: &mut ConsoleSender,
    mut input: mpsc::Receiver<Vec<u8>>,
    terminal: bool,
    mut size: ConsoleSize,
    signals: &mut Signals,
) -> Ending {
    let mut open = true;
    loop {
        tokio::select! {
            chunk = input.recv(), if open => {
                let Some(chunk) = chunk else {
                    // A file or a pipe ends like a person typing Ctrl-D.
                    open = false;
                    if !terminal {
                        let _ = tx.write(vec![EOT]).await;
                    }
                    continue;
                };
                // A resize first, so the shell sees the size the person saw when typing.
                if terminal {
                    resize(tx, &mut size).await;
                }
                match chunk.iter().position(|b| *b == DETACH_BYTE) {
                    Some(at) => {
                        if at > 0 {
                            let _ = tx.write(chunk[..at].to_vec()).await;
                        }
                        return Ending::Detached;
                    }
                    None => {
                        let _ = tx.write(chunk).await;
                    }
                }
            }
            _ = signals.winch.recv() => resize(tx, &mut size).await,
            _ = signals.hangup.recv() => return Ending::Signal(libc::SIGHUP),
            _ = signals.interrupt.recv() => return Ending::Signal(libc::SIGINT),
            _ = signals.terminate.recv() => return Ending::Signal(libc::SIGTERM),
        }
    }
}

/// Sends the terminal's size when it changed from `size`.
async fn resize(tx: &mut ConsoleSender, size: &mut ConsoleSize) {
    if let Some(now) = terminal_size().filter(|now| now != size) {
        *size = now;
        let _ = tx.resize(now).await;
    }
}
