//! TPM attestation, the control plane's side of the two-round TPM join
//! (docs/formats.md, "TPM join"). Pure: no TPM, no I/O, no clock.
//!
//! - [`wire`]: the TPM encoding (big-endian integers, `TPM2B` buffers).
//! - [`public`]: `TPMT_PUBLIC` parsing, encoding and names.
//! - [`attest`]: `TPMS_ATTEST` (quotes, certifications) and ECDSA `TPMT_SIGNATURE`s.
//! - [`credential`]: MakeCredential in software for an ECC P-256 EK.
//! - [`attestor`]: the attestor that checks both rounds.
//!
//! The node side is Go (`daemon/internal/tpm`, go-tpm); the TPM fixtures of
//! `testdata/tpm/` are made by both on a real software TPM (swtpm) and
//! checked here.

pub mod attest;
pub mod attestor;
pub mod credential;
pub mod public;
pub mod wire;

pub use attestor::{
    Answer, Attestation, Attestor, Challenge, ChallengeRandomness, Enrollment, NodeKeyPolicy, Pending, Round1,
};
pub use public::Public;

/// `TPM_ALG_ID` values used here (TPM 2.0 Part 2, §6.3).
pub mod alg {
    /// RSA.
    pub const RSA: u16 = 0x0001;
    /// SHA-1.
    pub const SHA1: u16 = 0x0004;
    /// HMAC.
    pub const HMAC: u16 = 0x0005;
    /// AES.
    pub const AES: u16 = 0x0006;
    /// Keyed hash objects.
    pub const KEYEDHASH: u16 = 0x0008;
    /// XOR obfuscation.
    pub const XOR: u16 = 0x000A;
    /// SHA-256.
    pub const SHA256: u16 = 0x000B;
    /// No algorithm.
    pub const NULL: u16 = 0x0010;
    /// RSASSA-PKCS1-v1_5.
    pub const RSASSA: u16 = 0x0014;
    /// ECDSA.
    pub const ECDSA: u16 = 0x0018;
    /// ECDAA.
    pub const ECDAA: u16 = 0x001A;
    /// Elliptic-curve objects.
    pub const ECC: u16 = 0x0023;
    /// Symmetric-cipher objects.
    pub const SYMCIPHER: u16 = 0x0025;
    /// Cipher feedback mode.
    pub const CFB: u16 = 0x0043;
}

/// `TPMA_OBJECT` bits (TPM 2.0 Part 2, §8.3).
pub mod attr {
    /// The object cannot be duplicated.
    pub const FIXED_TPM: u32 = 1 << 1;
    /// Saved contexts do not survive a TPM Reset.
    pub const ST_CLEAR: u32 = 1 << 2;
    /// The parent cannot change.
    pub const FIXED_PARENT: u32 = 1 << 4;
    /// The TPM generated the sensitive part.
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    /// The auth value authorizes the USER role.
    pub const USER_WITH_AUTH: u32 = 1 << 6;
    /// Only a policy authorizes the ADMIN role.
    pub const ADMIN_WITH_POLICY: u32 = 1 << 7;
    /// Not subject to dictionary-attack protection.
    pub const NO_DA: u32 = 1 << 10;
    /// Duplication needs an inner wrapper.
    pub const ENCRYPTED_DUPLICATION: u32 = 1 << 11;
    /// Signs or decrypts only TPM-formatted data.
    pub const RESTRICTED: u32 = 1 << 16;
    /// A decryption (or storage) key.
    pub const DECRYPT: u32 = 1 << 17;
    /// A signing key.
    pub const SIGN: u32 = 1 << 18;
}

/// `TPM_ECC_NIST_P256`.
pub const ECC_NIST_P256: u16 = 0x0003;
/// `TPM_GENERATED_VALUE`: the first four bytes of every TPM-made `TPMS_ATTEST`.
pub const GENERATED_VALUE: u32 = 0xff54_4347;
/// `TPM_ST_ATTEST_CERTIFY`.
pub const ST_ATTEST_CERTIFY: u16 = 0x8017;
/// `TPM_ST_ATTEST_QUOTE`.
pub const ST_ATTEST_QUOTE: u16 = 0x8018;
/// The NV index of the ECC P-256 EK certificate (TCG EK Credential Profile, low range).
pub const EK_CERT_NV_INDEX: u32 = 0x01C0_000A;
/// The PCRs a quote covers: SHA-256 PCRs 0–7.
pub const QUOTED_PCRS: std::ops::Range<u32> = 0..8;
