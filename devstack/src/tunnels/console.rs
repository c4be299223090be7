//! The caller's side of a console: [`Console`], what [`DevStack::open_console`]
//! returns. It is two halves over channels, so that any transport can drive
//! one: a test reads and writes it in process, and a WebSocket or
//! HTTP-upgrade route splits it ([`Console::split`]) and pumps each half
//! from its own task. Dropping either half hangs the console up: the stack
//! closes the tunnel and bcd hangs the shell up.
//!
//! [`DevStack::open_console`]: crate::DevStack::open_console

use std::time::Duration;

use tokio::sync::mpsc;

use crate::error::{Error, Result};

/// How many events may wait for a slow caller before the relay stops
/// reading the node (and the node's terminal waits in turn).
const EVENT_BUFFER: usize = 256;
/// How many inputs may wait for a slow node.
const INPUT_BUFFER: usize = 64;

/// A terminal's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsoleSize {
    /// Rows.
    pub rows: u32,
    /// Columns.
    pub cols: u32,
}

impl Default for ConsoleSize {
    /// 24 × 80.
    fn default() -> Self {
        ConsoleSize { rows: 24, cols: 80 }
    }
}

/// What the caller sends toward the node.
#[derive(Debug)]
pub(crate) enum ConsoleInput {
    /// Typed bytes.
    Data(Vec<u8>),
    /// The caller's terminal changed size.
    Resize(ConsoleSize),
}

/// What happens on a console, in order: `Opened` (unless it was refused),
/// output, then exactly one `Ended`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsoleEvent {
    /// The node took the ticket, dialed Tunnel and started its shell.
    Opened,
    /// Terminal output (a secret: never logged).
    Output(Vec<u8>),
    /// The console ended; nothing follows.
    Ended(ConsoleEnd),
}

/// How a console ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConsoleEnd {
    /// The shell exited with this status.
    Exited(i32),
    /// The tunnel was refused or cut: `"<code>: <detail>"`, from bcd (a
    /// refused ticket, its shell) or from the stack (the node went away,
    /// it never dialed, the stack shut down).
    Closed(String),
}

impl ConsoleEnd {
    /// The stable code of a closed console (`ticket-replayed`,
    /// `tunnel-gone`, …); None for an exit.
    pub fn code(&self) -> Option<&str> {
        match self {
            ConsoleEnd::Exited(_) => None,
            ConsoleEnd::Closed(reason) => Some(reason.split(':').next().unwrap_or_default()),
        }
    }
}

impl std::fmt::Display for ConsoleEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConsoleEnd::Exited(code) => write!(f, "the shell exited with status {code}"),
            ConsoleEnd::Closed(reason) => write!(f, "closed: {reason}"),
        }
    }
}

/// The stack's ends of one console: where the relay sends events and reads
/// the caller's input.
pub(crate) struct CallerSide {
    /// Events to the caller.
    pub events: mpsc::Sender<ConsoleEvent>,
    /// The caller's input.
    pub input: mpsc::Receiver<ConsoleInput>,
}

impl CallerSide {
    /// Tells the caller the console ended (a caller already gone is fine).
    pub async fn end(&self, end: ConsoleEnd) {
        let _ = self.events.send(ConsoleEvent::Ended(end)).await;
    }
}

/// The writing half of a console.
pub struct ConsoleWriter {
    tunnel_id: String,
    input: mpsc::Sender<ConsoleInput>,
}

impl ConsoleWriter {
    /// Types `bytes` into the console.
    pub async fn write(&self, bytes: impl Into<Vec<u8>>) -> Result<()> {
        self.send(ConsoleInput::Data(bytes.into())).await
    }

    /// Resizes the console's terminal.
    pub async fn resize(&self, size: ConsoleSize) -> Result<()> {
        self.send(ConsoleInput::Resize(size)).await
    }

    async fn send(&self, input: ConsoleInput) -> Result<()> {
        self.input
            .send(input)
            .await
            .map_err(|_| Error::ConsoleEnded { tunnel_id: self.tunnel_id.clone(), reason: None })
    }
}

/// The reading half of a console.
pub struct ConsoleReader {
    events: mpsc::Receiver<ConsoleEvent>,
    ended: bool,
}

impl ConsoleReader {
    /// The next event; None once the console ended (after its `Ended`).
    pub async fn next(&mut self) -> Option<ConsoleEvent> {
        if self.ended {
            return None;
        }
        let event = self.events.recv().await;
        // A relay that went away without a word is a closed console too.
        let event = event.unwrap_or_else(|| {
            ConsoleEvent::Ended(ConsoleEnd::Closed(format!(
                "{}: the stack's relay ended",
                proto::refusal::Code::TunnelGone
            )))
        });
        self.ended = matches!(event, ConsoleEvent::Ended(_));
        Some(event)
    }
}

/// A console on a node, as [`crate::DevStack::open_console`] opened it.
pub struct Console {
    tunnel_id: String,
    node_id: String,
    ticket: String,
    writer: ConsoleWriter,
    reader: ConsoleReader,
    opened: bool,
    pending: Vec<u8>,
}

/// A new console and the stack's ends of it.
pub(crate) fn pair(tunnel_id: &str, node_id: &str, ticket: &str) -> (Console, CallerSide) {
    let (events_tx, events_rx) = mpsc::channel(EVENT_BUFFER);
    let (input_tx, input_rx) = mpsc::channel(INPUT_BUFFER);
    let console = Console {
        tunnel_id: tunnel_id.to_string(),
        node_id: node_id.to_string(),
        ticket: ticket.to_string(),
        writer: ConsoleWriter { tunnel_id: tunnel_id.to_string(), input: input_tx },
        reader: ConsoleReader { events: events_rx, ended: false },
        opened: false,
        pending: Vec::new(),
    };
    (console, CallerSide { events: events_tx, input: input_rx })
}

impl Console {
    /// The tunnel's id (the OpenTunnel's and every TunnelFrame's).
    pub fn tunnel_id(&self) -> &str {
        &self.tunnel_id
    }

    /// The node.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The exec ticket the console was opened with: a secret (never log
    /// it); tests reuse it to prove that bcd refuses a replay.
    pub fn ticket(&self) -> &str {
        &self.ticket
    }

    /// Types `bytes` into the console.
    pub async fn write(&self, bytes: impl Into<Vec<u8>>) -> Result<()> {
        self.writer.write(bytes).await
    }

    /// Resizes the console's terminal.
    pub async fn resize(&self, size: ConsoleSize) -> Result<()> {
        self.writer.resize(size).await
    }

    /// The next event; None once the console ended.
    pub async fn next(&mut self) -> Option<ConsoleEvent> {
        self.reader.next().await
    }

    /// The two halves, for a transport that drives each from its own task.
    pub fn split(self) -> (ConsoleWriter, ConsoleReader) {
        (self.writer, self.reader)
    }

    /// Reads output until what arrived since the last call holds `needle`,
    /// and returns it (up to the end of the chunk that completed it).
    pub async fn await_output(&mut self, needle: &str, timeout: Duration) -> Result<String> {
        let deadline = tokio::time::Instant::now() + timeout;
        while find(&self.pending, needle.as_bytes()).is_none() {
            // The output itself stays out of the error: it may echo what was typed.
            let what =
                format!("the awaited output on console {} ({} bytes so far)", self.tunnel_id, self.pending.len());
            self.step_or_end(deadline, timeout, what).await?;
        }
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        Ok(out)
    }

    /// Waits until the node took the ticket and its shell runs.
    pub async fn await_opened(&mut self, timeout: Duration) -> Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.opened {
            let what = format!("console {} to open", self.tunnel_id);
            self.step_or_end(deadline, timeout, what).await?;
        }
        Ok(())
    }

    /// Reads (and drops) output until the console ends, and returns how.
    pub async fn await_end(&mut self, timeout: Duration) -> Result<ConsoleEnd> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let what = format!("console {} to end", self.tunnel_id);
            match self.step(deadline, timeout, what).await? {
                Step::Noted => self.pending.clear(),
                Step::Ended(Some(end)) => return Ok(end),
                Step::Ended(None) => return Err(self.ended(None)),
            }
        }
    }

    /// Takes the next event before `deadline`: `Opened` and output are
    /// noted, the end is the end, and the deadline [`Error::Timeout`]
    /// naming `what`.
    async fn step(&mut self, deadline: tokio::time::Instant, timeout: Duration, what: String) -> Result<Step> {
        match tokio::time::timeout_at(deadline, self.reader.next()).await {
            Err(_) => Err(Error::Timeout { what, waited_ms: timeout.as_millis() as u64 }),
            Ok(None) => Ok(Step::Ended(None)),
            Ok(Some(ConsoleEvent::Ended(end))) => Ok(Step::Ended(Some(end))),
            Ok(Some(ConsoleEvent::Opened)) => {
                self.opened = true;
                Ok(Step::Noted)
            }
            Ok(Some(ConsoleEvent::Output(bytes))) => {
                self.pending.extend_from_slice(&bytes);
                Ok(Step::Noted)
            }
        }
    }

    /// `step`, where the end is the error
    /// [`Error::ConsoleEnded`] (saying how it ended).
    async fn step_or_end(&mut self, deadline: tokio::time::Instant, timeout: Duration, what: String) -> Result<()> {
        match self.step(deadline, timeout, what).await? {
            Step::Noted => Ok(()),
            Step::Ended(end) => Err(self.ended(end)),
        }
    }

    fn ended(&self, end: Option<ConsoleEnd>) -> Error {
        Error::ConsoleEnded { tunnel_id: self.tunnel_id.clone(), reason: end.map(|e| e.to_string()) }
    }
}

/// What the next event of a console was.
enum Step {
    /// Output, or the news that it opened.
    Noted,
    /// The end (how, when the relay said so).
    Ended(Option<ConsoleEnd>),
}

/// Where `needle` starts in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_console_reads_output_until_its_end() {
        let (mut console, side) = pair("tun_1", "node_1", "ticket");
        side.events.send(ConsoleEvent::Opened).await.unwrap();
        side.events.send(ConsoleEvent::Output(b"$ echo hi-$((6*7))\r\nhi-".to_vec())).await.unwrap();
        side.events.send(ConsoleEvent::Output(b"42\r\n$ ".to_vec())).await.unwrap();
        let wait = Duration::from_secs(5);
        console.await_opened(wait).await.unwrap();
        let out = console.await_output("hi-42", wait).await.unwrap();
        assert!(out.ends_with("hi-42\r\n$ "), "{out:?}");
        side.end(ConsoleEnd::Exited(5)).await;
        assert_eq!(console.await_end(wait).await.unwrap(), ConsoleEnd::Exited(5));
        assert_eq!(console.next().await, None, "nothing after the end");
    }

    #[tokio::test]
    async fn a_relay_that_goes_away_closes_the_console_and_writes_fail_once_it_is_gone() {
        let (mut console, side) = pair("tun_1", "node_1", "ticket");
        console.write("x").await.unwrap();
        drop(side);
        let end = console.await_end(Duration::from_secs(5)).await.unwrap();
        assert_eq!(end.code(), Some("tunnel-gone"), "{end}");
        assert!(matches!(console.write("y").await, Err(Error::ConsoleEnded { .. })));
        assert_eq!(ConsoleEnd::Closed("ticket-replayed: t1 was used".into()).code(), Some("ticket-replayed"));
    }
}
