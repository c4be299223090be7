//! The TPM attestor: the control plane's checks of the two join rounds
//! (docs/formats.md, "TPM join").
//!
//! Round 1 ([`Attestor::verify_round1`]) checks, in this order:
//! 1. `tpm-malformed`: the EK public area, then the AK public area, do not
//!    parse as a bare `TPMT_PUBLIC`.
//! 2. `ek-certificate-chain`: the EK certificate does not parse, is not
//!    issued (ECDSA P-256 / SHA-256, issuer name) by any configured EK root,
//!    or is not valid at `now`.
//! 3. `ek-mismatch`: the certificate's key is not the EK public area's key.
//! 4. `ek-attributes`: the EK is not an ECC P-256 storage key (restricted,
//!    decrypt, not sign, fixedTPM, fixedParent, SHA-256 names, AES-128-CFB).
//! 5. `ak-attributes`: the AK is not an ECC P-256 ECDSA-SHA256 signing key
//!    that is restricted, fixedTPM, fixedParent and sensitiveDataOrigin, does
//!    not decrypt, and has SHA-256 names.
//!
//! [`Attestor::challenge`] then makes a credential bound to the AK name and
//! a nonce. The answer ([`Attestor::verify_answer`]) is checked in this order:
//! 1. `credential`: the activated secret is not the challenge's.
//! 2. `quote-signature`: the quote is not signed by the AK (ECDSA-SHA256).
//! 3. `tpm-malformed`: the quote is not a TPM-generated `TPMS_ATTEST` of a quote.
//! 4. `quote-nonce`: its extraData is not the nonce.
//! 5. `pcr-selection`: it does not select exactly SHA-256 PCRs 0–7.
//! 6. `pcr-digest`: the reported values are not eight SHA-256 values whose
//!    concatenation hashes to the quoted digest.
//! 7. `csr-malformed`, `csr-signature`: the CSR.
//! 8. With a certification of the node key: `tpm-malformed` (the node key's
//!    public area), `certify-signature` (not signed by the AK),
//!    `tpm-malformed` (not a TPM-generated certification), `certify-nonce`,
//!    `certify-name` (it certifies another name than the node key's),
//!    `node-key-attributes` (the node key is not a fixedTPM, fixedParent,
//!    sensitiveDataOrigin ECC P-256 signing key that is neither restricted nor
//!    a decryption key). Without one, under `tpm` and `certified`:
//!    `node-key-uncertified`. A present certification is always checked.
//! 9. `node-key-not-csr`: under `tpm`, the CSR's key is not the certified key.

use sha2::{Digest, Sha256};
use spki::DecodePublicKey as _;
use subtle::ConstantTimeEq as _;

use super::attest::{Attest, Attested, ClockInfo, verify_ecdsa_sha256};
use super::credential::{Credential, make_credential};
use super::public::{Key, Public, Scheme, SymDef};
use super::{ECC_NIST_P256, QUOTED_PCRS, alg, attr};
use crate::error::TpmError;
use crate::{Error, Result, keys, x509};

/// The `nodeKey` policy of a TPM attestor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKeyPolicy {
    /// The node key must be certified by the AK and be the CSR's key.
    Tpm,
    /// The answer must certify a TPM key with the AK; the CSR's key may differ.
    Certified,
    /// Any node key; a certification, if present, is still checked.
    Any,
}

impl NodeKeyPolicy {
    /// The policy's name in configuration: `tpm`, `certified` or `any`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKeyPolicy::Tpm => "tpm",
            NodeKeyPolicy::Certified => "certified",
            NodeKeyPolicy::Any => "any",
        }
    }

    /// Parses a policy name.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "tpm" => Some(NodeKeyPolicy::Tpm),
            "certified" => Some(NodeKeyPolicy::Certified),
            "any" => Some(NodeKeyPolicy::Any),
            _ => None,
        }
    }
}

/// What the node sends in round 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Round1 {
    /// The EK's bare `TPMT_PUBLIC`.
    pub ek_public: Vec<u8>,
    /// The EK certificate (DER), read from NV 0x01C0000A.
    pub ek_certificate: Vec<u8>,
    /// The AK's bare `TPMT_PUBLIC`.
    pub ak_public: Vec<u8>,
}

/// A verified round 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Enrollment {
    /// The EK's public area.
    pub ek_public: Public,
    /// The EK's key.
    pub ek_key: p256::PublicKey,
    /// `SHA-256(EK TPMT_PUBLIC)`: what `node_bindings` binds the node to.
    pub ek_binding: [u8; 32],
    /// What the EK certificate says.
    pub ek_certificate: x509::Verified,
    /// The AK's public area.
    pub ak_public: Public,
    /// The AK's key.
    pub ak_key: p256::PublicKey,
    /// The AK's name (`0x000b || SHA-256(TPMT_PUBLIC)`).
    pub ak_name: Vec<u8>,
}

/// The random inputs of one challenge.
pub struct ChallengeRandomness {
    /// The credential's secret.
    pub secret: [u8; 32],
    /// The quote's nonce.
    pub nonce: [u8; 32],
    /// MakeCredential's ephemeral key.
    pub ephemeral: p256::SecretKey,
}

impl ChallengeRandomness {
    /// Fresh randomness from the OS (production).
    pub fn from_os() -> Self {
        let mut secret = [0u8; 32];
        let mut nonce = [0u8; 32];
        getrandom::fill(&mut secret).expect("the OS random number generator is available");
        getrandom::fill(&mut nonce).expect("the OS random number generator is available");
        ChallengeRandomness { secret, nonce, ephemeral: keys::random_p256() }
    }

    /// Randomness derived from a fixture seed and a label (test-only path).
    pub fn seeded(seed: &str, label: &str) -> Self {
        ChallengeRandomness {
            secret: keys::okm(seed, &format!("{label}/secret")),
            nonce: keys::okm(seed, &format!("{label}/nonce")),
            ephemeral: keys::p256(seed, &format!("{label}/ephemeral")),
        }
    }
}

/// What the attestor sends in answer to round 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// The credential, bound to the AK name, for the EK.
    pub credential: Credential,
    /// The nonce the quote and the certification must carry.
    pub nonce: [u8; 32],
}

/// What the attestor keeps between the rounds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The verified round 1.
    pub enrollment: Enrollment,
    /// The credential's secret.
    pub secret: [u8; 32],
    /// The nonce.
    pub nonce: [u8; 32],
}

/// A `TPMS_ATTEST` and the AK's `TPMT_SIGNATURE` over it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signed {
    /// The attestation bytes, as the TPM returned them.
    pub attest: Vec<u8>,
    /// The signature (`TPMT_SIGNATURE`).
    pub signature: Vec<u8>,
}

/// The node key and the AK's certification of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertifiedKey {
    /// The node key's bare `TPMT_PUBLIC`.
    pub public: Vec<u8>,
    /// TPM2_Certify of it by the AK, over the nonce.
    pub certify: Signed,
}

/// What the node sends in round 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The secret ActivateCredential returned.
    pub activated_secret: Vec<u8>,
    /// The quote of SHA-256 PCRs 0–7 over the nonce.
    pub quote: Signed,
    /// The values of PCRs 0–7 (SHA-256 bank), in order.
    pub pcr_values: Vec<Vec<u8>>,
    /// The TPM-resident node key and its certification, if any.
    pub node_key: Option<CertifiedKey>,
    /// The node's PKCS#10 CSR (DER).
    pub csr: Vec<u8>,
}

/// A verified TPM join.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attestation {
    /// `SHA-256(EK TPMT_PUBLIC)`.
    pub ek_binding: [u8; 32],
    /// The AK name (the node certificate names `SHA-256` of it).
    pub ak_name: Vec<u8>,
    /// The quoted PCR values 0–7.
    pub pcr_values: Vec<[u8; 32]>,
    /// The TPM's clock at the quote.
    pub clock: ClockInfo,
    /// The CSR.
    pub csr: x509::Csr,
    /// The node key the AK certified, if any.
    pub certified_node_key: Option<p256::PublicKey>,
    /// Whether the CSR's key is the certified, TPM-resident key.
    pub csr_key_in_tpm: bool,
}

/// The TPM attestor of the control plane.
#[derive(Clone, Debug)]
pub struct Attestor {
    ek_roots: Vec<Vec<u8>>,
    node_key: NodeKeyPolicy,
}

fn attrs_missing(p: &Public, must: u32, must_not: u32) -> Option<String> {
    let missing = must & !p.attributes;
    let extra = must_not & p.attributes;
    (missing != 0 || extra != 0)
        .then(|| format!("attributes {:#010x}: missing {missing:#x}, forbidden {extra:#x}", p.attributes))
}

impl Attestor {
    /// An attestor trusting EK certificates issued by `ek_roots` (DER,
    /// ECDSA P-256 CAs), with the given node-key policy.
    pub fn new(ek_roots: Vec<Vec<u8>>, node_key: NodeKeyPolicy) -> Self {
        Attestor { ek_roots, node_key }
    }

    /// The node-key policy.
    pub fn node_key_policy(&self) -> NodeKeyPolicy {
        self.node_key
    }

    /// Checks round 1 at `now_ms` (see the module documentation for the order).
    pub fn verify_round1(&self, round1: &Round1, now_ms: i64) -> Result<Enrollment> {
        let ek_public = Public::parse(&round1.ek_public, "EK public")?;
        let ak_public = Public::parse(&round1.ak_public, "AK public")?;

        let mut last = String::from("no EK root is configured");
        let mut verified = None;
        for root in &self.ek_roots {
            match x509::verify_issued(&round1.ek_certificate, root, now_ms) {
                Ok(v) => {
                    verified = Some(v);
                    break;
                }
                Err(e) => last = e.to_string(),
            }
        }
        let ek_certificate = verified.ok_or(TpmError::EkCertificateChain { reason: last })?;

        let certified = p256::PublicKey::from_public_key_der(&ek_certificate.spki_der).ok();
        let ek_key = match (certified, ek_public.p256()) {
            (Some(c), Some(k)) if c == k => k,
            _ => return Err(TpmError::EkMismatch.into()),
        };

        let ek_err = |reason: String| Error::from(TpmError::EkAttributes { reason });
        if ek_public.name_alg != alg::SHA256 {
            return Err(ek_err(format!("name algorithm {:#06x}", ek_public.name_alg)));
        }
        if let Some(reason) = attrs_missing(
            &ek_public,
            attr::RESTRICTED | attr::DECRYPT | attr::FIXED_TPM | attr::FIXED_PARENT,
            attr::SIGN,
        ) {
            return Err(ek_err(reason));
        }
        match &ek_public.key {
            Key::Ecc { symmetric, .. } if *symmetric == SymDef::AES_128_CFB => {}
            _ => return Err(ek_err("the EK's symmetric algorithm is not AES-128-CFB".into())),
        }

        let ak_err = |reason: String| Error::from(TpmError::AkAttributes { reason });
        let ak_key = match &ak_public.key {
            Key::Ecc { curve: ECC_NIST_P256, .. } => {
                ak_public.p256().ok_or_else(|| ak_err("the AK's point is not on P-256".into()))?
            }
            _ => return Err(ak_err(format!("the AK is of type {:#06x}, not ECC P-256", ak_public.kind()))),
        };
        if ak_public.name_alg != alg::SHA256 {
            return Err(ak_err(format!("name algorithm {:#06x}", ak_public.name_alg)));
        }
        if let Some(reason) = attrs_missing(
            &ak_public,
            attr::RESTRICTED | attr::SIGN | attr::FIXED_TPM | attr::FIXED_PARENT | attr::SENSITIVE_DATA_ORIGIN,
            attr::DECRYPT,
        ) {
            return Err(ak_err(reason));
        }
        match &ak_public.key {
            Key::Ecc { scheme, symmetric, .. } if *scheme == Scheme::ECDSA_SHA256 && *symmetric == SymDef::NULL => {}
            _ => return Err(ak_err("the AK's scheme is not ECDSA-SHA256".into())),
        }

        Ok(Enrollment {
            ek_binding: Sha256::digest(&round1.ek_public).into(),
            ek_key,
            ek_public,
            ek_certificate,
            ak_name: super::public::name_sha256(&round1.ak_public),
            ak_key,
            ak_public,
        })
    }

    /// The challenge for a verified round 1, and what to keep for round 2.
    pub fn challenge(&self, enrollment: Enrollment, rnd: ChallengeRandomness) -> (Challenge, Pending) {
        let credential = make_credential(&enrollment.ek_key, &enrollment.ak_name, &rnd.secret, &rnd.ephemeral);
        (Challenge { credential, nonce: rnd.nonce }, Pending { enrollment, secret: rnd.secret, nonce: rnd.nonce })
    }

    /// Checks round 2 (see the module documentation for the order).
    pub fn verify_answer(&self, pending: &Pending, answer: &Answer) -> Result<Attestation> {
        let e = &pending.enrollment;
        if !bool::from(answer.activated_secret.as_slice().ct_eq(pending.secret.as_slice())) {
            return Err(TpmError::Credential.into());
        }

        if !verify_ecdsa_sha256(&e.ak_key, &answer.quote.attest, &answer.quote.signature) {
            return Err(TpmError::QuoteSignature.into());
        }
        let quote = Attest::parse(&answer.quote.attest, "quote")?;
        let Attested::Quote { selection, pcr_digest } = &quote.attested else {
            return Err(
                TpmError::Malformed { what: "quote".into(), reason: "a certification, not a quote".into() }.into()
            );
        };
        if !quote.is_generated() {
            return Err(TpmError::Malformed { what: "quote".into(), reason: "not TPM-generated".into() }.into());
        }
        if quote.extra_data != pending.nonce {
            return Err(TpmError::QuoteNonce.into());
        }
        let wanted: Vec<u32> = QUOTED_PCRS.collect();
        let banks: Vec<_> = selection.iter().filter(|s| !s.indices().is_empty()).collect();
        if banks.len() != 1 || banks[0].hash != alg::SHA256 || banks[0].indices() != wanted {
            let found = selection.iter().map(|s| format!("{:#06x}:{:?}", s.hash, s.indices())).collect::<Vec<_>>();
            return Err(TpmError::PcrSelection { found: found.join(" ") }.into());
        }
        let mut pcr_values = Vec::new();
        for v in &answer.pcr_values {
            pcr_values.push(<[u8; 32]>::try_from(v.as_slice()).map_err(|_| TpmError::PcrDigest)?);
        }
        if pcr_values.len() != wanted.len() || Sha256::digest(pcr_values.concat()).as_slice() != pcr_digest.as_slice() {
            return Err(TpmError::PcrDigest.into());
        }

        let csr = x509::parse_csr(&answer.csr)?;

        let certified_node_key = match &answer.node_key {
            Some(certified) => Some(verify_certification(&e.ak_key, &pending.nonce, certified)?),
            None if self.node_key != NodeKeyPolicy::Any => return Err(TpmError::NodeKeyUncertified.into()),
            None => None,
        };
        let csr_key_in_tpm = certified_node_key.as_ref() == Some(&csr.public_key);
        if self.node_key == NodeKeyPolicy::Tpm && !csr_key_in_tpm {
            return Err(TpmError::NodeKeyNotCsr.into());
        }

        Ok(Attestation {
            ek_binding: e.ek_binding,
            ak_name: e.ak_name.clone(),
            pcr_values,
            clock: quote.clock_info,
            csr,
            certified_node_key,
            csr_key_in_tpm,
        })
    }
}

/// Checks a renewal's certification of the next node key by the AK of the
/// node's join (its stored `TPMT_PUBLIC`), over `nonce`, in the order of
/// round 2's step 8 (`tpm-malformed` also for an AK that does not parse as
/// an ECC P-256 key); returns the certified key.
pub fn verify_key_certification(ak_public: &[u8], nonce: &[u8], certified: &CertifiedKey) -> Result<p256::PublicKey> {
    let ak = Public::parse(ak_public, "AK public")?;
    let ak_key = ak
        .p256()
        .ok_or_else(|| TpmError::Malformed { what: "AK public".into(), reason: "not an ECC P-256 key".into() })?;
    verify_certification(&ak_key, nonce, certified)
}

/// Checks the AK's certification of a node key, returning the key.
fn verify_certification(ak_key: &p256::PublicKey, nonce: &[u8], certified: &CertifiedKey) -> Result<p256::PublicKey> {
    let public = Public::parse(&certified.public, "node key public")?;
    if !verify_ecdsa_sha256(ak_key, &certified.certify.attest, &certified.certify.signature) {
        return Err(TpmError::CertifySignature.into());
    }
    let attest = Attest::parse(&certified.certify.attest, "certification")?;
    let Attested::Certify { name, .. } = &attest.attested else {
        return Err(TpmError::Malformed {
            what: "certification".into(),
            reason: "a quote, not a certification".into(),
        }
        .into());
    };
    if !attest.is_generated() {
        return Err(TpmError::Malformed { what: "certification".into(), reason: "not TPM-generated".into() }.into());
    }
    if attest.extra_data != nonce {
        return Err(TpmError::CertifyNonce.into());
    }
    if public.name_alg != alg::SHA256 || super::public::name_sha256(&certified.public) != *name {
        return Err(TpmError::CertifyName.into());
    }
    let reason = |r: String| Error::from(TpmError::NodeKeyAttributes { reason: r });
    let key = match &public.key {
        Key::Ecc { curve: ECC_NIST_P256, .. } => public.p256().ok_or_else(|| reason("point not on P-256".into()))?,
        _ => return Err(reason(format!("type {:#06x}, not ECC P-256", public.kind()))),
    };
    if let Some(r) = attrs_missing(
        &public,
        attr::SIGN | attr::FIXED_TPM | attr::FIXED_PARENT | attr::SENSITIVE_DATA_ORIGIN,
        attr::RESTRICTED | attr::DECRYPT,
    ) {
        return Err(reason(r));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::super::attest::{EcdsaSignature, PcrSelection};
    use super::super::credential::activate_credential;
    use super::super::{GENERATED_VALUE, attest};
    use super::*;
    use crate::x509::{CaProfile, EkCertificate, TpmIdentity, Validity};

    const T0: i64 = 1_767_225_600_000;

    /// A TPM in software: an EK, an AK and a node key, all seeded.
    struct SoftTpm {
        ek: p256::SecretKey,
        ak: p256::SecretKey,
        node: p256::SecretKey,
        root_key: p256::SecretKey,
        root: Vec<u8>,
    }

    fn root(key: &p256::SecretKey) -> Vec<u8> {
        x509::ca_certificate(
            key,
            &CaProfile {
                common_name: "test EK root",
                organization: Some("test manufacturer"),
                serial: &[1],
                validity: Validity { not_before_ms: T0 - 1000, not_after_ms: T0 + 86_400_000 },
            },
        )
        .unwrap()
    }

    fn ek_cert(root_key: &p256::SecretKey, root: &[u8], ek: &p256::PublicKey) -> Vec<u8> {
        x509::issue_ek_certificate(
            root_key,
            root,
            ek,
            &EkCertificate {
                common_name: "test EK",
                tpm: TpmIdentity { manufacturer: 0x4942_4d00, model: "SW TPM", version: 0x2019_1023 },
                serial: &[2],
                validity: Validity { not_before_ms: T0 - 1000, not_after_ms: T0 + 86_400_000 },
            },
        )
        .unwrap()
    }

    impl SoftTpm {
        fn new() -> Self {
            let root_key = keys::p256("t", "ek-root");
            SoftTpm {
                ek: keys::p256("t", "ek"),
                ak: keys::p256("t", "ak"),
                node: keys::p256("t", "node"),
                root: root(&root_key),
                root_key,
            }
        }

        fn round1(&self) -> Round1 {
            Round1 {
                ek_public: Public::ek_p256(&self.ek.public_key()).to_bytes(),
                ek_certificate: ek_cert(&self.root_key, &self.root, &self.ek.public_key()),
                ak_public: Public::ak_p256(&self.ak.public_key()).to_bytes(),
            }
        }

        fn sign(&self, attest: &Attest) -> Signed {
            let bytes = attest.to_bytes();
            let sig: p256::ecdsa::Signature =
                p256::ecdsa::signature::Signer::sign(&p256::ecdsa::SigningKey::from(&self.ak), &bytes);
            Signed { attest: bytes, signature: EcdsaSignature::from_p256(&sig).to_bytes() }
        }

        fn attest(nonce: &[u8], attested: Attested) -> Attest {
            Attest {
                magic: GENERATED_VALUE,
                qualified_signer: vec![0, 0x0b],
                extra_data: nonce.to_vec(),
                clock_info: attest::ClockInfo::default(),
                firmware_version: 1,
                attested,
            }
        }

        fn pcrs() -> Vec<Vec<u8>> {
            (0..8u8).map(|i| Sha256::digest([i]).to_vec()).collect()
        }

        fn quote(&self, nonce: &[u8], select: Vec<u8>) -> Signed {
            let digest = Sha256::digest(Self::pcrs().concat()).to_vec();
            self.sign(&Self::attest(
                nonce,
                Attested::Quote { selection: vec![PcrSelection { hash: alg::SHA256, select }], pcr_digest: digest },
            ))
        }

        fn certify(&self, nonce: &[u8], public: &Public) -> CertifiedKey {
            let bytes = public.to_bytes();
            let name = super::super::public::name_sha256(&bytes);
            CertifiedKey {
                certify: self.sign(&Self::attest(nonce, Attested::Certify { name, qualified_name: vec![] })),
                public: bytes,
            }
        }

        fn answer(&self, challenge: &Challenge, ak_name: &[u8]) -> Answer {
            Answer {
                activated_secret: activate_credential(&self.ek, ak_name, &challenge.credential).unwrap(),
                quote: self.quote(&challenge.nonce, vec![0xff, 0, 0]),
                pcr_values: Self::pcrs(),
                node_key: Some(self.certify(&challenge.nonce, &Public::node_key_p256(&self.node.public_key()))),
                csr: x509::csr(&self.node, "bcd").unwrap(),
            }
        }
    }

    fn start(tpm: &SoftTpm, policy: NodeKeyPolicy) -> (Attestor, Challenge, Pending, Answer) {
        let attestor = Attestor::new(vec![tpm.root.clone()], policy);
        let enrollment = attestor.verify_round1(&tpm.round1(), T0).unwrap();
        let (challenge, pending) = attestor.challenge(enrollment, ChallengeRandomness::seeded("t", "challenge"));
        let answer = tpm.answer(&challenge, &pending.enrollment.ak_name);
        (attestor, challenge, pending, answer)
    }

    fn round1_code(tpm: &SoftTpm, f: impl FnOnce(&mut Round1)) -> &'static str {
        let mut r = tpm.round1();
        f(&mut r);
        Attestor::new(vec![tpm.root.clone()], NodeKeyPolicy::Tpm).verify_round1(&r, T0).unwrap_err().code()
    }

    fn answer_code(policy: NodeKeyPolicy, f: impl FnOnce(&SoftTpm, &Pending, &mut Answer)) -> &'static str {
        let tpm = SoftTpm::new();
        let (attestor, _, pending, mut answer) = start(&tpm, policy);
        f(&tpm, &pending, &mut answer);
        attestor.verify_answer(&pending, &answer).unwrap_err().code()
    }

    #[test]
    fn a_software_tpm_attests_under_every_policy() {
        let tpm = SoftTpm::new();
        for policy in [NodeKeyPolicy::Tpm, NodeKeyPolicy::Certified, NodeKeyPolicy::Any] {
            let (attestor, _, pending, answer) = start(&tpm, policy);
            let a = attestor.verify_answer(&pending, &answer).unwrap();
            assert!(a.csr_key_in_tpm);
            assert_eq!(a.certified_node_key, Some(tpm.node.public_key()));
            assert_eq!(a.ak_name, Public::ak_p256(&tpm.ak.public_key()).name().unwrap());
            assert_eq!(a.ek_binding, <[u8; 32]>::from(Sha256::digest(tpm.round1().ek_public)));
            assert_eq!(NodeKeyPolicy::parse(policy.as_str()), Some(policy));
        }
    }

    #[test]
    fn round1_defects_are_refused_with_their_code() {
        let tpm = SoftTpm::new();
        assert_eq!(round1_code(&tpm, |r| r.ek_public.truncate(10)), "tpm-malformed");
        assert_eq!(round1_code(&tpm, |r| r.ak_public.push(0)), "tpm-malformed");
        let other_root_key = keys::p256("t", "other-root");
        let other_root = root(&other_root_key);
        let ek = tpm.ek.public_key();
        assert_eq!(
            round1_code(&tpm, |r| r.ek_certificate = ek_cert(&other_root_key, &other_root, &ek)),
            "ek-certificate-chain"
        );
        assert_eq!(round1_code(&tpm, |r| r.ek_certificate = b"garbage".to_vec()), "ek-certificate-chain");
        let other_ek = keys::p256("t", "other-ek").public_key();
        assert_eq!(
            round1_code(&tpm, |r| r.ek_certificate = ek_cert(&tpm.root_key, &tpm.root, &other_ek)),
            "ek-mismatch"
        );
        let mut sign_ek = Public::ek_p256(&ek);
        sign_ek.attributes |= attr::SIGN;
        assert_eq!(round1_code(&tpm, |r| r.ek_public = sign_ek.to_bytes()), "ek-attributes");
        let ak = tpm.ak.public_key();
        for (bits_off, bits_on) in [
            (attr::RESTRICTED, 0),
            (attr::FIXED_TPM, 0),
            (attr::SIGN, 0),
            (0, attr::DECRYPT),
            (attr::SENSITIVE_DATA_ORIGIN, 0),
        ] {
            let mut p = Public::ak_p256(&ak);
            p.attributes = (p.attributes & !bits_off) | bits_on;
            assert_eq!(
                round1_code(&tpm, |r| r.ak_public = p.to_bytes()),
                "ak-attributes",
                "{bits_off:#x}/{bits_on:#x}"
            );
        }
        let mut sha1 = Public::ak_p256(&ak);
        sha1.name_alg = alg::SHA1;
        assert_eq!(round1_code(&tpm, |r| r.ak_public = sha1.to_bytes()), "ak-attributes");
        let node_as_ak = Public::node_key_p256(&tpm.node.public_key());
        assert_eq!(round1_code(&tpm, |r| r.ak_public = node_as_ak.to_bytes()), "ak-attributes");
        let at = |now| {
            Attestor::new(vec![tpm.root.clone()], NodeKeyPolicy::Tpm).verify_round1(&tpm.round1(), now).unwrap_err()
        };
        assert_eq!(at(T0 + 2 * 86_400_000).code(), "ek-certificate-chain");
        assert_eq!(
            Attestor::new(vec![], NodeKeyPolicy::Tpm).verify_round1(&tpm.round1(), T0).unwrap_err().code(),
            "ek-certificate-chain"
        );
    }

    #[test]
    fn answer_defects_are_refused_with_their_code() {
        use NodeKeyPolicy::*;
        assert_eq!(answer_code(Tpm, |_, _, a| a.activated_secret[0] ^= 1), "credential");
        assert_eq!(answer_code(Tpm, |_, _, a| a.quote.signature[10] ^= 1), "quote-signature");
        assert_eq!(answer_code(Tpm, |_, _, a| a.quote.attest[20] ^= 1), "quote-signature");
        assert_eq!(answer_code(Tpm, |t, _, a| a.quote = t.quote(&[1; 32], vec![0xff, 0, 0])), "quote-nonce");
        assert_eq!(answer_code(Tpm, |t, p, a| a.quote = t.quote(&p.nonce, vec![0xff, 1, 0])), "pcr-selection");
        assert_eq!(answer_code(Tpm, |t, p, a| a.quote = t.quote(&p.nonce, vec![0x7f, 0, 0])), "pcr-selection");
        assert_eq!(answer_code(Tpm, |_, _, a| a.pcr_values[3][0] ^= 1), "pcr-digest");
        assert_eq!(answer_code(Tpm, |_, _, a| a.pcr_values.truncate(7)), "pcr-digest");
        assert_eq!(answer_code(Tpm, |_, _, a| a.quote = a.node_key.as_ref().unwrap().certify.clone()), "tpm-malformed");
        assert_eq!(answer_code(Tpm, |_, _, a| *a.csr.last_mut().unwrap() ^= 1), "csr-signature");
        assert_eq!(answer_code(Tpm, |_, _, a| a.node_key.as_mut().unwrap().public.truncate(5)), "tpm-malformed");
        assert_eq!(
            answer_code(Tpm, |_, _, a| a.node_key.as_mut().unwrap().certify.signature[12] ^= 1),
            "certify-signature"
        );
        assert_eq!(answer_code(Tpm, |_, _, a| a.node_key.as_mut().unwrap().certify = a.quote.clone()), "tpm-malformed");
        assert_eq!(
            answer_code(Tpm, |t, _, a| {
                a.node_key = Some(t.certify(&[2; 32], &Public::node_key_p256(&t.node.public_key())));
            }),
            "certify-nonce"
        );
        assert_eq!(
            answer_code(Tpm, |t, _, a| a.node_key.as_mut().unwrap().public =
                Public::ak_p256(&t.ak.public_key()).to_bytes()),
            "certify-name"
        );
        assert_eq!(
            answer_code(Tpm, |t, p, a| a.node_key = Some(t.certify(&p.nonce, &Public::ak_p256(&t.node.public_key())))),
            "node-key-attributes"
        );
        for policy in [Tpm, Certified] {
            assert_eq!(answer_code(policy, |_, _, a| a.node_key = None), "node-key-uncertified");
        }
        let other_csr = x509::csr(&keys::p256("t", "software"), "bcd").unwrap();
        assert_eq!(answer_code(Tpm, |_, _, a| a.csr = other_csr.clone()), "node-key-not-csr");

        let tpm = SoftTpm::new();
        for policy in [Certified, Any] {
            let (attestor, _, pending, mut answer) = start(&tpm, policy);
            answer.csr = other_csr.clone();
            let a = attestor.verify_answer(&pending, &answer).unwrap();
            assert!(!a.csr_key_in_tpm);
        }
        let (attestor, _, pending, mut answer) = start(&tpm, Any);
        answer.node_key = None;
        assert_eq!(attestor.verify_answer(&pending, &answer).unwrap().certified_node_key, None);
    }

    #[test]
    fn the_ek_certificate_follows_the_tcg_profile_without_a_critical_san() {
        use der::Decode as _;
        let tpm = SoftTpm::new();
        let der = ek_cert(&tpm.root_key, &tpm.root, &tpm.ek.public_key());
        assert_eq!(der, ek_cert(&tpm.root_key, &tpm.root, &tpm.ek.public_key()), "deterministic");
        let cert = x509_cert::Certificate::from_der(&der).unwrap();
        let exts = cert.tbs_certificate().extensions().unwrap();
        let san = exts.iter().find(|e| e.extn_id.to_string() == "2.5.29.17").unwrap();
        assert!(!san.critical);
        assert!(exts.iter().any(|e| e.extn_id.to_string() == "2.5.29.37"));
        x509::verify_issued(&der, &tpm.root, T0).unwrap();
    }

    #[test]
    fn a_renewal_certification_is_checked_against_the_stored_ak() {
        let tpm = SoftTpm::new();
        let ak = Public::ak_p256(&tpm.ak.public_key()).to_bytes();
        let next = Public::node_key_p256(&keys::p256("t", "next").public_key());
        let certified = tpm.certify(&[9; 32], &next);
        let key = verify_key_certification(&ak, &[9; 32], &certified).unwrap();
        assert_eq!(key, keys::p256("t", "next").public_key());
        assert_eq!(verify_key_certification(&ak, &[8; 32], &certified).unwrap_err().code(), "certify-nonce");
        let other_ak = Public::ak_p256(&keys::p256("t", "other-ak").public_key()).to_bytes();
        assert_eq!(verify_key_certification(&other_ak, &[9; 32], &certified).unwrap_err().code(), "certify-signature");
        assert_eq!(verify_key_certification(b"junk", &[9; 32], &certified).unwrap_err().code(), "tpm-malformed");
    }
}
