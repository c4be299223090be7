//! `Gateway.Renew`: a new certificate for the caller's node from a CSR.
//!
//! A token node renews with a plain CSR (a certification, if sent, is
//! ignored). A node bound to a TPM (`node_bindings`) renews under what its
//! latest join proved (`node_joins.node_key`): the AK recorded at that join
//! must certify the next key, over `SHA-256(csr_der)` as qualifying data
//! (`tpm-malformed`, `certify-signature`, `certify-nonce`, `certify-name`,
//! `node-key-attributes`); under `tpm` that key must be the CSR's
//! (`node-key-not-csr`), under `tpm` and `certified` a certification is
//! required (`node-key-uncertified`). The new certificate still names the AK.
//! A node renews at most `NodeLimits::renewals_per_hour` times in an hour
//! (`ResourceExhausted` `renew-limit`).

use sha2::{Digest, Sha256};
use tonic::Status;
use tracing::{info, warn};

use super::auth::AuthedNode;
use crate::clock::now_ms;
use crate::issuance;

use crate::shared::Shared;
use crate::status::{self, Code, refuse};
use crate::store::rows::NodeKeyLevel;
use crate::store::{bindings, certs, nodes};

/// An hour, the window of the renewal limit.
const HOUR_MS: i64 = 3600 * 1000;

/// The qualifying data of a renewal's TPM2_Certify: `SHA-256(csr_der)`.
pub fn renewal_nonce(csr_der: &[u8]) -> [u8; 32] {
    Sha256::digest(csr_der).into()
}

/// Renews the certificate of `node`.
pub fn renew(shared: &Shared, node: &AuthedNode, req: &proto::RenewRequest) -> Result<proto::RenewReply, Status> {
    let csr = pki::x509::parse_csr(&req.csr_der).map_err(|e| status::from_pki(&e))?;
    let now = now_ms();
    let (row, binding, level) = shared
        .ledger
        .read(|c| {
            Ok::<_, crate::error::Error>((
                nodes::get(c, &node.node_id)?,
                bindings::tpm_of_node(c, &node.node_id)?,
                bindings::latest_node_key(c, &node.node_id)?,
            ))
        })
        .map_err(Status::from)?;
    let row = row.ok_or_else(|| refuse(Code::CertUnknown, format!("no node {}", node.node_id)))?;
    let limit = shared.settings.options.limits.renewals_per_hour;
    let renewed =
        shared.ledger.read(|c| certs::renewed_since(c, &node.node_id, now - HOUR_MS)).map_err(Status::from)?;
    if renewed >= limit {
        return Err(refuse(
            Code::RenewLimit,
            format!("node {} renewed {renewed} times in the last hour; {limit} allowed", node.node_id),
        ));
    }
    let ak_name = match &binding {
        None => {
            if req.node_key.is_some() {
                warn!(node_id = %node.node_id, "gateway: renewal certification ignored: the node has no TPM binding");
            }
            None
        }
        Some(b) => {
            let level = level.unwrap_or(NodeKeyLevel::Tpm);
            let certified = match &req.node_key {
                Some(k) => Some(
                    pki::tpm::attestor::verify_key_certification(
                        &b.ak_public,
                        &renewal_nonce(&req.csr_der),
                        &issuance::certified_key(k),
                    )
                    .map_err(|e| status::from_pki(&e))?,
                ),
                None if level != NodeKeyLevel::Any => {
                    return Err(status::from_pki(&pki::TpmError::NodeKeyUncertified.into()));
                }
                None => None,
            };
            if level == NodeKeyLevel::Tpm && certified.as_ref() != Some(&csr.public_key) {
                return Err(status::from_pki(&pki::TpmError::NodeKeyNotCsr.into()));
            }
            Some(b.ak_name.clone())
        }
    };
    let cert = issuance::issue(shared, &node.node_id, &csr, ak_name.as_deref(), now).map_err(Status::from)?;
    shared.ledger.write(|c| Ok(certs::insert(c, &cert, now)?)).map_err(Status::from)?;
    let envelope = issuance::signed_response(shared, &node.node_id, &row.pool_id, &cert, now);
    info!(node_id = %node.node_id, serial = %cert.serial, tpm = binding.is_some(), "gateway: certificate renewed");
    Ok(proto::RenewReply { response: Some(envelope.to_proto()) })
}
