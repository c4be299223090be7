//! EK certificates (TCG EK Credential Profile) from the test manufacturer's
//! root, and the DER pieces assembled by hand for them: [`tlv`], OIDs and
//! UTF8Strings, the SAN naming the TPM and the subject directory attributes.

use der::Encode;
use rcgen::{CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyUsagePurpose};

use super::Validity;
use super::issue::issue_leaf;
use crate::Result;
use crate::error::X509Error;

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
