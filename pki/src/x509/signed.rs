//! The envelope of a signed object, a certificate or a CSR: what is read of
//! it before its signature is checked (docs/formats.md, "Certificates").
//! Nothing more is parsed until the signature verified, so that the bytes
//! an unauthenticated peer controls meet this small reader alone, and Go's
//! twin (`daemon/internal/pki/signed.go`, the same rules line by line)
//! refuses exactly what it refuses: `crypto/x509` and x509-cert parse names,
//! keys and extensions with different strictness, which is not for a
//! forger to choose between.
//!
//! DER, TLV by TLV: a one-byte tag (the high-tag-number form is refused), a
//! definite length in its shortest form, of at most four octets, and the
//! contents within what is left.

/// One DER TLV: its tag, its contents and its whole encoding.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tlv<'a> {
    pub tag: u8,
    pub contents: &'a [u8],
    pub whole: &'a [u8],
}

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
/// `[0]`, constructed: a certificate's version, a CSR's attributes.
const CONTEXT_0: u8 = 0xa0;

/// The AlgorithmIdentifier of ecdsa-with-SHA256, byte for byte: the OID and
/// no parameters (RFC 5758, 3.2), the only signature algorithm here.
pub(super) const ECDSA_WITH_SHA256_ID: [u8; 12] =
    [0x30, 0x0a, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];

/// A P-256 SubjectPublicKeyInfo up to the point: id-ecPublicKey, the named
/// curve prime256v1, and a BIT STRING of an uncompressed point (0x04).
const P256_SPKI_PREFIX: [u8; 27] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a, 0x86, 0x48, 0xce,
    0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00, 0x04,
];

/// Reads one TLV off the front of `input`; returns it and what follows.
pub(super) fn read(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), &'static str> {
    let [tag, first, rest @ ..] = input else { return Err("truncated tag or length") };
    if tag & 0x1f == 0x1f {
        return Err("a high tag number");
    }
    let (len, rest) = match *first {
        n if n < 0x80 => (usize::from(n), rest),
        0x80 => return Err("an indefinite length"),
        n => {
            let n = usize::from(n & 0x7f);
            if n > 4 || rest.len() < n {
                return Err("a length of more than four octets, or truncated");
            }
            if rest[0] == 0 {
                return Err("a length with a leading zero octet");
            }
            let len = rest[..n].iter().fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
            if len < 0x80 {
                return Err("a long-form length below 128");
            }
            (len, &rest[n..])
        }
    };
    if rest.len() < len {
        return Err("contents longer than the input");
    }
    let header = input.len() - rest.len();
    Ok((Tlv { tag: *tag, contents: &rest[..len], whole: &input[..header + len] }, &rest[len..]))
}

/// The TLVs `contents` is made of, in order.
pub(super) fn elements(mut contents: &[u8]) -> Result<Vec<Tlv<'_>>, &'static str> {
    let mut out = Vec::new();
    while !contents.is_empty() {
        let (tlv, rest) = read(contents)?;
        out.push(tlv);
        contents = rest;
    }
    Ok(out)
}

/// `SEQUENCE { body, AlgorithmIdentifier, BIT STRING }` and nothing after:
/// what was signed, how, and the signature.
#[derive(Debug)]
pub(super) struct Signed<'a> {
    /// The signed body (TBSCertificate, CertificationRequestInfo), whole.
    pub body: Tlv<'a>,
    /// The body's elements.
    pub fields: Vec<Tlv<'a>>,
    /// The AlgorithmIdentifier, whole.
    pub algorithm: &'a [u8],
    /// The BIT STRING's contents (its unused-bits octet first).
    pub signature: &'a [u8],
}

impl Signed<'_> {
    /// Whether the signature is `key`'s ECDSA-SHA256 signature over the body:
    /// a BIT STRING of whole octets (no unused bits) holding a DER signature.
    pub fn verifies(&self, key: &p256::PublicKey) -> bool {
        match self.signature.split_first() {
            Some((0, sig)) => crate::PublicKey::P256(*key).verify(self.body.whole, sig),
            _ => false,
        }
    }
}

fn signed(der: &[u8]) -> Result<Signed<'_>, &'static str> {
    let (outer, rest) = read(der)?;
    if !rest.is_empty() {
        return Err("data after the signed object");
    }
    let parts = elements(outer.contents)?;
    match (outer.tag, parts.as_slice()) {
        (SEQUENCE, [body, algorithm, signature])
            if body.tag == SEQUENCE && algorithm.tag == SEQUENCE && signature.tag == BIT_STRING =>
        {
            Ok(Signed {
                body: *body,
                fields: elements(body.contents)?,
                algorithm: algorithm.whole,
                signature: signature.contents,
            })
        }
        _ => Err("not a SEQUENCE of a SEQUENCE, an AlgorithmIdentifier and a BIT STRING"),
    }
}

/// A certificate's envelope: the TBSCertificate begins with an optional
/// `[0]` version, a serial number, a signature algorithm that is the
/// certificate's own, byte for byte (RFC 5280, 4.1.1.2), and the issuer;
/// the rest of it waits for the signature.
pub(super) struct CertificateEnvelope<'a> {
    pub signed: Signed<'a>,
    /// The issuer Name, whole.
    pub issuer: &'a [u8],
    /// The subject Name, whole, when the TBSCertificate goes that far.
    pub subject: Option<&'a [u8]>,
}

pub(super) fn certificate(der: &[u8]) -> Result<CertificateEnvelope<'_>, &'static str> {
    let signed = signed(der)?;
    let skip = usize::from(signed.fields.first().is_some_and(|f| f.tag == CONTEXT_0));
    let (issuer, subject) = match &signed.fields[skip..] {
        [serial, algorithm, issuer, rest @ ..]
            if serial.tag == INTEGER && algorithm.tag == SEQUENCE && issuer.tag == SEQUENCE =>
        {
            if algorithm.whole != signed.algorithm {
                return Err("the TBSCertificate's signature algorithm is not the certificate's");
            }
            (issuer.whole, rest.get(1).filter(|s| s.tag == SEQUENCE).map(|s| s.whole))
        }
        _ => return Err("the TBSCertificate does not begin with a serial number, a signature algorithm and an issuer"),
    };
    Ok(CertificateEnvelope { signed, issuer, subject })
}

/// A CSR's envelope: the CertificationRequestInfo is exactly version 0, a
/// subject SEQUENCE, a SubjectPublicKeyInfo and the `[0]` attributes
/// (RFC 2986, 4.1). Subject and attributes are read as TLVs only: nothing
/// here uses them (a node certificate's names come from the join).
pub(super) struct CsrEnvelope<'a> {
    pub signed: Signed<'a>,
    /// The SubjectPublicKeyInfo, whole.
    pub spki: &'a [u8],
}

pub(super) fn csr(der: &[u8]) -> Result<CsrEnvelope<'_>, &'static str> {
    let signed = signed(der)?;
    let spki = match signed.fields.as_slice() {
        [version, subject, spki, attributes]
            if version.whole == [INTEGER, 1, 0]
                && subject.tag == SEQUENCE
                && spki.tag == SEQUENCE
                && attributes.tag == CONTEXT_0 =>
        {
            spki.whole
        }
        _ => return Err("the CertificationRequestInfo is not version 0, a subject, a key and attributes"),
    };
    Ok(CsrEnvelope { signed, spki })
}

/// The P-256 key of an SPKI that is exactly id-ecPublicKey on prime256v1
/// with an uncompressed point on the curve: the one form both languages
/// encode, so the key re-encodes to the bytes it came from.
pub(super) fn p256_spki(spki: &[u8]) -> Result<p256::PublicKey, &'static str> {
    if spki.len() != P256_SPKI_PREFIX.len() + 64 || spki[..P256_SPKI_PREFIX.len()] != P256_SPKI_PREFIX {
        return Err("the key is not an uncompressed P-256 point");
    }
    p256::PublicKey::from_sec1_bytes(&spki[P256_SPKI_PREFIX.len() - 1..]).map_err(|_| "the point is not on P-256")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tlvs_are_read_as_der() {
        let ok: &[&[u8]] = &[&[0x04, 0x00], &[0x04, 0x01, 0xff], &[0x30, 0x81, 0x80]];
        for input in ok {
            let mut padded = input.to_vec();
            padded.resize(input.len() + if input[1] == 0x81 { 0x80 } else { 0 }, 0);
            let (tlv, rest) = read(&padded).unwrap();
            assert!(rest.is_empty() && tlv.whole == padded.as_slice(), "{input:x?}");
        }
        let refused: &[&[u8]] = &[
            &[],
            &[0x04],
            &[0x1f, 0x00],                // high tag number
            &[0x30, 0x80, 0x00, 0x00],    // indefinite
            &[0x04, 0x81, 0x7f],          // long form below 128
            &[0x04, 0x82, 0x00, 0x80],    // a leading zero octet
            &[0x04, 0x85, 1, 0, 0, 0, 0], // five length octets
            &[0x04, 0x02, 0x00],          // truncated contents
        ];
        for input in refused {
            assert!(read(input).is_err(), "{input:x?}");
        }
        assert_eq!(read(&[0x04, 0x81, 0x80]).unwrap_err(), "contents longer than the input");
    }

    #[test]
    fn the_p256_spki_is_one_exact_form() {
        let key = crate::keys::p256("s", "k").public_key();
        let der = spki::EncodePublicKey::to_public_key_der(&key).unwrap();
        assert_eq!(p256_spki(der.as_bytes()).unwrap(), key);
        let compressed = p256::elliptic_curve::sec1::ToSec1Point::to_sec1_point(&key, true);
        let mut short = P256_SPKI_PREFIX[..24].to_vec();
        short.extend_from_slice(&[0x22, 0x00]);
        short.extend_from_slice(compressed.as_bytes());
        short[1] = (short.len() - 2) as u8;
        assert!(p256_spki(&short).is_err(), "a compressed point");
        let mut off = der.as_bytes().to_vec();
        off[90] ^= 1;
        assert_eq!(p256_spki(&off).unwrap_err(), "the point is not on P-256");
    }
}
