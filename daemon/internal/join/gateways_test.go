// Tests of the well-known document's gateways: several are written as
// gateway_urls right after gateway_url in the document's order, one or
// none writes no list, and a gateway URL bcd cannot dial, or too many,
// refuse the bootstrap before anything is written.

package join

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"bcd/internal/config"
	"bcd/internal/testgw"
)

// serveDocument serves g's well-known document with gateways (absent when nil).
func serveDocument(t *testing.T, g *testgw.Gateway, gateways []DocumentGateway) *httptest.Server {
	t.Helper()
	doc := map[string]any{
		"gateway": map[string]any{"url": g.URL, "serverName": testgw.ServerName, "servingCaSpkiPin": g.Keys.ServingCAPin()},
		"join": map[string]any{"signingPin": g.Keys.JoinSigningPin(), "signingKey": g.Keys.JoinSigningSPKI(),
			"encryptionPin": g.Keys.JoinEncryptionPin(), "encryptionJwk": json.RawMessage(g.Keys.JWK())},
		"trustDomain": testgw.TrustDomain,
	}
	if gateways != nil {
		doc["gateways"] = gateways
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != WellKnownPath {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSeveralGatewaysAreWrittenAsGatewayURLs(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	other := testgw.Start(t, testgw.Options{Keys: g.Keys})
	g.AddToken(token)
	srv := serveDocument(t, g, []DocumentGateway{{ID: "g1", URL: g.URL}, {ID: "g2", URL: other.URL}, {ID: "g3", URL: "https://gw3.example:8443"}})
	path := filepath.Join(t.TempDir(), config.FileName)
	r, err := Join(context.Background(), Options{ConfigPath: path, Token: token, Server: srv.URL, TrustDocument: true})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{g.URL, other.URL, "https://gw3.example:8443"}
	if !slices.Equal(r.Config.Gateways(), want) || r.Config.GatewayURL != g.URL {
		t.Fatalf("gateways %q, want %q", r.Config.Gateways(), want)
	}
	text, _ := os.ReadFile(path)
	lines := strings.Split(string(text), "\n")
	if lines[0] != "gateway_url = "+config.Quote(g.URL) || lines[1] != "gateway_urls = "+config.QuoteArray(want) {
		t.Fatalf("config.toml begins\n%s\n%s", lines[0], lines[1])
	}
}

func TestOneGatewayOrNoneWritesNoList(t *testing.T) {
	for name, listed := range map[string]bool{"none": false, "one": true} {
		g := testgw.Start(t, testgw.Options{})
		g.AddToken(token)
		var gateways []DocumentGateway
		if listed {
			gateways = []DocumentGateway{{ID: "g1", URL: g.URL}}
		}
		srv := serveDocument(t, g, gateways)
		path := filepath.Join(t.TempDir(), config.FileName)
		r, err := Join(context.Background(), Options{ConfigPath: path, Token: token, Server: srv.URL, TrustDocument: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		text, _ := os.ReadFile(path)
		if strings.Contains(string(text), "gateway_urls") || !slices.Equal(r.Config.Gateways(), []string{g.URL}) {
			t.Fatalf("%s: %q\n%s", name, r.Config.Gateways(), text)
		}
	}
}

// A list a person wrote before is emptied when the document lists one
// gateway: the node's gateways are the document's.
func TestAnEarlierListIsEmptiedByADocumentOfOneGateway(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	g.AddToken(token)
	srv := serveDocument(t, g, []DocumentGateway{{ID: "g1", URL: g.URL}})
	dir := t.TempDir()
	path := filepath.Join(dir, config.FileName)
	os.WriteFile(path, []byte("data_dir = \"data\"\ngateway_url = \"https://old:1\"\ngateway_urls = [\n  \"https://old:1\",\n  \"https://old:2\",\n]\nnode_id = \"\"\n"), 0o644)
	r, err := Join(context.Background(), Options{ConfigPath: path, Token: token, Server: srv.URL, TrustDocument: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Config.Gateways(), []string{g.URL}) {
		t.Fatalf("gateways %q", r.Config.Gateways())
	}
}

func TestAGatewayBcdCannotDialRefusesTheBootstrap(t *testing.T) {
	g := testgw.Start(t, testgw.Options{})
	many := make([]DocumentGateway, config.MaxGateways+1)
	for i := range many {
		many[i] = DocumentGateway{ID: "g", URL: g.URL}
	}
	for name, gateways := range map[string][]DocumentGateway{
		"no host":      {{ID: "g1", URL: g.URL}, {ID: "g2", URL: "https://"}},
		"no scheme":    {{ID: "g1", URL: g.URL}, {ID: "g2", URL: "gw2.example:443"}},
		"plain http":   {{ID: "g1", URL: g.URL}, {ID: "g2", URL: "http://gw2.example:80"}},
		"credentials":  {{ID: "g1", URL: g.URL}, {ID: "g2", URL: "https://u:p@gw2.example"}},
		"too many":     many,
		"empty url":    {{ID: "g1", URL: g.URL}, {ID: "g2"}},
		"another kind": {{ID: "g1", URL: g.URL}, {ID: "g2", URL: "wss://gw2.example/v1/session"}},
	} {
		srv := serveDocument(t, g, gateways)
		path := filepath.Join(t.TempDir(), config.FileName)
		_, err := Join(context.Background(), Options{ConfigPath: path, Token: token, Server: srv.URL, TrustDocument: true})
		if !errors.Is(err, ErrWellKnown) || !errors.Is(err, config.ErrGatewayURL) && name != "too many" {
			t.Errorf("%s: %v", name, err)
		}
		if _, statErr := os.Stat(path); !os.IsNotExist(statErr) {
			t.Errorf("%s: config.toml was written", name)
		}
	}
}
