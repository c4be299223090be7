//! What a session hands the features' handlers ([`Handlers`]): an event
//! recorded once by node, journal and seq with its handlers inside that
//! transaction, then acknowledged; a request answered by its one handler;
//! then what they asked ([`Effects`]) carried out.

use proto::gateway_frame::Frame as Out;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::{End, Session, store_end};
use crate::clock::now_ms;
use crate::frames::frame;
use crate::gateway::handlers::{Effects, Event, EventHandler, Handlers, RequestContext, RequestHandler};
use crate::status::{Code, refuse};
use crate::store::{events, nodes};

/// What recording an event did.
enum Recorded {
    /// Recorded now; its handlers asked for these effects.
    New(Effects),
    /// Recorded before (a re-sent event): acknowledged again, nothing done.
    Again,
    /// Not recorded: the stack is draining. Left unacknowledged, the node
    /// sends it again on its next session (its journal keeps it).
    Deferred,
}

impl Session {
    /// Records an event once (by node, journal and seq), running `handlers`
    /// inside its transaction, acknowledges it, then carries out what the
    /// handlers asked. A re-sent event is acknowledged without them. The
    /// transaction (SQLite, signature checks) runs on the blocking pool, so
    /// a node's report never holds up the runtime's workers (a Join, other
    /// sessions' frames).
    pub(super) async fn on_event<T: Send + 'static>(
        &mut self,
        seq: u64,
        kind: &'static str,
        of: fn(&Handlers) -> &[Box<dyn EventHandler<T>>],
        message: T,
    ) -> Result<(), End> {
        let (shared, node, journal_id) = (self.shared.clone(), self.node.clone(), self.row.journal_id.clone());
        let epoch = self.row.epoch;
        let handlers = self.handlers.clone();
        let recorded = tokio::task::spawn_blocking(move || {
            let (shared, node) = (&*shared, &node);
            shared.ledger.write(|c| {
                // Checked under the store's lock: an event that waited for
                // it while the stack began to drain is left to the next
                // session, which the drain is waiting for no more than it must.
                if shared.is_draining() {
                    return Ok(Recorded::Deferred);
                }
                nodes::fence(c, &node.node_id, epoch)?;
                let now = now_ms();
                let kept = shared.settings.options.limits.journals_kept;
                if seq > 0 && !events::record(c, &node.node_id, &journal_id, seq, now, kept)? {
                    return Ok(Recorded::Again);
                }
                let event = Event { c, shared, node, now_ms: now };
                let mut effects = Effects::default();
                for handler in of(&handlers) {
                    effects.merge(handler.record(&event, &message)?);
                }
                Ok(Recorded::New(effects))
            })
        })
        .await;
        let recorded = match recorded {
            Ok(r) => r.map_err(store_end)?,
            Err(e) => {
                warn!(node_id = %self.node.node_id, error = %e, "session: an event's handlers panicked");
                return Err(End::Refuse(refuse(Code::Internal, "the event could not be recorded")));
            }
        };
        let node_id = &self.node.node_id;
        let effects = match recorded {
            Recorded::Deferred => {
                debug!(node_id = %node_id, seq, kind, "session: draining, the event is left unacknowledged");
                return Ok(());
            }
            Recorded::Again => {
                debug!(node_id = %node_id, seq, kind, "session: event already recorded");
                None
            }
            Recorded::New(effects) => Some(effects),
        };
        if seq > 0 {
            self.send(frame(Out::EventAck(proto::EventAck { up_to_seq: seq }))).await?;
        }
        let Some(effects) = effects else { return Ok(()) };
        self.carry_out(effects).await
    }

    /// Answers a request with its handler, then carries out what it asked.
    pub(super) async fn on_request<T>(&mut self, handler: &dyn RequestHandler<T>, message: T) -> Result<(), End> {
        let request = RequestContext { shared: &self.shared, node: &self.node, epoch: self.row.epoch };
        let effects = handler.answer(&request, message).map_err(store_end)?;
        self.carry_out(effects).await
    }

    /// Sends the specs, then the frames, and schedules the redeliveries.
    pub(super) async fn carry_out(&mut self, effects: Effects) -> Result<(), End> {
        for (id, again) in effects.redeliver {
            match again {
                Some(after) => self.busy.insert(id, Instant::now() + after),
                None => self.busy.remove(&id),
            };
        }
        for spec in &effects.specs {
            if spec.node_id == self.node.node_id {
                self.send_spec(spec).await?;
            } else {
                self.shared.hub.push_spec(spec);
            }
        }
        for f in effects.frames {
            self.send(f).await?;
        }
        Ok(())
    }
}
