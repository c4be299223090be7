// Package identity is the node's identity on disk (ARCHITECTURE.md, "Join"):
// node.key (PKCS#8 PEM, 0600), node.crt (the PEM chain, leaf first) and
// join-response.json (the signed JoinResponse, re-verified at every start)
// in a data dir of mode 0700, and the trust it carries: command roots and
// the initial trust bundle.
package identity

import (
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"bcd/internal/config"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
)

// The files of an identity, in the data dir.
const (
	KeyFile      = "node.key"
	CertFile     = "node.crt"
	ResponseFile = "join-response.json"
)

// ErrNotJoined means the data dir holds no identity.
var ErrNotJoined = errors.New("not joined: run `bcd join` first")

// ErrJoinSigningKey means the configuration pins the join-signing key but
// does not carry the key itself, which verifying a signature needs.
var ErrJoinSigningKey = errors.New("join-signing-key-unknown")

// Identity is a joined node's identity.
type Identity struct {
	// NodeID is the certificate's CN.
	NodeID string
	// Key is the node key.
	Key *ecdsa.PrivateKey
	// Chain is the certificate chain (DER, leaf first).
	Chain [][]byte
	// Response is the verified JoinResponse.
	Response *agentv1.JoinResponse
	// Roots are the command roots (none without signed intent).
	Roots []*pki.PublicKey
	// TrustBundle is the trust bundle the JoinResponse carried (nil without).
	TrustBundle *agentv1.TrustBundle
}

// JoinSigningKey returns the configured join-signing key, checked against
// its pin.
func JoinSigningKey(c *config.Config) (*pki.PublicKey, error) {
	if c.JoinSigningKey == "" {
		return nil, fmt.Errorf("%w: %s has join_signing_pin but no join_signing_key (the key's SPKI, base64): a pin alone cannot verify a signature",
			ErrJoinSigningKey, c.Path)
	}
	return ParsePinnedKey(c.JoinSigningKey, c.JoinSigningPin)
}

// ParsePinnedKey parses a base64 SPKI and checks it against pin.
func ParsePinnedKey(spkiB64, pin string) (*pki.PublicKey, error) {
	der, err := base64.StdEncoding.DecodeString(strings.TrimSpace(spkiB64))
	if err != nil {
		return nil, fmt.Errorf("%w: the key is not base64: %w", ErrJoinSigningKey, err)
	}
	key, err := pki.ParsePublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrJoinSigningKey, err)
	}
	if pin != "" && key.Pin() != pin {
		return nil, fmt.Errorf("%w: the key's pin %s is not the pinned %s", ErrJoinSigningKey, key.Pin(), pin)
	}
	return key, nil
}

// Trust extracts the command roots and the trust bundle of a JoinResponse.
func Trust(r *agentv1.JoinResponse) ([]*pki.PublicKey, *agentv1.TrustBundle, error) {
	var roots []*pki.PublicKey
	for _, msg := range r.GetTrust().GetCommandRoots() {
		key, err := pki.PublicKeyFromProto(msg)
		if err != nil {
			return nil, nil, fmt.Errorf("a command root: %w", err)
		}
		roots = append(roots, key)
	}
	var bundle *agentv1.TrustBundle
	if env := r.GetTrust().GetTrustBundle(); env != nil {
		// The bundle is trusted because the signed JoinResponse carries it.
		bundle = &agentv1.TrustBundle{}
		if err := unmarshal(env.GetPayload(), bundle); err != nil {
			return nil, nil, fmt.Errorf("the trust bundle: %w", err)
		}
		if env.GetPayloadType() != pki.PayloadTypeTrustBundle {
			return nil, nil, fmt.Errorf("the trust bundle has payload type %q", env.GetPayloadType())
		}
		if len(roots) == 0 {
			for _, msg := range bundle.GetCommandRoots() {
				key, err := pki.PublicKeyFromProto(msg)
				if err != nil {
					return nil, nil, fmt.Errorf("a command root of the trust bundle: %w", err)
				}
				roots = append(roots, key)
			}
		}
	}
	return roots, bundle, nil
}

// Save writes an identity into dataDir (created 0700): the key, the chain
// and the signed response, each written atomically.
func Save(dataDir string, key *ecdsa.PrivateKey, chain [][]byte, response *pki.Envelope) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := config.WriteFileAtomic(filepath.Join(dataDir, KeyFile), keyPEM, 0o600); err != nil {
		return err
	}
	var certs []byte
	for _, c := range chain {
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})...)
	}
	if err := config.WriteFileAtomic(filepath.Join(dataDir, CertFile), certs, 0o644); err != nil {
		return err
	}
	return config.WriteFileAtomic(filepath.Join(dataDir, ResponseFile), append(response.JSON(), '\n'), 0o644)
}

// Exists reports whether dataDir holds an identity.
func Exists(dataDir string) bool {
	for _, f := range []string{KeyFile, CertFile, ResponseFile} {
		if _, err := os.Stat(filepath.Join(dataDir, f)); err != nil {
			return false
		}
	}
	return true
}

// Load reads the identity in dataDir and re-verifies its JoinResponse
// against joinSigning and the node key's pin.
func Load(dataDir string, joinSigning *pki.PublicKey) (*Identity, error) {
	if !Exists(dataDir) {
		return nil, ErrNotJoined
	}
	keyPEM, err := os.ReadFile(filepath.Join(dataDir, KeyFile))
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PKCS#8 PEM key", KeyFile)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyFile, err)
	}
	key, ok := parsed.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an ECDSA key", KeyFile)
	}
	certPEM, err := os.ReadFile(filepath.Join(dataDir, CertFile))
	if err != nil {
		return nil, err
	}
	var chain [][]byte
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			chain = append(chain, b.Bytes)
		}
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("%s: no certificate", CertFile)
	}
	envJSON, err := os.ReadFile(filepath.Join(dataDir, ResponseFile))
	if err != nil {
		return nil, err
	}
	env, err := pki.ParseEnvelopeJSON([]byte(strings.TrimSpace(string(envJSON))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ResponseFile, err)
	}
	pub, err := pki.NewPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	response, err := pki.VerifyJoinResponse(env, joinSigning, pub.Pin())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ResponseFile, err)
	}
	roots, bundle, err := Trust(response)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ResponseFile, err)
	}
	leaf, err := pki.DescribeCertificate(chain[0])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", CertFile, err)
	}
	if leaf.Pin != pub.Pin() {
		return nil, fmt.Errorf("%s: the certificate is not for %s", CertFile, KeyFile)
	}
	return &Identity{NodeID: response.GetNodeId(), Key: key, Chain: chain, Response: response, Roots: roots, TrustBundle: bundle}, nil
}
