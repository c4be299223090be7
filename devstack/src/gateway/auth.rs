//! Who is calling the gateway: the verified client certificate of the
//! connection, checked against `node_certs` (known, same bytes, unrevoked,
//! valid now).
//!
//! Refusals: no certificate or one the stack never issued → `Unauthenticated`
//! `cert-unknown`; revoked → `PermissionDenied` `cert-revoked`; outside its
//! validity → `PermissionDenied` `cert-validity`.

use std::net::SocketAddr;

use pki::PublicKey;
use tonic::{Code, Request, Status};

use crate::clock::now_ms;
use crate::join::internal;
use crate::shared::Shared;
use crate::status::{code, from_pki, refuse};
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
    /// The client's address, for logs.
    pub peer: Option<SocketAddr>,
}

/// Authenticates the caller of a gateway RPC.
pub fn authenticate<T>(shared: &Shared, request: &Request<T>) -> Result<AuthedNode, Status> {
    let info = request.extensions().get::<PeerInfo>();
    let peer = info.map(|i| i.remote_addr);
    let chain = info
        .and_then(|i| i.client_chain.clone())
        .ok_or_else(|| refuse(Code::Unauthenticated, code::CERT_UNKNOWN, "no client certificate"))?;
    let leaf = chain.first().ok_or_else(|| refuse(Code::Unauthenticated, code::CERT_UNKNOWN, "an empty chain"))?;
    let now = now_ms();
    let verified = pki::x509::verify_issued(leaf, &shared.keys.node_ca_der, now).map_err(|e| match e {
        pki::Error::CertValidity { .. } => from_pki(Code::PermissionDenied, &e),
        _ => refuse(Code::Unauthenticated, code::CERT_UNKNOWN, format!("not issued by the node CA: {e}")),
    })?;
    let node_id = verified.common_name;
    let serial = hex::encode(&verified.serial);
    let row = shared
        .store
        .with(|c| certs::get(c, &node_id, &serial))
        .map_err(internal)?
        .filter(|row| row.der == *leaf)
        .ok_or_else(|| {
            refuse(Code::Unauthenticated, code::CERT_UNKNOWN, format!("no certificate {serial} of node {node_id}"))
        })?;
    if let Some(at) = row.revoked_at_ms {
        return Err(refuse(
            Code::PermissionDenied,
            code::CERT_REVOKED,
            format!("certificate {serial} of node {node_id} was revoked at {at}"),
        ));
    }
    let key = PublicKey::from_spki_der(&verified.spki_der).map_err(|e| from_pki(Code::Unauthenticated, &e))?;
    Ok(AuthedNode { node_id, serial, key, peer })
}
