//! The seam between a Session and the features: what a handler sees of the
//! event or request it handles, what it may ask of the session afterwards
//! ([`Effects`]), and the one list that routes each kind of node frame to
//! the features that handle it ([`HANDLERS`]).
//!
//! Events (`seq > 0`: StatusReport, CommandUpdate) are recorded once per
//! node, journal and seq; their handlers run inside that event's
//! transaction, in list order, and never for a re-sent event. Requests
//! (SpecRequest, SecretRequest, WorkloadTokenRequest) are answered by one
//! handler each, outside any transaction. A new feature adds a handler here
//! instead of growing the session.

use std::time::Duration;

use rusqlite::Connection;

use super::auth::AuthedNode;
use crate::error::Result;
use crate::events::StackEvent;
use crate::shared::Shared;
use crate::store::certs;
use crate::store::rows::NodeSpecRow;

/// An event being recorded: its transaction and the session's node.
pub struct Event<'a> {
    /// The event's transaction: every write commits with the event, or not
    /// at all.
    pub c: &'a Connection,
    /// The stack (keys, settings). Its store is locked by this transaction:
    /// read and write through `c` only.
    pub shared: &'a Shared,
    /// The session's node (its id and the key of its session certificate).
    pub node: &'a AuthedNode,
    /// When the stack recorded the event.
    pub now_ms: i64,
}

impl Event<'_> {
    /// The node's id.
    pub fn node_id(&self) -> &str {
        &self.node.node_id
    }

    /// Runs `verify` on a node-signed statement under the session's key
    /// (while its certificate is valid), then under the node's other keys
    /// the envelope names (its signatures' keyids, at most
    /// [`MAX_KEYIDS_TRIED`]) that a certificate valid now and not revoked
    /// certifies (a statement signed before a renewal); the first success,
    /// or the session key's refusal. Each key costs one indexed read and one
    /// parse: no certificate of the node is read for a keyid it does not
    /// name, and a key of an expired certificate verifies nothing.
    pub fn verify_statement<T>(
        &self,
        env: &pki::dsse::Envelope,
        verify: impl Fn(&pki::dsse::Envelope, &pki::PublicKey, &str) -> Result<T, pki::Error>,
    ) -> Result<T, pki::Error> {
        let node_id = self.node_id();
        let session_valid = self.now_ms < self.node.not_after_ms;
        let first = if session_valid {
            verify(env, &self.node.key, node_id)
        } else {
            Err(pki::X509Error::CertValidity {
                now_ms: self.now_ms,
                not_before_ms: self.node.not_before_ms,
                not_after_ms: self.node.not_after_ms,
            }
            .into())
        };
        if first.is_ok() {
            return first;
        }
        let session_pin = self.node.key.pin();
        let mut tried: Vec<&str> = Vec::new();
        for keyid in env.signatures.iter().map(|s| s.keyid.as_str()) {
            if tried.len() == MAX_KEYIDS_TRIED {
                break;
            }
            if keyid == session_pin || tried.contains(&keyid) {
                continue;
            }
            tried.push(keyid);
            let Ok(Some(cert)) = certs::valid_by_pin(self.c, node_id, keyid, self.now_ms) else { continue };
            let Ok(described) = pki::x509::describe_der(&cert.der) else { continue };
            let Ok(key) = pki::PublicKey::from_spki_der(&described.spki_der) else { continue };
            if let Ok(value) = verify(env, &key, node_id) {
                return Ok(value);
            }
        }
        first
    }
}

/// How many of a statement's keyids [`Event::verify_statement`] looks up
/// besides the session's (a node signs a statement with one key).
pub const MAX_KEYIDS_TRIED: usize = 4;

/// A request being answered: the stack and the session's node.
pub struct RequestContext<'a> {
    /// The stack.
    pub shared: &'a Shared,
    /// The session's node.
    pub node: &'a AuthedNode,
}

/// What a handler asks of the session once its event committed (or its
/// request was answered): events to publish, specs and frames to send, in
/// order, and commands to deliver again.
#[derive(Debug, Default)]
#[must_use]
pub struct Effects {
    /// Specs to send as DesiredState (first): the session's node's on its
    /// stream, another node's (an instance placed there) through the hub.
    pub specs: Vec<NodeSpecRow>,
    /// Frames to send to the node (after the specs).
    pub frames: Vec<proto::GatewayFrame>,
    /// Commands to deliver again after a delay (`Some`, a BUSY), or no
    /// longer (`None`).
    pub redeliver: Vec<(String, Option<Duration>)>,
    /// What changed, for the stack's event stream (published first, once
    /// the event committed).
    pub events: Vec<StackEvent>,
}

impl Effects {
    /// Effects that send one frame.
    pub fn frame(frame: proto::GatewayFrame) -> Self {
        Effects { frames: vec![frame], ..Effects::default() }
    }

    /// Appends another handler's effects.
    pub fn merge(&mut self, other: Effects) {
        self.specs.extend(other.specs);
        self.frames.extend(other.frames);
        self.redeliver.extend(other.redeliver);
        self.events.extend(other.events);
    }
}

/// A feature's handler of one kind of event.
pub trait EventHandler<T>: Sync {
    /// Records what `message` says, inside the event's transaction. It runs
    /// once per event (a re-sent event is acknowledged without it); an error
    /// rolls the event back and ends the session.
    fn record(&self, event: &Event<'_>, message: &T) -> Result<Effects>;
}

/// A feature's handler of one kind of request.
pub trait RequestHandler<T>: Sync {
    /// Answers `message` (nothing is recorded for it); an error ends the
    /// session.
    fn answer(&self, request: &RequestContext<'_>, message: T) -> Result<Effects>;
}

/// Which features handle which node frame.
pub struct Handlers {
    /// The parts of a StatusReport, each recorded by its feature, in order.
    pub status_report: &'static [&'static dyn EventHandler<proto::StatusReport>],
    /// What a CommandUpdate changes, in order.
    pub command_update: &'static [&'static dyn EventHandler<proto::CommandUpdate>],
    /// The answer to a SpecRequest.
    pub spec_request: &'static dyn RequestHandler<proto::SpecRequest>,
    /// The answer to a SecretRequest (a node-signed envelope).
    pub secret_request: &'static dyn RequestHandler<proto::Envelope>,
    /// The answer to a WorkloadTokenRequest.
    pub workload_token_request: &'static dyn RequestHandler<proto::WorkloadTokenRequest>,
}

/// The one list of handlers: a feature registers its handler here.
pub static HANDLERS: Handlers = Handlers {
    status_report: &[
        &crate::inventory::Inventory,
        &crate::nodes::AppliedGeneration,
        &crate::reservations::Allocations,
        &crate::sections::Sections,
        &crate::instances::Reports,
    ],
    command_update: &[&crate::commands::updates::CommandUpdates, &crate::adoption::AcceptanceCheck],
    spec_request: &crate::spec::SpecRequests,
    secret_request: &crate::secrets::SecretRequests,
    workload_token_request: &crate::workload::WorkloadTokens,
};

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR_MS: i64 = 3600 * 1000;

    /// A certificate of node_1 for a fresh key, issued at `not_before_ms`
    /// (valid 24 h) and stored.
    fn certified(shared: &Shared, not_before_ms: i64) -> (p256::SecretKey, crate::store::rows::NodeCertRow) {
        let key = pki::keys::random_p256();
        let csr = pki::x509::parse_csr(&pki::x509::csr(&key, "bcd").unwrap()).unwrap();
        let row = crate::issuance::issue(shared, "node_1", &csr, None, not_before_ms).unwrap();
        shared.store.with(|c| certs::insert(c, &row, not_before_ms)).unwrap();
        (key, row)
    }

    fn authed(key: &p256::SecretKey, row: &crate::store::rows::NodeCertRow) -> AuthedNode {
        AuthedNode {
            node_id: "node_1".into(),
            serial: row.serial.clone(),
            key: pki::PublicKey::P256(key.public_key()),
            not_before_ms: row.not_before_ms,
            not_after_ms: row.not_after_ms,
            peer: None,
        }
    }

    fn statement(key: &p256::SecretKey) -> pki::dsse::Envelope {
        let s = proto::NodeStatement {
            node_id: "node_1".into(),
            body: Some(proto::node_statement::Body::AllocationBound(proto::AllocationBound::default())),
            ..Default::default()
        };
        pki::statement::sign(key, &s)
    }

    #[test]
    fn a_statement_signed_with_the_key_of_an_expired_certificate_is_refused() {
        let shared = crate::shared::testing::shared_with_node("none");
        let now = crate::clock::now_ms();
        let (expired_key, _) = certified(&shared, now - 48 * HOUR_MS);
        let (renewed_key, _) = certified(&shared, now - HOUR_MS);
        let (session_key, session_row) = certified(&shared, now);
        let node = authed(&session_key, &session_row);
        let verify = |env: &pki::dsse::Envelope, at: i64| {
            shared.store.with(|c| {
                let event = Event { c, shared: &shared, node: &node, now_ms: at };
                Ok(event.verify_statement(env, pki::statement::verify_allocation_bound).map_err(|e| e.code()))
            })
        };
        assert!(verify(&statement(&session_key), now).unwrap().is_ok(), "the session's key");
        assert!(verify(&statement(&renewed_key), now).unwrap().is_ok(), "a key certified before a renewal");
        assert_eq!(verify(&statement(&expired_key), now).unwrap().unwrap_err(), "dsse-unknown-key");
        // A day later the session's own certificate has expired too.
        let later = now + 25 * HOUR_MS;
        assert!(verify(&statement(&session_key), later).unwrap().is_err(), "the session's expired key");
    }
}
