// Tests of renewals against the in-process gateway: a token node's new key
// and chain, presented by the next session; a TPM node whose AK certifies
// the next key at the other handle (and back), node.key still a TPM record;
// a refused renewal that changes nothing; a crash before and after the
// commit point; the schedule (2/3 of the validity, or BCD_RENEW_AFTER).

package renew

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bcd/internal/config"
	"bcd/internal/identity"
	"bcd/internal/join"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/testgw"
	"bcd/internal/tpm"
	"bcd/internal/tpm/attestor"
	"bcd/internal/tpm/tpmtest"
)

const token = "bc_jt_renew_test_0123456789"

type node struct {
	g   *testgw.Gateway
	c   *config.Config
	id  *identity.Identity
	cfg Config
	tpm func() (*tpm.TPM, error)
}

// joined joins a node (with the TPM when inTPM) and opens its identity.
func joined(t *testing.T, inTPM bool) *node {
	t.Helper()
	opts := testgw.Options{}
	var open func() (*tpm.TPM, error)
	if inTPM {
		tp := tpmtest.Open(t)
		open = func() (*tpm.TPM, error) { return tp, nil }
		opts.TPM = &testgw.TPMOptions{Roots: [][]byte{tpmtest.EKRoot(t)}, NodeKey: attestor.PolicyTPM}
	}
	g := testgw.Start(t, opts)
	g.AddToken(token)
	path := g.WriteConfig(t, t.TempDir())
	jo := join.Options{ConfigPath: path, Token: token}
	if inTPM {
		jo = join.Options{ConfigPath: path, Attestor: join.AttestorTPM, TPM: open}
	}
	if _, err := join.Join(context.Background(), jo); err != nil {
		t.Fatal(err)
	}
	n := &node{g: g, tpm: open}
	n.c, _ = config.Load(path)
	n.id = n.open(t)
	signing, _ := identity.JoinSigningKey(n.c)
	n.cfg = Config{Identity: n.id, Config: n.c, JoinSigning: signing}
	return n
}

func (n *node) open(t *testing.T) *identity.Identity {
	t.Helper()
	signing, _ := identity.JoinSigningKey(n.c)
	id, err := identity.Open(n.c.DataDir, signing, identity.Options{TPM: n.tpm})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func pinOf(t *testing.T, der []byte) string {
	t.Helper()
	info, err := pki.DescribeCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return info.Pin
}

func keyPin(t *testing.T, id *identity.Identity) string {
	t.Helper()
	p, err := pki.NewPublicKey(id.Key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return p.Pin()
}

// sessionPin opens a Session with the identity and returns the pin of the
// key the gateway saw in the client certificate.
func (n *node) sessionPin(t *testing.T) string {
	t.Helper()
	conn, err := identity.Dial(n.c, identity.DialOptions{Identity: n.id})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := agentv1.NewGatewayClient(conn).Session(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-n.g.Sessions:
		return s.NodeKey.Pin()
	case <-time.After(5 * time.Second):
		t.Fatal("no session")
		return ""
	}
}

func (n *node) assertNoNextFiles(t *testing.T) {
	t.Helper()
	for _, f := range []string{identity.NextKeyFile, identity.NextResponseFile} {
		if _, err := os.Stat(filepath.Join(n.c.DataDir, f)); !os.IsNotExist(err) {
			t.Fatalf("%s is left behind (%v)", f, err)
		}
	}
}

func TestATokenNodeRenewsWithANewKey(t *testing.T) {
	n := joined(t, false)
	oldPin := keyPin(t, n.id)
	if err := Once(context.Background(), n.cfg); err != nil {
		t.Fatal(err)
	}
	newPin := keyPin(t, n.id)
	if newPin == oldPin || pinOf(t, n.id.Chain()[0]) != newPin || n.g.Renewals() != 1 {
		t.Fatalf("key %s → %s, leaf %s, %d renewals", oldPin, newPin, pinOf(t, n.id.Chain()[0]), n.g.Renewals())
	}
	n.assertNoNextFiles(t)
	if again := n.open(t); keyPin(t, again) != newPin || !bytes.Equal(again.Chain()[0], n.id.Chain()[0]) {
		t.Fatal("the data dir does not hold the renewed identity")
	}
	if got := n.sessionPin(t); got != newPin {
		t.Fatalf("the next session presented %s, not the renewed key %s", got, newPin)
	}
	if _, err := pki.SignStatement(nil, n.id.Key, &agentv1.NodeStatement{NodeId: n.id.NodeID}); err != nil {
		t.Fatal(err)
	}
}

func TestATPMNodeRenewsWithTheAK(t *testing.T) {
	n := joined(t, true)
	binding, _ := n.g.TPMBinding(n.id.NodeID)
	for i, handle := range []string{"0x81000003", "0x81000002"} {
		before := keyPin(t, n.id)
		if err := Once(context.Background(), n.cfg); err != nil {
			t.Fatalf("renewal %d: %v", i+1, err)
		}
		if keyPin(t, n.id) == before {
			t.Fatalf("renewal %d kept the key", i+1)
		}
		data, _ := os.ReadFile(filepath.Join(n.c.DataDir, identity.KeyFile))
		block, _ := pem.Decode(data)
		if block == nil || block.Type != identity.TPMKeyType || block.Headers["Handle"] != handle || bytes.Contains(data, []byte("PRIVATE")) {
			t.Fatalf("renewal %d: node.key\n%s", i+1, data)
		}
		info, _ := pki.DescribeCertificate(n.id.Chain()[0])
		if !strings.Contains(strings.Join(info.URIs, " "), "urn:bc:tpm-ak:") {
			t.Fatalf("renewal %d: the certificate does not name the AK: %v", i+1, info.URIs)
		}
		if again := n.open(t); !again.InTPM() || keyPin(t, again) != keyPin(t, n.id) {
			t.Fatalf("renewal %d: the data dir does not hold the renewed TPM identity", i+1)
		}
	}
	if n.g.Renewals() != 2 {
		t.Fatalf("%d renewals", n.g.Renewals())
	}
	if b, _ := n.g.TPMBinding(n.id.NodeID); !bytes.Equal(b.AKName, binding.AKName) {
		t.Fatal("the AK changed")
	}
	if got := n.sessionPin(t); got != keyPin(t, n.id) {
		t.Fatal("the next session did not present the renewed key")
	}
	digest := make([]byte, 32)
	sig, err := n.id.Key.Sign(nil, digest, crypto.SHA256)
	if err != nil || !ecdsa.VerifyASN1(n.id.Key.Public().(*ecdsa.PublicKey), digest, sig) {
		t.Fatalf("the renewed key does not sign in the TPM: %v", err)
	}
}

func TestARefusedRenewalChangesNothing(t *testing.T) {
	n := joined(t, true)
	before := n.id.Chain()
	n.g.Revoke(n.id.NodeID)
	err := Once(context.Background(), n.cfg)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "cert-revoked: ") {
		t.Fatalf("got %v", err)
	}
	n.assertNoNextFiles(t)
	if !bytes.Equal(n.id.Chain()[0], before[0]) || !bytes.Equal(n.open(t).Chain()[0], before[0]) {
		t.Fatal("a refused renewal changed the identity")
	}
}

func TestACrashBeforeTheCommitPointKeepsTheOldIdentity(t *testing.T) {
	n := joined(t, false)
	before := keyPin(t, n.id)
	if _, err := n.id.PrepareRenewal(); err != nil {
		t.Fatal(err)
	}
	if again := n.open(t); keyPin(t, again) != before {
		t.Fatal("an uncommitted renewal was taken")
	}
	n.assertNoNextFiles(t)
}

func TestACrashAfterTheCommitPointFinishesTheRenewal(t *testing.T) {
	n := joined(t, true)
	next, err := n.id.PrepareRenewal()
	if err != nil {
		t.Fatal(err)
	}
	conn, _ := identity.Dial(n.c, identity.DialOptions{Identity: n.id})
	defer conn.Close()
	reply, err := agentv1.NewGatewayClient(conn).Renew(context.Background(), &agentv1.RenewRequest{CsrDer: next.CSR, NodeKey: next.NodeKey})
	if err != nil {
		t.Fatal(err)
	}
	env := pki.EnvelopeFromProto(reply.GetResponse())
	response, _ := pki.VerifyJoinResponse(env, n.cfg.JoinSigning, next.Pin)
	// What CommitRenewal writes up to its commit point, then a crash.
	os.WriteFile(filepath.Join(n.c.DataDir, identity.NextResponseFile), env.JSON(), 0o644)
	var certs []byte
	for _, der := range response.GetCertificateChain() {
		certs = append(certs, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	os.WriteFile(filepath.Join(n.c.DataDir, identity.CertFile), certs, 0o644)
	again := n.open(t)
	if keyPin(t, again) != next.Pin || !again.InTPM() {
		t.Fatal("the committed renewal was not finished")
	}
	n.assertNoNextFiles(t)
}

func TestTheSchedule(t *testing.T) {
	n := joined(t, false)
	leaf := n.id.Chain()[0]
	info, _ := pki.DescribeCertificate(leaf)
	c := info.Certificate
	due, err := Due(leaf, time.Now(), 0)
	if want := c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3); err != nil || !due.Equal(want) {
		t.Fatalf("due %v, want 2/3 of the validity %v (%v)", due, want, err)
	}
	since := time.Now()
	if due, _ := Due(leaf, since, 3*time.Second); !due.Equal(since.Add(3 * time.Second)) {
		t.Fatalf("due %v with BCD_RENEW_AFTER=3s", due)
	}

	// With After, Run renews every After, until its context ends.
	n.cfg.After = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Run(ctx, n.cfg); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for n.g.Renewals() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if n.g.Renewals() < 2 {
		t.Fatalf("%d renewals", n.g.Renewals())
	}
}

// With several gateways a renewal goes to the one Config.Gateway names
// (the agent's: the gateway its session is on), not to gateway_url,
// which may be gone.
func TestARenewalGoesToTheGatewayTheSessionIsOn(t *testing.T) {
	n := joined(t, false)
	other := testgw.Start(t, testgw.Options{Keys: n.g.Keys})
	n.g.Stop()
	n.cfg.Gateway = func() string { return other.URL }
	if err := Once(context.Background(), n.cfg); err != nil {
		t.Fatal(err)
	}
	if other.Renewals() != 1 || n.g.Renewals() != 0 {
		t.Fatalf("renewals: %d on the session's gateway, %d on gateway_url", other.Renewals(), n.g.Renewals())
	}
}
