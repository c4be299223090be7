// A renewal on disk (docs/protocol.md, "Renewal"): the next node key is
// written to node.key.next before Gateway.Renew is called; the answer is
// written to join-response.json.next, then the new chain replaces node.crt
// atomically (the commit point), then the two .next files replace
// join-response.json and node.key. Open finishes a renewal that a crash
// interrupted after the commit point (node.crt is for node.key.next's key)
// and drops one interrupted before it, so nothing is lost either way: the
// node holds a matching key, chain and response at every instant.
//
// A software identity's next key is a fresh P-256 key. A TPM identity's is
// made in the TPM at the persistent handle the current key is not at, and
// the AK certifies it over SHA-256(csr_der); the current key keeps signing
// until the new chain is in.

package identity

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"bcd/internal/config"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/tpm"
)

// The files of a renewal in progress, in the data dir.
const (
	NextKeyFile      = KeyFile + ".next"
	NextResponseFile = ResponseFile + ".next"
)

// Next is a renewal in progress: the next node key, already in
// node.key.next, and what Gateway.Renew takes.
type Next struct {
	// CSR is the PKCS#10 request of the next key (CN bcd).
	CSR []byte
	// Pin is the next key's pin, which the renewed JoinResponse must carry.
	Pin string
	// NodeKey is the AK's certification of a next TPM key over
	// SHA-256(CSR); nil for a software key.
	NodeKey *agentv1.TpmCertification

	key    crypto.Signer
	stored *storedKey
}

// PrepareRenewal makes the next node key and its CSR (and, in the TPM, the
// AK's certification of it), and writes node.key.next.
func (id *Identity) PrepareRenewal() (*Next, error) {
	n := &Next{}
	id.mu.RLock()
	current := id.stored
	id.mu.RUnlock()
	ak := tpm.AKHandle
	if id.tpm == nil {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		if n.CSR, err = pki.CreateCSR(rand.Reader, key, "bcd"); err != nil {
			return nil, err
		}
		n.key = key
	} else {
		ak = current.akHandle
		r, key, err := tpm.Renew(id.tpm, ak, tpm.OtherNodeKeyHandle(current.handle), "bcd")
		if err != nil {
			return nil, fmt.Errorf("the next node key in the TPM: %w", err)
		}
		n.CSR, n.key = r.CSR, key
		n.NodeKey = &agentv1.TpmCertification{Public: r.NodeKey.Public, Attest: r.NodeKey.Certify.Attest, Signature: r.NodeKey.Certify.Signature}
	}
	csr, err := pki.ParseCSR(n.CSR)
	if err != nil {
		return nil, err
	}
	n.Pin = csr.Pin
	data, err := encodeKey(n.key, ak)
	if err != nil {
		return nil, err
	}
	if n.stored, err = parseKey(data); err != nil {
		return nil, err
	}
	if err := config.WriteFileAtomic(filepath.Join(id.dataDir, NextKeyFile), data, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", NextKeyFile, err)
	}
	return n, nil
}

// CommitRenewal stores a renewal whose response (env, with the certificate
// chain for n's key) the caller verified, and makes the new key and chain
// current: the next handshake presents them and Key signs with the new key.
func (id *Identity) CommitRenewal(n *Next, chain [][]byte, env *pki.Envelope) error {
	dir := id.dataDir
	if err := config.WriteFileAtomic(filepath.Join(dir, NextResponseFile), append(env.JSON(), '\n'), 0o644); err != nil {
		return err
	}
	if err := config.WriteFileAtomic(filepath.Join(dir, CertFile), encodeChain(chain), 0o644); err != nil {
		return err
	}
	// Committed: node.crt is for the next key.
	id.mu.Lock()
	id.stored, id.signer, id.chain = n.stored, n.key, chain
	id.mu.Unlock()
	return finishRenewal(dir)
}

// AbortRenewal settles a renewal that failed: one that did not reach its
// commit point is dropped, one that did is finished.
func (id *Identity) AbortRenewal() error { return recoverRenewal(id.dataDir) }

// finishRenewal moves the .next files in place, the response first.
func finishRenewal(dir string) error {
	err := os.Rename(filepath.Join(dir, NextResponseFile), filepath.Join(dir, ResponseFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(filepath.Join(dir, NextKeyFile), filepath.Join(dir, KeyFile)); err != nil {
		return err
	}
	return config.SyncDir(dir)
}

// recoverRenewal finishes a renewal interrupted after its commit point
// (node.crt is for node.key.next's key) and drops any other.
func recoverRenewal(dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, NextKeyFile))
	if errors.Is(err, os.ErrNotExist) {
		_ = os.Remove(filepath.Join(dir, NextResponseFile))
		return nil
	}
	if err != nil {
		return err
	}
	if committed(dir, data) {
		return finishRenewal(dir)
	}
	for _, f := range []string{NextKeyFile, NextResponseFile} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return config.SyncDir(dir)
}

// committed reports whether node.crt's leaf is for the next key's data.
func committed(dir string, nextKey []byte) bool {
	next, err := parseKey(nextKey)
	if err != nil {
		return false
	}
	pin, err := next.pin()
	if err != nil {
		return false
	}
	chain, err := readChain(filepath.Join(dir, CertFile))
	if err != nil {
		return false
	}
	leaf, err := pki.DescribeCertificate(chain[0])
	return err == nil && leaf.Pin == pin
}
