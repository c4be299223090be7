//! The stack-wide event stream (docs/devstack.md, "The event stream"): what
//! changed in the stack, one [`StackEvent`] at a time, numbered in the order
//! it happened. It is fed where the change happens, after the change
//! committed: the JoinService (joined), the session (connected,
//! disconnected), adoption (adopted, rejected), commands (each state),
//! reservations (each state), tokens, pools, releases and revocation.
//! [`DevStack::events`] subscribes (the admin endpoint's `events` stream is
//! one subscriber); the last [`RECENT`] events are kept for a late reader.
//!
//! A feature that changes the stack publishes here too: it adds a variant to
//! [`StackEvent`] (its `name` and its fields in `to_json`) and calls
//! `Shared::publish` once its change is committed (or returns the event in
//! its handler's `Effects::events`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::clock::now_ms;
use crate::store::rows::{CommandStatus, JoinMethod, ReservationState};

/// How many events the stack keeps for a late reader (and how far a
/// subscriber may fall behind before it misses some).
pub const RECENT: usize = 1024;

/// One change in the stack.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StackEvent {
    /// A pool was created.
    PoolCreated {
        /// The pool.
        pool_id: String,
        /// Its name.
        name: String,
    },
    /// A join token was minted (never the token itself).
    TokenMinted {
        /// The token's row id.
        token_id: String,
        /// Its pool.
        pool_id: String,
        /// How many joins it allows.
        max_uses: u32,
        /// When it stops working.
        expires_at_ms: i64,
    },
    /// A node joined (or, with a TPM, rejoined as the node its EK is bound to).
    Joined {
        /// The node.
        node_id: String,
        /// Its pool.
        pool_id: String,
        /// How it joined.
        method: JoinMethod,
        /// The hostname it claimed.
        hostname: String,
    },
    /// A node's session was welcomed.
    Connected {
        /// The node.
        node_id: String,
        /// The session's epoch.
        epoch: u64,
        /// The daemon version of its Hello.
        daemon_version: String,
    },
    /// A node's session ended.
    Disconnected {
        /// The node.
        node_id: String,
        /// The session's epoch.
        epoch: u64,
        /// Why it ended.
        reason: String,
    },
    /// A node passed its acceptance check and has spec generation 1.
    Adopted {
        /// The node.
        node_id: String,
    },
    /// A node failed its acceptance check; it is never adopted.
    Rejected {
        /// The node.
        node_id: String,
        /// Why (`GpuCountMismatch: …`).
        reason: String,
    },
    /// A command reached a state: enqueued (`pending`), sent (`delivered`),
    /// or one the node reported.
    Command {
        /// The node.
        node_id: String,
        /// The command.
        command_id: String,
        /// Its kind.
        kind: String,
        /// The state it reached.
        state: CommandStatus,
        /// The node's reason (or the stack's, for a refused result).
        reason: String,
    },
    /// A reservation reached a state.
    Reservation {
        /// The node.
        node_id: String,
        /// The reservation.
        reservation_id: String,
        /// The state it reached.
        state: ReservationState,
        /// The node's reason for a failure, or the stack's refusal of an
        /// AllocationBound (the state is then unchanged).
        reason: String,
    },
    /// A node's certificates were revoked.
    Revoked {
        /// The node.
        node_id: String,
    },
    /// A release was published.
    ReleasePublished {
        /// Its version.
        version: String,
        /// Its sequence.
        sequence: u64,
    },
    /// No gateway heard from the node for the liveness timeout (by the
    /// store's clock).
    Unreachable {
        /// The node.
        node_id: String,
    },
    /// A gateway heard from a node marked unreachable: the mark is cleared.
    Reachable {
        /// The node.
        node_id: String,
    },
    /// A node was cordoned: it takes no new reservation or instance.
    Cordoned {
        /// The node.
        node_id: String,
        /// Why.
        reason: String,
    },
    /// A node's cordon was lifted.
    Uncordoned {
        /// The node.
        node_id: String,
    },
}

impl StackEvent {
    /// The event's name, the `event` field of its JSON form.
    pub fn name(&self) -> &'static str {
        match self {
            StackEvent::PoolCreated { .. } => "pool_created",
            StackEvent::TokenMinted { .. } => "token_minted",
            StackEvent::Joined { .. } => "joined",
            StackEvent::Connected { .. } => "connected",
            StackEvent::Disconnected { .. } => "disconnected",
            StackEvent::Adopted { .. } => "adopted",
            StackEvent::Rejected { .. } => "rejected",
            StackEvent::Command { .. } => "command",
            StackEvent::Reservation { .. } => "reservation",
            StackEvent::Revoked { .. } => "revoked",
            StackEvent::ReleasePublished { .. } => "release_published",
            StackEvent::Unreachable { .. } => "node.unreachable",
            StackEvent::Reachable { .. } => "node.reachable",
            StackEvent::Cordoned { .. } => "node.cordoned",
            StackEvent::Uncordoned { .. } => "node.uncordoned",
        }
    }

    /// The node the event is about, if any.
    pub fn node_id(&self) -> Option<&str> {
        match self {
            StackEvent::Joined { node_id, .. }
            | StackEvent::Connected { node_id, .. }
            | StackEvent::Disconnected { node_id, .. }
            | StackEvent::Adopted { node_id }
            | StackEvent::Rejected { node_id, .. }
            | StackEvent::Command { node_id, .. }
            | StackEvent::Reservation { node_id, .. }
            | StackEvent::Revoked { node_id }
            | StackEvent::Unreachable { node_id }
            | StackEvent::Reachable { node_id }
            | StackEvent::Cordoned { node_id, .. }
            | StackEvent::Uncordoned { node_id } => Some(node_id),
            StackEvent::PoolCreated { .. } | StackEvent::TokenMinted { .. } | StackEvent::ReleasePublished { .. } => {
                None
            }
        }
    }

    /// The event's own fields as JSON (without `seq`, `at_ms` and `event`).
    fn fields(&self) -> Value {
        match self {
            StackEvent::PoolCreated { pool_id, name } => json!({ "pool_id": pool_id, "name": name }),
            StackEvent::TokenMinted { token_id, pool_id, max_uses, expires_at_ms } => json!({
                "token_id": token_id, "pool_id": pool_id, "max_uses": max_uses, "expires_at_ms": expires_at_ms,
            }),
            StackEvent::Joined { node_id, pool_id, method, hostname } => json!({
                "node_id": node_id, "pool_id": pool_id, "method": method.as_str(), "hostname": hostname,
            }),
            StackEvent::Connected { node_id, epoch, daemon_version } => {
                json!({ "node_id": node_id, "epoch": epoch, "daemon_version": daemon_version })
            }
            StackEvent::Disconnected { node_id, epoch, reason } => {
                json!({ "node_id": node_id, "epoch": epoch, "reason": reason })
            }
            StackEvent::Adopted { node_id }
            | StackEvent::Revoked { node_id }
            | StackEvent::Unreachable { node_id }
            | StackEvent::Reachable { node_id }
            | StackEvent::Uncordoned { node_id } => json!({ "node_id": node_id }),
            StackEvent::Rejected { node_id, reason } | StackEvent::Cordoned { node_id, reason } => {
                json!({ "node_id": node_id, "reason": reason })
            }
            StackEvent::Command { node_id, command_id, kind, state, reason } => json!({
                "node_id": node_id, "command_id": command_id, "kind": kind, "state": state.as_str(), "reason": reason,
            }),
            StackEvent::Reservation { node_id, reservation_id, state, reason } => json!({
                "node_id": node_id, "reservation_id": reservation_id, "state": state.as_str(), "reason": reason,
            }),
            StackEvent::ReleasePublished { version, sequence } => json!({ "version": version, "sequence": sequence }),
        }
    }
}

/// An event as published: its number in the stream and when it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Published {
    /// Its number: 1, 2, … in the order events happened in this run.
    pub seq: u64,
    /// When it was published (Unix milliseconds).
    pub at_ms: i64,
    /// The change.
    pub event: StackEvent,
}

impl Published {
    /// The JSON form: `{"seq", "at_ms", "event": <name>, …its fields}`.
    pub fn to_json(&self) -> Value {
        let mut object = serde_json::Map::new();
        object.insert("seq".into(), json!(self.seq));
        object.insert("at_ms".into(), json!(self.at_ms));
        object.insert("event".into(), json!(self.event.name()));
        if let Value::Object(fields) = self.event.fields() {
            object.extend(fields);
        }
        Value::Object(object)
    }
}

/// What a subscription yields next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Received {
    /// The next event.
    Event(Arc<Published>),
    /// The subscriber fell more than [`RECENT`] events behind: this many
    /// were skipped.
    Missed(u64),
}

struct Log {
    next_seq: u64,
    recent: VecDeque<Arc<Published>>,
}

/// The stream: a numbered log of the last [`RECENT`] events and a
/// broadcast to subscribers.
pub struct EventBus {
    log: Mutex<Log>,
    tx: broadcast::Sender<Arc<Published>>,
}

impl Default for EventBus {
    fn default() -> Self {
        EventBus { log: Mutex::new(Log { next_seq: 1, recent: VecDeque::new() }), tx: broadcast::channel(RECENT).0 }
    }
}

impl EventBus {
    fn lock(&self) -> std::sync::MutexGuard<'_, Log> {
        // The log is only appended to under the lock: a poisoned lock still
        // holds a consistent log.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Numbers and sends an event. The number, the log and the broadcast
    /// change under one lock, so subscribers see events in number order.
    pub fn publish(&self, event: StackEvent) {
        let mut log = self.lock();
        let published = Arc::new(Published { seq: log.next_seq, at_ms: now_ms(), event });
        log.next_seq += 1;
        if log.recent.len() == RECENT {
            log.recent.pop_front();
        }
        log.recent.push_back(published.clone());
        // No subscriber is not an error: the log keeps it.
        let _ = self.tx.send(published);
    }

    /// A subscription that first yields the kept events numbered after
    /// `after` (0: all of them), then every new one, with no gap between.
    pub fn subscribe(&self, after: u64) -> EventSubscription {
        let log = self.lock();
        let backlog = log.recent.iter().filter(|p| p.seq > after).cloned().collect();
        EventSubscription { backlog, rx: self.tx.subscribe() }
    }

    /// The kept events, oldest first.
    pub fn recent(&self) -> Vec<Arc<Published>> {
        self.lock().recent.iter().cloned().collect()
    }
}

/// A subscriber's view of the stream.
pub struct EventSubscription {
    backlog: VecDeque<Arc<Published>>,
    rx: broadcast::Receiver<Arc<Published>>,
}

impl EventSubscription {
    /// How many kept events are still to come before the new ones.
    pub fn kept(&self) -> usize {
        self.backlog.len()
    }

    /// The next event (waiting for it); `None` once the stack is gone.
    pub async fn next(&mut self) -> Option<Received> {
        if let Some(p) = self.backlog.pop_front() {
            return Some(Received::Event(p));
        }
        match self.rx.recv().await {
            Ok(p) => Some(Received::Event(p)),
            Err(broadcast::error::RecvError::Lagged(n)) => Some(Received::Missed(n)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adopted(n: usize) -> StackEvent {
        StackEvent::Adopted { node_id: format!("node_{n}") }
    }

    #[tokio::test]
    async fn a_subscriber_sees_the_kept_events_then_the_new_ones_in_order() {
        let bus = EventBus::default();
        bus.publish(adopted(1));
        bus.publish(adopted(2));
        let mut all = bus.subscribe(0);
        let mut late = bus.subscribe(1);
        bus.publish(adopted(3));
        for expected in 1..=3 {
            let Some(Received::Event(p)) = all.next().await else { panic!("an event") };
            assert_eq!((p.seq, p.event.node_id()), (expected, Some(format!("node_{expected}").as_str())));
        }
        let Some(Received::Event(p)) = late.next().await else { panic!("an event") };
        assert_eq!(p.seq, 2, "after 1 comes 2");
        assert_eq!(bus.recent().len(), 3);
    }

    #[tokio::test]
    async fn a_slow_subscriber_is_told_what_it_missed_and_the_log_is_bounded() {
        let bus = EventBus::default();
        let mut slow = bus.subscribe(0);
        for n in 0..RECENT + 5 {
            bus.publish(adopted(n));
        }
        assert_eq!(slow.next().await, Some(Received::Missed(5)));
        assert_eq!(bus.recent().len(), RECENT);
        assert_eq!(bus.recent()[0].seq, 6);
    }

    #[test]
    fn the_json_form_names_the_event_and_its_fields() {
        let p = Published {
            seq: 7,
            at_ms: 1000,
            event: StackEvent::Command {
                node_id: "node_1".into(),
                command_id: "cmd_1".into(),
                kind: "diag.nvml".into(),
                state: CommandStatus::Succeeded,
                reason: String::new(),
            },
        };
        assert_eq!(
            p.to_json().to_string(),
            r#"{"seq":7,"at_ms":1000,"event":"command","node_id":"node_1","command_id":"cmd_1","kind":"diag.nvml","state":"succeeded","reason":""}"#
        );
    }
}
