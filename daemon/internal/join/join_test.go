// Tests of `bcd join` against the in-process gateway: a join writes the
// identity with the right modes, a second run is "already joined", and a
// JoinResponse signed by another key, a serving certificate off the pin, a
// refused token and a wrong JWK are each refused; --server bootstraps from
// the well-known document; the token never reaches the log.

package join

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"bcd/internal/config"
	"bcd/internal/fakehw"
	"bcd/internal/identity"
	"bcd/internal/pki"
	"bcd/internal/retry"
	"bcd/internal/testgw"
	"google.golang.org/protobuf/proto"
)

const token = "bc_jt_secret_token_0123456789"

func setup(t *testing.T, opts testgw.Options) (*testgw.Gateway, string, *bytes.Buffer, Options) {
	t.Helper()
	g := testgw.Start(t, opts)
	g.AddToken(token)
	dir := t.TempDir()
	path := g.WriteConfig(t, dir)
	var logs bytes.Buffer
	m, err := fakehw.New(filepath.Join(dir, "data"), "41", fakehw.VariantHGXH100)
	if err != nil {
		t.Fatal(err)
	}
	return g, path, &logs, Options{ConfigPath: path, Token: token, Machine: m, Version: "test", Log: slog.New(slog.NewTextHandler(&logs, nil))}
}

func TestAJoinWritesTheIdentity(t *testing.T) {
	g, path, logs, opts := setup(t, testgw.Options{SignedIntent: true})
	r, err := Join(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := config.Load(path)
	if c.NodeID != r.NodeID || r.NodeID == "" {
		t.Fatalf("config node_id %q, result %q", c.NodeID, r.NodeID)
	}
	// The result's configuration is the file as it now reads, so that an
	// agent in this process need not read it again.
	if !reflect.DeepEqual(r.Config, c) {
		t.Fatalf("the join's configuration %+v differs from the file's %+v", r.Config, c)
	}
	for name, mode := range map[string]os.FileMode{".": 0o700, identity.KeyFile: 0o600} {
		st, err := os.Stat(filepath.Join(c.DataDir, name))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, %v", name, st.Mode().Perm(), err)
		}
	}
	signing, _ := identity.JoinSigningKey(c)
	id, err := identity.Load(c.DataDir, signing)
	if err != nil {
		t.Fatal(err)
	}
	if id.NodeID != r.NodeID || len(id.Roots) != 1 || id.TrustBundle.GetSequence() != 1 {
		t.Fatalf("identity %+v", id)
	}
	// The result's identity is the one read back, so an agent in this
	// process can take it without verifying it again.
	got := r.Identity
	if got == nil || got.NodeID != id.NodeID || len(got.Roots) != 1 || got.Roots[0].Pin() != id.Roots[0].Pin() ||
		!proto.Equal(got.TrustBundle, id.TrustBundle) || !proto.Equal(got.Response, id.Response) ||
		!slices.EqualFunc(got.Chain(), id.Chain(), bytes.Equal) ||
		!got.Key.Public().(*ecdsa.PublicKey).Equal(id.Key.Public()) || got.Certificate() == nil {
		t.Fatalf("the join's identity %+v differs from the one read back %+v", got, id)
	}
	if strings.Contains(logs.String(), token) {
		t.Fatal("the token is in the log")
	}
	if _, err := Join(context.Background(), Options{ConfigPath: path}); !errors.Is(err, ErrAlreadyJoined) {
		t.Fatalf("second run: %v", err)
	}
	if g.Joins() != 1 {
		t.Fatalf("%d Join calls", g.Joins())
	}
}

func TestABusyGatewayIsRetriedWithTheSameRequest(t *testing.T) {
	g, _, logs, opts := setup(t, testgw.Options{Shed: 2, ShedHintMs: 30})
	opts.Retry = &retry.Policy{Base: time.Millisecond, Cap: 5 * time.Millisecond, Budget: time.Minute}
	if _, err := Join(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	reqs := g.JoinRequests()
	if len(reqs) != 3 || reqs[0] != reqs[1] || reqs[1] != reqs[2] {
		t.Fatalf("three calls of one request byte for byte: %x", reqs)
	}
	if n := strings.Count(logs.String(), "join.retry"); n != 2 || !strings.Contains(logs.String(), "wait_ms=30") {
		t.Fatalf("%d retries logged, the hint honoured:\n%s", n, logs)
	}
}

func TestARefusalIsNeverRetried(t *testing.T) {
	g, _, _, opts := setup(t, testgw.Options{})
	opts.Token = "bc_jt_not_a_token_the_gateway_knows"
	_, err := Join(context.Background(), opts)
	if !errors.Is(err, ErrRefused) || g.Joins() != 1 {
		t.Fatalf("%v after %d calls", err, g.Joins())
	}
}

func TestAResponseSignedByAnotherKeyIsRefused(t *testing.T) {
	g, path, _, opts := setup(t, testgw.Options{})
	g.SignJoinResponsesWith(pki.DeriveEd25519("another", "join-signing"))
	_, err := Join(context.Background(), opts)
	if !errors.Is(err, ErrResponse) || pki.CodeOf(err) != pki.CodeDSSEUnknownKey {
		t.Fatalf("got %v", err)
	}
	if c, _ := config.Load(path); c.NodeID != "" || identity.Exists(c.DataDir) {
		t.Fatal("a refused join wrote an identity")
	}
}

func TestAServingCertificateOffThePinIsRefused(t *testing.T) {
	_, path, _, opts := setup(t, testgw.Options{})
	other, _ := testgw.NewKeys("another")
	config.Set(path, map[string]string{"serving_ca_spki_pin": other.ServingCAPin()}, nil)
	_, err := Join(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "serving-ca-pin") {
		t.Fatalf("got %v", err)
	}
}

func TestAServerNameOffTheCertificateIsRefused(t *testing.T) {
	_, path, _, opts := setup(t, testgw.Options{})
	config.Set(path, map[string]string{"gateway_server_name": "evil.example"}, nil)
	if _, err := Join(context.Background(), opts); err == nil || !strings.Contains(err.Error(), "serving-certificate") {
		t.Fatalf("got %v", err)
	}
}

func TestARefusedTokenGivesTheGatewaysCode(t *testing.T) {
	_, _, logs, opts := setup(t, testgw.Options{})
	opts.Token = "bc_jt_unknown"
	_, err := Join(context.Background(), opts)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "token-unknown: ") {
		t.Fatalf("got %v", err)
	}
	if strings.Contains(err.Error(), opts.Token) || strings.Contains(logs.String(), opts.Token) {
		t.Fatal("the token is in the error or the log")
	}
}

func TestAJWKOffItsPinIsRefused(t *testing.T) {
	_, path, _, opts := setup(t, testgw.Options{})
	other, _ := testgw.NewKeys("another")
	os.WriteFile(filepath.Join(filepath.Dir(path), config.JWKFileName), []byte(other.JWK()), 0o644)
	if _, err := Join(context.Background(), opts); !errors.Is(err, ErrPin) {
		t.Fatalf("got %v", err)
	}
}

func TestNoTokenIsRefused(t *testing.T) {
	_, _, _, opts := setup(t, testgw.Options{})
	opts.Token = " \n"
	if _, err := Join(context.Background(), opts); !errors.Is(err, ErrNoToken) {
		t.Fatalf("got %v", err)
	}
}

func wellKnown(g *testgw.Gateway, withKey bool) *httptest.Server {
	doc := map[string]any{
		"gateway": map[string]any{"url": g.URL, "serverName": testgw.ServerName, "servingCaSpkiPin": g.Keys.ServingCAPin()},
		"join": map[string]any{"signingPin": g.Keys.JoinSigningPin(), "encryptionPin": g.Keys.JoinEncryptionPin(),
			"encryptionJwk": json.RawMessage(g.Keys.JWK())},
		"trustDomain": testgw.TrustDomain,
	}
	if withKey {
		doc["join"].(map[string]any)["signingKey"] = g.Keys.JoinSigningSPKI()
	}
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != WellKnownPath {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(doc)
	}))
}

func TestServerBootstrapsFromTheWellKnownDocument(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	g.AddToken(token)
	srv := wellKnown(g, true)
	defer srv.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "etc", config.FileName)
	opts := Options{ConfigPath: path, Token: token, Server: srv.URL, TrustDocument: true}
	r, err := Join(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(path)
	if err != nil || c.NodeID != r.NodeID || c.DataDir != filepath.Join(dir, "etc", "data") || c.GatewayURL != g.URL {
		t.Fatalf("config %+v, %v", c, err)
	}
	if !reflect.DeepEqual(r.Config, c) {
		t.Fatalf("the join's configuration %+v differs from the file bootstrap wrote and the join completed %+v", r.Config, c)
	}
	if _, err := os.Stat(c.JWKPath()); err != nil {
		t.Fatal(err)
	}
	again, err := Join(context.Background(), Options{ConfigPath: path, Server: srv.URL, TrustDocument: true})
	if !errors.Is(err, ErrAlreadyJoined) || !reflect.DeepEqual(again.Config, c) {
		t.Fatalf("re-run: %v, %+v", err, again)
	}
}

func TestServerOverHTTPNeedsTrust(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	srv := wellKnown(g, true)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), config.FileName)
	_, err := Join(context.Background(), Options{ConfigPath: path, Token: token, Server: srv.URL})
	if !errors.Is(err, ErrWellKnown) {
		t.Fatalf("got %v", err)
	}
}

func TestServerWithoutTheSigningKeySaysWhy(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	g.AddToken(token)
	srv := wellKnown(g, false)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), config.FileName)
	_, err := Join(context.Background(), Options{ConfigPath: path, Token: token, Server: srv.URL, TrustDocument: true})
	if !errors.Is(err, identity.ErrJoinSigningKey) {
		t.Fatalf("got %v", err)
	}
}
