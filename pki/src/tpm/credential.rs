//! TPM2_MakeCredential in software for an ECC P-256 endorsement key (TPM 2.0
//! Part 1, §24 and Annex C.6), and its inverse for tests.
//!
//! An ephemeral P-256 key agrees a point `Z` with the EK; then
//! `seed = KDFe(SHA-256, Z.x, "IDENTITY", ephemeral.x, EK.x, 256)`,
//! `symKey = KDFa(SHA-256, seed, "STORAGE", name(AK), "", 128)`,
//! `hmacKey = KDFa(SHA-256, seed, "INTEGRITY", "", "", 256)`,
//! `encIdentity = AES-128-CFB(symKey, IV = 0, TPM2B(secret))` and
//! `integrity = HMAC-SHA256(hmacKey, encIdentity || name(AK))`.
//! The TPM activates the credential only for an object with that name
//! loaded beside that EK, so the returned secret proves both.
//!
//! The wire forms are the buffers of go-tpm's `TPM2BIDObject` and
//! `TPM2BEncryptedSecret` (size prefixes excluded): the credential blob is
//! `TPM2B(integrity) || encIdentity`, the encrypted secret is the
//! ephemeral point as a `TPMS_ECC_POINT`.

use aes::cipher::{BlockCipherEncrypt, KeyInit};
use hmac::{Hmac, Mac};
use p256::elliptic_curve::sec1::ToSec1Point;
use sha2::{Digest, Sha256};

use super::public::point;
use super::wire::{Reader, Writer};

/// The credential as the TPM takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// `TPM2B_ID_OBJECT` contents: `TPM2B(integrity HMAC) || encIdentity`.
    pub credential_blob: Vec<u8>,
    /// `TPM2B_ENCRYPTED_SECRET` contents: the ephemeral `TPMS_ECC_POINT`.
    pub encrypted_secret: Vec<u8>,
}

/// KDFa (SP 800-108 counter mode with HMAC-SHA256, TPM 2.0 Part 1, §11.4.10.2).
pub fn kdfa(key: &[u8], label: &str, context_u: &[u8], context_v: &[u8], bits: u32) -> Vec<u8> {
    let bytes = bits.div_ceil(8) as usize;
    let mut out = Vec::with_capacity(bytes + 32);
    let mut counter = 1u32;
    while out.len() < bytes {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
        mac.update(&counter.to_be_bytes());
        mac.update(label.as_bytes());
        mac.update(&[0]);
        mac.update(context_u);
        mac.update(context_v);
        mac.update(&bits.to_be_bytes());
        out.extend_from_slice(&mac.finalize().into_bytes());
        counter += 1;
    }
    out.truncate(bytes);
    out
}

/// KDFe (SP 800-56A concatenation KDF with SHA-256, TPM 2.0 Part 1, §11.4.10.3).
pub fn kdfe(z: &[u8], label: &str, party_u: &[u8], party_v: &[u8], bits: u32) -> Vec<u8> {
    let bytes = bits.div_ceil(8) as usize;
    let mut out = Vec::with_capacity(bytes + 32);
    let mut counter = 1u32;
    while out.len() < bytes {
        let mut h = Sha256::new();
        h.update(counter.to_be_bytes());
        h.update(z);
        h.update(label.as_bytes());
        h.update([0]);
        h.update(party_u);
        h.update(party_v);
        out.extend_from_slice(&h.finalize());
        counter += 1;
    }
    out.truncate(bytes);
    out
}

/// AES-128 in CFB-128 mode with a zero IV, in place (encrypt or decrypt).
fn aes128_cfb(key: &[u8], data: &mut [u8], encrypt: bool) {
    let cipher = aes::Aes128::new_from_slice(key).expect("KDFa gave a 16-byte key");
    let mut feedback = [0u8; 16];
    for chunk in data.chunks_mut(16) {
        let mut block = aes::Block::from(feedback);
        cipher.encrypt_block(&mut block);
        let ciphertext: Vec<u8> = if encrypt {
            chunk.iter_mut().zip(block.iter()).for_each(|(c, k)| *c ^= k);
            chunk.to_vec()
        } else {
            let c = chunk.to_vec();
            chunk.iter_mut().zip(block.iter()).for_each(|(p, k)| *p ^= k);
            c
        };
        feedback[..ciphertext.len()].copy_from_slice(&ciphertext);
    }
}

fn x_coordinate(key: &p256::PublicKey) -> Vec<u8> {
    key.to_sec1_point(false).x().expect("an uncompressed point has x").to_vec()
}

fn hmac(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().to_vec()
}

/// The seed and the keys derived from it for one (EK, ephemeral) agreement.
fn keys(z_x: &[u8], ephemeral_x: &[u8], ek_x: &[u8], object_name: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let seed = kdfe(z_x, "IDENTITY", ephemeral_x, ek_x, 256);
    (kdfa(&seed, "STORAGE", object_name, &[], 128), kdfa(&seed, "INTEGRITY", &[], &[], 256))
}

/// MakeCredential: protects `secret` (at most 32 bytes) for the object named
/// `object_name`, to the ECC P-256 EK `ek`, with the ephemeral key given.
///
/// # Panics
///
/// If `secret` is longer than 32 bytes (a SHA-256 digest), which no TPM
/// would accept; the attestor always passes 32.
pub fn make_credential(
    ek: &p256::PublicKey,
    object_name: &[u8],
    secret: &[u8],
    ephemeral: &p256::SecretKey,
) -> Credential {
    assert!(secret.len() <= 32, "a credential secret is at most one SHA-256 digest long");
    let shared = p256::ecdh::diffie_hellman(ephemeral.to_nonzero_scalar(), ek.as_affine());
    let ephemeral_public = ephemeral.public_key();
    let (sym_key, hmac_key) =
        keys(shared.raw_secret_bytes(), &x_coordinate(&ephemeral_public), &x_coordinate(ek), object_name);
    let mut enc_identity = Writer::default().tpm2b(secret).finish();
    aes128_cfb(&sym_key, &mut enc_identity, true);
    let integrity = hmac(&hmac_key, &[&enc_identity, object_name]);
    let p = ephemeral_public.to_sec1_point(false);
    Credential {
        credential_blob: Writer::default().tpm2b(&integrity).bytes(&enc_identity).finish(),
        encrypted_secret: Writer::default()
            .tpm2b(p.x().expect("an uncompressed point has x"))
            .tpm2b(p.y().expect("an uncompressed point has y"))
            .finish(),
    }
}

/// ActivateCredential in software, with the EK's private key: the secret,
/// or `None` if the credential is not for `object_name` under this EK.
/// The inverse of [`make_credential`], for tests and fixture negatives.
pub fn activate_credential(ek: &p256::SecretKey, object_name: &[u8], credential: &Credential) -> Option<Vec<u8>> {
    let mut r = Reader::new(&credential.encrypted_secret, "TPMS_ECC_POINT");
    let ephemeral = point(&r.tpm2b().ok()?, &r.tpm2b().ok()?)?;
    r.finish().ok()?;
    let shared = p256::ecdh::diffie_hellman(ek.to_nonzero_scalar(), ephemeral.as_affine());
    let (sym_key, hmac_key) =
        keys(shared.raw_secret_bytes(), &x_coordinate(&ephemeral), &x_coordinate(&ek.public_key()), object_name);
    let mut r = Reader::new(&credential.credential_blob, "TPM2B_ID_OBJECT");
    let integrity = r.tpm2b().ok()?;
    let mut enc_identity = r.take(credential.credential_blob.len() - 2 - integrity.len()).ok()?.to_vec();
    let expected = hmac(&hmac_key, &[&enc_identity, object_name]);
    if !bool::from(subtle::ConstantTimeEq::ct_eq(expected.as_slice(), integrity.as_slice())) {
        return None;
    }
    aes128_cfb(&sym_key, &mut enc_identity, false);
    let mut r = Reader::new(&enc_identity, "TPM2B_DIGEST");
    let secret = r.tpm2b().ok()?;
    r.finish().ok()?;
    Some(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kdfa_matches_its_definition_for_one_block() {
        let key = b"key";
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
        mac.update(&[0, 0, 0, 1]);
        mac.update(b"STORAGE\0ctx");
        mac.update(&128u32.to_be_bytes());
        assert_eq!(kdfa(key, "STORAGE", b"ctx", b"", 128), mac.finalize().into_bytes()[..16].to_vec());
        assert_eq!(kdfa(key, "X", b"", b"", 512).len(), 64);
    }

    #[test]
    fn a_credential_activates_only_for_its_name_and_ek() {
        let ek = crate::keys::p256("s", "ek");
        let eph = crate::keys::p256("s", "eph");
        let name = crate::tpm::public::name_sha256(b"ak public");
        let cred = make_credential(&ek.public_key(), &name, &[5; 32], &eph);
        assert_eq!(cred.credential_blob.len(), 2 + 32 + 2 + 32);
        assert_eq!(activate_credential(&ek, &name, &cred), Some(vec![5; 32]));
        let other = crate::tpm::public::name_sha256(b"another");
        assert_eq!(activate_credential(&ek, &other, &cred), None);
        assert_eq!(activate_credential(&crate::keys::p256("s", "ek2"), &name, &cred), None);
    }

    #[test]
    fn cfb_round_trips_partial_blocks() {
        let mut data = b"seventeen bytes!!".to_vec();
        aes128_cfb(&[1; 16], &mut data, true);
        assert_ne!(&data, b"seventeen bytes!!");
        aes128_cfb(&[1; 16], &mut data, false);
        assert_eq!(&data, b"seventeen bytes!!");
    }
}
