//! Node certificates and signed JoinResponses, shared by Join and Renew.

use pki::x509;

use crate::error::{Error, Result};
use crate::ids;
use crate::shared::Shared;
use crate::store::rows::NodeCertRow;

/// Back-dating of a node certificate's notBefore, for clock skew: 5
/// minutes, so a certificate one gateway issues is already valid on a
/// gateway (or node) whose clock is minutes behind (docs/devstack.md,
/// "Several gateways").
const SKEW_MS: i64 = 300_000;

/// Issues a 24-hour certificate (random serial) for a verified CSR; a TPM
/// node's certificate names its AK (`urn:bc:tpm-ak:`).
pub fn issue(
    shared: &Shared,
    node_id: &str,
    csr: &x509::Csr,
    tpm_ak_name: Option<&[u8]>,
    now_ms: i64,
) -> Result<NodeCertRow> {
    let serial = ids::serial();
    let node = x509::NodeCertificate {
        node_id,
        trust_domain: &shared.settings.options.trust_domain,
        tpm_ak_name,
        serial: &serial,
        not_before_ms: now_ms - SKEW_MS,
    };
    let keys = &shared.keys;
    let der = keys.node_issuer().issue(csr, &node).map_err(Error::pki("issue a node certificate"))?;
    let described = x509::describe_der(&der).map_err(Error::pki("read an issued certificate"))?;
    Ok(NodeCertRow {
        node_id: node_id.to_string(),
        serial: hex::encode(&described.serial),
        spki_pin: csr.pin.clone(),
        der,
        not_before_ms: described.validity.not_before_ms,
        not_after_ms: described.validity.not_after_ms,
        revoked_at_ms: None,
    })
}

/// The JoinResponse for a node's new certificate, signed by the join-signing key.
pub fn signed_response(
    shared: &Shared,
    node_id: &str,
    pool_id: &str,
    cert: &NodeCertRow,
    now_ms: i64,
) -> pki::dsse::Envelope {
    let keys = &shared.keys;
    let response = proto::JoinResponse {
        node_id: node_id.to_string(),
        certificate_chain: vec![cert.der.clone(), keys.node_ca_der.clone()],
        trust_domain: shared.settings.options.trust_domain.clone(),
        trust: Some(proto::JoinTrust {
            command_roots: keys.command_roots().iter().map(pki::PublicKey::to_proto).collect(),
            trust_bundle: keys.intent.as_ref().map(|i| i.trust().1.to_proto()),
        }),
        gateway: Some(proto::GatewayEndpoint {
            url: shared.settings.gateway_url.clone(),
            server_name: crate::SERVER_NAME.to_string(),
            serving_ca_spki_pin: keys.serving_ca_pin(),
        }),
        csr_pin: cert.spki_pin.clone(),
        issued_at_ms: now_ms,
        pool_id: pool_id.to_string(),
    };
    pki::join::sign_response(&keys.join_signing, &response)
}

/// A node key and its certification as the attestor takes them.
pub fn certified_key(k: &proto::TpmCertification) -> pki::tpm::attestor::CertifiedKey {
    pki::tpm::attestor::CertifiedKey {
        public: k.public.clone(),
        certify: pki::tpm::attestor::Signed { attest: k.attest.clone(), signature: k.signature.clone() },
    }
}
