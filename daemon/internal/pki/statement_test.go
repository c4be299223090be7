// Tests of node statements signed through a crypto.Signer, as a TPM-held
// node key will sign them.

package pki

import (
	"crypto/rand"
	"errors"
	"testing"

	"bcd/internal/proto/agentv1"
)

func TestStatementsSignedByAnOpaqueSignerVerify(t *testing.T) {
	signer := opaqueSigner{DeriveP256("s", "node/0")}
	nodeKey, _ := PublicKeyOf(signer)
	ephemeral := DeriveP256("s", "secret-request/0")
	eph, _ := PublicKeyOf(ephemeral)
	statement := &agentv1.NodeStatement{NodeId: "n", BootId: "b", AtMs: 1, Body: &agentv1.NodeStatement_SecretRequest{
		SecretRequest: &agentv1.SecretRequest{RequestId: "r", EphemeralSpkiDer: eph.SPKI()},
	}}
	env, err := SignStatement(rand.Reader, signer, statement)
	if err != nil {
		t.Fatal(err)
	}
	req, key, err := VerifySecretRequest(env, nodeKey, "n")
	if err != nil || req.GetRequestId() != "r" || !key.Equal(&ephemeral.PublicKey) {
		t.Fatalf("verify: %v", err)
	}
	sealed, err := SealSecretResponse(key, []byte("s3cr3t"))
	if err != nil {
		t.Fatal(err)
	}
	if secret, err := OpenSecretResponse(ephemeral, sealed); err != nil || string(secret) != "s3cr3t" {
		t.Fatalf("open: %v", err)
	}
	if _, err := VerifyCommandResult(env, nodeKey, "n"); !errors.Is(err, CodeStatementKind) {
		t.Fatalf("as a command result: %v", err)
	}
	if _, err := VerifyStatement(env, nodeKey, "m"); !errors.Is(err, CodeStatementWrongNode) {
		t.Fatalf("for another node: %v", err)
	}
	statement.GetSecretRequest().EphemeralSpkiDer = nodeKey.SPKI()[:10]
	env, _ = SignStatement(rand.Reader, signer, statement)
	if _, _, err := VerifySecretRequest(env, nodeKey, "n"); !errors.Is(err, CodeBadPublicKey) {
		t.Fatalf("a garbled ephemeral key: %v", err)
	}
}
