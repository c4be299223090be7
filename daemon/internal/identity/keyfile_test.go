// Tests of node.key's forms: a TPM record round-trips to its handles and
// public key, and malformed records are refused with ErrKeyFile.

package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"testing"

	"github.com/google/go-tpm/tpm2"
)

// committedNodeKeyPublic is the node key's public area in testdata/tpm.
func committedNodeKeyPublic(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("../../../testdata/tpm/answer.json")
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		NodeKey struct {
			Public []byte `json:"public"`
		} `json:"nodeKey"`
	}
	if err := json.Unmarshal(data, &answer); err != nil {
		t.Fatal(err)
	}
	return answer.NodeKey.Public
}

func record(headers map[string]string, body []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: TPMKeyType, Headers: headers, Bytes: body})
}

func TestATPMRecordParses(t *testing.T) {
	public := committedNodeKeyPublic(t)
	k, err := parseKey(record(map[string]string{"Handle": "0x81000003", "AK-Handle": "0x81010002"}, public))
	if err != nil {
		t.Fatal(err)
	}
	if k.software != nil || k.handle != tpm2.TPMHandle(0x81000003) || k.akHandle != tpm2.TPMHandle(0x81010002) || k.key == nil {
		t.Fatalf("parsed %+v", k)
	}
	if _, err := k.signer(nil); !errors.Is(err, ErrNoTPM) {
		t.Fatalf("a TPM key without a TPM: %v", err)
	}
}

func TestMalformedKeyFilesAreRefused(t *testing.T) {
	public := committedNodeKeyPublic(t)
	soft, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	softPEM, _ := encodeKey(soft, 0)
	for name, data := range map[string][]byte{
		"empty":                   nil,
		"a transient handle":      record(map[string]string{"Handle": "0x80000001", "AK-Handle": "0x81010002"}, public),
		"no AK handle":            record(map[string]string{"Handle": "0x81000002"}, public),
		"not a public area":       record(map[string]string{"Handle": "0x81000002", "AK-Handle": "0x81010002"}, []byte("key")),
		"two blocks":              append(softPEM, softPEM...),
		"another PEM type":        pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1}}),
		"a PKCS#8 that is no key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}}),
	} {
		if _, err := parseKey(data); !errors.Is(err, ErrKeyFile) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if k, err := parseKey(softPEM); err != nil || k.software == nil {
		t.Fatalf("a software key: %v", err)
	}
}
