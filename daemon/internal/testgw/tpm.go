// The test gateway's TPM attestor and Renew (docs/protocol.md, "TPM join
// (two rounds)" and "Renewal"): round 1 verified by the Go attestor and
// answered with a MakeCredential made in software (go-tpm's
// CreateCredential) and a random nonce; round 2 verified under the nodeKey
// policy, the node bound to SHA-256(EK public) so that a rejoin with the
// same EK is the same node, its certificate naming the AK. Renew issues a
// new certificate for the caller's node; a TPM node's next key must be
// certified by the AK of its latest join over SHA-256(csr_der).

package testgw

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"bcd/internal/pki"
	"bcd/internal/proto/agentv1"
	"bcd/internal/refusal"
	"bcd/internal/tpm/attestor"
	"github.com/google/go-tpm/tpm2"
)

// TPMOptions make the JoinService a TPM attestor.
type TPMOptions struct {
	// Roots are the EK roots (DER).
	Roots [][]byte
	// NodeKey is the nodeKey policy (default tpm).
	NodeKey attestor.NodeKeyPolicy
}

// tpmState is what the attestor keeps: open challenges, and EK bindings.
type tpmState struct {
	sessions map[string]*tpmSession
	// bound maps hex SHA-256(EK public) to its node; byNode the other way.
	bound  map[string]*TPMBinding
	byNode map[string]*TPMBinding
}

type tpmSession struct {
	enrollment *attestor.Enrollment
	akPublic   []byte
	secret     []byte
	nonce      []byte
}

// TPMBinding is a node bound to its TPM's EK.
type TPMBinding struct {
	// NodeID is the bound node.
	NodeID string
	// EKSHA256 is the hex SHA-256 of the EK's TPMT_PUBLIC.
	EKSHA256 string
	// AKPublic and AKName are the AK of the latest join.
	AKPublic, AKName []byte
	// NodeKey is what the latest join proved (tpm, certified or any).
	NodeKey attestor.NodeKeyPolicy
	// Joins counts the joins with this EK.
	Joins int
}

// TPMBinding returns the binding of node nodeID, if it joined with a TPM.
func (g *Gateway) TPMBinding(nodeID string) (TPMBinding, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, ok := g.tpm.byNode[nodeID]
	if !ok {
		return TPMBinding{}, false
	}
	return *b, true
}

// Renewals counts the certificates Renew issued.
func (g *Gateway) Renewals() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.renewals
}

func (g *Gateway) tpmRound1(r *agentv1.TpmRound1) (*agentv1.JoinReply, error) {
	opts := g.opts.TPM
	if opts == nil {
		return nil, noAttestor()
	}
	a := &attestor.Attestor{Roots: opts.Roots, NodeKey: cmpPolicy(opts.NodeKey)}
	e, err := a.VerifyRound1(&attestor.Round1{EKPublic: r.GetEkPublic(), EKCertificate: r.GetEkCertificate(), AKPublic: r.GetAkPublic()}, time.Now())
	if err != nil {
		return nil, refusal.StatusOf(err)
	}
	ek, err := tpm2.ImportEncapsulationKey(e.EK)
	if err != nil {
		return nil, refusal.Status(refusal.CodeInternal, "%v", err)
	}
	secret, nonce, id := random(32), random(32), hex.EncodeToString(random(16))
	blob, encrypted, err := tpm2.CreateCredential(rand.Reader, ek, e.AKName, secret)
	if err != nil {
		return nil, refusal.Status(refusal.CodeInternal, "%v", err)
	}
	g.mu.Lock()
	if g.tpm.sessions == nil {
		g.tpm.sessions = map[string]*tpmSession{}
	}
	g.tpm.sessions[id] = &tpmSession{enrollment: e, akPublic: r.GetAkPublic(), secret: secret, nonce: nonce}
	g.mu.Unlock()
	return &agentv1.JoinReply{Reply: &agentv1.JoinReply_Challenge{Challenge: &agentv1.TpmChallenge{
		SessionId: id, CredentialBlob: blob, EncryptedSecret: encrypted, Nonce: nonce,
	}}}, nil
}

// noAttestor refuses a TPM round of a gateway without Options.TPM.
func noAttestor() error {
	return refusal.Status(refusal.CodeMethodUnsupported, "this JoinService has no TPM attestor")
}

func (g *Gateway) tpmRound2(r *agentv1.TpmRound2) (*agentv1.JoinReply, error) {
	if g.opts.TPM == nil {
		return nil, noAttestor()
	}
	g.mu.Lock()
	s, ok := g.tpm.sessions[r.GetSessionId()]
	delete(g.tpm.sessions, r.GetSessionId())
	g.mu.Unlock()
	if !ok {
		return nil, refusal.Status(refusal.CodeTPMSessionUnknown, "no TPM join session %q", r.GetSessionId())
	}
	policy := cmpPolicy(g.opts.TPM.NodeKey)
	a := &attestor.Attestor{Roots: g.opts.TPM.Roots, NodeKey: policy}
	answer := &attestor.Answer{
		ActivatedSecret: r.GetActivatedSecret(),
		Quote:           attestor.Signed{Attest: r.GetQuote().GetAttest(), Signature: r.GetQuote().GetSignature()},
		PCRValues:       r.GetQuote().GetPcrValues(),
		CSR:             r.GetCsrDer(),
	}
	if k := r.GetNodeKey(); k != nil {
		answer.NodeKey = certifiedKey(k)
	}
	att, err := a.VerifyAnswer(s.enrollment, s.secret, s.nonce, answer)
	if err != nil {
		return nil, refusal.StatusOf(err)
	}
	level := attestor.PolicyAny
	switch {
	case att.CSRKeyInTPM:
		level = attestor.PolicyTPM
	case answer.NodeKey != nil:
		level = attestor.PolicyCertified
	}
	csr, err := pki.ParseCSR(r.GetCsrDer())
	if err != nil {
		return nil, refusal.StatusOf(err)
	}
	ekHex := hex.EncodeToString(att.EKBinding[:])
	g.mu.Lock()
	if g.tpm.bound == nil {
		g.tpm.bound, g.tpm.byNode = map[string]*TPMBinding{}, map[string]*TPMBinding{}
	}
	b, rejoin := g.tpm.bound[ekHex]
	if !rejoin {
		g.nodes++
		b = &TPMBinding{NodeID: fmt.Sprintf("node_%d", g.nodes), EKSHA256: ekHex}
		g.tpm.bound[ekHex], g.tpm.byNode[b.NodeID] = b, b
	}
	b.AKPublic, b.AKName, b.NodeKey = s.akPublic, att.AKName, level
	b.Joins++
	nodeID, akName := b.NodeID, b.AKName
	g.mu.Unlock()
	env, err := g.respond(nodeID, csr, akName)
	if err != nil {
		return nil, err
	}
	return &agentv1.JoinReply{Reply: &agentv1.JoinReply_Response{Response: env}}, nil
}

// Renew issues a new certificate for the caller's node from a CSR.
func (g *Gateway) Renew(ctx context.Context, req *agentv1.RenewRequest) (*agentv1.RenewReply, error) {
	nodeID, _, err := g.authenticate(ctx)
	if err != nil {
		return nil, err
	}
	csr, err := pki.ParseCSR(req.GetCsrDer())
	if err != nil {
		return nil, refusal.StatusOf(err)
	}
	binding, bound := g.TPMBinding(nodeID)
	var akName []byte
	if bound {
		var certified *ecdsa.PublicKey
		switch {
		case req.GetNodeKey() != nil:
			nonce := sha256.Sum256(req.GetCsrDer())
			if certified, err = attestor.VerifyKeyCertification(binding.AKPublic, nonce[:], certifiedKey(req.GetNodeKey())); err != nil {
				return nil, refusal.StatusOf(err)
			}
		case binding.NodeKey != attestor.PolicyAny:
			return nil, refusal.Status(attestor.CodeNodeKeyUncertified, "the next key is not certified by the AK")
		}
		if binding.NodeKey == attestor.PolicyTPM && (certified == nil || !certified.Equal(csr.PublicKey)) {
			return nil, refusal.Status(attestor.CodeNodeKeyNotCSR, "the CSR's key is not the certified TPM key")
		}
		akName = binding.AKName
	}
	env, err := g.respond(nodeID, csr, akName)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.renewals++
	g.mu.Unlock()
	return &agentv1.RenewReply{Response: env}, nil
}

func certifiedKey(k *agentv1.TpmCertification) *attestor.CertifiedKey {
	return &attestor.CertifiedKey{Public: k.GetPublic(), Certify: attestor.Signed{Attest: k.GetAttest(), Signature: k.GetSignature()}}
}

func cmpPolicy(p attestor.NodeKeyPolicy) attestor.NodeKeyPolicy {
	if p == "" {
		return attestor.PolicyTPM
	}
	return p
}

func random(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}
