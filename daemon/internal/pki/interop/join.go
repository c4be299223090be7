// The join family: the sealed join token (join-token), the signed
// JoinResponse (join-response) and a secret sealed to a SecretRequest's
// ephemeral key (secret-response).
// The Go twin of fixtures/src/interop/cases/join.rs's verifiers.

package interop

import (
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
)

// joinFamily is the join family's verifier of each kind.
var joinFamily = family{
	name: "join",
	kinds: map[string]verifier{
		"join-token":      runJoinToken,
		"join-response":   runJoinResponse,
		"secret-response": runSecretResponse,
	},
}

func runJoinToken(in *input) (Outcome, error) {
	key, der, sealed, at := in.p256("key"), in.bytes("csr"), in.string("jwe"), in.int("at")
	if in.err != nil {
		return Outcome{}, in.err
	}
	payload, err := func() (*pki.SealedTokenPayload, error) {
		csr, err := pki.ParseCSR(der)
		if err != nil {
			return nil, err
		}
		return pki.OpenJoinToken(key, sealed, csr.Pin, time.UnixMilli(at))
	}()
	return result(payload, err, func(p *pki.SealedTokenPayload) map[string]any {
		return map[string]any{"token": p.Token, "csr": p.CSR, "iat": p.IAT}
	})
}

func runJoinResponse(in *input) (Outcome, error) {
	key, pin, text := in.public("key"), in.string("csrPin"), in.string("envelope")
	if in.err != nil {
		return Outcome{}, in.err
	}
	response, err := withEnvelope(text, func(env *pki.Envelope) (*agentv1.JoinResponse, error) {
		return pki.VerifyJoinResponse(env, key, pin)
	})
	return result(response, err, DescribeJoinResponse)
}

func runSecretResponse(in *input) (Outcome, error) {
	key, sealed := in.p256("key"), in.string("jwe")
	if in.err != nil {
		return Outcome{}, in.err
	}
	secret, err := pki.OpenSecretResponse(key, sealed)
	return result(secret, err, func(s []byte) map[string]any { return map[string]any{"secret": std(s)} })
}
