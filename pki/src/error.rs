//! The refusals of the `pki` crate, each with a stable code shared with Go.
//!
//! [`Error`] nests one enum per domain (keys, DSSE, JWE, JWS and tokens, join,
//! X.509, intent, statements, releases, TPM), the way rustls nests its errors:
//! each domain enum owns its codes, and [`Error::code`] is the one entry point
//! (what tests, fixtures and refusals on the wire use). The codes are
//! generated from `proto/refusals.toml` into [`proto::refusal::Code`] for both
//! languages: `daemon/internal/pki` and `daemon/internal/tpm/attestor` return
//! the same string for the same defect, and every negative fixture in
//! `testdata/interop.json` and `testdata/tpm/cases.json` names one.
//!
//! The file is longer than the house limit on purpose: it is ten small enums of
//! documented variants and their code tables, read side by side, and nothing
//! else.

use proto::refusal::Code;
use thiserror::Error;

/// Why `pki` refused an input: a domain's refusal. [`Error::code`] is the
/// stable, shared code; the message is the domain's.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum Error {
    /// A refusal of domain `keys`.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// A refusal of domain `dsse`.
    #[error(transparent)]
    Dsse(#[from] DsseError),
    /// A refusal of domain `jwe`.
    #[error(transparent)]
    Jwe(#[from] JweError),
    /// A refusal of domain `jws`.
    #[error(transparent)]
    Jws(#[from] JwsError),
    /// A refusal of domain `join`.
    #[error(transparent)]
    Join(#[from] JoinError),
    /// A refusal of domain `x509`.
    #[error(transparent)]
    X509(#[from] X509Error),
    /// A refusal of domain `intent`.
    #[error(transparent)]
    Intent(#[from] IntentError),
    /// A refusal of domain `statement`.
    #[error(transparent)]
    Statement(#[from] StatementError),
    /// A refusal of domain `release`.
    #[error(transparent)]
    Release(#[from] ReleaseError),
    /// A refusal of domain `tpm`.
    #[error(transparent)]
    Tpm(#[from] TpmError),
}

impl Error {
    /// The stable code of this refusal, identical on the Go side.
    pub fn code(&self) -> &'static str {
        self.refusal().as_str()
    }

    /// The code as the typed constant of `proto::refusal` (its domain and its
    /// gRPC status come with it).
    pub fn refusal(&self) -> Code {
        match self {
            Error::Key(e) => e.code(),
            Error::Dsse(e) => e.code(),
            Error::Jwe(e) => e.code(),
            Error::Jws(e) => e.code(),
            Error::Join(e) => e.code(),
            Error::X509(e) => e.code(),
            Error::Intent(e) => e.code(),
            Error::Statement(e) => e.code(),
            Error::Release(e) => e.code(),
            Error::Tpm(e) => e.code(),
        }
    }

    /// Whether `code` is one of `pki`'s codes (a domain `proto/refusals.toml`
    /// gives to `pki`): what a fixture's negative case may expect.
    pub fn is_code(code: &str) -> bool {
        Code::parse(code).is_some_and(|c| c.domain().owner() == "pki")
    }
}

/// Refusals of public keys ([`crate::keys`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A public key could not be parsed from its SubjectPublicKeyInfo.
    #[error("bad public key: {reason}")]
    BadPublicKey {
        /// What was wrong with it.
        reason: String,
    },
}

impl KeyError {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `keys`).
    pub fn code(&self) -> Code {
        match self {
            KeyError::BadPublicKey { .. } => Code::BadPublicKey,
        }
    }
}

/// Refusals of DSSE envelopes and their signed payloads ([`crate::dsse`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DsseError {
    /// The envelope is not a DSSE envelope (bad JSON, bad base64, truncated).
    #[error("malformed DSSE envelope: {reason}")]
    Malformed {
        /// What was wrong with it.
        reason: String,
    },
    /// The envelope carries another payload type than the one expected.
    #[error("payload type {found:?}, expected {expected:?}")]
    PayloadType {
        /// The type the caller expected.
        expected: String,
        /// The type the envelope carries.
        found: String,
    },
    /// The envelope carries no signature at all.
    #[error("the envelope is unsigned")]
    Unsigned,
    /// A signature by a trusted key id does not verify.
    #[error("bad signature by {keyid}")]
    BadSignature {
        /// The key id whose signature failed.
        keyid: String,
    },
    /// No signature is by a trusted key id.
    #[error("no signature by a trusted key (key ids {keyids:?})")]
    UnknownKey {
        /// The key ids the envelope carried.
        keyids: Vec<String>,
    },
    /// Fewer distinct trusted keys signed than the threshold asks.
    #[error("{valid} valid signature(s), {threshold} required")]
    Threshold {
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
}

impl DsseError {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `dsse`).
    pub fn code(&self) -> Code {
        match self {
            DsseError::Malformed { .. } => Code::DsseMalformed,
            DsseError::PayloadType { .. } => Code::DssePayloadType,
            DsseError::Unsigned => Code::DsseUnsigned,
            DsseError::BadSignature { .. } => Code::DsseBadSignature,
            DsseError::UnknownKey { .. } => Code::DsseUnknownKey,
            DsseError::Threshold { .. } => Code::DsseThreshold,
            DsseError::PayloadMalformed { .. } => Code::PayloadMalformed,
        }
    }
}

/// Refusals of compact JWE ([`crate::jwe`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum JweError {
    /// Not a five-part compact JWE with valid base64url parts and header JSON.
    #[error("malformed JWE: {reason}")]
    Malformed {
        /// What was wrong with it.
        reason: String,
    },
    /// The protected header asks for something outside the profile.
    #[error("JWE header outside the profile: {reason}")]
    Header {
        /// The offending header member.
        reason: String,
    },
    /// The JWE is for another key.
    #[error("JWE kid {found:?}, expected {expected:?}")]
    Kid {
        /// The recipient's pin.
        expected: String,
        /// The header's kid.
        found: String,
    },
    /// The ephemeral public key is not a valid P-256 point.
    #[error("invalid epk: {reason}")]
    Epk {
        /// What was wrong with it.
        reason: String,
    },
    /// Key unwrap or authenticated decryption failed (tampered or another key).
    #[error("JWE decryption failed")]
    Decrypt,
}

impl JweError {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `jwe`).
    pub fn code(&self) -> Code {
        match self {
            JweError::Malformed { .. } => Code::JweMalformed,
            JweError::Header { .. } => Code::JweHeader,
            JweError::Kid { .. } => Code::JweKid,
            JweError::Epk { .. } => Code::JweEpk,
            JweError::Decrypt => Code::JweDecrypt,
        }
    }
}

/// Refusals of compact JWS and the tokens it carries ([`crate::jws`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum JwsError {
    /// Not a three-part compact JWS with valid parts.
    #[error("malformed JWS: {reason}")]
    Malformed {
        /// What was wrong with it.
        reason: String,
    },
    /// The JWS uses another algorithm than ES256.
    #[error("JWS alg {found:?}, expected ES256")]
    Alg {
        /// The header's alg.
        found: String,
    },
    /// The protected header has a `crit` member: critical extensions, of
    /// which the verifier understands none (RFC 7515, 4.1.11).
    #[error("JWS header lists critical extensions {crit}, none of which is understood")]
    Crit {
        /// The header's `crit` value, as JSON.
        crit: String,
    },
    /// The JWS kid is not a trusted issuer key.
    #[error("JWS kid {kid:?} is not trusted")]
    UnknownKid {
        /// The header's kid.
        kid: String,
    },
    /// The JWS signature does not verify.
    #[error("bad JWS signature by {kid}")]
    BadSignature {
        /// The header's kid.
        kid: String,
    },
    /// The token's claims are missing or ill-typed.
    #[error("bad token claims: {reason}")]
    Claims {
        /// What was wrong with them.
        reason: String,
    },
    /// The token was issued by someone else.
    #[error("issuer {found:?}, expected {expected:?}")]
    Issuer {
        /// The issuer expected.
        expected: String,
        /// The token's `iss`.
        found: String,
    },
    /// The token is for another audience.
    #[error("audience {found:?}, expected {expected:?}")]
    Audience {
        /// The audience expected.
        expected: String,
        /// The token's `aud`.
        found: String,
    },
    /// The token expired at or before `now`.
    #[error("expired at {exp} (now {now})")]
    Expired {
        /// The token's `exp` (Unix seconds).
        exp: i64,
        /// The time of the check (Unix seconds).
        now: i64,
    },
    /// The token was issued in the future.
    #[error("issued at {iat}, after now ({now})")]
    NotYetValid {
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
}

impl JwsError {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `jws`).
    pub fn code(&self) -> Code {
        match self {
            JwsError::Malformed { .. } => Code::JwsMalformed,
            JwsError::Alg { .. } => Code::JwsAlg,
            JwsError::Crit { .. } => Code::JwsCrit,
            JwsError::UnknownKid { .. } => Code::JwsUnknownKid,
            JwsError::BadSignature { .. } => Code::JwsBadSignature,
            JwsError::Claims { .. } => Code::TokenClaims,
            JwsError::Issuer { .. } => Code::TokenIssuer,
            JwsError::Audience { .. } => Code::TokenAudience,
            JwsError::Expired { .. } => Code::TokenExpired,
            JwsError::NotYetValid { .. } => Code::TokenNotYetValid,
            JwsError::TicketOp { .. } => Code::TicketOp,
        }
    }
}

/// Refusals of sealed join tokens and JoinResponses ([`crate::join`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum JoinError {
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
    /// The sealed token was sealed too long ago.
    #[error("sealed at {iat}, more than {max_age_s} s before now ({now})")]
    TokenStale {
        /// Its `iat` (Unix seconds).
        iat: i64,
        /// The time of the check (Unix seconds).
        now: i64,
        /// The oldest accepted age.
        max_age_s: i64,
    },
    /// The JoinResponse answers another CSR.
    #[error("join response for CSR {found}, expected {expected}")]
    ResponseCsr {
        /// The pin of our CSR.
        expected: String,
        /// The pin in the response.
        found: String,
    },
}

impl JoinError {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `join`).
    pub fn code(&self) -> Code {
        match self {
            JoinError::TokenPayload { .. } => Code::TokenPayload,
            JoinError::TokenCsrMismatch { .. } => Code::TokenCsrMismatch,
            JoinError::TokenStale { .. } => Code::TokenStale,
            JoinError::ResponseCsr { .. } => Code::JoinResponseCsr,
        }
    }
}

/// Refusals of CSRs and certificates ([`crate::x509`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum X509Error {
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
}

impl X509Error {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `x509`).
    pub fn code(&self) -> Code {
        match self {
            X509Error::CsrMalformed { .. } => Code::CsrMalformed,
            X509Error::CsrSignature => Code::CsrSignature,
            X509Error::CertMalformed { .. } => Code::CertMalformed,
            X509Error::CertChain { .. } => Code::CertChain,
            X509Error::CertValidity { .. } => Code::CertValidity,
            X509Error::CertBuild { .. } => Code::CertBuild,
        }
    }
}

/// Refusals of signed intent: commands, specs, trust bundles, batch approvals ([`crate::intent`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum IntentError {
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
}

impl IntentError {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `intent`).
    pub fn code(&self) -> Code {
        match self {
            IntentError::CommandWrongNode { .. } => Code::CommandWrongNode,
            IntentError::CommandExpired { .. } => Code::CommandExpired,
            IntentError::SpecWrongNode { .. } => Code::SpecWrongNode,
            IntentError::SpecUnsignedAccess => Code::SpecUnsignedAccess,
            IntentError::TrustDomain { .. } => Code::TrustDomain,
            IntentError::TrustRollback { .. } => Code::TrustRollback,
            IntentError::TrustQuorum { .. } => Code::TrustQuorum,
            IntentError::TrustInvalid { .. } => Code::TrustInvalid,
            IntentError::BatchUnapproved { .. } => Code::BatchUnapproved,
            IntentError::BatchMismatch { .. } => Code::BatchMismatch,
            IntentError::BatchCommandMissing { .. } => Code::BatchCommandMissing,
            IntentError::BatchExpired { .. } => Code::BatchExpired,
        }
    }
}

/// Refusals of node-signed statements ([`crate::statement`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StatementError {
    /// A node statement signed for another node.
    #[error("statement by node {found:?}, expected {expected:?}")]
    WrongNode {
        /// The node whose key verified it.
        expected: String,
        /// The node the statement names.
        found: String,
    },
    /// A node statement with another body than the one expected.
    #[error("statement body {found:?}, expected {expected:?}")]
    Kind {
        /// The body expected.
        expected: String,
        /// The body found.
        found: String,
    },
}

impl StatementError {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `statement`).
    pub fn code(&self) -> Code {
        match self {
            StatementError::WrongNode { .. } => Code::StatementWrongNode,
            StatementError::Kind { .. } => Code::StatementKind,
        }
    }
}

/// Refusals of release manifests and artifacts ([`crate::release`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ReleaseError {
    /// Fewer release keys signed than the threshold.
    #[error("release signed by {valid} pinned key(s), {threshold} required")]
    Threshold {
        /// Valid signatures by pinned release keys.
        valid: usize,
        /// The pinned threshold.
        threshold: usize,
    },
    /// The manifest is not the expected JSON.
    #[error("malformed release manifest: {reason}")]
    Malformed {
        /// The decoder's complaint.
        reason: String,
    },
    /// The release's sequence is below the lowest acceptable one.
    #[error("release sequence {sequence} is below the lowest acceptable {min_sequence}")]
    Sequence {
        /// The manifest's sequence.
        sequence: u64,
        /// The pinned lowest sequence.
        min_sequence: u64,
    },
    /// The release's sequence is below the highest installed one.
    #[error("release sequence {sequence} is below the installed {installed}")]
    Rollback {
        /// The manifest's sequence.
        sequence: u64,
        /// The highest sequence installed.
        installed: u64,
    },
    /// The manifest is past its expiry.
    #[error("release manifest expired at {expires_at_ms}, now is {now_ms}")]
    Expired {
        /// The manifest's `expires_at_ms`.
        expires_at_ms: i64,
        /// The time of the check.
        now_ms: i64,
    },
    /// No artifact for this platform.
    #[error("no artifact for {os}/{arch}")]
    MissingArtifact {
        /// The platform's OS.
        os: String,
        /// The platform's architecture.
        arch: String,
    },
    /// The artifact's bytes have another SHA-256 than the manifest says.
    #[error("artifact sha256 {found}, manifest says {expected}")]
    Digest {
        /// The manifest's digest.
        expected: String,
        /// The bytes' digest.
        found: String,
    },
    /// The artifact's size differs from the manifest.
    #[error("artifact size {found}, manifest says {expected}")]
    Size {
        /// The manifest's size.
        expected: u64,
        /// The bytes' size.
        found: u64,
    },
}

impl ReleaseError {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `release`).
    pub fn code(&self) -> Code {
        match self {
            ReleaseError::Threshold { .. } => Code::ReleaseThreshold,
            ReleaseError::Malformed { .. } => Code::ReleaseMalformed,
            ReleaseError::Sequence { .. } => Code::ReleaseSequence,
            ReleaseError::Rollback { .. } => Code::ReleaseRollback,
            ReleaseError::Expired { .. } => Code::ReleaseExpired,
            ReleaseError::MissingArtifact { .. } => Code::ReleaseMissingArtifact,
            ReleaseError::Digest { .. } => Code::ReleaseDigest,
            ReleaseError::Size { .. } => Code::ReleaseSize,
        }
    }
}

/// Refusals of TPM attestation: both join rounds and renewal certifications ([`crate::tpm`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TpmError {
    /// A TPM structure that does not parse (short, trailing bytes, an unknown
    /// type) or is another structure than the one expected.
    #[error("malformed {what}: {reason}")]
    Malformed {
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

impl TpmError {
    /// The stable code of this refusal (`proto/refusals.toml`, domain `tpm`).
    pub fn code(&self) -> Code {
        match self {
            TpmError::Malformed { .. } => Code::TpmMalformed,
            TpmError::EkCertificateChain { .. } => Code::EkCertificateChain,
            TpmError::EkMismatch => Code::EkMismatch,
            TpmError::EkAttributes { .. } => Code::EkAttributes,
            TpmError::AkAttributes { .. } => Code::AkAttributes,
            TpmError::Credential => Code::Credential,
            TpmError::QuoteSignature => Code::QuoteSignature,
            TpmError::QuoteNonce => Code::QuoteNonce,
            TpmError::PcrSelection { .. } => Code::PcrSelection,
            TpmError::PcrDigest => Code::PcrDigest,
            TpmError::CertifySignature => Code::CertifySignature,
            TpmError::CertifyNonce => Code::CertifyNonce,
            TpmError::CertifyName => Code::CertifyName,
            TpmError::NodeKeyAttributes { .. } => Code::NodeKeyAttributes,
            TpmError::NodeKeyUncertified => Code::NodeKeyUncertified,
            TpmError::NodeKeyNotCsr => Code::NodeKeyNotCsr,
        }
    }
}

#[cfg(test)]
mod tests {
    use proto::refusal::Domain;

    use super::*;

    #[test]
    fn each_domain_enum_owns_its_codes_and_keeps_its_message() {
        let cases: Vec<(Error, &str, Domain, &str)> = vec![
            (KeyError::BadPublicKey { reason: "r".into() }.into(), "bad-public-key", Domain::Keys, "bad public key: r"),
            (
                DsseError::BadSignature { keyid: "k".into() }.into(),
                "dsse-bad-signature",
                Domain::Dsse,
                "bad signature by k",
            ),
            (JweError::Decrypt.into(), "jwe-decrypt", Domain::Jwe, "JWE decryption failed"),
            (JwsError::Expired { exp: 1, now: 2 }.into(), "token-expired", Domain::Jws, "expired at 1 (now 2)"),
            (
                JoinError::TokenCsrMismatch { bound: "a".into(), presented: "b".into() }.into(),
                "token-csr-mismatch",
                Domain::Join,
                "sealed token bound to a, presented with b",
            ),
            (X509Error::CsrSignature.into(), "csr-signature", Domain::X509, "the CSR's signature does not verify"),
            (
                IntentError::SpecUnsignedAccess.into(),
                "spec-unsigned-access",
                Domain::Intent,
                "an unsigned spec may not change access",
            ),
            (
                StatementError::Kind { expected: "a".into(), found: "b".into() }.into(),
                "statement-kind",
                Domain::Statement,
                "statement body \"b\", expected \"a\"",
            ),
            (
                ReleaseError::Size { expected: 1, found: 2 }.into(),
                "release-size",
                Domain::Release,
                "artifact size 2, manifest says 1",
            ),
            (
                TpmError::NodeKeyNotCsr.into(),
                "node-key-not-csr",
                Domain::Tpm,
                "the CSR's key is not the TPM node key certified by the AK",
            ),
        ];
        for (e, code, domain, message) in cases {
            assert_eq!(e.code(), code);
            assert_eq!(e.refusal().domain(), domain, "{code}");
            assert_eq!(e.to_string(), message);
        }
    }

    #[test]
    fn pki_codes_are_those_of_its_domains() {
        assert!(Error::is_code("dsse-unsigned") && Error::is_code("node-key-not-csr"));
        assert!(!Error::is_code("token-unknown") && !Error::is_code("update-pending") && !Error::is_code("nope"));
        let pki = proto::refusal::TABLE.iter().filter(|c| c.domain().owner() == "pki").count();
        assert_eq!(pki, 72, "a pki code was added to or removed from proto/refusals.toml: add its variant too");
    }
}
