// Tests of the gateway certificate check: what a remembered verification
// accepts again is exactly what a full one would.
package identity

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"testing"
	"time"

	"bcd/internal/pki"
)

// servingPair is a serving CA and a gateway certificate for localhost, both
// valid for an hour either side of at.
func servingPair(t *testing.T, at time.Time) (leaf, ca []byte) {
	t.Helper()
	return servingPairOf(t, at, "s")
}

// servingPairOf is servingPair with the keys of seed (another seed: another
// CA, another pin).
func servingPairOf(t *testing.T, at time.Time, seed string) (leaf, ca []byte) {
	t.Helper()
	caKey, leafKey := pki.DeriveP256(seed, "serving-ca"), pki.DeriveP256(seed, "gateway")
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bc serving CA"},
		NotBefore: at.Add(-time.Hour), NotAfter: at.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	ca, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := x509.ParseCertificate(ca)
	if err != nil {
		t.Fatal(err)
	}
	leafTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "gateway"}, DNSNames: []string{"localhost"},
		NotBefore: at.Add(-time.Hour), NotAfter: at.Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if leaf, err = x509.CreateCertificate(rand.Reader, leafTemplate, parent, &leafKey.PublicKey, caKey); err != nil {
		t.Fatal(err)
	}
	return leaf, ca
}

func TestARememberedGatewayCertificateIsTakenOnlyWhereAFullCheckWouldTakeIt(t *testing.T) {
	lastVerified = verifiedPair{}
	at := time.Unix(1_767_225_600, 0)
	leaf, ca := servingPair(t, at)
	info, err := pki.DescribeCertificate(ca)
	if err != nil {
		t.Fatal(err)
	}
	chain := [][]byte{leaf, ca}
	check := func(pin, name string, when time.Time, raw [][]byte) error {
		return VerifyServer(pin, name, func() time.Time { return when })(raw, nil)
	}
	if err := check(info.Pin, "localhost", at, chain); err != nil {
		t.Fatal(err)
	}
	if !lastVerified.holds(info.Pin, "localhost", chain, at) {
		t.Fatal("a verified certificate is not remembered")
	}
	if err := check(info.Pin, "localhost", at.Add(30*time.Minute), chain); err != nil {
		t.Fatalf("the remembered certificate within its validity: %v", err)
	}
	for _, tc := range []struct {
		name, pin, serverName string
		at                    time.Time
		raw                   [][]byte
		want                  error
	}{
		{"after its validity", info.Pin, "localhost", at.Add(2 * time.Hour), chain, ErrServingCert},
		{"before its validity", info.Pin, "localhost", at.Add(-2 * time.Hour), chain, ErrServingCert},
		{"for another name", info.Pin, "evil.example", at, chain, ErrServingCert},
		{"under another pin", "sha256/AAAA", "localhost", at, chain, ErrServingPin},
		{"without the pinned CA in the chain", info.Pin, "localhost", at, [][]byte{leaf}, ErrServingPin},
		{"another leaf", info.Pin, "localhost", at, [][]byte{ca, ca}, ErrServingCert},
	} {
		if err := check(tc.pin, tc.serverName, tc.at, tc.raw); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if !lastVerified.holds(info.Pin, "localhost", chain, at) {
		t.Fatal("a refusal replaced the remembered certificate")
	}
}
