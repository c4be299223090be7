// Tests of bcd's TPM side on swtpm started on a copy of the committed state
// (testdata/tpm/tpm2-00.permall): the EK certificate and keys read back, the
// Rust-made challenge activated, a whole answer made and verified by the Go
// attestor, and the node key as a crypto.Signer. They skip without swtpm,
// and fail under CI=true.

package tpm

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/json"
	"os"
	"testing"
	"time"

	"bcd/internal/pki"
	"bcd/internal/testrepo"
	"bcd/internal/tpm/attestor"
	"bcd/internal/tpm/swtpm"
)

type committed struct {
	round1 struct {
		Round1
		AKHandle uint32 `json:"akHandle"`
	}
	challenge struct {
		AKName []byte `json:"akName"`
		Challenge
	}
	answer struct {
		ActivatedSecret []byte `json:"activatedSecret"`
		NodeKey         struct {
			Handle uint32 `json:"handle"`
			Public []byte `json:"public"`
		} `json:"nodeKey"`
	}
}

func load(t *testing.T) *committed {
	t.Helper()
	var c committed
	for name, v := range map[string]any{"round1.json": &c.round1, "challenge.json": &c.challenge, "answer.json": &c.answer} {
		if err := json.Unmarshal(testrepo.Read(t, "tpm", name), v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return &c
}

// open starts swtpm on a copy of the committed state and connects to it; the
// cleanup closes the connection and stops swtpm orderly.
func open(t *testing.T) *TPM {
	t.Helper()
	if !swtpm.Available() {
		if os.Getenv("CI") == "true" {
			t.Fatal("swtpm is not installed (CI=true)")
		}
		t.Skip("swtpm is not installed (cargo xtask prereqs)")
	}
	s, err := swtpm.StartOnCopy(testrepo.Path(t, "tpm", "tpm2-00.permall"))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := Dial(s.Addr(), 30*time.Second)
	if err != nil {
		s.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tp.Close()
		if err := s.Stop(); err != nil {
			t.Errorf("stopping swtpm: %v", err)
		}
	})
	return tp
}

func TestCommittedState(t *testing.T) {
	c := load(t)
	tp := open(t)
	cert, err := tp.EKCertificate()
	if err != nil || !bytes.Equal(cert, testrepo.Read(t, "tpm", "ek-cert.der")) || !bytes.Equal(cert, c.round1.EKCertificate) {
		t.Fatalf("the EK certificate in NV is not ek-cert.der (%v)", err)
	}
	ek, err := tp.EKPublic()
	if err != nil || !bytes.Equal(ek, c.round1.EKPublic) {
		t.Fatalf("the EK is not round1.json's (%v)", err)
	}
	ak, err := tp.PersistentPublic(AKHandle)
	if err != nil || !bytes.Equal(ak, c.round1.AKPublic) || c.round1.AKHandle != uint32(AKHandle) {
		t.Fatalf("the AK is not round1.json's (%v)", err)
	}
	key, err := tp.LoadNodeKey(NodeKeyHandle)
	if err != nil || !bytes.Equal(key.PublicArea(), c.answer.NodeKey.Public) {
		t.Fatalf("the node key is not answer.json's (%v)", err)
	}
	if err := attestor.VerifyEKCertificate(cert, [][]byte{testrepo.Read(t, "tpm", "ek-root.der")}, attestor.AsOf); err != nil {
		t.Fatal(err)
	}
}

func TestChallenge(t *testing.T) {
	c := load(t)
	tp := open(t)
	secret, err := tp.ActivateCredential(AKHandle, c.challenge.CredentialBlob, c.challenge.EncryptedSecret)
	if err != nil {
		t.Fatalf("the TPM does not activate the Rust-made credential: %v", err)
	}
	seeded := pki.OKM("bc-interop-v1", "tpm/challenge/secret")
	if !bytes.Equal(secret, seeded[:]) || !bytes.Equal(secret, c.answer.ActivatedSecret) {
		t.Fatal("the activated secret is not the seeded one")
	}
	nonce := pki.OKM("bc-interop-v1", "tpm/challenge/nonce")
	if !bytes.Equal(c.challenge.Nonce, nonce[:]) {
		t.Fatal("the challenge's nonce is not the seeded one")
	}
	// A credential bound to another name is refused by the TPM.
	blob := bytes.Clone(c.challenge.CredentialBlob)
	blob[len(blob)-1] ^= 1
	if _, err := tp.ActivateCredential(AKHandle, blob, c.challenge.EncryptedSecret); err == nil {
		t.Fatal("a tampered credential was activated")
	}
}

func TestAnswerVerifiesUnderTheTPMPolicy(t *testing.T) {
	c := load(t)
	tp := open(t)
	for _, pcr := range QuotedPCRs {
		d := sha256.Sum256([]byte("a measurement"))
		if err := tp.Extend(pcr, d[:]); err != nil {
			t.Fatal(err)
		}
	}
	ans, key, err := AnswerChallenge(tp, AKHandle, NodeKeyHandle, &c.challenge.Challenge, "bcd")
	if err != nil {
		t.Fatal(err)
	}
	a := &attestor.Attestor{Roots: [][]byte{testrepo.Read(t, "tpm", "ek-root.der")}, NodeKey: attestor.PolicyTPM}
	e, err := a.VerifyRound1(&attestor.Round1{
		EKPublic: c.round1.EKPublic, EKCertificate: c.round1.EKCertificate, AKPublic: c.round1.AKPublic,
	}, attestor.AsOf)
	if err != nil {
		t.Fatal(err)
	}
	seeded := pki.OKM("bc-interop-v1", "tpm/challenge/secret")
	r, err := a.VerifyAnswer(e, seeded[:], c.challenge.Nonce, &attestor.Answer{
		ActivatedSecret: ans.ActivatedSecret,
		Quote:           attestor.Signed(ans.Quote),
		PCRValues:       ans.PCRValues,
		NodeKey:         &attestor.CertifiedKey{Public: ans.NodeKey.Public, Certify: attestor.Signed(ans.NodeKey.Certify)},
		CSR:             ans.CSR,
	})
	if err != nil {
		t.Fatalf("the answer is refused: %v", err)
	}
	if !r.CSRKeyInTPM || !key.Public().(*ecdsa.PublicKey).Equal(r.CSR.PublicKey) {
		t.Fatal("the CSR's key is not the TPM node key")
	}
}

func TestNodeKeyIsASigner(t *testing.T) {
	tp := open(t)
	key, err := tp.LoadNodeKey(NodeKeyHandle)
	if err != nil {
		t.Fatal(err)
	}
	var signer crypto.Signer = key
	digest := sha256.Sum256([]byte("signed in the TPM"))
	sig, err := signer.Sign(nil, digest[:], crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	if !ecdsa.VerifyASN1(signer.Public().(*ecdsa.PublicKey), digest[:], sig) {
		t.Fatal("the TPM's signature does not verify")
	}
	long := sha512.Sum384([]byte("x"))
	if _, err := signer.Sign(nil, long[:], crypto.SHA384); err == nil {
		t.Fatal("a SHA-384 digest was signed")
	}
	csr, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{SignatureAlgorithm: x509.ECDSAWithSHA256}, signer)
	if err != nil {
		t.Fatal(err)
	}
	if parsed, err := x509.ParseCertificateRequest(csr); err != nil || parsed.CheckSignature() != nil {
		t.Fatalf("the CSR does not verify: %v", err)
	}
}

func TestBeginJoinMakesANewAK(t *testing.T) {
	c := load(t)
	tp := open(t)
	r, err := BeginJoin(tp, AKHandle)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(r.AKPublic, c.round1.AKPublic) || !bytes.Equal(r.EKPublic, c.round1.EKPublic) {
		t.Fatal("BeginJoin should keep the EK and replace the AK")
	}
	a := &attestor.Attestor{Roots: [][]byte{testrepo.Read(t, "tpm", "ek-root.der")}, NodeKey: attestor.PolicyTPM}
	if _, err := a.VerifyRound1(&attestor.Round1{EKPublic: r.EKPublic, EKCertificate: r.EKCertificate, AKPublic: r.AKPublic}, attestor.AsOf); err != nil {
		t.Fatalf("a new round 1 is refused: %v", err)
	}
	if ak, err := tp.PersistentPublic(AKHandle); err != nil || !bytes.Equal(ak, r.AKPublic) {
		t.Fatal("the new AK is not persistent")
	}
}
