// Tests of CSRs and certificate verification beyond the fixtures: CSRs made
// through a crypto.Signer, and the usage and name checks crypto/x509 adds.

package pki

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"
)

func TestCSRsRoundTripThroughAnOpaqueSigner(t *testing.T) {
	signer := opaqueSigner{DeriveP256("s", "node/0")}
	der, err := CreateCSR(rand.Reader, signer, "bcd")
	if err != nil {
		t.Fatal(err)
	}
	csr, err := ParseCSR(der)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := PublicKeyOf(signer)
	if csr.Pin != pub.Pin() || csr.Subject.CommonName != "bcd" {
		t.Fatalf("CSR %+v", csr)
	}
	der[len(der)-4] ^= 1
	if _, err := ParseCSR(der); !errors.Is(err, CodeCSRSignature) {
		t.Fatalf("tampered: %v", err)
	}
	if _, err := CreateCSR(rand.Reader, DeriveEd25519("s", "x"), "bcd"); err == nil {
		t.Fatal("an Ed25519 CSR was made")
	}
}

// fixtureCertificates reads the certificates of testdata/interop.json.
func fixtureCertificates(t *testing.T) (map[string][]byte, time.Time) {
	t.Helper()
	data, err := os.ReadFile("../../../testdata/interop.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		AsOfMs       int64             `json:"asOfMs"`
		Certificates map[string]string `json:"certificates"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for name, b64 := range doc.Certificates {
		if out[name], err = base64.StdEncoding.DecodeString(b64); err != nil {
			t.Fatal(err)
		}
	}
	return out, time.UnixMilli(doc.AsOfMs)
}

func TestCertificateUsageAndNamesAreEnforced(t *testing.T) {
	certs, asOf := fixtureCertificates(t)
	for _, tc := range []struct {
		name, leaf, ca string
		opts           VerifyOptions
		want           Code
	}{
		{"serving for its name", "serving", "servingCa", VerifyOptions{Usage: UsageServer, DNSName: "localhost"}, ""},
		{"serving for another name", "serving", "servingCa", VerifyOptions{Usage: UsageServer, DNSName: "evil.example"}, CodeCertChain},
		{"serving as a client", "serving", "servingCa", VerifyOptions{Usage: UsageClient}, CodeCertChain},
		{"node as a server", "node0", "nodeCa", VerifyOptions{Usage: UsageServer}, CodeCertChain},
		{"node as a CA", "node0", "nodeCa", VerifyOptions{Usage: UsageCA}, CodeCertChain},
		{"CA as a leaf", "nodeCa", "nodeCa", VerifyOptions{Usage: UsageClient}, CodeCertChain},
		{"CSR as a certificate", "csr0", "nodeCa", VerifyOptions{Usage: UsageClient}, CodeCertMalformed},
	} {
		tc.opts.At = asOf
		info, err := VerifyIssued(certs[tc.leaf], certs[tc.ca], tc.opts)
		if CodeOf(err) != tc.want {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
		if err == nil && (len(info.IPs) != 1 || info.IPs[0].String() != "127.0.0.1") {
			t.Errorf("%s: IPs %v", tc.name, info.IPs)
		}
	}
}
