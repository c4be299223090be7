// Package identity is the node's identity on disk (docs/protocol.md, "Join"):
// node.key (a PKCS#8 PEM key, or a reference to a key in the TPM; 0600),
// node.crt (the PEM chain, leaf first) and join-response.json (the latest
// signed JoinResponse, re-verified at every start) in a data dir of mode
// 0700, the trust it carries (command roots and the initial trust bundle),
// and its renewal (renewal.go).
package identity

import (
	"crypto"
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"bcd/internal/config"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/tpm"
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
	// Key signs with the current node key (in software or in the TPM); it
	// follows renewals.
	Key crypto.Signer
	// Response is the verified JoinResponse read at load.
	Response *agentv1.JoinResponse
	// Roots are the command roots (none without signed intent).
	Roots []*pki.PublicKey
	// TrustBundle is the trust bundle the JoinResponse carried (nil without).
	TrustBundle *agentv1.TrustBundle

	dataDir string
	// tpm holds a TPM identity's keys (nil for a software key).
	tpm *tpm.TPM

	mu     sync.RWMutex
	stored *storedKey
	signer crypto.Signer
	chain  [][]byte

	// sessions are the TLS sessions its dials to the gateway began (sessions.go).
	sessions sessionCache
}

// Options say how to open an identity.
type Options struct {
	// TPM opens the TPM, called only when node.key refers to a TPM key.
	TPM func() (*tpm.TPM, error)
}

// Chain is the current certificate chain (DER, leaf first).
func (id *Identity) Chain() [][]byte {
	id.mu.RLock()
	defer id.mu.RUnlock()
	return id.chain
}

// InTPM reports whether the node key lives in the TPM.
func (id *Identity) InTPM() bool { return id.tpm != nil }

// currentKey is Identity.Key: it signs with whatever key is current.
type currentKey struct{ id *Identity }

func (k currentKey) current() crypto.Signer {
	k.id.mu.RLock()
	defer k.id.mu.RUnlock()
	return k.id.signer
}

// Public implements crypto.Signer.
func (k currentKey) Public() crypto.PublicKey { return k.current().Public() }

// Sign implements crypto.Signer.
func (k currentKey) Sign(rand io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	return k.current().Sign(rand, digest, opts)
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

// CheckChain checks that a JoinResponse's chain is the leaf and the node
// CA, that the leaf is for the CSR's key (csrPin), was issued by that CA
// for client use, is valid at now and names the response's node id.
func CheckChain(r *agentv1.JoinResponse, csrPin string, now time.Time) error {
	chain := r.GetCertificateChain()
	if len(chain) < 2 {
		return fmt.Errorf("the chain has %d certificate(s), expected the leaf and the node CA", len(chain))
	}
	info, err := pki.VerifyIssued(chain[0], chain[1], pki.VerifyOptions{Usage: pki.UsageClient, At: now})
	if err != nil {
		return err
	}
	if info.Pin != csrPin {
		return errors.New("the certificate is not for the CSR's key")
	}
	if info.CommonName != r.GetNodeId() {
		return fmt.Errorf("the certificate names %q, the response %q", info.CommonName, r.GetNodeId())
	}
	return nil
}

// Save writes an identity into dataDir (created 0700): node.key (the
// software key, or the record of a *tpm.NodeKey certified by the AK at
// tpm.AKHandle), the chain and the signed response, each written
// atomically (config.WriteFilesAtomic).
func Save(dataDir string, key crypto.Signer, chain [][]byte, response *pki.Envelope) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return err
	}
	keyFile, err := encodeKey(key, tpm.AKHandle)
	if err != nil {
		return err
	}
	// The identity exists only with all three files (Exists), so one fsync
	// of the directory after the three renames is enough.
	return config.WriteFilesAtomic(dataDir,
		config.File{Name: KeyFile, Data: keyFile, Perm: 0o600},
		config.File{Name: CertFile, Data: encodeChain(chain), Perm: 0o644},
		config.File{Name: ResponseFile, Data: append(response.JSON(), '\n'), Perm: 0o644})
}

// Joined is the identity a join's verified response makes with key, as
// Open reads it back once Save wrote it to dataDir, so a process that just
// joined need not read and verify it again. It refuses a response whose
// trust does not decode (Trust). For a TPM key it returns nil: Open that
// identity (it needs the TPM).
func Joined(dataDir string, key crypto.Signer, response *agentv1.JoinResponse) (*Identity, error) {
	roots, bundle, err := Trust(response)
	if err != nil {
		return nil, err
	}
	software, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil
	}
	id := newIdentity(dataDir, response, roots, bundle, &storedKey{software: software, key: &software.PublicKey},
		response.GetCertificateChain())
	id.signer = software
	return id, nil
}

// newIdentity is the identity of a verified response with its stored key
// and chain, its Key signing with whatever signer it holds (the caller
// sets it: Joined and Open).
func newIdentity(dataDir string, response *agentv1.JoinResponse, roots []*pki.PublicKey, bundle *agentv1.TrustBundle,
	stored *storedKey, chain [][]byte) *Identity {
	id := &Identity{NodeID: response.GetNodeId(), Response: response, Roots: roots, TrustBundle: bundle,
		dataDir: dataDir, stored: stored, chain: chain}
	id.Key = currentKey{id}
	return id
}

func encodeChain(chain [][]byte) []byte {
	var certs []byte
	for _, c := range chain {
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})...)
	}
	return certs
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

// Load reads a software identity in dataDir (see Open).
func Load(dataDir string, joinSigning *pki.PublicKey) (*Identity, error) {
	return Open(dataDir, joinSigning, Options{})
}

// Open reads the identity in dataDir, first finishing or undoing an
// interrupted renewal, and re-verifies its JoinResponse against
// joinSigning and the node key's pin. A TPM node key is opened through
// opts.TPM and checked to be the key node.key records.
func Open(dataDir string, joinSigning *pki.PublicKey, opts Options) (*Identity, error) {
	if err := recoverRenewal(dataDir); err != nil {
		return nil, err
	}
	if !Exists(dataDir) {
		return nil, ErrNotJoined
	}
	keyFile, err := os.ReadFile(filepath.Join(dataDir, KeyFile))
	if err != nil {
		return nil, err
	}
	stored, err := parseKey(keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyFile, err)
	}
	pin, err := stored.pin()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", KeyFile, err)
	}
	chain, err := readChain(filepath.Join(dataDir, CertFile))
	if err != nil {
		return nil, err
	}
	envJSON, err := os.ReadFile(filepath.Join(dataDir, ResponseFile))
	if err != nil {
		return nil, err
	}
	env, err := pki.ParseEnvelopeJSON([]byte(strings.TrimSpace(string(envJSON))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ResponseFile, err)
	}
	response, err := pki.VerifyJoinResponse(env, joinSigning, pin)
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
	if leaf.Pin != pin {
		return nil, fmt.Errorf("%s: the certificate is not for %s", CertFile, KeyFile)
	}
	id := newIdentity(dataDir, response, roots, bundle, stored, chain)
	if stored.software == nil {
		if opts.TPM == nil {
			return nil, fmt.Errorf("%s: %w", KeyFile, ErrNoTPM)
		}
		if id.tpm, err = opts.TPM(); err != nil {
			return nil, fmt.Errorf("%s: opening the TPM: %w", KeyFile, err)
		}
	}
	if id.signer, err = stored.signer(id.tpm); err != nil {
		return nil, fmt.Errorf("%s: %w", KeyFile, err)
	}
	return id, nil
}

// readChain reads a PEM chain, leaf first.
func readChain(path string) ([][]byte, error) {
	certPEM, err := os.ReadFile(path)
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
		return nil, fmt.Errorf("%s: no certificate", filepath.Base(path))
	}
	return chain, nil
}
