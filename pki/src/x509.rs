//! Certificates (docs/formats.md, "Certificates"): the node CA and node certificates issued
//! from a CSR, the serving CA and the gateway's serving certificate, CSRs,
//! and the checks the control plane applies to what it is shown.
//!
//! All ECDSA P-256 / SHA-256, DER. Signing goes through [`Rfc6979Key`], so
//! the same inputs give byte-identical certificates on every run. rcgen
//! builds the certificates; x509-cert parses what we verify.

use std::net::IpAddr;

use der::{Decode, Encode};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod,
    KeyUsagePurpose, PublicKeyData, SanType, SerialNumber,
};
use sha2::{Digest, Sha256};
use spki::{DecodePublicKey, EncodePublicKey};
use x509_cert::Certificate;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::request::CertReq;

use crate::error::X509Error;
use crate::{Error, Result, pin};

/// The OID of ecdsa-with-SHA256.
const ECDSA_WITH_SHA256: der::asn1::ObjectIdentifier = der::asn1::ObjectIdentifier::new_unwrap("1.2.840.10045.4.3.2");

/// Validity of a node certificate: 24 hours (renew after two thirds).
pub const NODE_CERT_VALIDITY_MS: i64 = 24 * 3600 * 1000;

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

/// A validity window in Unix milliseconds (X.509 keeps whole seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    /// notBefore.
    pub not_before_ms: i64,
    /// notAfter.
    pub not_after_ms: i64,
}

/// The subject key identifier: the leftmost 160 bits of SHA-256 over the SPKI.
fn key_id(spki_der: &[u8]) -> Vec<u8> {
    Sha256::digest(spki_der)[..20].to_vec()
}

fn datetime(ms: i64) -> Result<time::OffsetDateTime> {
    time::OffsetDateTime::from_unix_timestamp(ms.div_euclid(1000))
        .map_err(|e| X509Error::CertBuild { reason: e.to_string() }.into())
}

fn build_err(e: rcgen::Error) -> Error {
    X509Error::CertBuild { reason: e.to_string() }.into()
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

/// What an EK certificate says about its TPM (TCG EK Credential Profile,
/// the subject alternative name's directoryName).
#[derive(Clone, Debug)]
pub struct TpmIdentity<'a> {
    /// `TPM_PT_MANUFACTURER`, written `id:XXXXXXXX`.
    pub manufacturer: u32,
    /// The model (the vendor string).
    pub model: &'a str,
    /// The firmware version (`TPM_PT_FIRMWARE_VERSION_1`), written `id:XXXXXXXX`.
    pub version: u32,
}

/// What the test manufacturer puts in an EK certificate.
#[derive(Clone, Debug)]
pub struct EkCertificate<'a> {
    /// The subject's common name (the TCG profile allows an empty subject only
    /// with a critical SAN, which Go's verifier refuses; so there is one).
    pub common_name: &'a str,
    /// The TPM named in the SAN.
    pub tpm: TpmIdentity<'a>,
    /// The serial number.
    pub serial: &'a [u8],
    /// The validity window.
    pub validity: Validity,
}

/// tcg-kp-EKCertificate.
const TCG_KP_EK_CERTIFICATE: &[u64] = &[2, 23, 133, 8, 1];

/// A DER TLV (short or long definite length): `tag`, the length, then
/// `content`. Public for the fixture generator, which re-assembles
/// certificates it alters with it.
pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let len = n.to_be_bytes();
        let skip = len.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (len.len() - skip) as u8);
        out.extend_from_slice(&len[skip..]);
    }
    out.extend_from_slice(content);
    out
}

fn oid_der(oid: &str) -> Vec<u8> {
    der::asn1::ObjectIdentifier::new_unwrap(oid).to_der().expect("an OID encodes")
}

fn utf8_der(s: &str) -> Result<Vec<u8>> {
    der::asn1::Utf8StringRef::new(s)
        .and_then(|u| u.to_der())
        .map_err(|e| X509Error::CertBuild { reason: format!("UTF8String: {e}") }.into())
}

/// The SAN of an EK certificate: one directoryName with the TPM's
/// manufacturer, model and version, each in its own RDN.
fn ek_san(tpm: &TpmIdentity<'_>) -> Result<Vec<u8>> {
    let rdn = |oid: &str, value: &str| -> Result<Vec<u8>> {
        Ok(tlv(0x31, &tlv(0x30, &[oid_der(oid), utf8_der(value)?].concat())))
    };
    let name = tlv(
        0x30,
        &[
            rdn("2.23.133.2.1", &format!("id:{:08X}", tpm.manufacturer))?,
            rdn("2.23.133.2.2", tpm.model)?,
            rdn("2.23.133.2.3", &format!("id:{:08X}", tpm.version))?,
        ]
        .concat(),
    );
    // GeneralNames ::= SEQUENCE OF GeneralName; directoryName is [4] EXPLICIT Name.
    Ok(tlv(0x30, &tlv(0xa4, &name)))
}

/// The subject directory attributes of an EK certificate: the TPM
/// specification it implements (family "2.0", level 0, revision 164).
fn ek_subject_directory_attributes() -> Result<Vec<u8>> {
    let spec = tlv(0x30, &[utf8_der("2.0")?, tlv(0x02, &[0]), tlv(0x02, &[0x00, 0xa4])].concat());
    let attribute = tlv(0x30, &[oid_der("2.23.133.2.16"), tlv(0x31, &spec)].concat());
    Ok(tlv(0x30, &attribute))
}

/// Issues an EK certificate (TCG EK Credential Profile) for the ECC P-256 EK
/// `ek`, from the test manufacturer's root: CA:false, keyUsage keyAgreement,
/// EKU tcg-kp-EKCertificate, a non-critical SAN naming the TPM, and the TPM
/// specification in the subject directory attributes. Deterministic.
pub fn issue_ek_certificate(
    root_key: &p256::SecretKey,
    root_der: &[u8],
    ek: &p256::PublicKey,
    profile: &EkCertificate<'_>,
) -> Result<Vec<u8>> {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, profile.common_name);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::KeyAgreement];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::Other(TCG_KP_EK_CERTIFICATE.to_vec())];
    params.custom_extensions = vec![
        rcgen::CustomExtension::from_oid_content(&[2, 5, 29, 17], ek_san(&profile.tpm)?),
        rcgen::CustomExtension::from_oid_content(&[2, 5, 29, 9], ek_subject_directory_attributes()?),
    ];
    issue_leaf(root_key, root_der, ek, params, profile.serial, profile.validity)
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

fn issue_leaf(
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

fn attribute_string(atv: &x509_cert::attr::AttributeTypeAndValue) -> Result<String> {
    atv.value
        .decode_as::<der::asn1::Utf8StringRef<'_>>()
        .map(|s| s.to_string())
        .or_else(|_| atv.value.decode_as::<der::asn1::PrintableStringRef<'_>>().map(|s| s.to_string()))
        .map_err(|e| X509Error::CertMalformed { reason: format!("name attribute: {e}") }.into())
}

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

/// What a verified certificate says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The subject's common name.
    pub common_name: String,
    /// URI SANs.
    pub uris: Vec<String>,
    /// DNS SANs.
    pub dns_names: Vec<String>,
    /// IP address SANs.
    pub ips: Vec<IpAddr>,
    /// Whether basic constraints say CA:true.
    pub is_ca: bool,
    /// Whether the extended key usage allows TLS client authentication.
    pub client_auth: bool,
    /// Whether the extended key usage allows TLS server authentication.
    pub server_auth: bool,
    /// The subject key's SPKI DER.
    pub spki_der: Vec<u8>,
    /// The validity window.
    pub validity: Validity,
    /// The serial number bytes.
    pub serial: Vec<u8>,
}

/// Checks that `leaf_der` was issued by the CA `ca_der` (signature, issuer
/// name, no critical extension outside [`UNDERSTOOD_EXTENSIONS`] in either)
/// and is valid at `now_ms`, and returns what it says.
pub fn verify_issued(leaf_der: &[u8], ca_der: &[u8], now_ms: i64) -> Result<Verified> {
    let malformed = |reason: String| Error::from(X509Error::CertMalformed { reason });
    let leaf = Certificate::from_der(leaf_der).map_err(|e| malformed(e.to_string()))?;
    let ca = Certificate::from_der(ca_der).map_err(|e| malformed(format!("CA: {e}")))?;
    if leaf.tbs_certificate().issuer() != ca.tbs_certificate().subject() {
        return Err(X509Error::CertChain { reason: "issuer name differs from the CA's subject".into() }.into());
    }
    if leaf.signature_algorithm().oid != ECDSA_WITH_SHA256 {
        return Err(
            X509Error::CertChain { reason: format!("signature algorithm {}", leaf.signature_algorithm().oid) }.into()
        );
    }
    let ca_spki = ca.tbs_certificate().subject_public_key_info().to_der().map_err(|e| malformed(e.to_string()))?;
    let ca_key = p256::PublicKey::from_public_key_der(&ca_spki).map_err(|e| malformed(format!("CA key: {e}")))?;
    let tbs = leaf.tbs_certificate().to_der().map_err(|e| malformed(e.to_string()))?;
    let sig = p256::ecdsa::Signature::from_der(leaf.signature().raw_bytes())
        .map_err(|_| X509Error::CertChain { reason: "signature is not DER ECDSA".into() })?;
    if !crate::keys::verify_ecdsa_p256(&ca_key, &tbs, &sig) {
        return Err(X509Error::CertChain { reason: "signature does not verify under the CA key".into() }.into());
    }
    for (cert, whose) in [(&leaf, "the certificate"), (&ca, "the CA")] {
        if let Some(oid) = unknown_critical_extension(cert) {
            return Err(
                X509Error::CertChain { reason: format!("{whose} has an unknown critical extension {oid}") }.into()
            );
        }
    }
    let issuer = describe(&ca)?;
    if !issuer.is_ca {
        return Err(X509Error::CertChain { reason: "the issuer is not a CA".into() }.into());
    }
    let verified = describe(&leaf)?;
    for v in [verified.validity, issuer.validity] {
        if now_ms < v.not_before_ms || now_ms > v.not_after_ms {
            return Err(X509Error::CertValidity {
                now_ms,
                not_before_ms: v.not_before_ms,
                not_after_ms: v.not_after_ms,
            }
            .into());
        }
    }
    Ok(verified)
}

/// The extensions a verifier here understands, and so the only ones a
/// certificate may mark critical (RFC 5280, 4.2): subject key identifier,
/// key usage, subject alternative name, basic constraints, authority key
/// identifier and extended key usage. `daemon/internal/pki` has the same list.
const UNDERSTOOD_EXTENSIONS: [der::asn1::ObjectIdentifier; 6] = [
    const_oid::db::rfc5280::ID_CE_SUBJECT_KEY_IDENTIFIER,
    const_oid::db::rfc5280::ID_CE_KEY_USAGE,
    const_oid::db::rfc5280::ID_CE_SUBJECT_ALT_NAME,
    const_oid::db::rfc5280::ID_CE_BASIC_CONSTRAINTS,
    const_oid::db::rfc5280::ID_CE_AUTHORITY_KEY_IDENTIFIER,
    const_oid::db::rfc5280::ID_CE_EXT_KEY_USAGE,
];

/// The first critical extension of `cert` outside [`UNDERSTOOD_EXTENSIONS`].
fn unknown_critical_extension(cert: &Certificate) -> Option<der::asn1::ObjectIdentifier> {
    cert.tbs_certificate()
        .extensions()
        .into_iter()
        .flatten()
        .find(|e| e.critical && !UNDERSTOOD_EXTENSIONS.contains(&e.extn_id))
        .map(|e| e.extn_id)
}

/// What a certificate is presented for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage<'a> {
    /// A CA certificate (self-signed roots are verified against themselves).
    Ca,
    /// A TLS client (a node certificate).
    Client,
    /// A TLS server, for `dns_name` when given.
    Server {
        /// The name the client dialled.
        dns_name: Option<&'a str>,
    },
}

/// [`verify_issued`], then the profile of `usage`: CA:true for a CA; for a
/// leaf, CA:false and the EKU (and the DNS name of a server). A certificate
/// presented for something it is not for is `cert-chain`, as in Go's verifier.
pub fn verify_for(leaf_der: &[u8], ca_der: &[u8], usage: Usage<'_>, now_ms: i64) -> Result<Verified> {
    let v = verify_issued(leaf_der, ca_der, now_ms)?;
    let fits = match usage {
        Usage::Ca => v.is_ca,
        Usage::Client => !v.is_ca && v.client_auth,
        Usage::Server { dns_name } => {
            !v.is_ca && v.server_auth && dns_name.is_none_or(|name| v.dns_names.iter().any(|n| n == name))
        }
    };
    if !fits {
        return Err(X509Error::CertChain { reason: format!("not a certificate for {usage:?}") }.into());
    }
    Ok(v)
}

/// What a certificate says, without verifying anything.
pub fn describe_der(der: &[u8]) -> Result<Verified> {
    let cert = Certificate::from_der(der).map_err(|e| X509Error::CertMalformed { reason: e.to_string() })?;
    describe(&cert)
}

fn describe(cert: &Certificate) -> Result<Verified> {
    let malformed = |reason: String| Error::from(X509Error::CertMalformed { reason });
    let tbs = cert.tbs_certificate();
    let mut common_name = String::new();
    for rdn in tbs.subject().iter_rdn() {
        for atv in rdn.iter() {
            if atv.oid == const_oid::db::rfc4519::CN {
                common_name = attribute_string(atv)?;
            }
        }
    }
    let (mut uris, mut dns_names, mut ips) = (Vec::new(), Vec::new(), Vec::new());
    if let Some((_, san)) = tbs.get_extension::<SubjectAltName>().map_err(|e| malformed(format!("SAN: {e}")))? {
        for name in san.0 {
            match name {
                GeneralName::UniformResourceIdentifier(uri) => uris.push(uri.to_string()),
                GeneralName::DnsName(dns) => dns_names.push(dns.to_string()),
                GeneralName::IpAddress(ip) => match ip.as_bytes().len() {
                    4 => ips.push(IpAddr::from(<[u8; 4]>::try_from(ip.as_bytes()).expect("4 bytes"))),
                    16 => ips.push(IpAddr::from(<[u8; 16]>::try_from(ip.as_bytes()).expect("16 bytes"))),
                    n => return Err(malformed(format!("an IP SAN of {n} bytes"))),
                },
                _ => {}
            }
        }
    }
    let is_ca = tbs
        .get_extension::<x509_cert::ext::pkix::BasicConstraints>()
        .map_err(|e| malformed(format!("basic constraints: {e}")))?
        .is_some_and(|(_, bc)| bc.ca);
    let eku = tbs
        .get_extension::<x509_cert::ext::pkix::ExtendedKeyUsage>()
        .map_err(|e| malformed(format!("extended key usage: {e}")))?
        .map(|(_, eku)| eku.0)
        .unwrap_or_default();
    let client_auth = eku.contains(&const_oid::db::rfc5280::ID_KP_CLIENT_AUTH);
    let server_auth = eku.contains(&const_oid::db::rfc5280::ID_KP_SERVER_AUTH);
    let validity = tbs.validity();
    let ms = |t: &x509_cert::time::Time| t.to_unix_duration().as_millis() as i64;
    Ok(Verified {
        common_name,
        uris,
        dns_names,
        ips,
        is_ca,
        client_auth,
        server_auth,
        spki_der: tbs.subject_public_key_info().to_der().map_err(|e| malformed(e.to_string()))?,
        validity: Validity { not_before_ms: ms(&validity.not_before), not_after_ms: ms(&validity.not_after) },
        serial: tbs.serial_number().as_bytes().to_vec(),
    })
}

#[cfg(test)]
mod tests {
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
