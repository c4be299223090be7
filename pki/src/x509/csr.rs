//! CSRs: a deterministic PKCS#10 request for a key ([`csr`]), and the
//! parse that verifies its self-signature ([`parse_csr`]).
//!
//! [`parse_csr`] checks, in order (the same in `daemon/internal/pki`): the
//! envelope of `super::signed` (a SEQUENCE of the CertificationRequestInfo,
//! an AlgorithmIdentifier and a BIT STRING; the info exactly version 0, a
//! subject SEQUENCE, a SubjectPublicKeyInfo and `[0]` attributes:
//! `csr-malformed`), the algorithm ecdsa-with-SHA256 without parameters
//! (`csr-malformed`), the key an uncompressed P-256 point in the one SPKI
//! form (`csr-malformed`), then the self-signature over the info's bytes as
//! they came (`csr-signature`). Subject and attributes are not interpreted:
//! the key is all a CSR gives the Join path, and a node can self-sign any
//! name, so there is nothing in them for two parsers to disagree on.

use rcgen::{CertificateParams, DistinguishedName, DnType};

use super::{Rfc6979Key, build_err, signed};
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
    let malformed = |reason: &str| Error::from(X509Error::CsrMalformed { reason: reason.to_string() });
    let req = signed::csr(der).map_err(malformed)?;
    if req.signed.algorithm != signed::ECDSA_WITH_SHA256_ID {
        return Err(malformed("the signature algorithm is not ecdsa-with-SHA256 without parameters"));
    }
    let public_key = signed::p256_spki(req.spki).map_err(malformed)?;
    if !req.signed.verifies(&public_key) {
        return Err(X509Error::CsrSignature.into());
    }
    Ok(Csr { public_key, pin: pin::pin(req.spki), spki_der: req.spki.to_vec() })
}
