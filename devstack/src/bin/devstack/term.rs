//! Standard error as `serve` shares it between the stack's log lines and
//! its progress (docs/devstack.md, "devstack serve"): on a terminal the
//! progress is one line updated in place ([`update`]), and a log line that
//! comes meanwhile clears it, is written, and the progress line is drawn
//! again below it, so the two never run into each other; off a terminal
//! the progress is whole lines. Once a stop began, the stack's log is
//! lowered to errors ([`Quiet::now`]) unless `RUST_LOG` asked for more: a
//! shutdown (agents hanging up mid-handshake) is not a screen of warnings.

use std::io::{IsTerminal as _, Write};
use std::sync::{Arc, Mutex};

/// The progress line shown now (on a terminal), if any.
static LINE: Mutex<Option<String>> = Mutex::new(None);

/// Erases the current terminal line.
const CLEAR: &str = "\r\x1b[2K";

fn terminal() -> bool {
    std::io::stderr().is_terminal()
}

/// A line that the next one replaces (on a terminal; off one, a whole line).
pub fn update(text: &str) {
    let mut line = LINE.lock().unwrap_or_else(|e| e.into_inner());
    let mut stderr = std::io::stderr().lock();
    if terminal() {
        let _ = write!(stderr, "{CLEAR}{text}");
        *line = Some(text.to_string());
    } else {
        let _ = writeln!(stderr, "{text}");
    }
    let _ = stderr.flush();
}

/// A line that stays (the progress line, if any, is replaced by it).
pub fn print(text: &str) {
    let mut line = LINE.lock().unwrap_or_else(|e| e.into_inner());
    let mut stderr = std::io::stderr().lock();
    if line.take().is_some() {
        let _ = write!(stderr, "{CLEAR}");
    }
    let _ = writeln!(stderr, "{text}");
}

/// Where the log lines go: standard error, around the progress line.
pub struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter writes a whole line at once.
        let line = LINE.lock().unwrap_or_else(|e| e.into_inner());
        let mut stderr = std::io::stderr().lock();
        match line.as_deref() {
            Some(progress) => {
                write!(stderr, "{CLEAR}")?;
                stderr.write_all(buf)?;
                write!(stderr, "{progress}")?;
            }
            None => stderr.write_all(buf)?,
        }
        stderr.flush()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Lowers the log to errors when a stop begins (nothing when `RUST_LOG`
/// chose the level).
#[derive(Clone)]
pub struct Quiet(Option<Arc<dyn Fn() + Send + Sync>>);

impl Quiet {
    /// From now on, errors only.
    pub fn now(&self) {
        if let Some(lower) = &self.0 {
            lower();
        }
    }
}

/// Sets up the log: `RUST_LOG`, else `default`, escaped, to [`LogWriter`].
pub fn init_logs(default: &str) -> Quiet {
    use tracing_subscriber::EnvFilter;
    let chosen = std::env::var_os(EnvFilter::DEFAULT_ENV).is_some();
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .fmt_fields(devstack::EscapedFields)
        .with_env_filter(filter)
        .with_ansi(terminal())
        .with_writer(|| LogWriter)
        .with_filter_reloading();
    let handle = builder.reload_handle();
    builder.init();
    if chosen {
        return Quiet(None);
    }
    Quiet(Some(Arc::new(move || {
        let _ = handle.reload(EnvFilter::new("error"));
    })))
}
