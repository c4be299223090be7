//! One node's Session stream (docs/protocol.md, "Session"): Hello first,
//! Welcome, pings and liveness, command delivery (pending ones when woken,
//! every open one after the Welcome, BUSY ones again after a short delay),
//! desired state, revocation and drain.
//!
//! The session is transport-neutral: it runs over any stream of decoded
//! [`proto::NodeFrame`]s ([`Inbound`]: tonic's `Streaming` for
//! `Gateway.Session`, the WebSocket's messages for `/v1/session`) and
//! answers through [`Outbound`], whose `Err` is the refusal that ends it;
//! each transport turns that into its own form (a gRPC status, a close
//! frame).
//!
//! The session routes what the node sends to the features' handlers
//! ([`Handlers`], built by the composition root): an event (StatusReport,
//! CommandUpdate) is recorded once by node, journal and seq, its handlers
//! run inside that transaction, then it is acknowledged (once the stack
//! drains, it is neither: the node sends it again next session); a request
//! (SpecRequest, SecretRequest, WorkloadTokenRequest) goes to its one
//! handler. The session then carries out what the handlers asked
//! ([`Effects`]): specs and frames to send, commands to deliver again. The
//! Hello and the Welcome are hooks of the same list, so the session names
//! no feature.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proto::gateway_frame::Frame as Out;
use proto::node_frame::Frame as In;
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_stream::{Stream, StreamExt as _};
use tonic::Status;
use tracing::{debug, info, warn};

use super::auth::AuthedNode;
use super::fence;
use super::handlers::{Effects, Handlers, Opening, RequestContext};
use super::limit;
use crate::clock::now_ms;
use crate::error::Result;
use crate::events::StackEvent;
use crate::frames::{desired_state_frame, frame};
use crate::hub::{Control, Heard, Transport};
use crate::shared::Shared;
use crate::status::{Code, refuse};
use crate::store::rows::{NodeSessionRow, NodeSpecRow};
use crate::store::sessions::NewSession;
use crate::store::{commands, events, nodes, sessions, spec_deliveries, specs};

mod deliver;
mod effects;

/// The sending half of a session's response stream: frames, then at most
/// one refusal. A frame is boxed: a channel allocates its slots 32 at a
/// time, and 32 frames held inline (152 bytes each) would be 4.8 KiB that
/// every idle session keeps.
pub type Outbound = mpsc::Sender<Result<Box<proto::GatewayFrame>, Status>>;

/// What a session reads: the node's frames as its transport decoded them;
/// an `Err` is the transport's error (too large, malformed, a reset), the
/// end of the stream the node's close.
pub trait Inbound: Stream<Item = Result<proto::NodeFrame, Status>> + Unpin + Send {}

impl<S: Stream<Item = Result<proto::NodeFrame, Status>> + Unpin + Send> Inbound for S {}

/// The refusal an inbound error ends the session with, if it is one: the
/// contract's `frame-too-large` for tonic's own "too large" status, any
/// refusal a transport made itself (`frame-too-large`, `frame-malformed`)
/// as it is, and a frame that does not decode (`InvalidArgument`
/// `message-malformed`: never a clean end); `None` for a plain transport
/// error (a reset).
fn inbound_refusal(status: &Status) -> Option<Status> {
    if limit::is_too_large(status) {
        return Some(limit::too_large(status.message()));
    }
    if status.code() == tonic::Code::InvalidArgument {
        return Some(status.clone());
    }
    let code = crate::status::code_of(status);
    [Code::FrameTooLarge, Code::FrameMalformed].iter().any(|c| c.as_str() == code).then(|| status.clone())
}

/// Why a session ended.
enum End {
    /// The node closed its stream.
    Closed,
    /// The response stream is gone (the node or the connection went away).
    Gone,
    /// End with this status.
    Refuse(Status),
    /// A graceful end after a final frame (Drain, RevocationNotice).
    Done(&'static str),
}

/// Runs a session until it ends; every exit path closes its row.
///
/// An idle session is this future, parked in [`Session::serve`]: what runs
/// only for a moment (the Hello and opening, each frame's handling, the
/// close) is boxed, so that the thousands of idle sessions of a fleet do
/// not each keep room for it (docs/devstack.md, "The gateway").
pub async fn run(
    shared: Arc<Shared>,
    handlers: Arc<Handlers>,
    node: AuthedNode,
    transport: Transport,
    mut inbound: impl Inbound,
    out: Outbound,
) {
    let Some(mut session) = Box::pin(start(shared, handlers, node, transport, &mut inbound, out)).await else {
        return;
    };
    let end = session.serve(&mut inbound).await;
    Box::pin(session.close(end)).await;
}

/// The Hello, then the session opened for it; a refusal is sent to the
/// node and ends it (`None`).
async fn start(
    shared: Arc<Shared>,
    handlers: Arc<Handlers>,
    node: AuthedNode,
    transport: Transport,
    inbound: &mut impl Inbound,
    out: Outbound,
) -> Option<Session> {
    let interval = shared.settings.heartbeat_interval;
    let refusal = match first_frame(inbound, interval * 3).await {
        Err(status) => status,
        Ok(hello) if hello.node_id != node.node_id => {
            refuse(Code::NodeMismatch, format!("Hello names {:?}, the certificate {}", hello.node_id, node.node_id))
        }
        Ok(hello) if let Err(refusal) = super::hello::check(&hello) => refusal,
        Ok(hello) => match Session::open(shared, handlers, node, transport, &hello, out.clone()).await {
            Ok(session) => return Some(session),
            Err(status) => {
                let _ = out.send(Err(status)).await;
                return None;
            }
        },
    };
    warn!(node_id = %node.node_id, message = refusal.message(), "session: refused");
    let _ = out.send(Err(refusal)).await;
    None
}

/// Waits for the first frame, which must be a Hello.
async fn first_frame(inbound: &mut impl Inbound, wait: Duration) -> Result<proto::Hello, Status> {
    let hello_expected = |detail: String| refuse(Code::HelloExpected, detail);
    match tokio::time::timeout(wait, inbound.next()).await {
        Err(_) => Err(hello_expected(format!("no frame within {} ms", wait.as_millis()))),
        Ok(Some(Err(status))) => Err(inbound_refusal(&status).unwrap_or(status)),
        Ok(None) => Err(hello_expected("the stream ended before a Hello".into())),
        Ok(Some(Ok(proto::NodeFrame { frame: Some(In::Hello(hello)), .. }))) => Ok(hello),
        Ok(Some(Ok(other))) => Err(hello_expected(format!("the first frame is {}", frame_name(&other)))),
    }
}

/// The name of a node frame, for messages.
fn frame_name(f: &proto::NodeFrame) -> &'static str {
    match &f.frame {
        Some(In::Hello(_)) => "Hello",
        Some(In::Heartbeat(_)) => "Heartbeat",
        Some(In::CommandUpdate(_)) => "CommandUpdate",
        Some(In::StatusReport(_)) => "StatusReport",
        Some(In::SpecRequest(_)) => "SpecRequest",
        Some(In::SecretRequest(_)) => "SecretRequest",
        Some(In::WorkloadTokenRequest(_)) => "WorkloadTokenRequest",
        Some(In::EventAck(_)) => "EventAck",
        Some(In::Pong(_)) => "Pong",
        None => "an empty frame",
    }
}

struct Session {
    shared: Arc<Shared>,
    handlers: Arc<Handlers>,
    node: AuthedNode,
    row: NodeSessionRow,
    out: Outbound,
    control: mpsc::UnboundedReceiver<Control>,
    interval: Duration,
    last_heard: Instant,
    /// When the node was last heard, as the hub's liveness beat reads it.
    heard: Heard,
    /// BUSY commands and when to deliver them again.
    busy: HashMap<String, Instant>,
    /// The generation the node last said it applied (its Hello, its
    /// heartbeats): a spec above it is a delivery the node must observe.
    applied: u64,
}

impl Session {
    /// Records the session (with the Hello hooks, in one transaction),
    /// registers it and sends Welcome.
    async fn open(
        shared: Arc<Shared>,
        handlers: Arc<Handlers>,
        node: AuthedNode,
        transport: Transport,
        hello: &proto::Hello,
        out: Outbound,
    ) -> Result<Session, Status> {
        let (row, acked, now) = shared
            .ledger
            .write(|c| {
                // Heard when its session is recorded, not when this task
                // began to wait for the store: a mark the beat committed
                // meanwhile came before the Hello, not after it.
                let now = now_ms();
                let previous = sessions::last_journal(c, &node.node_id)?;
                let row = sessions::open(
                    c,
                    &NewSession {
                        node_id: &node.node_id,
                        journal_id: &hello.journal_id,
                        boot_id: &hello.boot_id,
                        daemon_version: &hello.daemon_version,
                        gateway_id: &shared.settings.options.gateway_id,
                        now_ms: now,
                    },
                    shared.settings.options.limits.sessions_kept,
                )?
                .ok_or_else(|| crate::error::Error::UnknownNode { node_id: node.node_id.clone() })?;
                nodes::record_hello(c, &node.node_id, &hello.daemon_version, hello.applied_generation)?;
                let opening = Opening { c, node: &node, hello, previous_journal: previous.as_deref(), now_ms: now };
                for hook in &handlers.hello {
                    hook.on_hello(&opening)?;
                }
                let acked = events::acked_seq(c, &node.node_id, &hello.journal_id)?;
                Ok((row, acked, now))
            })
            .map_err(Status::from)?;
        let (control, heard) = shared.hub.register(&node.node_id, row.epoch, transport);
        let interval = shared.settings.heartbeat_interval;
        let session = Session {
            shared,
            handlers,
            node,
            row,
            out,
            control,
            interval,
            last_heard: Instant::now(),
            heard,
            busy: HashMap::new(),
            applied: hello.applied_generation,
        };
        info!(
            node_id = %session.node.node_id,
            epoch = session.row.epoch,
            serial = %session.node.serial,
            boot_id = ?hello.boot_id,
            journal_id = ?hello.journal_id,
            daemon_version = ?hello.daemon_version,
            acked_seq = acked,
            peer = ?session.node.peer,
            resumed = session.node.resumed,
            %transport,
            "session: welcome"
        );
        let welcome = proto::Welcome {
            session_epoch: session.row.epoch,
            server_time_ms: now,
            heartbeat_interval_ms: interval.as_millis() as u32,
            lane_credits: session.shared.settings.options.lane_credits,
            acked_seq: acked,
        };
        // A node that is gone before its Welcome simply ends the session.
        let _ = session.send(frame(Out::Welcome(welcome))).await;
        session.shared.ledger.announce([StackEvent::Connected {
            node_id: session.node.node_id.clone(),
            epoch: session.row.epoch,
            daemon_version: hello.daemon_version.clone(),
        }]);
        Ok(session)
    }

    async fn send(&self, f: proto::GatewayFrame) -> Result<(), End> {
        self.out.send(Ok(Box::new(f))).await.map_err(|_| End::Gone)
    }

    /// The session's main loop.
    async fn serve(&mut self, inbound: &mut impl Inbound) -> End {
        if let Err(end) = Box::pin(self.after_welcome()).await {
            return end;
        }
        let start = Instant::now();
        let mut ping = tokio::time::interval_at(start + self.interval, self.interval);
        ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            let liveness = self.last_heard + self.interval * 3;
            let next_busy = self.busy.values().min().copied();
            // In this order: what the hub says (a drain, a revocation),
            // then what the node sent, then the timers, so a frame that
            // waits is read before the node is judged silent.
            let step = tokio::select! {
                biased;
                control = self.control.recv() => match control {
                    Some(c) => Box::pin(self.on_control(c)).await,
                    None => Err(End::Done("the hub closed")),
                },
                message = inbound.next() => Box::pin(self.on_inbound(message)).await,
                _ = ping.tick() => {
                    let p = proto::Ping { nonce: crate::ids::nonce(), server_time_ms: now_ms() };
                    Box::pin(self.send(frame(Out::Ping(p)))).await
                }
                _ = tokio::time::sleep_until(liveness) => Box::pin(self.judge_liveness(liveness, inbound)).await,
                _ = tokio::time::sleep_until(next_busy.unwrap_or(liveness)), if next_busy.is_some() => {
                    Box::pin(self.retry_busy()).await
                }
                _ = self.out.closed() => Err(End::Gone),
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    /// What the node's stream gave: a frame (routed), its end, or an error.
    async fn on_inbound(&mut self, message: Option<Result<proto::NodeFrame, Status>>) -> Result<(), End> {
        match message {
            Some(Ok(f)) => {
                self.last_heard = Instant::now();
                self.heard.now(&self.shared.hub);
                Box::pin(self.on_frame(f)).await
            }
            None => Err(End::Closed),
            Some(Err(status)) => match inbound_refusal(&status) {
                Some(refusal) => Err(End::Refuse(refusal)),
                None => {
                    debug!(node_id = %self.node.node_id, %status, "session: inbound stream error");
                    Err(End::Gone)
                }
            },
        }
    }

    /// The liveness deadline passed: the node is silent, unless the timer
    /// fired more than an interval late, which says this process was
    /// paused (stopped, frozen) and not that the node fell silent; then
    /// the node gets one more interval from now, for what it sent
    /// meanwhile to be read (and, if another session took the node over,
    /// fenced). Either way a frame already on its way is read first: after
    /// a pause the connection and this session wake together, and the
    /// frames the connection holds reach the session only once it has run,
    /// so the session waits a quarter interval for them before it judges.
    async fn judge_liveness(&mut self, deadline: Instant, inbound: &mut impl Inbound) -> Result<(), End> {
        let now = Instant::now();
        if now.saturating_duration_since(deadline) > self.interval {
            debug!(node_id = %self.node.node_id, "session: woke after a pause; the node gets one more interval");
            self.last_heard = now.checked_sub(self.interval * 2).unwrap_or(now);
            return Ok(());
        }
        if let Ok(message) = tokio::time::timeout(self.interval / 4, inbound.next()).await {
            return self.on_inbound(message).await;
        }
        Err(End::Refuse(refuse(Code::Liveness, format!("nothing heard for {} ms", (self.interval * 3).as_millis()))))
    }

    /// The Welcomed hooks, the desired state (the one a hook sent, else the
    /// latest), every open command.
    async fn after_welcome(&mut self) -> Result<(), End> {
        let mut effects = Effects::default();
        let session = RequestContext { shared: &self.shared, node: &self.node, epoch: self.row.epoch };
        for hook in &self.handlers.welcomed {
            effects.merge(hook.on_welcomed(&session).map_err(store_end)?);
        }
        let node_id = &self.node.node_id;
        if !effects.specs.iter().any(|s| &s.node_id == node_id)
            && let Some(spec) = self.shared.ledger.read_one(|c| specs::latest(c, node_id)).map_err(store_end)?
        {
            effects.specs.insert(0, spec);
        }
        self.carry_out(effects).await?;
        self.deliver_open().await
    }

    /// Sends a spec as DesiredState; one the node has not applied yet is
    /// recorded as delivered first (a session-scoped write: fenced).
    async fn send_spec(&self, spec: &NodeSpecRow) -> Result<(), End> {
        debug!(node_id = %self.node.node_id, generation = spec.generation, "session: desired state");
        let frame = desired_state_frame(spec).map_err(store_end)?;
        if spec.generation > self.applied {
            self.shared
                .ledger
                .write(|c| {
                    nodes::fence(c, &self.node.node_id, self.row.epoch)?;
                    Ok(spec_deliveries::delivered(c, &self.node.node_id, spec.generation)?)
                })
                .map_err(store_end)?;
        }
        self.send(frame).await
    }

    async fn on_control(&mut self, control: Control) -> Result<(), End> {
        match control {
            Control::Wake => {
                let pending =
                    self.shared.ledger.read_one(|c| commands::pending(c, &self.node.node_id)).map_err(store_end)?;
                self.deliver(&pending).await
            }
            Control::Raw(f) => self.send(*f).await,
            Control::Spec(spec) => self.send_spec(&spec).await,
            Control::Revoke(reason) => {
                info!(node_id = %self.node.node_id, %reason, "session: revocation notice");
                self.send(frame(Out::RevocationNotice(proto::RevocationNotice { reason }))).await?;
                Err(End::Done("revoked"))
            }
            Control::Drain { reason, retry_after_ms } => {
                self.send(frame(Out::Drain(proto::Drain { reason, retry_after_ms }))).await?;
                Err(End::Done("drained"))
            }
            Control::Replaced => Err(End::Refuse(refuse(Code::SessionReplaced, "a newer session of this node opened"))),
        }
    }

    /// Routes a frame: control frames here, events and requests to the
    /// features' handlers.
    async fn on_frame(&mut self, f: proto::NodeFrame) -> Result<(), End> {
        let seq = f.seq;
        let name = frame_name(&f);
        match f.frame {
            Some(In::Heartbeat(hb)) => self.applied_generation(hb.applied_generation),
            Some(In::Pong(_)) | Some(In::EventAck(_)) => Ok(()),
            Some(In::CommandUpdate(update)) => {
                self.on_event(seq, "command_update", |h| &h.command_update, update).await
            }
            Some(In::StatusReport(report)) => self.on_event(seq, "status_report", |h| &h.status_report, report).await,
            Some(In::SpecRequest(request)) => {
                let handlers = self.handlers.clone();
                self.on_request(&*handlers.spec_request, request).await
            }
            Some(In::SecretRequest(env)) => {
                let handlers = self.handlers.clone();
                self.on_request(&*handlers.secret_request, env).await
            }
            Some(In::WorkloadTokenRequest(request)) => {
                let handlers = self.handlers.clone();
                self.on_request(&*handlers.workload_token_request, request).await
            }
            Some(In::Hello(_)) | None => {
                warn!(node_id = %self.node.node_id, frame = name, "session: unexpected frame ignored");
                Ok(())
            }
        }
    }

    /// A heartbeat's applied generation: written (fenced) when it moved;
    /// otherwise the fence alone is read, so that a session another one
    /// replaced still learns it at the node's next heartbeat (the zombie of
    /// "Several gateways"), without a write transaction per heartbeat (at
    /// 10,000 sessions beating every 5 s those were 2,000 commits a second,
    /// and a cold start of 10,000 nodes never settled under them).
    fn applied_generation(&mut self, generation: u64) -> Result<(), End> {
        let node_id = &self.node.node_id;
        if generation == self.applied {
            return self.shared.ledger.read_one(|c| nodes::fence(c, node_id, self.row.epoch)).map_err(store_end);
        }
        self.applied = generation;
        let changed = self
            .shared
            .ledger
            .write(|c| {
                nodes::fence(c, node_id, self.row.epoch)?;
                Ok(nodes::set_applied_generation(c, node_id, generation)?)
            })
            .map_err(store_end)?;
        if changed {
            debug!(node_id = %node_id, generation, "session: applied generation");
        }
        Ok(())
    }

    /// Closes the session row, unregisters it and ends the stream as `end` says.
    async fn close(self, end: End) {
        let node_id = &self.node.node_id;
        let why = match &end {
            End::Closed => "the node closed the stream",
            End::Gone => "the connection went away",
            End::Refuse(status) => status.message(),
            End::Done(why) => why,
        };
        info!(node_id = %node_id, epoch = self.row.epoch, reason = why, "session: closed");
        if let End::Refuse(status) = &end
            && crate::status::code_of(status) == Code::SessionFenced.as_str()
        {
            fence::count_fenced(&self.shared, node_id, self.row.epoch);
        }
        if let Err(e) = self.shared.ledger.write(|c| Ok(sessions::close(c, self.row.id, now_ms())?)) {
            warn!(node_id = %node_id, error = %e, "session: could not record the disconnection");
        }
        self.shared.hub.unregister(node_id, self.row.epoch);
        self.shared.ledger.announce([StackEvent::Disconnected {
            node_id: node_id.clone(),
            epoch: self.row.epoch,
            reason: why.to_string(),
        }]);
        if let End::Refuse(status) = end {
            let _ = self.out.send(Err(status)).await;
        }
    }
}

fn store_end(e: impl Into<crate::error::Error>) -> End {
    End::Refuse(Status::from(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What every idle session of a fleet keeps (docs/devstack.md, "The
    /// gateway"): the task's future, and a slot of its outbound channel.
    #[test]
    fn an_idle_session_stays_small() {
        let shared = Arc::new(crate::shared::testing::shared_with_node("none"));
        let key = pki::PublicKey::P256(pki::keys::random_p256().public_key());
        let node = AuthedNode {
            node_id: "node_1".into(),
            serial: "01".into(),
            key,
            not_before_ms: 0,
            not_after_ms: i64::MAX,
            peer: None,
            resumed: false,
        };
        let (out, _rx) = mpsc::channel(1);
        let inbound = tokio_stream::empty::<std::result::Result<proto::NodeFrame, Status>>();
        let changes = shared.ledger.changes().clone();
        let tunnels = Arc::new(crate::tunnels::registry::Registry::new(Default::default(), changes));
        let handlers = Arc::new(crate::compose::handlers(&tunnels));
        let session = run(shared, handlers, node, Transport::Grpc, inbound, out);
        let bytes = std::mem::size_of_val(&session);
        assert!(bytes <= 2560, "the session future is {bytes} bytes");
        let slot = std::mem::size_of::<std::result::Result<Box<proto::GatewayFrame>, Status>>();
        assert!(slot <= 16, "an outbound slot is {slot} bytes");
    }
}
