//! Certificates (docs/formats.md, "Certificates"): the node CA and node certificates issued
//! from a CSR, the serving CA and the gateway's serving certificate, CSRs,
//! and the checks the control plane applies to what it is shown.
//!
//! All ECDSA P-256 / SHA-256, DER. Signing goes through [`Rfc6979Key`], so
//! the same inputs give byte-identical certificates on every run. rcgen
//! builds the certificates; x509-cert parses what we verify.
//!
//! This file holds what the parts share (the deterministic key, the
//! validity window, the signature OID, name attributes); the parts are
//! private modules whose items are re-exported here: `issue` (CA, node and serving certificates),
//! `ek` (EK certificates and the DER pieces they are assembled from), `csr`
//! (making and parsing CSRs), `signed` (the envelope of a certificate or a
//! CSR, all that is read of one before its signature is checked) and
//! `verify` (checking and describing certificates).

use rcgen::PublicKeyData;

use crate::error::X509Error;
use crate::{Error, Result};

mod csr;
mod ek;
mod issue;
mod signed;
mod verify;

pub use csr::{Csr, csr, parse_csr};
pub use ek::{EkCertificate, TpmIdentity, issue_ek_certificate, tlv};
pub use issue::{
    CaProfile, NODE_CERT_VALIDITY_MS, NodeCertificate, NodeIssuer, ca_certificate, issue_node_certificate,
    issue_serving_certificate, node_spiffe_id, tpm_ak_uri,
};
pub use verify::{Usage, Verified, describe_der, verify_for, verify_issued};

/// A P-256 key that signs deterministically (RFC 6979), for rcgen.
///
/// rcgen's default key pair (ring) signs with random nonces; this adapter
/// makes certificates and CSRs reproducible.
pub struct Rfc6979Key {
    secret: p256::SecretKey,
    point: Vec<u8>,
}

impl Rfc6979Key {
    /// Wraps a P-256 secret key.
    pub fn new(secret: &p256::SecretKey) -> Self {
        Self::with_public_key(secret, &secret.public_key())
    }

    fn with_public_key(secret: &p256::SecretKey, public_key: &p256::PublicKey) -> Self {
        use p256::elliptic_curve::sec1::ToSec1Point;
        Rfc6979Key { secret: secret.clone(), point: public_key.to_sec1_point(false).as_bytes().to_vec() }
    }
}

impl PublicKeyData for Rfc6979Key {
    fn der_bytes(&self) -> &[u8] {
        &self.point
    }
    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

impl rcgen::SigningKey for Rfc6979Key {
    fn sign(&self, msg: &[u8]) -> std::result::Result<Vec<u8>, rcgen::Error> {
        Ok(crate::keys::sign_p256(&self.secret, msg).to_der().as_bytes().to_vec())
    }
}

/// A validity window in Unix milliseconds (X.509 keeps whole seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// notBefore.
    pub not_before_ms: i64,
    /// notAfter.
    pub not_after_ms: i64,
}

fn build_err(e: rcgen::Error) -> Error {
    X509Error::CertBuild { reason: e.to_string() }.into()
}

fn attribute_string(atv: &x509_cert::attr::AttributeTypeAndValue) -> Result<String> {
    atv.value
        .decode_as::<der::asn1::Utf8StringRef<'_>>()
        .map(|s| s.to_string())
        .or_else(|_| atv.value.decode_as::<der::asn1::PrintableStringRef<'_>>().map(|s| s.to_string()))
        .map_err(|e| X509Error::CertMalformed { reason: format!("name attribute: {e}") }.into())
}

#[cfg(test)]
mod tests {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose};

    use super::issue::issue_leaf;
    use super::*;
    use crate::keys;

    const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn ca() -> (p256::SecretKey, Vec<u8>) {
        let key = keys::p256("s", "node-ca");
        let profile = CaProfile {
            common_name: "bc node CA",
            organization: Some("compute.dev.local"),
            serial: &[1],
            validity: Validity { not_before_ms: T0, not_after_ms: T0 + 86_400_000 * 3650 },
        };
        let der = ca_certificate(&key, &profile).unwrap();
        (key, der)
    }

    #[test]
    fn node_certificates_are_deterministic_and_verify() {
        let (ca_key, ca_der) = ca();
        assert_eq!(ca_der, ca().1);
        let node_key = keys::p256("s", "node/0");
        let csr_der = csr(&node_key, "bcd").unwrap();
        assert_eq!(csr_der, csr(&node_key, "bcd").unwrap());
        let csr = parse_csr(&csr_der).unwrap();
        let node = NodeCertificate {
            node_id: "node_1",
            trust_domain: "compute.dev.local",
            tpm_ak_name: Some(b"ak"),
            serial: &[2],
            not_before_ms: T0,
        };
        let leaf = issue_node_certificate(&ca_key, &ca_der, &csr, &node).unwrap();
        // A NodeIssuer kept across certificates issues the same bytes.
        let issuer = NodeIssuer::new(&ca_key, &ca_der).unwrap();
        let second = NodeCertificate { node_id: "node_2", serial: &[3], ..node };
        assert_eq!(
            issuer.issue(&csr, &second).unwrap(),
            issue_node_certificate(&ca_key, &ca_der, &csr, &second).unwrap()
        );
        assert_eq!(issuer.issue(&csr, &node).unwrap(), leaf);
        let v = verify_issued(&leaf, &ca_der, T0 + 1000).unwrap();
        assert_eq!(v.common_name, "node_1");
        assert_eq!(v.uris, vec!["spiffe://compute.dev.local/node/node_1".to_string(), tpm_ak_uri(b"ak")]);
        assert_eq!(v.spki_der, csr.spki_der);
        assert_eq!(
            verify_issued(&leaf, &ca_der, T0 + NODE_CERT_VALIDITY_MS + 1000).unwrap_err().code(),
            "cert-validity"
        );
        let other_ca = ca_certificate(
            &keys::p256("s", "other"),
            &CaProfile {
                common_name: "bc node CA",
                organization: Some("compute.dev.local"),
                serial: &[1],
                validity: Validity { not_before_ms: T0, not_after_ms: T0 + 1 },
            },
        )
        .unwrap();
        assert_eq!(verify_issued(&leaf, &other_ca, T0).unwrap_err().code(), "cert-chain");
    }

    /// A node certificate of the test CA carrying `extension`.
    fn node_with(extension: rcgen::CustomExtension) -> (Vec<u8>, Vec<u8>) {
        let (ca_key, ca_der) = ca();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, "node_1");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.custom_extensions = vec![extension];
        let validity = Validity { not_before_ms: T0, not_after_ms: T0 + NODE_CERT_VALIDITY_MS };
        let key = keys::p256("s", "node/0").public_key();
        (issue_leaf(&ca_key, &ca_der, &key, params, &[3], validity).unwrap(), ca_der)
    }

    #[test]
    fn defect_11_an_unknown_critical_extension_is_refused() {
        let mut unknown = rcgen::CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 99999, 1], vec![0x05, 0x00]);
        unknown.set_criticality(true);
        let (leaf, ca_der) = node_with(unknown);
        let err = verify_issued(&leaf, &ca_der, T0 + 1000).unwrap_err();
        assert_eq!(err.code(), "cert-chain");
        assert!(err.to_string().contains("unknown critical extension 1.3.6.1.4.1.99999.1"), "{err}");
        // The same extension, not critical, is ignored.
        let (leaf, ca_der) =
            node_with(rcgen::CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 99999, 1], vec![0x05, 0x00]));
        verify_issued(&leaf, &ca_der, T0 + 1000).unwrap();
        // A critical extension we understand (the subject directory attributes are not among them).
        let mut sda = rcgen::CustomExtension::from_oid_content(&[2, 5, 29, 9], vec![0x30, 0x00]);
        sda.set_criticality(true);
        let (leaf, ca_der) = node_with(sda);
        assert_eq!(verify_issued(&leaf, &ca_der, T0 + 1000).unwrap_err().code(), "cert-chain");
    }

    #[test]
    fn a_csr_with_a_broken_signature_is_refused() {
        let mut der = csr(&keys::p256("s", "node/0"), "bcd").unwrap();
        let n = der.len();
        der[n - 5] ^= 1;
        assert!(matches!(parse_csr(&der).unwrap_err().code(), "csr-signature" | "csr-malformed"));
    }
}
