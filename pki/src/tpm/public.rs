//! `TPMT_PUBLIC`: the public area of a TPM object (TPM 2.0 Part 2, §12.2.4),
//! parsed, re-encoded byte for byte, and named.
//!
//! Objects are exchanged as the bare `TPMT_PUBLIC` (no `TPM2B_PUBLIC` size
//! prefix), the bytes the object's name is computed over:
//! `name = nameAlg (u16) || H_nameAlg(TPMT_PUBLIC)`. Only SHA-256 names are
//! computed. ECC, RSA, keyed-hash and symmetric objects parse; only ECC
//! P-256 keys are turned into [`p256::PublicKey`]s.

use sha2::{Digest, Sha256};

use super::wire::{Reader, Writer};
use super::{alg, attr};
use crate::Result;

/// A `TPMT_SYM_DEF_OBJECT`: the symmetric algorithm of a storage key. The
/// algorithms taken are the ones go-tpm (bcd's side) decodes: `TPM_ALG_NULL`,
/// `TPM_ALG_AES` (key bits and mode) and `TPM_ALG_XOR` (its hash, no mode);
/// any other is malformed on both sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymDef {
    /// `TPM_ALG_AES`, `TPM_ALG_XOR` or `TPM_ALG_NULL`.
    pub algorithm: u16,
    /// Key size in bits for AES, the hash for XOR (absent for `TPM_ALG_NULL`).
    pub key_bits: u16,
    /// The block mode for AES, such as `TPM_ALG_CFB` (0, absent on the wire,
    /// otherwise).
    pub mode: u16,
}

impl SymDef {
    /// No symmetric algorithm.
    pub const NULL: SymDef = SymDef { algorithm: alg::NULL, key_bits: 0, mode: 0 };
    /// AES-128-CFB, the symmetric algorithm of the TCG default EKs.
    pub const AES_128_CFB: SymDef = SymDef { algorithm: alg::AES, key_bits: 128, mode: alg::CFB };

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        match r.u16()? {
            alg::NULL => Ok(SymDef::NULL),
            algorithm @ alg::AES => Ok(SymDef { algorithm, key_bits: r.u16()?, mode: r.u16()? }),
            algorithm @ alg::XOR => Ok(SymDef { algorithm, key_bits: r.u16()?, mode: 0 }),
            other => Err(r.malformed(format!("symmetric algorithm {other:#06x}"))),
        }
    }

    fn write(&self, w: &mut Writer) {
        w.u16(self.algorithm);
        match self.algorithm {
            alg::NULL => {}
            alg::XOR => {
                w.u16(self.key_bits);
            }
            _ => {
                w.u16(self.key_bits).u16(self.mode);
            }
        }
    }
}

/// A signing, key-exchange or KDF scheme: the algorithm and, unless it is
/// `TPM_ALG_NULL`, its hash (and the ECDAA count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scheme {
    /// `TPM_ALG_ECDSA`, `TPM_ALG_RSASSA`, …, or `TPM_ALG_NULL`.
    pub scheme: u16,
    /// The hash algorithm (0 for `TPM_ALG_NULL`).
    pub hash: u16,
    /// The ECDAA commit count (0 otherwise).
    pub count: u16,
}

impl Scheme {
    /// No scheme.
    pub const NULL: Scheme = Scheme { scheme: alg::NULL, hash: 0, count: 0 };
    /// ECDSA with SHA-256.
    pub const ECDSA_SHA256: Scheme = Scheme { scheme: alg::ECDSA, hash: alg::SHA256, count: 0 };

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let scheme = r.u16()?;
        if scheme == alg::NULL {
            return Ok(Scheme::NULL);
        }
        let hash = r.u16()?;
        let count = if scheme == alg::ECDAA { r.u16()? } else { 0 };
        Ok(Scheme { scheme, hash, count })
    }

    fn write(&self, w: &mut Writer) {
        w.u16(self.scheme);
        if self.scheme != alg::NULL {
            w.u16(self.hash);
            if self.scheme == alg::ECDAA {
                w.u16(self.count);
            }
        }
    }
}

/// The type-specific parameters and unique field of a public area.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    /// `TPM_ALG_ECC`: `TPMS_ECC_PARMS` and a `TPMS_ECC_POINT`.
    Ecc {
        /// The symmetric algorithm (storage keys) or NULL.
        symmetric: SymDef,
        /// The signing or key-exchange scheme.
        scheme: Scheme,
        /// `TPM_ECC_NIST_P256`, ….
        curve: u16,
        /// The KDF scheme.
        kdf: Scheme,
        /// The point's x coordinate.
        x: Vec<u8>,
        /// The point's y coordinate.
        y: Vec<u8>,
    },
    /// `TPM_ALG_RSA`: `TPMS_RSA_PARMS` and the modulus.
    Rsa {
        /// The symmetric algorithm (storage keys) or NULL.
        symmetric: SymDef,
        /// The signing or decryption scheme.
        scheme: Scheme,
        /// The modulus size in bits.
        key_bits: u16,
        /// The public exponent (0 means 65537).
        exponent: u32,
        /// The modulus.
        modulus: Vec<u8>,
    },
    /// `TPM_ALG_KEYEDHASH`: an HMAC key or sealed data.
    KeyedHash {
        /// The scheme (`TPM_ALG_HMAC`, `TPM_ALG_XOR` or NULL).
        scheme: u16,
        /// The scheme's hash (0 for NULL).
        hash: u16,
        /// The XOR scheme's KDF (0 otherwise).
        kdf: u16,
        /// The unique digest.
        unique: Vec<u8>,
    },
    /// `TPM_ALG_SYMCIPHER`: a symmetric key.
    SymCipher {
        /// The symmetric algorithm.
        symmetric: SymDef,
        /// The unique digest.
        unique: Vec<u8>,
    },
}

/// A parsed `TPMT_PUBLIC`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Public {
    /// The name algorithm (`TPM_ALG_SHA256`, …).
    pub name_alg: u16,
    /// `TPMA_OBJECT` bits (see [`attr`]).
    pub attributes: u32,
    /// The authorization policy digest (may be empty).
    pub auth_policy: Vec<u8>,
    /// The type-specific part.
    pub key: Key,
}

impl Public {
    /// Parses a bare `TPMT_PUBLIC`, refusing trailing bytes (`tpm-malformed`).
    pub fn parse(bytes: &[u8], what: &'static str) -> Result<Self> {
        let mut r = Reader::new(bytes, what);
        let kind = r.u16()?;
        let name_alg = r.u16()?;
        let attributes = r.u32()?;
        let auth_policy = r.tpm2b()?;
        let key = match kind {
            alg::ECC => {
                let symmetric = SymDef::read(&mut r)?;
                let scheme = Scheme::read(&mut r)?;
                let curve = r.u16()?;
                let kdf = Scheme::read(&mut r)?;
                Key::Ecc { symmetric, scheme, curve, kdf, x: r.tpm2b()?, y: r.tpm2b()? }
            }
            alg::RSA => {
                let symmetric = SymDef::read(&mut r)?;
                let scheme = Scheme::read(&mut r)?;
                Key::Rsa { symmetric, scheme, key_bits: r.u16()?, exponent: r.u32()?, modulus: r.tpm2b()? }
            }
            alg::KEYEDHASH => {
                let scheme = r.u16()?;
                let (hash, kdf) = match scheme {
                    alg::NULL => (0, 0),
                    alg::XOR => (r.u16()?, r.u16()?),
                    _ => (r.u16()?, 0),
                };
                Key::KeyedHash { scheme, hash, kdf, unique: r.tpm2b()? }
            }
            alg::SYMCIPHER => Key::SymCipher { symmetric: SymDef::read(&mut r)?, unique: r.tpm2b()? },
            other => return Err(r.malformed(format!("object type {other:#06x}"))),
        };
        r.finish()?;
        Ok(Public { name_alg, attributes, auth_policy, key })
    }

    /// The `TPM_ALG_*` type of the object.
    pub fn kind(&self) -> u16 {
        match self.key {
            Key::Ecc { .. } => alg::ECC,
            Key::Rsa { .. } => alg::RSA,
            Key::KeyedHash { .. } => alg::KEYEDHASH,
            Key::SymCipher { .. } => alg::SYMCIPHER,
        }
    }

    /// The bare `TPMT_PUBLIC` encoding; `Public::parse(p.to_bytes())` is `p`.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u16(self.kind()).u16(self.name_alg).u32(self.attributes).tpm2b(&self.auth_policy);
        match &self.key {
            Key::Ecc { symmetric, scheme, curve, kdf, x, y } => {
                symmetric.write(&mut w);
                scheme.write(&mut w);
                w.u16(*curve);
                kdf.write(&mut w);
                w.tpm2b(x).tpm2b(y);
            }
            Key::Rsa { symmetric, scheme, key_bits, exponent, modulus } => {
                symmetric.write(&mut w);
                scheme.write(&mut w);
                w.u16(*key_bits).u32(*exponent).tpm2b(modulus);
            }
            Key::KeyedHash { scheme, hash, kdf, unique } => {
                w.u16(*scheme);
                match *scheme {
                    alg::NULL => {}
                    alg::XOR => {
                        w.u16(*hash).u16(*kdf);
                    }
                    _ => {
                        w.u16(*hash);
                    }
                }
                w.tpm2b(unique);
            }
            Key::SymCipher { symmetric, unique } => {
                symmetric.write(&mut w);
                w.tpm2b(unique);
            }
        }
        w.finish()
    }

    /// Whether every bit of `bits` is set in the attributes.
    pub fn has(&self, bits: u32) -> bool {
        self.attributes & bits == bits
    }

    /// The object's name, if its name algorithm is SHA-256.
    pub fn name(&self) -> Option<Vec<u8>> {
        (self.name_alg == alg::SHA256).then(|| name_sha256(&self.to_bytes()))
    }

    /// The ECC P-256 public key of an ECC P-256 object whose point is on the curve.
    pub fn p256(&self) -> Option<p256::PublicKey> {
        match &self.key {
            Key::Ecc { curve, x, y, .. } if *curve == super::ECC_NIST_P256 => point(x, y),
            _ => None,
        }
    }

    /// An ECC P-256 public area for `key` with the given attributes and
    /// scheme (name algorithm SHA-256, empty policy, no KDF): what a TPM
    /// reports for such a key. Used to build fixtures and tests.
    pub fn ecc_p256(key: &p256::PublicKey, attributes: u32, symmetric: SymDef, scheme: Scheme) -> Self {
        use p256::elliptic_curve::sec1::ToSec1Point;
        let p = key.to_sec1_point(false);
        Public {
            name_alg: alg::SHA256,
            attributes,
            auth_policy: Vec::new(),
            key: Key::Ecc {
                symmetric,
                scheme,
                curve: super::ECC_NIST_P256,
                kdf: Scheme::NULL,
                x: p.x().expect("an uncompressed point has x").to_vec(),
                y: p.y().expect("an uncompressed point has y").to_vec(),
            },
        }
    }

    /// The public area of a TCG default ECC P-256 EK (restricted decryption,
    /// AES-128-CFB, the admin policy) for `key`, as a software "TPM" in tests
    /// reports it (the policy digest stands in: tests never satisfy it).
    pub fn ek_p256(key: &p256::PublicKey) -> Self {
        let mut p = Public::ecc_p256(key, 0, SymDef::AES_128_CFB, Scheme::NULL);
        p.attributes = attr::FIXED_TPM
            | attr::FIXED_PARENT
            | attr::SENSITIVE_DATA_ORIGIN
            | attr::ADMIN_WITH_POLICY
            | attr::RESTRICTED
            | attr::DECRYPT;
        p.auth_policy = vec![0x83; 32];
        p
    }

    /// The public area of an AK as bcd makes it, for `key`.
    pub fn ak_p256(key: &p256::PublicKey) -> Self {
        Public::ecc_p256(key, Public::AK_ATTRIBUTES, SymDef::NULL, Scheme::ECDSA_SHA256)
    }

    /// The public area of a TPM-resident node key as bcd makes it, for `key`.
    pub fn node_key_p256(key: &p256::PublicKey) -> Self {
        Public::ecc_p256(key, Public::NODE_KEY_ATTRIBUTES, SymDef::NULL, Scheme::ECDSA_SHA256)
    }

    /// The attributes of a restricted ECDSA attestation key as bcd makes it.
    pub const AK_ATTRIBUTES: u32 = attr::FIXED_TPM
        | attr::FIXED_PARENT
        | attr::SENSITIVE_DATA_ORIGIN
        | attr::USER_WITH_AUTH
        | attr::NO_DA
        | attr::RESTRICTED
        | attr::SIGN;

    /// The attributes of a TPM-resident node key as bcd makes it.
    pub const NODE_KEY_ATTRIBUTES: u32 = attr::FIXED_TPM
        | attr::FIXED_PARENT
        | attr::SENSITIVE_DATA_ORIGIN
        | attr::USER_WITH_AUTH
        | attr::NO_DA
        | attr::SIGN;
}

/// `TPM_ALG_SHA256 || SHA-256(bytes)`: the name of a public area with a
/// SHA-256 name algorithm.
pub fn name_sha256(public_bytes: &[u8]) -> Vec<u8> {
    let mut name = alg::SHA256.to_be_bytes().to_vec();
    name.extend_from_slice(&Sha256::digest(public_bytes));
    name
}

/// A P-256 point from its coordinates (left-padded to 32 bytes).
pub fn point(x: &[u8], y: &[u8]) -> Option<p256::PublicKey> {
    if x.len() > 32 || y.len() > 32 {
        return None;
    }
    let mut sec1 = [0u8; 65];
    sec1[0] = 4;
    sec1[1 + 32 - x.len()..33].copy_from_slice(x);
    sec1[33 + 32 - y.len()..].copy_from_slice(y);
    p256::PublicKey::from_sec1_bytes(&sec1).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecc_public_areas_round_trip_and_name() {
        let key = crate::keys::p256("s", "ak").public_key();
        let p = Public::ecc_p256(&key, Public::AK_ATTRIBUTES, SymDef::NULL, Scheme::ECDSA_SHA256);
        let bytes = p.to_bytes();
        assert_eq!(Public::parse(&bytes, "AK").unwrap(), p);
        assert_eq!(p.p256().unwrap(), key);
        let name = p.name().unwrap();
        assert_eq!(&name[..2], &[0x00, 0x0b]);
        assert_eq!(name.len(), 34);
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(Public::parse(&trailing, "AK").unwrap_err().code(), "tpm-malformed");
        assert_eq!(Public::parse(&bytes[..bytes.len() - 1], "AK").unwrap_err().code(), "tpm-malformed");
    }

    #[test]
    fn rsa_keyed_hash_and_symcipher_areas_round_trip() {
        for p in [
            Public {
                name_alg: alg::SHA256,
                attributes: attr::SIGN,
                auth_policy: vec![1; 32],
                key: Key::Rsa {
                    symmetric: SymDef::NULL,
                    scheme: Scheme { scheme: alg::RSASSA, hash: alg::SHA256, count: 0 },
                    key_bits: 2048,
                    exponent: 0,
                    modulus: vec![0xab; 256],
                },
            },
            Public {
                name_alg: alg::SHA256,
                attributes: attr::SIGN,
                auth_policy: vec![],
                key: Key::KeyedHash { scheme: alg::HMAC, hash: alg::SHA256, kdf: 0, unique: vec![2; 32] },
            },
            Public {
                name_alg: alg::SHA256,
                attributes: attr::DECRYPT,
                auth_policy: vec![],
                key: Key::SymCipher { symmetric: SymDef::AES_128_CFB, unique: vec![3; 32] },
            },
        ] {
            assert_eq!(Public::parse(&p.to_bytes(), "object").unwrap(), p);
        }
    }

    #[test]
    fn symmetric_definitions_are_the_ones_go_tpm_decodes() {
        let xor = SymDef { algorithm: alg::XOR, key_bits: alg::SHA256, mode: 0 };
        let with = |symmetric| Public {
            name_alg: alg::SHA256,
            attributes: attr::DECRYPT,
            auth_policy: vec![],
            key: Key::SymCipher { symmetric, unique: vec![3; 32] },
        };
        let bytes = with(xor).to_bytes();
        assert_eq!(&bytes[10..14], &[0x00, 0x0a, 0x00, 0x0b], "XOR carries its hash and no mode");
        assert_eq!(Public::parse(&bytes, "object").unwrap(), with(xor));
        // TPM_ALG_ERROR (the fuzzer's find), TDES, SM4, Camellia: go-tpm has
        // no member for them.
        for algorithm in [0x0000, 0x0003, 0x0013, 0x0026] {
            let bytes = with(SymDef { algorithm, key_bits: 128, mode: alg::CFB }).to_bytes();
            assert_eq!(Public::parse(&bytes, "object").unwrap_err().code(), "tpm-malformed", "{algorithm:#06x}");
        }
    }
}
