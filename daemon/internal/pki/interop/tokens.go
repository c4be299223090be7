// The token family (compact JWS, ES256): exec tickets (exec-ticket) and
// workload tokens (workload-token).
// The Go twin of fixtures/src/interop/cases/tokens.rs's verifiers.

package interop

import (
	"crypto/ecdsa"
	"encoding/json"

	"bcd/internal/pki"
)

// tokensFamily is the tokens family's verifier of each kind.
var tokensFamily = family{
	name: "tokens",
	kinds: map[string]verifier{
		"exec-ticket":    runExecTicket,
		"workload-token": runWorkloadToken,
	},
}

func runExecTicket(in *input) (Outcome, error) {
	key, token, issuer, node, at := in.p256("key"), in.string("token"), in.string("issuer"), in.string("nodeId"), in.time("at")
	if in.err != nil {
		return Outcome{}, in.err
	}
	claims, err := pki.VerifyExecTicket(token, []*ecdsa.PublicKey{&key.PublicKey}, issuer, node, at)
	return result(claims, err, func(c *pki.ExecTicket) map[string]any { return toMap(c) })
}

func runWorkloadToken(in *input) (Outcome, error) {
	key, token, issuer, audience, at := in.p256("key"), in.string("token"), in.string("issuer"), in.string("audience"), in.time("at")
	if in.err != nil {
		return Outcome{}, in.err
	}
	claims, err := pki.VerifyWorkloadToken(token, []*ecdsa.PublicKey{&key.PublicKey}, issuer, audience, at)
	return result(claims, err, func(c *pki.WorkloadToken) map[string]any { return toMap(c) })
}

// toMap turns a claims struct into its JSON object.
func toMap(v any) map[string]any {
	data, err := json.Marshal(v)
	m := map[string]any{}
	if err == nil {
		err = json.Unmarshal(data, &m)
	}
	if err != nil {
		panic("interop: claims always round-trip through JSON: " + err.Error())
	}
	return m
}
