// Package broker is bcd's client side of the secret broker and of the
// workload issuer (docs/protocol.md, "Secrets and workload tokens"). A
// secret is asked for with a node-signed NodeStatement{secret_request}
// carrying a fresh ephemeral P-256 key, and the SecretResponse is opened
// with that key; a workload token is asked for with a
// WorkloadTokenRequest. Both go out as control frames of the session and
// their answers come back through Frame (the agent's frame handler), matched by request id.
//
// Secret never blocks (the instances reconciler calls it inside a pass,
// on the session's goroutine, which must go on reading the answer): it
// asks once, answers ErrPending until the answer is in, and keeps the
// plaintext in memory until Forget. WorkloadToken blocks its caller (the
// metadata endpoint) until the answer or its deadline. Neither a secret,
// a sealed payload nor a token is ever logged.
package broker

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
)

// DefaultTimeout is how long an answer may take before it is asked again
// (secrets) or given up (tokens).
const DefaultTimeout = 10 * time.Second

// ErrPending is a secret asked for and not answered yet.
var ErrPending = errors.New("the secret has not come yet")

// ErrTimeout is a workload token that did not come in time (the session
// may be down).
var ErrTimeout = errors.New("no answer from the gateway in time")

// Config wires a broker.
type Config struct {
	// NodeID and Key sign the SecretRequest statements.
	NodeID string
	Key    crypto.Signer
	// BootID is the machine's boot id (in the statements).
	BootID func() string
	// Send queues a control frame on the session.
	Send func(*agentv1.NodeFrame)
	// Timeout bounds an answer (DefaultTimeout when 0).
	Timeout time.Duration
	// Now is the clock (tests).
	Now func() time.Time
	// Log receives broker.* lines (never a secret).
	Log *slog.Logger
}

// secret is one secret reference's request and answer.
type secret struct {
	requestID string
	key       *ecdsa.PrivateKey
	askedAt   time.Time
	plaintext []byte
	err       error
	done      bool
}

// Broker matches requests and answers.
type Broker struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	secrets  map[string]*secret // by secret reference
	byID     map[string]string  // request id → secret reference
	tokens   map[string]chan *agentv1.WorkloadTokenResponse
	onSecret []func()
}

// New returns a broker.
func New(cfg Config) *Broker {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Broker{cfg: cfg, log: log, secrets: map[string]*secret{}, byID: map[string]string{},
		tokens: map[string]chan *agentv1.WorkloadTokenResponse{}}
}

// OnSecret adds what runs when a secret's answer came (a reconciler's
// wake-up: the instances' user data, the telemetry section's headers).
func (b *Broker) OnSecret(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.onSecret = append(b.onSecret, f)
}

func requestID() string {
	var raw [12]byte
	_, _ = rand.Read(raw[:])
	return "req_" + hex.EncodeToString(raw[:])
}

// Secret returns the plaintext of ref once it has come; until then it
// asks (again after the timeout) and returns ErrPending. A refusal by the
// broker is returned once (a *refusal.Error with the broker's code), and
// the next call asks again.
func (b *Broker) Secret(ref string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.secrets[ref]
	if s != nil && s.done {
		if s.err != nil {
			delete(b.secrets, ref)
			return nil, s.err
		}
		return s.plaintext, nil
	}
	if s != nil && b.cfg.Now().Sub(s.askedAt) < b.cfg.Timeout {
		return nil, ErrPending
	}
	if s != nil {
		delete(b.byID, s.requestID)
	}
	s, err := b.ask(ref)
	if err != nil {
		return nil, err
	}
	b.secrets[ref] = s
	b.byID[s.requestID] = ref
	return nil, ErrPending
}

// ask signs and sends a SecretRequest for ref. The caller holds b.mu.
func (b *Broker) ask(ref string) (*secret, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	s := &secret{requestID: requestID(), key: key, askedAt: b.cfg.Now()}
	stmt := &agentv1.NodeStatement{NodeId: b.cfg.NodeID, BootId: b.cfg.BootID(), AtMs: b.cfg.Now().UnixMilli(),
		Body: &agentv1.NodeStatement_SecretRequest{SecretRequest: &agentv1.SecretRequest{
			RequestId: s.requestID, SecretRef: ref, EphemeralSpkiDer: spki}}}
	env, err := pki.SignStatement(rand.Reader, b.cfg.Key, stmt)
	if err != nil {
		return nil, err
	}
	b.cfg.Send(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_SecretRequest{SecretRequest: env.Proto()}})
	b.log.Info("broker.secret_requested", "request_id", s.requestID, "secret_ref", ref)
	return s, nil
}

// Forget drops what the broker keeps of ref (once its plaintext is where
// it belongs).
func (b *Broker) Forget(ref string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.secrets[ref]; s != nil {
		delete(b.byID, s.requestID)
		clear(s.plaintext)
		delete(b.secrets, ref)
	}
}

// Frame takes a SecretResponse or WorkloadTokenResponse and reports
// whether the frame was one.
func (b *Broker) Frame(f *agentv1.GatewayFrame) bool {
	switch x := f.GetFrame().(type) {
	case *agentv1.GatewayFrame_SecretResponse:
		b.secretAnswer(x.SecretResponse)
	case *agentv1.GatewayFrame_WorkloadTokenResponse:
		b.mu.Lock()
		ch := b.tokens[x.WorkloadTokenResponse.GetRequestId()]
		delete(b.tokens, x.WorkloadTokenResponse.GetRequestId())
		b.mu.Unlock()
		if ch == nil {
			b.log.Warn("broker.unexpected_answer", "kind", "workload_token", "request_id", x.WorkloadTokenResponse.GetRequestId())
			return true
		}
		ch <- x.WorkloadTokenResponse
	default:
		return false
	}
	return true
}

func (b *Broker) secretAnswer(resp *agentv1.SecretResponse) {
	b.mu.Lock()
	ref, ok := b.byID[resp.GetRequestId()]
	s := b.secrets[ref]
	if !ok || s == nil {
		b.mu.Unlock()
		b.log.Warn("broker.unexpected_answer", "kind", "secret", "request_id", resp.GetRequestId())
		return
	}
	delete(b.byID, resp.GetRequestId())
	s.done = true
	switch {
	case resp.GetError() != "":
		s.err = answerError(resp.GetError())
	default:
		s.plaintext, s.err = pki.OpenSecretResponse(s.key, resp.GetJwe())
	}
	s.key = nil
	wake := slices.Clone(b.onSecret)
	b.mu.Unlock()
	if s.err != nil {
		b.log.Warn("broker.secret_refused", "request_id", resp.GetRequestId(), "secret_ref", ref, "code", string(refusal.CodeOf(s.err)))
	} else {
		b.log.Info("broker.secret_received", "request_id", resp.GetRequestId(), "secret_ref", ref)
	}
	for _, f := range wake {
		f()
	}
}

// answerError is a broker's "<code>: <detail>" as a refusal.
func answerError(text string) error {
	code, detail, _ := strings.Cut(text, ": ")
	return &refusal.Error{Code: refusal.Code(code), Reason: detail}
}

// WorkloadToken asks the workload issuer for a token naming instanceID
// for audience, and waits for it (at most the timeout, or ctx).
func (b *Broker) WorkloadToken(ctx context.Context, instanceID, audience string) (string, error) {
	id := requestID()
	ch := make(chan *agentv1.WorkloadTokenResponse, 1)
	b.mu.Lock()
	b.tokens[id] = ch
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.tokens, id)
		b.mu.Unlock()
	}()
	b.cfg.Send(&agentv1.NodeFrame{Frame: &agentv1.NodeFrame_WorkloadTokenRequest{WorkloadTokenRequest: &agentv1.WorkloadTokenRequest{
		RequestId: id, InstanceId: instanceID, Audience: audience}}})
	timer := time.NewTimer(b.cfg.Timeout)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return "", ctx.Err()
	case <-timer.C:
		return "", fmt.Errorf("%w (workload token %s)", ErrTimeout, id)
	case resp := <-ch:
		if resp.GetError() != "" {
			return "", answerError(resp.GetError())
		}
		if resp.GetToken() == "" {
			return "", errors.New("the gateway answered no token and no error")
		}
		b.log.Info("broker.token_received", "request_id", id, "instance", instanceID, "audience", audience)
		return resp.GetToken(), nil
	}
}
