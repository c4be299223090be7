// Tests of CSRs and certificate verification beyond the fixtures: CSRs made
// through a crypto.Signer, and the usage and name checks crypto/x509 adds.

package pki

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math/big"
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

// TestDefect11UnknownCriticalExtensionsAreRefused: a critical extension
// outside understoodExtensions, in the leaf or in the CA, is cert-chain, as
// in pki/src/x509/verify.rs; the same extension not critical is ignored.
func TestDefect11UnknownCriticalExtensionsAreRefused(t *testing.T) {
	at := time.Unix(1_767_225_600, 0)
	caKey, leafKey := DeriveP256("s", "node-ca"), DeriveP256("s", "node/0")
	unknown := pkix.Extension{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 99999, 1}, Value: []byte{5, 0}}
	issue := func(ca, leaf func(*x509.Certificate)) ([]byte, []byte) {
		caTemplate := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bc node CA"},
			NotBefore: at.Add(-time.Hour), NotAfter: at.Add(time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		}
		ca(caTemplate)
		caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		leafTemplate := &x509.Certificate{
			SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node_0"},
			NotBefore: at.Add(-time.Hour), NotAfter: at.Add(time.Hour),
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		leaf(leafTemplate)
		parent, err := x509.ParseCertificate(caDER)
		if err != nil {
			t.Fatal(err)
		}
		leafDER, err := x509.CreateCertificate(rand.Reader, leafTemplate, parent, &leafKey.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return leafDER, caDER
	}
	none := func(*x509.Certificate) {}
	extend := func(critical bool) func(*x509.Certificate) {
		return func(c *x509.Certificate) {
			ext := unknown
			ext.Critical = critical
			c.ExtraExtensions = []pkix.Extension{ext}
		}
	}
	opts := VerifyOptions{Usage: UsageClient, At: at}
	leaf, ca := issue(none, extend(false))
	if _, err := VerifyIssued(leaf, ca, opts); err != nil {
		t.Fatalf("a non-critical unknown extension: %v", err)
	}
	// Name constraints: crypto/x509 understands them, the Rust side does not.
	constrained := func(c *x509.Certificate) {
		c.PermittedDNSDomainsCritical, c.PermittedDNSDomains = true, []string{"dev.local"}
	}
	for name, certs := range map[string][2]func(*x509.Certificate){
		"leaf":             {none, extend(true)},
		"CA":               {extend(true), none},
		"name constraints": {constrained, none},
	} {
		leaf, ca := issue(certs[0], certs[1])
		if _, err := VerifyIssued(leaf, ca, opts); !errors.Is(err, CodeCertChain) {
			t.Errorf("%s: %v, want cert-chain", name, err)
		}
	}
}
