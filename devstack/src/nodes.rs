//! Nodes and their sessions as the in-process API sees them: the node rows
//! and their certificates, joins in order ([`JoinMark`]), waits on a node's
//! state and on its live session, revocation, drill certificates and
//! injected frames; and the
//! applied generation a StatusReport carries (a report part).

use std::time::Duration;

use tracing::info;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::events::StackEvent;
use crate::gateway::handlers::{Effects, Event, EventHandler};
use crate::hub::{Control, Transport};
use crate::shared::Shared;
use crate::store::rows::{NodeCertRow, NodeRow, NodeSessionRow, NodeState};
use crate::store::{certs, nodes, sessions};
use crate::view::StackView;

/// A point in the order of joins: nodes that join later are "new".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct JoinMark(i64);

impl StackView<'_> {
    /// A node.
    pub fn node(&self, node_id: &str) -> Option<NodeRow> {
        self.read(|c| nodes::get(c, node_id))
    }

    /// Every node, in join order.
    pub fn nodes(&self) -> Vec<NodeRow> {
        self.read(nodes::all)
    }

    /// A mark in the order of joins; nodes that join later are after it.
    pub fn join_mark(&self) -> JoinMark {
        JoinMark(self.read(nodes::last_seq))
    }

    /// The nodes that joined after `mark`, in join order.
    pub fn nodes_joined_since(&self, mark: JoinMark) -> Vec<NodeRow> {
        self.read(|c| nodes::after(c, mark.0))
    }

    /// A node's certificates.
    pub fn node_certs(&self, node_id: &str) -> Vec<NodeCertRow> {
        self.read(|c| certs::of_node(c, node_id))
    }

    /// When the node was revoked, if it was (every certificate revoked).
    pub fn revoked_at(&self, node_id: &str) -> Option<i64> {
        revoked_at(&self.node_certs(node_id))
    }

    /// A node's sessions, oldest first.
    pub fn node_sessions(&self, node_id: &str) -> Vec<NodeSessionRow> {
        self.read(|c| sessions::of_node(c, node_id))
    }

    /// The epoch of a node's live session, if it has one.
    pub fn live_epoch(&self, node_id: &str) -> Option<u64> {
        self.hub().live_epoch(node_id)
    }

    /// The transport of a node's live session, if it has one.
    pub fn live_transport(&self, node_id: &str) -> Option<Transport> {
        self.hub().live_transport(node_id)
    }

    /// The row of a node's live session, if it has one.
    pub fn live_session(&self, node_id: &str) -> Option<NodeSessionRow> {
        let epoch = self.live_epoch(node_id)?;
        self.node_sessions(node_id).into_iter().find(|s| s.epoch == epoch)
    }

    /// The row of a node's current session on any gateway of the store:
    /// the one of the node's epoch, still connected.
    pub fn open_session(&self, node_id: &str) -> Option<NodeSessionRow> {
        let epoch = self.node(node_id)?.session_epoch;
        self.node_sessions(node_id).into_iter().find(|s| s.epoch == epoch && s.disconnected_at_ms.is_none())
    }
}

/// Waits until a node satisfies `predicate`; returns its row. Fails at once
/// for an unknown node.
pub async fn await_node(
    shared: &Shared,
    node_id: &str,
    predicate: impl Fn(&NodeRow) -> bool + Send,
    timeout: Duration,
) -> Result<NodeRow> {
    shared
        .await_until(format!("node {node_id}"), timeout, move |v| {
            let Some(row) = v.node(node_id) else {
                return Some(Err(Error::UnknownNode { node_id: node_id.to_string() }));
            };
            v.note(format_args!(
                "state {}, applied generation {}, reason {:?}",
                row.state, row.applied_generation, row.reason
            ));
            predicate(&row).then_some(Ok(row))
        })
        .await?
}

/// Waits until a node is adopted and has applied generation ≥ 1 (the
/// contract's "adopted"); fails at once if it is rejected.
pub async fn await_adopted(shared: &Shared, node_id: &str, timeout: Duration) -> Result<NodeRow> {
    let adopted_or_rejected =
        |n: &NodeRow| n.state == NodeState::Rejected || (n.state == NodeState::Adopted && n.applied_generation >= 1);
    let row = await_node(shared, node_id, adopted_or_rejected, timeout).await?;
    if row.state == NodeState::Rejected {
        return Err(Error::Rejected { node_id: row.id, reason: row.reason });
    }
    Ok(row)
}

/// Waits for the first node of `pool_id` that joined after `mark`.
pub async fn await_new_node(shared: &Shared, pool_id: &str, mark: JoinMark, timeout: Duration) -> Result<NodeRow> {
    shared
        .await_until(format!("a node to join pool {pool_id}"), timeout, |v| {
            v.nodes_joined_since(mark).into_iter().find(|n| n.pool_id == pool_id)
        })
        .await
}

/// Waits until a node has a live session of epoch ≥ `min_epoch`.
pub async fn await_session(
    shared: &Shared,
    node_id: &str,
    min_epoch: u64,
    timeout: Duration,
) -> Result<NodeSessionRow> {
    shared
        .await_until(format!("a session of node {node_id} with epoch ≥ {min_epoch}"), timeout, |v| {
            v.live_session(node_id).filter(|s| s.epoch >= min_epoch)
        })
        .await
}

/// What a revocation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revocation {
    /// When the node was revoked (now, or at the first revocation).
    pub revoked_at_ms: i64,
    /// How many certificates this call revoked (0 when it was revoked before).
    pub certificates: usize,
    /// Whether it was revoked before: nothing was written, published or sent.
    pub already_revoked: bool,
    /// Whether a live session got the RevocationNotice.
    pub session_notified: bool,
}

/// When a node was revoked: it has certificates and every one is revoked
/// (a revocation revokes them all, and a revoked node gets no new one).
pub(crate) fn revoked_at(certs: &[NodeCertRow]) -> Option<i64> {
    if certs.is_empty() {
        return None;
    }
    certs.iter().map(|c| c.revoked_at_ms).collect::<Option<Vec<i64>>>().and_then(|at| at.into_iter().max())
}

/// Fails with `node-revoked` when the node was revoked: new work (a
/// command, a reservation, a console) is refused for it.
pub(crate) fn refuse_revoked(c: &crate::store::Db<'_>, node_id: &str) -> Result<()> {
    match revoked_at(&certs::of_node(c, node_id)?) {
        Some(_) => Err(Error::Refused {
            code: proto::refusal::Code::NodeRevoked,
            detail: format!("node {node_id} was revoked: it gets no new command, reservation or console"),
        }),
        None => Ok(()),
    }
}

/// Revokes every certificate of a node; a live session gets a
/// RevocationNotice and is closed, and new sessions are refused. A node
/// revoked before is left as it is (no write, no event, no notice).
pub fn revoke(shared: &Shared, node_id: &str) -> Result<Revocation> {
    let now = now_ms();
    let done = shared.ledger.write(|c| {
        if nodes::get(c, node_id)?.is_none() {
            return Err(Error::UnknownNode { node_id: node_id.to_string() });
        }
        if let Some(at) = revoked_at(&certs::of_node(c, node_id)?) {
            return Ok((at, 0, true));
        }
        let n = certs::revoke_all(c, node_id, now)?;
        c.publish(StackEvent::Revoked { node_id: node_id.to_string() });
        Ok((now, n, false))
    })?;
    let (revoked_at_ms, certificates, already_revoked) = done;
    if already_revoked {
        info!(node_id, "node revoked before: nothing to do");
        return Ok(Revocation { revoked_at_ms, certificates, already_revoked, session_notified: false });
    }
    info!(node_id, certificates, "node revoked");
    let session_notified = shared.hub.send(node_id, Control::Revoke("the node's certificates were revoked".into()));
    Ok(Revocation { revoked_at_ms, certificates, already_revoked, session_notified })
}

/// Issues and stores another certificate of a known node for `csr_der`, as
/// the stack would have issued it at `issued_at_ms`: a drill's expired or
/// not-yet-valid certificate. The node's other certificates stay as they are.
pub fn issue_cert_at(shared: &Shared, node_id: &str, csr_der: &[u8], issued_at_ms: i64) -> Result<NodeCertRow> {
    let csr = pki::x509::parse_csr(csr_der).map_err(Error::pki("parse a CSR"))?;
    if shared.ledger.read(|c| nodes::get(c, node_id))?.is_none() {
        return Err(Error::UnknownNode { node_id: node_id.to_string() });
    }
    let row = crate::issuance::issue(shared, node_id, &csr, None, issued_at_ms)?;
    shared.ledger.write(|c| Ok(certs::insert(c, &row, now_ms())?))?;
    info!(node_id, serial = %row.serial, not_after_ms = row.not_after_ms, "node certificate issued (drill)");
    Ok(row)
}

/// Sends a frame as is into a node's live session (tests inject unsigned
/// commands this way).
pub fn send_raw(shared: &Shared, node_id: &str, frame: proto::GatewayFrame) -> Result<()> {
    if shared.hub.send(node_id, Control::Raw(Box::new(frame))) {
        Ok(())
    } else {
        Err(Error::NoSession { node_id: node_id.to_string() })
    }
}

/// The report part that records the spec generation a node applied.
pub struct AppliedGeneration;

impl EventHandler<proto::StatusReport> for AppliedGeneration {
    fn record(&self, event: &Event<'_>, report: &proto::StatusReport) -> Result<Effects> {
        nodes::set_applied_generation(event.c, event.node_id(), report.applied_generation)?;
        Ok(Effects::default())
    }
}
