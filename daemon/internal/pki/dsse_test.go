// Tests of DSSE envelopes beyond the fixtures: the JSON and protobuf forms,
// and the order of the verification outcomes.

package pki

import (
	"bytes"
	"crypto"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestPAEMatchesTheSpecExample(t *testing.T) {
	if got := string(PAE("http://example.com/HelloWorld", []byte("hello world"))); got != "DSSEv1 29 http://example.com/HelloWorld 11 hello world" {
		t.Fatal(got)
	}
}

func TestEnvelopeJSONRoundTrips(t *testing.T) {
	key := DeriveEd25519("s", "k")
	env, err := SignEnvelope(nil, "t<&>", []byte("p"), key)
	if err != nil {
		t.Fatal(err)
	}
	text := env.JSON()
	if !bytes.HasPrefix(text, []byte(`{"payloadType":"t<&>","payload":"cA==","signatures":[{"keyid":"sha256:`)) {
		t.Fatalf("JSON form %s", text)
	}
	again, err := ParseEnvelopeJSON(text)
	if err != nil || !bytes.Equal(again.JSON(), text) {
		t.Fatalf("round trip: %v", err)
	}
	var viaJSON struct{ Env *Envelope }
	if err := json.Unmarshal([]byte(`{"Env":`+string(text)+`}`), &viaJSON); err != nil || !bytes.Equal(viaJSON.Env.JSON(), text) {
		t.Fatalf("json.Unmarshal: %v", err)
	}
	if got := EnvelopeFromProto(env.Proto()); !bytes.Equal(got.JSON(), text) {
		t.Fatal("protobuf round trip")
	}
	unsigned := &Envelope{PayloadType: "t", Payload: nil}
	if string(unsigned.JSON()) != `{"payloadType":"t","payload":"","signatures":[]}` {
		t.Fatalf("unsigned: %s", unsigned.JSON())
	}
}

func TestMalformedEnvelopesAreRefused(t *testing.T) {
	for _, text := range []string{
		``, `[]`, `null`,
		`{"payloadType":"t","payload":"","signatures":[],"x":1}`,
		`{"payloadType":"t","payload":""}`,
		`{"payloadType":"t","payload":"","signatures":null}`,
		`{"payloadType":"t","payload":"","signatures":[],"payload":""}`,
		`{"payloadtype":"t","payload":"","signatures":[]}`,
		`{"payloadType":"t","payload":"cA","signatures":[]}`,
		`{"payloadType":"t","payload":"","signatures":[{"keyid":"k"}]}`,
		`{"payloadType":"t","payload":"","signatures":[{"keyid":"k","sig":"","x":1}]}`,
		`{"payloadType":"t","payload":"","signatures":[{"keyid":"k","sig":"%%"}]}`,
	} {
		if _, err := ParseEnvelopeJSON([]byte(text)); !errors.Is(err, CodeDSSEMalformed) {
			t.Errorf("%s: %v", text, err)
		}
	}
}

func TestVerificationOutcomesComeInTheRustOrder(t *testing.T) {
	a, b, c := DeriveEd25519("s", "a"), DeriveEd25519("s", "b"), DeriveEd25519("s", "c")
	pa, _ := PublicKeyOf(a)
	pb, _ := PublicKeyOf(b)
	trusted := []*PublicKey{pa, pb}
	sign := func(signers ...crypto.Signer) *Envelope {
		env, err := SignEnvelope(nil, "t", []byte("p"), signers...)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	code := func(env *Envelope, typ string, threshold int) Code {
		_, err := env.Verify(typ, trusted, threshold)
		return CodeOf(err)
	}
	if code(sign(a, b), "t", 2) != "" || code(sign(c, a), "t", 1) != "" {
		t.Fatal("valid envelopes refused")
	}
	bad := sign(c, a, b)
	bad.Signatures[2].Sig[0] ^= 1
	for _, tc := range []struct {
		env       *Envelope
		typ       string
		threshold int
		want      Code
	}{
		{sign(a), "u", 1, CodeDSSEPayloadType},
		{sign(), "t", 1, CodeDSSEUnsigned},
		{sign(), "u", 1, CodeDSSEPayloadType},
		{bad, "t", 1, CodeDSSEBadSignature}, // a trusted key's failure beats the count
		{sign(c), "t", 1, CodeDSSEUnknownKey},
		{sign(a, a), "t", 2, CodeDSSEThreshold},
		{sign(a), "t", 0, ""}, // a threshold below one counts as one
	} {
		if got := code(tc.env, tc.typ, tc.threshold); got != tc.want {
			t.Errorf("%s: got %q, want %q", strings.TrimSpace(string(tc.env.JSON())), got, tc.want)
		}
	}
}
