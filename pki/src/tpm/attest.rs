//! `TPMS_ATTEST` (quotes and certifications, TPM 2.0 Part 2, §10.12.12) and
//! `TPMT_SIGNATURE` (ECDSA only), parsed, encoded and verified.
//!
//! A TPM signs the `TPMS_ATTEST` bytes it returns (`TPM2B_ATTEST` without
//! its size prefix); verification is over those exact bytes, so they are
//! kept as received and never re-encoded.

use super::wire::{Reader, Writer};
use super::{GENERATED_VALUE, ST_ATTEST_CERTIFY, ST_ATTEST_QUOTE, alg};
use crate::Result;

/// `TPMS_CLOCK_INFO`: the TPM's clock when it signed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockInfo {
    /// Milliseconds the TPM has been powered (not wall time).
    pub clock: u64,
    /// TPM resets since the clear.
    pub reset_count: u32,
    /// TPM restarts since the last reset.
    pub restart_count: u32,
    /// Whether the clock was not rolled back.
    pub safe: bool,
}

/// One bank of a `TPML_PCR_SELECTION`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcrSelection {
    /// The bank's hash algorithm.
    pub hash: u16,
    /// The selection bitmap (bit `i % 8` of byte `i / 8` selects PCR `i`).
    pub select: Vec<u8>,
}

impl PcrSelection {
    /// The selected PCR indices, ascending.
    pub fn indices(&self) -> Vec<u32> {
        (0..self.select.len() as u32 * 8).filter(|i| self.select[(i / 8) as usize] & (1 << (i % 8)) != 0).collect()
    }
}

/// What a `TPMS_ATTEST` attests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attested {
    /// `TPM_ST_ATTEST_QUOTE`: `TPMS_QUOTE_INFO`.
    Quote {
        /// The PCRs quoted.
        selection: Vec<PcrSelection>,
        /// The digest of their values, concatenated in selection order.
        pcr_digest: Vec<u8>,
    },
    /// `TPM_ST_ATTEST_CERTIFY`: `TPMS_CERTIFY_INFO`.
    Certify {
        /// The certified object's name.
        name: Vec<u8>,
        /// Its qualified name.
        qualified_name: Vec<u8>,
    },
    /// Another attestation type, kept as its tag and body.
    Other {
        /// The `TPM_ST_ATTEST_*` tag.
        tag: u16,
    },
}

/// A parsed `TPMS_ATTEST`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attest {
    /// `TPM_GENERATED_VALUE` when the TPM made it.
    pub magic: u32,
    /// The qualified name of the signing key.
    pub qualified_signer: Vec<u8>,
    /// The caller's qualifying data (the nonce).
    pub extra_data: Vec<u8>,
    /// The TPM's clock.
    pub clock_info: ClockInfo,
    /// The firmware version.
    pub firmware_version: u64,
    /// The attested content.
    pub attested: Attested,
}

impl Attest {
    /// Parses a `TPMS_ATTEST` of a quote or a certification (`tpm-malformed`
    /// on anything short, trailing, or of another type).
    pub fn parse(bytes: &[u8], what: &'static str) -> Result<Self> {
        let mut r = Reader::new(bytes, what);
        let magic = r.u32()?;
        let tag = r.u16()?;
        let qualified_signer = r.tpm2b()?;
        let extra_data = r.tpm2b()?;
        let (clock, reset_count, restart_count) = (r.u64()?, r.u32()?, r.u32()?);
        // TPMI_YES_NO is 0 or 1: any other byte would re-encode differently
        // (found by fuzz/fuzz_targets/tpm_attest.rs; Go refuses it too).
        let safe = match r.u8()? {
            0 => false,
            1 => true,
            other => return Err(r.malformed(format!("clock safe {other}, not 0 or 1"))),
        };
        let clock_info = ClockInfo { clock, reset_count, restart_count, safe };
        let firmware_version = r.u64()?;
        let attested = match tag {
            ST_ATTEST_QUOTE => {
                let count = r.u32()?;
                if count > 16 {
                    return Err(r.malformed(format!("{count} PCR banks")));
                }
                let mut selection = Vec::new();
                for _ in 0..count {
                    let hash = r.u16()?;
                    let size = r.u8()? as usize;
                    selection.push(PcrSelection { hash, select: r.take(size)?.to_vec() });
                }
                Attested::Quote { selection, pcr_digest: r.tpm2b()? }
            }
            ST_ATTEST_CERTIFY => Attested::Certify { name: r.tpm2b()?, qualified_name: r.tpm2b()? },
            other => return Err(r.malformed(format!("attestation type {other:#06x}"))),
        };
        r.finish()?;
        Ok(Attest { magic, qualified_signer, extra_data, clock_info, firmware_version, attested })
    }

    /// The `TPMS_ATTEST` encoding (what a TPM would sign). Used to build tests.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        let tag = match &self.attested {
            Attested::Quote { .. } => ST_ATTEST_QUOTE,
            Attested::Certify { .. } => ST_ATTEST_CERTIFY,
            Attested::Other { tag } => *tag,
        };
        w.u32(self.magic).u16(tag).tpm2b(&self.qualified_signer).tpm2b(&self.extra_data);
        let c = &self.clock_info;
        w.u64(c.clock).u32(c.reset_count).u32(c.restart_count).u8(c.safe as u8).u64(self.firmware_version);
        match &self.attested {
            Attested::Quote { selection, pcr_digest } => {
                w.u32(selection.len() as u32);
                for s in selection {
                    w.u16(s.hash).u8(s.select.len() as u8).bytes(&s.select);
                }
                w.tpm2b(pcr_digest);
            }
            Attested::Certify { name, qualified_name } => {
                w.tpm2b(name).tpm2b(qualified_name);
            }
            Attested::Other { .. } => {}
        }
        w.finish()
    }

    /// Whether the TPM made this structure (`magic` is `TPM_GENERATED_VALUE`).
    pub fn is_generated(&self) -> bool {
        self.magic == GENERATED_VALUE
    }
}

/// An ECDSA `TPMT_SIGNATURE`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EcdsaSignature {
    /// The hash algorithm signed with.
    pub hash: u16,
    /// r, as the TPM encodes it (possibly shorter than 32 bytes).
    pub r: Vec<u8>,
    /// s, as the TPM encodes it.
    pub s: Vec<u8>,
}

impl EcdsaSignature {
    /// Parses a `TPMT_SIGNATURE`; `None` unless it is a well-formed ECDSA
    /// signature without trailing bytes (any defect of a signature is a
    /// failure to verify, never a parse error).
    pub fn parse(bytes: &[u8]) -> Option<Self> {
        let mut r = Reader::new(bytes, "TPMT_SIGNATURE");
        if r.u16().ok()? != alg::ECDSA {
            return None;
        }
        let sig = EcdsaSignature { hash: r.u16().ok()?, r: r.tpm2b().ok()?, s: r.tpm2b().ok()? };
        r.finish().ok()?;
        Some(sig)
    }

    /// The `TPMT_SIGNATURE` encoding.
    pub fn to_bytes(&self) -> Vec<u8> {
        Writer::default().u16(alg::ECDSA).u16(self.hash).tpm2b(&self.r).tpm2b(&self.s).finish()
    }

    /// An ECDSA-SHA256 `TPMT_SIGNATURE` from a p256 signature. Used to build tests.
    pub fn from_p256(sig: &p256::ecdsa::Signature) -> Self {
        let (r, s) = sig.split_bytes();
        EcdsaSignature { hash: alg::SHA256, r: r.to_vec(), s: s.to_vec() }
    }
}

/// Whether `signature` (a `TPMT_SIGNATURE`) is `key`'s ECDSA-SHA256
/// signature over `message`.
pub fn verify_ecdsa_sha256(key: &p256::PublicKey, message: &[u8], signature: &[u8]) -> bool {
    let Some(sig) = EcdsaSignature::parse(signature) else { return false };
    if sig.hash != alg::SHA256 || sig.r.len() > 32 || sig.s.len() > 32 {
        return false;
    }
    let mut rs = [0u8; 64];
    rs[32 - sig.r.len()..32].copy_from_slice(&sig.r);
    rs[64 - sig.s.len()..].copy_from_slice(&sig.s);
    let Ok(sig) = p256::ecdsa::Signature::from_slice(&rs) else { return false };
    crate::keys::verify_ecdsa_p256(key, message, &sig)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quote() -> Attest {
        Attest {
            magic: GENERATED_VALUE,
            qualified_signer: vec![0, 0x0b, 1, 2],
            extra_data: vec![9; 32],
            clock_info: ClockInfo { clock: 5, reset_count: 1, restart_count: 0, safe: true },
            firmware_version: 0x2019_1023_0016_3636,
            attested: Attested::Quote {
                selection: vec![PcrSelection { hash: alg::SHA256, select: vec![0xff, 0, 0] }],
                pcr_digest: vec![7; 32],
            },
        }
    }

    #[test]
    fn attestations_round_trip() {
        let q = quote();
        assert_eq!(Attest::parse(&q.to_bytes(), "quote").unwrap(), q);
        let c = Attest { attested: Attested::Certify { name: vec![1; 34], qualified_name: vec![2; 34] }, ..q };
        assert_eq!(Attest::parse(&c.to_bytes(), "certify").unwrap(), c);
        let other = Attest { attested: Attested::Other { tag: 0x8014 }, ..c };
        assert_eq!(Attest::parse(&other.to_bytes(), "x").unwrap_err().code(), "tpm-malformed");
    }

    #[test]
    fn pcr_selection_lists_indices() {
        let s = PcrSelection { hash: alg::SHA256, select: vec![0xff, 0x01, 0] };
        assert_eq!(s.indices(), vec![0, 1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn ecdsa_signatures_verify_with_short_scalars_padded() {
        let key = crate::keys::p256("s", "ak");
        let msg = quote().to_bytes();
        let sig: p256::ecdsa::Signature =
            p256::ecdsa::signature::Signer::sign(&p256::ecdsa::SigningKey::from(&key), &msg);
        let mut tpm = EcdsaSignature::from_p256(&sig);
        assert!(verify_ecdsa_sha256(&key.public_key(), &msg, &tpm.to_bytes()));
        assert!(!verify_ecdsa_sha256(&key.public_key(), b"other", &tpm.to_bytes()));
        // A TPM may drop leading zero bytes of r or s; a leading zero we strip must still verify.
        tpm.r.insert(0, 0);
        assert!(!verify_ecdsa_sha256(&key.public_key(), &msg, &tpm.to_bytes()), "33-byte r is refused");
        assert!(!verify_ecdsa_sha256(&key.public_key(), &msg, &[0, 0x18]));
    }
}
