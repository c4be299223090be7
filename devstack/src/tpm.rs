//! The TPM join (docs/protocol.md, "TPM join (two rounds)"): the attestor
//! options, the allow-list that resolves an EK to a pool, the sessions kept
//! between the two rounds (in memory, single use, with a deadline), and the
//! node bound to `SHA-256(EK public)` in `node_bindings`, so that a rejoin
//! with the same EK is the same node.
//!
//! Every check is `pki::tpm::Attestor`'s; a refusal is `"<pki code>: …"`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use pki::tpm::{Attestor, ChallengeRandomness, Pending};

use tonic::Status;
use tracing::info;

use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::events::StackEvent;
use crate::options::{ChallengeSource, TpmAllow, TpmAttestorOptions};

use crate::shared::Shared;
use crate::status::{self, Code, refuse};
use crate::store::bindings::{self, TPM_EK};
use crate::store::nodes::NewNode;
use crate::store::rows::{JoinMethod, NodeBindingRow, NodeCertRow, NodeJoinRow, NodeKeyLevel};
use crate::store::{certs, nodes, pools};
use crate::view::StackView;
use crate::{ids, issuance};

/// The code of an EK that no allow-list entry resolves to a pool.
pub const TPM_NOT_ALLOWED: &str = Code::TpmNotAllowed.as_str();
/// The code of a round 2 whose session the stack does not know (or used).
pub const TPM_SESSION_UNKNOWN: &str = Code::TpmSessionUnknown.as_str();
/// The code of a round 2 after its session's deadline.
pub const TPM_SESSION_EXPIRED: &str = Code::TpmSessionExpired.as_str();
/// How many sessions may wait for their round 2 at once.
const MAX_PENDING: usize = 1024;

/// What round 1 left for round 2.
struct Session {
    pending: Pending,
    pool_id: String,
    deadline: Instant,
}

/// The running attestor: its checks, its allow-list, its open sessions.
pub struct TpmJoin {
    attestor: Attestor,
    options: TpmAttestorOptions,
    allow: Mutex<Vec<TpmAllow>>,
    sessions: Mutex<HashMap<String, Session>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Entries are inserted or removed whole, so a poisoned lock still holds
    // a consistent map.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl TpmJoin {
    /// The attestor of `options`.
    pub fn new(options: TpmAttestorOptions) -> Self {
        TpmJoin {
            attestor: Attestor::new(options.ek_roots.clone(), options.node_key),
            allow: Mutex::new(options.allow.clone()),
            options,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Adds an allow-list entry.
    pub fn allow(&self, entry: TpmAllow) {
        lock(&self.allow).push(entry);
    }

    fn randomness(&self) -> ChallengeRandomness {
        match &self.options.challenge {
            ChallengeSource::Os => ChallengeRandomness::from_os(),
            ChallengeSource::Seeded { seed, label } => ChallengeRandomness::seeded(seed, label),
        }
    }

    /// The pool an EK joins: the first allow-list entry that names it (or
    /// any EK) and whose pool exists.
    fn resolve(&self, shared: &Shared, ek_sha256: &[u8; 32]) -> Result<String, Status> {
        let entries: Vec<TpmAllow> =
            lock(&self.allow).iter().filter(|a| a.ek_sha256.is_none_or(|h| &h == ek_sha256)).cloned().collect();
        let hex = hex::encode(ek_sha256);
        if entries.is_empty() {
            return Err(refuse(Code::TpmNotAllowed, format!("EK sha256 {hex} is not allowed")));
        }
        for entry in &entries {
            let pool = shared
                .ledger
                .read(|c| Ok::<_, Error>(pools::get(c, &entry.pool)?.or(pools::by_name(c, &entry.pool)?)))
                .map_err(Status::from)?;
            if let Some(pool) = pool {
                return Ok(pool.id);
            }
        }
        Err(refuse(Code::PoolUnknown, format!("no pool {:?} for EK sha256 {hex}", entries[0].pool)))
    }

    /// Round 1: checks the EK, its certificate and the AK, resolves the
    /// pool, and answers a challenge whose session waits for round 2.
    pub fn round1(&self, shared: &Shared, r: &proto::TpmRound1) -> Result<proto::JoinReply, Status> {
        let round1 = pki::tpm::Round1 {
            ek_public: r.ek_public.clone(),
            ek_certificate: r.ek_certificate.clone(),
            ak_public: r.ak_public.clone(),
        };
        let enrollment = self.attestor.verify_round1(&round1, now_ms()).map_err(|e| status::from_pki(&e))?;
        let ek = enrollment.ek_binding;
        let bound = shared.ledger.read(|c| bindings::get(c, TPM_EK, &hex::encode(ek))).map_err(Status::from)?;
        let pool_id = self.resolve(shared, &ek)?;
        // A rejoin keeps the node's pool.
        let pool_id = match &bound {
            Some(b) => {
                shared.ledger.read(|c| nodes::get(c, &b.node_id)).map_err(Status::from)?.map_or(pool_id, |n| n.pool_id)
            }
            None => pool_id,
        };
        let (challenge, pending) = self.attestor.challenge(enrollment, self.randomness());
        let session_id = ids::tpm_session_id();
        let now = Instant::now();
        {
            let mut sessions = lock(&self.sessions);
            sessions.retain(|_, s| s.deadline > now);
            if sessions.len() >= MAX_PENDING {
                return Err(refuse(Code::TpmBusy, format!("{MAX_PENDING} TPM joins wait for their round 2")));
            }
            sessions.insert(
                session_id.clone(),
                Session { pending, pool_id: pool_id.clone(), deadline: now + self.options.session_ttl },
            );
        }
        info!(
            session_id = %session_id,
            ek_sha256 = %hex::encode(ek),
            pool_id = %pool_id,
            rejoin = bound.as_ref().map(|b| b.node_id.as_str()),
            "join: TPM round 1 verified, challenge sent"
        );
        Ok(proto::JoinReply {
            reply: Some(proto::join_reply::Reply::Challenge(proto::TpmChallenge {
                session_id,
                credential_blob: challenge.credential.credential_blob,
                encrypted_secret: challenge.credential.encrypted_secret,
                nonce: challenge.nonce.to_vec(),
            })),
        })
    }

    /// Round 2: checks the answer of a session, creates the node (or finds
    /// the one bound to this EK), issues a certificate naming the AK and
    /// answers the signed JoinResponse.
    pub fn round2(
        &self,
        shared: &Shared,
        r: &proto::TpmRound2,
        claims: &proto::NodeClaims,
    ) -> Result<proto::JoinReply, Status> {
        let session = lock(&self.sessions)
            .remove(&r.session_id)
            .ok_or_else(|| refuse(Code::TpmSessionUnknown, format!("no TPM join session {:?}", r.session_id)))?;
        if session.deadline <= Instant::now() {
            return Err(refuse(
                Code::TpmSessionExpired,
                format!(
                    "TPM join session {} passed its {} s deadline",
                    r.session_id,
                    self.options.session_ttl.as_secs()
                ),
            ));
        }
        let answer = answer(r)?;
        let attestation = self.attestor.verify_answer(&session.pending, &answer).map_err(|e| status::from_pki(&e))?;
        let level = if attestation.csr_key_in_tpm {
            NodeKeyLevel::Tpm
        } else if attestation.certified_node_key.is_some() {
            NodeKeyLevel::Certified
        } else {
            NodeKeyLevel::Any
        };
        let ek_hex = hex::encode(attestation.ek_binding);
        let now = now_ms();
        let (node_id, pool_id, cert, rejoin) =
            self.record_join(shared, &session, &attestation, level, claims, now).map_err(Status::from)?;
        let envelope = issuance::signed_response(shared, &node_id, &pool_id, &cert, now);
        info!(
            node_id = %node_id,
            pool_id = %pool_id,
            ek_sha256 = %ek_hex,
            node_key = %level,
            policy = self.options.node_key.as_str(),
            rejoin,
            serial = %cert.serial,
            "join: node joined with its TPM"
        );
        Ok(proto::JoinReply { reply: Some(proto::join_reply::Reply::Response(envelope.to_proto())) })
    }

    /// Records a verified round 2 in one transaction: the node bound to the
    /// EK (created on a first join), its certificate naming the AK, the
    /// binding with this join's AK, and the join. Returns the node id, its
    /// pool (a rejoin keeps the node's), the certificate and whether it was
    /// a rejoin.
    fn record_join(
        &self,
        shared: &Shared,
        session: &Session,
        attestation: &pki::tpm::Attestation,
        level: NodeKeyLevel,
        claims: &proto::NodeClaims,
        now: i64,
    ) -> Result<(String, String, NodeCertRow, bool)> {
        let enrollment = &session.pending.enrollment;
        let ek_hex = hex::encode(attestation.ek_binding);
        shared.ledger.write(|c| {
            let bound = bindings::get(c, TPM_EK, &ek_hex)?;
            let rejoin = bound.is_some();
            let node_id = match &bound {
                Some(b) => b.node_id.clone(),
                None => {
                    let node_id = ids::node_id();
                    nodes::insert(
                        c,
                        &NewNode {
                            id: &node_id,
                            pool_id: &session.pool_id,
                            join_token_id: None,
                            hostname: &claims.hostname,
                            daemon_version: &claims.daemon_version,
                            hardware_id: &claims.hardware_id,
                            created_at_ms: now,
                        },
                    )?;
                    node_id
                }
            };
            let cert = issuance::issue(shared, &node_id, &attestation.csr, Some(&attestation.ak_name), now)?;
            certs::insert(c, &cert, now)?;
            bindings::upsert(
                c,
                &NodeBindingRow {
                    node_id: node_id.clone(),
                    kind: TPM_EK.into(),
                    sha256: ek_hex.clone(),
                    ak_public: enrollment.ak_public.to_bytes(),
                    ak_name: attestation.ak_name.clone(),
                    created_at_ms: bound.as_ref().map_or(now, |b| b.created_at_ms),
                    updated_at_ms: now,
                },
            )?;
            bindings::record_join(
                c,
                &NodeJoinRow {
                    node_id: node_id.clone(),
                    method: JoinMethod::Tpm,
                    node_key: level,
                    policy: self.options.node_key.as_str().into(),
                    serial: cert.serial.clone(),
                    at_ms: now,
                },
            )?;
            let pool_id = nodes::get(c, &node_id)?.map_or(session.pool_id.clone(), |n| n.pool_id);
            c.publish(StackEvent::Joined {
                node_id: node_id.clone(),
                pool_id: pool_id.clone(),
                method: JoinMethod::Tpm,
                hostname: claims.hostname.clone(),
            });
            Ok((node_id, pool_id, cert, rejoin))
        })
    }
}

/// A round 2 as the attestor takes it.
fn answer(r: &proto::TpmRound2) -> Result<pki::tpm::Answer, Status> {
    let quote = r.quote.as_ref().ok_or_else(|| {
        status::from_pki(&pki::TpmError::Malformed { what: "round 2".into(), reason: "no quote".into() }.into())
    })?;
    Ok(pki::tpm::Answer {
        activated_secret: r.activated_secret.clone(),
        quote: pki::tpm::attestor::Signed { attest: quote.attest.clone(), signature: quote.signature.clone() },
        pcr_values: quote.pcr_values.clone(),
        node_key: r.node_key.as_ref().map(issuance::certified_key),
        csr: r.csr_der.clone(),
    })
}

impl StackView<'_> {
    /// A node's hardware bindings (`tpm-ek`).
    pub fn node_bindings(&self, node_id: &str) -> Vec<NodeBindingRow> {
        self.read(|c| bindings::of_node(c, node_id))
    }

    /// The node bound to a TPM's EK (`SHA-256` of its `TPMT_PUBLIC`).
    pub fn node_by_ek(&self, ek_sha256: &[u8; 32]) -> Option<NodeBindingRow> {
        self.read(|c| bindings::get(c, TPM_EK, &hex::encode(ek_sha256)))
    }

    /// A node's joins, oldest first (method, what was proved about its key).
    pub fn node_joins(&self, node_id: &str) -> Vec<NodeJoinRow> {
        self.read(|c| bindings::joins(c, node_id))
    }
}

/// Adds an entry to the TPM attestor's allow-list.
pub fn allow(tpm: Option<&TpmJoin>, entry: TpmAllow) -> Result<()> {
    tpm.ok_or(Error::NoTpmAttestor)?.allow(entry);
    Ok(())
}
