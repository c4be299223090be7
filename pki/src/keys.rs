//! Seeded key derivation (docs/formats.md, "Seeds and key derivation"), public keys and signers.
//!
//! `okm = HKDF-SHA256(ikm = seed, salt = "bc-fixtures/v1", info = label, L = 32)`.
//! Ed25519 uses `okm` as its secret seed; P-256 uses it as a big-endian scalar,
//! deriving again with `label#1`, `label#2`, … while it is 0 or ≥ n.

use hkdf::Hkdf;
use sha2::Sha256;
use spki::{DecodePublicKey, EncodePublicKey};

use crate::error::KeyError;
use crate::{Result, pin};

/// The HKDF salt of every fixture key.
pub const SALT: &[u8] = b"bc-fixtures/v1";

/// The 32 output bytes of HKDF-SHA256 for one label.
pub fn okm(seed: &str, label: &str) -> [u8; 32] {
    let out = hkdf_sha256(seed.as_bytes(), SALT, label.as_bytes(), 32).expect("32 bytes is a valid HKDF-SHA256 length");
    out.try_into().expect("32 bytes asked")
}

/// HKDF-SHA256 (RFC 5869): `len` bytes from `ikm`, `salt` and `info`, or
/// `None` above 255 × 32 bytes. An empty salt is the RFC's default salt.
pub fn hkdf_sha256(ikm: &[u8], salt: &[u8], info: &[u8], len: usize) -> Option<Vec<u8>> {
    let mut out = vec![0u8; len];
    Hkdf::<Sha256>::new(Some(salt), ikm).expand(info, &mut out).ok()?;
    Some(out)
}

/// Whether `sig`, the 64-byte r‖s of IEEE P1363 (the form of ES256), is
/// `key`'s ECDSA-SHA256 signature over `msg`.
pub fn verify_p1363(key: &p256::PublicKey, msg: &[u8], sig: &[u8]) -> bool {
    p256::ecdsa::Signature::from_slice(sig).is_ok_and(|s| verify_ecdsa_p256(key, msg, &s))
}

/// Whether `sig` is `key`'s ECDSA-SHA256 signature over `msg`: the one
/// place a P-256 signature is checked. The `p256` crate parses keys and
/// signatures (its range checks are the refusals the fixtures pin); the
/// arithmetic is ring's, about four times as fast here (36 µs against
/// 140 µs a verification), which a dev stack admitting a fleet feels.
pub fn verify_ecdsa_p256(key: &p256::PublicKey, msg: &[u8], sig: &p256::ecdsa::Signature) -> bool {
    let point = p256::elliptic_curve::sec1::ToSec1Point::to_sec1_point(key, false);
    ring::signature::UnparsedPublicKey::new(&ring::signature::ECDSA_P256_SHA256_FIXED, point.as_bytes())
        .verify(msg, &sig.to_bytes())
        .is_ok()
}

/// The Ed25519 key of `label`.
pub fn ed25519(seed: &str, label: &str) -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&okm(seed, label))
}

/// The P-256 key of `label` (re-derived with `#1`, `#2`, … out of range).
pub fn p256(seed: &str, label: &str) -> p256::SecretKey {
    let mut attempt = 0u32;
    loop {
        let info = if attempt == 0 { label.to_string() } else { format!("{label}#{attempt}") };
        if let Ok(key) = p256::SecretKey::from_slice(&okm(seed, &info)) {
            return key;
        }
        attempt += 1;
    }
}

/// A public key as the protocol exchanges it: Ed25519 (control-plane keys) or
/// ECDSA P-256 (node keys, token issuers, CAs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PublicKey {
    /// An Ed25519 key; signatures are the 64 raw bytes.
    Ed25519(ed25519_dalek::VerifyingKey),
    /// A P-256 key; DSSE signatures are ASN.1 DER ECDSA-SHA256.
    P256(p256::PublicKey),
}

impl PublicKey {
    /// Parses a SubjectPublicKeyInfo (Ed25519 or P-256).
    pub fn from_spki_der(der: &[u8]) -> Result<Self> {
        if let Ok(k) = ed25519_dalek::VerifyingKey::from_public_key_der(der) {
            return Ok(PublicKey::Ed25519(k));
        }
        p256::PublicKey::from_public_key_der(der)
            .map(PublicKey::P256)
            .map_err(|e| KeyError::BadPublicKey { reason: e.to_string() }.into())
    }

    /// The SubjectPublicKeyInfo DER.
    pub fn spki_der(&self) -> Vec<u8> {
        let doc = match self {
            PublicKey::Ed25519(k) => k.to_public_key_der(),
            PublicKey::P256(k) => k.to_public_key_der(),
        };
        doc.expect("a valid key always encodes").into_vec()
    }

    /// The key's pin, also its DSSE keyid and JOSE kid.
    pub fn pin(&self) -> String {
        pin::pin(&self.spki_der())
    }

    /// The key as a protocol `PublicKey` message.
    pub fn to_proto(&self) -> proto::PublicKey {
        proto::PublicKey { keyid: self.pin(), spki_der: self.spki_der() }
    }

    /// Parses a protocol `PublicKey`, refusing one whose keyid is not its pin.
    pub fn from_proto(msg: &proto::PublicKey) -> Result<Self> {
        let key = Self::from_spki_der(&msg.spki_der)?;
        if key.pin() != msg.keyid {
            return Err(KeyError::BadPublicKey { reason: format!("keyid {} is not the key's pin", msg.keyid) }.into());
        }
        Ok(key)
    }

    /// Whether `sig` is this key's signature over `msg`.
    pub fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        match self {
            PublicKey::Ed25519(k) => {
                ed25519_dalek::Signature::from_slice(sig).map(|s| k.verify_strict(msg, &s).is_ok()).unwrap_or(false)
            }
            PublicKey::P256(k) => p256::ecdsa::Signature::from_der(sig).is_ok_and(|s| verify_ecdsa_p256(k, msg, &s)),
        }
    }
}

/// Something that signs DSSE payloads: an Ed25519 or P-256 private key.
pub trait Signer {
    /// The public half.
    fn public_key(&self) -> PublicKey;
    /// A signature over `msg` (Ed25519 raw, or ASN.1 DER ECDSA-SHA256, RFC 6979).
    fn sign(&self, msg: &[u8]) -> Vec<u8>;
    /// The key id: the pin of the public half.
    fn keyid(&self) -> String {
        self.public_key().pin()
    }
}

impl Signer for ed25519_dalek::SigningKey {
    fn public_key(&self) -> PublicKey {
        PublicKey::Ed25519(self.verifying_key())
    }
    fn sign(&self, msg: &[u8]) -> Vec<u8> {
        ed25519_dalek::Signer::sign(self, msg).to_bytes().to_vec()
    }
}

impl Signer for p256::SecretKey {
    fn public_key(&self) -> PublicKey {
        PublicKey::P256(self.public_key())
    }
    fn sign(&self, msg: &[u8]) -> Vec<u8> {
        sign_p256(self, msg).to_der().as_bytes().to_vec()
    }
}

/// The RFC 6979 ECDSA-SHA256 signature of `secret` over `msg`: what
/// `p256::ecdsa::SigningKey` signs, without the public point it derives
/// first (a scalar multiplication, a third of the signature's cost).
pub fn sign_p256(secret: &p256::SecretKey, msg: &[u8]) -> p256::ecdsa::Signature {
    use sha2::Digest as _;
    let scalar = secret.to_nonzero_scalar();
    ecdsa::hazmat::sign_prehashed_rfc6979::<p256::NistP256, Sha256>(&scalar, &Sha256::digest(msg), &[]).0
}

/// A fresh P-256 key from the OS random number generator.
pub fn random_p256() -> p256::SecretKey {
    loop {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the OS random number generator is available");
        if let Ok(key) = p256::SecretKey::from_slice(&bytes) {
            return key;
        }
    }
}

/// A fresh Ed25519 key from the OS random number generator.
pub fn random_ed25519() -> ed25519_dalek::SigningKey {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random number generator is available");
    ed25519_dalek::SigningKey::from_bytes(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivation_is_stable_and_label_separated() {
        assert_eq!(okm("s", "a"), okm("s", "a"));
        assert_ne!(okm("s", "a"), okm("s", "b"));
        assert_ne!(okm("s", "a"), okm("t", "a"));
        assert_eq!(p256("s", "node-ca").to_bytes(), p256("s", "node-ca").to_bytes());
    }

    #[test]
    fn public_keys_round_trip_through_spki() {
        for key in [Signer::public_key(&ed25519("s", "x")), Signer::public_key(&p256("s", "y"))] {
            assert_eq!(PublicKey::from_spki_der(&key.spki_der()).unwrap(), key);
            assert_eq!(PublicKey::from_proto(&key.to_proto()).unwrap(), key);
        }
    }

    #[test]
    fn signatures_verify_only_over_their_message() {
        for key in [&ed25519("s", "x") as &dyn Signer, &p256("s", "y")] {
            let sig = key.sign(b"m");
            assert!(key.public_key().verify(b"m", &sig));
            assert!(!key.public_key().verify(b"n", &sig));
        }
    }

    #[test]
    fn p256_signatures_are_the_signing_keys_and_checked_like_the_p256_crates() {
        use p256::ecdsa::signature::{Signer as _, Verifier as _};
        let secret = p256("s", "y");
        let key = p256::ecdsa::SigningKey::from(&secret);
        let ours = sign_p256(&secret, b"m");
        let theirs: p256::ecdsa::Signature = key.sign(b"m");
        assert_eq!(ours, theirs);
        let public = secret.public_key();
        for msg in [&b"m"[..], b"n"] {
            assert_eq!(verify_ecdsa_p256(&public, msg, &ours), key.verifying_key().verify(msg, &ours).is_ok());
        }
    }
}
