// Test helpers: a tunnels issuer and the trust bundle naming it, exec
// tickets signed with go-jose (an ES256 producer independent of the Rust
// one), and a real journal in a temporary directory.

package tunnel

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"bcd/internal/journal"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"github.com/go-jose/go-jose/v4"
)

const (
	testNode   = "node_1"
	testDomain = "compute.dev.local"
)

// issuer is a tunnels issuer and the trust it is named in.
type issuer struct {
	key    *ecdsa.PrivateKey
	bundle *agentv1.TrustBundle
}

func (i *issuer) Bundle() *agentv1.TrustBundle { return i.bundle }

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	key := newKey(t)
	pub, err := pki.NewPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return &issuer{key: key, bundle: &agentv1.TrustBundle{TrustDomain: testDomain, Sequence: 1, TunnelsIssuer: pub.Proto()}}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// claims are a valid ticket's claims for testNode at now, with jti.
func claims(now time.Time, jti string) pki.ExecTicket {
	return pki.ExecTicket{
		Iss: pki.TunnelsIssuer(testDomain), Aud: pki.TicketAudience(testNode), Sub: "user:alice", Op: pki.OpConsole,
		Iat: now.Unix(), Exp: now.Add(time.Minute).Unix(), Jti: jti,
	}
}

// sign signs c as a compact JWS by key, with key's pin as the kid.
func sign(t *testing.T, key *ecdsa.PrivateKey, c pki.ExecTicket) string {
	t.Helper()
	pub, err := pki.NewPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	opts := (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", pub.Pin())
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	token, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// openJournal opens the journal at path, closed when the test ends.
func openJournal(t *testing.T, path string) *journal.Journal {
	t.Helper()
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func tempJournal(t *testing.T) *journal.Journal {
	t.Helper()
	return openJournal(t, filepath.Join(t.TempDir(), "journal.db"))
}
