//! The state every part of a running stack shares: the store, the keys, the
//! live sessions, the settings of this run, and the change notification that
//! the `await_*` helpers wait on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::hub::Hub;
use crate::keys::StackKeys;
use crate::store::Store;

/// The settings of a running stack.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The SPIFFE trust domain of node certificates.
    pub trust_domain: String,
    /// The gateway URL given to nodes (JoinResponse, well-known document).
    pub gateway_url: String,
    /// Welcome's heartbeat interval; also the ping interval.
    pub heartbeat_interval: Duration,
    /// Welcome's lane credits.
    pub lane_credits: u32,
    /// How long after a BUSY the command is delivered again.
    pub busy_retry: Duration,
    /// Drain's `retry_after_ms` at shutdown.
    pub drain_retry_after_ms: u32,
}

/// What the parts of a stack share.
pub struct Shared {
    /// The store.
    pub store: Store,
    /// The keys.
    pub keys: StackKeys,
    /// The live sessions.
    pub hub: Hub,
    /// This run's settings.
    pub settings: Settings,
    changed: watch::Sender<u64>,
    draining: AtomicBool,
}

impl Shared {
    /// Bundles the parts.
    pub fn new(store: Store, keys: StackKeys, settings: Settings) -> Self {
        Shared {
            store,
            keys,
            hub: Hub::default(),
            settings,
            changed: watch::channel(0).0,
            draining: AtomicBool::new(false),
        }
    }

    /// Marks the stack as shutting down: new sessions are refused.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether the stack is shutting down.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Tells every waiter that the store or the live sessions changed.
    pub fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Waits until `check` returns `Some`, re-checking after every change,
    /// until `timeout`; `what` names the wait in the timeout error.
    pub async fn wait_for<T>(
        &self,
        timeout: Duration,
        what: impl Fn() -> String,
        mut check: impl FnMut() -> Result<Option<T>>,
    ) -> Result<T> {
        let mut rx = self.changed.subscribe();
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
