// TLS to the gateway (docs/protocol.md, "Join" step 1): TLS 1.3, ALPN h2
// (grpc-go adds it), and the server accepted only when its chain holds a
// certificate whose SPKI pin is serving_ca_spki_pin and the leaf verifies
// under that certificate for gateway_server_name. The node's client
// certificate is read at every handshake (a dial of the session takes it
// once and resumes the identity's TLS session: sessions.go).

package identity

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"bcd/internal/pki"
)

// ErrServingPin means the gateway's chain holds no certificate with the
// pinned SPKI.
var ErrServingPin = errors.New("serving-ca-pin")

// ErrServingCert means the leaf did not verify under the pinned CA.
var ErrServingCert = errors.New("serving-certificate")

// VerifyServer returns a VerifyPeerCertificate for the pin and server name.
func VerifyServer(pin, serverName string, now func() time.Time) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return fmt.Errorf("%w: the gateway presented no certificate", ErrServingCert)
		}
		at := now()
		if lastVerified.holds(pin, serverName, raw, at) {
			return nil
		}
		for _, der := range raw {
			ca, err := pki.DescribeCertificate(der)
			if err != nil || ca.Pin != pin {
				continue
			}
			leaf, err := pki.VerifyIssued(raw[0], der, pki.VerifyOptions{Usage: pki.UsageServer, DNSName: serverName, At: at})
			if err != nil {
				return fmt.Errorf("%w: the gateway's certificate does not verify under the pinned CA for %q: %w", ErrServingCert, serverName, err)
			}
			lastVerified.remember(pin, serverName, raw[0], der, leaf, ca)
			return nil
		}
		return fmt.Errorf("%w: no certificate in the gateway's chain has the pinned SPKI %s", ErrServingPin, pin)
	}
}

// lastVerified is the gateway certificate that last verified in this
// process, so that a reconnection to the same gateway (and in bcd sim each
// of the process's agents) does not parse and verify the same bytes again:
// the outcome depends only on them, the pin, the server name and the time,
// and the time is checked against both certificates' validity.
var lastVerified verifiedPair

type verifiedPair struct {
	mu                  sync.Mutex
	pin, serverName     string
	leaf, ca            []byte
	notBefore, notAfter time.Time // when both certificates are valid
}

// holds reports whether raw presents the remembered leaf and, in its chain,
// the remembered CA, for the same pin and name, at a time both are valid.
func (v *verifiedPair) holds(pin, serverName string, raw [][]byte, at time.Time) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.leaf == nil || v.pin != pin || v.serverName != serverName || !bytes.Equal(raw[0], v.leaf) {
		return false
	}
	if at.Before(v.notBefore) || at.After(v.notAfter) {
		return false
	}
	for _, der := range raw {
		if bytes.Equal(der, v.ca) {
			return true
		}
	}
	return false
}

func (v *verifiedPair) remember(pin, serverName string, leafDER, caDER []byte, leaf, ca *pki.CertificateInfo) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.pin, v.serverName = pin, serverName
	v.leaf, v.ca = bytes.Clone(leafDER), bytes.Clone(caDER)
	v.notBefore = later(leaf.NotBefore, ca.NotBefore)
	v.notAfter = earlier(leaf.NotAfter, ca.NotAfter)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// ClientTLS is the TLS configuration for dialing the gateway; with
// certificate nil the client presents none (Join).
func ClientTLS(pin, serverName string, certificate func() (*tls.Certificate, error)) *tls.Config {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		MaxVersion: tls.VersionTLS13,
		ServerName: serverName,
		NextProtos: []string{"h2"},
		// The pin replaces the system roots: VerifyServer does all checks.
		InsecureSkipVerify:    true,
		VerifyPeerCertificate: VerifyServer(pin, serverName, time.Now),
		CurvePreferences:      agreedGroups.offer(serverName, time.Now()),
	}
	if certificate != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return certificate() }
	}
	return cfg
}

// Certificate is the identity as a TLS client certificate: the current
// chain and key, so a handshake after a renewal presents the new ones.
func (id *Identity) Certificate() *tls.Certificate {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return &tls.Certificate{Certificate: id.chain, PrivateKey: id.signer}
}

// IsCertificateRefusal reports whether err (a dial or call error, whose
// text is all grpc-go keeps) is bcd refusing the gateway's certificate:
// a refusal to report, never a failure to retry.
func IsCertificateRefusal(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrServingPin) || errors.Is(err, ErrServingCert) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, ErrServingPin.Error()+":") || strings.Contains(msg, ErrServingCert.Error()+":")
}
