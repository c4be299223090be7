// Refusals of the tunnel package: each is a Code, a stable string that
// starts the close_reason a refused or ended tunnel carries to the gateway
// ("<code>: <detail>"). A ticket that does not verify keeps pki's codes
// (token-expired, token-audience, jws-unknown-kid, ticket-op, …); this
// package adds only what is its own (refusals_gen.go, from
// proto/refusals.toml).

package tunnel

import "bcd/internal/refusal"

// Code is a stable refusal code.
type Code = refusal.Code

// Error is a refusal of this package (the shared refusal.Error).
type Error = refusal.Error

func refuse(code Code, format string, args ...any) *Error {
	return refusal.New(code, format, args...)
}

func refuseWith(code Code, cause error, reason string) *Error {
	return refusal.Wrap(code, cause, reason)
}
