// Refusals of the attestor: every one is an *Error carrying a stable Code,
// the same string Rust's pki::Error::code returns for the same defect.

package attestor

import "bcd/internal/refusal"

// Code is the stable code of a refusal (pki::Error::code). A Code is also a
// sentinel: errors.Is(err, CodeQuoteNonce) matches a refusal with that code.
type Code = refusal.Code

// The TPM codes, in the order of pki::Error::CODES (from tpm-malformed on).
const (
	CodeTPMMalformed       Code = "tpm-malformed"
	CodeEKCertificateChain Code = "ek-certificate-chain"
	CodeEKMismatch         Code = "ek-mismatch"
	CodeEKAttributes       Code = "ek-attributes"
	CodeAKAttributes       Code = "ak-attributes"
	CodeCredential         Code = "credential"
	CodeQuoteSignature     Code = "quote-signature"
	CodeQuoteNonce         Code = "quote-nonce"
	CodePCRSelection       Code = "pcr-selection"
	CodePCRDigest          Code = "pcr-digest"
	CodeCertifySignature   Code = "certify-signature"
	CodeCertifyNonce       Code = "certify-nonce"
	CodeCertifyName        Code = "certify-name"
	CodeNodeKeyAttributes  Code = "node-key-attributes"
	CodeNodeKeyUncertified Code = "node-key-uncertified"
	CodeNodeKeyNotCSR      Code = "node-key-not-csr"
)

// The CSR codes the attestor returns, shared with package pki.
const (
	CodeCSRMalformed Code = "csr-malformed"
	CodeCSRSignature Code = "csr-signature"
)

// Codes lists the TPM codes in the order of the tail of pki::Error::CODES.
var Codes = []Code{
	CodeTPMMalformed,
	CodeEKCertificateChain,
	CodeEKMismatch,
	CodeEKAttributes,
	CodeAKAttributes,
	CodeCredential,
	CodeQuoteSignature,
	CodeQuoteNonce,
	CodePCRSelection,
	CodePCRDigest,
	CodeCertifySignature,
	CodeCertifyNonce,
	CodeCertifyName,
	CodeNodeKeyAttributes,
	CodeNodeKeyUncertified,
	CodeNodeKeyNotCSR,
}

// Error is a refusal of this package (the shared refusal.Error).
type Error = refusal.Error

// CodeOf returns the code of the first refusal in err's chain, or "".
func CodeOf(err error) Code { return refusal.CodeOf(err) }

func refuse(code Code, format string, args ...any) *Error {
	return refusal.New(code, format, args...)
}

func refuseWith(code Code, cause error, reason string) *Error {
	return refusal.Wrap(code, cause, reason)
}
