// The cases: each is one request a gateway must refuse, and the code it
// must refuse it with (the status is the code's, from proto/refusals.toml).
// Add a case here and both gateways run it.

package conformance

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"io"
	"strings"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"google.golang.org/grpc"
)

// oversized is above every gateway's 1 MiB decoding limit.
const oversized = 2 << 20

type testCase struct {
	name string
	want refusal.Code
	run  func(context.Context, *env) error
}

var cases = []testCase{
	{"join/bad-token", refusal.CodeTokenUnknown, tokenJoin(func(t *Tokens) string { return t.Unknown })},
	{"join/exhausted-token", refusal.CodeTokenExhausted, tokenJoin(func(t *Tokens) string { return t.Exhausted })},
	{"join/expired-token", pki.CodeTokenExpired, tokenJoin(func(t *Tokens) string { return t.Expired })},
	{"join/token-for-another-csr", pki.CodeTokenCSRMismatch, otherCSR},
	{"join/token-sealed-in-1970", pki.CodeTokenStale, sealedAt(func() int64 { return 0 })},
	{"join/token-sealed-in-the-future", pki.CodeTokenNotYetValid, sealedAt(func() int64 { return time.Now().Add(24 * time.Hour).Unix() })},
	{"join/malformed-csr", pki.CodeCSRMalformed, malformedCSR},
	{"join/no-method", refusal.CodeMethodMissing, join(&agentv1.JoinRequest{})},
	{"join/tpm-round1-without-attestor", refusal.CodeMethodUnsupported, join(&agentv1.JoinRequest{
		Method: &agentv1.JoinRequest_TpmRound1{TpmRound1: &agentv1.TpmRound1{EkPublic: []byte("ek"), AkPublic: []byte("ak")}}})},
	{"join/tpm-round2-without-attestor", refusal.CodeMethodUnsupported, join(&agentv1.JoinRequest{
		Method: &agentv1.JoinRequest_TpmRound2{TpmRound2: &agentv1.TpmRound2{SessionId: "none"}}})},
	{"join/oversized", refusal.CodeFrameTooLarge, join(&agentv1.JoinRequest{
		Method: &agentv1.JoinRequest_Token{Token: &agentv1.TokenJoin{SealedToken: "x", CsrDer: make([]byte, oversized)}}})},
	{"session/no-client-certificate", refusal.CodeCertUnknown, session(nil, hello(func(t *Target) string { return t.Joined.NodeID }))},
	{"session/foreign-ca-certificate", refusal.CodeCertUnknown, session(foreign, hello(func(t *Target) string { return t.Joined.NodeID }))},
	{"session/revoked-certificate", refusal.CodeCertRevoked, session(revoked, hello(func(t *Target) string { return t.Revoked.NodeID }))},
	{"session/heartbeat-before-hello", refusal.CodeHelloExpected, session(joined, func(*Target) *agentv1.NodeFrame {
		return &agentv1.NodeFrame{Frame: &agentv1.NodeFrame_Heartbeat{Heartbeat: &agentv1.Heartbeat{AtMs: 1}}}
	})},
	{"session/another-nodes-hello", refusal.CodeNodeMismatch, session(joined, hello(func(t *Target) string { return t.Revoked.NodeID }))},
	{"session/hello-with-a-long-journal-id", refusal.CodeHelloMalformed, session(joined, func(t *Target) *agentv1.NodeFrame {
		f := hello(func(t *Target) string { return t.Joined.NodeID })(t)
		f.GetHello().JournalId = strings.Repeat("j", 900)
		return f
	})},
	{"session/hello-with-a-control-character", refusal.CodeHelloMalformed, session(joined, func(t *Target) *agentv1.NodeFrame {
		f := hello(func(t *Target) string { return t.Joined.NodeID })(t)
		f.GetHello().BootId = "boot\nforged"
		return f
	})},
	{"session/oversized-frame", refusal.CodeFrameTooLarge, session(joined, func(t *Target) *agentv1.NodeFrame {
		f := hello(func(t *Target) string { return t.Joined.NodeID })(t)
		f.GetHello().DaemonVersion = strings.Repeat("x", oversized)
		return f
	})},
	{"renew/no-client-certificate", refusal.CodeCertUnknown, renew(nil, validCSR)},
	{"renew/foreign-ca-certificate", refusal.CodeCertUnknown, renew(foreign, validCSR)},
	{"renew/revoked-certificate", refusal.CodeCertRevoked, renew(revoked, validCSR)},
	{"renew/malformed-csr", pki.CodeCSRMalformed, renew(joined, func() []byte { return []byte("not a CSR") })},
	{"tunnel/unknown-tunnel", refusal.CodeTunnelUnknown, tunnel},
}

func joined(t *Target) *Node  { return &t.Joined }
func revoked(t *Target) *Node { return &t.Revoked }

// join sends one JoinRequest without a client certificate.
func join(req *agentv1.JoinRequest) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		conn, err := e.dial(nil)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = agentv1.NewJoinClient(conn).Join(ctx, req)
		return err
	}
}

// csr is a fresh key's CSR and its pin.
func csr() ([]byte, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	der, err := pki.CreateCSR(rand.Reader, key, "bcd")
	if err != nil {
		return nil, "", err
	}
	parsed, err := pki.ParseCSR(der)
	if err != nil {
		return nil, "", err
	}
	return der, parsed.Pin, nil
}

func validCSR() []byte {
	der, _, err := csr()
	if err != nil {
		panic("a fresh P-256 CSR always builds: " + err.Error())
	}
	return der
}

// tokenJoin joins with a token sealed to a fresh CSR.
func tokenJoin(token func(*Tokens) string) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		der, pin, err := csr()
		if err != nil {
			return err
		}
		return e.sealedJoin(ctx, token(&e.t.Tokens), pin, der)
	}
}

// otherCSR presents a valid token sealed to one CSR with another.
func otherCSR(ctx context.Context, e *env) error {
	_, pin, err := csr()
	if err != nil {
		return err
	}
	other, _, err := csr()
	if err != nil {
		return err
	}
	return e.sealedJoin(ctx, e.t.Tokens.Valid, pin, other)
}

// sealedAt joins with a valid token sealed, to its own CSR, at iat().
func sealedAt(iat func() int64) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		der, pin, err := csr()
		if err != nil {
			return err
		}
		sealed, err := pki.SealJoinToken(e.joinKey, e.t.Tokens.Valid, pin, iat())
		if err != nil {
			return err
		}
		return join(&agentv1.JoinRequest{Method: &agentv1.JoinRequest_Token{Token: &agentv1.TokenJoin{SealedToken: sealed, CsrDer: der}}})(ctx, e)
	}
}

// malformedCSR presents a valid token with bytes that are no CSR.
func malformedCSR(ctx context.Context, e *env) error {
	return e.sealedJoin(ctx, e.t.Tokens.Valid, "sha256:none", []byte("not a CSR"))
}

func (e *env) sealedJoin(ctx context.Context, token, pin string, csrDER []byte) error {
	sealed, err := pki.SealJoinToken(e.joinKey, token, pin, time.Now().Unix())
	if err != nil {
		return err
	}
	return join(&agentv1.JoinRequest{Method: &agentv1.JoinRequest_Token{Token: &agentv1.TokenJoin{SealedToken: sealed, CsrDer: csrDER}}})(ctx, e)
}

// hello is a Hello naming a node.
func hello(node func(*Target) string) func(*Target) *agentv1.NodeFrame {
	return func(t *Target) *agentv1.NodeFrame {
		return &agentv1.NodeFrame{Frame: &agentv1.NodeFrame_Hello{Hello: &agentv1.Hello{
			NodeId: node(t), JournalId: "conformance", BootId: "conformance", DaemonVersion: "0.0.0"}}}
	}
}

// session opens a Session as node (nil: no certificate), sends one frame
// and returns how the gateway ended the stream.
func session(node func(*Target) *Node, frame func(*Target) *agentv1.NodeFrame) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		var n *Node
		if node != nil {
			n = node(e.t)
		}
		conn, err := e.dial(n)
		if err != nil {
			return err
		}
		defer conn.Close()
		stream, err := agentv1.NewGatewayClient(conn).Session(ctx)
		if err != nil {
			return err
		}
		// A refusal may already have ended the stream: Recv tells.
		_ = stream.Send(frame(e.t))
		return firstAnswer(stream)
	}
}

// firstAnswer returns the error that ends a stream, or an error when the
// gateway answered a frame instead of refusing.
func firstAnswer(stream grpc.ClientStream) error {
	var f agentv1.GatewayFrame
	err := stream.RecvMsg(&f)
	if errors.Is(err, io.EOF) {
		return errors.New("the stream ended cleanly, without a refusal")
	}
	if err == nil {
		return errors.New("the gateway answered a frame instead of refusing")
	}
	return err
}

// renew asks for a renewal as node (nil: no certificate).
func renew(node func(*Target) *Node, csr func() []byte) func(context.Context, *env) error {
	return func(ctx context.Context, e *env) error {
		var n *Node
		if node != nil {
			n = node(e.t)
		}
		conn, err := e.dial(n)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = agentv1.NewGatewayClient(conn).Renew(ctx, &agentv1.RenewRequest{CsrDer: csr()})
		return err
	}
}

// tunnel opens a Tunnel as the joined node for a tunnel no gateway asked for.
func tunnel(ctx context.Context, e *env) error {
	conn, err := e.dial(&e.t.Joined)
	if err != nil {
		return err
	}
	defer conn.Close()
	stream, err := agentv1.NewGatewayClient(conn).Tunnel(ctx)
	if err != nil {
		return err
	}
	_ = stream.Send(&agentv1.TunnelFrame{})
	var f agentv1.TunnelFrame
	if err := stream.RecvMsg(&f); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return errors.New("the gateway opened the tunnel")
}
