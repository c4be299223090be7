// The JoinService's token join: the sealed token opened for the CSR, then
// the token's checks in the dev stack's order (token-unknown,
// token-expired, token-exhausted), and the signed JoinResponse with a node
// certificate from the node CA and, with SignedIntent, the command root and
// a trust bundle (Bundle, SignBundle).

package testgw

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"net/url"
	"strconv"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

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
