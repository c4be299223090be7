//! CSRs: a deterministic PKCS#10 request for a key ([`csr`]), and the
//! parse that verifies its self-signature ([`parse_csr`]).

use der::{Decode, Encode};
use rcgen::{CertificateParams, DistinguishedName, DnType};
use spki::DecodePublicKey;
use x509_cert::request::CertReq;

use super::{ECDSA_WITH_SHA256, Rfc6979Key, build_err};
use crate::error::X509Error;
use crate::{Error, Result, pin};

/// A PKCS#10 CSR for `key` with subject CN `common_name` and no extensions,
/// deterministic through RFC 6979.
pub fn csr(key: &p256::SecretKey, common_name: &str) -> Result<Vec<u8>> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, common_name);
    let req = params.serialize_request(&Rfc6979Key::new(key)).map_err(build_err)?;
    Ok(req.der().to_vec())
}

/// A CSR whose self-signature verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Csr {
    /// The requested key.
    pub public_key: p256::PublicKey,
    /// Its SubjectPublicKeyInfo DER.
    pub spki_der: Vec<u8>,
    /// Its pin.
    pub pin: String,
}

/// Parses a CSR and verifies its self-signature (ECDSA P-256 / SHA-256 only).
pub fn parse_csr(der: &[u8]) -> Result<Csr> {
    let malformed = |reason: String| Error::from(X509Error::CsrMalformed { reason });
    let req = CertReq::from_der(der).map_err(|e| malformed(e.to_string()))?;
    if req.algorithm.oid != ECDSA_WITH_SHA256 {
        return Err(malformed(format!("signature algorithm {}", req.algorithm.oid)));
    }
    let spki_der = req.info.public_key.to_der().map_err(|e| malformed(e.to_string()))?;
    let public_key = p256::PublicKey::from_public_key_der(&spki_der).map_err(|e| malformed(format!("key: {e}")))?;
    let tbs = req.info.to_der().map_err(|e| malformed(e.to_string()))?;
    let sig = p256::ecdsa::Signature::from_der(req.signature.raw_bytes()).map_err(|_| X509Error::CsrSignature)?;
    if !crate::keys::verify_ecdsa_p256(&public_key, &tbs, &sig) {
        return Err(X509Error::CsrSignature.into());
    }
    Ok(Csr { public_key, pin: pin::pin(&spki_der), spki_der })
}
