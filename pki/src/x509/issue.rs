//! Issuing certificates with rcgen, signed by a [`Rfc6979Key`]: self-signed
//! CAs ([`ca_certificate`]), node certificates for the key of a verified CSR
//! ([`NodeIssuer`], [`issue_node_certificate`]) and the gateway's serving
//! certificate ([`issue_serving_certificate`]); and the leaf signing the EK
//! certificates share, under an issuer rebuilt from its CA certificate.

use std::net::IpAddr;

use der::Decode;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod,
    KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use sha2::{Digest, Sha256};
use spki::EncodePublicKey;
use x509_cert::Certificate;

use super::{Csr, Rfc6979Key, Validity, attribute_string, build_err};
use crate::Result;
use crate::error::X509Error;

/// Validity of a node certificate: 24 hours (renew after two thirds).
pub const NODE_CERT_VALIDITY_MS: i64 = 24 * 3600 * 1000;

/// A P-256 public key given by its SPKI, for rcgen (the subject of a leaf).
struct SubjectKey {
    point: Vec<u8>,
}

impl PublicKeyData for SubjectKey {
    fn der_bytes(&self) -> &[u8] {
        &self.point
    }
    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_ECDSA_P256_SHA256
    }
}

/// The subject key identifier: the leftmost 160 bits of SHA-256 over the SPKI.
fn key_id(spki_der: &[u8]) -> Vec<u8> {
    Sha256::digest(spki_der)[..20].to_vec()
}

fn datetime(ms: i64) -> Result<time::OffsetDateTime> {
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .map_err(|e| X509Error::CertBuild { reason: e.to_string() }.into())
}

fn p256_spki(key: &p256::PublicKey) -> Vec<u8> {
    key.to_public_key_der().expect("a P-256 key always encodes").into_vec()
}

/// Parameters of a self-signed CA (node CA, serving CA, EK root).
#[derive(Clone, Debug)]
pub struct CaProfile<'a> {
    /// The subject's common name.
    pub common_name: &'a str,
    /// The subject's organization, if any.
    pub organization: Option<&'a str>,
    /// The serial number (positive, at most 20 bytes).
    pub serial: &'a [u8],
    /// The validity window.
    pub validity: Validity,
}

/// A self-signed CA certificate (CA:true, pathlen 0, keyCertSign and cRLSign).
pub fn ca_certificate(key: &p256::SecretKey, profile: &CaProfile<'_>) -> Result<Vec<u8>> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    if let Some(org) = profile.organization {
        params.distinguished_name.push(DnType::OrganizationName, org);
    }
    params.distinguished_name.push(DnType::CommonName, profile.common_name);
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.serial_number = Some(SerialNumber::from_slice(profile.serial));
    params.not_before = datetime(profile.validity.not_before_ms)?;
    params.not_after = datetime(profile.validity.not_after_ms)?;
    params.key_identifier_method = KeyIdMethod::PreSpecified(key_id(&p256_spki(&key.public_key())));
    let signer = Rfc6979Key::new(key);
    Ok(params.self_signed(&signer).map_err(build_err)?.der().to_vec())
}

/// What the control plane puts in a node certificate.
#[derive(Clone, Debug)]
pub struct NodeCertificate<'a> {
    /// The node id (subject CN, and the SPIFFE path).
    pub node_id: &'a str,
    /// The trust domain of the SPIFFE URI.
    pub trust_domain: &'a str,
    /// For a TPM-joined node, the AK name; the certificate then also names
    /// `urn:bc:tpm-ak:<hex SHA-256 of the AK name>`.
    pub tpm_ak_name: Option<&'a [u8]>,
    /// The serial number.
    pub serial: &'a [u8],
    /// notBefore; notAfter is 24 hours later.
    pub not_before_ms: i64,
}

/// The SPIFFE ID of a node.
pub fn node_spiffe_id(trust_domain: &str, node_id: &str) -> String {
    format!("spiffe://{trust_domain}/node/{node_id}")
}

/// The URI naming a TPM AK in a node certificate.
pub fn tpm_ak_uri(ak_name: &[u8]) -> String {
    format!("urn:bc:tpm-ak:{}", hex::encode(Sha256::digest(ak_name)))
}

/// Issues a node certificate (EKU clientAuth) for the key of a verified CSR
/// (a [`NodeIssuer`] made for this one certificate).
pub fn issue_node_certificate(
    ca_key: &p256::SecretKey,
    ca_der: &[u8],
    csr: &Csr,
    node: &NodeCertificate<'_>,
) -> Result<Vec<u8>> {
    NodeIssuer::new(ca_key, ca_der)?.issue(csr, node)
}

/// A node CA ready to issue: its name read from its certificate and its
/// public key derived once, not at every certificate (the derivation is a
/// scalar multiplication, as costly as the signature itself).
pub struct NodeIssuer {
    issuer: Issuer<'static, Rfc6979Key>,
}

impl NodeIssuer {
    /// The CA of `ca_der` (made by [`ca_certificate`]) with its key.
    pub fn new(ca_key: &p256::SecretKey, ca_der: &[u8]) -> Result<Self> {
        Ok(NodeIssuer { issuer: issuer(ca_der, ca_key)? })
    }

    /// Issues a node certificate (EKU clientAuth) for the key of a verified CSR.
    pub fn issue(&self, csr: &Csr, node: &NodeCertificate<'_>) -> Result<Vec<u8>> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, node.node_id);
        let mut sans = vec![node_spiffe_id(node.trust_domain, node.node_id)];
        if let Some(ak) = node.tpm_ak_name {
            sans.push(tpm_ak_uri(ak));
        }
        params.subject_alt_names =
            sans.into_iter().map(|u| Ok(SanType::URI(u.try_into().map_err(build_err)?))).collect::<Result<_>>()?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let validity =
            Validity { not_before_ms: node.not_before_ms, not_after_ms: node.not_before_ms + NODE_CERT_VALIDITY_MS };
        sign_leaf(&self.issuer, &csr.public_key, params, node.serial, validity)
    }
}

/// Issues the gateway's serving certificate (EKU serverAuth) for `key`.
pub fn issue_serving_certificate(
    ca_key: &p256::SecretKey,
    ca_der: &[u8],
    key: &p256::PublicKey,
    dns_names: &[&str],
    ips: &[IpAddr],
    serial: &[u8],
    validity: Validity,
) -> Result<Vec<u8>> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, dns_names.first().copied().unwrap_or("gateway"));
    let mut sans = Vec::new();
    for name in dns_names {
        sans.push(SanType::DnsName((*name).try_into().map_err(build_err)?));
    }
    sans.extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    params.subject_alt_names = sans;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    issue_leaf(ca_key, ca_der, key, params, serial, validity)
}

pub(super) fn issue_leaf(
    ca_key: &p256::SecretKey,
    ca_der: &[u8],
    subject: &p256::PublicKey,
    params: CertificateParams,
    serial: &[u8],
    validity: Validity,
) -> Result<Vec<u8>> {
    sign_leaf(&issuer(ca_der, ca_key)?, subject, params, serial, validity)
}

fn sign_leaf(
    issuer: &Issuer<'static, Rfc6979Key>,
    subject: &p256::PublicKey,
    mut params: CertificateParams,
    serial: &[u8],
    validity: Validity,
) -> Result<Vec<u8>> {
    use p256::elliptic_curve::sec1::ToSec1Point;
    params.serial_number = Some(SerialNumber::from_slice(serial));
    params.not_before = datetime(validity.not_before_ms)?;
    params.not_after = datetime(validity.not_after_ms)?;
    params.use_authority_key_identifier_extension = true;
    params.key_identifier_method = KeyIdMethod::PreSpecified(key_id(&p256_spki(subject)));
    let subject = SubjectKey { point: subject.to_sec1_point(false).as_bytes().to_vec() };
    Ok(params.signed_by(&subject, issuer).map_err(build_err)?.der().to_vec())
}

/// The rcgen issuer of a CA made by [`ca_certificate`]: its subject name
/// rebuilt from the certificate (same attributes, same order, same string
/// type, hence the same bytes), its key identifier and its key usages.
fn issuer(ca_der: &[u8], ca_key: &p256::SecretKey) -> Result<Issuer<'static, Rfc6979Key>> {
    let ca = Certificate::from_der(ca_der).map_err(|e| X509Error::CertMalformed { reason: format!("CA: {e}") })?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    for rdn in ca.tbs_certificate().subject().iter_rdn() {
        for atv in rdn.iter() {
            let kind = match atv.oid {
                const_oid::db::rfc4519::CN => DnType::CommonName,
                const_oid::db::rfc4519::O => DnType::OrganizationName,
                other => {
                    return Err(
                        X509Error::CertBuild { reason: format!("unsupported CA name attribute {other}") }.into()
                    );
                }
            };
            params.distinguished_name.push(kind, attribute_string(atv)?);
        }
    }
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let public_key = ca_key.public_key();
    params.key_identifier_method = KeyIdMethod::PreSpecified(key_id(&p256_spki(&public_key)));
    Ok(Issuer::new(params, Rfc6979Key::with_public_key(ca_key, &public_key)))
}
