//! Who is calling the gateway: the verified client certificate of the
//! connection, checked against `node_certs` (known, same bytes, unrevoked,
//! valid now).
//!
//! A connection that resumed a TLS session (`PeerInfo::resumed`) presents
//! the chain its session began with, out of a ticket only the store's keys
//! open: its key signed that first handshake. Its leaf is read, not
//! verified again: what binds it to the node is the same check as ever,
//! the very bytes the stack issued, found in `node_certs` by node and
//! serial, unrevoked and valid now (by the row, which holds the
//! certificate's own validity). So a revoked node's resumption is refused
//! `cert-revoked` like its full handshake, and a chain the stack never
//! issued `cert-unknown`.
//!
//! Refusals: no certificate or one the stack never issued → `Unauthenticated`
//! `cert-unknown`; revoked → `PermissionDenied` `cert-revoked`; outside its
//! validity → `PermissionDenied` `cert-validity`.

use std::net::SocketAddr;

use pki::PublicKey;
use tonic::{Request, Status};

use crate::clock::now_ms;

use crate::shared::Shared;
use crate::status::{Code, from_pki, refuse};
use crate::store::certs;
use crate::tls::PeerInfo;

/// A caller whose certificate belongs to a known node.
#[derive(Clone, Debug)]
pub struct AuthedNode {
    /// The node id (the certificate's CN).
    pub node_id: String,
    /// The certificate's serial (hex).
    pub serial: String,
    /// The certified key (verifies node-signed statements).
    pub key: PublicKey,
    /// The certificate's notBefore.
    pub not_before_ms: i64,
    /// The certificate's notAfter: statements the key signs after it are
    /// not taken.
    pub not_after_ms: i64,
    /// The client's address, for logs.
    pub peer: Option<SocketAddr>,
    /// Whether its connection resumed a TLS session (for logs).
    pub resumed: bool,
}

/// Authenticates the caller of a gateway RPC.
pub fn authenticate<T>(shared: &Shared, request: &Request<T>) -> Result<AuthedNode, Status> {
    authenticate_peer(shared, request.extensions().get::<PeerInfo>())
}

/// Authenticates the peer of a connection by the client certificate it
/// presented during the TLS handshake: the same check for every transport
/// (gRPC, the WebSocket session, `POST /v1/renew`).
pub fn authenticate_peer(shared: &Shared, info: Option<&PeerInfo>) -> Result<AuthedNode, Status> {
    let peer = info.map(|i| i.remote_addr);
    let chain =
        info.and_then(|i| i.client_chain.clone()).ok_or_else(|| refuse(Code::CertUnknown, "no client certificate"))?;
    let leaf = chain.first().ok_or_else(|| refuse(Code::CertUnknown, "an empty chain"))?;
    let now = now_ms();
    let resumed = info.is_some_and(|i| i.resumed);
    let described = if resumed {
        pki::x509::describe_der(leaf).map_err(|e| refuse(Code::CertUnknown, format!("its certificate: {e}")))?
    } else {
        pki::x509::verify_issued(leaf, &shared.keys.node_ca_der, now).map_err(|e| match e {
            pki::Error::X509(pki::X509Error::CertValidity { .. }) => from_pki(&e),
            _ => refuse(Code::CertUnknown, format!("not issued by the node CA: {e}")),
        })?
    };
    let node_id = described.common_name;
    let serial = hex::encode(&described.serial);
    let row = shared
        .ledger
        .read_one(|c| certs::get(c, &node_id, &serial))
        .map_err(Status::from)?
        .filter(|row| row.der == *leaf)
        .ok_or_else(|| refuse(Code::CertUnknown, format!("no certificate {serial} of node {node_id}")))?;
    if let Some(at) = row.revoked_at_ms {
        return Err(refuse(Code::CertRevoked, format!("certificate {serial} of node {node_id} was revoked at {at}")));
    }
    if now < row.not_before_ms || now > row.not_after_ms {
        let validity = pki::X509Error::CertValidity {
            now_ms: now,
            not_before_ms: row.not_before_ms,
            not_after_ms: row.not_after_ms,
        };
        return Err(from_pki(&validity.into()));
    }
    let key = PublicKey::from_spki_der(&described.spki_der)
        .map_err(|e| refuse(Code::CertUnknown, format!("its key: {e}")))?;
    Ok(AuthedNode {
        node_id,
        serial,
        key,
        not_before_ms: row.not_before_ms,
        not_after_ms: row.not_after_ms,
        peer,
        resumed,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tonic::Code;

    use super::*;

    const HOUR_MS: i64 = 3600 * 1000;

    fn shared() -> Shared {
        crate::shared::testing::shared_with_node("none")
    }

    /// A certificate of node_1 issued at `not_before_ms`, stored unless `store` is false.
    fn cert(shared: &Shared, not_before_ms: i64, store: bool) -> Vec<u8> {
        let key = pki::keys::random_p256();
        let csr = pki::x509::parse_csr(&pki::x509::csr(&key, "bcd").unwrap()).unwrap();
        let row = crate::issuance::issue(shared, "node_1", &csr, None, not_before_ms).unwrap();
        if store {
            shared.ledger.write(|c| Ok(certs::insert(c, &row, 0)?)).unwrap();
        }
        row.der
    }

    fn call(shared: &Shared, chain: Option<Vec<u8>>) -> Result<AuthedNode, Status> {
        call_on(shared, chain, false)
    }

    /// A call on a connection that did (`resumed`) or did not resume a TLS session.
    fn call_on(shared: &Shared, chain: Option<Vec<u8>>, resumed: bool) -> Result<AuthedNode, Status> {
        let mut request = Request::new(());
        request.extensions_mut().insert(PeerInfo {
            remote_addr: "127.0.0.1:9".parse().unwrap(),
            client_chain: chain.map(|leaf| Arc::new(vec![leaf])),
            resumed,
        });
        authenticate(shared, &request)
    }

    fn code(r: Result<AuthedNode, Status>) -> (Code, String) {
        let status = r.unwrap_err();
        (status.code(), crate::status::code_of(&status).to_string())
    }

    #[test]
    fn certificates_are_checked_against_the_store() {
        let shared = shared();
        let now = now_ms();
        let good = cert(&shared, now, true);
        assert_eq!(call(&shared, Some(good.clone())).unwrap().node_id, "node_1");
        assert_eq!(code(call(&shared, None)), (Code::Unauthenticated, "cert-unknown".into()));
        let never_stored = cert(&shared, now, false);
        assert_eq!(code(call(&shared, Some(never_stored))), (Code::Unauthenticated, "cert-unknown".into()));
        let expired = cert(&shared, now - 48 * HOUR_MS, true);
        assert_eq!(code(call(&shared, Some(expired))), (Code::PermissionDenied, "cert-validity".into()));
        shared.ledger.write(|c| Ok(certs::revoke_all(c, "node_1", now)?)).unwrap();
        assert_eq!(code(call(&shared, Some(good))), (Code::PermissionDenied, "cert-revoked".into()));
    }

    /// A resumed session's chain is not verified again, and is taken only
    /// as the very bytes the stack issued, unrevoked and valid now.
    #[test]
    fn a_resumed_session_is_bound_to_the_stored_certificate() {
        let shared = shared();
        let now = now_ms();
        let good = cert(&shared, now, true);
        let authed = call_on(&shared, Some(good.clone()), true).unwrap();
        assert_eq!((authed.node_id.as_str(), authed.resumed), ("node_1", true));
        let never_stored = cert(&shared, now, false);
        assert_eq!(code(call_on(&shared, Some(never_stored), true)), (Code::Unauthenticated, "cert-unknown".into()));
        // The stored certificate's bytes, one changed (its signature): not the one issued.
        let mut forged = good.clone();
        *forged.last_mut().unwrap() ^= 1;
        assert_eq!(code(call_on(&shared, Some(forged), true)), (Code::Unauthenticated, "cert-unknown".into()));
        assert_eq!(
            code(call_on(&shared, Some(b"junk".to_vec()), true)),
            (Code::Unauthenticated, "cert-unknown".into())
        );
        let expired = cert(&shared, now - 48 * HOUR_MS, true);
        assert_eq!(code(call_on(&shared, Some(expired), true)), (Code::PermissionDenied, "cert-validity".into()));
        shared.ledger.write(|c| Ok(certs::revoke_all(c, "node_1", now)?)).unwrap();
        assert_eq!(code(call_on(&shared, Some(good), true)), (Code::PermissionDenied, "cert-revoked".into()));
    }
}
