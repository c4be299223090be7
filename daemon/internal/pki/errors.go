// Errors of package pki: every refusal is an *Error carrying a stable Code,
// the same string the Rust pki crate returns for the same defect.

package pki

import "bcd/internal/refusal"

// Code is the stable code of a refusal, identical to the Rust side's
// (pki::Error::code). A Code is also a sentinel error:
// errors.Is(err, pki.CodeJWEDecrypt) reports whether err, or anything it
// wraps, is a refusal with that code.
type Code = refusal.Code

// The codes themselves are generated from proto/refusals.toml into
// refusals_gen.go (cargo xtask codegen).

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
