// The gateway's keys, derived from a seed (internal/pki's DeriveP256 and
// DeriveEd25519), and its certificates: the serving CA and its leaf for
// localhost, 127.0.0.1 and gw.dev.local, and the node CA; with their pins,
// the join-signing SPKI and the join-encryption JWK a config names.

package testgw

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"math/big"
	"net"
	"time"

	"bcd/internal/pki"
)

// Keys are the gateway's keys and certificates.
type Keys struct {
	ServingCA, NodeCA         *ecdsa.PrivateKey
	ServingCACert, NodeCACert []byte
	ServingLeaf               *ecdsa.PrivateKey
	ServingLeafCert           []byte
	JoinSigning               ed25519.PrivateKey
	JoinEncryption            *ecdsa.PrivateKey
	CommandRoot               ed25519.PrivateKey
	Approvers                 []ed25519.PrivateKey
}

// NewKeys derives the keys from seed and builds the certificates.
func NewKeys(seed string) (*Keys, error) {
	k := &Keys{
		ServingCA:      pki.DeriveP256(seed, "serving-ca"),
		NodeCA:         pki.DeriveP256(seed, "node-ca"),
		ServingLeaf:    pki.DeriveP256(seed, "serving"),
		JoinSigning:    pki.DeriveEd25519(seed, "join-signing"),
		JoinEncryption: pki.DeriveP256(seed, "join-encryption"),
		CommandRoot:    pki.DeriveEd25519(seed, "command-root/0"),
		Approvers:      []ed25519.PrivateKey{pki.DeriveEd25519(seed, "approver/0"), pki.DeriveEd25519(seed, "approver/1")},
	}
	now := time.Now()
	var err error
	if k.ServingCACert, err = caCert("serving CA", k.ServingCA, now); err != nil {
		return nil, err
	}
	if k.NodeCACert, err = caCert("node CA", k.NodeCA, now); err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(k.ServingCACert)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: ServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		DNSNames:     []string{"localhost", ServerName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	k.ServingLeafCert, err = x509.CreateCertificate(rand.Reader, tmpl, ca, &k.ServingLeaf.PublicKey, k.ServingCA)
	return k, err
}

func caCert(name string, key *ecdsa.PrivateKey, now time.Time) ([]byte, error) {
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	return x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
}

func pinOf(key crypto.PublicKey) string {
	p, err := pki.NewPublicKey(key)
	if err != nil {
		panic(err)
	}
	return p.Pin()
}

// ServingCAPin is the serving CA's pin.
func (k *Keys) ServingCAPin() string { return pinOf(&k.ServingCA.PublicKey) }

// JoinSigningPin is the JoinService signing key's pin.
func (k *Keys) JoinSigningPin() string { return pinOf(k.JoinSigning.Public()) }

// JoinSigningSPKI is the signing key's SPKI in standard base64.
func (k *Keys) JoinSigningSPKI() string {
	p, _ := pki.NewPublicKey(k.JoinSigning.Public())
	return base64.StdEncoding.EncodeToString(p.SPKI())
}

// JoinEncryptionPin is the join-encryption key's pin.
func (k *Keys) JoinEncryptionPin() string { return pinOf(&k.JoinEncryption.PublicKey) }

// JWK is the join-encryption key's public JWK (with kid).
func (k *Keys) JWK() string { return pki.JWK(&k.JoinEncryption.PublicKey, k.JoinEncryptionPin()) }
