// Tests of the exec ticket check: every refusal has pki's code (or
// ticket-replayed), the leeway is what it says, and a seen jti stays seen
// across a reopened journal until it expires.

package tunnel

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"bcd/internal/pki"
	"bcd/internal/refusal"
)

func TestTicketRefusalsHavePkiCodes(t *testing.T) {
	iss := newIssuer(t)
	now := time.Unix(1_800_000_000, 0)
	c := &Checker{NodeID: testNode, Trust: iss, Journal: tempJournal(t), Now: func() time.Time { return now }}
	expired := claims(now, "t-expired")
	expired.Iat, expired.Exp = now.Add(-2*time.Minute).Unix(), now.Add(-time.Minute).Unix()
	other := claims(now, "t-other-node")
	other.Aud = pki.TicketAudience("node_2")
	op := claims(now, "t-op")
	op.Op = "exec"
	foreign := sign(t, newKey(t), claims(now, "t-foreign"))
	noJTI := claims(now, "")
	for _, tc := range []struct {
		name  string
		token string
		want  refusal.Code
	}{
		{"expired", sign(t, iss.key, expired), pki.CodeTokenExpired},
		{"another node", sign(t, iss.key, other), pki.CodeTokenAudience},
		{"another op", sign(t, iss.key, op), pki.CodeTicketOp},
		{"a key outside the bundle", foreign, pki.CodeJWSUnknownKid},
		{"no jti", sign(t, iss.key, noJTI), pki.CodeTokenClaims},
		{"not a JWS", "not-a-ticket", pki.CodeJWSMalformed},
	} {
		_, err := c.Check(tc.token)
		if got := refusal.CodeOf(err); got != tc.want {
			t.Errorf("%s: code %q (%v), want %q", tc.name, got, err, tc.want)
		}
	}
	noBundle := &Checker{NodeID: testNode, Trust: &issuer{}, Journal: tempJournal(t), Now: c.Now}
	if _, err := noBundle.Check(sign(t, iss.key, claims(now, "t-1"))); refusal.CodeOf(err) != pki.CodeJWSUnknownKid {
		t.Errorf("without a trust bundle: %v, want jws-unknown-kid", err)
	}
}

func TestTicketLeeway(t *testing.T) {
	iss := newIssuer(t)
	now := time.Unix(1_800_000_000, 0)
	c := &Checker{NodeID: testNode, Trust: iss, Journal: tempJournal(t), Now: func() time.Time { return now }}
	within := claims(now, "t-within")
	within.Exp = now.Add(-Leeway + time.Second).Unix()
	if _, err := c.Check(sign(t, iss.key, within)); err != nil {
		t.Errorf("a ticket %v past its exp (leeway %v): %v", Leeway-time.Second, Leeway, err)
	}
	beyond := claims(now, "t-beyond")
	beyond.Exp = now.Add(-Leeway).Unix()
	if _, err := c.Check(sign(t, iss.key, beyond)); refusal.CodeOf(err) != pki.CodeTokenExpired {
		t.Errorf("a ticket %v past its exp: %v, want token-expired", Leeway, err)
	}
}

func TestReplayedTicketsAreRefusedAcrossRestartsUntilTheyExpire(t *testing.T) {
	iss := newIssuer(t)
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openJournal(t, path)
	c := &Checker{NodeID: testNode, Trust: iss, Journal: j, Now: clock}
	token := sign(t, iss.key, claims(now, "t-once"))
	got, err := c.Check(token)
	if err != nil || got.Jti != "t-once" || got.Sub != "user:alice" {
		t.Fatalf("first use: %+v, %v", got, err)
	}
	if _, err := c.Check(token); refusal.CodeOf(err) != CodeTicketReplayed {
		t.Fatalf("second use: %v, want ticket-replayed", err)
	}
	// The same ticket signed again (another signature, the same jti) is a replay too.
	if _, err := c.Check(sign(t, iss.key, claims(now, "t-once"))); refusal.CodeOf(err) != CodeTicketReplayed {
		t.Fatalf("the jti signed again: %v, want ticket-replayed", err)
	}

	// A restart: the journal reopened still knows the jti.
	j.Close()
	again := &Checker{NodeID: testNode, Trust: iss, Journal: openJournal(t, path), Now: clock}
	if _, err := again.Check(token); refusal.CodeOf(err) != CodeTicketReplayed {
		t.Fatalf("after a restart: %v, want ticket-replayed", err)
	}

	// Once it expired, its jti is forgotten when the next ticket is taken.
	now = now.Add(2 * time.Minute)
	if _, err := again.Check(sign(t, iss.key, claims(now, "t-next"))); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int64{}
	if err := json.Unmarshal(again.Journal.Get(seenKey), &seen); err != nil {
		t.Fatal(err)
	}
	if _, ok := seen["t-once"]; ok || len(seen) != 1 {
		t.Errorf("seen jtis after expiry: %v, want only t-next", seen)
	}
}
