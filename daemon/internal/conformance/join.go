// Joining a node with a token, for a caller preparing a Go gateway's Target
// (the Rust side joins its own nodes).

package conformance

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// JoinNode joins a new node to t's gateway with token and returns its
// credentials (the JoinResponse is taken as is: the cases test refusals,
// not the join).
func JoinNode(ctx context.Context, t *Target, token string) (Node, error) {
	enc, err := x509.ParsePKIXPublicKey(t.JoinEncryptionKey)
	if err != nil {
		return Node{}, err
	}
	joinKey, ok := enc.(*ecdsa.PublicKey)
	if !ok {
		return Node{}, errors.New("the join-encryption key is not ECDSA")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Node{}, err
	}
	der, err := pki.CreateCSR(rand.Reader, key, "bcd")
	if err != nil {
		return Node{}, err
	}
	parsed, err := pki.ParseCSR(der)
	if err != nil {
		return Node{}, err
	}
	sealed, err := pki.SealJoinToken(joinKey, token, parsed.Pin, time.Now().Unix())
	if err != nil {
		return Node{}, err
	}
	conn, err := (&env{t: t}).dial(nil)
	if err != nil {
		return Node{}, err
	}
	defer conn.Close()
	reply, err := agentv1.NewJoinClient(conn).Join(ctx, &agentv1.JoinRequest{
		Method: &agentv1.JoinRequest_Token{Token: &agentv1.TokenJoin{SealedToken: sealed, CsrDer: der}}})
	if err != nil {
		return Node{}, fmt.Errorf("joining: %w", err)
	}
	var response agentv1.JoinResponse
	if err := proto.Unmarshal(reply.GetResponse().GetPayload(), &response); err != nil {
		return Node{}, fmt.Errorf("the JoinResponse: %w", err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Node{}, err
	}
	return Node{NodeID: response.GetNodeId(), Chain: response.GetCertificateChain(), Key: pkcs8}, nil
}
