// Refusals of the attestor: every one is an *Error carrying a stable Code,
// the same string Rust's pki::Error::code returns for the same defect.

package attestor

import (
	"bcd/internal/pki"
	"bcd/internal/refusal"
)

// Code is the stable code of a refusal (pki::Error::code). A Code is also a
// sentinel: errors.Is(err, CodeQuoteNonce) matches a refusal with that code.
type Code = refusal.Code

// The TPM codes are generated from proto/refusals.toml into refusals_gen.go
// (cargo xtask codegen). The CSR codes the attestor returns are package
// pki's.
const (
	CodeCSRMalformed = pki.CodeCSRMalformed
	CodeCSRSignature = pki.CodeCSRSignature
)

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
