//! The core every part of a running stack shares: the ledger (the store,
//! the event stream and the change notification), the keys, the live
//! sessions and the settings of this run, with the one consistent read
//! ([`Shared::view`]) and the one generic wait ([`Shared::await_until`])
//! over them. A feature's own state (the TPM attestor, the tunnels, the
//! OTLP exports) is not here: the composition root builds it and hands it
//! to what uses it.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::changes::Changes;
use crate::error::Result;
use crate::hub::Hub;
use crate::keys::StackKeys;
use crate::ledger::Ledger;
use crate::options::DevStackOptions;
use crate::store::Store;
use crate::view::StackView;

/// The settings of a running stack: its options, and what follows from them
/// once its listeners are bound.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The options it was started with.
    pub options: DevStackOptions,
    /// The gateway URL given to nodes (JoinResponse, well-known document).
    pub gateway_url: String,
    /// The HTTP side's base URL as nodes reach it (release downloads, the
    /// OTLP receiver).
    pub http_base_url: String,
    /// The HTTPS listener's base URL as nodes reach it (`https://host:port`:
    /// the WebSocket session, `POST /v1/renew`).
    pub https_base_url: String,
    /// Welcome's heartbeat interval; also the ping interval.
    pub heartbeat_interval: Duration,
    /// How long after a BUSY the command is delivered again.
    pub busy_retry: Duration,
}

impl Settings {
    /// The settings of `options` for listeners bound at these addresses: the
    /// URLs nodes reach them by (the advertised host, else the listening one).
    pub fn new(options: DevStackOptions, gateway: SocketAddr, http: SocketAddr, https: SocketAddr) -> Self {
        let host = options.advertise_host.clone().unwrap_or_else(|| options.listen_host.to_string());
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
        Settings {
            gateway_url: format!("https://{host}:{}", gateway.port()),
            http_base_url: format!("http://{host}:{}", http.port()),
            https_base_url: format!("https://{host}:{}", https.port()),
            heartbeat_interval: Duration::from_millis(u64::from(options.heartbeat_interval_ms.max(1))),
            busy_retry: Duration::from_millis(u64::from(options.busy_retry_ms)),
            options,
        }
    }
}

/// What the parts of a stack share.
pub struct Shared {
    /// The store, the event stream and the change notification.
    pub ledger: Ledger,
    /// The keys.
    pub keys: StackKeys,
    /// The live sessions.
    pub hub: Hub,
    /// This run's settings.
    pub settings: Settings,
    draining: AtomicBool,
}

impl Shared {
    /// Bundles the parts: the store, the keys loaded from it, the settings.
    pub fn new(store: Store, keys: StackKeys, settings: Settings) -> Self {
        let changes = Changes::default();
        Shared {
            hub: Hub::new(changes.clone()),
            ledger: Ledger::new(store, changes),
            keys,
            settings,
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

    /// One consistent read of the stack: `read` sees the store and the live
    /// sessions at one instant.
    pub fn view<T>(&self, read: impl FnOnce(&StackView<'_>) -> T) -> Result<T> {
        self.ledger.read(|db| {
            let view = StackView::new(db, &self.hub);
            let value = read(&view);
            view.finish(value)
        })
    }

    /// Waits until `until` returns `Some` (re-checked on every change of the
    /// store or of the live sessions), for at most `timeout`; returns its
    /// value. `what` names the wait in the timeout error, with what
    /// [`StackView::note`] recorded last. A condition that can fail returns
    /// `Some(Err(…))` and the caller flattens it.
    pub async fn await_until<T>(
        &self,
        what: impl Into<String>,
        timeout: Duration,
        mut until: impl FnMut(&StackView<'_>) -> Option<T> + Send,
    ) -> Result<T> {
        let what = what.into();
        let seen = Mutex::new(None::<String>);
        self.ledger
            .changes()
            .wait_for(
                timeout,
                || match seen.lock().ok().and_then(|s| s.clone()) {
                    Some(seen) => format!("{what} (last seen: {seen})"),
                    None => what.clone(),
                },
                || {
                    self.ledger.read(|db| {
                        let view = StackView::new(db, &self.hub);
                        let value = until(&view);
                        if let (Some(note), Ok(mut s)) = (view.last_note(), seen.lock()) {
                            *s = Some(note);
                        }
                        view.finish(value)
                    })
                },
            )
            .await
    }
}

/// A stack's shared state for unit tests: an in-memory store and fresh
/// keys, with a pool `pool_1` and a joined node `node_1`, or under signed
/// intent.
#[cfg(test)]
pub mod testing {
    use super::{Settings, Shared};
    use crate::keys::{ServingNames, StackKeys};
    use crate::options::{DevStackOptions, ReleaseKeys};
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
        let node = nodes::NewNode {
            id: "node_1",
            pool_id: "pool_1",
            join_token_id: Some("jt_1"),
            hostname: "",
            daemon_version: "",
            hardware_id: "",
            created_at_ms: 0,
        };
        shared
            .ledger
            .write(|c| {
                pools::insert(c, &pool)?;
                Ok(nodes::insert(c, &node)?)
            })
            .unwrap();
        shared
    }

    fn shared(signed_intent: bool) -> Shared {
        let store = Store::open(&StoreLocation::Memory).unwrap();
        let names = ServingNames::new(&[], &[]);
        let now = crate::clock::now_ms();
        let keys =
            StackKeys::load_or_create(&store, &names, signed_intent, "td", &ReleaseKeys::Generated, now).unwrap();
        let options = DevStackOptions { trust_domain: "td".into(), ..DevStackOptions::default() };
        let addr = "127.0.0.1:1".parse().unwrap();
        Shared::new(store, keys, Settings::new(options, addr, addr, addr))
    }
}
