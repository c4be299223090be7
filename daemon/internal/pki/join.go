// Token join (docs/formats.md, "Sealed join token"; docs/protocol.md, "Join"): the sealed join token bcd sends, bound to
// its CSR, and the signed JoinResponse it verifies.

package pki

import (
	"bytes"
	"crypto/ecdsa"
	"encoding/json"
	"time"

	"bcd/internal/proto/agentv1"
)

// SealedTokenPayload is the plaintext of a sealed join token.
type SealedTokenPayload struct {
	// Token is the plain join token (a secret: never log it).
	Token string `json:"token"`
	// CSR is the pin of the CSR's key, which binds the token to that CSR.
	CSR string `json:"csr"`
	// IAT is when bcd sealed it (Unix seconds).
	IAT int64 `json:"iat"`
}

// JSON returns the payload as the Rust side writes it: {"token","csr","iat"}.
func (p *SealedTokenPayload) JSON() []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// A struct of two strings and an integer always encodes.
	_ = enc.Encode(p)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// SealJoinToken seals token to the JoinService's encryption key, bound to
// the CSR whose pin is csrPin, issued at iat (Unix seconds).
func SealJoinToken(joinEncryption *ecdsa.PublicKey, token, csrPin string, iat int64) (string, error) {
	payload := &SealedTokenPayload{Token: token, CSR: csrPin, IAT: iat}
	return SealJWE(joinEncryption, payload.JSON())
}

// How far a sealed token's iat may be from the check, as the Rust side's
// pki::join: at most an hour before (token-stale), at most ten minutes after
// (token-not-yet-valid).
const (
	IATMaxAge  = time.Hour
	IATMaxSkew = 10 * time.Minute
)

// OpenJoinToken opens a sealed join token presented with the CSR whose pin
// is csrPin, at now: the JWE checks (jwe-*), the payload (token-payload), the
// binding (token-csr-mismatch), then iat (token-stale, token-not-yet-valid).
func OpenJoinToken(joinEncryption *ecdsa.PrivateKey, sealed, csrPin string, now time.Time) (*SealedTokenPayload, error) {
	plain, err := OpenJWE(joinEncryption, sealed)
	if err != nil {
		return nil, err
	}
	payload, err := parseSealedTokenPayload(plain)
	if err != nil {
		// The cause may quote the plaintext, which holds the token: drop it.
		return nil, refuse(CodeTokenPayload, "the payload is not {token, csr, iat}")
	}
	if payload.CSR != csrPin {
		return nil, refuse(CodeTokenCSRMismatch, "sealed token bound to %s, presented with %s", payload.CSR, csrPin)
	}
	nowS := now.Unix() // rounded down, as Rust's div_euclid
	if maxAge := int64(IATMaxAge / time.Second); payload.IAT < nowS-maxAge {
		return nil, refuse(CodeTokenStale, "sealed at %d, more than %d s before now (%d)", payload.IAT, maxAge, nowS)
	}
	if payload.IAT > nowS+int64(IATMaxSkew/time.Second) {
		return nil, refuse(CodeTokenNotYetValid, "issued at %d, after now (%d)", payload.IAT, nowS)
	}
	return payload, nil
}

func parseSealedTokenPayload(plain []byte) (*SealedTokenPayload, error) {
	obj, err := parseObject(plain, false, "token", "csr", "iat")
	if err != nil {
		return nil, err
	}
	p := &SealedTokenPayload{}
	if err := obj.requiredAll(map[string]any{"token": &p.Token, "csr": &p.CSR, "iat": &p.IAT}); err != nil {
		return nil, err
	}
	return p, nil
}

// VerifyJoinResponse verifies a JoinResponse against the pinned join-signing
// key (dsse-*), decodes it (payload-malformed) and checks that it answers
// the CSR whose pin is csrPin (join-response-csr).
func VerifyJoinResponse(env *Envelope, joinSigning *PublicKey, csrPin string) (*agentv1.JoinResponse, error) {
	payload, err := env.Verify(PayloadTypeJoinResponse, []*PublicKey{joinSigning}, 1)
	if err != nil {
		return nil, err
	}
	response := &agentv1.JoinResponse{}
	if err := decodePayload(payload, response); err != nil {
		return nil, err
	}
	if response.GetCsrPin() != csrPin {
		return nil, refuse(CodeJoinResponseCSR, "join response for CSR %s, expected %s", response.GetCsrPin(), csrPin)
	}
	return response, nil
}
