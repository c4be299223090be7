// Native fuzz targets of the TPM structures the attestor parses from a node:
// a bare TPMT_PUBLIC and a TPMS_ATTEST (with the TPMT_SIGNATURE over it).
// Properties: what parses re-encodes to exactly the input bytes (and so has
// one name), and a refusal carries one of the attestor's codes. The seeds
// are the committed rounds of testdata/tpm/; the Rust targets in fuzz/ fuzz
// pki::tpm the same way.

package attestor

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"testing"

	"bcd/internal/refusal"
	"github.com/google/go-tpm/tpm2"
)

// tpmSeeds returns the TPMT_PUBLIC areas and the TPMS_ATTEST structures of
// the committed rounds.
func tpmSeeds(f *testing.F) (publics, attests [][]byte) {
	read := func(name string, v any) {
		data, err := os.ReadFile("../../../../testdata/tpm/" + name)
		if err == nil {
			err = json.Unmarshal(data, v)
		}
		if err != nil {
			f.Fatal(err)
		}
	}
	var r1 struct{ EKPublic, AKPublic string }
	var answer struct {
		Quote   struct{ Attest, Signature string }
		NodeKey struct {
			Public  string
			Certify struct{ Attest, Signature string }
		}
	}
	read("round1.json", &r1)
	read("answer.json", &answer)
	b64 := func(s string) []byte {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	publics = [][]byte{b64(r1.EKPublic), b64(r1.AKPublic), b64(answer.NodeKey.Public)}
	attests = [][]byte{b64(answer.Quote.Attest), b64(answer.NodeKey.Certify.Attest)}
	return publics, attests
}

func mustBeAttestorRefusal(t *testing.T, err error) {
	t.Helper()
	var r *refusal.Error
	if err == nil {
		return
	}
	if !errors.As(err, &r) {
		t.Fatalf("not a refusal: %v", err)
	}
	if _, known := refusal.Lookup(r.Code); !known {
		t.Fatalf("a refusal without a known code: %v", err)
	}
}

func FuzzPublic(f *testing.F) {
	publics, attests := tpmSeeds(f)
	for _, p := range publics {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := parsePublic(data, "public")
		mustBeAttestorRefusal(t, err)
		if err != nil {
			return
		}
		if !bytes.Equal(tpm2.Marshal(*p), data) || !bytes.Equal(name(tpm2.Marshal(*p)), name(data)) {
			t.Fatal("a parsed public area does not re-encode to its bytes")
		}
		// As an AK certifying itself over an empty certification: a refusal with a code.
		_, err = VerifyKeyCertification(data, make([]byte, 32), &CertifiedKey{Public: data, Certify: Signed{Attest: attests[1]}})
		mustBeAttestorRefusal(t, err)
	})
}

func FuzzAttest(f *testing.F) {
	_, attests := tpmSeeds(f)
	for _, a := range attests {
		f.Add(a)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, want := range []tpm2.TPMST{tpm2.TPMSTAttestQuote, tpm2.TPMSTAttestCertify} {
			a, err := parseAttest(data, want, "attest")
			mustBeAttestorRefusal(t, err)
			if err == nil && (!bytes.Equal(tpm2.Marshal(*a), data) || a.Type != want) {
				t.Fatal("a parsed attestation does not re-encode to its bytes")
			}
		}
	})
}
