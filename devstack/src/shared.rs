//! The state every part of a running stack shares: the store, the keys, the
//! live sessions, the settings of this run, the change notification that
//! the `await_*` helpers wait on, and the event stream people watch.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::events::{EventBus, StackEvent};
use crate::hub::Hub;
use crate::keys::StackKeys;
use crate::otlp::Exports;
use crate::store::Store;
use crate::tpm::TpmJoin;
use crate::tunnels::TunnelOptions;
use crate::tunnels::registry::Registry;

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
    /// The HTTP side's base URL as nodes reach it (release downloads, the
    /// OTLP receiver).
    pub http_base_url: String,
    /// The HTTPS listener's base URL as nodes reach it (`https://host:port`:
    /// the WebSocket session, `POST /v1/renew`).
    pub https_base_url: String,
    /// How many release signatures bcd's `[update]` asks for.
    pub release_threshold: u32,
    /// The lowest release sequence bcd's `[update]` accepts.
    pub release_min_sequence: u64,
    /// How long a published release's manifest stays good (`expires_at_ms`).
    pub release_expiry: Duration,
    /// The consoles' tunnels.
    pub tunnels: TunnelOptions,
    /// What one node may make the stack store and compute.
    pub limits: crate::limits::NodeLimits,
    /// The connection caps and deadlines of both listeners.
    pub connections: crate::connections::ConnectionOptions,
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
    /// The TPM attestor, when the stack has one.
    pub tpm: Option<TpmJoin>,
    /// The stack-wide event stream.
    pub events: EventBus,
    /// The consoles' tunnels, opening and open.
    pub tunnels: Registry,
    /// The OTLP exports received (kept for tests, in memory).
    pub otlp: Exports,
    changed: watch::Sender<u64>,
    draining: AtomicBool,
}

impl Shared {
    /// Bundles the parts.
    pub fn new(store: Store, keys: StackKeys, settings: Settings, tpm: Option<TpmJoin>) -> Self {
        Shared {
            store,
            keys,
            hub: Hub::default(),
            tunnels: Registry::new(settings.tunnels.clone()),
            settings,
            tpm,
            events: EventBus::default(),
            otlp: Exports::default(),
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

    /// Publishes a committed change on the event stream.
    pub fn publish(&self, event: StackEvent) {
        self.events.publish(event);
    }

    /// Publishes committed changes on the event stream, in order.
    pub fn publish_all(&self, events: impl IntoIterator<Item = StackEvent>) {
        for event in events {
            self.events.publish(event);
        }
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

/// A stack's shared state for unit tests: an in-memory store and fresh
/// keys, with a pool `pool_1` and a joined node `node_1`, or under signed
/// intent.
#[cfg(test)]
pub mod testing {
    use std::time::Duration;

    use super::{Settings, Shared};
    use crate::keys::{ServingNames, StackKeys};
    use crate::store::rows::PoolRow;
    use crate::store::{Store, StoreLocation, nodes, pools};

    /// The shared state under signed intent, without pools or nodes.
    pub fn shared_with_intent() -> Shared {
        shared(true)
    }

    /// The shared state, with a pool whose acceptance is `acceptance`.
    pub fn shared_with_node(acceptance: &str) -> Shared {
        let shared = shared(false);
        let pool = PoolRow {
            id: "pool_1".into(),
            name: "p".into(),
            gpu_model: None,
            expect_gpu_count: None,
            acceptance: acceptance.into(),
            created_at_ms: 0,
            kind: crate::pools::KIND_GPU.into(),
            policy: "{}".into(),
        };
        shared.store.with(|c| pools::insert(c, &pool)).unwrap();
        let node = nodes::NewNode {
            id: "node_1",
            pool_id: "pool_1",
            join_token_id: Some("jt_1"),
            hostname: "",
            daemon_version: "",
            hardware_id: "",
            created_at_ms: 0,
        };
        shared.store.with(|c| nodes::insert(c, &node)).unwrap();
        shared
    }

    fn shared(signed_intent: bool) -> Shared {
        let store = Store::open(&StoreLocation::Memory).unwrap();
        let names = ServingNames::new(&[], &[]);
        let release = crate::releases::ReleaseKeys::Generated;
        let now = crate::clock::now_ms();
        let keys = StackKeys::load_or_create(&store, &names, signed_intent, "td", &release, now).unwrap();
        let settings = Settings {
            trust_domain: "td".into(),
            gateway_url: "https://127.0.0.1:1".into(),
            heartbeat_interval: Duration::from_secs(5),
            lane_credits: 4,
            busy_retry: Duration::from_millis(500),
            drain_retry_after_ms: 1000,
            http_base_url: "http://127.0.0.1:1".into(),
            https_base_url: "https://127.0.0.1:1".into(),
            release_threshold: 2,
            release_min_sequence: 1,
            release_expiry: crate::releases::DEFAULT_EXPIRY,
            tunnels: Default::default(),
            limits: Default::default(),
            connections: Default::default(),
        };
        Shared::new(store, keys, settings, None)
    }
}
