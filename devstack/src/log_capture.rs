//! The log lines of every dev stack in a process, captured in memory by one
//! global subscriber (debug level and above), so that a test can look for a
//! line it expects or assert that a token, ticket or secret never appears.
//! One subscriber for every thread: a per-thread one would miss events
//! whose callsites another thread registered first.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// The captured log text (cheap to clone: one shared buffer).
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// The process's capture, installing the global subscriber the first
    /// time. Panics if another global subscriber was installed before.
    pub fn global() -> LogCapture {
        static LOGS: OnceLock<LogCapture> = OnceLock::new();
        LOGS.get_or_init(|| {
            let logs = LogCapture::default();
            let writer = logs.clone();
            let subscriber = tracing_subscriber::fmt()
                .fmt_fields(crate::log_escape::EscapedFields)
                .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish();
            tracing::subscriber::set_global_default(subscriber).expect("the only global subscriber");
            logs
        })
        .clone()
    }

    /// Everything captured so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.lock()).into_owned()
    }

    /// Whether `needle` appears in what was captured.
    pub fn contains(&self, needle: &str) -> bool {
        self.text().contains(needle)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // Appending bytes cannot leave the buffer inconsistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
