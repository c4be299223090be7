//! The stack's one change notification: a counter that the owners of what
//! a wait can observe bump after each change (the ledger after every
//! commit, the hub when a session comes or goes, the tunnels when one opens
//! or ends), and the deadline wait over it that every `await_*` is.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, Result};

/// The change notification (cheap to clone: every clone is the same one).
#[derive(Clone)]
pub struct Changes(Arc<watch::Sender<u64>>);

impl Default for Changes {
    fn default() -> Self {
        Changes(Arc::new(watch::channel(0).0))
    }
}

impl Changes {
    /// Tells every waiter that something they may be waiting on changed.
    pub fn bump(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits until `check` returns `Some`, re-checking after every change,
    /// until `timeout`; `what` names the wait in the timeout error.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        what: impl Fn() -> String,
        mut check: impl FnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        let mut rx = self.0.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            rx.borrow_and_update();
            if let Some(value) = check()? {
                return Ok(value);
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Error::Shutdown),
                Err(_) => return Err(Error::Timeout { what: what(), waited_ms: timeout.as_millis() as u64 }),
            }
        }
    }
}
