// ES256 tokens (docs/formats.md, "ES256 tokens"): exec tickets (compact JWS) and workload
// tokens (JWT), verified with crypto/ecdsa. Checks, in the order of the Rust
// side's pki/src/jws.rs: three base64url parts and a JSON header
// (jws-malformed), alg ES256 (jws-alg), no crit member in the header
// (jws-crit: RFC 7515, 4.1.11 has a verifier refuse a critical extension it
// does not understand, and we understand none), a trusted kid
// (jws-unknown-kid), the signature (jws-bad-signature), the claims
// (token-claims), then iss, aud, exp, iat and, for tickets, op. As for the
// JWE header, a member that is null counts as absent.

package pki

import (
	"crypto/ecdsa"
	"crypto/sha256"
	"math/big"
	"strings"
	"time"
)

// OpConsole is the operation an exec ticket grants.
const OpConsole = "console"

// MaxSkew is how far in the future a token's iat may lie.
const MaxSkew = 60 * time.Second

// ExecTicket holds the claims of an exec ticket.
type ExecTicket struct {
	// Iss is the issuer (the tunnels issuer).
	Iss string `json:"iss"`
	// Aud is "bcd:<node-id>".
	Aud string `json:"aud"`
	// Sub is who opens the console.
	Sub string `json:"sub"`
	// Op is the operation: "console".
	Op string `json:"op"`
	// Iat is when it was issued (Unix seconds).
	Iat int64 `json:"iat"`
	// Exp is when it expires (Unix seconds).
	Exp int64 `json:"exp"`
	// Jti is the ticket id.
	Jti string `json:"jti"`
}

// WorkloadToken holds the claims of a workload token.
type WorkloadToken struct {
	// Iss is the issuer (the workload issuer).
	Iss string `json:"iss"`
	// Aud is the audience the workload asked for.
	Aud string `json:"aud"`
	// Sub is "instance:<id>".
	Sub string `json:"sub"`
	// Node is the node the instance runs on.
	Node string `json:"node"`
	// Iat is when it was issued (Unix seconds).
	Iat int64 `json:"iat"`
	// Exp is when it expires (Unix seconds).
	Exp int64 `json:"exp"`
}

// TicketAudience returns the audience of an exec ticket for nodeID.
func TicketAudience(nodeID string) string { return "bcd:" + nodeID }

// TunnelsIssuer returns the iss of the exec tickets of trustDomain's
// tunnels issuer: "https://<trust domain>/tunnels".
func TunnelsIssuer(trustDomain string) string { return "https://" + trustDomain + "/tunnels" }

// VerifyExecTicket verifies an exec ticket for nodeID from issuer at now.
func VerifyExecTicket(token string, trusted []*ecdsa.PublicKey, issuer, nodeID string, now time.Time) (*ExecTicket, error) {
	payload, err := verifyES256(token, trusted)
	if err != nil {
		return nil, err
	}
	c := &ExecTicket{}
	if err := decodeClaims(payload, map[string]any{
		"iss": &c.Iss, "aud": &c.Aud, "sub": &c.Sub, "op": &c.Op, "iat": &c.Iat, "exp": &c.Exp, "jti": &c.Jti,
	}); err != nil {
		return nil, err
	}
	if c.Iss != issuer {
		return nil, refuse(CodeTokenIssuer, "issuer %q, expected %q", c.Iss, issuer)
	}
	if aud := TicketAudience(nodeID); c.Aud != aud {
		return nil, refuse(CodeTokenAudience, "audience %q, expected %q", c.Aud, aud)
	}
	if err := checkTimes(c.Iat, c.Exp, now); err != nil {
		return nil, err
	}
	if c.Op != OpConsole {
		return nil, refuse(CodeTicketOp, "ticket op %q, expected %q", c.Op, OpConsole)
	}
	return c, nil
}

// VerifyWorkloadToken verifies a workload token for audience from issuer at now.
func VerifyWorkloadToken(token string, trusted []*ecdsa.PublicKey, issuer, audience string, now time.Time) (*WorkloadToken, error) {
	payload, err := verifyES256(token, trusted)
	if err != nil {
		return nil, err
	}
	c := &WorkloadToken{}
	if err := decodeClaims(payload, map[string]any{
		"iss": &c.Iss, "aud": &c.Aud, "sub": &c.Sub, "node": &c.Node, "iat": &c.Iat, "exp": &c.Exp,
	}); err != nil {
		return nil, err
	}
	if c.Iss != issuer {
		return nil, refuse(CodeTokenIssuer, "issuer %q, expected %q", c.Iss, issuer)
	}
	if c.Aud != audience {
		return nil, refuse(CodeTokenAudience, "audience %q, expected %q", c.Aud, audience)
	}
	if err := checkTimes(c.Iat, c.Exp, now); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(c.Sub, "instance:") {
		return nil, refuse(CodeTokenClaims, "sub %q does not name an instance", c.Sub)
	}
	return c, nil
}

// verifyES256 checks a compact JWS up to its signature and returns the
// decoded claims bytes.
func verifyES256(token string, trusted []*ecdsa.PublicKey) ([]byte, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, refuse(CodeJWSMalformed, "not three parts")
	}
	raw := make([][]byte, len(parts))
	for i, p := range parts {
		b, err := decodeURL(p)
		if err != nil {
			return nil, refuse(CodeJWSMalformed, "a part is not base64url")
		}
		raw[i] = b
	}
	var alg, kid string
	header, err := parseObject(raw[0], false, "alg", "kid", "crit")
	if err == nil {
		err = header.optionalStrings(map[string]*string{"alg": &alg, "kid": &kid})
	}
	if err != nil {
		return nil, refuseWith(CodeJWSMalformed, err, "the header is not JSON")
	}
	if alg != "ES256" {
		return nil, refuse(CodeJWSAlg, "alg %q, expected ES256", alg)
	}
	if header.present("crit") {
		return nil, refuse(CodeJWSCrit, "the header lists critical extensions %s, none of which is understood", header["crit"])
	}
	var key *ecdsa.PublicKey
	for _, k := range trusted {
		if pub, err := NewPublicKey(k); err == nil && pub.Pin() == kid {
			key = k
			break
		}
	}
	if key == nil {
		return nil, refuse(CodeJWSUnknownKid, "kid %q is not trusted", kid)
	}
	if !verifyP1363(key, []byte(parts[0]+"."+parts[1]), raw[2]) {
		return nil, refuse(CodeJWSBadSignature, "bad JWS signature by %s", kid)
	}
	return raw[1], nil
}

// verifyP1363 reports whether sig, the 64-byte r‖s of IEEE P1363 (the form
// of ES256), is key's ECDSA-SHA256 signature over msg; the Rust side's
// pki::keys::verify_p1363.
func verifyP1363(key *ecdsa.PublicKey, msg, sig []byte) bool {
	digest := sha256.Sum256(msg)
	return len(sig) == 64 &&
		ecdsa.Verify(key, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
}

// decodeClaims reads a claims object whose members are all required; other
// members are ignored.
func decodeClaims(payload []byte, members map[string]any) error {
	names := make([]string, 0, len(members))
	for name := range members {
		names = append(names, name)
	}
	obj, err := parseObject(payload, false, names...)
	if err != nil {
		return refuseWith(CodeTokenClaims, err, "the claims are not a JSON object")
	}
	if err := obj.requiredAll(members); err != nil {
		return refuseWith(CodeTokenClaims, err, "bad claims")
	}
	return nil
}

// checkTimes refuses an expired token (exp at or before now) and one issued
// more than MaxSkew in the future, in Unix seconds rounded down.
func checkTimes(iat, exp int64, now time.Time) error {
	nowS := floorDiv(now.UnixMilli(), 1000)
	if exp <= nowS {
		return refuse(CodeTokenExpired, "expired at %d (now %d)", exp, nowS)
	}
	if iat > nowS+int64(MaxSkew/time.Second) {
		return refuse(CodeTokenNotYetValid, "issued at %d, after now (%d)", iat, nowS)
	}
	return nil
}

// floorDiv divides rounding toward negative infinity, as Rust's div_euclid
// does for a positive divisor.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && (a < 0) {
		q--
	}
	return q
}
