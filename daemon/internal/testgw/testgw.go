// Package testgw is an in-process gateway for bcd's tests: the Join and
// Gateway services over real TLS 1.3 with ALPN h2, certificates built from
// seeded internal/pki keys (a serving CA and its leaf for localhost,
// 127.0.0.1 and gw.dev.local, a node CA issuing node certificates from
// CSRs), a JoinService that opens sealed tokens and signs JoinResponses,
// and Session streams handed to the test to script frame by frame (after
// the gateway checked their first frame is the caller's Hello). Two
// gateways started with the same Keys serve the same nodes, as the dev
// stack's gateways on one store do; Stop and Restart take one away and
// bring it back on its address.
//
// Every refusal is a code of proto/refusals.toml with the table's gRPC
// status (refusal.Status), the same answer the dev stack gives for the same
// request: the conformance check (internal/conformance, and
// interop/tests/conformance.rs against devstack) holds both to it.
// Only tests import it.
package testgw

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"bcd/internal/config"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// MaxMessageBytes is the largest message the gateway takes, as the dev
// stack's decoding cap (devstack::MAX_MESSAGE_BYTES): a larger one is
// refused frame-too-large.
const MaxMessageBytes = 1 << 20

// maxDecodeBytes lets grpc-go decode messages above MaxMessageBytes, so that
// the gateway, not grpc-go, refuses them with the contract's code.
const maxDecodeBytes = 64 << 20

// Seed is the seed of the test keys.
const Seed = "bcd-testgw"

// ServerName is the name the serving certificate carries besides localhost.
const ServerName = "gw.dev.local"

// TrustDomain is the test trust domain.
const TrustDomain = "test.local"

// Options shape a gateway.
type Options struct {
	// SignedIntent gives joining nodes the command root and a trust bundle.
	SignedIntent bool
	// Keys replaces the default keys (another gateway's, say).
	Keys *Keys
	// TokenUses is how often each token may be used (default 1).
	TokenUses int
	// TPM makes the JoinService a TPM attestor too (tpm.go); nil refuses
	// TPM joins (method-unsupported).
	TPM *TPMOptions
	// Shed answers the first Shed Join calls Unavailable connection-limit
	// with a retry-after-ms hint of ShedHintMs, as a busy gateway does.
	Shed, ShedHintMs int
}

// Gateway is a running test gateway.
type Gateway struct {
	agentv1.UnimplementedJoinServer
	agentv1.UnimplementedGatewayServer

	Keys *Keys
	// URL is https://127.0.0.1:<port>.
	URL string
	// Sessions receives every Session stream that passed authentication.
	Sessions chan *Session
	opts     Options

	mu      sync.Mutex
	tokens  map[string]*token
	revoked map[string]bool
	nodes   int
	joins   int
	// requests are the SHA-256 of each Join request's bytes, in order.
	requests [][32]byte
	// signWith, when set, signs JoinResponses instead of the join-signing key.
	signWith ed25519.PrivateKey
	// tpm is the TPM attestor's state (tpm.go).
	tpm tpmState
	// renewals counts the certificates Renew issued.
	renewals int

	server *grpc.Server // under mu; nil while stopped
}

// Start starts a gateway on a free loopback port; the test stops it.
func Start(t testing.TB, opts Options) *Gateway {
	t.Helper()
	keys := opts.Keys
	if keys == nil {
		var err error
		if keys, err = NewKeys(Seed); err != nil {
			t.Fatal(err)
		}
	}
	if opts.TokenUses == 0 {
		opts.TokenUses = 1
	}
	g := &Gateway{Keys: keys, Sessions: make(chan *Session, 16), opts: opts, tokens: map[string]*token{}, revoked: map[string]bool{}}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.URL = "https://" + lis.Addr().String()
	g.serve(lis)
	t.Cleanup(g.Stop)
	return g
}

// serve serves the Join and Gateway services on lis.
func (g *Gateway) serve(lis net.Listener) {
	server := grpc.NewServer(grpc.Creds(credentials.NewTLS(g.TLSConfig())),
		grpc.MaxRecvMsgSize(maxDecodeBytes), grpc.UnaryInterceptor(limitUnary))
	agentv1.RegisterJoinServer(server, g)
	agentv1.RegisterGatewayServer(server, g)
	g.mu.Lock()
	g.server = server
	g.mu.Unlock()
	go func() { _ = server.Serve(lis) }()
}

// Stop takes the gateway away as a killed process goes: its listener
// closes and every connection is cut (a stream ends Unavailable), so a
// dial is refused until Restart. The gateway's state (tokens, revoked
// nodes, Sessions) stays.
func (g *Gateway) Stop() {
	g.mu.Lock()
	server := g.server
	g.server = nil
	g.mu.Unlock()
	if server != nil {
		server.Stop()
	}
}

// Restart serves a stopped gateway again on its address.
func (g *Gateway) Restart(t testing.TB) {
	t.Helper()
	lis, err := net.Listen("tcp", strings.TrimPrefix(g.URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	g.serve(lis)
}

// TLSConfig is the server side: TLS 1.3, h2, a client certificate
// optional and, as the dev stack does, taken at the TLS layer once its key
// signed the handshake: authenticate verifies it against the node CA, so a
// foreign or expired one gets its code (cert-unknown, cert-validity)
// instead of a TLS alert.
func (g *Gateway) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{"h2"},
		Certificates: []tls.Certificate{{
			Certificate: [][]byte{g.Keys.ServingLeafCert, g.Keys.ServingCACert},
			PrivateKey:  g.Keys.ServingLeaf,
		}},
		ClientAuth: tls.RequestClientCert,
	}
}

// token is a join token's state: uses left and an optional expiry.
type token struct {
	uses    int
	expires time.Time
}

// AddToken makes tok valid for Options.TokenUses joins.
func (g *Gateway) AddToken(tok string) { g.AddTokenUntil(tok, g.opts.TokenUses, time.Time{}) }

// AddTokenUntil makes tok valid for uses joins until expires (zero: no
// expiry); from then on it is refused token-expired.
func (g *Gateway) AddTokenUntil(tok string, uses int, expires time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tokens[tok] = &token{uses: uses, expires: expires}
}

// JoinRequests returns the SHA-256 of each Join request's bytes, in order.
func (g *Gateway) JoinRequests() [][32]byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][32]byte(nil), g.requests...)
}

// Revoke refuses the node's sessions from now on (cert-revoked).
func (g *Gateway) Revoke(nodeID string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.revoked[nodeID] = true
}

// SignJoinResponsesWith makes the JoinService sign with another key.
func (g *Gateway) SignJoinResponsesWith(key ed25519.PrivateKey) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.signWith = key
}

// Joins counts the Join calls.
func (g *Gateway) Joins() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.joins
}

// ConfigValues are the config.toml keys for this gateway (data dir dir/data).
func (g *Gateway) ConfigValues(dir string) (map[string]string, []string) {
	values := map[string]string{
		"gateway_url":         g.URL,
		"gateway_server_name": ServerName,
		"serving_ca_spki_pin": g.Keys.ServingCAPin(),
		"join_signing_pin":    g.Keys.JoinSigningPin(),
		"join_signing_key":    g.Keys.JoinSigningSPKI(),
		"join_encryption_pin": g.Keys.JoinEncryptionPin(),
		"data_dir":            filepath.Join(dir, "data"),
	}
	order := []string{"gateway_url", "gateway_server_name", "serving_ca_spki_pin", "join_signing_pin", "join_signing_key", "join_encryption_pin", "data_dir"}
	return values, order
}

// WriteConfig writes dir/config.toml and join-encryption.jwk for this
// gateway, and returns the config's path.
func (g *Gateway) WriteConfig(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, config.FileName)
	values, order := g.ConfigValues(dir)
	if err := config.Set(path, values, order); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, config.JWKFileName), []byte(g.Keys.JWK()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// limitUnary refuses a unary request above MaxMessageBytes (frame-too-large).
func limitUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if m, ok := req.(proto.Message); ok && proto.Size(m) > MaxMessageBytes {
		return nil, refusal.Status(refusal.CodeFrameTooLarge, "a message above %d bytes: %d bytes", MaxMessageBytes, proto.Size(m))
	}
	return handler(ctx, req)
}
