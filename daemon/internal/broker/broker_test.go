// Tests of the broker: a secret sealed to the ephemeral key of a signed
// request is opened, a refusal comes back once with its code, an
// unanswered request is asked again after the timeout, and a workload
// token is matched to its request (or times out).

package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
)

type gateway struct {
	t      *testing.T
	key    *ecdsa.PrivateKey
	b      *Broker
	mu     sync.Mutex
	frames []*agentv1.NodeFrame
}

func newGateway(t *testing.T, now func() time.Time) *gateway {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	g := &gateway{t: t, key: key}
	g.b = New(Config{NodeID: "node_1", Key: key, BootID: func() string { return "boot" }, Now: now,
		Send: func(f *agentv1.NodeFrame) { g.mu.Lock(); g.frames = append(g.frames, f); g.mu.Unlock() }})
	return g
}

func (g *gateway) last() *agentv1.NodeFrame {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.frames[len(g.frames)-1]
}

// answerSecret verifies the last SecretRequest under the node key and
// seals secret to its ephemeral key.
func (g *gateway) answerSecret(secret []byte, refusalText string) {
	env := pki.EnvelopeFromProto(g.last().GetSecretRequest())
	pub, _ := pki.PublicKeyOf(g.key)
	req, eph, err := pki.VerifySecretRequest(env, pub, "node_1")
	if err != nil {
		g.t.Fatal(err)
	}
	resp := &agentv1.SecretResponse{RequestId: req.GetRequestId(), Error: refusalText}
	if refusalText == "" {
		if resp.Jwe, err = pki.SealSecretResponse(eph, secret); err != nil {
			g.t.Fatal(err)
		}
	}
	if !g.b.Frame(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_SecretResponse{SecretResponse: resp}}) {
		g.t.Fatal("Deliver did not take a SecretResponse")
	}
}

func TestSecretsAreSealedToTheEphemeralKey(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newGateway(t, func() time.Time { return now })
	woken, also := 0, 0
	g.b.OnSecret(func() { woken++ })
	g.b.OnSecret(func() { also++ }) // every reconciler that waits is woken
	if _, err := g.b.Secret("secret_a"); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	if _, err := g.b.Secret("secret_a"); !errors.Is(err, ErrPending) || len(g.frames) != 1 {
		t.Fatalf("asked twice within the timeout: %d frames", len(g.frames))
	}
	g.answerSecret([]byte("s3cret"), "")
	data, err := g.b.Secret("secret_a")
	if err != nil || string(data) != "s3cret" || woken != 1 || also != 1 {
		t.Fatalf("%q %v %d %d", data, err, woken, also)
	}
	g.b.Forget("secret_a")

	if _, err := g.b.Secret("secret_b"); !errors.Is(err, ErrPending) {
		t.Fatal(err)
	}
	g.answerSecret(nil, "secret-unknown: no such secret")
	if _, err := g.b.Secret("secret_b"); refusal.CodeOf(err) != "secret-unknown" {
		t.Fatalf("%v", err)
	}
	// Unanswered: asked again after the timeout.
	before := len(g.frames)
	_, _ = g.b.Secret("secret_c")
	now = now.Add(DefaultTimeout + time.Second)
	_, _ = g.b.Secret("secret_c")
	if len(g.frames) != before+2 {
		t.Fatalf("%d frames, want %d", len(g.frames), before+2)
	}
}

func TestWorkloadTokensMatchTheirRequest(t *testing.T) {
	g := newGateway(t, nil)
	got := make(chan string, 1)
	go func() {
		token, err := g.b.WorkloadToken(context.Background(), "vm1", "https://vault")
		if err != nil {
			token = err.Error()
		}
		got <- token
	}()
	var req *agentv1.WorkloadTokenRequest
	for deadline := time.Now().Add(5 * time.Second); req == nil && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		g.mu.Lock()
		if len(g.frames) > 0 {
			req = g.frames[0].GetWorkloadTokenRequest()
		}
		g.mu.Unlock()
	}
	if req.GetInstanceId() != "vm1" || req.GetAudience() != "https://vault" {
		t.Fatalf("%v", req)
	}
	g.b.Frame(&agentv1.GatewayFrame{Frame: &agentv1.GatewayFrame_WorkloadTokenResponse{WorkloadTokenResponse: &agentv1.WorkloadTokenResponse{
		RequestId: req.GetRequestId(), Token: "a.b.c"}}})
	if token := <-got; token != "a.b.c" {
		t.Fatal(token)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.b.WorkloadToken(ctx, "vm1", "aud"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}
