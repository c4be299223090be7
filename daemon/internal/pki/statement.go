// Node-signed statements (docs/formats.md, "Node-signed statements"): command results, AllocationBound
// reports and SecretRequests, signed by the node's P-256 key through a
// crypto.Signer (in memory today, TPM-held later; ASN.1 DER ECDSA-SHA256),
// and the sealed SecretResponse that answers a SecretRequest.

package pki

import (
	"crypto"
	"crypto/ecdsa"
	"io"

	"bcd/internal/proto/agentv1"
	"google.golang.org/protobuf/proto"
)

// The names of a statement's bodies, as the Rust side's statement::body_name.
const (
	BodyCommandResult   = "command_result"
	BodyAllocationBound = "allocation_bound"
	BodySecretRequest   = "secret_request"
	BodyNone            = "none"
)

// SignStatement signs a statement with the node key. rand goes to the
// signer (crypto/rand.Reader in production; see SignMessage).
func SignStatement(rand io.Reader, nodeKey crypto.Signer, statement *agentv1.NodeStatement) (*Envelope, error) {
	payload, err := proto.MarshalOptions{Deterministic: true}.Marshal(statement)
	if err != nil {
		return nil, err
	}
	return SignEnvelope(rand, PayloadTypeNodeStatement, payload, nodeKey)
}

// VerifyStatement verifies a statement signed by the key nodeKey of node
// nodeID: the signature (dsse-*), the payload (payload-malformed), the node
// (statement-wrong-node).
func VerifyStatement(env *Envelope, nodeKey *PublicKey, nodeID string) (*agentv1.NodeStatement, error) {
	payload, err := env.Verify(PayloadTypeNodeStatement, []*PublicKey{nodeKey}, 1)
	if err != nil {
		return nil, err
	}
	statement := &agentv1.NodeStatement{}
	if err := decodePayload(payload, statement); err != nil {
		return nil, err
	}
	if statement.GetNodeId() != nodeID {
		return nil, refuse(CodeStatementWrongNode, "statement by node %q, expected %q", statement.GetNodeId(), nodeID)
	}
	return statement, nil
}

// StatementBodyName names a statement's body: command_result,
// allocation_bound, secret_request or none.
func StatementBodyName(statement *agentv1.NodeStatement) string {
	switch statement.GetBody().(type) {
	case *agentv1.NodeStatement_CommandResult:
		return BodyCommandResult
	case *agentv1.NodeStatement_AllocationBound:
		return BodyAllocationBound
	case *agentv1.NodeStatement_SecretRequest:
		return BodySecretRequest
	}
	return BodyNone
}

func wrongBody(expected string, statement *agentv1.NodeStatement) error {
	return refuse(CodeStatementKind, "statement body %q, expected %q", StatementBodyName(statement), expected)
}

// VerifyCommandResult verifies a node-signed command result.
func VerifyCommandResult(env *Envelope, nodeKey *PublicKey, nodeID string) (*agentv1.CommandResult, error) {
	statement, err := VerifyStatement(env, nodeKey, nodeID)
	if err != nil {
		return nil, err
	}
	body, ok := statement.GetBody().(*agentv1.NodeStatement_CommandResult)
	if !ok || body.CommandResult == nil {
		return nil, wrongBody(BodyCommandResult, statement)
	}
	return body.CommandResult, nil
}

// VerifyAllocationBound verifies a node-signed AllocationBound.
func VerifyAllocationBound(env *Envelope, nodeKey *PublicKey, nodeID string) (*agentv1.AllocationBound, error) {
	statement, err := VerifyStatement(env, nodeKey, nodeID)
	if err != nil {
		return nil, err
	}
	body, ok := statement.GetBody().(*agentv1.NodeStatement_AllocationBound)
	if !ok || body.AllocationBound == nil {
		return nil, wrongBody(BodyAllocationBound, statement)
	}
	return body.AllocationBound, nil
}

// VerifySecretRequest verifies a node-signed SecretRequest and returns it
// with its ephemeral P-256 key (bad-public-key when that is not one).
func VerifySecretRequest(env *Envelope, nodeKey *PublicKey, nodeID string) (*agentv1.SecretRequest, *ecdsa.PublicKey, error) {
	statement, err := VerifyStatement(env, nodeKey, nodeID)
	if err != nil {
		return nil, nil, err
	}
	body, ok := statement.GetBody().(*agentv1.NodeStatement_SecretRequest)
	if !ok || body.SecretRequest == nil {
		return nil, nil, wrongBody(BodySecretRequest, statement)
	}
	key, err := ParsePublicKey(body.SecretRequest.GetEphemeralSpkiDer())
	if err != nil {
		return nil, nil, err
	}
	ephemeral, ok := key.ECDSA()
	if !ok {
		return nil, nil, refuse(CodeBadPublicKey, "the ephemeral key is not P-256")
	}
	return body.SecretRequest, ephemeral, nil
}

// SealSecretResponse seals a secret to the ephemeral key of a verified
// SecretRequest (kid its pin).
func SealSecretResponse(ephemeral *ecdsa.PublicKey, secret []byte) (string, error) {
	return SealJWE(ephemeral, secret)
}

// OpenSecretResponse opens a SecretResponse with the ephemeral private key
// bcd put in its SecretRequest.
func OpenSecretResponse(ephemeral *ecdsa.PrivateKey, sealed string) ([]byte, error) {
	return OpenJWE(ephemeral, sealed)
}
