// The DSSE family: the pre-authentication encoding (pae), signing (dsse-sign) and
// verification against trusted keys and a threshold (dsse-verify).
// The Go twin of fixtures/src/interop/cases/dsse.rs's verifiers.

package interop

import "bcd/internal/pki"

// dsseFamily is the dsse family's verifier of each kind.
var dsseFamily = family{
	name: "dsse",
	kinds: map[string]verifier{
		"pae":         runPAE,
		"dsse-sign":   runDSSESign,
		"dsse-verify": runDSSEVerify,
	},
}

func runPAE(in *input) (Outcome, error) {
	typ, payload := in.string("payloadType"), in.bytes("payload")
	if in.err != nil {
		return Outcome{}, in.err
	}
	return Outcome{Value: map[string]any{"pae": std(pki.PAE(typ, payload))}}, nil
}

func runDSSESign(in *input) (Outcome, error) {
	key, typ, payload := in.ed25519("key"), in.string("payloadType"), in.bytes("payload")
	if in.err != nil {
		return Outcome{}, in.err
	}
	env, err := pki.SignEnvelope(nil, typ, payload, key)
	if err != nil {
		return Outcome{}, err
	}
	return Outcome{Value: map[string]any{"envelope": string(env.JSON())}}, nil
}

func runDSSEVerify(in *input) (Outcome, error) {
	text, trusted, typ := in.string("envelope"), in.publics("trusted"), in.string("payloadType")
	threshold := int64(1)
	if in.has("threshold") {
		threshold = in.int("threshold")
	}
	if in.err != nil {
		return Outcome{}, in.err
	}
	payload, err := withEnvelope(text, func(env *pki.Envelope) ([]byte, error) {
		return env.Verify(typ, trusted, int(threshold))
	})
	return result(payload, err, func(p []byte) map[string]any { return map[string]any{"payload": std(p)} })
}
