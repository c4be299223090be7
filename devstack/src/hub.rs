//! The live sessions, by node: how the API and the workers reach a node's
//! session task (wake it for new commands, inject a frame, revoke, drain).
//! A session that registers or goes bumps the change notification.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::mpsc;

use crate::changes::Changes;
use crate::error::Result;
use crate::frames::desired_state_frame;
use crate::store::rows::NodeSpecRow;

/// A message to a session task.
#[derive(Clone, Debug)]
pub enum Control {
    /// New commands are queued for the node.
    Wake,
    /// Send this frame as is (tests inject frames this way).
    Raw(Box<proto::GatewayFrame>),
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

struct Handle {
    epoch: u64,
    transport: Transport,
    tx: mpsc::UnboundedSender<Control>,
}

/// The registry of live sessions.
pub struct Hub {
    sessions: Mutex<HashMap<String, Handle>>,
    changes: Changes,
}

impl Hub {
    /// An empty registry that bumps `changes` when a session comes or goes.
    pub fn new(changes: Changes) -> Self {
        Hub { sessions: Mutex::new(HashMap::new()), changes }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Handle>> {
        // The map is only read or replaced under the lock, never left
        // half-updated, so a poisoned lock still holds a consistent map.
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the session `epoch` of a node; an older one is told to close.
    pub fn register(&self, node_id: &str, epoch: u64, transport: Transport) -> mpsc::UnboundedReceiver<Control> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Some(old) = self.lock().insert(node_id.to_string(), Handle { epoch, transport, tx }) {
            let _ = old.tx.send(Control::Replaced);
        }
        self.changes.bump();
        rx
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

    /// Sends to a node's live session; false when it has none.
    pub fn send(&self, node_id: &str, control: Control) -> bool {
        self.lock().get(node_id).is_some_and(|h| h.tx.send(control).is_ok())
    }

    /// Sends a committed spec to the node's live session as DesiredState (a
    /// node that is away gets it after its next Welcome).
    pub fn push_spec(&self, spec: &NodeSpecRow) -> Result<()> {
        self.send(&spec.node_id, Control::Raw(Box::new(desired_state_frame(spec)?)));
        Ok(())
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
