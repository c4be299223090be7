// A node certificate from a foreign CA: the joined node's own name,
// serial, SANs and usages, issued by a CA of the node CA's name that no
// gateway trusts, under a fresh key. A gateway must take it at the TLS
// layer and refuse the call cert-unknown (never a TLS alert a node cannot
// act on).

package conformance

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"math/big"
	"time"
)

// foreign is the joined node's certificate, reissued by a foreign CA; it
// panics only when the target's own certificate does not parse.
func foreign(t *Target) *Node {
	n, err := foreignNode(&t.Joined)
	if err != nil {
		panic("the joined node's certificate: " + err.Error())
	}
	return n
}

func foreignNode(real *Node) (*Node, error) {
	if len(real.Chain) == 0 {
		return nil, fmt.Errorf("node %s has no certificate", real.NodeID)
	}
	leaf, err := x509.ParseCertificate(real.Chain[0])
	if err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), RawSubject: leaf.RawIssuer,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: leaf.SerialNumber, RawSubject: leaf.RawSubject, URIs: leaf.URIs,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		KeyUsage: leaf.KeyUsage, ExtKeyUsage: leaf.ExtKeyUsage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Node{NodeID: real.NodeID, Chain: [][]byte{der, caDER}, Key: pkcs8}, nil
}
