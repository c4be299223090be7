// Refusals of the attestor: every one is an *Error carrying a stable Code,
// the same string Rust's pki::Error::code returns for the same defect.

package attestor

import (
	"errors"
	"fmt"
)

// Code is the stable code of a refusal (pki::Error::code). A Code is also a
// sentinel: errors.Is(err, CodeQuoteNonce) matches a refusal with that code.
type Code string

// Error returns the code itself.
func (c Code) Error() string { return string(c) }

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

// Error is a refusal: Code is the contract, Reason and Err are for humans.
type Error struct {
	// Code is the stable, shared code.
	Code Code
	// Reason says what was wrong.
	Reason string
	// Err is the underlying cause, if any.
	Err error
}

// Error returns the code, the reason and the cause.
func (e *Error) Error() string {
	msg := string(e.Code)
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is this error's Code.
func (e *Error) Is(target error) bool {
	c, ok := target.(Code)
	return ok && c == e.Code
}

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func refuse(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Reason: fmt.Sprintf(format, args...)}
}

func refuseWith(code Code, cause error, reason string) *Error {
	return &Error{Code: code, Reason: reason, Err: cause}
}
