// Tests of the Go attestor against the shared corpus (testdata/tpm/cases.json),
// the committed EK chain, and the Rust code list.

package attestor

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"bcd/internal/testrepo"
)

func TestCases(t *testing.T) {
	positive, negative, err := RunCases(testrepo.Read(t, "tpm", "cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	if positive < 7 || negative < 45 {
		t.Fatalf("%d positive and %d negative cases", positive, negative)
	}
	t.Logf("%d positive, %d negative cases agree with Rust", positive, negative)
}

func TestEKCertificate(t *testing.T) {
	cert, root := testrepo.Read(t, "tpm", "ek-cert.der"), testrepo.Read(t, "tpm", "ek-root.der")
	if err := VerifyEKCertificate(cert, [][]byte{root}, AsOf); err != nil {
		t.Fatalf("the committed EK certificate does not chain to the EK root: %v", err)
	}
	var doc struct {
		Roots map[string][]byte `json:"roots"`
	}
	if err := json.Unmarshal(testrepo.Read(t, "tpm", "cases.json"), &doc); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"another root":     VerifyEKCertificate(cert, [][]byte{doc.Roots["foreign-ek-root"]}, AsOf),
		"no root":          VerifyEKCertificate(cert, nil, AsOf),
		"after its expiry": VerifyEKCertificate(cert, [][]byte{root}, AsOf.Add(30*365*24*time.Hour)),
		"before it starts": VerifyEKCertificate(cert, [][]byte{root}, AsOf.Add(-48*time.Hour)),
		"garbage":          VerifyEKCertificate([]byte("garbage"), [][]byte{root}, AsOf),
	} {
		if !errors.Is(err, CodeEKCertificateChain) {
			t.Errorf("%s: %v, want %s", name, err, CodeEKCertificateChain)
		}
	}
	var r1 struct {
		EKPublic []byte `json:"ekPublic"`
		AKPublic []byte `json:"akPublic"`
	}
	if err := json.Unmarshal(testrepo.Read(t, "tpm", "round1.json"), &r1); err != nil {
		t.Fatal(err)
	}
	e, err := (&Attestor{Roots: [][]byte{root}, NodeKey: PolicyTPM}).VerifyRound1(
		&Round1{EKPublic: r1.EKPublic, EKCertificate: cert, AKPublic: r1.AKPublic}, AsOf)
	if err != nil {
		t.Fatalf("round1.json: %v", err)
	}
	if len(e.AKName) != 34 {
		t.Fatalf("AK name of %d bytes", len(e.AKName))
	}
}
