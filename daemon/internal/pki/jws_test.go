// Tests of the ES256 token verifier beyond the fixtures: a crit header is
// refused (RFC 7515, 4.1.11), at the place of the Rust order of checks.

package pki

import (
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"
)

// signJWS signs claims under an arbitrary header with key, ES256 (r‖s).
func signJWS(t *testing.T, key *ecdsa.PrivateKey, header string, claims any) string {
	t.Helper()
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	input := encodeURL([]byte(header)) + "." + encodeURL(payload)
	digest := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, key, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + encodeURL(sig)
}

func TestACritHeaderIsRefusedAfterAlgAndBeforeKid(t *testing.T) {
	key := DeriveP256("s", "tunnels-issuer")
	trusted := []*ecdsa.PublicKey{&key.PublicKey}
	pub, err := NewPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	kid := pub.Pin()
	ticket := ExecTicket{Iss: "tunnels", Aud: TicketAudience("node_1"), Sub: "user:alice", Op: OpConsole, Iat: 1000, Exp: 1300, Jti: "t1"}
	at := time.UnixMilli(1_100_000)
	code := func(signer *ecdsa.PrivateKey, header string) Code {
		_, err := VerifyExecTicket(signJWS(t, signer, header, ticket), trusted, "tunnels", "node_1", at)
		return CodeOf(err)
	}
	// Whatever crit lists, even nothing or something that is not a list, we understand none of it.
	for _, crit := range []string{`["exp"]`, `["b64"]`, `[]`, `"exp"`, `{}`, `0`} {
		header := `{"alg":"ES256","crit":` + crit + `,"exp":1,"kid":"` + kid + `","typ":"JWT"}`
		if got := code(key, header); got != CodeJWSCrit {
			t.Errorf("%s: %q, want %q", header, got, CodeJWSCrit)
		}
	}
	// A null member is an absent one, as for every other header member.
	if got := code(key, `{"alg":"ES256","crit":null,"kid":"`+kid+`"}`); got != "" {
		t.Errorf("crit null: %q, want accepted", got)
	}
	// The order: alg first, then crit, before the kid and the signature.
	for header, want := range map[string]Code{
		`{"alg":"HS256","crit":["exp"],"kid":"` + kid + `"}`: CodeJWSAlg,
		`{"alg":"ES256","crit":["exp"],"kid":"nobody"}`:      CodeJWSCrit,
	} {
		if got := code(key, header); got != want {
			t.Errorf("%s: %q, want %q", header, got, want)
		}
	}
	if got := code(DeriveP256("s", "x"), `{"alg":"ES256","crit":["exp"],"kid":"`+kid+`"}`); got != CodeJWSCrit {
		t.Errorf("crit under a bad signature: %q, want %q", got, CodeJWSCrit)
	}
	// Workload tokens go through the same verifier.
	claims := WorkloadToken{Iss: "wl", Aud: "vault", Sub: "instance:i", Node: "node_1", Iat: 1000, Exp: 1300}
	token := signJWS(t, key, `{"alg":"ES256","crit":["exp"],"kid":"`+kid+`"}`, claims)
	if _, err := VerifyWorkloadToken(token, trusted, "wl", "vault", at); CodeOf(err) != CodeJWSCrit {
		t.Errorf("a workload token with crit: %v", err)
	}
	plain := signJWS(t, key, `{"alg":"ES256","kid":"`+kid+`","typ":"JWT"}`, claims)
	if got, err := VerifyWorkloadToken(plain, trusted, "wl", "vault", at); err != nil || *got != claims {
		t.Errorf("the same token without crit: %+v %v", got, err)
	}
}
