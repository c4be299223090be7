//! The JoinService (tonic `Join`): a sealed token and a CSR in (or the two
//! TPM rounds), a node, its certificate and a signed JoinResponse out.
//!
//! A TPM join (two rounds) goes to the attestor (`tpm`), or is
//! refused `method-unsupported` when the stack has none (a request naming no
//! method is `method-missing`). A token join checks,
//! in order: the CSR (`csr-malformed`,
//! `csr-signature`), the sealed token (`jwe-*`, `token-payload`,
//! `token-csr-mismatch`), the token by SHA-256 (`token-unknown`), its expiry
//! (`token-expired`), its pool (`pool-unknown`), its uses (`token-exhausted`,
//! counted atomically with the node's creation). The sealed token's `iat`
//! must be within an hour before now and ten minutes after it
//! (`token-stale`, `token-not-yet-valid`), and the same request again (the
//! same sealed token with the same CSR: a retry or a replay) is answered the
//! node and certificate it was answered before, spending no use. No token,
//! sealed or plain, ever reaches a log.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use tonic::{Request, Response, Status};
use tracing::{info, warn};

use crate::clock::now_ms;
use crate::error::Error;
use crate::events::StackEvent;
use crate::issuance;
use crate::shared::Shared;
use crate::status::{self, Code, refuse};
use crate::store::nodes::NewNode;
use crate::store::rows::{JoinMethod, JoinTokenRow, NodeCertRow, NodeJoinRow, NodeKeyLevel};
use crate::store::{bindings, certs, join_requests, nodes, pools, tokens};
use crate::tpm::TpmJoin;
use crate::{ids, tls::PeerInfo};

/// The JoinService.
pub struct JoinService {
    shared: Arc<Shared>,
    tpm: Option<Arc<TpmJoin>>,
}

impl JoinService {
    /// A JoinService over the stack's shared state.
    pub fn new(shared: Arc<Shared>, tpm: Option<Arc<TpmJoin>>) -> Self {
        JoinService { shared, tpm }
    }

    fn join_token(&self, token: &proto::TokenJoin, claims: &proto::NodeClaims) -> Result<proto::JoinReply, Status> {
        let shared = &self.shared;
        let now = now_ms();
        let csr = pki::x509::parse_csr(&token.csr_der).map_err(|e| status::from_pki(&e))?;
        let keys = &shared.keys;
        let payload = pki::join::open_token_with_kid(
            &keys.join_encryption,
            &keys.join_encryption_pin(),
            &token.sealed_token,
            &csr.pin,
            now,
        )
        .map_err(|e| match e {
            // The decoder's message may quote the sealed payload: keep it out.
            pki::Error::Join(pki::JoinError::TokenPayload { .. }) => {
                refuse(e.refusal(), "the sealed payload is not {token, csr, iat} JSON")
            }
            _ => status::from_pki(&e),
        })?;
        let sha = hex::encode(Sha256::digest(payload.token.as_bytes()));
        let token_row = shared
            .ledger
            .read(|c| tokens::by_sha256(c, &sha))
            .map_err(Status::from)?
            .ok_or_else(|| refuse(Code::TokenUnknown, "no such join token"))?;
        if token_row.expires_at_ms <= now {
            return Err(refuse(
                Code::TokenExpired,
                format!("join token {} expired at {}", token_row.id, token_row.expires_at_ms),
            ));
        }
        if shared.ledger.read(|c| pools::get(c, &token_row.pool_id)).map_err(Status::from)?.is_none() {
            return Err(refuse(
                Code::PoolUnknown,
                format!("pool {} of join token {} does not exist", token_row.pool_id, token_row.id),
            ));
        }
        let sha256 = request_sha256(token);
        // The same request again is answered from the store before anything
        // is issued (record_join checks again, for two at once).
        if let Some((node_id, response)) =
            shared.ledger.read(|c| join_requests::get(c, &sha256)).map_err(Status::from)?
        {
            return answered_again(&token_row, &node_id, &response);
        }
        let node_id = ids::node_id();
        let cert = issuance::issue(shared, &node_id, &csr, None, now).map_err(Status::from)?;
        let envelope = issuance::signed_response(shared, &node_id, &token_row.pool_id, &cert, now);
        let request = JoinRequestKey { sha256, response: envelope.to_json() };
        let recorded = record_join(shared, &token_row, &request, &node_id, &cert, claims, now).map_err(Status::from)?;
        let envelope = match recorded {
            Recorded::Joined => {
                info!(
                    node_id = %node_id,
                    pool_id = %token_row.pool_id,
                    token_id = %token_row.id,
                    serial = %cert.serial,
                    hostname = ?claims.hostname,
                    "join: node joined"
                );
                envelope
            }
            Recorded::Again { node_id, response } => return answered_again(&token_row, &node_id, &response),
        };
        Ok(proto::JoinReply { reply: Some(proto::join_reply::Reply::Response(envelope.to_proto())) })
    }
}

/// The answer to a token join request answered before: the stored response.
fn answered_again(token: &JoinTokenRow, node_id: &str, response: &str) -> Result<proto::JoinReply, Status> {
    info!(node_id = %node_id, token_id = %token.id, "join: the same request again, answered as before");
    let envelope = pki::dsse::Envelope::from_json(response)
        .map_err(|e| Status::from(Error::pki("read a stored join response")(e)))?;
    Ok(proto::JoinReply { reply: Some(proto::join_reply::Reply::Response(envelope.to_proto())) })
}

/// A token join request, as the JoinService remembers it.
struct JoinRequestKey {
    /// [`request_sha256`].
    sha256: String,
    /// The signed JoinResponse it is answered (DSSE JSON).
    response: String,
}

/// The key of a token join request: SHA-256 of its sealed token and its
/// CSR, so that the same bytes are the same request.
fn request_sha256(token: &proto::TokenJoin) -> String {
    let mut h = Sha256::new();
    h.update((token.sealed_token.len() as u64).to_be_bytes());
    h.update(token.sealed_token.as_bytes());
    h.update(&token.csr_der);
    hex::encode(h.finalize())
}

/// What recording a token join did.
enum Recorded {
    /// A new node.
    Joined,
    /// The same request was answered before: this node and response.
    Again { node_id: String, response: String },
}

/// Creates the node of a token join, its certificate and join rows, in one
/// transaction with the token's use, unless the same request was answered
/// before (then nothing is written and no use is spent); a token with no
/// use left writes nothing and is refused `token-exhausted`.
fn record_join(
    shared: &Shared,
    token: &JoinTokenRow,
    request: &JoinRequestKey,
    node_id: &str,
    cert: &NodeCertRow,
    claims: &proto::NodeClaims,
    now: i64,
) -> Result<Recorded, Error> {
    let exhausted = || Error::Refused {
        code: Code::TokenExhausted,
        detail: format!("join token {} has no use left ({} allowed)", token.id, token.max_uses),
    };
    shared.ledger.write(|c| {
        if let Some((node_id, response)) = join_requests::get(c, &request.sha256)? {
            return Ok(Recorded::Again { node_id, response });
        }
        nodes::insert(
            c,
            &NewNode {
                id: node_id,
                pool_id: &token.pool_id,
                join_token_id: Some(&token.id),
                hostname: &claims.hostname,
                daemon_version: &claims.daemon_version,
                hardware_id: &claims.hardware_id,
                created_at_ms: now,
            },
        )?;
        certs::insert(c, cert, now)?;
        bindings::record_join(
            c,
            &NodeJoinRow {
                node_id: node_id.to_string(),
                method: JoinMethod::Token,
                node_key: NodeKeyLevel::Any,
                policy: String::new(),
                serial: cert.serial.clone(),
                at_ms: now,
            },
        )?;
        join_requests::insert(c, &request.sha256, node_id, &request.response, now)?;
        // The token's use last: its row is the one every join of the token
        // writes, and on PostgreSQL a write holds it until the commit, so
        // the other joins wait (and run again) for the shortest time. No
        // use left rolls the whole join back.
        if !tokens::use_once(c, &token.id, now)? {
            return Err(exhausted());
        }
        c.publish(StackEvent::Joined {
            node_id: node_id.to_string(),
            pool_id: token.pool_id.clone(),
            method: JoinMethod::Token,
            hostname: claims.hostname.clone(),
        });
        Ok(Recorded::Joined)
    })
}

fn no_attestor() -> Status {
    refuse(Code::MethodUnsupported, "this stack has no TPM attestor configured")
}

#[tonic::async_trait]
impl proto::join_server::Join for JoinService {
    async fn join(&self, request: Request<proto::JoinRequest>) -> Result<Response<proto::JoinReply>, Status> {
        let peer = request.extensions().get::<PeerInfo>().map(|p| p.remote_addr.to_string()).unwrap_or_default();
        let req = request.into_inner();
        let claims = req.claims.unwrap_or_default();
        let result = match &req.method {
            Some(proto::join_request::Method::Token(token)) => self.join_token(token, &claims),
            Some(proto::join_request::Method::TpmRound1(r1)) => match &self.tpm {
                Some(tpm) => tpm.round1(&self.shared, r1),
                None => Err(no_attestor()),
            },
            Some(proto::join_request::Method::TpmRound2(r2)) => match &self.tpm {
                Some(tpm) => tpm.round2(&self.shared, r2, &claims),
                None => Err(no_attestor()),
            },
            None => Err(refuse(Code::MethodMissing, "the request names no join method")),
        };
        match result {
            Ok(reply) => Ok(Response::new(reply)),
            Err(status) => {
                warn!(peer = %peer, code = status::code_of(&status), message = status.message(), "join: refused");
                Err(status)
            }
        }
    }
}
