//! The JWE profile (docs/formats.md, "The JWE profile"): compact JWE, `alg` ECDH-ES+A256KW,
//! `enc` A256GCM, P-256, `kid` the recipient's pin, no `apu`/`apv`.
//!
//! Hand-written (about 60 lines of crypto) because josekit always draws the
//! ephemeral key, CEK and IV itself, so it cannot write a reproducible
//! fixture. Here they are injected ([`SealRandomness`]): seeded for fixtures,
//! from the OS otherwise. josekit stays the independent oracle in the tests.
//!
//! Opening checks, in order (the Go side checks the same, in the same order):
//! five base64url parts and a JSON header (`jwe-malformed`), the profile
//! (`jwe-header`), the kid (`jwe-kid`), the ephemeral key (`jwe-epk`), the
//! part sizes (`jwe-malformed`), then unwrap and decryption (`jwe-decrypt`).
//!
//! Each primitive has its entry point, which opening goes through and the
//! Wycheproof vectors test (`pki/tests/wycheproof.rs`): [`agree`] (ECDH),
//! [`unwrap_key`] (AES key wrap) and [`decrypt_content`] (AES-GCM).

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::error::JweError;
use crate::{Error, Result, b64, keys, pin};

/// The key-management algorithm of the profile.
pub const ALG: &str = "ECDH-ES+A256KW";
/// The content-encryption algorithm of the profile.
pub const ENC: &str = "A256GCM";

/// The random inputs of one seal: the ephemeral key, the content key and the IV.
pub struct SealRandomness {
    /// The ephemeral P-256 key (its public half is the header's `epk`).
    pub ephemeral: p256::SecretKey,
    /// The content-encryption key.
    pub cek: [u8; 32],
    /// The AES-GCM IV.
    pub iv: [u8; 12],
}

impl SealRandomness {
    /// Fresh randomness from the OS (production).
    pub fn from_os() -> Self {
        let mut cek = [0u8; 32];
        let mut iv = [0u8; 12];
        getrandom::fill(&mut cek).expect("the OS random number generator is available");
        getrandom::fill(&mut iv).expect("the OS random number generator is available");
        SealRandomness { ephemeral: keys::random_p256(), cek, iv }
    }

    /// Randomness derived from a fixture seed and a label (test-only path).
    pub fn seeded(seed: &str, label: &str) -> Self {
        let cek = keys::okm(seed, &format!("{label}/cek"));
        let mut iv = [0u8; 12];
        iv.copy_from_slice(&keys::okm(seed, &format!("{label}/iv"))[..12]);
        SealRandomness { ephemeral: keys::p256(seed, &format!("{label}/epk")), cek, iv }
    }
}

/// Concat KDF (RFC 7518 §4.6.2) for ECDH-ES+A256KW with empty apu/apv.
fn concat_kdf(z: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(1u32.to_be_bytes());
    h.update(z);
    h.update((ALG.len() as u32).to_be_bytes());
    h.update(ALG.as_bytes());
    h.update(0u32.to_be_bytes()); // PartyUInfo
    h.update(0u32.to_be_bytes()); // PartyVInfo
    h.update(256u32.to_be_bytes()); // SuppPubInfo: keydatalen in bits
    h.finalize().into()
}

fn kek(secret: &p256::SecretKey, public: &p256::PublicKey) -> [u8; 32] {
    let shared = p256::ecdh::diffie_hellman(secret.to_nonzero_scalar(), public.as_affine());
    concat_kdf(shared.raw_secret_bytes())
}

/// ECDH on P-256 with the sender's ephemeral key `epk`, an uncompressed SEC1
/// point (`04 ‖ x ‖ y`, the header's `epk`): the shared secret Z, or
/// `jwe-epk` when `epk` is not such a point on the curve.
pub fn agree(recipient: &p256::SecretKey, epk: &[u8]) -> Result<[u8; 32]> {
    if epk.len() != 65 || epk[0] != 4 {
        return Err(JweError::Epk { reason: "not an uncompressed point".into() }.into());
    }
    let public =
        p256::PublicKey::from_sec1_bytes(epk).map_err(|_| JweError::Epk { reason: "not a point on P-256".into() })?;
    let shared = p256::ecdh::diffie_hellman(recipient.to_nonzero_scalar(), public.as_affine());
    Ok((*shared.raw_secret_bytes()).into())
}

/// AES-256 key unwrap (RFC 3394) of the 40-byte encrypted key into the
/// content key: `jwe-malformed` for other sizes, `jwe-decrypt` when the
/// integrity check fails.
pub fn unwrap_key(kek: &[u8], wrapped: &[u8]) -> Result<[u8; 32]> {
    let kek: [u8; 32] = kek.try_into().map_err(|_| JweError::Malformed { reason: "the KEK is not 32 bytes".into() })?;
    if wrapped.len() != 40 {
        return Err(JweError::Malformed { reason: "the encrypted key is not 40 bytes".into() }.into());
    }
    let mut cek = [0u8; 32];
    aes_kw::KwAes256::new(&kek.into()).unwrap_key(wrapped, &mut cek).map_err(|_| JweError::Decrypt)?;
    Ok(cek)
}

/// A256GCM decryption of the content: a 32-byte key, a 12-byte IV and a
/// 16-byte tag (`jwe-malformed` otherwise), `jwe-decrypt` when the tag does
/// not verify.
pub fn decrypt_content(cek: &[u8], iv: &[u8], ciphertext: &[u8], tag: &[u8], aad: &[u8]) -> Result<Vec<u8>> {
    let malformed = |reason: &str| Error::from(JweError::Malformed { reason: reason.to_string() });
    let cek: [u8; 32] = cek.try_into().map_err(|_| malformed("the content key is not 32 bytes"))?;
    let iv: [u8; 12] = iv.try_into().map_err(|_| malformed("the IV is not 12 bytes"))?;
    if tag.len() != 16 {
        return Err(malformed("the tag is not 16 bytes"));
    }
    let sealed = [ciphertext, tag].concat();
    Aes256Gcm::new(&cek.into())
        .decrypt(&Nonce::from(iv), Payload { msg: &sealed, aad })
        .map_err(|_| JweError::Decrypt.into())
}

/// The protected header, written as an exact string so the bytes are stable.
fn header(epk: &p256::PublicKey, kid: &str) -> String {
    let (x, y) = pin::xy(epk);
    format!(r#"{{"alg":"{ALG}","enc":"{ENC}","epk":{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}},"kid":"{kid}"}}"#)
}

/// Seals `plaintext` to `recipient` with `kid` (the recipient's pin).
pub fn seal(recipient: &p256::PublicKey, kid: &str, plaintext: &[u8], rnd: &SealRandomness) -> String {
    let protected = b64::url(header(&rnd.ephemeral.public_key(), kid).as_bytes());
    let kek = kek(&rnd.ephemeral, recipient);
    let mut wrapped = [0u8; 40];
    aes_kw::KwAes256::new(&kek.into()).wrap_key(&rnd.cek, &mut wrapped).expect("a 32-byte key wraps into 40 bytes");
    let sealed = Aes256Gcm::new(&rnd.cek.into())
        .encrypt(&Nonce::from(rnd.iv), Payload { msg: plaintext, aad: protected.as_bytes() })
        .expect("AES-GCM encryption does not fail for in-memory input");
    let (ciphertext, tag) = sealed.split_at(sealed.len() - 16);
    format!("{protected}.{}.{}.{}.{}", b64::url(&wrapped), b64::url(&rnd.iv), b64::url(ciphertext), b64::url(tag))
}

#[derive(Deserialize)]
struct Header {
    alg: Option<String>,
    enc: Option<String>,
    kid: Option<String>,
    epk: Option<Epk>,
    apu: Option<serde_json::Value>,
    apv: Option<serde_json::Value>,
    zip: Option<serde_json::Value>,
    crit: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Epk {
    kty: Option<String>,
    crv: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

/// Opens a compact JWE sealed to `recipient`, whose pin is `kid`.
pub fn open(recipient: &p256::SecretKey, kid: &str, compact: &str) -> Result<Vec<u8>> {
    let malformed = |reason: &str| Error::from(JweError::Malformed { reason: reason.to_string() });
    let parts: Vec<&str> = compact.split('.').collect();
    if parts.len() != 5 {
        return Err(malformed("not five parts"));
    }
    let raw: Vec<Vec<u8>> = parts
        .iter()
        .map(|p| b64::url_decode(p).ok_or_else(|| malformed("a part is not base64url")))
        .collect::<Result<_>>()?;
    let header: Header = crate::json::object(&raw[0]).map_err(|_| malformed("the header is not a JSON object"))?;

    let bad_header = |reason: &str| Error::from(JweError::Header { reason: reason.to_string() });
    if header.alg.as_deref() != Some(ALG) {
        return Err(bad_header("alg"));
    }
    if header.enc.as_deref() != Some(ENC) {
        return Err(bad_header("enc"));
    }
    for (name, present) in [
        ("apu", header.apu.is_some()),
        ("apv", header.apv.is_some()),
        ("zip", header.zip.is_some()),
        ("crit", header.crit.is_some()),
    ] {
        if present {
            return Err(bad_header(name));
        }
    }
    let found = header.kid.unwrap_or_default();
    if found != kid {
        return Err(JweError::Kid { expected: kid.to_string(), found }.into());
    }
    let epk = parse_epk(header.epk)?;

    let (wrapped, iv, ciphertext, tag) = (&raw[1], &raw[2], &raw[3], &raw[4]);
    if wrapped.len() != 40 || iv.len() != 12 || tag.len() != 16 {
        return Err(malformed("a part has the wrong size"));
    }
    let kek = concat_kdf(&agree(recipient, &epk)?);
    let cek = unwrap_key(&kek, wrapped)?;
    decrypt_content(&cek, iv, ciphertext, tag, parts[0].as_bytes())
}

/// The header's ephemeral key as an uncompressed point, checked on the curve.
fn parse_epk(epk: Option<Epk>) -> Result<Vec<u8>> {
    let bad = |reason: &str| Error::from(JweError::Epk { reason: reason.to_string() });
    let epk = epk.ok_or_else(|| bad("missing"))?;
    if epk.kty.as_deref() != Some("EC") || epk.crv.as_deref() != Some("P-256") {
        return Err(bad("not an EC P-256 key"));
    }
    let coord = |c: Option<String>| {
        c.and_then(|c| b64::url_decode(&c)).filter(|b| b.len() == 32).ok_or_else(|| bad("a coordinate is not 32 bytes"))
    };
    let (x, y) = (coord(epk.x)?, coord(epk.y)?);
    let mut sec1 = vec![4u8];
    sec1.extend_from_slice(&x);
    sec1.extend_from_slice(&y);
    p256::PublicKey::from_sec1_bytes(&sec1).map_err(|_| bad("not a point on P-256"))?;
    Ok(sec1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Signer as _;

    fn recipient() -> (p256::SecretKey, String) {
        let key = keys::p256("s", "join-encryption");
        let kid = key.keyid();
        (key, kid)
    }

    #[test]
    fn seal_is_deterministic_with_seeded_randomness_and_opens() {
        let (key, kid) = recipient();
        let a = seal(&key.public_key(), &kid, b"hello", &SealRandomness::seeded("s", "t"));
        let b = seal(&key.public_key(), &kid, b"hello", &SealRandomness::seeded("s", "t"));
        assert_eq!(a, b);
        assert_eq!(open(&key, &kid, &a).unwrap(), b"hello");
        let c = seal(&key.public_key(), &kid, b"hello", &SealRandomness::from_os());
        assert_ne!(a, c);
        assert_eq!(open(&key, &kid, &c).unwrap(), b"hello");
    }

    #[test]
    fn josekit_opens_ours_and_we_open_josekits() {
        use josekit::jwe::{ECDH_ES_A256KW, JweHeader};
        use p256::pkcs8::EncodePrivateKey;
        use spki::EncodePublicKey;
        let (key, kid) = recipient();
        let ours = seal(&key.public_key(), &kid, b"to josekit", &SealRandomness::seeded("s", "j"));
        let private_der = key.to_pkcs8_der().unwrap();
        let decrypter = ECDH_ES_A256KW.decrypter_from_der(private_der.as_bytes()).unwrap();
        let (plain, _) = josekit::jwe::deserialize_compact(&ours, &decrypter).unwrap();
        assert_eq!(plain, b"to josekit");

        let mut h = JweHeader::new();
        h.set_content_encryption("A256GCM");
        h.set_key_id(&kid);
        let public_der = key.public_key().to_public_key_der().unwrap();
        let encrypter = ECDH_ES_A256KW.encrypter_from_der(public_der.as_bytes()).unwrap();
        let theirs = josekit::jwe::serialize_compact(b"from josekit", &h, &encrypter).unwrap();
        assert_eq!(open(&key, &kid, &theirs).unwrap(), b"from josekit");
    }

    #[test]
    fn refusals_have_their_codes() {
        let (key, kid) = recipient();
        let jwe = seal(&key.public_key(), &kid, b"x", &SealRandomness::seeded("s", "t"));
        assert_eq!(open(&key, "sha256:other", &jwe).unwrap_err().code(), "jwe-kid");
        assert_eq!(open(&keys::p256("s", "other"), &kid, &jwe).unwrap_err().code(), "jwe-decrypt");
        assert_eq!(open(&key, &kid, "a.b.c").unwrap_err().code(), "jwe-malformed");
        let mut parts: Vec<String> = jwe.split('.').map(str::to_string).collect();
        let mut tag = b64::url_decode(&parts[4]).unwrap();
        tag[0] ^= 1;
        parts[4] = b64::url(&tag);
        assert_eq!(open(&key, &kid, &parts.join(".")).unwrap_err().code(), "jwe-decrypt");
    }
}
