//! Captured output of bcd processes: every line kept in memory and in a log
//! file in the node's directory, streamed to standard error with
//! `BCD_E2E_LOG=1`, and searchable (tests assert that no secret appears,
//! and await a line: every push wakes the waiters, none polls).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// A shared, append-only log of one node.
#[derive(Clone)]
pub struct LogSink {
    name: String,
    path: PathBuf,
    lines: Arc<Mutex<Vec<String>>>,
    pushed: Arc<tokio::sync::watch::Sender<usize>>,
    stream: bool,
}

impl LogSink {
    /// A sink named `name` (the prefix of streamed lines) writing to `path`.
    pub fn new(name: &str, path: &Path) -> Self {
        LogSink {
            name: name.to_string(),
            path: path.to_path_buf(),
            lines: Arc::new(Mutex::new(Vec::new())),
            pushed: Arc::new(tokio::sync::watch::channel(0).0),
            stream: std::env::var("BCD_E2E_LOG").map(|v| v == "1").unwrap_or(false),
        }
    }

    /// Appends one line.
    pub fn push(&self, source: &str, line: &str) {
        let line = format!("[{source}] {line}");
        if self.stream {
            eprintln!("{}: {line}", self.name);
        }
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&self.path) {
            let _ = writeln!(f, "{line}");
        }
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        self.pushed.send_modify(|n| *n += 1);
    }

    /// Waits until a captured line contains `needle` (one already there
    /// counts) and returns it, for at most `timeout`.
    pub async fn await_line(&self, timeout: std::time::Duration, needle: &str) -> anyhow::Result<String> {
        let mut pushed = self.pushed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            pushed.borrow_and_update();
            let found =
                self.lines.lock().unwrap_or_else(|p| p.into_inner()).iter().find(|l| l.contains(needle)).cloned();
            if let Some(line) = found {
                return Ok(line);
            }
            match tokio::time::timeout_at(deadline, pushed.changed()).await {
                Ok(Ok(())) => {}
                _ => anyhow::bail!("no log line with {needle:?} of {} within {timeout:?}", self.name),
            }
        }
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).join("\n")
    }

    /// Whether any captured line contains `needle`.
    pub fn contains(&self, needle: &str) -> bool {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).iter().any(|l| l.contains(needle))
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies a child's stream into the sink, line by line, until it closes.
    pub fn follow<R: AsyncRead + Unpin + Send + 'static>(
        &self,
        source: &str,
        reader: R,
    ) -> tokio::task::JoinHandle<()> {
        let sink = self.clone();
        let source = source.to_string();
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                sink.push(&source, &line);
            }
        })
    }
}
