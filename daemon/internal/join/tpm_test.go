// Tests of `bcd join --attestor tpm` against the in-process gateway's TPM
// attestor with a swtpm on the committed state: both rounds, node.key a
// BCD TPM NODE KEY record with no key material, the certificate naming the
// AK, "already joined", a rejoin as the same node after the identity files
// are removed, and the refusals ek-certificate-chain (another root) and
// node-key-not-csr (the CSR signed by another key), which write nothing.

package join

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"bcd/internal/config"
	"bcd/internal/identity"
	"bcd/internal/pki"
	"bcd/internal/testgw"
	"bcd/internal/tpm"
	"bcd/internal/tpm/attestor"
	"bcd/internal/tpm/tpmtest"
)

func setupTPM(t *testing.T, roots [][]byte) (*testgw.Gateway, *tpm.TPM, Options, *bytes.Buffer) {
	t.Helper()
	tp := tpmtest.Open(t)
	if roots == nil {
		roots = [][]byte{tpmtest.EKRoot(t)}
	}
	g := testgw.Start(t, testgw.Options{SignedIntent: true, TPM: &testgw.TPMOptions{Roots: roots, NodeKey: attestor.PolicyTPM}})
	path := g.WriteConfig(t, t.TempDir())
	var logs bytes.Buffer
	return g, tp, Options{ConfigPath: path, Attestor: AttestorTPM, Version: "test",
		TPM: func() (*tpm.TPM, error) { return tp, nil }, Log: slog.New(slog.NewTextHandler(&logs, nil))}, &logs
}

func TestATPMJoinKeepsTheKeyInTheTPM(t *testing.T) {
	g, tp, opts, logs := setupTPM(t, nil)
	r, err := Join(context.Background(), opts)
	if err != nil {
		t.Fatalf("%v\n%s", err, logs)
	}
	c, _ := config.Load(opts.ConfigPath)
	if c.NodeID != r.NodeID || r.NodeID != "node_1" {
		t.Fatalf("node %q, config %q", r.NodeID, c.NodeID)
	}
	b, ok := g.TPMBinding(r.NodeID)
	if !ok || b.NodeKey != attestor.PolicyTPM {
		t.Fatalf("binding %+v", b)
	}
	ek, _ := tp.EKPublic()
	if sum := sha256.Sum256(ek); b.EKSHA256 != hex.EncodeToString(sum[:]) {
		t.Fatal("the node is not bound to SHA-256(EK public)")
	}

	// node.key is a reference: the handles and the public area, nothing else.
	data, err := os.ReadFile(filepath.Join(c.DataDir, identity.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	block, rest := pem.Decode(data)
	if block == nil || block.Type != identity.TPMKeyType || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("node.key is not one %s record:\n%s", identity.TPMKeyType, data)
	}
	if block.Headers["Handle"] != "0x81000002" || block.Headers["AK-Handle"] != "0x81010002" || len(block.Headers) != 2 {
		t.Fatalf("headers %v", block.Headers)
	}
	key, err := tp.LoadNodeKey(tpm.NodeKeyHandle)
	if err != nil || !bytes.Equal(block.Bytes, key.PublicArea()) {
		t.Fatalf("the record's body is not the TPM key's public area (%v)", err)
	}
	if bytes.Contains(data, []byte("PRIVATE")) {
		t.Fatal("node.key holds a private key")
	}

	// The identity opens only with the TPM, and signs in it.
	signing, _ := identity.JoinSigningKey(c)
	if _, err := identity.Load(c.DataDir, signing); !errors.Is(err, identity.ErrNoTPM) {
		t.Fatalf("opened without a TPM: %v", err)
	}
	id, err := identity.Open(c.DataDir, signing, identity.Options{TPM: opts.TPM})
	if err != nil {
		t.Fatal(err)
	}
	if !id.InTPM() || !id.Key.Public().(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Fatal("the identity's key is not the TPM key")
	}
	leaf, _ := pki.DescribeCertificate(id.Chain()[0])
	akName := sha256.Sum256(b.AKName)
	if !slices.Contains(leaf.URIs, "urn:bc:tpm-ak:"+hex.EncodeToString(akName[:])) {
		t.Fatalf("the certificate does not name the AK: %v", leaf.URIs)
	}

	if _, err := Join(context.Background(), opts); !errors.Is(err, ErrAlreadyJoined) {
		t.Fatalf("a second run: %v", err)
	}
	if strings.Contains(logs.String(), "PRIVATE") {
		t.Fatal("key material in the log")
	}

	// A reinstall: the identity files go, the TPM stays; same EK, same node.
	for _, f := range []string{identity.KeyFile, identity.CertFile, identity.ResponseFile} {
		os.Remove(filepath.Join(c.DataDir, f))
	}
	r2, err := Join(context.Background(), opts)
	if err != nil || r2.NodeID != r.NodeID {
		t.Fatalf("rejoin: %v, node %v", err, r2)
	}
	if b, _ := g.TPMBinding(r.NodeID); b.Joins != 2 {
		t.Fatalf("the EK joined %d times", b.Joins)
	}
}

func TestAnEKCertificateFromAnotherRootIsRefused(t *testing.T) {
	other, _ := testgw.NewKeys("another manufacturer")
	_, _, opts, _ := setupTPM(t, [][]byte{other.NodeCACert})
	_, err := Join(context.Background(), opts)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "join refused: ek-certificate-chain: ") {
		t.Fatalf("got %v", err)
	}
	assertNothingWritten(t, opts.ConfigPath)
}

func TestACSRFromAnotherKeyIsRefused(t *testing.T) {
	_, _, opts, logs := setupTPM(t, nil)
	opts.TPMOtherCSRKey = true
	_, err := Join(context.Background(), opts)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "join refused: node-key-not-csr: ") {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(logs.String(), "join.tpm_other_csr_key") {
		t.Fatal("the knob is not logged")
	}
	assertNothingWritten(t, opts.ConfigPath)
}

func TestATPMJoinWithoutATPMSaysSo(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	path := g.WriteConfig(t, t.TempDir())
	if _, err := Join(context.Background(), Options{ConfigPath: path, Attestor: AttestorTPM}); !errors.Is(err, ErrNoTPM) {
		t.Fatalf("got %v", err)
	}
	if _, err := Join(context.Background(), Options{ConfigPath: path, Attestor: "dice"}); !errors.Is(err, ErrAttestor) {
		t.Fatalf("got %v", err)
	}
}

func assertNothingWritten(t *testing.T, path string) {
	t.Helper()
	if c, _ := config.Load(path); c.NodeID != "" || identity.Exists(c.DataDir) {
		t.Fatal("a refused join wrote an identity")
	}
}
