//! The live sessions of this gateway, by node: how the API and the workers
//! reach a node's session task (wake it for new commands, inject a frame,
//! revoke, drain). A session that registers or goes bumps the change
//! notification. With several gateways on one store, a node whose session
//! is on another gateway is reached through the store ([`Poke`]: a wake, a
//! new spec or a revocation, sent to the gateway that holds it); when each
//! session last heard its node is kept for the liveness beat.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use tokio::sync::mpsc;

use crate::changes::Changes;
use crate::store::rows::NodeSpecRow;

/// A message to a session task.
#[derive(Clone, Debug)]
pub enum Control {
    /// New commands are queued for the node.
    Wake,
    /// Send this frame as is (tests inject frames this way).
    Raw(Box<proto::GatewayFrame>),
    /// Send this committed spec as DesiredState (its delivery recorded).
    Spec(Box<NodeSpecRow>),
    /// The node's certificates were revoked: notify and close.
    Revoke(String),
    /// The stack is going away: send Drain and close.
    Drain {
        /// Why.
        reason: String,
        /// When the node should redial.
        retry_after_ms: u32,
    },
    /// A newer session of the same node registered: close this one.
    Replaced,
}

/// Which transport carries a session (docs/protocol.md, "WebSocket transport").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `Gateway.Session` over gRPC.
    Grpc,
    /// `/v1/session` over a WebSocket on the HTTPS listener.
    WebSocket,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Grpc => "grpc",
            Transport::WebSocket => "websocket",
        })
    }
}

/// What reaches a node's session on another gateway, through the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Poke {
    /// New commands are queued for the node.
    Wake(String),
    /// The node has a new spec: send it.
    Spec(String),
    /// The node's certificates were revoked.
    Revoke(String),
}

/// When a session last heard its node, in milliseconds since the hub was
/// made (by this process's monotonic clock).
#[derive(Clone, Default)]
pub struct Heard(Arc<AtomicU64>);

impl Heard {
    /// The session heard its node now.
    pub fn now(&self, hub: &Hub) {
        self.0.store(hub.since_start(), Ordering::Relaxed);
    }
}

struct Handle {
    epoch: u64,
    transport: Transport,
    tx: mpsc::UnboundedSender<Control>,
    heard: Heard,
}

/// The registry of live sessions.
pub struct Hub {
    sessions: Mutex<HashMap<String, Handle>>,
    changes: Changes,
    /// How a node on another gateway is reached (set by the composition
    /// root when the store is shared).
    remote: OnceLock<Box<dyn Fn(Poke) + Send + Sync>>,
    started: Instant,
}

impl Hub {
    /// An empty registry that bumps `changes` when a session comes or goes.
    pub fn new(changes: Changes) -> Self {
        Hub { sessions: Mutex::new(HashMap::new()), changes, remote: OnceLock::new(), started: Instant::now() }
    }

    /// How a node whose session is on another gateway is reached.
    pub fn set_remote(&self, poke: impl Fn(Poke) + Send + Sync + 'static) {
        let _ = self.remote.set(Box::new(poke));
    }

    fn since_start(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Each live session's node, epoch, and how long ago it heard its node
    /// (milliseconds, by this process's monotonic clock).
    pub fn heard(&self) -> Vec<(String, u64, u64)> {
        let now = self.since_start();
        let map = self.lock();
        map.iter().map(|(id, h)| (id.clone(), h.epoch, now.saturating_sub(h.heard.0.load(Ordering::Relaxed)))).collect()
    }

    /// The nodes whose session this gateway holds.
    pub fn held(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Whether this gateway holds a session of the node.
    pub fn holds(&self, node_id: &str) -> bool {
        self.lock().contains_key(node_id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Handle>> {
        // The map is only read or replaced under the lock, never left
        // half-updated, so a poisoned lock still holds a consistent map.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the session `epoch` of a node; an older one is told to close.
    pub fn register(
        &self,
        node_id: &str,
        epoch: u64,
        transport: Transport,
    ) -> (mpsc::UnboundedReceiver<Control>, Heard) {
        let (tx, rx) = mpsc::unbounded_channel();
        let heard = Heard::default();
        heard.now(self);
        let handle = Handle { epoch, transport, tx, heard: heard.clone() };
        if let Some(old) = self.lock().insert(node_id.to_string(), handle) {
            let _ = old.tx.send(Control::Replaced);
        }
        self.changes.bump();
        (rx, heard)
    }

    /// Removes the session `epoch` of a node, unless a newer one replaced it.
    pub fn unregister(&self, node_id: &str, epoch: u64) {
        let removed = {
            let mut map = self.lock();
            map.get(node_id).is_some_and(|h| h.epoch == epoch) && map.remove(node_id).is_some()
        };
        if removed {
            self.changes.bump();
        }
    }

    /// Sends to a node's live session on this gateway; false when it has
    /// none here. A wake or a revocation for a node on another gateway goes
    /// there through the store (true: it was sent on).
    pub fn send(&self, node_id: &str, control: Control) -> bool {
        if let Some(h) = self.lock().get(node_id) {
            return h.tx.send(control).is_ok();
        }
        let poke = match control {
            Control::Wake => Poke::Wake(node_id.to_string()),
            Control::Revoke(_) => Poke::Revoke(node_id.to_string()),
            _ => return false,
        };
        self.remote.get().is_some_and(|remote| {
            remote(poke);
            true
        })
    }

    /// Sends to a node's live session on this gateway only.
    pub fn send_local(&self, node_id: &str, control: Control) -> bool {
        self.lock().get(node_id).is_some_and(|h| h.tx.send(control).is_ok())
    }

    /// Sends a committed spec to the node's live session as DesiredState (a
    /// node that is away gets it after its next Welcome; one on another
    /// gateway is sent it there).
    pub fn push_spec(&self, spec: &NodeSpecRow) {
        if !self.send_local(&spec.node_id, Control::Spec(Box::new(spec.clone())))
            && let Some(remote) = self.remote.get()
        {
            remote(Poke::Spec(spec.node_id.clone()));
        }
    }

    /// Sends to every live session.
    pub fn broadcast(&self, control: &Control) {
        for handle in self.lock().values() {
            let _ = handle.tx.send(control.clone());
        }
    }

    /// The epoch of a node's live session.
    pub fn live_epoch(&self, node_id: &str) -> Option<u64> {
        self.lock().get(node_id).map(|h| h.epoch)
    }

    /// The transport of a node's live session.
    pub fn live_transport(&self, node_id: &str) -> Option<Transport> {
        self.lock().get(node_id).map(|h| h.transport)
    }

    /// How many sessions are live.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}
