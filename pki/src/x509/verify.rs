//! Checking certificates: [`verify_issued`] (the issuer's name and
//! signature, checked on the envelope before anything else of the
//! certificate is parsed, then no unknown critical extension and the
//! validity at a given time), [`verify_for`] (then the profile of a usage),
//! and [`describe_der`], what a certificate says without verifying it.

use std::net::IpAddr;

use der::{Decode, Encode};
use spki::DecodePublicKey;
use x509_cert::Certificate;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

use super::{Validity, attribute_string, signed};
use crate::error::X509Error;
use crate::{Error, Result};

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

/// Checks that `leaf_der` was issued by the CA `ca_der` and is valid at
/// `now_ms`, and returns what it says. In order (the same in
/// `daemon/internal/pki`): the leaf's envelope (`super::signed`:
/// `cert-malformed`), the CA parses (`cert-malformed`), the issuer is the
/// CA's subject byte for byte, the signature algorithm is ecdsa-with-SHA256
/// without parameters (`cert-chain`), the CA key is P-256
/// (`cert-malformed`), the CA's signature over the TBSCertificate as it came
/// (`cert-chain`); only then is the leaf parsed whole (`cert-malformed`), and
/// no critical extension outside [`UNDERSTOOD_EXTENSIONS`] in either, the
/// issuer a CA (`cert-chain`), what the leaf says (`cert-malformed`), and the
/// validity of both (`cert-validity`).
pub fn verify_issued(leaf_der: &[u8], ca_der: &[u8], now_ms: i64) -> Result<Verified> {
    let malformed = |reason: String| Error::from(X509Error::CertMalformed { reason });
    let chain = |reason: &str| Error::from(X509Error::CertChain { reason: reason.to_string() });
    let envelope = signed::certificate(leaf_der).map_err(|e| malformed(e.to_string()))?;
    let ca = Certificate::from_der(ca_der).map_err(|e| malformed(format!("CA: {e}")))?;
    let ca_subject = signed::certificate(ca_der)
        .ok()
        .and_then(|ca| ca.subject)
        .ok_or_else(|| malformed("CA: no subject in its envelope".into()))?;
    if envelope.issuer != ca_subject {
        return Err(chain("issuer name differs from the CA's subject"));
    }
    if envelope.signed.algorithm != signed::ECDSA_WITH_SHA256_ID {
        return Err(chain("the signature algorithm is not ecdsa-with-SHA256 without parameters"));
    }
    let ca_spki = ca.tbs_certificate().subject_public_key_info().to_der().map_err(|e| malformed(e.to_string()))?;
    let ca_key = p256::PublicKey::from_public_key_der(&ca_spki).map_err(|e| malformed(format!("CA key: {e}")))?;
    if !envelope.signed.verifies(&ca_key) {
        return Err(chain("signature does not verify under the CA key"));
    }
    let leaf = Certificate::from_der(leaf_der).map_err(|e| malformed(e.to_string()))?;
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
