// Package testgw is an in-process gateway for bcd's tests: the Join and
// Gateway services over real TLS 1.3 with ALPN h2, certificates built from
// seeded internal/pki keys (a serving CA and its leaf for localhost,
// 127.0.0.1 and gw.dev.local, a node CA issuing node certificates from
// CSRs), a JoinService that opens sealed tokens and signs JoinResponses,
// and Session streams handed to the test to script frame by frame (after
// the gateway checked their first frame is the caller's Hello).
//
// Every refusal is a code of proto/refusals.toml with the table's gRPC
// status (refusal.Status), the same answer the dev stack gives for the same
// request: the conformance check (internal/conformance, and
// interop/tests/conformance.rs against devstack) holds both to it.
// Only tests import it.
package testgw

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"bcd/internal/config"
	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
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

// Keys are the gateway's keys and certificates.
type Keys struct {
	ServingCA, NodeCA         *ecdsa.PrivateKey
	ServingCACert, NodeCACert []byte
	ServingLeaf               *ecdsa.PrivateKey
	ServingLeafCert           []byte
	JoinSigning               ed25519.PrivateKey
	JoinEncryption            *ecdsa.PrivateKey
	CommandRoot               ed25519.PrivateKey
	Approvers                 []ed25519.PrivateKey
}

// NewKeys derives the keys from seed and builds the certificates.
func NewKeys(seed string) (*Keys, error) {
	k := &Keys{
		ServingCA:      pki.DeriveP256(seed, "serving-ca"),
		NodeCA:         pki.DeriveP256(seed, "node-ca"),
		ServingLeaf:    pki.DeriveP256(seed, "serving"),
		JoinSigning:    pki.DeriveEd25519(seed, "join-signing"),
		JoinEncryption: pki.DeriveP256(seed, "join-encryption"),
		CommandRoot:    pki.DeriveEd25519(seed, "command-root/0"),
		Approvers:      []ed25519.PrivateKey{pki.DeriveEd25519(seed, "approver/0"), pki.DeriveEd25519(seed, "approver/1")},
	}
	now := time.Now()
	var err error
	if k.ServingCACert, err = caCert("serving CA", k.ServingCA, now); err != nil {
		return nil, err
	}
	if k.NodeCACert, err = caCert("node CA", k.NodeCA, now); err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(k.ServingCACert)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3),
		Subject:      pkix.Name{CommonName: ServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		DNSNames:     []string{"localhost", ServerName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	k.ServingLeafCert, err = x509.CreateCertificate(rand.Reader, tmpl, ca, &k.ServingLeaf.PublicKey, k.ServingCA)
	return k, err
}

func caCert(name string, key *ecdsa.PrivateKey, now time.Time) ([]byte, error) {
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	return x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
}

func pinOf(key crypto.PublicKey) string {
	p, err := pki.NewPublicKey(key)
	if err != nil {
		panic(err)
	}
	return p.Pin()
}

// ServingCAPin is the serving CA's pin.
func (k *Keys) ServingCAPin() string { return pinOf(&k.ServingCA.PublicKey) }

// JoinSigningPin is the JoinService signing key's pin.
func (k *Keys) JoinSigningPin() string { return pinOf(k.JoinSigning.Public()) }

// JoinSigningSPKI is the signing key's SPKI in standard base64.
func (k *Keys) JoinSigningSPKI() string {
	p, _ := pki.NewPublicKey(k.JoinSigning.Public())
	return base64.StdEncoding.EncodeToString(p.SPKI())
}

// JoinEncryptionPin is the join-encryption key's pin.
func (k *Keys) JoinEncryptionPin() string { return pinOf(&k.JoinEncryption.PublicKey) }

// JWK is the join-encryption key's public JWK (with kid).
func (k *Keys) JWK() string { return pki.JWK(&k.JoinEncryption.PublicKey, k.JoinEncryptionPin()) }

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

	server *grpc.Server
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
	g.server = grpc.NewServer(grpc.Creds(credentials.NewTLS(g.TLSConfig())),
		grpc.MaxRecvMsgSize(maxDecodeBytes), grpc.UnaryInterceptor(limitUnary))
	agentv1.RegisterJoinServer(g.server, g)
	agentv1.RegisterGatewayServer(g.server, g)
	go func() { _ = g.server.Serve(lis) }()
	t.Cleanup(g.server.Stop)
	return g
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

// Join is the JoinService: a sealed token bound to the CSR, then the token
// (token-unknown), its expiry (token-expired) and its uses (token-exhausted),
// in the dev stack's order.
func (g *Gateway) Join(ctx context.Context, req *agentv1.JoinRequest) (*agentv1.JoinReply, error) {
	bytes, _ := proto.Marshal(req)
	g.mu.Lock()
	g.joins++
	g.requests = append(g.requests, sha256.Sum256(bytes))
	shed := g.joins <= g.opts.Shed
	g.mu.Unlock()
	if shed {
		_ = grpc.SetTrailer(ctx, metadata.Pairs("retry-after-ms", strconv.Itoa(g.opts.ShedHintMs)))
		return nil, status.Error(codes.Unavailable, string(refusal.CodeConnectionLimit)+": the gateway holds as many connections as it allows")
	}
	switch {
	case req.GetTpmRound1() != nil:
		return g.tpmRound1(req.GetTpmRound1())
	case req.GetTpmRound2() != nil:
		return g.tpmRound2(req.GetTpmRound2())
	}
	tj := req.GetToken()
	if tj == nil {
		return nil, refusal.Status(refusal.CodeMethodMissing, "the request names no join method")
	}
	csr, err := pki.ParseCSR(tj.GetCsrDer())
	if err != nil {
		return nil, refusal.StatusOf(err)
	}
	payload, err := pki.OpenJoinToken(g.Keys.JoinEncryption, tj.GetSealedToken(), csr.Pin, time.Now())
	if err != nil {
		// The reason may quote the sealed payload: only the code goes out.
		return nil, refusal.Status(pki.CodeOf(err), "the sealed token was refused")
	}
	g.mu.Lock()
	tok, ok := g.tokens[payload.Token]
	expired := ok && !tok.expires.IsZero() && !time.Now().Before(tok.expires)
	used := ok && !expired && tok.uses > 0
	if used {
		tok.uses--
		g.nodes++
	}
	n := g.nodes
	g.mu.Unlock()
	switch {
	case !ok:
		return nil, refusal.Status(refusal.CodeTokenUnknown, "no such join token")
	case expired:
		return nil, refusal.Status(pki.CodeTokenExpired, "the join token expired at %d", tok.expires.UnixMilli())
	case !used:
		return nil, refusal.Status(refusal.CodeTokenExhausted, "the join token has no use left")
	}
	env, err := g.respond(fmt.Sprintf("node_%d", n), csr, nil)
	if err != nil {
		return nil, err
	}
	return &agentv1.JoinReply{Reply: &agentv1.JoinReply_Response{Response: env}}, nil
}

// respond issues a certificate for the CSR's key (naming the AK when akName
// is given) and signs the JoinResponse that carries it.
func (g *Gateway) respond(nodeID string, csr *pki.CSR, akName []byte) (*agentv1.Envelope, error) {
	g.mu.Lock()
	signer := g.signWith
	g.mu.Unlock()
	leaf, err := g.issue(nodeID, csr.PublicKey, akName)
	if err != nil {
		return nil, refusal.Status(refusal.CodeInternal, "%v", err)
	}
	response := &agentv1.JoinResponse{
		NodeId:           nodeID,
		CertificateChain: [][]byte{leaf, g.Keys.NodeCACert},
		TrustDomain:      TrustDomain,
		Gateway:          &agentv1.GatewayEndpoint{Url: g.URL, ServerName: ServerName, ServingCaSpkiPin: g.Keys.ServingCAPin()},
		CsrPin:           csr.Pin,
		IssuedAtMs:       time.Now().UnixMilli(),
		PoolId:           "pool_test",
	}
	if g.opts.SignedIntent {
		response.Trust = g.trust()
	}
	payloadBytes, _ := proto.MarshalOptions{Deterministic: true}.Marshal(response)
	if signer == nil {
		signer = g.Keys.JoinSigning
	}
	env, err := pki.SignEnvelope(nil, pki.PayloadTypeJoinResponse, payloadBytes, signer)
	if err != nil {
		return nil, refusal.Status(refusal.CodeInternal, "%v", err)
	}
	return env.Proto(), nil
}

// Bundle is a trust bundle of sequence seq over the test keys: the command
// root, approvers 0 and 1 with threshold 2.
func (g *Gateway) Bundle(seq uint64, unbatchedPerHour uint32) *agentv1.TrustBundle {
	root, _ := pki.NewPublicKey(g.Keys.CommandRoot.Public())
	b := &agentv1.TrustBundle{
		TrustDomain:  TrustDomain,
		Sequence:     seq,
		CommandRoots: []*agentv1.PublicKey{root.Proto()},
		Quorum:       &agentv1.Quorum{Threshold: 2, UnbatchedPerHour: unbatchedPerHour},
	}
	for _, a := range g.Keys.Approvers {
		k, _ := pki.NewPublicKey(a.Public())
		b.Quorum.Approvers = append(b.Quorum.Approvers, k.Proto())
	}
	return b
}

// SignBundle signs a bundle with signers.
func SignBundle(b *agentv1.TrustBundle, signers ...crypto.Signer) *agentv1.Envelope {
	payload, _ := proto.MarshalOptions{Deterministic: true}.Marshal(b)
	env, err := pki.SignEnvelope(nil, pki.PayloadTypeTrustBundle, payload, signers...)
	if err != nil {
		panic(err)
	}
	return env.Proto()
}

func (g *Gateway) trust() *agentv1.JoinTrust {
	root, _ := pki.NewPublicKey(g.Keys.CommandRoot.Public())
	return &agentv1.JoinTrust{
		CommandRoots: []*agentv1.PublicKey{root.Proto()},
		TrustBundle:  SignBundle(g.Bundle(1, 1), g.Keys.Approvers[0], g.Keys.Approvers[1]),
	}
}

// issue makes a node certificate; akName adds urn:bc:tpm-ak:<hex SHA-256
// of the AK name> (a TPM node).
func (g *Gateway) issue(nodeID string, key *ecdsa.PublicKey, akName []byte) ([]byte, error) {
	ca, err := x509.ParseCertificate(g.Keys.NodeCACert)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	spiffe, _ := url.Parse("spiffe://" + TrustDomain + "/node/" + nodeID)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: nodeID},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(24 * time.Hour),
		URIs:         []*url.URL{spiffe},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if akName != nil {
		digest := sha256.Sum256(akName)
		tmpl.URIs = append(tmpl.URIs, &url.URL{Scheme: "urn", Opaque: "bc:tpm-ak:" + hex.EncodeToString(digest[:])})
	}
	return x509.CreateCertificate(rand.Reader, tmpl, ca, key, g.Keys.NodeCA)
}

// Session is one node's Session stream, scripted by the test.
type Session struct {
	// NodeID is the client certificate's CN.
	NodeID string
	// NodeKey is the certified key (verifies node statements).
	NodeKey *pki.PublicKey
	// Frames receives what the node sends; it is closed when the stream ends.
	Frames chan *agentv1.NodeFrame
	stream agentv1.Gateway_SessionServer
	end    chan error
	once   sync.Once
}

// Send sends a frame to the node.
func (s *Session) Send(f *agentv1.GatewayFrame) error { return s.stream.Send(f) }

// End ends the stream with err (nil: a clean end).
func (s *Session) End(err error) { s.once.Do(func() { s.end <- err }) }

// authenticate returns the node id (CN) and key of the caller's client
// certificate, refusing none, one the node CA did not issue (cert-unknown),
// one outside its validity (cert-validity) and a revoked node.
func (g *Gateway) authenticate(ctx context.Context) (string, *pki.PublicKey, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", nil, refusal.Status(refusal.CodeCertUnknown, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return "", nil, refusal.Status(refusal.CodeCertUnknown, "no client certificate")
	}
	leaf := info.State.PeerCertificates[0]
	if _, err := pki.VerifyIssued(leaf.Raw, g.Keys.NodeCACert, pki.VerifyOptions{At: time.Now(), Usage: pki.UsageClient}); err != nil {
		if pki.CodeOf(err) == pki.CodeCertValidity {
			return "", nil, refusal.Status(pki.CodeCertValidity, "%v", err)
		}
		return "", nil, refusal.Status(refusal.CodeCertUnknown, "not issued by the node CA: %v", err)
	}
	nodeID := leaf.Subject.CommonName
	g.mu.Lock()
	revoked := g.revoked[nodeID]
	g.mu.Unlock()
	if revoked {
		return "", nil, refusal.Status(refusal.CodeCertRevoked, "node %s was revoked", nodeID)
	}
	key, err := pki.NewPublicKey(leaf.PublicKey)
	if err != nil {
		return "", nil, refusal.Status(refusal.CodeCertUnknown, "its key: %v", err)
	}
	return nodeID, key, nil
}

// Session authenticates the client certificate and hands the stream over.
// The first frame must be a Hello naming the certificate's node
// (hello-expected, node-mismatch), and no frame may be above
// MaxMessageBytes (frame-too-large): either refusal ends the stream, also
// before the test took the session.
func (g *Gateway) Session(stream agentv1.Gateway_SessionServer) error {
	nodeID, key, err := g.authenticate(stream.Context())
	if err != nil {
		return err
	}
	s := &Session{NodeID: nodeID, NodeKey: key, Frames: make(chan *agentv1.NodeFrame, 256), stream: stream, end: make(chan error, 1)}
	go func() {
		defer close(s.Frames)
		for first := true; ; first = false {
			f, err := recvFrame(stream)
			if err == nil && first {
				err = checkHello(f, nodeID)
			}
			if err != nil {
				if errors.Is(err, io.EOF) && first {
					err = refusal.Status(refusal.CodeHelloExpected, "the stream ended before a Hello")
				}
				if errors.Is(err, io.EOF) {
					s.End(nil)
				} else {
					s.End(err)
				}
				return
			}
			s.Frames <- f
		}
	}()
	select {
	case g.Sessions <- s:
	case err := <-s.end:
		return err
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	select {
	case err := <-s.end:
		return err
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
}

// checkHello refuses a first frame that is not the certificate's node's Hello.
func checkHello(f *agentv1.NodeFrame, nodeID string) error {
	switch {
	case f.GetHello() == nil:
		return refusal.Status(refusal.CodeHelloExpected, "the first frame is not a Hello")
	case f.GetHello().GetNodeId() != nodeID:
		return refusal.Status(refusal.CodeNodeMismatch, "Hello names %q, the certificate %s", f.GetHello().GetNodeId(), nodeID)
	}
	return nil
}

// recvFrame receives one frame, refusing one above MaxMessageBytes.
func recvFrame(stream agentv1.Gateway_SessionServer) (*agentv1.NodeFrame, error) {
	f, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if size := proto.Size(f); size > MaxMessageBytes {
		return nil, refusal.Status(refusal.CodeFrameTooLarge, "a message above %d bytes: %d bytes", MaxMessageBytes, size)
	}
	return f, nil
}

// Tunnel authenticates the caller and refuses its tunnel: the test gateway
// never sends an OpenTunnel, so every tunnel id is unknown (tunnel-unknown),
// as the dev stack answers a tunnel it did not ask for.
func (g *Gateway) Tunnel(stream agentv1.Gateway_TunnelServer) error {
	if _, _, err := g.authenticate(stream.Context()); err != nil {
		return err
	}
	return refusal.Status(refusal.CodeTunnelUnknown, "this gateway asked for no tunnel")
}
