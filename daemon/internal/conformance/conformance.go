// Package conformance runs the client side of a list of refusals (cases.go)
// against a gateway and reports, for each case, the code and the gRPC status
// the gateway answered. The same list runs against the Go test gateway
// (conformance_test.go) and against the Rust dev stack (cmd/bcd-conformance,
// driven by interop/tests/conformance.rs), so both must answer every case
// alike, and as proto/refusals.toml says.
//
// The gateway's state comes in a Target: the pins to reach it, the tokens of
// each kind (unknown, exhausted, expired, valid) and two joined nodes, the
// second revoked. The caller prepares it on its own gateway.
package conformance

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"bcd/internal/identity"
	"bcd/internal/refusal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// Node is a joined node's credentials: its id, chain (leaf first, DER) and
// PKCS#8 key (DER). JSON carries the bytes in standard base64.
type Node struct {
	NodeID string   `json:"node_id"`
	Chain  [][]byte `json:"chain"`
	Key    []byte   `json:"key"`
}

// Tokens are plain join tokens (secrets) of each kind.
type Tokens struct {
	// Unknown was never minted.
	Unknown string `json:"unknown"`
	// Exhausted has no use left (Joined joined with it).
	Exhausted string `json:"exhausted"`
	// Expired is past its expiry.
	Expired string `json:"expired"`
	// Valid would join (the cases never get as far as using it).
	Valid string `json:"valid"`
}

// Target is a prepared gateway.
type Target struct {
	// GatewayURL is https://<host>:<port>.
	GatewayURL string `json:"gateway_url"`
	// ServerName is the name the serving certificate is checked for.
	ServerName string `json:"server_name"`
	// ServingCAPin pins the serving CA.
	ServingCAPin string `json:"serving_ca_spki_pin"`
	// JoinEncryptionKey is the join-encryption key's SPKI (DER).
	JoinEncryptionKey []byte `json:"join_encryption_key"`
	// Tokens are the join tokens.
	Tokens Tokens `json:"tokens"`
	// Joined is a joined node in good standing.
	Joined Node `json:"joined"`
	// Revoked is another joined node, whose certificates were revoked.
	Revoked Node `json:"revoked"`
}

// Result is a gateway's answer to one case.
type Result struct {
	// Case is the case's name.
	Case string
	// Code is the code the answer's message starts with ("" for none).
	Code string
	// Status is the answer's gRPC status ("OK" when the call succeeded).
	Status string
}

// Line is "<case> <code> <grpc-status>".
func (r Result) Line() string {
	code := r.Code
	if code == "" {
		code = "-"
	}
	return fmt.Sprintf("%s %s %s", r.Case, code, r.Status)
}

// Expected is what every gateway must answer: each case's code with the
// status proto/refusals.toml gives it.
func Expected() []Result {
	var out []Result
	for _, c := range cases {
		out = append(out, Result{Case: c.name, Code: string(c.want), Status: c.want.GRPC().String()})
	}
	return out
}

// Lines joins results as "<case> <code> <grpc-status>" lines.
func Lines(results []Result) string {
	var b strings.Builder
	for _, r := range results {
		b.WriteString(r.Line() + "\n")
	}
	return b.String()
}

// Run runs every case against t, each with its own connection and a 30 s
// deadline.
func Run(ctx context.Context, t *Target) ([]Result, error) {
	enc, err := x509.ParsePKIXPublicKey(t.JoinEncryptionKey)
	if err != nil {
		return nil, fmt.Errorf("the join-encryption key: %w", err)
	}
	joinKey, ok := enc.(*ecdsa.PublicKey)
	if !ok {
		return nil, errors.New("the join-encryption key is not ECDSA")
	}
	var out []Result
	for _, c := range cases {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.run(cctx, &env{t: t, joinKey: joinKey})
		cancel()
		out = append(out, answer(c.name, err))
	}
	return out, nil
}

// answer reads a case's outcome: the status's code and the message's code.
func answer(name string, err error) Result {
	if err == nil {
		return Result{Case: name, Status: "OK"}
	}
	st, ok := status.FromError(err)
	if !ok {
		return Result{Case: name, Status: "not-a-status(" + strings.ReplaceAll(err.Error(), " ", "_") + ")"}
	}
	code, _, _ := strings.Cut(st.Message(), ":")
	if strings.ContainsAny(code, " \t") || code == "" {
		code = ""
	}
	if _, known := refusal.Lookup(refusal.Code(code)); !known && code != "" {
		code = "unlisted(" + code + ")"
	}
	return Result{Case: name, Code: code, Status: st.Code().String()}
}

// env is what a case runs with.
type env struct {
	t       *Target
	joinKey *ecdsa.PublicKey
}

// dial connects to the gateway, presenting node's certificate (nil: none).
func (e *env) dial(node *Node) (*grpc.ClientConn, error) {
	target, err := identity.Target(e.t.GatewayURL)
	if err != nil {
		return nil, err
	}
	var cert func() (*tls.Certificate, error)
	if node != nil {
		key, err := x509.ParsePKCS8PrivateKey(node.Key)
		if err != nil {
			return nil, fmt.Errorf("the key of %s: %w", node.NodeID, err)
		}
		c := &tls.Certificate{Certificate: node.Chain, PrivateKey: key.(crypto.Signer)}
		cert = func() (*tls.Certificate, error) { return c, nil }
	}
	creds := credentials.NewTLS(identity.ClientTLS(e.t.ServingCAPin, e.t.ServerName, cert))
	return grpc.NewClient(target, grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
}
