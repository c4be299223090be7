// Package pki is the Go twin of the Rust pki crate (docs/formats.md): seeded
// key derivation, pins, DSSE envelopes, the JWE profile, ES256 tokens, join
// tokens and responses, signed intent, node statements, releases and
// certificates.
//
// Every check runs in the order the Rust crate documents, so the same defect
// gets the same refusal: an *Error whose Code is the stable string both
// languages share (refusals_gen.go, generated from proto/refusals.toml).
// The package does no I/O and reads no clock:
// every "now" is a parameter. Randomness is a parameter too where a caller
// signs (an io.Reader handed to the crypto.Signer); sealing a JWE draws from
// crypto/rand through go-jose.
package pki
