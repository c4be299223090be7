// The Go test gateway answers every case as proto/refusals.toml says. With
// BCD_CONFORMANCE_OUT set, the answers are also written there as lines, for
// interop/tests/conformance.rs to compare with the dev stack's.

package conformance

import (
	"context"
	"os"
	"testing"
	"time"

	"bcd/internal/testgw"
)

// testgwTarget starts a test gateway and prepares its state: tokens of each
// kind, a node joined with the (now exhausted) one-use token, another node
// joined and revoked.
func testgwTarget(t *testing.T) *Target {
	g := testgw.Start(t, testgw.Options{TokenUses: 1})
	spki := g.Keys.JoinEncryption.PublicKey
	der, err := x509MarshalPKIX(&spki)
	if err != nil {
		t.Fatal(err)
	}
	target := &Target{
		GatewayURL: g.URL, ServerName: testgw.ServerName, ServingCAPin: g.Keys.ServingCAPin(), JoinEncryptionKey: der,
		Tokens: Tokens{Unknown: "never-minted", Exhausted: "one-use", Expired: "expired", Valid: "valid"},
	}
	g.AddToken(target.Tokens.Exhausted)
	g.AddToken(target.Tokens.Valid)
	g.AddToken("to-revoke")
	g.AddTokenUntil(target.Tokens.Expired, 1, time.Now().Add(-time.Second))
	// Sessions that pass authentication are handed to the test: take them,
	// and let the gateway's own checks of the first frame end them.
	go func() {
		for {
			select {
			case <-g.Sessions:
			case <-t.Context().Done():
				return
			}
		}
	}()
	ctx := context.Background()
	if target.Joined, err = JoinNode(ctx, target, target.Tokens.Exhausted); err != nil {
		t.Fatal(err)
	}
	if target.Revoked, err = JoinNode(ctx, target, "to-revoke"); err != nil {
		t.Fatal(err)
	}
	g.Revoke(target.Revoked.NodeID)
	return target
}

func TestTestgwAnswersEveryCaseAsTheList(t *testing.T) {
	results, err := Run(context.Background(), testgwTarget(t))
	if err != nil {
		t.Fatal(err)
	}
	want := Expected()
	for i, r := range results {
		t.Logf("%-40s %s", r.Case, r.Line())
		if r != want[i] {
			t.Errorf("%s: answered %s, the list says %s", r.Case, r.Line(), want[i].Line())
		}
	}
	if out := os.Getenv("BCD_CONFORMANCE_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(Lines(results)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
