// Errors of package pki: every refusal is an *Error carrying a stable Code,
// the same string the Rust pki crate returns for the same defect.

package pki

import "bcd/internal/refusal"

// Code is the stable code of a refusal, identical to the Rust side's
// (pki::Error::code). A Code is also a sentinel error:
// errors.Is(err, pki.CodeJWEDecrypt) reports whether err, or anything it
// wraps, is a refusal with that code.
type Code = refusal.Code

// The codes, in the order of pki::Error::CODES. Add a code on both sides at once.
const (
	CodeBadPublicKey           Code = "bad-public-key"
	CodeDSSEMalformed          Code = "dsse-malformed"
	CodeDSSEPayloadType        Code = "dsse-payload-type"
	CodeDSSEUnsigned           Code = "dsse-unsigned"
	CodeDSSEBadSignature       Code = "dsse-bad-signature"
	CodeDSSEUnknownKey         Code = "dsse-unknown-key"
	CodeDSSEThreshold          Code = "dsse-threshold"
	CodePayloadMalformed       Code = "payload-malformed"
	CodeJWEMalformed           Code = "jwe-malformed"
	CodeJWEHeader              Code = "jwe-header"
	CodeJWEKid                 Code = "jwe-kid"
	CodeJWEEPK                 Code = "jwe-epk"
	CodeJWEDecrypt             Code = "jwe-decrypt"
	CodeJWSMalformed           Code = "jws-malformed"
	CodeJWSAlg                 Code = "jws-alg"
	CodeJWSUnknownKid          Code = "jws-unknown-kid"
	CodeJWSBadSignature        Code = "jws-bad-signature"
	CodeTokenClaims            Code = "token-claims"
	CodeTokenIssuer            Code = "token-issuer"
	CodeTokenAudience          Code = "token-audience"
	CodeTokenExpired           Code = "token-expired"
	CodeTokenNotYetValid       Code = "token-not-yet-valid"
	CodeTicketOp               Code = "ticket-op"
	CodeTokenPayload           Code = "token-payload"
	CodeTokenCSRMismatch       Code = "token-csr-mismatch"
	CodeJoinResponseCSR        Code = "join-response-csr"
	CodeCSRMalformed           Code = "csr-malformed"
	CodeCSRSignature           Code = "csr-signature"
	CodeCertMalformed          Code = "cert-malformed"
	CodeCertChain              Code = "cert-chain"
	CodeCertValidity           Code = "cert-validity"
	CodeCertBuild              Code = "cert-build"
	CodeCommandWrongNode       Code = "command-wrong-node"
	CodeCommandExpired         Code = "command-expired"
	CodeSpecWrongNode          Code = "spec-wrong-node"
	CodeSpecUnsignedAccess     Code = "spec-unsigned-access"
	CodeTrustDomain            Code = "trust-domain"
	CodeTrustRollback          Code = "trust-rollback"
	CodeTrustQuorum            Code = "trust-quorum"
	CodeTrustInvalid           Code = "trust-invalid"
	CodeBatchUnapproved        Code = "batch-unapproved"
	CodeBatchMismatch          Code = "batch-mismatch"
	CodeBatchCommandMissing    Code = "batch-command-missing"
	CodeBatchExpired           Code = "batch-expired"
	CodeStatementWrongNode     Code = "statement-wrong-node"
	CodeStatementKind          Code = "statement-kind"
	CodeReleaseThreshold       Code = "release-threshold"
	CodeReleaseMalformed       Code = "release-malformed"
	CodeReleaseSequence        Code = "release-sequence"
	CodeReleaseMissingArtifact Code = "release-missing-artifact"
	CodeReleaseDigest          Code = "release-digest"
	CodeReleaseSize            Code = "release-size"
)

// Codes lists every code in the order of the Rust side's pki::Error::CODES.
var Codes = []Code{
	CodeBadPublicKey,
	CodeDSSEMalformed,
	CodeDSSEPayloadType,
	CodeDSSEUnsigned,
	CodeDSSEBadSignature,
	CodeDSSEUnknownKey,
	CodeDSSEThreshold,
	CodePayloadMalformed,
	CodeJWEMalformed,
	CodeJWEHeader,
	CodeJWEKid,
	CodeJWEEPK,
	CodeJWEDecrypt,
	CodeJWSMalformed,
	CodeJWSAlg,
	CodeJWSUnknownKid,
	CodeJWSBadSignature,
	CodeTokenClaims,
	CodeTokenIssuer,
	CodeTokenAudience,
	CodeTokenExpired,
	CodeTokenNotYetValid,
	CodeTicketOp,
	CodeTokenPayload,
	CodeTokenCSRMismatch,
	CodeJoinResponseCSR,
	CodeCSRMalformed,
	CodeCSRSignature,
	CodeCertMalformed,
	CodeCertChain,
	CodeCertValidity,
	CodeCertBuild,
	CodeCommandWrongNode,
	CodeCommandExpired,
	CodeSpecWrongNode,
	CodeSpecUnsignedAccess,
	CodeTrustDomain,
	CodeTrustRollback,
	CodeTrustQuorum,
	CodeTrustInvalid,
	CodeBatchUnapproved,
	CodeBatchMismatch,
	CodeBatchCommandMissing,
	CodeBatchExpired,
	CodeStatementWrongNode,
	CodeStatementKind,
	CodeReleaseThreshold,
	CodeReleaseMalformed,
	CodeReleaseSequence,
	CodeReleaseMissingArtifact,
	CodeReleaseDigest,
	CodeReleaseSize}

// Error is a refusal of this package (the shared refusal.Error).
type Error = refusal.Error

// CodeOf returns the code of the first refusal in err's chain, or "".
func CodeOf(err error) Code { return refusal.CodeOf(err) }

// refuse builds an *Error with a formatted reason.
func refuse(code Code, format string, args ...any) *Error {
	return refusal.New(code, format, args...)
}

// refuseWith builds an *Error that wraps a cause.
func refuseWith(code Code, cause error, reason string) *Error {
	return refusal.Wrap(code, cause, reason)
}
