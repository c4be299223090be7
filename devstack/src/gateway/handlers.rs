//! The seam between a Session and the features: what a handler sees of the
//! event, request or session step it handles, what it may ask of the
//! session afterwards ([`Effects`]), and [`Handlers`], the list of which
//! features handle what. The gateway names no feature: the composition root
//! builds the list and hands it to the gateway.
//!
//! Events (`seq > 0`: StatusReport, CommandUpdate) are recorded once per
//! node, journal and seq; their handlers run inside that event's
//! transaction, in list order, and never for a re-sent event. Requests
//! (SpecRequest, SecretRequest, WorkloadTokenRequest) are answered by one
//! handler each, outside any transaction. The Hello hooks run inside the
//! transaction that opens the session; the Welcomed hooks once the Welcome
//! was sent, before the desired state and the open commands. A new feature
//! adds a handler to the list instead of growing the session.

use std::pin::Pin;
use std::time::Duration;

use tokio_stream::Stream;
use tonic::{Status, Streaming};

use super::auth::AuthedNode;
use crate::error::Result;
use crate::ledger::Tx;
use crate::shared::Shared;
use crate::store::certs;
use crate::store::rows::NodeSpecRow;

/// An event being recorded: its transaction and the session's node.
pub struct Event<'a> {
    /// The event's transaction: every write commits with the event, or not
    /// at all, and every event it publishes goes out once it committed.
    pub c: &'a Tx<'a>,
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

/// A session being opened for a Hello: its transaction (which also
/// records the session), the node and what its Hello says.
pub struct Opening<'a> {
    /// The opening transaction.
    pub c: &'a Tx<'a>,
    /// The session's node.
    pub node: &'a AuthedNode,
    /// The node's Hello.
    pub hello: &'a proto::Hello,
    /// The journal of the node's previous session (`None` on its first).
    pub previous_journal: Option<&'a str>,
    /// When the stack opened the session.
    pub now_ms: i64,
}

/// A request being answered (or a session just welcomed): the stack and
/// the session's node.
pub struct RequestContext<'a> {
    /// The stack.
    pub shared: &'a Shared,
    /// The session's node.
    pub node: &'a AuthedNode,
    /// The session's epoch: what a write of the session is fenced by.
    pub epoch: u64,
}

/// What a handler asks of the session once its event committed (or its
/// request was answered): specs and frames to send, in order, and commands
/// to deliver again. (What changed is published by the transaction itself.)
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
    }
}

/// A feature's handler of one kind of event.
pub trait EventHandler<T>: Send + Sync {
    /// Records what `message` says, inside the event's transaction. It runs
    /// once per event (a re-sent event is acknowledged without it); an error
    /// rolls the event back and ends the session.
    fn record(&self, event: &Event<'_>, message: &T) -> Result<Effects>;
}

/// A feature's handler of one kind of request.
pub trait RequestHandler<T>: Send + Sync {
    /// Answers `message` (nothing is recorded for it); an error ends the
    /// session.
    fn answer(&self, request: &RequestContext<'_>, message: T) -> Result<Effects>;
}

/// A feature's step in opening a session, inside the opening transaction.
pub trait HelloHook: Send + Sync {
    /// Records what the Hello says (an error refuses the session).
    fn on_hello(&self, opening: &Opening<'_>) -> Result<()>;
}

/// A feature's step once a session was welcomed.
pub trait WelcomedHook: Send + Sync {
    /// What to send first; a spec for the session's node replaces the
    /// latest spec the session would send otherwise.
    fn on_welcomed(&self, session: &RequestContext<'_>) -> Result<Effects>;
}

/// The response stream of a `Gateway.Tunnel` call.
pub type TunnelStream = Pin<Box<dyn Stream<Item = Result<proto::TunnelFrame, Status>> + Send + 'static>>;

/// The feature that answers `Gateway.Tunnel` (the consoles).
#[tonic::async_trait]
pub trait TunnelHandler: Send + Sync {
    /// Answers an authenticated node's Tunnel call.
    async fn accept(&self, node: AuthedNode, inbound: Streaming<proto::TunnelFrame>) -> Result<TunnelStream, Status>;
}

/// Which features handle what: built by the composition root, in order.
pub struct Handlers {
    /// Steps of opening a session, in order.
    pub hello: Vec<Box<dyn HelloHook>>,
    /// Steps once a session was welcomed, in order.
    pub welcomed: Vec<Box<dyn WelcomedHook>>,
    /// The parts of a StatusReport, each recorded by its feature, in order.
    pub status_report: Vec<Box<dyn EventHandler<proto::StatusReport>>>,
    /// What a CommandUpdate changes, in order.
    pub command_update: Vec<Box<dyn EventHandler<proto::CommandUpdate>>>,
    /// The answer to a SpecRequest.
    pub spec_request: Box<dyn RequestHandler<proto::SpecRequest>>,
    /// The answer to a SecretRequest (a node-signed envelope).
    pub secret_request: Box<dyn RequestHandler<proto::Envelope>>,
    /// The answer to a WorkloadTokenRequest.
    pub workload_token_request: Box<dyn RequestHandler<proto::WorkloadTokenRequest>>,
    /// The Tunnel calls.
    pub tunnel: Box<dyn TunnelHandler>,
}

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
        shared.ledger.write(|c| Ok(certs::insert(c, &row, not_before_ms)?)).unwrap();
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
            resumed: false,
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
            shared.ledger.write(|c| {
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
