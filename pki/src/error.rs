//! The refusals of the `pki` crate, each with a stable code shared with Go.
//!
//! The code strings are a contract: `daemon/internal/pki` returns the same
//! string for the same defect, and every negative fixture in
//! `testdata/interop.json` and `testdata/tpm/cases.json` names one. Add a
//! code on both sides at once.

use thiserror::Error;

/// Why `pki` refused an input. [`Error::code`] is the stable, shared code.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    // ---- keys ----
    /// A public key could not be parsed from its SubjectPublicKeyInfo.
    #[error("bad public key: {reason}")]
    BadPublicKey {
        /// What was wrong with it.
        reason: String,
    },

    // ---- DSSE ----
    /// The envelope is not a DSSE envelope (bad JSON, bad base64, truncated).
    #[error("malformed DSSE envelope: {reason}")]
    DsseMalformed {
        /// What was wrong with it.
        reason: String,
    },
    /// The envelope carries another payload type than the one expected.
    #[error("payload type {found:?}, expected {expected:?}")]
    DssePayloadType {
        /// The type the caller expected.
        expected: String,
        /// The type the envelope carries.
        found: String,
    },
    /// The envelope carries no signature at all.
    #[error("the envelope is unsigned")]
    DsseUnsigned,
    /// A signature by a trusted key id does not verify.
    #[error("bad signature by {keyid}")]
    DsseBadSignature {
        /// The key id whose signature failed.
        keyid: String,
    },
    /// No signature is by a trusted key id.
    #[error("no signature by a trusted key (key ids {keyids:?})")]
    DsseUnknownKey {
        /// The key ids the envelope carried.
        keyids: Vec<String>,
    },
    /// Fewer distinct trusted keys signed than the threshold asks.
    #[error("{valid} valid signature(s), {threshold} required")]
    DsseThreshold {
        /// Distinct trusted keys whose signatures verify.
        valid: usize,
        /// Signatures required.
        threshold: usize,
    },
    /// The signed payload does not decode as the expected message.
    #[error("malformed payload: {reason}")]
    PayloadMalformed {
        /// The decoder's complaint.
        reason: String,
    },

    // ---- JWE ----
    /// Not a five-part compact JWE with valid base64url parts and header JSON.
    #[error("malformed JWE: {reason}")]
    JweMalformed {
        /// What was wrong with it.
        reason: String,
    },
    /// The protected header asks for something outside the profile.
    #[error("JWE header outside the profile: {reason}")]
    JweHeader {
        /// The offending header member.
        reason: String,
    },
    /// The JWE is for another key.
    #[error("JWE kid {found:?}, expected {expected:?}")]
    JweKid {
        /// The recipient's pin.
        expected: String,
        /// The header's kid.
        found: String,
    },
    /// The ephemeral public key is not a valid P-256 point.
    #[error("invalid epk: {reason}")]
    JweEpk {
        /// What was wrong with it.
        reason: String,
    },
    /// Key unwrap or authenticated decryption failed (tampered or another key).
    #[error("JWE decryption failed")]
    JweDecrypt,

    // ---- JWS / JWT ----
    /// Not a three-part compact JWS with valid parts.
    #[error("malformed JWS: {reason}")]
    JwsMalformed {
        /// What was wrong with it.
        reason: String,
    },
    /// The JWS uses another algorithm than ES256.
    #[error("JWS alg {found:?}, expected ES256")]
    JwsAlg {
        /// The header's alg.
        found: String,
    },
    /// The JWS kid is not a trusted issuer key.
    #[error("JWS kid {kid:?} is not trusted")]
    JwsUnknownKid {
        /// The header's kid.
        kid: String,
    },
    /// The JWS signature does not verify.
    #[error("bad JWS signature by {kid}")]
    JwsBadSignature {
        /// The header's kid.
        kid: String,
    },
    /// The token's claims are missing or ill-typed.
    #[error("bad token claims: {reason}")]
    TokenClaims {
        /// What was wrong with them.
        reason: String,
    },
    /// The token was issued by someone else.
    #[error("issuer {found:?}, expected {expected:?}")]
    TokenIssuer {
        /// The issuer expected.
        expected: String,
        /// The token's `iss`.
        found: String,
    },
    /// The token is for another audience.
    #[error("audience {found:?}, expected {expected:?}")]
    TokenAudience {
        /// The audience expected.
        expected: String,
        /// The token's `aud`.
        found: String,
    },
    /// The token expired at or before `now`.
    #[error("expired at {exp} (now {now})")]
    TokenExpired {
        /// The token's `exp` (Unix seconds).
        exp: i64,
        /// The time of the check (Unix seconds).
        now: i64,
    },
    /// The token was issued in the future.
    #[error("issued at {iat}, after now ({now})")]
    TokenNotYetValid {
        /// The token's `iat` (Unix seconds).
        iat: i64,
        /// The time of the check (Unix seconds).
        now: i64,
    },
    /// An exec ticket for another operation than `console`.
    #[error("ticket op {found:?}, expected \"console\"")]
    TicketOp {
        /// The ticket's `op`.
        found: String,
    },

    // ---- join ----
    /// The sealed join token's payload is not the expected JSON.
    #[error("bad sealed token payload: {reason}")]
    TokenPayload {
        /// What was wrong with it.
        reason: String,
    },
    /// The sealed token is bound to another CSR.
    #[error("sealed token bound to {bound}, presented with {presented}")]
    TokenCsrMismatch {
        /// The pin the token was sealed with.
        bound: String,
        /// The pin of the CSR presented with it.
        presented: String,
    },
    /// The JoinResponse answers another CSR.
    #[error("join response for CSR {found}, expected {expected}")]
    JoinResponseCsr {
        /// The pin of our CSR.
        expected: String,
        /// The pin in the response.
        found: String,
    },

    // ---- certificates ----
    /// A CSR that does not parse, or is not ECDSA P-256 / SHA-256.
    #[error("malformed CSR: {reason}")]
    CsrMalformed {
        /// What was wrong with it.
        reason: String,
    },
    /// A CSR whose self-signature does not verify.
    #[error("the CSR's signature does not verify")]
    CsrSignature,
    /// A certificate that does not parse or is outside the profile.
    #[error("malformed certificate: {reason}")]
    CertMalformed {
        /// What was wrong with it.
        reason: String,
    },
    /// A certificate not issued by the expected CA.
    #[error("certificate not issued by the expected CA: {reason}")]
    CertChain {
        /// What did not match.
        reason: String,
    },
    /// A certificate outside its validity at `now`.
    #[error("certificate not valid at {now_ms} (valid {not_before_ms}..{not_after_ms})")]
    CertValidity {
        /// The time of the check.
        now_ms: i64,
        /// notBefore.
        not_before_ms: i64,
        /// notAfter.
        not_after_ms: i64,
    },
    /// Certificate construction failed (an invalid name or parameter).
    #[error("cannot build certificate: {reason}")]
    CertBuild {
        /// rcgen's complaint.
        reason: String,
    },

    // ---- intent ----
    /// A command for another node.
    #[error("command for node {found:?}, this is {expected:?}")]
    CommandWrongNode {
        /// This node.
        expected: String,
        /// The command's node.
        found: String,
    },
    /// A command past its `not_after`.
    #[error("command expired at {not_after_ms} (now {now_ms})")]
    CommandExpired {
        /// The command's deadline.
        not_after_ms: i64,
        /// The time of the check.
        now_ms: i64,
    },
    /// A NodeSpec for another node.
    #[error("spec for node {found:?}, this is {expected:?}")]
    SpecWrongNode {
        /// This node.
        expected: String,
        /// The spec's node.
        found: String,
    },
    /// An unsigned NodeSpec that changes access, under `signedSpecs = access`.
    #[error("an unsigned spec may not change access")]
    SpecUnsignedAccess,
    /// A trust bundle for another trust domain.
    #[error("trust bundle for {found:?}, this is {expected:?}")]
    TrustDomain {
        /// Our trust domain.
        expected: String,
        /// The bundle's.
        found: String,
    },
    /// A trust bundle with a lower sequence than the current one.
    #[error("trust bundle sequence {found} is below the current {current}")]
    TrustRollback {
        /// The current sequence.
        current: u64,
        /// The offered sequence.
        found: u64,
    },
    /// A trust bundle not signed by enough of the current approvers.
    #[error("trust bundle signed by {valid} current approver(s), {threshold} required")]
    TrustQuorum {
        /// Valid signatures by current approvers.
        valid: usize,
        /// The current threshold.
        threshold: usize,
    },
    /// A trust bundle whose quorum cannot be met (threshold 0 or above its approvers).
    #[error("invalid quorum: threshold {threshold} of {approvers} approver(s)")]
    TrustInvalid {
        /// The bundle's threshold.
        threshold: u32,
        /// Its number of approvers.
        approvers: usize,
    },
    /// A batch approval without enough approver signatures.
    #[error("batch approved by {valid} approver(s), {threshold} required")]
    BatchUnapproved {
        /// Valid signatures by approvers.
        valid: usize,
        /// The threshold for this batch.
        threshold: usize,
    },
    /// The approval is for another batch or trust domain.
    #[error("approval for batch {found:?}, expected {expected:?}")]
    BatchMismatch {
        /// The command's batch (and trust domain).
        expected: String,
        /// The approval's.
        found: String,
    },
    /// The command is not among the approved digests.
    #[error("command {command_id} is not in the approved batch")]
    BatchCommandMissing {
        /// The command's id.
        command_id: String,
    },
    /// The approval expired.
    #[error("batch approval expired at {not_after_ms} (now {now_ms})")]
    BatchExpired {
        /// The approval's deadline.
        not_after_ms: i64,
        /// The time of the check.
        now_ms: i64,
    },

    // ---- node statements ----
    /// A node statement signed for another node.
    #[error("statement by node {found:?}, expected {expected:?}")]
    StatementWrongNode {
        /// The node whose key verified it.
        expected: String,
        /// The node the statement names.
        found: String,
    },
    /// A node statement with another body than the one expected.
    #[error("statement body {found:?}, expected {expected:?}")]
    StatementKind {
        /// The body expected.
        expected: String,
        /// The body found.
        found: String,
    },

    // ---- releases ----
    /// Fewer release keys signed than the threshold.
    #[error("release signed by {valid} pinned key(s), {threshold} required")]
    ReleaseThreshold {
        /// Valid signatures by pinned release keys.
        valid: usize,
        /// The pinned threshold.
        threshold: usize,
    },
    /// The manifest is not the expected JSON.
    #[error("malformed release manifest: {reason}")]
    ReleaseMalformed {
        /// The decoder's complaint.
        reason: String,
    },
    /// The release's sequence is below the lowest acceptable one.
    #[error("release sequence {sequence} is below the lowest acceptable {min_sequence}")]
    ReleaseSequence {
        /// The manifest's sequence.
        sequence: u64,
        /// The pinned lowest sequence.
        min_sequence: u64,
    },
    /// No artifact for this platform.
    #[error("no artifact for {os}/{arch}")]
    ReleaseMissingArtifact {
        /// The platform's OS.
        os: String,
        /// The platform's architecture.
        arch: String,
    },
    /// The artifact's bytes have another SHA-256 than the manifest says.
    #[error("artifact sha256 {found}, manifest says {expected}")]
    ReleaseDigest {
        /// The manifest's digest.
        expected: String,
        /// The bytes' digest.
        found: String,
    },
    /// The artifact's size differs from the manifest.
    #[error("artifact size {found}, manifest says {expected}")]
    ReleaseSize {
        /// The manifest's size.
        expected: u64,
        /// The bytes' size.
        found: u64,
    },

    // ---- TPM attestation ----
    /// A TPM structure that does not parse (short, trailing bytes, an unknown
    /// type) or is another structure than the one expected.
    #[error("malformed {what}: {reason}")]
    TpmMalformed {
        /// The structure (`EK public`, `quote`, …).
        what: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The EK certificate does not parse, is not issued by a configured EK
    /// root, or is not valid at the time of the check.
    #[error("the EK certificate does not chain to an EK root: {reason}")]
    EkCertificateChain {
        /// Why the last root refused it.
        reason: String,
    },
    /// The EK certificate certifies another key than the EK public area.
    #[error("the EK certificate names another key than the EK")]
    EkMismatch,
    /// The EK is not an ECC P-256 storage key (restricted, decrypt, fixedTPM,
    /// fixedParent, SHA-256 names, AES-128-CFB).
    #[error("the EK is not an ECC P-256 storage key: {reason}")]
    EkAttributes {
        /// What is wrong.
        reason: String,
    },
    /// The AK is not a restricted, fixedTPM ECC P-256 ECDSA-SHA256 signing key.
    #[error("the AK is not a restricted fixedTPM ECDSA P-256 signing key: {reason}")]
    AkAttributes {
        /// What is wrong.
        reason: String,
    },
    /// The activated secret is not the challenge's: the credential was not
    /// activated by this EK for this AK.
    #[error("the activated secret is not the challenge's")]
    Credential,
    /// The quote's signature does not verify under the AK.
    #[error("the quote is not signed by the AK")]
    QuoteSignature,
    /// The quote is over another nonce.
    #[error("the quote is over another nonce")]
    QuoteNonce,
    /// The quote selects other PCRs than SHA-256 PCRs 0–7.
    #[error("the quote selects {found}, not SHA-256 PCRs 0-7")]
    PcrSelection {
        /// The selection found (bank and indices).
        found: String,
    },
    /// The reported PCR values do not hash to the quoted PCR digest.
    #[error("the reported PCR values do not match the quoted digest")]
    PcrDigest,
    /// The certification of the node key is not signed by the AK.
    #[error("the node key's certification is not signed by the AK")]
    CertifySignature,
    /// The certification of the node key is over another nonce.
    #[error("the node key's certification is over another nonce")]
    CertifyNonce,
    /// The certification names another object than the node key.
    #[error("the certification names another object than the node key")]
    CertifyName,
    /// The certified node key is not a fixedTPM, unrestricted ECC P-256 signing key.
    #[error("the node key is not a fixedTPM ECC P-256 signing key: {reason}")]
    NodeKeyAttributes {
        /// What is wrong.
        reason: String,
    },
    /// The policy asks for a node key certified by the AK, and none is.
    #[error("the node key is not certified by the AK")]
    NodeKeyUncertified,
    /// Under the `tpm` node-key policy, the CSR's key is not the certified TPM key.
    #[error("the CSR's key is not the TPM node key certified by the AK")]
    NodeKeyNotCsr,
}

impl Error {
    /// The stable code of this refusal, identical on the Go side.
    pub fn code(&self) -> &'static str {
        match self {
            Error::BadPublicKey { .. } => "bad-public-key",
            Error::DsseMalformed { .. } => "dsse-malformed",
            Error::DssePayloadType { .. } => "dsse-payload-type",
            Error::DsseUnsigned => "dsse-unsigned",
            Error::DsseBadSignature { .. } => "dsse-bad-signature",
            Error::DsseUnknownKey { .. } => "dsse-unknown-key",
            Error::DsseThreshold { .. } => "dsse-threshold",
            Error::PayloadMalformed { .. } => "payload-malformed",
            Error::JweMalformed { .. } => "jwe-malformed",
            Error::JweHeader { .. } => "jwe-header",
            Error::JweKid { .. } => "jwe-kid",
            Error::JweEpk { .. } => "jwe-epk",
            Error::JweDecrypt => "jwe-decrypt",
            Error::JwsMalformed { .. } => "jws-malformed",
            Error::JwsAlg { .. } => "jws-alg",
            Error::JwsUnknownKid { .. } => "jws-unknown-kid",
            Error::JwsBadSignature { .. } => "jws-bad-signature",
            Error::TokenClaims { .. } => "token-claims",
            Error::TokenIssuer { .. } => "token-issuer",
            Error::TokenAudience { .. } => "token-audience",
            Error::TokenExpired { .. } => "token-expired",
            Error::TokenNotYetValid { .. } => "token-not-yet-valid",
            Error::TicketOp { .. } => "ticket-op",
            Error::TokenPayload { .. } => "token-payload",
            Error::TokenCsrMismatch { .. } => "token-csr-mismatch",
            Error::JoinResponseCsr { .. } => "join-response-csr",
            Error::CsrMalformed { .. } => "csr-malformed",
            Error::CsrSignature => "csr-signature",
            Error::CertMalformed { .. } => "cert-malformed",
            Error::CertChain { .. } => "cert-chain",
            Error::CertValidity { .. } => "cert-validity",
            Error::CertBuild { .. } => "cert-build",
            Error::CommandWrongNode { .. } => "command-wrong-node",
            Error::CommandExpired { .. } => "command-expired",
            Error::SpecWrongNode { .. } => "spec-wrong-node",
            Error::SpecUnsignedAccess => "spec-unsigned-access",
            Error::TrustDomain { .. } => "trust-domain",
            Error::TrustRollback { .. } => "trust-rollback",
            Error::TrustQuorum { .. } => "trust-quorum",
            Error::TrustInvalid { .. } => "trust-invalid",
            Error::BatchUnapproved { .. } => "batch-unapproved",
            Error::BatchMismatch { .. } => "batch-mismatch",
            Error::BatchCommandMissing { .. } => "batch-command-missing",
            Error::BatchExpired { .. } => "batch-expired",
            Error::StatementWrongNode { .. } => "statement-wrong-node",
            Error::StatementKind { .. } => "statement-kind",
            Error::ReleaseThreshold { .. } => "release-threshold",
            Error::ReleaseMalformed { .. } => "release-malformed",
            Error::ReleaseSequence { .. } => "release-sequence",
            Error::ReleaseMissingArtifact { .. } => "release-missing-artifact",
            Error::ReleaseDigest { .. } => "release-digest",
            Error::ReleaseSize { .. } => "release-size",
            Error::TpmMalformed { .. } => "tpm-malformed",
            Error::EkCertificateChain { .. } => "ek-certificate-chain",
            Error::EkMismatch => "ek-mismatch",
            Error::EkAttributes { .. } => "ek-attributes",
            Error::AkAttributes { .. } => "ak-attributes",
            Error::Credential => "credential",
            Error::QuoteSignature => "quote-signature",
            Error::QuoteNonce => "quote-nonce",
            Error::PcrSelection { .. } => "pcr-selection",
            Error::PcrDigest => "pcr-digest",
            Error::CertifySignature => "certify-signature",
            Error::CertifyNonce => "certify-nonce",
            Error::CertifyName => "certify-name",
            Error::NodeKeyAttributes { .. } => "node-key-attributes",
            Error::NodeKeyUncertified => "node-key-uncertified",
            Error::NodeKeyNotCsr => "node-key-not-csr",
        }
    }

    /// Every code, in declaration order: the list the Go side must match.
    pub const CODES: &'static [&'static str] = &[
        "bad-public-key",
        "dsse-malformed",
        "dsse-payload-type",
        "dsse-unsigned",
        "dsse-bad-signature",
        "dsse-unknown-key",
        "dsse-threshold",
        "payload-malformed",
        "jwe-malformed",
        "jwe-header",
        "jwe-kid",
        "jwe-epk",
        "jwe-decrypt",
        "jws-malformed",
        "jws-alg",
        "jws-unknown-kid",
        "jws-bad-signature",
        "token-claims",
        "token-issuer",
        "token-audience",
        "token-expired",
        "token-not-yet-valid",
        "ticket-op",
        "token-payload",
        "token-csr-mismatch",
        "join-response-csr",
        "csr-malformed",
        "csr-signature",
        "cert-malformed",
        "cert-chain",
        "cert-validity",
        "cert-build",
        "command-wrong-node",
        "command-expired",
        "spec-wrong-node",
        "spec-unsigned-access",
        "trust-domain",
        "trust-rollback",
        "trust-quorum",
        "trust-invalid",
        "batch-unapproved",
        "batch-mismatch",
        "batch-command-missing",
        "batch-expired",
        "statement-wrong-node",
        "statement-kind",
        "release-threshold",
        "release-malformed",
        "release-sequence",
        "release-missing-artifact",
        "release-digest",
        "release-size",
        "tpm-malformed",
        "ek-certificate-chain",
        "ek-mismatch",
        "ek-attributes",
        "ak-attributes",
        "credential",
        "quote-signature",
        "quote-nonce",
        "pcr-selection",
        "pcr-digest",
        "certify-signature",
        "certify-nonce",
        "certify-name",
        "node-key-attributes",
        "node-key-uncertified",
        "node-key-not-csr",
    ];
}
